//! `{% generation %}` … `{% endgeneration %}`: transformers' tag that marks the assistant's tokens for
//! `return_assistant_tokens_mask`, which renders as its content. minijinja does not know the tag, so before
//! compiling, each becomes a block that renders its content unchanged (`{% if true %}` … `{% endif %}`), its
//! whitespace control (`{%-`, `-%}`, `{%+`) kept so that the text around it is trimmed as transformers trims it.
//! The scan is textual: the tag inside a string literal would be rewritten too (no template writes one there).

use std::borrow::Cow;

/// `source` with every `generation` / `endgeneration` tag rewritten (borrowed when it has none).
pub fn rewrite_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let (before, tag_and_after) = rest.split_at(start);
        out.push_str(before);
        // The closing `%}` after the opening `{%` (in `{%}` the two overlap: not a tag).
        let Some(end) = tag_and_after[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag_and_after);
            return Cow::Owned(out);
        };
        let tag = &tag_and_after[..end + 2];
        out.push_str(&rewrite_tag(tag).unwrap_or_else(|| tag.to_owned()));
        rest = &tag_and_after[end + 2..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// `{%[-+] generation [-+]%}` → `{%[-+] if true [-+]%}`, and `endgeneration` → `endif`; `None` for any other tag.
fn rewrite_tag(tag: &str) -> Option<String> {
    let inner = &tag[2..tag.len() - 2];
    let (open, inner) = split_marker(inner, true);
    let (inner, close) = split_marker(inner, false);
    let replacement = match inner.trim() {
        "generation" => "if true",
        "endgeneration" => "endif",
        _ => return None,
    };
    Some(format!("{{%{open} {replacement} {close}%}}"))
}

/// The whitespace-control marker (`-` or `+`) at the start (`leading`) or end of a tag's inside, and the rest.
fn split_marker(inner: &str, leading: bool) -> (&str, &str) {
    let marker = |c: char| c == '-' || c == '+';
    match (leading, inner.chars().next(), inner.chars().last()) {
        (true, Some(c), _) if marker(c) => inner.split_at(1),
        (true, _, _) => ("", inner),
        (false, _, Some(c)) if marker(c) => inner.split_at(inner.len() - 1),
        (false, _, _) => (inner, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_blocks_that_keep_their_whitespace_control() {
        assert_eq!(
            rewrite_generation_tags("a{% generation %}b{%- endgeneration -%} c"),
            "a{% if true %}b{%- endif -%} c"
        );
        assert_eq!(rewrite_generation_tags("{%+generation%}x{%endgeneration+%}"), "{%+ if true %}x{% endif +%}");
        let other_tags = "{% if generation %}x{% endif %}";
        assert_eq!(rewrite_generation_tags(other_tags), other_tags);
        assert!(matches!(rewrite_generation_tags("{% for m in messages %}"), Cow::Borrowed(_)));
        assert_eq!(rewrite_generation_tags("{% generation"), "{% generation", "an unclosed tag is left to the parser");
        // Found by the seeded mutation of template sources: `{%}` once sliced its inside from 2 to 1.
        assert_eq!(rewrite_generation_tags("generation {%} x %}"), "generation {%} x %}");
    }
}
