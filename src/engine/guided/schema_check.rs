//! A JSON schema's costs, read from the schema before llguidance compiles it: how deep its compiler recurses,
//! how many branches an `anyOf`/`oneOf` has, and how large an intersection of regexes on one string can get.
//! Each is a stage llguidance does not bound (`limits.rs`); each check is linear in the schema.
//!
//! The walk follows the subschema keywords llguidance implements and the `$ref`s it resolves (`#` and `#/...`,
//! segment by segment, as it does). A schema reached twice (a `$defs` entry used in many places) is measured
//! once; a `$ref` back into a schema being measured is recursion in the output, which costs nothing more.

use regex_syntax::ast::{self, Ast, Visitor};
use rustc_hash::FxHashMap;
use serde_json::{Map, Value};

use super::limits::GrammarLimits;

/// The keywords whose value is a schema, an array of schemas, or an object of schemas (besides the
/// combinators, which the walk treats apart).
const SCHEMA: [&str; 2] = ["additionalProperties", "additionalItems"];
const SCHEMA_OR_ARRAY: [&str; 1] = ["items"];
const SCHEMA_ARRAYS: [&str; 1] = ["prefixItems"];
const SCHEMA_MAPS: [&str; 2] = ["properties", "patternProperties"];

/// What one regex counts for in an intersection, when it is not a pattern to count: a `format` (llguidance's
/// format regexes are sequences of small classes, so their derivatives are narrow), and length bounds
/// (`(?s:.{m,n})`, whose derivative is one entry per UTF-8 lead-byte class).
const FORMAT_SIZE: u64 = 64;
const LENGTH_SIZE: u64 = 4;
/// A regex's derivative has at most one entry per byte value.
const MAX_REGEX_SIZE: u64 = 256;

/// Checks `schema` against `limits`; the error says which limit and where.
pub(super) fn check_schema(schema: &Value, limits: &GrammarLimits) -> Result<(), String> {
    let mut walk = Walk { root: schema, limits, done: FxHashMap::default(), path: 0 };
    walk.measure(schema).map(|_| ())
}

/// What a schema costs, once measured.
#[derive(Clone, Copy)]
struct Cost {
    /// Levels of subschemas below it (itself included).
    depth: usize,
    /// The largest intersection of regexes it can put on one string.
    product: u64,
}

/// A measured schema, or one whose measuring is under way (reached again: recursion).
#[derive(Clone, Copy)]
enum Seen {
    Measuring,
    Done(Cost),
}

struct Walk<'a> {
    root: &'a Value,
    limits: &'a GrammarLimits,
    /// By the schema's address in the document: each is measured once.
    done: FxHashMap<*const Value, Seen>,
    /// Levels from the root to the schema being measured.
    path: usize,
}

impl<'a> Walk<'a> {
    fn measure(&mut self, schema: &'a Value) -> Result<Cost, String> {
        let key = schema as *const Value;
        match self.done.get(&key) {
            Some(Seen::Done(cost)) => return self.reached(*cost).map(|_| *cost),
            Some(Seen::Measuring) => return Ok(Cost { depth: 0, product: 1 }),
            None => {}
        }
        let Value::Object(o) = schema else { return Ok(Cost { depth: 1, product: 1 }) };
        self.path += 1;
        // The walk's own recursion is bounded by the same limit, so a chain of 100,000 `$ref`s stops here.
        if self.path > self.limits.max_schema_depth {
            return Err(self.too_deep());
        }
        self.done.insert(key, Seen::Measuring);
        let cost = self.measure_object(o);
        self.path -= 1;
        let cost = cost?;
        self.done.insert(key, Seen::Done(cost));
        Ok(cost)
    }

    /// A schema measured earlier, reached again from deeper: its levels count from here.
    fn reached(&self, cost: Cost) -> Result<(), String> {
        match self.path + cost.depth > self.limits.max_schema_depth {
            true => Err(self.too_deep()),
            false => Ok(()),
        }
    }

    fn too_deep(&self) -> String {
        format!(
            "the schema nests subschemas (with the $refs followed) more than grammar_limits.max_schema_depth ({}) \
             deep",
            self.limits.max_schema_depth
        )
    }

    fn measure_object(&mut self, o: &'a Map<String, Value>) -> Result<Cost, String> {
        for (keyword, count) in [
            ("properties", o.get("properties").and_then(Value::as_object).map(Map::len)),
            ("prefixItems", o.get("prefixItems").and_then(Value::as_array).map(Vec::len)),
        ] {
            let count = count.unwrap_or(0);
            if count > self.limits.max_schema_properties {
                return Err(format!(
                    "{keyword} has {count} entries, more than grammar_limits.max_schema_properties ({})",
                    self.limits.max_schema_properties
                ));
            }
        }
        let mut depth = 0;
        // The regexes this schema itself puts on a string, and the largest intersection among its children.
        let mut own = regex_size(o);
        let mut children = 1;
        for key in SCHEMA.iter().chain(&SCHEMA_OR_ARRAY) {
            if let Some(v) = o.get(*key) {
                for child in schemas_in(v) {
                    let c = self.measure(child)?;
                    (depth, children) = (depth.max(c.depth), children.max(c.product));
                }
            }
        }
        for key in SCHEMA_ARRAYS {
            for child in o.get(key).and_then(Value::as_array).into_iter().flatten() {
                let c = self.measure(child)?;
                (depth, children) = (depth.max(c.depth), children.max(c.product));
            }
        }
        for key in SCHEMA_MAPS {
            for child in o.get(key).and_then(Value::as_object).into_iter().flat_map(Map::values) {
                let c = self.measure(child)?;
                (depth, children) = (depth.max(c.depth), children.max(c.product));
            }
        }
        own = own.max(children);
        // allOf and $ref intersect with this schema; anyOf and oneOf distribute over it, one branch at a time.
        for child in o.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            let c = self.measure(child)?;
            (depth, own) = (depth.max(c.depth), own.saturating_mul(c.product));
        }
        if let Some(target) = o.get("$ref").and_then(Value::as_str).and_then(|r| resolve(self.root, r)) {
            let c = self.measure(target)?;
            (depth, own) = (depth.max(c.depth), own.saturating_mul(c.product));
        }
        for keyword in ["anyOf", "oneOf"] {
            let Some(branches) = o.get(keyword).and_then(Value::as_array) else { continue };
            if branches.len() > self.limits.max_schema_alternatives {
                return Err(format!(
                    "{keyword} has {} branches, more than grammar_limits.max_schema_alternatives ({})",
                    branches.len(),
                    self.limits.max_schema_alternatives
                ));
            }
            let mut widest = 1;
            for child in branches {
                let c = self.measure(child)?;
                (depth, widest) = (depth.max(c.depth), widest.max(c.product));
            }
            own = own.saturating_mul(widest);
        }
        if own > self.limits.max_intersection_product {
            return Err(format!(
                "the schema intersects regexes on one string (allOf patterns, a pattern with a format or length \
                 bounds) whose sizes multiply to {}, more than grammar_limits.max_intersection_product ({})",
                if own == u64::MAX { "more than 2^64".into() } else { own.to_string() },
                self.limits.max_intersection_product
            ));
        }
        Ok(Cost { depth: depth + 1, product: own })
    }
}

/// The schemas of a keyword whose value is a schema or an array of them (old drafts' `items`).
fn schemas_in(v: &Value) -> impl Iterator<Item = &Value> {
    let list: &[Value] = match v {
        Value::Array(a) => a,
        one => std::slice::from_ref(one),
    };
    list.iter()
}

/// The product of the sizes of the regexes a schema itself puts on a string.
fn regex_size(o: &Map<String, Value>) -> u64 {
    let mut size = 1u64;
    if let Some(pattern) = o.get("pattern").and_then(Value::as_str) {
        size = size.saturating_mul(pattern_size(pattern));
    }
    if o.contains_key("format") {
        size = size.saturating_mul(FORMAT_SIZE);
    }
    if o.contains_key("minLength") || o.contains_key("maxLength") {
        size = size.saturating_mul(LENGTH_SIZE);
    }
    size
}

/// A regex's size in character positions (literals, classes, `.`), which bounds its derivative's entries; at
/// most 256, and 256 for one that does not parse (llguidance will say why).
fn pattern_size(pattern: &str) -> u64 {
    // Its own nesting limit keeps the parser's recursion small.
    let mut parser = ast::parse::ParserBuilder::new().nest_limit(100).build();
    let Ok(tree) = parser.parse(pattern) else { return MAX_REGEX_SIZE };
    ast::visit(&tree, Positions(0)).unwrap_or(MAX_REGEX_SIZE).min(MAX_REGEX_SIZE)
}

/// Counts the leaves of a regex that match a character.
struct Positions(u64);

impl Visitor for Positions {
    type Output = u64;
    type Err = u64;

    fn finish(self) -> Result<u64, u64> {
        Ok(self.0)
    }

    fn visit_pre(&mut self, node: &Ast) -> Result<(), u64> {
        if matches!(
            node,
            Ast::Literal(_) | Ast::Dot(_) | Ast::ClassUnicode(_) | Ast::ClassPerl(_) | Ast::ClassBracketed(_)
        ) {
            self.0 += 1;
        }
        Ok(())
    }
}

/// The schema a local `$ref` names (`#`, or `#/a/b` segment by segment, array indices as numbers), as llguidance
/// resolves them; `None` for one it cannot resolve (it says so when compiling).
fn resolve<'v>(root: &'v Value, reference: &str) -> Option<&'v Value> {
    if reference == "#" || reference == "#/" {
        return Some(root);
    }
    let mut node = root;
    for segment in reference.strip_prefix("#/")?.split('/') {
        node = match node {
            Value::Array(a) => a.get(segment.parse::<usize>().ok()?)?,
            other => other.get(segment)?,
        };
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(schema: Value) -> Result<(), String> {
        check_schema(&schema, &GrammarLimits::default())
    }

    #[test]
    fn ordinary_schemas_pass() {
        let person = json!({"type": "object", "properties": {
            "name": {"type": "string", "pattern": "^[A-Z][a-z]+$", "minLength": 2, "maxLength": 40},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            "friend": {"$ref": "#"}}});
        assert_eq!(check(person), Ok(()));
        assert_eq!(check(json!(true)), Ok(()));
        assert_eq!(check(json!({"$ref": "#/$defs/missing"})), Ok(()), "llguidance reports what it cannot resolve");
    }

    #[test]
    fn ref_chains_and_nesting_count_their_levels() {
        let chain = |n: usize| {
            let mut defs = Map::new();
            for i in 0..n {
                defs.insert(format!("d{i}"), json!({"$ref": format!("#/$defs/d{}", i + 1)}));
            }
            defs.insert(format!("d{n}"), json!({"type": "integer"}));
            json!({"$ref": "#/$defs/d0", "$defs": defs})
        };
        assert_eq!(check(chain(100)), Ok(()));
        let e = check(chain(100_000)).unwrap_err();
        assert!(e.contains("grammar_limits.max_schema_depth (128)"), "{e}");
        // A definition used twice, the second time from deeper: its levels count from there too.
        let mut defs = Map::new();
        for i in 0..100 {
            defs.insert(format!("d{i}"), json!({"type": "array", "items": {"$ref": format!("#/$defs/d{}", i + 1)}}));
        }
        defs.insert("d100".into(), json!({"type": "integer"}));
        let deep = json!({"anyOf": [{"$ref": "#/$defs/d0"}, {"items": {"items": {"items": {"$ref": "#/$defs/d0"}}}}],
            "$defs": defs});
        assert!(check(deep).is_err());
    }

    #[test]
    fn shared_definitions_are_measured_once() {
        // 2^300 paths, 300 definitions.
        let mut defs = Map::new();
        for i in 0..300 {
            let next = json!({"$ref": format!("#/$defs/l{}", (i + 1).min(60))});
            defs.insert(format!("l{i}"), json!({"type": "object", "properties": {"a": next, "b": next}}));
        }
        assert_eq!(check(json!({"$ref": "#/$defs/l0", "$defs": defs})), Ok(()));
    }

    #[test]
    fn wide_alternatives_are_refused() {
        let branches: Vec<Value> = (0..1_001).map(|i| json!({"const": i})).collect();
        let e = check(json!({"anyOf": branches})).unwrap_err();
        assert!(e.contains("anyOf has 1001 branches") && e.contains("max_schema_alternatives (1000)"), "{e}");
    }

    #[test]
    fn long_property_lists_are_refused() {
        let props: Map<String, Value> = (0..2_001).map(|i| (format!("p{i}"), json!({"type": "integer"}))).collect();
        let e = check(json!({"type": "object", "properties": props})).unwrap_err();
        assert!(e.contains("properties has 2001 entries") && e.contains("max_schema_properties (2000)"), "{e}");
        let items: Vec<Value> = (0..2_001).map(|i| json!({"const": i})).collect();
        assert!(check(json!({"prefixItems": items})).unwrap_err().contains("prefixItems has 2001"));
    }

    #[test]
    fn intersections_multiply_and_alternatives_take_the_widest() {
        let contains = |c: char| json!({"pattern": format!(".*{c}.*")});
        let all = |n: usize| json!({"type": "string", "allOf": ('a'..='z').take(n).map(contains).collect::<Vec<_>>()});
        assert_eq!(check(all(10)), Ok(()), "3^10 < 65,536");
        let e = check(all(11)).unwrap_err();
        assert!(e.contains("multiply to 177147") && e.contains("max_intersection_product (65536)"), "{e}");
        // Alternatives are intersected one at a time.
        let any = json!({"allOf": [contains('x')], "anyOf": (0..20).map(|_| all(9)).collect::<Vec<_>>()});
        assert_eq!(check(any), Ok(()));
        assert!(check(json!({"pattern": "[a-z]+@[a-z]+", "format": "email", "minLength": 3})).is_ok());
        assert_eq!(pattern_size("(a{1000}){1000}"), 1);
        assert_eq!(pattern_size("[a-z]\\d.x"), 4);
        assert_eq!(pattern_size("(unclosed"), 256);
    }
}
