//! Checks on a compiled grammar before a parser is built from it: that some finite text matches it, and that no
//! Earley row can cost more than `max_earley_row_work` or hold more than `max_items_in_row` items by itself.
//!
//! Building the parser computes its first Earley row, and llguidance cannot be interrupted there (a parser's
//! cancellation can only be enabled once it exists); within a row, each prediction is looked up among the row's
//! items one by one, so a symbol of R alternatives that each start with it costs R³ (3,000 of them: 30 s). And a
//! grammar whose start can never be completed (`start: start`, a `$ref` cycle with nothing else) would be
//! accepted and fail at the first token; here it is refused.
//!
//! Reads the reachable part of llguidance's `CGrammar`, in time linear in its size.

use llguidance::earley::{CGrammar, CSymIdx};
use rustc_hash::FxHashMap;

use super::limits::GrammarLimits;

/// Checks `grammar` against `limits`; the error says what is wrong and which limit.
pub(super) fn check_grammar(grammar: &CGrammar, limits: &GrammarLimits) -> Result<(), String> {
    let reachable = Reachable::of(grammar);
    if let Some((&sym, rules)) = reachable.rules.iter().max_by_key(|(s, r)| (r.len(), s.as_index())) {
        if rules.len() > limits.max_items_in_row {
            return Err(format!(
                "{} has {} alternatives, more than grammar_limits.max_items_in_row ({}) items an Earley row may \
                 hold: it could never be used",
                symbol_name(grammar, sym),
                rules.len(),
                limits.max_items_in_row
            ));
        }
    }
    let work = reachable.row_work(grammar);
    if work > limits.max_earley_row_work {
        return Err(format!(
            "building one Earley row could take {work} comparisons, more than grammar_limits.max_earley_row_work \
             ({}): too many alternatives begin with symbols of many alternatives (left recursion?)",
            limits.max_earley_row_work
        ));
    }
    if !reachable.completes(grammar) {
        return Err("no finite text matches the grammar: its start can never be completed (a rule or $ref that \
                    only leads back to itself?)"
            .into());
    }
    Ok(())
}

/// How a symbol is named in errors: `start`, or the name llguidance gave a rule it made.
fn symbol_name(grammar: &CGrammar, sym: CSymIdx) -> String {
    format!("the rule `{}`", grammar.sym_data(sym).name)
}

/// The nonterminals reachable from the start, each with its alternatives' right-hand sides.
struct Reachable {
    rules: FxHashMap<CSymIdx, Vec<Vec<CSymIdx>>>,
    /// In the order found, for deterministic iteration.
    order: Vec<CSymIdx>,
}

impl Reachable {
    fn of(grammar: &CGrammar) -> Self {
        let mut r = Reachable { rules: FxHashMap::default(), order: Vec::new() };
        let mut todo = vec![grammar.start()];
        while let Some(sym) = todo.pop() {
            let data = grammar.sym_data(sym);
            if data.is_terminal || r.rules.contains_key(&sym) {
                continue;
            }
            let rules: Vec<Vec<CSymIdx>> = data.rules.iter().map(|&rule| grammar.rule_rhs(rule).0.to_vec()).collect();
            todo.extend(rules.iter().flatten().copied());
            r.rules.insert(sym, rules);
            r.order.push(sym);
        }
        r
    }

    /// Alternatives predicted when `sym` is (0 for a terminal).
    fn alternatives(&self, sym: CSymIdx) -> u64 {
        self.rules.get(&sym).map_or(0, |r| r.len() as u64)
    }

    /// An upper bound on the comparisons of building one row: every rule, once predicted, predicts the
    /// alternatives of the symbols it can start with (its first, and those after a prefix that can be empty);
    /// each prediction is looked up among the row's items, at most one per rule. Saturating.
    fn row_work(&self, grammar: &CGrammar) -> u64 {
        let mut predictions = 0u64;
        let mut rule_count = 0u64;
        for sym in &self.order {
            for rhs in &self.rules[sym] {
                rule_count += 1;
                for &s in rhs {
                    predictions = predictions.saturating_add(self.alternatives(s));
                    if !grammar.sym_data(s).is_nullable {
                        break;
                    }
                }
            }
        }
        predictions.saturating_mul(rule_count)
    }

    /// Whether some finite text matches the start: the least fixpoint of "a terminal, a symbol that can be empty,
    /// or a nonterminal with an alternative whose symbols all complete", found with a count per alternative of
    /// its symbols not yet known to complete. A parametric grammar's conditions are taken as satisfiable.
    fn completes(&self, grammar: &CGrammar) -> bool {
        let completes_alone = |s: CSymIdx| {
            let data = grammar.sym_data(s);
            data.is_terminal || data.is_nullable
        };
        // Per alternative (numbered in order): its owner and how many of its symbols are not known to complete;
        // per symbol, the alternatives it occurs in.
        let mut owner = Vec::new();
        let mut missing = Vec::new();
        let mut occurs: FxHashMap<CSymIdx, Vec<usize>> = FxHashMap::default();
        let mut known: Vec<CSymIdx> = Vec::new();
        let mut done: FxHashMap<CSymIdx, ()> = FxHashMap::default();
        for &sym in &self.order {
            if completes_alone(sym) && done.insert(sym, ()).is_none() {
                known.push(sym);
            }
            for rhs in &self.rules[&sym] {
                let id = owner.len();
                owner.push(sym);
                let pending: Vec<CSymIdx> = rhs.iter().copied().filter(|&s| !completes_alone(s)).collect();
                missing.push(pending.len());
                for s in pending {
                    occurs.entry(s).or_default().push(id);
                }
                if missing[id] == 0 && done.insert(sym, ()).is_none() {
                    known.push(sym);
                }
            }
        }
        while let Some(sym) = known.pop() {
            for &id in occurs.get(&sym).map(Vec::as_slice).unwrap_or_default() {
                missing[id] -= 1;
                if missing[id] == 0 && done.insert(owner[id], ()).is_none() {
                    known.push(owner[id]);
                }
            }
        }
        completes_alone(grammar.start()) || done.contains_key(&grammar.start())
    }
}

#[cfg(test)]
mod tests {
    use llguidance::api::{GrammarInit, TopLevelGrammar};

    use super::*;

    fn check(lark: &str, limits: &GrammarLimits) -> Result<(), String> {
        let parser_limits = limits.parser_limits();
        let init = GrammarInit::Serialized(TopLevelGrammar::from_lark(lark.into()));
        let (grammar, lexer) = init.to_internal(None, parser_limits.clone()).unwrap();
        check_grammar(&grammar.optimize().compile(lexer, &parser_limits).unwrap(), limits)
    }

    #[test]
    fn grammars_that_can_never_complete_are_refused() {
        let limits = GrammarLimits::default();
        for lark in ["start: start", "start: a\na: b \"x\"\nb: a \"y\"", "start: \"x\" start"] {
            let e = check(lark, &limits).unwrap_err();
            assert!(e.starts_with("no finite text matches the grammar"), "{lark}: {e}");
        }
        for lark in
            ["start: \"a\" | start \"b\"", "start: x\nx: x \"a\" | \"b\"", "start: a?\na: \"x\" a", "start: \"\""]
        {
            assert_eq!(check(lark, &limits), Ok(()), "{lark}");
        }
    }

    #[test]
    fn a_symbol_of_more_alternatives_than_a_row_holds_is_refused() {
        let limits = GrammarLimits { max_items_in_row: 20, ..Default::default() };
        let alternatives = |n: usize| (0..n).map(|i| format!("\"a{i}\" x")).collect::<Vec<_>>().join(" | ");
        assert_eq!(check(&format!("start: {}\nx: \"x\"", alternatives(20)), &limits), Ok(()));
        let e = check(&format!("start: {}\nx: \"x\"", alternatives(21)), &limits).unwrap_err();
        assert!(e.contains("has 21 alternatives") && e.contains("max_items_in_row (20)"), "{e}");
    }

    #[test]
    fn left_recursion_is_bounded_by_its_row_work() {
        // 50 alternatives that each begin with the symbol: each predicts all 50, in a row of about 50 rules.
        let left = (0..50).map(|i| format!("start \"b{i}\"")).collect::<Vec<_>>().join(" | ");
        let grammar = format!("start: {left} | \"b\"");
        assert_eq!(check(&grammar, &GrammarLimits::default()), Ok(()));
        let limits = GrammarLimits { max_earley_row_work: 100_000, ..Default::default() };
        let e = check(&grammar, &limits).unwrap_err();
        assert!(e.contains("max_earley_row_work (100000)"), "{e}");
        // The same number of alternatives beginning with terminals predicts nothing.
        let plain = (0..50).map(|i| format!("\"b{i}\" start")).collect::<Vec<_>>().join(" | ");
        assert_eq!(check(&format!("start: {plain} | \"b\""), &limits), Ok(()));
    }
}
