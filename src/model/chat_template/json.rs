//! The chat templates' `tojson` filter as Hugging Face's `apply_chat_template` defines it: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, each keyword accepted.
//!
//! Templates were written against that text, and models trained on it: `", "` and `": "` between items, keys in
//! the order the request gave them (a tool reaches the model as `{"type": "function", "function": {"name"…`),
//! no HTML escaping (minijinja's own `tojson` writes `<` as `\u003c`), Python's float repr (`1e-05`, `1e+16`,
//! `100.0`), and `\uXXXX` escapes in lowercase hex. The value is converted to `serde_json::Value` first (with its
//! `preserve_order` feature, as minijinja's maps keep insertion order with theirs).

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind, State};
use serde_json::Value as Json;

/// `json.dumps`'s options.
#[derive(Clone, Debug, PartialEq)]
pub struct DumpOptions {
    /// Non-ASCII characters written as `\uXXXX` escapes (surrogate pairs above U+FFFF), and DEL too.
    pub ensure_ascii: bool,
    /// `None`: one line. Some(s): each item on its own line, indented by `s` once per level.
    pub indent: Option<String>,
    /// Between items, and between a key and its value.
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

impl Default for DumpOptions {
    /// HF's defaults: `ensure_ascii=False`, one line, `", "` and `": "`.
    fn default() -> Self {
        DumpOptions {
            ensure_ascii: false,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

/// The filter: `value|tojson(ensure_ascii=…, indent=…, separators=(…, …), sort_keys=…)`. Its text is paid for
/// from the render's fuel as it is written: a string `indent` is repeated once per level on every line.
pub fn tojson(state: &State, value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    super::sandbox::check_time()?;
    let invalid = |m: String| Error::new(ErrorKind::InvalidOperation, m);
    let mut options = DumpOptions {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        ..Default::default()
    };
    if let Some(indent) = kwargs.get::<Option<Value>>("indent")? {
        options.indent = python_indent(&indent).map_err(invalid)?;
        // Python's default item separator drops its space when lines break.
        if options.indent.is_some() {
            options.item_separator = ",".into();
        }
    }
    if let Some(separators) = kwargs.get::<Option<Value>>("separators")? {
        let pair: Vec<Value> =
            separators.try_iter().map_err(|_| invalid("tojson: separators is not a pair".into()))?.collect();
        match pair.as_slice() {
            [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                options.item_separator = item.as_str().unwrap_or_default().to_owned();
                options.key_separator = key.as_str().unwrap_or_default().to_owned();
            }
            _ => return Err(invalid("tojson: separators must be two strings".into())),
        }
    }
    options.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value).map_err(|e| invalid(format!("tojson: {e}")))?;
    let affordable = state.fuel_levels().map_or(usize::MAX, |(_, left)| {
        usize::try_from(left).unwrap_or(usize::MAX).saturating_mul(super::methods::BYTES_PER_FUEL)
    });
    let text = dumps_bounded(&json, &options, affordable)
        .map_err(|TooLong| Error::new(ErrorKind::OutOfFuel, "tojson: the text would need more fuel than is left"))?;
    super::methods::pay(state, text.len())?;
    Ok(Value::from_safe_string(text))
}

/// `indent` as Python reads it: an int is that many spaces (none below 1, but still one item per line), a string
/// is itself, `None` is one line.
fn python_indent(indent: &Value) -> Result<Option<String>, String> {
    if indent.is_none() {
        return Ok(None);
    }
    if let Some(s) = indent.as_str() {
        return Ok(Some(s.to_owned()));
    }
    match i64::try_from(indent.clone()) {
        Ok(n) => Ok(Some(" ".repeat(n.clamp(0, 64) as usize))),
        Err(_) => Err(format!("tojson: indent must be an integer or a string, not {indent}")),
    }
}

/// `json.dumps(value, …)` with `options`.
pub fn dumps(value: &Json, options: &DumpOptions) -> String {
    dumps_bounded(value, options, usize::MAX).unwrap_or_default()
}

/// The text would pass its byte limit.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

/// [`dumps`], or [`TooLong`] as soon as the text would pass `max_bytes`. What grows the text beyond the value's own
/// size is the indent (once per level on every line) and the separators (once per item), both a template's to
/// choose: each is checked before it is written.
pub fn dumps_bounded(value: &Json, options: &DumpOptions, max_bytes: usize) -> Result<String, TooLong> {
    let mut out = Writer { text: String::new(), max_bytes };
    write_value(&mut out, value, options, 0)?;
    Ok(out.text)
}

struct Writer {
    text: String,
    max_bytes: usize,
}

impl Writer {
    fn push_str(&mut self, s: &str) -> Result<(), TooLong> {
        self.reserve(s.len())?;
        self.text.push_str(s);
        Ok(())
    }

    /// A JSON string: written, then checked (its escapes make it at most six times the text, which exists).
    fn string(&mut self, s: &str, ensure_ascii: bool) -> Result<(), TooLong> {
        write_string(&mut self.text, s, ensure_ascii);
        self.reserve(0)
    }

    /// Fails when `more` bytes would pass the limit.
    fn reserve(&self, more: usize) -> Result<(), TooLong> {
        match self.text.len().checked_add(more) {
            Some(len) if len <= self.max_bytes => Ok(()),
            _ => Err(TooLong),
        }
    }
}

fn write_value(out: &mut Writer, value: &Json, options: &DumpOptions, depth: usize) -> Result<(), TooLong> {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => match n.as_f64().filter(|_| n.is_f64()) {
            Some(f) => out.push_str(&python_float_repr(f)),
            None => out.push_str(&n.to_string()),
        },
        Json::String(s) => out.string(s, options.ensure_ascii),
        Json::Array(items) => {
            write_container(out, ("[", "]"), items.iter().map(|v| (None, v)), items.is_empty(), options, depth)
        }
        Json::Object(map) => {
            let mut entries: Vec<(&String, &Json)> = map.iter().collect();
            if options.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            let empty = entries.is_empty();
            write_container(out, ("{", "}"), entries.into_iter().map(|(k, v)| (Some(k), v)), empty, options, depth)
        }
    }
}

/// An array (keys `None`) or an object, on one line or one item per line.
fn write_container<'a>(
    out: &mut Writer,
    (open, close): (&str, &str),
    items: impl Iterator<Item = (Option<&'a String>, &'a Json)>,
    empty: bool,
    options: &DumpOptions,
    depth: usize,
) -> Result<(), TooLong> {
    out.push_str(open)?;
    if empty {
        return out.push_str(close);
    }
    let newline = |out: &mut Writer, depth: usize| -> Result<(), TooLong> {
        if let Some(indent) = &options.indent {
            out.reserve(indent.len().saturating_mul(depth).saturating_add(1))?;
            out.text.push('\n');
            (0..depth).for_each(|_| out.text.push_str(indent));
        }
        Ok(())
    };
    for (i, (key, value)) in items.enumerate() {
        if i > 0 {
            out.push_str(&options.item_separator)?;
        }
        newline(out, depth + 1)?;
        if let Some(key) = key {
            out.string(key, options.ensure_ascii)?;
            out.push_str(&options.key_separator)?;
        }
        write_value(out, value, options, depth + 1)?;
    }
    newline(out, depth)?;
    out.push_str(close)
}

/// A JSON string as Python escapes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other control characters as
/// `\u00XX`; with `ensure_ascii`, everything outside space..=`~` as `\uXXXX` (UTF-16 units).
fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr` of a float: the shortest digits that read back to it, positional when the decimal exponent is in
/// −4..16 (`0.0001`, `100.0`), else `d.ddde±XX` (`1e-05`, `1e+16`).
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    // Rust's `{:e}` writes the shortest round-trip digits: "-1.5e-7", "1e16", "0e0".
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if (-4..16).contains(&exponent) {
        let body = if exponent >= 0 {
            let point = exponent as usize + 1;
            if digits.len() <= point {
                format!("{digits}{}.0", "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exponent - 1) as usize))
        };
        format!("{sign}{body}")
    } else {
        let mantissa = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expected texts are Python 3's `json.dumps` of the same values.
    #[test]
    fn dumps_writes_what_python_writes() {
        let tool = json!({"type": "function", "function": {"name": "get_weather",
            "description": "Wetter in \"Zürich\" <heute>\n", "parameters": {"type": "object", "properties":
            {"x": {"type": "number", "minimum": -0.5, "maximum": 1e16, "default": 1e-5}}, "required": ["x"]}},
            "z": [], "e": {}, "n": null, "t": true, "big": 12345678901234567890u64,
            "f": [1.0, 0.1, 1234567890123456.0, 1.5e-7, -0.0, 100.0, 6.25]});
        assert_eq!(
            dumps(&tool, &DumpOptions::default()),
            r#"{"type": "function", "function": {"name": "get_weather", "description": "Wetter in \"Zürich\" <heute>\n", "parameters": {"type": "object", "properties": {"x": {"type": "number", "minimum": -0.5, "maximum": 1e+16, "default": 1e-05}}, "required": ["x"]}}, "z": [], "e": {}, "n": null, "t": true, "big": 12345678901234567890, "f": [1.0, 0.1, 1234567890123456.0, 1.5e-07, -0.0, 100.0, 6.25]}"#
        );
        let indented = DumpOptions { indent: Some("  ".into()), item_separator: ",".into(), ..Default::default() };
        assert_eq!(
            dumps(&json!({"t": [1, {"a": []}], "e": {}}), &indented),
            "{\n  \"t\": [\n    1,\n    {\n      \"a\": []\n    }\n  ],\n  \"e\": {}\n}"
        );
        let ascii = DumpOptions { ensure_ascii: true, ..Default::default() };
        assert_eq!(dumps(&json!({"a": "é😀\u{7f}\u{1}\t"}), &ascii), r#"{"a": "\u00e9\ud83d\ude00\u007f\u0001\t"}"#);
        let compact_sorted = DumpOptions {
            item_separator: ",".into(),
            key_separator: ":".into(),
            sort_keys: true,
            ..Default::default()
        };
        assert_eq!(dumps(&json!({"b": 1, "a": [1, {}]}), &compact_sorted), r#"{"a":[1,{}],"b":1}"#);
        let zero = DumpOptions { indent: Some(String::new()), item_separator: ",".into(), ..Default::default() };
        assert_eq!(dumps(&json!([1, [2]]), &zero), "[\n1,\n[\n2\n]\n]");
    }

    #[test]
    fn floats_are_python_reprs() {
        for (f, repr) in [
            (0.0, "0.0"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (123.456, "123.456"),
            (1e15, "1000000000000000.0"),
            (9.999999999999998e15, "9999999999999998.0"),
            (1e16, "1e+16"),
            (-2.5e-300, "-2.5e-300"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (f64::INFINITY, "Infinity"),
        ] {
            assert_eq!(python_float_repr(f), repr, "{f:e}");
        }
    }
}
