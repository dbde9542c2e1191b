//! `CpuEncoder`: a bidirectional encoder's forward pass (`model/encoder`, BERT's family) on the CPU, for embeddings.
//!
//! Many inputs are encoded in one call: their tokens are the rows of one batch, so every matmul runs once over all
//! of them (the cost that matters), and attention, the only step that mixes tokens, stays within each input. There
//! is no KV cache: an input is encoded whole, once. Buffers are sized at build for `max_batch_tokens` rows.
//!
//! The matmuls are the decoder's (`parallel_matmul`, the same kernels on every path), and every other step is plain
//! Rust or a kernel with one arithmetic, so every kernel path computes the same bits, as for generation.

use std::fmt;

use half::f16;

use super::kernels::numerics::tanh;
use super::kernels::{kernels, BlockQ8A, CacheRun, Kernels, WeightMatrix};
use super::model_weights::Matrix;
use super::parallel::{parallel_matmul, parallel_rows_mut, Activations, MatmulJob};
use super::pool::ThreadPool;
use super::{CpuBackendError, Precision};
use crate::model::encoder::{EncoderConfig, EncoderFfn, Pooling, Positions};
use crate::model::gguf::blocks::QK;
use crate::model::gguf::{GgufError, GgufFile};
use crate::model::llama::rope::{cos_sin, inv_frequencies};
use crate::model::TokenId;

/// A layer's matrix and its bias (empty when the file has none).
struct Affine<'m> {
    w: Matrix<'m>,
    b: Box<[f32]>,
}

/// A LayerNorm's weight and bias.
struct LayerNorm {
    w: Box<[f32]>,
    b: Box<[f32]>,
}

struct EncoderLayer<'m> {
    q: Affine<'m>,
    k: Affine<'m>,
    v: Affine<'m>,
    o: Affine<'m>,
    attn_norm: LayerNorm,
    /// SwiGLU's gate (`EncoderFfn::SwiGlu`).
    gate: Option<Matrix<'m>>,
    up: Affine<'m>,
    down: Affine<'m>,
    out_norm: LayerNorm,
}

/// A classification head, dequantized.
struct Head {
    pooler: Vec<f32>,
    pooler_bias: Box<[f32]>,
    out: Vec<f32>,
    out_bias: Box<[f32]>,
    n_out: usize,
}

/// Why a batch of inputs was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// An input without tokens.
    EmptyInput { index: usize },
    /// An input longer than the model's positions.
    InputTooLong { index: usize, tokens: usize, max: usize },
    /// More tokens in all than the encoder's buffers hold.
    BatchTooLarge { tokens: usize, max: usize },
    /// A token id beyond the vocabulary.
    TokenOutOfRange { index: usize, token: TokenId, vocab_size: usize },
    /// The output buffer has another length than the inputs need.
    OutputLength { expected: usize, found: usize },
    /// A pooling that gives no vector per input (`none`, `rank`).
    Pooling(Pooling),
    /// The decoder's step refused the batch (`decoder_embed.rs`; a bug: inputs are checked first).
    Backend(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::EmptyInput { index } => write!(f, "input {index} has no tokens"),
            EncodeError::InputTooLong { index, tokens, max } => {
                write!(f, "input {index} has {tokens} tokens, more than the model's {max} positions")
            }
            EncodeError::BatchTooLarge { tokens, max } => {
                write!(f, "{tokens} tokens in one batch, more than the encoder's {max}")
            }
            EncodeError::TokenOutOfRange { index, token, vocab_size } => {
                write!(f, "input {index}: token {token} is beyond the vocabulary of {vocab_size}")
            }
            EncodeError::OutputLength { expected, found } => {
                write!(f, "output buffer of {found} floats, {expected} expected")
            }
            EncodeError::Pooling(p) => write!(f, "pooling {:?} gives no vector per input", p.name()),
            EncodeError::Backend(e) => write!(f, "the decoder's step failed: {e}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// An encoder's weights, buffers and threads.
pub struct CpuEncoder<'m> {
    config: EncoderConfig,
    kernels: &'static Kernels,
    pool: ThreadPool,
    precision: Precision,
    max_batch_tokens: usize,
    token_embd: Matrix<'m>,
    /// `Positions::Learned`'s table.
    position_embd: Option<Matrix<'m>>,
    /// `Positions::Rope`'s `[context][head_dim / 2]` cosines and sines.
    rope: Option<(Vec<f32>, Vec<f32>)>,
    /// Row 0 of `token_types.weight` (zeros when the file has none).
    type0: Box<[f32]>,
    embd_norm: LayerNorm,
    layers: Vec<EncoderLayer<'m>>,
    /// The classification head's matrices as f32 rows (`Classifier`): the pooler's `[d][d]` and bias (empty
    /// without one), the output's `[n_out][d]` and bias. Small, read once per input.
    head: Option<Head>,
    /// `[T][n_embd]` each: the residual stream, the projection just computed, queries, keys, values, attention.
    x: Vec<f32>,
    tmp: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    /// `[T][n_embd]`: keys and values rounded to f16, as the attention kernels read them.
    k16: Vec<f16>,
    v16: Vec<f16>,
    /// `[T][n_ff]`: the FFN's up projection, then its GELU; and `[n_ff]` ones (GELU is `gelu_mul` by 1). SwiGLU's
    /// gate projection in `gate` (empty otherwise).
    ff: Vec<f32>,
    gate: Vec<f32>,
    hidden: Vec<f32>,
    ones: Vec<f32>,
    act_q8: Vec<BlockQ8A>,
    act_f32: Vec<f32>,
}

impl<'m> CpuEncoder<'m> {
    /// Builds the encoder of `file` (whose hyperparameters `config` were read from it) with `threads` threads, for
    /// batches of up to `max_batch_tokens` tokens, on the kernel path of [`kernels`].
    pub fn new(
        file: &'m GgufFile,
        config: EncoderConfig,
        threads: usize,
        max_batch_tokens: usize,
        precision: Precision,
    ) -> Result<Self, CpuBackendError> {
        Self::with_kernels(file, config, threads, max_batch_tokens, precision, kernels())
    }

    /// [`CpuEncoder::new`] on a given kernel path (tests compare paths in one process).
    pub fn with_kernels(
        file: &'m GgufFile,
        config: EncoderConfig,
        threads: usize,
        max_batch_tokens: usize,
        precision: Precision,
        kernels: &'static Kernels,
    ) -> Result<Self, CpuBackendError> {
        let bad = |m: String| Err(CpuBackendError::Options(m));
        if threads == 0 {
            return bad("threads must be at least 1".into());
        }
        if max_batch_tokens == 0 || max_batch_tokens > 1 << 20 {
            return bad(format!("max_batch_tokens {max_batch_tokens} is not in 1..=1048576"));
        }
        let (d, ff) = (config.n_embd, config.n_ff);
        if !d.is_multiple_of(QK) || !ff.is_multiple_of(QK) {
            return bad(format!("widths {d} and {ff} must be multiples of {QK}"));
        }
        let pool = ThreadPool::new(threads).map_err(CpuBackendError::Threads)?;
        let run = |n: usize, task: &(dyn Fn(usize) + Sync)| pool.run(n, task);
        let pack = (precision == Precision::Quantized8).then_some(&run as _);
        let gguf = CpuBackendError::Gguf;
        let view = |name: &str| WeightMatrix::from_tensor(&file.tensor(name)?);
        let matrix = |name: &str| Ok::<_, GgufError>(Matrix::new(view(name)?, pack));
        let vector = |name: &str| Ok::<Box<[f32]>, GgufError>(file.tensor(name)?.as_f32()?.into());
        let layer_name = EncoderConfig::layer_tensor;
        let bias = |present: bool, name: &str| if present { vector(name) } else { Ok(Box::default()) };
        let affine = |l: usize, name: &str, has_bias: bool| {
            Ok::<_, GgufError>(Affine {
                w: matrix(&layer_name(l, &format!("{name}.weight")))?,
                b: bias(has_bias, &layer_name(l, &format!("{name}.bias")))?,
            })
        };
        let norm = |name: String| {
            Ok::<_, GgufError>(LayerNorm { w: vector(&format!("{name}.weight"))?, b: vector(&format!("{name}.bias"))? })
        };
        // q, k and v from their own tensors, or from the rows of the fused one (and its bias).
        let qkv = |l: usize| -> Result<[Affine<'m>; 3], GgufError> {
            let b = config.biases.qkv;
            if !config.fused_qkv {
                return Ok([affine(l, "attn_q", b)?, affine(l, "attn_k", b)?, affine(l, "attn_v", b)?]);
            }
            let whole = view(&layer_name(l, "attn_qkv.weight"))?;
            let fused_bias = bias(b, &layer_name(l, "attn_qkv.bias"))?;
            let part = |i: usize| {
                let w = whole.rows(i * d..(i + 1) * d).ok_or_else(|| GgufError::MissingTensor {
                    name: format!("{} rows {}..{}", layer_name(l, "attn_qkv.weight"), i * d, (i + 1) * d),
                })?;
                let b = if fused_bias.is_empty() { Box::default() } else { fused_bias[i * d..(i + 1) * d].into() };
                Ok::<_, GgufError>(Affine { w: Matrix::new(w, pack), b })
            };
            Ok([part(0)?, part(1)?, part(2)?])
        };
        let mut type0 = vec![0f32; d].into_boxed_slice();
        if config.token_types {
            view("token_types.weight").map_err(gguf)?.dequantize_row(0, &mut type0);
        }
        let layers = (0..config.n_layer)
            .map(|l| {
                let [q, k, v] = qkv(l)?;
                Ok(EncoderLayer {
                    q,
                    k,
                    v,
                    o: affine(l, "attn_output", config.biases.output)?,
                    attn_norm: norm(layer_name(l, "attn_output_norm"))?,
                    gate: match config.ffn {
                        EncoderFfn::SwiGlu => Some(matrix(&layer_name(l, "ffn_gate.weight"))?),
                        EncoderFfn::Gelu => None,
                    },
                    up: affine(l, "ffn_up", config.biases.ffn)?,
                    down: affine(l, "ffn_down", config.biases.ffn)?,
                    out_norm: norm(layer_name(l, "layer_output_norm"))?,
                })
            })
            .collect::<Result<Vec<_>, GgufError>>()
            .map_err(gguf)?;
        let head = match config.classifier {
            None => None,
            Some(c) => {
                let rows = |name: &str, n: usize| -> Result<Vec<f32>, GgufError> {
                    let m = view(name)?;
                    let mut all = vec![0f32; n * d];
                    for (r, row) in all.chunks_exact_mut(d).enumerate() {
                        m.dequantize_row(r, row);
                    }
                    Ok(all)
                };
                let load = || -> Result<Head, GgufError> {
                    Ok(Head {
                        pooler: if c.pooler { rows("cls.weight", d)? } else { Vec::new() },
                        pooler_bias: bias(c.pooler, "cls.bias")?,
                        out: rows("cls.output.weight", c.n_out)?,
                        out_bias: vector("cls.output.bias")?,
                        n_out: c.n_out,
                    })
                };
                Some(load().map_err(gguf)?)
            }
        };
        let rope = match config.positions {
            Positions::Learned => None,
            Positions::Rope { base } => Some(rope_tables(base, config.head_dim(), config.context_length)),
        };
        let t = max_batch_tokens;
        let widest = d.max(ff);
        Ok(CpuEncoder {
            kernels,
            precision,
            max_batch_tokens,
            token_embd: matrix("token_embd.weight").map_err(gguf)?,
            position_embd: match config.positions {
                Positions::Learned => Some(matrix("position_embd.weight").map_err(gguf)?),
                Positions::Rope { .. } => None,
            },
            rope,
            type0,
            embd_norm: norm("token_embd_norm".into()).map_err(gguf)?,
            layers,
            head,
            x: vec![0.0; t * d],
            tmp: vec![0.0; t * d],
            q: vec![0.0; t * d],
            k: vec![0.0; t * d],
            v: vec![0.0; t * d],
            att: vec![0.0; t * d],
            k16: vec![f16::ZERO; t * d],
            v16: vec![f16::ZERO; t * d],
            ff: vec![0.0; t * ff],
            gate: match config.ffn {
                EncoderFfn::SwiGlu => vec![0.0; t * ff],
                EncoderFfn::Gelu => Vec::new(),
            },
            hidden: vec![0.0; t * ff],
            ones: vec![1.0; ff],
            act_q8: vec![bytemuck::Zeroable::zeroed(); t * widest / QK],
            act_f32: match precision {
                Precision::Float32 => vec![0.0; t * widest],
                Precision::Quantized8 => Vec::new(),
            },
            pool,
            config,
        })
    }

    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The kernel path in use.
    pub fn kernel_path(&self) -> &'static str {
        self.kernels.name
    }

    /// Most tokens of all inputs together in one call.
    pub fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }

    /// Encodes `inputs` (token ids each, special tokens included) and writes each input's vector pooled by
    /// `pooling` into `out` (`[inputs][n_embd]`), not normalized.
    pub fn embed(&mut self, inputs: &[&[TokenId]], pooling: Pooling, out: &mut [f32]) -> Result<(), EncodeError> {
        if matches!(pooling, Pooling::None | Pooling::Rank) {
            return Err(EncodeError::Pooling(pooling));
        }
        let d = self.config.n_embd;
        if out.len() != inputs.len() * d {
            return Err(EncodeError::OutputLength { expected: inputs.len() * d, found: out.len() });
        }
        self.encode(inputs)?;
        let mut start = 0;
        for (input, vector) in inputs.iter().zip(out.chunks_exact_mut(d)) {
            pooling.pool(&self.x[start * d..(start + input.len()) * d], d, vector);
            start += input.len();
        }
        Ok(())
    }

    /// Scores each input with the classification head (rerankers: one relevance logit per query–document pair,
    /// the pair being one input): `out` is `[inputs][n_out]`. The first token's final vector goes through the
    /// pooler (`tanh(cls·x + b)`) when there is one, then the output layer, as llama.cpp's rank pooling.
    pub fn rank(&mut self, inputs: &[&[TokenId]], out: &mut [f32]) -> Result<(), EncodeError> {
        let n_out = self.head.as_ref().map(|h| h.n_out).ok_or(EncodeError::Pooling(Pooling::Rank))?;
        if out.len() != inputs.len() * n_out {
            return Err(EncodeError::OutputLength { expected: inputs.len() * n_out, found: out.len() });
        }
        self.encode(inputs)?;
        let d = self.config.n_embd;
        let head = self.head.as_ref().expect("checked above");
        let mut pooled = vec![0f32; d];
        let mut start = 0;
        for (input, scores) in inputs.iter().zip(out.chunks_exact_mut(n_out)) {
            let cls = &self.x[start * d..(start + 1) * d];
            let x: &[f32] = if head.pooler.is_empty() {
                cls
            } else {
                for ((p, w), b) in pooled.iter_mut().zip(head.pooler.chunks_exact(d)).zip(head.pooler_bias.iter()) {
                    *p = tanh(dot(w, cls) + b);
                }
                &pooled
            };
            for ((s, w), b) in scores.iter_mut().zip(head.out.chunks_exact(d)).zip(head.out_bias.iter()) {
                *s = dot(w, x) + b;
            }
            start += input.len();
        }
        Ok(())
    }

    /// Scores per input of [`CpuEncoder::rank`] (`None`: the model has no classification head).
    pub fn rank_outputs(&self) -> Option<usize> {
        self.head.as_ref().map(|h| h.n_out)
    }

    /// Runs the forward pass over `inputs`, leaving every token's final vector in `x` (`[T][n_embd]`, inputs in
    /// order).
    fn encode(&mut self, inputs: &[&[TokenId]]) -> Result<(), EncodeError> {
        let t = self.check(inputs)?;
        let (d, ff, eps) = (self.config.n_embd, self.config.n_ff, self.config.norm_eps);
        // Embeddings: token + type 0 + position, then LayerNorm.
        let mut row = 0;
        let mut position_row = vec![0f32; d];
        for input in inputs {
            for (pos, &token) in input.iter().enumerate() {
                let x = &mut self.x[row * d..(row + 1) * d];
                self.token_embd.dequantize_row(token as usize, x);
                x.iter_mut().zip(self.type0.iter()).for_each(|(x, ty)| *x += ty);
                if let Some(table) = &self.position_embd {
                    table.dequantize_row(pos, &mut position_row);
                    x.iter_mut().zip(&position_row).for_each(|(x, p)| *x += p);
                }
                row += 1;
            }
        }
        let norm = &self.embd_norm;
        layer_norm_rows(&self.pool, &mut self.x[..t * d], d, &norm.w, &norm.b, eps);
        let spans = input_spans(inputs);
        for l in 0..self.layers.len() {
            // Attention: q, k, v from x, each input's tokens attending to each other.
            self.prepare_input(Source::X, t, d);
            {
                let layer = &self.layers[l];
                let act = activations(self.precision, &self.act_q8, &self.act_f32, t * d);
                let mut jobs = [
                    MatmulJob { weights: &layer.q.w, out: &mut self.q[..t * d] },
                    MatmulJob { weights: &layer.k.w, out: &mut self.k[..t * d] },
                    MatmulJob { weights: &layer.v.w, out: &mut self.v[..t * d] },
                ];
                parallel_matmul(&self.pool, self.kernels, act, t, &mut jobs);
                add_bias_rows(&mut self.q[..t * d], &layer.q.b);
                add_bias_rows(&mut self.k[..t * d], &layer.k.b);
                add_bias_rows(&mut self.v[..t * d], &layer.v.b);
            }
            if let Some((cos, sin)) = &self.rope {
                let (kernels, head_dim) = (self.kernels, self.config.head_dim());
                for buf in [&mut self.q, &mut self.k] {
                    rope_rows(&self.pool, kernels, &mut buf[..t * d], d, head_dim, &spans, cos, sin);
                }
            }
            self.attention(&spans, t);
            // x = LayerNorm(x + att·Woᵀ + bo).
            self.prepare_input(Source::Att, t, d);
            self.project(l, Projection::Output, t);
            residual_layer_norm(
                &self.pool,
                &mut self.x[..t * d],
                &self.tmp[..t * d],
                d,
                &self.layers[l].attn_norm,
                eps,
            );
            // x = LayerNorm(x + GELU(x·Wupᵀ + bup)·Wdownᵀ + bdown), or SwiGLU's (SiLU(x·Wgateᵀ) ⊙ x·Wupᵀ)·Wdownᵀ.
            self.prepare_input(Source::X, t, d);
            self.project(l, Projection::Up, t);
            let kernels = self.kernels;
            match self.config.ffn {
                EncoderFfn::Gelu => {
                    let (ones, pre) = (&self.ones[..], &self.ff[..t * ff]);
                    parallel_rows_mut(&self.pool, &mut self.hidden[..t * ff], ff, &|rows, out| {
                        // GELU (the tanh form, as llama.cpp's `ggml_gelu`) as the kernels' `gelu_mul` by ones:
                        // one arithmetic on every path.
                        for (row, out) in rows.zip(out.chunks_exact_mut(ff)) {
                            kernels.gelu_mul(&pre[row * ff..(row + 1) * ff], ones, out);
                        }
                    });
                }
                EncoderFfn::SwiGlu => {
                    self.project(l, Projection::Gate, t);
                    let (gate, up) = (&self.gate[..t * ff], &self.ff[..t * ff]);
                    parallel_rows_mut(&self.pool, &mut self.hidden[..t * ff], ff, &|rows, out| {
                        let r = rows.start * ff..rows.end * ff;
                        kernels.silu_mul(&gate[r.clone()], &up[r], out);
                    });
                }
            }
            self.prepare_input(Source::Hidden, t, ff);
            self.project(l, Projection::Down, t);
            residual_layer_norm(&self.pool, &mut self.x[..t * d], &self.tmp[..t * d], d, &self.layers[l].out_norm, eps);
        }
        Ok(())
    }

    /// The checks of a batch; its total token count.
    fn check(&self, inputs: &[&[TokenId]]) -> Result<usize, EncodeError> {
        let mut total = 0usize;
        for (index, input) in inputs.iter().enumerate() {
            if input.is_empty() {
                return Err(EncodeError::EmptyInput { index });
            }
            if input.len() > self.config.context_length {
                return Err(EncodeError::InputTooLong { index, tokens: input.len(), max: self.config.context_length });
            }
            if let Some(&token) = input.iter().find(|&&t| t as usize >= self.config.vocab_size) {
                return Err(EncodeError::TokenOutOfRange { index, token, vocab_size: self.config.vocab_size });
            }
            total += input.len();
        }
        if total > self.max_batch_tokens {
            return Err(EncodeError::BatchTooLarge { tokens: total, max: self.max_batch_tokens });
        }
        Ok(total)
    }

    /// Prepares the first `rows` rows of `src` (`width` wide) as the next matmuls' input.
    fn prepare_input(&mut self, src: Source, rows: usize, width: usize) {
        let input = match src {
            Source::X => &self.x[..rows * width],
            Source::Att => &self.att[..rows * width],
            Source::Hidden => &self.hidden[..rows * width],
        };
        match self.precision {
            Precision::Quantized8 => self.kernels.quantize_row_q8a(input, &mut self.act_q8[..rows * width / QK]),
            Precision::Float32 => self.act_f32[..rows * width].copy_from_slice(input),
        }
    }

    /// One of a layer's single projections of the prepared input, with its bias, into `tmp` (output, down) or
    /// `ff` (up).
    fn project(&mut self, l: usize, which: Projection, t: usize) {
        let (d, ff) = (self.config.n_embd, self.config.n_ff);
        let layer = &self.layers[l];
        let no_bias: &[f32] = &[];
        let (w, b, out, in_width) = match which {
            Projection::Output => (&layer.o.w, &layer.o.b[..], &mut self.tmp[..t * d], d),
            Projection::Gate => {
                (layer.gate.as_ref().expect("a SwiGLU layer has its gate"), no_bias, &mut self.gate[..t * ff], d)
            }
            Projection::Up => (&layer.up.w, &layer.up.b[..], &mut self.ff[..t * ff], d),
            Projection::Down => (&layer.down.w, &layer.down.b[..], &mut self.tmp[..t * d], ff),
        };
        let act = activations(self.precision, &self.act_q8, &self.act_f32, t * in_width);
        parallel_matmul(&self.pool, self.kernels, act, t, &mut [MatmulJob { weights: w, out: &mut *out }]);
        add_bias_rows(out, b);
    }

    /// `att = softmax(q·kᵀ / √head_dim)·v` per head within each input, parallel by query rows, through the
    /// decoder's f16 attention kernels (one arithmetic on every path): keys and values are rounded to f16 first, as
    /// llama.cpp's attention takes them.
    fn attention(&mut self, spans: &[(usize, usize)], t: usize) {
        let (d, head_dim) = (self.config.n_embd, self.config.head_dim());
        let scale = 1.0 / (head_dim as f32).sqrt();
        for (src, dst) in [(&self.k, &mut self.k16), (&self.v, &mut self.v16)] {
            dst[..t * d].iter_mut().zip(&src[..t * d]).for_each(|(h, &x)| *h = f16::from_f32(x));
        }
        let (q, k, v, kernels) = (&self.q[..t * d], &self.k16[..t * d], &self.v16[..t * d], self.kernels);
        let longest = spans.iter().map(|s| s.1).max().unwrap_or(0);
        parallel_rows_mut(&self.pool, &mut self.att[..t * d], d, &|rows, out| {
            let mut scores = vec![0f32; longest];
            let mut query = vec![0f32; head_dim];
            for (row, out_row) in rows.zip(out.chunks_exact_mut(d)) {
                let &(start, len) = spans.iter().find(|&&(s, n)| row >= s && row < s + n).expect("a row of an input");
                for h in 0..d / head_dim {
                    let col = h * head_dim;
                    query.iter_mut().zip(&q[row * d + col..][..head_dim]).for_each(|(o, &x)| *o = x * scale);
                    let keys = CacheRun { rows: &k[start * d + col..], width: head_dim, stride: d, n: len };
                    kernels.attention_scores_f16(&query, keys, &mut scores[..len], len);
                    kernels.softmax_inplace(&mut scores[..len]);
                    let out_head = &mut out_row[col..col + head_dim];
                    out_head.fill(0.0);
                    let values = CacheRun { rows: &v[start * d + col..], width: head_dim, stride: d, n: len };
                    kernels.attention_values_f16(&scores[..len], len, values, out_head);
                }
            }
        });
    }
}

#[derive(Clone, Copy)]
enum Source {
    X,
    Att,
    Hidden,
}

#[derive(Clone, Copy)]
enum Projection {
    Output,
    Gate,
    Up,
    Down,
}

/// Each input's first row and token count.
fn input_spans(inputs: &[&[TokenId]]) -> Vec<(usize, usize)> {
    let mut start = 0;
    inputs
        .iter()
        .map(|i| {
            start += i.len();
            (start - i.len(), i.len())
        })
        .collect()
}

fn activations<'a>(precision: Precision, q8: &'a [BlockQ8A], f32s: &'a [f32], n: usize) -> Activations<'a> {
    match precision {
        Precision::Quantized8 => Activations::Q8(&q8[..n / QK]),
        Precision::Float32 => Activations::F32(&f32s[..n]),
    }
}

/// Adds `bias` to every row (nothing when it is empty: the file has no such bias).
fn add_bias_rows(rows: &mut [f32], bias: &[f32]) {
    if bias.is_empty() {
        return;
    }
    for row in rows.chunks_exact_mut(bias.len()) {
        row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
    }
}

/// RoPE's `[positions][head_dim / 2]` cosines and sines (`model::llama::rope`'s portable arithmetic, so every
/// machine has the same table).
fn rope_tables(base: f32, head_dim: usize, positions: usize) -> (Vec<f32>, Vec<f32>) {
    let inv = inv_frequencies(f64::from(base), head_dim);
    let (mut cos, mut sin) = (Vec::with_capacity(positions * inv.len()), Vec::with_capacity(positions * inv.len()));
    for p in 0..positions {
        for &f in &inv {
            let (c, s) = cos_sin(p as f64 * f);
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    (cos, sin)
}

/// Rotates every head of `rows` (`[T][width]`, inputs' tokens in order, positions from 0 in each input) by RoPE,
/// NEOX pairs: dimension `i` with `i + head_dim / 2`, gathered into adjacent pairs for the kernel and scattered back.
#[allow(clippy::too_many_arguments)]
fn rope_rows(
    pool: &ThreadPool,
    kernels: &Kernels,
    rows: &mut [f32],
    width: usize,
    head_dim: usize,
    spans: &[(usize, usize)],
    cos: &[f32],
    sin: &[f32],
) {
    let half = head_dim / 2;
    parallel_rows_mut(pool, rows, width, &|range, out| {
        let mut pairs = vec![0f32; head_dim];
        for (row, x) in range.zip(out.chunks_exact_mut(width)) {
            let &(start, _) = spans.iter().find(|&&(s, n)| row >= s && row < s + n).expect("a row of an input");
            let p = row - start;
            let (c, s) = (&cos[p * half..(p + 1) * half], &sin[p * half..(p + 1) * half]);
            for head in x.chunks_exact_mut(head_dim) {
                for i in 0..half {
                    (pairs[2 * i], pairs[2 * i + 1]) = (head[i], head[i + half]);
                }
                kernels.rope(&mut pairs, c, s);
                for i in 0..half {
                    (head[i], head[i + half]) = (pairs[2 * i], pairs[2 * i + 1]);
                }
            }
        }
    });
}

/// The dot product in one order (so that every path computes the same bits): four running sums, added at the end.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0f32; 4];
    let chunks = a.len() / 4 * 4;
    for (ca, cb) in a[..chunks].chunks_exact(4).zip(b[..chunks].chunks_exact(4)) {
        for i in 0..4 {
            sums[i] += ca[i] * cb[i];
        }
    }
    let mut total = (sums[0] + sums[1]) + (sums[2] + sums[3]);
    for (x, y) in a[chunks..].iter().zip(&b[chunks..]) {
        total += x * y;
    }
    total
}

/// `x = LayerNorm(x + branch)` row by row.
fn residual_layer_norm(pool: &ThreadPool, x: &mut [f32], branch: &[f32], width: usize, norm: &LayerNorm, eps: f32) {
    parallel_rows_mut(pool, x, width, &|rows, out| {
        for (row, x) in rows.zip(out.chunks_exact_mut(width)) {
            x.iter_mut().zip(&branch[row * width..(row + 1) * width]).for_each(|(x, b)| *x += b);
            layer_norm(x, &norm.w, &norm.b, eps);
        }
    });
}

fn layer_norm_rows(pool: &ThreadPool, x: &mut [f32], width: usize, w: &[f32], b: &[f32], eps: f32) {
    parallel_rows_mut(pool, x, width, &|_, out| {
        for x in out.chunks_exact_mut(width) {
            layer_norm(x, w, b, eps);
        }
    });
}

/// `x = (x − mean) / √(variance + eps) ⊙ w + b`, the sums in f64 as ggml's `norm` takes them.
fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = x.len() as f64;
    let mean = (x.iter().map(|&v| f64::from(v)).sum::<f64>() / n) as f32;
    let mut sum2 = 0f64;
    for v in x.iter_mut() {
        *v -= mean;
        sum2 += f64::from(*v) * f64::from(*v);
    }
    let scale = 1.0 / ((sum2 / n) as f32 + eps).sqrt();
    for ((v, &w), &b) in x.iter_mut().zip(w).zip(b) {
        *v = *v * scale * w + b;
    }
}
