//! From an input's token vectors to its one vector: the pooling types of llama.cpp (`llama_pooling_type`, the
//! values `{arch}.pooling_type` stores), L2 normalization and Matryoshka truncation, as the embedding servers apply
//! them.

/// How an input's token vectors become one vector. Its JSON form is the name (`"mean"`, ...), as in the engine's
/// `pooling` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Every token's vector, unpooled.
    None,
    /// The mean of the tokens' vectors (BGE-M3, E5, all-MiniLM, nomic-embed).
    Mean,
    /// The first token's (`[CLS]`; BGE v1.5).
    Cls,
    /// The last token's (decoder embedders: Qwen3-Embedding).
    Last,
    /// A relevance score from the classification head (rerankers).
    Rank,
}

impl Pooling {
    /// The pooling of a GGUF `pooling_type` value.
    pub fn from_gguf(value: u32) -> Option<Self> {
        Some(match value {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    /// The name requests use (`"none"`, `"mean"`, `"cls"`, `"last"`, `"rank"`).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank]
            .into_iter()
            .find(|p| p.name() == name)
    }

    /// Pools `tokens` (an input's token vectors, `width` each, at least one) into `out` (`width`). `None` and
    /// `Rank` do not pool to a vector of the tokens: callers handle them before.
    pub fn pool(self, tokens: &[f32], width: usize, out: &mut [f32]) {
        let n = tokens.len() / width;
        assert!(n > 0 && out.len() == width, "pooling needs at least one token vector of the output's width");
        match self {
            Pooling::Mean => {
                // Summed in f32 in token order, then scaled once: llama.cpp's mean is a matmul by 1/n weights,
                // which differs in the last bits only.
                out.fill(0.0);
                for row in tokens.chunks_exact(width) {
                    out.iter_mut().zip(row).for_each(|(o, x)| *o += x);
                }
                let scale = 1.0 / n as f32;
                out.iter_mut().for_each(|o| *o *= scale);
            }
            Pooling::Cls => out.copy_from_slice(&tokens[..width]),
            Pooling::Last => out.copy_from_slice(&tokens[(n - 1) * width..]),
            Pooling::None | Pooling::Rank => unreachable!("{} is not a pooling to one vector", self.name()),
        }
    }
}

/// Scales `v` to unit length (L2); a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        let scale = (1.0 / norm) as f32;
        v.iter_mut().for_each(|x| *x *= scale);
    }
}

/// The cosine similarity of `a` and `b` (0 when either is zero).
pub fn cosine_similarity(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
    let na: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_types_take_the_right_rows() {
        let tokens = [1.0, 2.0, 3.0, 6.0, 5.0, 10.0];
        let mut out = [0.0; 2];
        Pooling::Mean.pool(&tokens, 2, &mut out);
        assert_eq!(out, [3.0, 6.0]);
        Pooling::Cls.pool(&tokens, 2, &mut out);
        assert_eq!(out, [1.0, 2.0]);
        Pooling::Last.pool(&tokens, 2, &mut out);
        assert_eq!(out, [5.0, 10.0]);
        for v in 0..5 {
            let p = Pooling::from_gguf(v).unwrap();
            assert_eq!(Pooling::from_name(p.name()), Some(p));
        }
        assert_eq!(Pooling::from_gguf(5), None);
    }

    #[test]
    fn normalized_vectors_have_unit_length() {
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = [0.0; 3];
        normalize(&mut zero);
        assert_eq!(zero, [0.0; 3]);
        assert!((cosine_similarity(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-12);
        assert_eq!(cosine_similarity(&[1.0, 0.0], &[0.0, 5.0]), 0.0);
    }
}
