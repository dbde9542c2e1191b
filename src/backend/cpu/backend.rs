//! `CpuBackend`: the llama operations on the CPU, over weights borrowed from the memory-mapped model file.
//!
//! Every buffer is allocated when the backend is built, sized for `max_batch_tokens` new tokens per step: a
//! step allocates nothing and spawns nothing. Each operation is at most one parallel region of the pool.

use crate::backend::KvCacheTypes;
use std::fmt;

use super::attention::{attention_layer, AttentionIo, AttentionScratch};
use super::kernels::numerics::soft_cap;
use super::kernels::{kernels, BlockQ8A, Kernels};
use super::kv_cache::{CpuKvCache, KvElementType, KvPool};
use super::latent::{latent_attention, LatentOperands, LatentScratch, MAX_LATENT_HEADS};
use super::model_weights::CpuModelWeights;
use super::moe::{moe_ffn, MoeOperands, MoeScratch};
use super::parallel::{parallel_matmul, parallel_rows_mut, Activations, MatmulJob};
use super::pool::ThreadPool;
use super::step::StepLayout;
use crate::model::gguf::blocks::QK;
use crate::model::gguf::{GgufError, GgufFile};
use crate::model::llama::batch::{validate_batch, validate_window_tables, BatchError, SeqChunk};
use crate::model::llama::forward::{Bias, Buf, LlamaBackend, Norm, Weight};
use crate::model::llama::{FfnActivation, LlamaConfig, QkNorm};

/// How activations meet the quantized weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// Activations quantized to 8-bit blocks, integer dot products (what llama.cpp does; the fast path).
    #[default]
    Quantized8,
    /// f32 activations against dequantized weights (the precise path, for checking against references).
    Float32,
}

/// Sizes and threading of a CPU backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuBackendOptions {
    /// Threads running each operation, the caller's included (≥ 1).
    pub threads: usize,
    /// Most new tokens in one step (prefill chunks and decodes together).
    pub max_batch_tokens: usize,
    /// Positions per KV cache block.
    pub kv_block_size: usize,
    /// KV cache blocks.
    pub kv_num_blocks: usize,
    /// Blocks of a second pool for the sliding-window layers, addressed through `SeqChunk::window_table` (the
    /// caller releases blocks that have left every window). `None`: every layer is in the one pool of
    /// `kv_num_blocks`, the windowed layers storing each position too. Only for a model with windowed layers.
    pub kv_window_blocks: Option<usize>,
    pub precision: Precision,
    /// The KV cache's key and value types (f16 by default; the precise path stores f32 and takes f16 only).
    pub kv_cache: KvCacheTypes,
}

impl CpuBackendOptions {
    /// One sequence of up to `context` positions, all cores, the fast path.
    pub fn single_sequence(context: usize) -> Self {
        CpuBackendOptions {
            threads: default_threads(),
            max_batch_tokens: 512,
            kv_block_size: 16,
            kv_num_blocks: context.div_ceil(16),
            kv_window_blocks: None,
            precision: Precision::Quantized8,
            kv_cache: KvCacheTypes::default(),
        }
    }
}

/// The number of CPUs this process may use.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Why a CPU backend could not be built.
#[derive(Debug)]
pub enum CpuBackendError {
    Gguf(GgufError),
    /// An option out of range, named.
    Options(String),
    /// The worker threads could not be started.
    Threads(std::io::Error),
}

impl fmt::Display for CpuBackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuBackendError::Gguf(e) => e.fmt(f),
            CpuBackendError::Options(e) => write!(f, "invalid CPU backend option: {e}"),
            CpuBackendError::Threads(e) => write!(f, "cannot start CPU worker threads: {e}"),
        }
    }
}

impl std::error::Error for CpuBackendError {}

const N_BUFS: usize = 9;
/// The private buffer `matmul_add` computes into before adding.
const TMP: usize = 8;

fn buf_index(b: Buf) -> usize {
    match b {
        Buf::X => 0,
        Buf::Xn => 1,
        Buf::Q => 2,
        Buf::K => 3,
        Buf::V => 4,
        Buf::Att => 5,
        Buf::Gate => 6,
        Buf::Up => 7,
    }
}

/// The llama operations on the CPU.
pub struct CpuBackend<'m> {
    config: LlamaConfig,
    options: CpuBackendOptions,
    kernels: &'static Kernels,
    pool: ThreadPool,
    weights: CpuModelWeights<'m>,
    cache: CpuKvCache,
    step: StepLayout,
    attention: AttentionScratch,
    /// Indexed by `buf_index`, plus `TMP`; each `[max_batch_tokens][width of that buffer]`.
    bufs: [Vec<f32>; N_BUFS],
    /// `[max_batch_tokens][n_ff]`: the gated activation's product, swapped into `Gate`.
    hidden: Vec<f32>,
    /// `[max_batch_tokens][max(n_embd, n_ff, q_dim) / 32]`: quantized activations of the current matmul input.
    act_q8: Vec<BlockQ8A>,
    /// `[max_batch_tokens][max(n_embd, n_ff, q_dim)]` on the precise path (empty otherwise): the matmul input.
    act_f32: Vec<f32>,
    /// The mixture-of-experts blocks' buffers (`LlamaConfig::moe`).
    moe: Option<MoeScratch>,
    /// The latent attention's buffers (`LlamaConfig::latent`).
    latent: Option<LatentScratch>,
}

impl<'m> CpuBackend<'m> {
    /// Builds a backend for `file`, whose hyperparameters `config` were read from it, on the kernel path of
    /// [`kernels`] (the best this CPU runs, or the one `EMBER_CPU_KERNELS` names).
    pub fn new(file: &'m GgufFile, config: LlamaConfig, options: CpuBackendOptions) -> Result<Self, CpuBackendError> {
        Self::with_kernels(file, config, options, kernels())
    }

    /// [`CpuBackend::new`] on a given kernel path (e.g. [`super::kernels::kernels_named`]'s): every path computes
    /// the same bits, so this chooses speed only; tests use it to compare paths in one process.
    pub fn with_kernels(
        file: &'m GgufFile,
        config: LlamaConfig,
        options: CpuBackendOptions,
        kernels: &'static Kernels,
    ) -> Result<Self, CpuBackendError> {
        let bad = |m: String| Err(CpuBackendError::Options(m));
        if options.threads == 0 {
            return bad("threads must be at least 1".into());
        }
        if options.max_batch_tokens == 0 || options.max_batch_tokens > 1 << 20 {
            return bad(format!("max_batch_tokens {} is not in 1..=1048576", options.max_batch_tokens));
        }
        if options.kv_block_size == 0 || options.kv_block_size > 1 << 16 {
            return bad(format!("kv_block_size {} is not in 1..=65536", options.kv_block_size));
        }
        if options.kv_num_blocks == 0 || options.kv_num_blocks > u32::MAX as usize {
            return bad(format!("kv_num_blocks {} is not in 1..=4294967295", options.kv_num_blocks));
        }
        match (options.kv_window_blocks, config.max_window()) {
            (Some(_), None) => return bad("kv_window_blocks is set, but the model has no sliding-window layers".into()),
            // The last block number is the table's `NO_BLOCK`.
            (Some(n), Some(_)) if n == 0 || n >= u32::MAX as usize => {
                return bad(format!("kv_window_blocks {n} is not in 1..=4294967294"));
            }
            _ => {}
        }
        if !config.n_embd.is_multiple_of(QK) || !config.n_ff.is_multiple_of(QK) {
            return bad(format!("widths {} and {} must be multiples of {QK}", config.n_embd, config.n_ff));
        }
        if let Some(moe) = &config.moe {
            // The experts' buffers hold whole 32-element blocks of their rows (`ExpertScratch`).
            let shared = moe.shared.map_or(QK, |s| s.n_ff);
            if !moe.n_ff_exp.is_multiple_of(QK) || !shared.is_multiple_of(QK) {
                return bad(format!("expert widths {} and {shared} must be multiples of {QK}", moe.n_ff_exp));
            }
        }
        if let Some(latent) = &config.latent {
            // Their rows are matmul inputs, quantized in whole 32-element blocks; a task per head.
            let widths = [latent.nope_dim, latent.kv_lora_rank, latent.q_lora_rank.unwrap_or(QK)];
            if widths.iter().any(|w| !w.is_multiple_of(QK)) {
                return bad(format!("latent attention widths {widths:?} must be multiples of {QK}"));
            }
            if config.n_head > MAX_LATENT_HEADS {
                return bad(format!("{} heads of latent attention: at most {MAX_LATENT_HEADS}", config.n_head));
            }
        }
        let pool = ThreadPool::new(options.threads).map_err(CpuBackendError::Threads)?;
        // The fast path's kernels read the quantized matrices packed, by the pool's threads at once.
        let run = |n: usize, task: &(dyn Fn(usize) + Sync)| pool.run(n, task);
        let pack = (options.precision == Precision::Quantized8).then_some(&run as _);
        let weights = CpuModelWeights::new(file, &config, pack).map_err(CpuBackendError::Gguf)?;
        if !weights.reads_the_file() {
            // Everything is packed or copied: a mapped file's pages need not stay resident for this backend.
            file.release_tensor_data();
        }
        let kv_types = match options.precision {
            Precision::Quantized8 => (options.kv_cache.keys.into(), options.kv_cache.values.into()),
            Precision::Float32 if options.kv_cache == KvCacheTypes::default() => {
                (KvElementType::F32, KvElementType::F32)
            }
            Precision::Float32 => {
                return bad(
                    "the precise path keeps an f32 KV cache: kv_cache types other than f16 need the quantized path"
                        .into(),
                )
            }
        };
        let blocked = options.kv_cache.keys.is_blocked() || options.kv_cache.values.is_blocked();
        let layout = super::attention::HeadLayout::of(&config);
        if blocked && !(layout.key_width.is_multiple_of(QK) && layout.value_width.is_multiple_of(QK)) {
            return bad(format!(
                "a {} / {} KV cache needs heads a multiple of {QK} wide (keys {}, values {})",
                options.kv_cache.keys, options.kv_cache.values, layout.key_width, layout.value_width
            ));
        }
        let pools: Vec<KvPool> = config
            .layers
            .iter()
            .map(|l| match (l.window, options.kv_window_blocks) {
                (Some(_), Some(_)) => KvPool::Window,
                _ => KvPool::Global,
            })
            .collect();
        let cache = CpuKvCache::new(
            &pools,
            (config.n_head_kv, config.head_dim),
            options.kv_block_size,
            options.kv_num_blocks,
            options.kv_window_blocks.unwrap_or(0),
            kv_types,
            config.latent.is_none(),
        );
        let t = options.max_batch_tokens;
        let (d, kv, ff) = (config.n_embd, config.kv_dim(), config.n_ff);
        let (q, att) = (config.query_width(), config.attention_width());
        if !att.is_multiple_of(QK) {
            return bad(format!("attention output width {att} must be a multiple of {QK}"));
        }
        // A mixture-of-experts model's dense FFN width is unused unless some leading layers are dense: its experts
        // have buffers of their own. Latent attention has no value rows.
        let ff = if config.has_dense_ffn() { ff } else { 0 };
        let v = if config.latent.is_some() { 0 } else { kv };
        let widths = [d, d, q, kv, v, att, ff, ff, d];
        let q_rank = config.latent.and_then(|l| l.q_lora_rank).unwrap_or(0);
        let widest = d.max(ff).max(att).max(q_rank);
        Ok(CpuBackend {
            kernels,
            pool,
            weights,
            cache,
            step: StepLayout::default(),
            attention: AttentionScratch::new(&config, options.threads, options.max_batch_tokens),
            bufs: widths.map(|w| vec![0.0; t * w]),
            hidden: vec![0.0; t * ff],
            act_q8: vec![bytemuck::Zeroable::zeroed(); t * widest / QK],
            act_f32: match options.precision {
                Precision::Float32 => vec![0.0; t * widest],
                Precision::Quantized8 => Vec::new(),
            },
            moe: config.moe.as_ref().map(|moe| MoeScratch::new(&config, moe, t, options.precision)),
            latent: config.latent.map(|shapes| LatentScratch::new(&config, shapes, t, options.precision)),
            config,
            options,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn options(&self) -> &CpuBackendOptions {
        &self.options
    }

    /// The kernel path in use (`"scalar"`, `"avx2"`, `"avx512"`, `"amx"`).
    pub fn kernel_path(&self) -> &'static str {
        self.kernels.name
    }

    /// Bytes allocated for the KV cache, both pools (committed by the OS only as positions are written).
    pub fn kv_cache_bytes(&self) -> usize {
        self.cache.allocated_bytes()
    }

    /// The rows of activation buffer `b` the current step has (`T` of them, `b`'s width each), as the operations so
    /// far left them: what a test reads to run another backend's kernels on this backend's operands and compare
    /// (tests/cuda_kv_fixtures.rs: the CUDA attention on this backend's queries, keys and values).
    #[doc(hidden)]
    pub fn buffer(&self, b: Buf) -> &[f32] {
        &self.bufs[buf_index(b)][..self.step.n_tokens() * self.width(b)]
    }

    /// The final-normed hidden state of row `row` of the last step (the vector the output projection would read)
    /// into `out` (`n_embd`): what decoder embedders pool (`decoder_embed.rs`). The same kernel as the logits' norm,
    /// so the vector is the bits the LM head sees.
    pub fn final_hidden(&self, row: usize, out: &mut [f32]) {
        let d = self.config.n_embd;
        assert!(row < self.step.n_tokens() && out.len() == d, "a row of the last step, into n_embd floats");
        let x = &self.bufs[buf_index(Buf::X)][row * d..(row + 1) * d];
        self.kernels.rms_norm(x, self.weights.norm(Norm::Output), self.config.rms_eps, out);
    }

    /// The KV cache, for the same tests (its bytes against the CUDA kernels' stores).
    #[doc(hidden)]
    pub fn kv_cache(&self) -> &CpuKvCache {
        &self.cache
    }

    /// Bytes of weights a decode step reads.
    pub fn weight_bytes_per_token(&self) -> usize {
        // A mixture of experts reads its routed experts' bytes only for the ones a token chose.
        self.weights.bytes_read_per_token(self.config.moe.as_ref().map_or(0, |m| m.n_expert_used))
    }

    fn width(&self, b: Buf) -> usize {
        match b {
            Buf::K | Buf::V => self.config.kv_dim(),
            Buf::Gate | Buf::Up => self.config.n_ff,
            Buf::Q => self.config.query_width(),
            Buf::Att => self.config.attention_width(),
            Buf::X | Buf::Xn => self.config.n_embd,
        }
    }

    /// Prepares the first `rows` rows of `src` (`width` wide) as the right-hand side of the next matmuls:
    /// quantized into `act_q8`, or copied into `act_f32` on the precise path.
    fn prepare_input(&mut self, src: usize, rows: usize, width: usize) {
        let input = &self.bufs[src][..rows * width];
        match self.options.precision {
            Precision::Quantized8 => self.kernels.quantize_row_q8a(input, &mut self.act_q8[..rows * width / QK]),
            Precision::Float32 => self.act_f32[..rows * width].copy_from_slice(input),
        }
    }

    /// The prepared input of `rows` rows, `width` wide.
    fn activations(&self, rows: usize, width: usize) -> Activations<'_> {
        match self.options.precision {
            Precision::Quantized8 => Activations::Q8(&self.act_q8[..rows * width / QK]),
            Precision::Float32 => Activations::F32(&self.act_f32[..rows * width]),
        }
    }

    /// Runs the matmuls `outs` (weight, output buffer index) over the first `T` rows of buffer `src`.
    fn run_matmuls<const N: usize>(&mut self, src: usize, width: usize, outs: [(Weight, usize); N]) {
        let t = self.step.n_tokens();
        self.prepare_input(src, t, width);
        let Self { bufs, act_q8, act_f32, pool, kernels, options, weights, .. } = self;
        let act = match options.precision {
            Precision::Quantized8 => Activations::Q8(&act_q8[..t * width / QK]),
            Precision::Float32 => Activations::F32(&act_f32[..t * width]),
        };
        let mut out_bufs = bufs.get_disjoint_mut(outs.map(|o| o.1)).expect("matmul outputs are distinct").into_iter();
        let mut jobs: [MatmulJob<'_, '_>; N] = std::array::from_fn(|i| MatmulJob {
            weights: weights.matrix(outs[i].0),
            out: out_bufs.next().expect("one buffer per output"),
        });
        parallel_matmul(pool, kernels, act, t, &mut jobs);
    }
}

impl<'m> LlamaBackend for CpuBackend<'m> {
    type Error = BatchError;

    fn begin(&mut self, batch: &[SeqChunk<'_>]) -> Result<(), BatchError> {
        validate_batch(
            batch,
            self.options.max_batch_tokens,
            self.config.context_length,
            self.config.vocab_size,
            self.cache.block_size(),
            self.cache.num_blocks(),
        )?;
        validate_window_tables(
            batch,
            self.config.max_window().unwrap_or(0),
            self.cache.block_size(),
            self.cache.window_blocks(),
        )?;
        self.step.build(batch, &self.config, &self.cache);
        Ok(())
    }

    fn embed(&mut self, dst: Buf) {
        let d = self.config.n_embd;
        let table = self.weights.token_embd();
        let out = &mut self.bufs[buf_index(dst)];
        for (row, &token) in out.chunks_exact_mut(d).zip(self.step.tokens()) {
            table.dequantize_row(token as usize, row);
            if let Some(scale) = self.config.embed_scale {
                row.iter_mut().for_each(|x| *x *= scale);
            }
        }
    }

    fn rms_norm(&mut self, src: Buf, weight: Norm, dst: Buf) {
        let (d, t, eps) = (self.config.n_embd, self.step.n_tokens(), self.config.rms_eps);
        let w = self.weights.norm(weight);
        let kernels = self.kernels;
        let [src_buf, dst_buf] =
            self.bufs.get_disjoint_mut([buf_index(src), buf_index(dst)]).expect("norm source and destination differ");
        let src_buf = &src_buf[..t * d];
        parallel_rows_mut(&self.pool, &mut dst_buf[..t * d], d, &|rows, out| {
            for (i, row) in rows.enumerate() {
                kernels.rms_norm(&src_buf[row * d..(row + 1) * d], w, eps, &mut out[i * d..(i + 1) * d]);
            }
        });
    }

    fn matmul(&mut self, src: Buf, outputs: &[(Weight, Buf)]) {
        let (width, s) = (self.width(src), buf_index(src));
        let out = |i: usize| (outputs[i].0, buf_index(outputs[i].1));
        match outputs.len() {
            1 => self.run_matmuls(s, width, [out(0)]),
            2 => self.run_matmuls(s, width, [out(0), out(1)]),
            3 => self.run_matmuls(s, width, [out(0), out(1), out(2)]),
            n => panic!("{n} projections of one input: the forward pass groups at most three"),
        }
    }

    fn add_bias(&mut self, dst: Buf, bias: Bias) {
        let (width, t) = (self.width(dst), self.step.n_tokens());
        let b = self.weights.bias(bias);
        let kernels = self.kernels;
        for row in self.bufs[buf_index(dst)][..t * width].chunks_exact_mut(width) {
            kernels.add_assign(row, b);
        }
    }

    fn matmul_add(&mut self, src: Buf, w: Weight, dst: Buf) {
        let width = self.width(src);
        self.run_matmuls(buf_index(src), width, [(w, TMP)]);
        let n = self.step.n_tokens() * self.width(dst);
        let kernels = self.kernels;
        let [sum, tmp] = self.bufs.get_disjoint_mut([buf_index(dst), TMP]).expect("distinct buffers");
        kernels.add_assign(&mut sum[..n], &tmp[..n]);
    }

    fn add_scaled(&mut self, src: Buf, factor: f32, dst: Buf) {
        let n = self.step.n_tokens() * self.width(dst);
        let [sum, branch] = self.bufs.get_disjoint_mut([buf_index(dst), buf_index(src)]).expect("distinct buffers");
        sum[..n].iter_mut().zip(&branch[..n]).for_each(|(s, b)| *s += factor * b);
    }

    fn rms_norm_add(&mut self, src: Buf, weight: Norm, dst: Buf) {
        let (d, t, eps) = (self.config.n_embd, self.step.n_tokens(), self.config.rms_eps);
        let w = self.weights.norm(weight);
        let kernels = self.kernels;
        let [src_buf, tmp] = self.bufs.get_disjoint_mut([buf_index(src), TMP]).expect("distinct buffers");
        let src_buf = &src_buf[..t * d];
        parallel_rows_mut(&self.pool, &mut tmp[..t * d], d, &|rows, out| {
            for (i, row) in rows.enumerate() {
                kernels.rms_norm(&src_buf[row * d..(row + 1) * d], w, eps, &mut out[i * d..(i + 1) * d]);
            }
        });
        let [sum, tmp] = self.bufs.get_disjoint_mut([buf_index(dst), TMP]).expect("distinct buffers");
        kernels.add_assign(&mut sum[..t * d], &tmp[..t * d]);
    }

    fn attention(&mut self, layer: usize) {
        let [q, k, v, att] = self
            .bufs
            .get_disjoint_mut([buf_index(Buf::Q), buf_index(Buf::K), buf_index(Buf::V), buf_index(Buf::Att)])
            .expect("distinct buffers");
        let (q_norm, k_norm) = (self.weights.norm(Norm::QHead(layer)), self.weights.norm(Norm::KHead(layer)));
        let head_norms = match self.config.qk_norm {
            Some(QkNorm::Heads) => Some((q_norm, k_norm)),
            Some(QkNorm::Rows) => {
                // OLMo 2's: whole rows, before the attention takes the heads apart.
                let (t, eps) = (self.step.n_tokens(), self.config.rms_eps);
                normalize_rows(self.kernels, &mut q[..t * self.config.q_dim()], q_norm, eps);
                normalize_rows(self.kernels, &mut k[..t * self.config.kv_dim()], k_norm, eps);
                None
            }
            None => None,
        };
        let io = AttentionIo { q, k, v, out: att, head_norms, sinks: self.weights.sinks(layer) };
        attention_layer(
            &self.pool,
            self.kernels,
            &self.config,
            &self.step,
            &mut self.cache,
            &mut self.attention,
            layer,
            io,
        );
    }

    fn latent_attention(&mut self, layer: usize, input: Buf) {
        let (t, d, eps) = (self.step.n_tokens(), self.config.n_embd, self.config.rms_eps);
        let (kv, q_width, att_width) = (self.config.kv_dim(), self.config.query_width(), self.config.attention_width());
        self.prepare_input(buf_index(input), t, d);
        let Self {
            bufs, act_q8, act_f32, pool, kernels, options, weights, latent, cache, attention, step, config, ..
        } = self;
        let scratch = latent.as_mut().expect("a latent-attention model has its buffers");
        let lw = weights.latent(layer);
        let [q, k, att] =
            bufs.get_disjoint_mut([buf_index(Buf::Q), buf_index(Buf::K), buf_index(Buf::Att)]).expect("distinct");
        let (q, k) = (&mut q[..t * q_width], &mut k[..t * kv]);
        let precision = options.precision;
        match &lw.q_a {
            Some((q_a, q_a_norm)) => {
                // The compressed queries, normalized, become the input of `attn_q_b`.
                let rank = q_a.n_rows();
                let mut jobs = [
                    MatmulJob { weights: q_a, out: &mut scratch.q_latent[..t * rank] },
                    MatmulJob { weights: &lw.kv_a, out: k },
                ];
                parallel_matmul(pool, kernels, activations_of(precision, act_q8, act_f32, t * d), t, &mut jobs);
                let q_latent = scratch.normalize_q_latent(kernels, t * rank, q_a_norm, eps);
                match precision {
                    Precision::Quantized8 => kernels.quantize_row_q8a(q_latent, &mut act_q8[..t * rank / QK]),
                    Precision::Float32 => act_f32[..t * rank].copy_from_slice(q_latent),
                }
                let act = activations_of(precision, act_q8, act_f32, t * rank);
                parallel_matmul(pool, kernels, act, t, &mut [MatmulJob { weights: &lw.q, out: q }]);
            }
            None => {
                let mut jobs = [MatmulJob { weights: &lw.q, out: q }, MatmulJob { weights: &lw.kv_a, out: k }];
                parallel_matmul(pool, kernels, activations_of(precision, act_q8, act_f32, t * d), t, &mut jobs);
            }
        }
        let op = LatentOperands { pool, kernels, precision: options.precision, config, step, weights: lw, layer };
        latent_attention(&op, scratch, cache, attention, q, k, &mut att[..t * att_width]);
    }

    fn gated_activation(&mut self) {
        let (ff, t) = (self.config.n_ff, self.step.n_tokens());
        let (kernels, activation) = (self.kernels, self.config.ffn_activation);
        let [gate, up] = self.bufs.get_disjoint_mut([buf_index(Buf::Gate), buf_index(Buf::Up)]).expect("distinct");
        let (gate_in, up_in) = (&gate[..t * ff], &up[..t * ff]);
        parallel_rows_mut(&self.pool, &mut self.hidden[..t * ff], ff, &|rows, out| {
            let r = rows.start * ff..rows.end * ff;
            match activation {
                FfnActivation::Silu => kernels.silu_mul(&gate_in[r.clone()], &up_in[r], out),
                FfnActivation::GeluTanh => kernels.gelu_mul(&gate_in[r.clone()], &up_in[r], out),
            }
        });
        std::mem::swap(&mut self.bufs[buf_index(Buf::Gate)], &mut self.hidden);
    }

    fn moe_ffn(&mut self, layer: usize, io: Buf) {
        let n = self.step.n_tokens() * self.config.n_embd;
        let op = MoeOperands {
            pool: &self.pool,
            kernels: self.kernels,
            precision: self.options.precision,
            config: &self.config,
            experts: self.weights.experts(layer),
        };
        let scratch = self.moe.as_mut().expect("a mixture-of-experts model has its buffers");
        let [rows, tmp] = self.bufs.get_disjoint_mut([buf_index(io), TMP]).expect("distinct buffers");
        moe_ffn(&op, scratch, &rows[..n], &mut tmp[..n]);
        rows[..n].copy_from_slice(&tmp[..n]);
    }

    fn logits(&mut self, out: &mut [f32]) -> Result<(), BatchError> {
        let (d, vocab) = (self.config.n_embd, self.config.vocab_size);
        let n_rows = self.step.logit_rows().count();
        if out.len() != n_rows * vocab {
            return Err(BatchError::LogitsBuffer { expected: n_rows * vocab, found: out.len() });
        }
        if n_rows == 0 {
            return Ok(());
        }
        // Final norm of just the rows that need logits, gathered into Xn.
        let norm = self.weights.norm(Norm::Output);
        let [x, xn] = self.bufs.get_disjoint_mut([buf_index(Buf::X), buf_index(Buf::Xn)]).expect("distinct");
        for (i, row) in self.step.logit_rows().enumerate() {
            self.kernels.rms_norm(&x[row * d..(row + 1) * d], norm, self.config.rms_eps, &mut xn[i * d..(i + 1) * d]);
        }
        self.prepare_input(buf_index(Buf::Xn), n_rows, d);
        let output = self.weights.output();
        let act = self.activations(n_rows, d);
        parallel_matmul(&self.pool, self.kernels, act, n_rows, &mut [MatmulJob { weights: output, out }]);
        if let Some(divisor) = self.config.logit_scale {
            let factor = 1.0 / divisor;
            out.iter_mut().for_each(|x| *x *= factor);
        }
        if let Some(cap) = self.config.final_softcap {
            out.iter_mut().for_each(|x| *x = soft_cap(*x, cap));
        }
        Ok(())
    }
}

/// The first `n` prepared activations: quantized blocks, or floats on the precise path.
fn activations_of<'a>(precision: Precision, q8: &'a [BlockQ8A], f32s: &'a [f32], n: usize) -> Activations<'a> {
    match precision {
        Precision::Quantized8 => Activations::Q8(&q8[..n / QK]),
        Precision::Float32 => Activations::F32(&f32s[..n]),
    }
}

/// Each row of `rows` (rows as wide as `weight`) RMS-normalized in place.
fn normalize_rows(kernels: &Kernels, rows: &mut [f32], weight: &[f32], eps: f32) {
    let mut normed = vec![0f32; weight.len()];
    for row in rows.chunks_exact_mut(weight.len()) {
        kernels.rms_norm(row, weight, eps, &mut normed);
        row.copy_from_slice(&normed);
    }
}
