//! Python's string, list and dict methods in templates (`.strip()`, `.split()`, `.format()`, `.items()`...):
//! minijinja-contrib's `pycompat`, with what it does not pay for paid first.
//!
//! minijinja charges fuel for a method's result once it exists; a method whose result can be far larger than its
//! input must be paid for before it runs, or one call allocates what the fuel was meant to refuse:
//! `'{:>1000000000000}'.format('x')` asks for a terabyte, `('a ' * 49999999).split()` for fifty million values.

use minijinja::value::ValueKind;
use minijinja::{Error, State, Value};
use minijinja_contrib::pycompat;

use super::filters::SLOT_BYTES;
use super::sandbox;

/// Bytes one unit of fuel pays for (minijinja's `UNITS_PER_FUEL`).
pub const BYTES_PER_FUEL: usize = 64;

/// The environment's unknown-method callback: pycompat's methods, the growing ones paid for in advance.
pub fn unknown_method(state: &mut State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    sandbox::check_time()?;
    if let (ValueKind::String, Some(s)) = (value.kind(), value.as_str()) {
        let bytes = match method {
            "format" => format_width(s),
            // At most one item per byte, plus one; each a list slot.
            "split" | "splitlines" => s.len().saturating_add(1).saturating_mul(SLOT_BYTES),
            // Case mapping can triple a character's bytes; the others copy at most the text.
            "upper" | "lower" | "title" | "capitalize" => s.len().saturating_mul(3),
            "strip" | "lstrip" | "rstrip" => s.len(),
            _ => 0,
        };
        pay(state, bytes)?;
    }
    pycompat::unknown_method_callback(state, value, method, args)
}

/// Charges `bytes` of data to the render's fuel before it is created.
pub fn pay(state: &State, bytes: usize) -> Result<(), Error> {
    match bytes / BYTES_PER_FUEL {
        0 => Ok(()),
        units => state.consume_fuel(units as u64),
    }
}

/// The padding and precision a `str.format` string asks for, in bytes: every number in every replacement
/// field's spec (`{:>80}`, `{:.3f}`, `{0:08,}`), summed. An over-estimate (a number can be an index), which only
/// matters for formats that ask for much.
fn format_width(format: &str) -> usize {
    let mut total = 0usize;
    let mut rest = format;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(escaped) = rest.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        let field = &rest[..rest.find('}').unwrap_or(rest.len())];
        if let Some((_, spec)) = field.split_once(':') {
            for number in spec.split(|c: char| !c.is_ascii_digit()).filter(|n| !n.is_empty()) {
                // Saturating: a thousand digits is "too much", not a parse error.
                let n = number.bytes().fold(0usize, |n, d| n.saturating_mul(10).saturating_add((d - b'0') as usize));
                total = total.saturating_add(n);
            }
        }
        rest = &rest[field.len()..];
    }
    total
}

#[cfg(test)]
mod tests {
    use super::format_width;

    #[test]
    fn format_widths_are_summed_from_every_spec() {
        assert_eq!(format_width("{} and {name}"), 0);
        assert_eq!(format_width("{:>80}|{0:.3f}|{{:999}}"), 83);
        assert_eq!(format_width("{:>1000000000000}"), 1_000_000_000_000);
        assert_eq!(format_width(&format!("{{:{}}}", "9".repeat(40))), usize::MAX);
        assert_eq!(format_width("{:5"), 5, "an unclosed field still counts");
    }
}
