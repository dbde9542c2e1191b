//! Hostile chat templates: what a model file (`tokenizer.chat_template`) or the `chat_template` option can hold.
//! Each is run both ways (`attack_suite.rs`), and must end in an error that says what it reached (`expect`, a
//! substring of the error) while the host lives on. A template that fires on every render is refused at load
//! (the engine's probe render); one that fires only on some requests is refused at their submit, and the same
//! engine serves the others.

/// What makes a template fire.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// Every render: the engine's probe at load.
    Always,
    /// A chat whose last message has this content.
    Message(&'static str),
    /// A chat whose `chat_template_kwargs` are this JSON object.
    Kwargs(&'static str),
    /// A chat whose last message has this much content (bytes of `'a'`).
    LongMessage(usize),
}

pub struct TemplateBomb {
    pub name: &'static str,
    pub source: String,
    pub trigger: Trigger,
    /// A substring of the error.
    pub expect: &'static str,
}

const DEPTH: &str = "chat_template_limits.max_depth";
const FUEL: &str = "chat_template_limits.fuel";
const CALLS: &str = "chat_template_limits.max_call_depth";
const NODES: &str = "chat_template_limits.max_expression_nodes";
const OUTPUT: &str = "chat_template_limits.max_output_bytes";
const SOURCE: &str = "chat_template_limits.max_source_bytes";
const NAMESPACE: &str = "a namespace attribute cannot hold a namespace";

/// `ns.v`, a list nested 250 deep.
const DEEP_250: &str = "{% set ns = namespace(v=1) %}{% for i in range(250) %}{% set ns.v = [ns.v] %}{% endfor %}";

/// A loop of 100,000 that rebinds `ns.v` with `body` (which reads `ns.v`), then `after`.
fn grow(body: &str, after: &str) -> String {
    format!(
        "{{% set ns = namespace(v=[]) %}}{{% for i in range(100000) %}}{{% set ns.v = {body} %}}{{% endfor %}}{after}"
    )
}

fn bomb(name: &'static str, source: impl Into<String>, expect: &'static str) -> TemplateBomb {
    TemplateBomb { name, source: source.into(), trigger: Trigger::Always, expect }
}

fn when(name: &'static str, trigger: Trigger, source: impl Into<String>, expect: &'static str) -> TemplateBomb {
    TemplateBomb { name, source: source.into(), trigger, expect }
}

pub fn template_bombs() -> Vec<TemplateBomb> {
    let nest40 = format!("{}ns.v{}", "[".repeat(40), "]".repeat(40));
    let chain = |unit: &str, n: usize| format!("{{{{ [1]{} }}}}", unit.repeat(n));
    let v = vec![
        // Values nested deeper than any stack (the issue's first finding): each use of the value.
        bomb("nested_list_printed", grow("[ns.v]", "{{ ns.v }}"), DEPTH),
        bomb("nested_list_compared", grow("[ns.v]", "{{ ns.v == ns.v }}"), DEPTH),
        bomb("nested_list_length", grow("[ns.v]", "{{ ns.v|length }}"), DEPTH),
        bomb("nested_list_string", grow("[ns.v]", "{{ ns.v|string }}"), DEPTH),
        bomb("nested_list_tojson", grow("[ns.v]", "{{ ns.v|tojson }}"), DEPTH),
        bomb("nested_list_dropped", grow("[ns.v]", "done"), DEPTH),
        bomb("nested_list_in", grow("[ns.v]", "{{ [] in ns.v }}"), DEPTH),
        bomb("nested_list_sorted", grow("[ns.v]", "{{ [ns.v, ns.v]|sort }}"), DEPTH),
        bomb("nested_dict", grow("{'a': ns.v}", "{{ ns.v }}"), DEPTH),
        bomb("nested_tuple", grow("(ns.v,)", "{{ ns.v }}"), DEPTH),
        bomb("nested_literal_40_per_step", grow(&nest40, "{{ ns.v }}"), DEPTH),
        bomb("nested_by_batch", grow("[ns.v]|batch(1)|list", "{{ ns.v }}"), DEPTH),
        bomb("nested_by_items", grow("{'k': ns.v}.items()|list", "{{ ns.v }}"), DEPTH),
        bomb("nested_by_dictsort", grow("{'k': ns.v}|dictsort", "{{ ns.v }}"), DEPTH),
        bomb("nested_by_groupby", grow("[{'k': ns.v}]|groupby('k')", "{{ ns.v }}"), FUEL),
        bomb("nested_by_dict_function", grow("dict(k=ns.v)", "{{ ns.v }}"), DEPTH),
        bomb("nested_by_plus", grow("ns.v + [ns.v]", "{{ ns.v }}"), FUEL),
        bomb("shared_subtrees_doubling", grow("[ns.v, ns.v]", "{{ ns.v }}"), FUEL),
        bomb("lazy_chain_growing", grow("ns.v|chain([i])", "{{ ns.v|length }}"), FUEL),
        bomb("lazy_repeat_chain", grow("[ns.v] * 1", "{{ ns.v }}"), DEPTH),
        bomb("nested_in_a_set_chain", {
            let mut s = String::from("{% set x = [] %}");
            s.push_str(&"{% set x = [x] %}".repeat(5_000));
            s.push_str("{{ x }}");
            s
        }, DEPTH),
        bomb("nested_through_with_blocks", {
            let mut s = String::from("{% set x = [] %}");
            s.push_str(&"{% with x = [[[[x]]]] %}".repeat(140));
            s.push_str("{{ x }}");
            s.push_str(&"{% endwith %}".repeat(140));
            s
        }, "nests too deeply"),
        // Namespaces holding namespaces: the cycles a printer would follow forever.
        bomb("namespace_holds_itself", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NAMESPACE),
        bomb(
            "namespaces_hold_each_other",
            "{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b %}{{ a }}",
            NAMESPACE,
        ),
        bomb("namespace_in_a_list", "{% set ns = namespace() %}{% set ns.l = [ns] %}{{ ns }}", NAMESPACE),
        bomb(
            "namespace_linked_list",
            grow("namespace(next=ns.v)", "{{ ns.v }}").replacen("namespace(v=[])", "namespace(v=none)", 1),
            NAMESPACE,
        ),
        // Calls nested without end.
        bomb("macro_recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", CALLS),
        bomb(
            "macro_recursion_nesting_its_argument",
            "{% macro f(x, n) %}{% if n > 0 %}{{ f([[[[[[[[x]]]]]]]], n - 1) }}{% endif %}{% endmacro %}{{ f([], 100000) }}",
            CALLS,
        ),
        bomb("recursive_loop", "{% for x in [[1]] recursive %}{{ loop([x]) }}{% endfor %}", CALLS),
        bomb(
            "caller_recursion",
            "{% macro f() %}{{ caller() }}{% endmacro %}{% macro g() %}{% call f() %}{{ g() }}{% endcall %}{% endmacro %}{{ g() }}",
            CALLS,
        ),
        // One expression that nests as deep as it is long.
        bomb("filter_chain", chain("|batch(1)", 5_000), NODES),
        bomb("operator_chain", chain(" * 1", 5_000), NODES),
        bomb("concatenation_chain", chain(" ~ 'x'", 5_000), NODES),
        bomb("map_arguments", format!("{{{{ [[1]]|map({}'batch', 1)|list }}}}", "'map', ".repeat(400)), NODES),
        bomb("parentheses", format!("{{{{ {}1{} }}}}", "(".repeat(2_000), ")".repeat(2_000)), "recursion"),
        bomb("if_nesting", format!("{}x{}", "{% if true %}".repeat(2_000), "{% endif %}".repeat(2_000)), "recursion"),
        bomb("huge_source", "{{ 'x' }}".repeat(200_000), SOURCE),
        // Memory: what one instruction or filter can be asked to allocate.
        bomb("string_repeated_past_minijinjas_cap", "{{ 'x' * 1000000000 }}", FUEL),
        bomb("string_repeated_to_the_cap", "{{ 'x' * 100000000 }}", OUTPUT),
        bomb(
            "string_repeats_concatenated",
            "{{ (('x' * 100000000) ~ ('x' * 100000000)) ~ (('x' * 100000000) ~ ('x' * 100000000)) }}",
            FUEL,
        ),
        bomb("string_doubling", grow_string("ns.s ~ ns.s"), FUEL),
        bomb("list_repeated", "{{ ([0] * 100000000)|list|length }}", FUEL),
        bomb("split_method", "{{ ('a ' * 49999999).split()|length }}", FUEL),
        bomb("splitlines_method", "{{ ('\\n' * 99999999).splitlines()|length }}", FUEL),
        bomb("split_filter", "{{ ('a ' * 49999999)|split|list|length }}", FUEL),
        bomb("lines_filter", "{{ ('\\n' * 99999999)|lines|length }}", FUEL),
        bomb("tojson_string_indent", "{{ messages|tojson(indent='x' * 99999999) }}", FUEL),
        bomb(
            "tojson_indent_times_depth",
            format!("{{{{ {}1{}|tojson(indent='x' * 10000000) }}}}", "[".repeat(60), "]".repeat(60)),
            FUEL,
        ),
        bomb("tojson_separators", "{{ range(100000)|list|tojson(separators=('x' * 1000000, ':')) }}", FUEL),
        bomb("format_method_width", "{{ '{:>1000000000000}'.format('x') }}", FUEL),
        bomb("format_method_precision", "{{ '{:.100000000f}'.format(1.5) }}", FUEL),
        bomb("format_method_many_fields", "{{ ('{:>100000}' * 100000).format(*range(100000)) }}", FUEL),
        bomb("format_filter_width", "{{ '%1000000000s'|format('x') }}", FUEL),
        bomb("format_filter_precision", "{{ '%.1000000000f'|format(1.0) }}", FUEL),
        bomb("indent_filter", "{{ ('a\\n' * 1000000)|indent(1000000) }}", FUEL),
        bomb("replace_method", "{{ ('a' * 10000000).replace('a', 'b' * 1000) }}", FUEL),
        bomb("replace_filter", "{{ ('a' * 10000000)|replace('a', 'b' * 1000) }}", FUEL),
        bomb("join_filter", "{{ range(100000)|join('x' * 100000) }}", FUEL),
        bomb("join_method", "{{ ('x' * 100000).join(range(100000)|map('string')) }}", FUEL),
        bomb("upper_filter", "{{ ('\u{0390}' * 30000000)|upper|length }}", FUEL),
        bomb("upper_method", "{{ ('\u{0390}' * 30000000).upper()|length }}", FUEL),
        bomb("characters_listed", "{{ ('x' * 50000000)|list|length }}", FUEL),
        bomb("characters_sorted", "{{ ('x' * 50000000)|sort|length }}", FUEL),
        bomb("characters_mapped_by_name", "{{ ['x' * 20000000]|map('list')|list|length }}", FUEL),
        bomb("characters_batched", "{{ ('x' * 50000000)|batch(1)|list|length }}", FUEL),
        bomb("escape_filter", "{{ ('<' * 90000000)|escape|length }}", FUEL),
        bomb("title_filter", "{{ ('a ' * 50000000)|title|length }}", FUEL),
        bomb("pprint_filter", "{{ (range(100000)|list * 100)|list|pprint|length }}", FUEL),
        bomb("batch_fill", "{{ [1]|batch(100000000, 0)|list|length }}", FUEL),
        bomb("slice_count", "{{ [1]|slice(100000000)|list|length }}", FUEL),
        bomb("strftime_format", "{{ strftime_now('%A' * 50000000) }}", FUEL),
        bomb("pairs_grown_in_a_loop", grow("ns.v + [(i, 'x' * 1000)]", "{{ ns.v|length }}"), FUEL),
        bomb("list_grown_in_a_loop", grow("ns.v + range(1000)|list", "{{ ns.v|length }}"), FUEL),
        bomb("captured_output", "{% set x %}{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}{% endset %}{{ x|length }}", FUEL),
        bomb(
            "macro_output",
            "{% macro m() %}{{ 'x' * 10000000 }}{% endmacro %}{% for i in range(1000) %}{% set y = m() %}{% endfor %}",
            FUEL,
        ),
        bomb("output_flood", "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", OUTPUT),
        bomb("output_flood_small_writes", "{% for i in range(100000) %}{% for j in range(100) %}xxxxxxxxxx{% endfor %}{% endfor %}", FUEL),
        bomb("debug_in_a_loop", "{% for i in range(100000) %}{% set d = debug() %}{% endfor %}", FUEL),
        // Pretty-printing indents each line by its depth: 10,000 copies of a list 250 deep (2.5 million nodes,
        // within the fuel) print as 2.5 GB.
        bomb("pprint_deep_copies", format!("{DEEP_250}{{{{ ([ns.v] * 10000)|pprint|length }}}}"), FUEL),
        bomb("debug_deep_copies", format!("{DEEP_250}{{% set big = [ns.v] * 10000 %}}{{{{ debug()|length }}}}"), FUEL),
        // Work without allocation: fuel counts instructions and the items operators visit.
        bomb("nested_loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", FUEL),
        bomb(
            "compare_large_lists",
            "{% set x = range(100000)|list %}{% set y = range(100000)|list %}{% for i in range(100000) %}{% if x == y %}{% endif %}{% endfor %}",
            FUEL,
        ),
        bomb("containment", "{% set x = range(100000)|list %}{% for i in range(100000) %}{% if 99999 in x %}{% endif %}{% endfor %}", FUEL),
        bomb("sorting", "{% set x = range(100000)|list|reverse|list %}{% for i in range(1000) %}{% set y = x|sort %}{% endfor %}", FUEL),
        bomb("unique", "{% set x = range(100000)|list %}{% for i in range(1000) %}{% set y = x|unique|list %}{% endfor %}", FUEL),
        bomb("string_search", "{% set x = 'a' * 10000000 %}{% for i in range(100000) %}{% if 'b' in x %}{% endif %}{% endfor %}", FUEL),
        bomb("range_too_long", "{{ range(1000000000)|length }}", "too many elements"),
        // What a template may not do at all.
        bomb("include", "{% include 'other.jinja' %}", "template not found"),
        bomb("import", "{% import 'other.jinja' as o %}{{ o.x }}", "template not found"),
        bomb("extends", "{% extends 'other.jinja' %}", "template not found"),
        bomb("raise_with_a_huge_message", "{{ raise_exception('x' * 10000000) }}", "…"),
        // Bombs that only some requests set off: refused at their submit, the engine serving the others.
        when(
            "depth_on_a_message",
            Trigger::Message("BOOM"),
            format!("{{% if messages[-1].content == 'BOOM' %}}{}{{% endif %}}ok", grow("[ns.v]", "{{ ns.v }}")),
            DEPTH,
        ),
        when(
            "fuel_on_a_message",
            Trigger::Message("BOOM"),
            "{% if messages[-1].content == 'BOOM' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}ok",
            FUEL,
        ),
        when(
            "output_from_kwargs",
            Trigger::Kwargs(r#"{"n": 100000000}"#),
            "{% if n is defined %}{{ 'x' * n }}{% endif %}ok",
            OUTPUT,
        ),
        when(
            "depth_from_kwargs",
            Trigger::Kwargs(r#"{"n": 100000}"#),
            "{% set ns = namespace(v=[]) %}{% for i in range(n or 0) %}{% set ns.v = [ns.v] %}{% endfor %}ok",
            DEPTH,
        ),
        when(
            "a_message_repeated",
            Trigger::LongMessage(1 << 20),
            "{% for m in messages %}{{ m.content * 1000 if m.content|length > 1000 else m.content }}{% endfor %}",
            FUEL,
        ),
        when(
            "a_message_split",
            Trigger::LongMessage(4 << 20),
            "{% for m in messages %}{{ m.content.split()|length if m.content|length > 1000 else m.content }}{% endfor %}",
            FUEL,
        ),
    ];
    v
}

/// A loop of 100 that rebinds the string `ns.s` with `body`, then prints its length.
fn grow_string(body: &str) -> String {
    format!("{{% set ns = namespace(s='x') %}}{{% for i in range(100) %}}{{% set ns.s = {body} %}}{{% endfor %}}{{{{ ns.s|length }}}}")
}
