//! `pprint` and `debug()`: minijinja's pretty-printed text of a value (or of the render's state), paid for as it is
//! written.
//!
//! Pretty-printing puts each item on its own line, indented by its depth, so the text can be far larger than the
//! nodes the template paid for: 10,000 copies of a list 250 deep (2.5 million nodes, within the fuel) print as
//! 2.5 GB. And the writing costs more than the bytes: each level's indenting adapter passes every piece through to
//! the next, so a piece at depth d takes d calls (the 2.5 GB would take minutes; minijinja's own `pprint` and
//! `debug` ran past the attack suite's 120 s and cannot be interrupted). Here the same text goes through a writer
//! that charges the render's fuel before keeping it, each byte weighted by its line's depth, and checks the clock:
//! the fuel ends such a print within a few hundred milliseconds.

use std::fmt::{self, Debug, Write};

use minijinja::value::Rest;
use minijinja::{Environment, Error, State, Value};

use super::methods::{pay, BYTES_PER_FUEL};
use super::sandbox;

/// Weighted bytes written between charges: a print overshoots its fuel by at most this many bytes of text.
const PAY_EVERY: usize = 64 * 1024;

/// Registers `pprint` and `debug` in place of minijinja's own.
pub fn add_paid_pretty(env: &mut Environment<'static>) {
    env.add_filter("pprint", |state: &State, value: Value| pretty(state, &value));
    env.add_function("debug", |state: &State, args: Rest<Value>| match &args.0[..] {
        [] => pretty(state, state),
        [value] => pretty(state, value),
        values => pretty(state, &values),
    });
}

/// `{:#?}` of `value` (minijinja's `pprint` and `debug` text), or the limit the render reached while writing it.
fn pretty(state: &State, value: &dyn Debug) -> Result<String, Error> {
    sandbox::check_time()?;
    let mut out = PaidText { state, text: String::new(), unpaid: 0, indent: 0, in_indent: true, stopped: None };
    let written = write!(out, "{value:#?}");
    if let Some(e) = out.stopped {
        return Err(e);
    }
    written.map_err(|_| Error::new(minijinja::ErrorKind::InvalidOperation, "pretty-printing failed"))?;
    out.settle()?;
    Ok(out.text)
}

/// Text written on the render's budget.
struct PaidText<'a, 's, 'e> {
    state: &'a State<'s, 'e>,
    text: String,
    /// Weighted bytes kept and not yet charged.
    unpaid: usize,
    /// The current line's leading spaces so far (four per level), and whether the line is still in them.
    indent: usize,
    in_indent: bool,
    /// The limit that stopped the writing.
    stopped: Option<Error>,
}

impl PaidText<'_, '_, '_> {
    /// Charges the whole units of fuel the unpaid bytes make, and checks the clock.
    fn settle(&mut self) -> Result<(), Error> {
        let paid = self.unpaid - self.unpaid % BYTES_PER_FUEL;
        pay(self.state, paid)?;
        self.unpaid -= paid;
        sandbox::check_time()
    }
}

impl Write for PaidText<'_, '_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // A piece at depth d passed through d indenting adapters.
        let depth = self.indent / 4;
        self.unpaid = self.unpaid.saturating_add(s.len().saturating_mul(depth + 1));
        for b in s.bytes() {
            match b {
                b'\n' => (self.indent, self.in_indent) = (0, true),
                b' ' if self.in_indent => self.indent += 1,
                _ => self.in_indent = false,
            }
        }
        // Paid for before it is kept: a single piece can be large (a long string's text).
        if self.unpaid >= PAY_EVERY {
            if let Err(e) = self.settle() {
                self.stopped = Some(e);
                return Err(fmt::Error);
            }
        }
        self.text.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(source: &str, fuel: u64) -> Result<String, Error> {
        let mut env = Environment::new();
        env.set_fuel(Some(fuel));
        add_paid_pretty(&mut env);
        env.render_str(source, minijinja::context! {})
    }

    #[test]
    fn the_text_is_minijinjas() {
        let source = "{{ [1, {'a': [2, 'x']}]|pprint }}|{{ debug([1], 2) }}";
        let mut builtin = Environment::new();
        builtin.set_fuel(Some(1_000_000));
        assert_eq!(render(source, 1_000_000).unwrap(), builtin.render_str(source, minijinja::context! {}).unwrap());
    }

    #[test]
    fn a_print_larger_than_the_fuel_runs_out_of_it() {
        // 100 copies of a list 100 deep: about 4 MB of text, most of it deep: some 4 million units.
        let source = "{% set ns = namespace(v=[1]) %}{% for i in range(99) %}{% set ns.v = [ns.v] %}{% endfor %}\
                      {{ ([ns.v] * 100)|pprint|length }}";
        let e = render(source, 1_000_000).unwrap_err();
        assert_eq!(e.kind(), minijinja::ErrorKind::OutOfFuel, "{e}");
        assert!(render(source, 10_000_000).is_ok());
    }
}
