//! minijinja's built-in filters that can be asked for far more than their input costs, paid for before they run.
//!
//! minijinja charges fuel for what a filter returns once it exists; these return (or build on the way) a value
//! much larger than what the template paid for: `('\n' * 99999999)|lines` is a hundred million strings (2.4 GB of
//! values from a 100 MB input), `s|list` one value per character, `s|escape` up to six bytes per byte. Each is
//! re-registered under its own name (so that `map('list')`, which looks filters up by name, finds the paid one
//! too) as a wrapper that charges the render's fuel for the most the result can hold, then calls minijinja's own
//! implementation. A lazy sequence (`map`, `chain`, `reverse` of an iterator, whose length is unknown) is first
//! copied into a list item by item, each item paid for as it comes.

use minijinja::value::{ObjectRepr, Rest};
use minijinja::{filters, Environment, Error, State, Value};

use super::methods::{pay, BYTES_PER_FUEL};
use super::sandbox;

/// A list slot's cost in bytes, as minijinja charges it (`SLOT_COST`).
pub const SLOT_BYTES: usize = 32;

/// What a filter's result can cost, from its input.
#[derive(Clone, Copy)]
enum Cost {
    /// One list slot per item of the input (per byte of a string: at least one per character).
    Items,
    /// One list slot per byte, plus one: `split`, `lines`.
    Pieces,
    /// This many bytes of text per byte of the input.
    Text(usize),
}

/// Registers the paid wrappers over minijinja's built-in filters.
pub fn add_paid_filters(env: &mut Environment<'static>) {
    let wrapped: [(&str, Value, Cost); 20] = [
        ("list", Value::from_function(filters::list), Cost::Items),
        ("sort", Value::from_function(filters::sort), Cost::Items),
        ("unique", Value::from_function(filters::unique), Cost::Items),
        ("reverse", Value::from_function(filters::reverse), Cost::Items),
        ("batch", Value::from_function(filters::batch), Cost::Items),
        ("slice", Value::from_function(filters::slice), Cost::Items),
        ("map", Value::from_function(filters::map), Cost::Items),
        ("select", Value::from_function(filters::select), Cost::Items),
        ("reject", Value::from_function(filters::reject), Cost::Items),
        ("selectattr", Value::from_function(filters::selectattr), Cost::Items),
        ("rejectattr", Value::from_function(filters::rejectattr), Cost::Items),
        ("zip", Value::from_function(filters::zip), Cost::Items),
        ("split", Value::from_function(filters::split), Cost::Pieces),
        ("lines", Value::from_function(filters::lines), Cost::Pieces),
        // `&#x27;`: six bytes for one.
        ("escape", Value::from_function(filters::escape), Cost::Text(6)),
        ("e", Value::from_function(filters::escape), Cost::Text(6)),
        // Case mapping can triple a character's bytes (`ΐ`, two bytes, upper-cases to three characters, six).
        ("upper", Value::from_function(filters::upper), Cost::Text(3)),
        ("lower", Value::from_function(filters::lower), Cost::Text(3)),
        ("title", Value::from_function(filters::title), Cost::Text(3)),
        ("capitalize", Value::from_function(filters::capitalize), Cost::Text(3)),
    ];
    for (name, builtin, cost) in wrapped {
        env.add_filter(name, move |state: &mut State, args: Rest<Value>| -> Result<Value, Error> {
            sandbox::check_time()?;
            let mut args = args.0;
            if let Some(input) = args.first_mut() {
                if let Some(copied) = prepay(state, input, cost)? {
                    *input = copied;
                }
            }
            builtin.call(state, &args)
        });
    }
}

/// Charges for the most a filter of `cost` can make of `input`; a lazy sequence comes back copied (and paid for).
fn prepay(state: &State, input: &Value, cost: Cost) -> Result<Option<Value>, Error> {
    if let Some(s) = input.as_str() {
        let bytes = match cost {
            Cost::Items => s.len().saturating_mul(SLOT_BYTES),
            Cost::Pieces => s.len().saturating_add(1).saturating_mul(SLOT_BYTES),
            Cost::Text(factor) => s.len().saturating_mul(factor),
        };
        return pay(state, bytes).map(|()| None);
    }
    let Some(obj) = input.as_object() else { return Ok(None) };
    if !matches!(obj.repr(), ObjectRepr::Seq | ObjectRepr::Iterable | ObjectRepr::Map) {
        return Ok(None);
    }
    if let Some(len) = obj.enumerator_len() {
        return pay(state, len.saturating_mul(SLOT_BYTES)).map(|()| None);
    }
    copy_paying(state, input).map(Some)
}

/// A lazy sequence as a list, each item paid for as it comes (a slot each, charged per unit of fuel's worth).
pub fn copy_paying(state: &State, lazy: &Value) -> Result<Value, Error> {
    let per_unit = BYTES_PER_FUEL / SLOT_BYTES;
    let mut items = Vec::new();
    for item in lazy.try_iter()? {
        if items.len() % per_unit == 0 {
            state.consume_fuel(1)?;
        }
        items.push(item);
    }
    Ok(Value::from(items))
}
