//! `__ember_hold(value)`: what every value bound by a chat template passes through (`rewrite.rs` puts the calls
//! in). It makes the value plain data of bounded depth, or fails the render naming the limit:
//!
//! - **Depth.** Lists, tuples and maps nest at most `max_depth` deep. Printing, comparing, serializing and dropping
//!   a value recurse once per level, so this, with the size bound on a single expression, is what keeps a render
//!   inside its thread's stack.
//! - **Laziness.** minijinja's lazy sequences and maps (`reverse`, `map`, `chain`, `+` on lists, `*` on a list,
//!   `items()`) wrap their input instead of copying it; rewrapping a binding's value in a loop would build a chain
//!   as deep as the loop is long, hidden from any depth count. They are copied into plain lists and maps here, so
//!   a chain never outlives the expression that built it.
//! - **Namespaces** are the only mutable values: one that holds a namespace could be made to hold itself (a cycle
//!   that printing would follow forever). A namespace attribute (`{% set ns.x = ... %}`) cannot hold a namespace;
//!   other bindings may (a macro's parameter, say), and are walked through it.
//! - **Work.** Every node walked costs fuel, like minijinja's own filters: a template that rebinds a growing list in
//!   a loop pays for each copy, and one whose values share subtrees (`[v, v]`, doubling) runs out of fuel instead of
//!   walking an exponential tree.

use indexmap::IndexMap;
use minijinja::value::{ObjectRepr, Tuple, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::limits::Limit;
use super::sandbox;

/// Nodes walked per unit of fuel (minijinja charges half a unit per item a filter visits).
const NODES_PER_FUEL: usize = 2;

/// `value` as plain data of depth at most `max_depth`, or the error that ends the render. `into_namespace`: the
/// value is a namespace attribute's.
pub fn hold(state: &State, value: Value, max_depth: usize, into_namespace: bool) -> Result<Value, Error> {
    sandbox::check_time()?;
    let mut walk = Hold { state, max_depth, into_namespace, unpaid: 0 };
    let held = walk.value(&value, 0)?;
    walk.pay()?;
    Ok(held.unwrap_or(value))
}

struct Hold<'s, 'e> {
    state: &'s State<'s, 'e>,
    max_depth: usize,
    into_namespace: bool,
    /// Nodes walked and not yet charged (fuel is charged in whole units, every `PAY_EVERY` nodes).
    unpaid: usize,
}

const PAY_EVERY: usize = 256;

impl Hold<'_, '_> {
    /// Charges the nodes walked so far.
    fn pay(&mut self) -> Result<(), Error> {
        let units = self.unpaid / NODES_PER_FUEL;
        if units > 0 {
            self.unpaid -= units * NODES_PER_FUEL;
            self.state.consume_fuel(units as u64)?;
        }
        Ok(())
    }

    /// `value` at nesting `depth` (0 for the bound value itself) as plain data: `None` when it is plain already
    /// (no copy is made). Recursion is bounded by `max_depth`: a deeper value fails before it is walked further.
    fn value(&mut self, value: &Value, depth: usize) -> Result<Option<Value>, Error> {
        self.unpaid += 1;
        if self.unpaid >= PAY_EVERY {
            self.pay()?;
        }
        let Some(obj) = value.as_object() else { return Ok(None) };
        let repr = obj.repr();
        if !matches!(repr, ObjectRepr::Seq | ObjectRepr::Iterable | ObjectRepr::Map) {
            // Loops, macros, cyclers, joiners: no values of the template's making inside.
            return Ok(None);
        }
        if depth >= self.max_depth {
            return Err(sandbox::reached(Limit::Depth, format!("a value nests more than {} deep", self.max_depth)));
        }
        if repr == ObjectRepr::Map {
            return self.map(value, depth);
        }
        if let Some(items) = obj.downcast_ref::<Vec<Value>>() {
            return Ok(self.items(items, depth)?.map(Value::from));
        }
        if let Some(items) = obj.downcast_ref::<Tuple>() {
            return Ok(self.items(items, depth)?.map(|v| Value::from(Tuple::from(v))));
        }
        // A lazy sequence: copied into a list, item by item (each paid for).
        let mut items = Vec::new();
        for item in value.try_iter()? {
            let held = self.value(&item, depth + 1)?;
            items.push(held.unwrap_or(item));
        }
        Ok(Some(Value::from(items)))
    }

    /// A plain list's or tuple's items held: `None` when none changed.
    fn items(&mut self, items: &[Value], depth: usize) -> Result<Option<Vec<Value>>, Error> {
        let mut copy: Option<Vec<Value>> = None;
        for (i, item) in items.iter().enumerate() {
            if let Some(held) = self.value(item, depth + 1)? {
                copy.get_or_insert_with(|| items[..i].to_vec()).push(held);
            } else if let Some(copy) = &mut copy {
                copy.push(item.clone());
            }
        }
        Ok(copy)
    }

    fn map(&mut self, value: &Value, depth: usize) -> Result<Option<Value>, Error> {
        let obj = value.as_object().expect("a map is an object");
        if is_namespace(value) {
            if self.into_namespace {
                return Err(Error::new(ErrorKind::InvalidOperation, "a namespace attribute cannot hold a namespace"));
            }
            // Walked, not copied: its identity is what makes it a namespace.
            for (_, v) in obj.try_iter_pairs().into_iter().flatten() {
                self.value(&v, depth + 1)?;
            }
            return Ok(None);
        }
        let mut changed = obj.downcast_ref::<IndexMap<Value, Value>>().is_none();
        let mut held = IndexMap::new();
        for (k, v) in obj.try_iter_pairs().into_iter().flatten() {
            let h = self.value(&v, depth + 1)?;
            changed |= h.is_some();
            held.insert(k, h.unwrap_or(v));
        }
        Ok(changed.then(|| Value::from_object(held)))
    }
}

/// minijinja's namespace type is private; its name is how it is told apart from other maps.
fn is_namespace(value: &Value) -> bool {
    value.kind() == ValueKind::Map && value.as_object().is_some_and(|o| o.type_name().ends_with("::Namespace"))
}
