//! Before a chat template is compiled, its syntax tree is read once to bound what one expression can build, and its
//! source is rewritten so that every value that outlives its expression passes through [`HOLD_FUNCTION`].
//!
//! Why: minijinja's values are reference-counted trees, and printing, comparing, serializing or dropping one walks
//! it recursively. A template that nests a list into itself in a loop (`{% set ns.v = [ns.v] %}`) builds a tree
//! deeper than any thread's stack within its fuel, and the next `{{ ns.v }}`, `==` or the drop at the end of the
//! render overflows the stack: a crash of the host. Depth can only accumulate through a value that outlives the
//! expression that built it, that is through a binding: `{% set %}` (of a name or a namespace attribute), a `for`
//! loop's iterable, a `with` block's values, and the arguments of a call (a macro's parameters, a recursive loop's
//! `loop(...)`). Wrapping each of those in the hold function caps their depth (`hold.rs`); what one
//! expression adds on top is capped by its size, checked here: a node adds at most a couple of levels to its
//! operands, and a filter's or call's arguments (`map('map', 'map', ..., 'batch', 1)`) count as nodes.
//!
//! Where to put the calls comes from the token stream, not from the tree's spans: a node's span ends at its last
//! token but does not always start at its first (a comparison's starts at the token before it, and a parenthesised
//! operand's closing parenthesis lies outside it). So the tree says which expressions are bound, and the tokens
//! say where each begins and ends: between the delimiters around it (`=` and the block's end, `in` and `if`,
//! `(` and `,`), at bracket depth 0. Each text so found must parse as one expression, and the rewritten template
//! parse again; the calls add no line break, so error locations keep their line numbers.

use minijinja::machinery::ast::{CallArg, Expr, Stmt};
use minijinja::machinery::{parse, parse_expr, tokenize, Span, Token};
use minijinja::syntax::SyntaxConfig;

/// The function every binding's value is passed through (`hold.rs`).
pub const HOLD_FUNCTION: &str = "__ember_hold";
/// The same for a namespace attribute's value, which may not hold a namespace.
pub const HOLD_ATTR_FUNCTION: &str = "__ember_hold_attr";

/// Why a template cannot be rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RewriteError {
    /// The template does not parse (minijinja's message).
    Syntax(String),
    /// An expression with more nodes than allowed, at this line.
    ExpressionTooLarge { line: u16, nodes: usize, limit: usize },
}

/// `source` with every binding's value wrapped in [`HOLD_FUNCTION`] (or [`HOLD_ATTR_FUNCTION`]), after checking
/// that no expression has more than `max_expression_nodes` nodes.
pub fn rewrite(source: &str, syntax: SyntaxConfig, max_expression_nodes: usize) -> Result<String, RewriteError> {
    let ast = parse(source, "chat", syntax.clone()).map_err(|e| RewriteError::Syntax(e.to_string()))?;
    let tokens = tokenize(source, false, syntax.clone())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RewriteError::Syntax(e.to_string()))?;
    let mut walk = Walk { tokens, holds: Vec::new(), max_nodes: max_expression_nodes };
    walk.stmt(&ast)?;
    // Each call must wrap a whole expression: the text it wraps parses as one (in parentheses, as a tuple's
    // items without them do).
    for hold in &walk.holds {
        if parse_expr(&format!("({})", &source[hold.start..hold.end])).is_err() {
            let line = source[..hold.start].matches('\n').count() + 1;
            return Err(RewriteError::Syntax(format!(
                "ember could not place its value check at line {line} of this template; please report it"
            )));
        }
    }
    let rewritten = insert_holds(source, walk.holds);
    // Each call nests its expression two levels deeper, which can take a template already near the parser's
    // nesting limit past it.
    if let Err(e) = parse(&rewritten, "chat", syntax) {
        return Err(RewriteError::Syntax(format!("the template nests too deeply for ember's value checks: {e}")));
    }
    Ok(rewritten)
}

/// Where a hold call goes: around `source[start..end]`.
struct Hold {
    start: usize,
    end: usize,
    function: &'static str,
}

struct Walk<'s> {
    tokens: Vec<(Token<'s>, Span)>,
    holds: Vec<Hold>,
    max_nodes: usize,
}

/// A syntax error for a template the parser accepted but whose tokens do not line up with its tree.
fn misplaced(what: &str) -> RewriteError {
    RewriteError::Syntax(format!("ember could not find {what} in this template's tokens; please report it"))
}

impl<'s> Walk<'s> {
    fn stmts(&mut self, stmts: &[Stmt<'_>]) -> Result<(), RewriteError> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    /// Statements nest at most 150 deep (minijinja's parser refuses more), so this recursion is bounded.
    fn stmt(&mut self, stmt: &Stmt<'_>) -> Result<(), RewriteError> {
        match stmt {
            Stmt::Template(t) => self.stmts(&t.children),
            Stmt::EmitExpr(e) => self.expr(&e.expr),
            Stmt::EmitRaw(_) | Stmt::Continue(_) | Stmt::Break(_) => Ok(()),
            Stmt::ForLoop(f) => {
                self.expr(&f.target)?;
                self.expr(&f.iter)?;
                let after = self.after(end_of(&f.target), |t| matches!(t, Token::Ident("in")), "a loop's `in`")?;
                let stop = |t: &Token<'_>| matches!(t, Token::Ident("if" | "recursive") | Token::BlockEnd);
                self.hold_until(after, stop, HOLD_FUNCTION)?;
                if let Some(filter) = &f.filter_expr {
                    self.expr(filter)?;
                }
                self.stmts(&f.body)?;
                self.stmts(&f.else_body)
            }
            Stmt::IfCond(i) => {
                self.expr(&i.expr)?;
                self.stmts(&i.true_body)?;
                self.stmts(&i.false_body)
            }
            Stmt::WithBlock(w) => {
                for (target, value) in &w.assignments {
                    self.expr(target)?;
                    self.expr(value)?;
                    let after = self.after(end_of(target), |t| matches!(t, Token::Assign), "a `with`'s `=`")?;
                    self.hold_until(after, |t| matches!(t, Token::Comma | Token::BlockEnd), HOLD_FUNCTION)?;
                }
                self.stmts(&w.body)
            }
            Stmt::Set(s) => {
                self.expr(&s.target)?;
                self.expr(&s.expr)?;
                let function = if sets_attribute(&s.target) { HOLD_ATTR_FUNCTION } else { HOLD_FUNCTION };
                let after = self.after(end_of(&s.target), |t| matches!(t, Token::Assign), "a `set`'s `=`")?;
                self.hold_until(after, |t| matches!(t, Token::BlockEnd), function).map(drop)
            }
            Stmt::SetBlock(s) => {
                self.expr(&s.target)?;
                if let Some(filter) = &s.filter {
                    self.expr(filter)?;
                }
                self.stmts(&s.body)
            }
            Stmt::AutoEscape(a) => {
                self.expr(&a.enabled)?;
                self.stmts(&a.body)
            }
            Stmt::FilterBlock(f) => {
                self.expr(&f.filter)?;
                self.stmts(&f.body)
            }
            Stmt::Block(b) => self.stmts(&b.body),
            // Templates are rendered without a loader: these fail when run, and hold no values.
            Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => Ok(()),
            Stmt::Macro(m) => {
                m.args.iter().chain(&m.defaults).try_for_each(|e| self.expr(e))?;
                self.stmts(&m.body)
            }
            Stmt::CallBlock(c) => {
                self.call(&c.call.expr, &c.call.args)?;
                let decl = &c.macro_decl;
                decl.args.iter().chain(&decl.defaults).try_for_each(|e| self.expr(e))?;
                self.stmts(&decl.body)
            }
            Stmt::Do(d) => self.call(&d.call.expr, &d.call.args),
        }
    }

    /// A whole expression: its size checked, then the calls inside it found.
    fn expr(&mut self, expr: &Expr<'_>) -> Result<(), RewriteError> {
        let nodes = count_nodes(expr, self.max_nodes + 1);
        if nodes > self.max_nodes {
            let line = expr.span().start_line;
            return Err(RewriteError::ExpressionTooLarge { line, nodes, limit: self.max_nodes });
        }
        self.find_calls(expr)
    }

    /// Every call inside `expr` (which has at most `max_nodes` nodes, so this recursion is bounded).
    fn find_calls(&mut self, expr: &Expr<'_>) -> Result<(), RewriteError> {
        let mut result = Ok(());
        for_each_child(expr, &mut |child| {
            if result.is_ok() {
                result = self.find_calls(child);
            }
        });
        result?;
        match expr {
            Expr::Call(c) => self.hold_args(&c.expr, &c.args),
            _ => Ok(()),
        }
    }

    /// A call statement's (`{% do %}`, `{% call %}`): the callee and arguments checked, the arguments held.
    fn call(&mut self, callee: &Expr<'_>, args: &[CallArg<'_>]) -> Result<(), RewriteError> {
        self.expr(callee)?;
        args.iter().try_for_each(|a| self.expr(call_arg_expr(a)))?;
        self.hold_args(callee, args)
    }

    /// Holds each of a call's arguments: they lie between the `(` after the callee and its `)`, split at commas;
    /// a keyword argument's name and `=`, and a splat's `*` or `**`, are not part of the value.
    fn hold_args(&mut self, callee: &Expr<'_>, args: &[CallArg<'_>]) -> Result<(), RewriteError> {
        let mut at = self.after(end_of(callee), |t| matches!(t, Token::ParenOpen), "a call's `(`")?;
        for arg in args {
            at += match (arg, self.tokens.get(at).map(|t| &t.0), self.tokens.get(at + 1).map(|t| &t.0)) {
                (CallArg::Kwarg(..), Some(Token::Ident(_)), Some(Token::Assign)) => 2,
                (CallArg::PosSplat(_), Some(Token::Mul), _) | (CallArg::KwargSplat(_), Some(Token::Pow), _) => 1,
                (CallArg::Pos(_), ..) => 0,
                _ => return Err(misplaced("a call's argument")),
            };
            let stop = self.hold_until(at, |t| matches!(t, Token::Comma | Token::ParenClose), HOLD_FUNCTION)?;
            at = stop + 1;
        }
        Ok(())
    }

    /// The index of the token after the first token at or after `offset` that `is_delimiter` accepts.
    fn after(&self, offset: u32, is_delimiter: impl Fn(&Token<'_>) -> bool, what: &str) -> Result<usize, RewriteError> {
        let first = self.tokens.partition_point(|(_, span)| span.start_offset < offset);
        let found = self.tokens[first..].iter().position(|(t, _)| is_delimiter(t)).ok_or_else(|| misplaced(what))?;
        Ok(first + found + 1)
    }

    /// Holds the expression whose tokens run from index `from` to the first token that `stop` accepts at bracket
    /// depth 0; returns that token's index.
    fn hold_until(
        &mut self,
        from: usize,
        stop: impl Fn(&Token<'_>) -> bool,
        function: &'static str,
    ) -> Result<usize, RewriteError> {
        let mut depth = 0usize;
        for (i, (token, _)) in self.tokens.iter().enumerate().skip(from) {
            if depth == 0 && stop(token) {
                if i == from {
                    return Err(misplaced("an expression"));
                }
                let (start, end) = (self.tokens[from].1.start_offset, self.tokens[i - 1].1.end_offset);
                self.holds.push(Hold { start: start as usize, end: end as usize, function });
                return Ok(i);
            }
            match token {
                Token::ParenOpen | Token::BracketOpen | Token::BraceOpen => depth += 1,
                Token::ParenClose | Token::BracketClose | Token::BraceClose => {
                    depth = depth.checked_sub(1).ok_or_else(|| misplaced("an expression's end"))?
                }
                _ => {}
            }
        }
        Err(misplaced("an expression's end"))
    }
}

/// Where an expression's last token ends (reliable, unlike where its first begins).
fn end_of(expr: &Expr<'_>) -> u32 {
    expr.span().end_offset
}

/// Whether a `set` target assigns a namespace attribute (`ns.x`, or one of `ns.x, y`).
fn sets_attribute(target: &Expr<'_>) -> bool {
    match target {
        Expr::GetAttr(_) => true,
        Expr::Tuple(t) => t.items.iter().any(sets_attribute),
        Expr::List(l) => l.items.iter().any(sets_attribute),
        _ => false,
    }
}

fn call_arg_expr<'a, 'b>(arg: &'b CallArg<'a>) -> &'b Expr<'a> {
    match arg {
        CallArg::Pos(e) | CallArg::Kwarg(_, e) | CallArg::PosSplat(e) | CallArg::KwargSplat(e) => e,
    }
}

/// The nodes of `expr`, counted up to `stop` (a chain of 100,000 filters is not walked to its end). Iterative:
/// the tree can be as deep as the template is long.
fn count_nodes(expr: &Expr<'_>, stop: usize) -> usize {
    let mut pending = vec![expr];
    let mut count = 0;
    while let Some(e) = pending.pop() {
        count += 1;
        if count >= stop {
            return count;
        }
        for_each_child(e, &mut |child| pending.push(child));
    }
    count
}

fn for_each_child<'e, 'a>(expr: &'e Expr<'a>, visit: &mut impl FnMut(&'e Expr<'a>)) {
    let args = |args: &'e [CallArg<'a>], visit: &mut dyn FnMut(&'e Expr<'a>)| {
        for arg in args {
            visit(call_arg_expr(arg));
        }
    };
    match expr {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            visit(&s.expr);
            [&s.start, &s.stop, &s.step].into_iter().flatten().for_each(&mut *visit);
        }
        Expr::UnaryOp(u) => visit(&u.expr),
        Expr::BinOp(b) => {
            visit(&b.left);
            visit(&b.right);
        }
        Expr::Compare(c) => {
            visit(&c.expr);
            c.ops.iter().for_each(|op| visit(&op.expr));
        }
        Expr::IfExpr(i) => {
            visit(&i.test_expr);
            visit(&i.true_expr);
            if let Some(e) = &i.false_expr {
                visit(e);
            }
        }
        Expr::Filter(f) => {
            if let Some(e) = &f.expr {
                visit(e);
            }
            args(&f.args, visit);
        }
        Expr::Test(t) => {
            visit(&t.expr);
            args(&t.args, visit);
        }
        Expr::GetAttr(g) => visit(&g.expr),
        Expr::GetItem(g) => {
            visit(&g.expr);
            visit(&g.subscript_expr);
        }
        Expr::Call(c) => {
            visit(&c.expr);
            args(&c.args, visit);
        }
        Expr::List(l) => l.items.iter().for_each(visit),
        Expr::Tuple(t) => t.items.iter().for_each(visit),
        Expr::Map(m) => m.keys.iter().chain(&m.values).for_each(visit),
    }
}

/// `source` with `FUNCTION((` before and `))` after each hold. Holds nest or are disjoint: at one offset,
/// closings come before openings, inner closings before outer ones, outer openings before inner ones.
fn insert_holds(source: &str, holds: Vec<Hold>) -> String {
    // (offset, is an opening, tie-break, the function for an opening) for each insertion.
    let mut marks: Vec<(usize, bool, usize, Option<&str>)> = Vec::with_capacity(holds.len() * 2);
    for Hold { start, end, function } in holds {
        let len = end - start;
        marks.push((start, true, usize::MAX - len, Some(function)));
        marks.push((end, false, len, None));
    }
    marks.sort_by_key(|&(offset, opening, order, _)| (offset, opening, order));
    let mut out = String::with_capacity(source.len() + marks.len() * 10);
    let mut at = 0;
    for (offset, _, _, function) in marks {
        out.push_str(&source[at..offset]);
        match function {
            Some(f) => {
                out.push_str(f);
                out.push_str("((");
            }
            None => out.push_str("))"),
        }
        at = offset;
    }
    out.push_str(&source[at..]);
    out
}
