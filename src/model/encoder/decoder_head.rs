//! Decoder embedders and rerankers: a file of a decoder family ember generates with (`qwen3`, `llama`, ...) whose
//! `{arch}.pooling_type` declares a pooling is an embedding model, not a chat model. Qwen3-Embedding declares
//! `last`: the vector is the final-normed hidden state of the input's last token (its EOS). Qwen3-Reranker declares
//! `rank` and carries `cls.output.weight`, the "yes" and "no" rows of its LM head: the last token's hidden state
//! times those rows, softmaxed, is the pair's [p(yes), p(no)] (llama.cpp's `build_pooling`, which softmaxes for
//! `qwen3` only). Attention stays causal, as the models were trained; the forward pass is the decoder's.

use crate::model::gguf::GgufFile;
use crate::model::llama::ModelConfigError;

use super::pooling::Pooling;

/// The GGUF key of a reranker's pair prompt: `{query}` and `{document}` are replaced by the request's texts
/// (llama.cpp's `format_prompt_rerank`).
pub const RERANK_TEMPLATE_KEY: &str = "tokenizer.chat_template.rerank";

/// Most scores a classification head may give per input (a reranker gives 1 or 2).
const MAX_LABELS: u64 = 1 << 16;

/// How a decoder's hidden states become an input's vector or scores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecoderHead {
    /// Never `Pooling::None`: a file declaring none is a chat model.
    pub pooling: Pooling,
    /// Rows of `cls.output.weight`, the scores per input of `Pooling::Rank`; `None` when the file has no head.
    pub classifier_outputs: Option<usize>,
    /// Whether the head's scores are softmaxed (Qwen 3's rerankers: yes/no probabilities).
    pub softmax: bool,
    /// The reranker's pair prompt ([`RERANK_TEMPLATE_KEY`]), when the file has one.
    pub rerank_template: Option<String>,
}

impl DecoderHead {
    /// The head of a decoder file of width `n_embd`: the pooling `requested` (the engine's `pooling` option), else
    /// the file's. `None` when neither declares a pooling (or both say `none`): the file is a chat model.
    pub fn from_gguf(
        file: &GgufFile,
        n_embd: usize,
        requested: Option<Pooling>,
    ) -> Result<Option<Self>, ModelConfigError> {
        let arch = file.str("general.architecture")?;
        let declared = match file.optional(&format!("{arch}.pooling_type"), GgufFile::u32)? {
            None => None,
            Some(v) => Some(Pooling::from_gguf(v).ok_or_else(|| ModelConfigError::Invalid {
                key: "pooling_type",
                detail: format!("{v} is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)"),
            })?),
        };
        let pooling = match requested.or(declared) {
            None | Some(Pooling::None) => return Ok(None),
            Some(p) => p,
        };
        let classifier_outputs = match file.tensor_info("cls.output.weight") {
            None => None,
            Some(t) => match t.shape.as_slice() {
                &[width, labels] if width == n_embd as u64 && (1..=MAX_LABELS).contains(&labels) => {
                    Some(labels as usize)
                }
                // One label written by ggml, which drops a trailing dimension of 1.
                &[width] if width == n_embd as u64 => Some(1),
                found => {
                    return Err(ModelConfigError::TensorShape {
                        tensor: "cls.output.weight".into(),
                        expected: vec![n_embd as u64, 2],
                        found: found.to_vec(),
                    })
                }
            },
        };
        if pooling == Pooling::Rank && classifier_outputs.is_none() {
            return Err(ModelConfigError::Invalid {
                key: "pooling_type",
                detail: "rank (a reranker) needs the classification head cls.output.weight, which the file lacks"
                    .into(),
            });
        }
        let rerank_template = file.optional(RERANK_TEMPLATE_KEY, GgufFile::str)?.map(str::to_owned);
        Ok(Some(DecoderHead {
            pooling,
            classifier_outputs,
            softmax: matches!(arch, "qwen3" | "qwen3vl"),
            rerank_template,
        }))
    }
}

/// `template` with `{query}` and `{document}` replaced, or `None` when the result would exceed `max_bytes` (a
/// hostile template repeating the placeholders cannot make the prompt huge). Replaced in one pass, so a query that
/// contains `{document}` stays as written (llama.cpp replaces it too, a quirk not worth copying).
pub fn fill_rerank_template(template: &str, query: &str, document: &str, max_bytes: usize) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    loop {
        let next = [("{query}", query), ("{document}", document)]
            .into_iter()
            .filter_map(|(slot, text)| rest.find(slot).map(|at| (at, slot, text)))
            .min_by_key(|&(at, ..)| at);
        let Some((at, slot, text)) = next else { break };
        if out.len() + at + text.len() > max_bytes {
            return None;
        }
        out.push_str(&rest[..at]);
        out.push_str(text);
        rest = &rest[at + slot.len()..];
    }
    if out.len() + rest.len() > max_bytes {
        return None;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::fill_rerank_template;

    #[test]
    fn the_template_is_filled_in_one_pass_and_bounded() {
        let t = "<Query>: {query}\n<Document>: {document}<|im_end|>";
        assert_eq!(fill_rerank_template(t, "q", "d", 1000).unwrap(), "<Query>: q\n<Document>: d<|im_end|>");
        // A placeholder inside the query is the query's text.
        assert_eq!(
            fill_rerank_template(t, "{document}", "d", 1000).unwrap(),
            "<Query>: {document}\n<Document>: d<|im_end|>"
        );
        assert_eq!(fill_rerank_template("{query}{query}", "ab", "", 1000).unwrap(), "abab");
        assert_eq!(fill_rerank_template("no slots", "q", "d", 1000).unwrap(), "no slots");
        // A template repeating the query a million times is refused, not built.
        let hostile = "{query}".repeat(1_000_000);
        assert_eq!(fill_rerank_template(&hostile, &"x".repeat(1000), "", 1 << 20), None);
        assert_eq!(fill_rerank_template("0123456789", "", "", 9), None);
        assert!(fill_rerank_template("0123456789", "", "", 10).is_some());
    }
}
