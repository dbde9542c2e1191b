//! `CudaBackend`: the llama operations on an NVIDIA GPU.
//!
//! The trait's operations are recorded (`ops.rs`); `logits` runs the step: one upload of the step's metadata,
//! then either the CUDA graph recorded for a decode step of this size or the planned launches one by one, then
//! one copy back of the logits (or of each row's top k, [`CudaBackend::forward_top_k`]). That copy waits for the
//! device, so when a step returns, its tokens' results are on the host: an engine that timestamps a token after
//! its step times the device work that produced it.

use std::fmt;

use cudarc::driver::CudaSlice;

use super::buffers::Buffers;
use super::calls::{HeadShape, TopKCall, ATTENTION_WIDE_MAX_HEAD_DIM, TOP_K_MAX};
use super::calls_moe::ROUTE_MAX_EXPERTS;
use super::device::{guard, CudaDevice, DeviceInfo};
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use super::execute::StepRun;
use super::graph::GraphCache;
use super::kv_cache::{effective_types, DeviceKvCache};
use super::launch::Kernels;
use super::module::KernelModule;
use super::ops::{plan, Launch, Op, Outputs, MAX_OUTPUTS};
use super::step_meta::{MetaLayout, StepMeta};
use super::weights::DeviceWeights;
use crate::backend::KvCacheTypes;
use crate::model::gguf::blocks::QK;
use crate::model::gguf::GgufFile;
use crate::model::llama::architecture::ExpertGlu;
use crate::model::llama::batch::{total_logit_rows, validate_batch, BatchError, SeqChunk};
use crate::model::llama::forward::{forward, Bias, Buf, LlamaBackend, Norm, Weight};
use crate::model::llama::latent::LatentAttention;
use crate::model::llama::LlamaConfig;
use crate::model::TokenId;

/// Sizes of a CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaBackendOptions {
    /// The device's ordinal.
    pub device: usize,
    /// Most new tokens in one step (prefill chunks and decodes together).
    pub max_batch_tokens: usize,
    /// Positions per KV cache block.
    pub kv_block_size: usize,
    /// KV cache blocks.
    pub kv_num_blocks: usize,
    /// The KV cache's key and value types (f16, q8_0 or q4_0 each, as the CPU backend's `kv_cache`; a
    /// latent-attention model's values are its keys, of the keys' type).
    pub kv_cache: KvCacheTypes,
    /// Replay decode steps from CUDA graphs (on unless comparing against the launch-by-launch path).
    pub graphs: bool,
}

impl CudaBackendOptions {
    /// One sequence of up to `context` positions on device 0.
    pub fn single_sequence(context: usize) -> Self {
        CudaBackendOptions {
            device: 0,
            max_batch_tokens: 512,
            kv_block_size: 16,
            kv_num_blocks: context.div_ceil(16),
            kv_cache: KvCacheTypes::default(),
            graphs: true,
        }
    }
}

/// What `logits` returns to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StepOutput {
    /// Whole logits rows, into the caller's buffer.
    Logits,
    /// The `k` largest of each row, into `top_ids` / `top_values`.
    TopK(usize),
}

/// The llama operations on a GPU.
pub struct CudaBackend {
    // Fields drop in order: the graphs, which hold the buffers' addresses, go before the buffers.
    graphs: GraphCache,
    buffers: Buffers,
    /// `[layout.total()]`: the step's metadata (see `step_meta.rs`).
    meta_device: CudaSlice<i32>,
    cache: DeviceKvCache,
    weights: DeviceWeights,
    kernels: Kernels,
    meta: StepMeta,
    /// The current step's operations, recorded since `begin`.
    ops: Vec<Op>,
    /// Reused: the current step's launches.
    launches: Vec<Launch>,
    output: StepOutput,
    /// Whether the current step is a decode step that a graph runs (its rows padded to a graph's bucket).
    graph_step: bool,
    /// `[rows][k]` on the host: the top-k ids and values of the last `forward_top_k`.
    top_ids: Vec<i32>,
    top_values: Vec<f32>,
    /// Set when a failure left the device in an unknown state: every later step fails with it.
    poisoned: Option<String>,
    config: LlamaConfig,
    options: CudaBackendOptions,
    device: CudaDevice,
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackend").field("device", &self.device.info).finish_non_exhaustive()
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Work still queued may read any buffer: wait for it before they are freed. A failure has nowhere to go.
        let _ = guard(|| self.device.stream.synchronize().map_err(CudaBackendError::driver("synchronizing")));
    }
}

impl CudaBackend {
    /// Opens the device, compiles and loads the kernels, uploads the weights of `file` (whose hyperparameters
    /// `config` were read from it) and allocates the KV cache and buffers.
    pub fn new(file: &GgufFile, config: LlamaConfig, options: CudaBackendOptions) -> Result<Self, CudaBackendError> {
        // The device first: without one, that is the answer, whatever the options.
        let device = CudaDevice::open(options.device)?;
        check_options(&config, &options)?;
        guard(|| {
            let stream = &device.stream;
            let weights = DeviceWeights::upload(file, &config, stream)?;
            let keys_only = config.latent.is_some();
            let mut types = weights.types();
            // The attention kernels of the cache's own pair of types only.
            types.kv_caches = vec![effective_types(options.kv_cache, keys_only)];
            let module = KernelModule::load(&device.context, device.info.compute_capability, &types)?;
            let kernels = Kernels::load(&module, &types)?;
            let cache = DeviceKvCache::new(
                stream,
                config.n_layer,
                config.kv_dim(),
                options.kv_block_size,
                options.kv_num_blocks,
                options.kv_cache,
                keys_only,
            )?;
            let buffers = Buffers::new(stream, &config, options.max_batch_tokens)?;
            let layout = MetaLayout {
                max_tokens: options.max_batch_tokens,
                max_table_entries: options.max_batch_tokens
                    * config.context_length.div_ceil(options.kv_block_size).min(options.kv_num_blocks),
            };
            let meta_device =
                stream.alloc_zeros(layout.total()).map_err(CudaBackendError::driver("allocating step metadata"))?;
            stream.synchronize().map_err(CudaBackendError::driver("uploading the model"))?;
            Ok(CudaBackend {
                graphs: GraphCache::new(options.max_batch_tokens),
                buffers,
                meta_device,
                cache,
                weights,
                kernels,
                meta: StepMeta::new(layout),
                ops: Vec::new(),
                launches: Vec::new(),
                output: StepOutput::Logits,
                graph_step: false,
                top_ids: Vec::new(),
                top_values: Vec::new(),
                poisoned: None,
                config: config.clone(),
                options: options.clone(),
                device,
            })
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn options(&self) -> &CudaBackendOptions {
        &self.options
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.device.info
    }

    /// Bytes of weights a decode step reads.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.weights.bytes_per_token(&self.config)
    }

    /// CUDA graphs recorded so far, and why graphs are off if a capture failed.
    pub fn graphs(&self) -> (usize, Option<&str>) {
        (self.graphs.recorded(), self.graphs.disabled_reason())
    }

    /// Runs one step of `batch` as [`forward`] does, but returns for each sequence that wants logits its `k`
    /// largest logits, largest first (the lower id first among equal logits, so `k = 1` is the greedy argmax):
    /// `ids` and `values` are `[S][k]`. Only these cross to the host, not the `[S][vocab]` rows.
    pub fn forward_top_k(
        &mut self,
        batch: &[SeqChunk<'_>],
        k: usize,
        ids: &mut [TokenId],
        values: &mut [f32],
    ) -> Result<(), CudaBackendError> {
        let rows = total_logit_rows(batch);
        if k == 0 || k > TOP_K_MAX || k > self.config.vocab_size {
            return Err(CudaBackendError::Options(format!("top-k of {k} (1..={TOP_K_MAX})")));
        }
        if ids.len() != rows * k || values.len() != rows * k {
            return Err(BatchError::LogitsBuffer { expected: rows * k, found: ids.len().min(values.len()) }.into());
        }
        self.output = StepOutput::TopK(k);
        let config = self.config.clone();
        let result = forward(&config, self, batch, &mut []);
        self.output = StepOutput::Logits;
        result?;
        for (dst, &id) in ids.iter_mut().zip(&self.top_ids) {
            // The kernel returns vocabulary ids, which are below the vocabulary size.
            *dst = id as TokenId;
        }
        values.copy_from_slice(&self.top_values[..rows * k]);
        Ok(())
    }

    fn record(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Runs the recorded step on the device and brings its output back.
    fn run_step(&mut self, out: &mut [f32]) -> Result<(), CudaBackendError> {
        let stream = &self.device.stream;
        let upload = self.meta.upload();
        let mut meta_prefix = self.meta_device.slice_mut(..upload.len());
        stream.memcpy_htod(upload, &mut meta_prefix).map_err(CudaBackendError::driver("uploading step metadata"))?;

        let (rows, logit_rows) = (self.meta.rows(), self.meta.logit_rows());
        plan(&self.ops, rows <= super::calls::SMALL_BATCH_MAX_TOKENS, &mut self.launches);
        let run = StepRun {
            stream,
            kernels: &self.kernels,
            config: &self.config,
            weights: &self.weights,
            cache: &self.cache,
            buffers: &self.buffers,
            meta: DeviceArray::new(&self.meta_device, stream),
            layout: self.meta.layout(),
            rows,
            logit_rows,
        };
        if self.graph_step {
            let launched = match self.graphs.get(rows, &self.ops) {
                Some(graph) => graph.launch().map_err(CudaBackendError::driver("launching a graph")),
                None => match self.graphs.record(stream, rows, &self.ops, || run.enqueue(&self.launches)) {
                    Ok(graph) => graph.launch().map_err(CudaBackendError::driver("launching a graph")),
                    // A failed capture turned graphs off; this step runs launch by launch.
                    Err(_) => run.enqueue(&self.launches),
                },
            };
            launched?;
        } else {
            run.enqueue(&self.launches)?;
        }

        let n_logits = self.meta.n_logits();
        match self.output {
            // A step without logits (a prompt chunk that is not the prompt's last) copies nothing back.
            _ if n_logits == 0 => {}
            StepOutput::Logits => {
                let vocab = self.config.vocab_size;
                let logits = self.buffers.logits.slice(..n_logits * vocab);
                stream.memcpy_dtoh(&logits, out).map_err(CudaBackendError::driver("copying logits"))?;
            }
            StepOutput::TopK(k) => {
                let call = TopKCall {
                    logits: DeviceArray::new(&self.buffers.logits, stream),
                    ids: DeviceArray::new(&self.buffers.top_ids, stream),
                    values: DeviceArray::new(&self.buffers.top_values, stream),
                    n_rows: n_logits,
                    vocab: self.config.vocab_size,
                    k,
                };
                self.kernels.top_k(stream, &call)?;
                self.top_ids.resize(n_logits * k, 0);
                self.top_values.resize(n_logits * k, 0.0);
                let ids = self.buffers.top_ids.slice(..n_logits * k);
                stream.memcpy_dtoh(&ids, &mut self.top_ids).map_err(CudaBackendError::driver("copying top-k ids"))?;
                let values = self.buffers.top_values.slice(..n_logits * k);
                stream.memcpy_dtoh(&values, &mut self.top_values).map_err(CudaBackendError::driver("copying top-k"))?;
            }
        }
        // The copies above return once done, but an error of an earlier kernel surfaces only at a synchronization.
        stream.synchronize().map_err(CudaBackendError::driver("running a step"))
    }
}

/// Checks the options against the model and the kernels' limits.
fn check_options(config: &LlamaConfig, options: &CudaBackendOptions) -> Result<(), CudaBackendError> {
    let bad = |m: String| Err(CudaBackendError::Options(m));
    if options.max_batch_tokens == 0 || options.max_batch_tokens > 1 << 16 {
        return bad(format!("max_batch_tokens {} is not in 1..=65536", options.max_batch_tokens));
    }
    if options.kv_block_size == 0 || options.kv_block_size > 1 << 16 {
        return bad(format!("kv_block_size {} is not in 1..=65536", options.kv_block_size));
    }
    // Cache slots are the kernels' ints.
    if options.kv_num_blocks == 0 || options.kv_num_blocks.saturating_mul(options.kv_block_size) > i32::MAX as usize {
        return bad(format!("{} KV blocks of {} positions", options.kv_num_blocks, options.kv_block_size));
    }
    if let Some(latent) = &config.latent {
        check_latent(config, latent)?;
    }
    let heads = HeadShape {
        n_head: config.n_head,
        n_head_kv: config.n_head_kv,
        head_dim: config.head_dim,
        rope_dim: config.rope_dim,
    };
    heads.check().map_err(CudaBackendError::Unsupported)?;
    // A q8_0 or q4_0 plane stores and reads heads in whole blocks of 32, as the CPU backend requires too. A latent
    // attention's rows (head_dim) and values (kv_lora_rank, checked above) are multiples of 32 already.
    let kv = effective_types(options.kv_cache, config.latent.is_some());
    if (kv.keys.is_blocked() || kv.values.is_blocked()) && !config.head_dim.is_multiple_of(QK) {
        return Err(CudaBackendError::Unsupported(format!(
            "a {} / {} KV cache needs heads a multiple of {QK} wide (heads of {})",
            kv.keys, kv.values, config.head_dim
        )));
    }
    // gpt-oss' clamped SwiGLU divides by its alpha (`moe_gate_up`, as the CPU's experts).
    if let Some(ExpertGlu::SwigluOai { alpha, .. }) = config.moe.as_ref().map(|m| m.activation) {
        if !alpha.is_normal() {
            return Err(CudaBackendError::Unsupported(format!("a SwiGLU alpha of {alpha}: it must be a normal float")));
        }
    }
    // The FFN widths the kernels walk in whole 32-element groups: the dense FFN's, or the experts' and the shared
    // expert's (a mixture-of-experts file's `feed_forward_length` sizes no matrix ember reads, but for its leading
    // dense blocks).
    let ffn_widths = match &config.moe {
        None => vec![("feed_forward_length", config.n_ff)],
        Some(moe) => {
            let mut widths = vec![("the experts' width", moe.n_ff_exp)];
            widths.extend(moe.shared.map(|s| ("the shared expert's width", s.n_ff)));
            if moe.first_layer > 0 {
                widths.push(("feed_forward_length", config.n_ff));
            }
            widths
        }
    };
    for (what, width) in [("embedding_length", config.n_embd)].into_iter().chain(ffn_widths) {
        if !width.is_multiple_of(QK) {
            return Err(CudaBackendError::Unsupported(format!("{what} {width} must be a multiple of {QK}")));
        }
    }
    if let Some(moe) = &config.moe {
        if moe.n_expert > ROUTE_MAX_EXPERTS || moe.n_expert_used > moe.n_expert {
            return Err(CudaBackendError::Unsupported(format!(
                "{} of {} experts per token: the routing kernel takes at most {ROUTE_MAX_EXPERTS} experts",
                moe.n_expert_used, moe.n_expert
            )));
        }
    }
    Ok(())
}

/// The widths DeepSeek's latent attention runs on: the per-head projections walk whole 32-element groups of
/// `nope_dim` (`attn_k_b`), `kv_lora_rank` (`attn_v_b`) and the query rank (`attn_q_b`), the output projection of
/// `n_head · v_head_dim`; the attention reads values `kv_lora_rank` wide; the kernels rotate adjacent pairs.
fn check_latent(config: &LlamaConfig, latent: &LatentAttention) -> Result<(), CudaBackendError> {
    let unsupported = |m: String| Err(CudaBackendError::Unsupported(m));
    let widths = [
        ("nope dimensions (key_length_mla - rope dimensions)", latent.nope_dim),
        ("kv_lora_rank", latent.kv_lora_rank),
        ("q_lora_rank", latent.q_lora_rank.unwrap_or(QK)),
        ("the attention output (head_count · value_length_mla)", config.n_head * latent.v_head_dim),
    ];
    for (what, width) in widths {
        if width == 0 || !width.is_multiple_of(QK) {
            return unsupported(format!("latent attention with {what} {width}: it must be a multiple of {QK}"));
        }
    }
    if latent.kv_lora_rank > ATTENTION_WIDE_MAX_HEAD_DIM || latent.v_head_dim > config.head_dim {
        return unsupported(format!(
            "latent attention with values of {} (at most {ATTENTION_WIDE_MAX_HEAD_DIM}) decompressed to {} per head \
             (at most the cache row's {})",
            latent.kv_lora_rank, latent.v_head_dim, config.head_dim
        ));
    }
    if config.rope_neox {
        return unsupported("latent attention with NEOX-style RoPE pairs".into());
    }
    Ok(())
}

impl LlamaBackend for CudaBackend {
    type Error = CudaBackendError;

    fn begin(&mut self, batch: &[SeqChunk<'_>]) -> Result<(), CudaBackendError> {
        if let Some(reason) = &self.poisoned {
            return Err(CudaBackendError::Poisoned(reason.clone()));
        }
        validate_batch(
            batch,
            self.options.max_batch_tokens,
            self.config.context_length,
            self.config.vocab_size,
            self.cache.block_size(),
            self.cache.num_blocks(),
        )?;
        let pad_to =
            if self.options.graphs && StepMeta::is_decode(batch) { self.graphs.bucket_for(batch.len()) } else { None };
        self.meta.build(batch, self.cache.block_size(), pad_to)?;
        self.graph_step = pad_to.is_some();
        self.ops.clear();
        Ok(())
    }

    fn embed(&mut self, dst: Buf) {
        self.record(Op::Embed { dst });
    }

    fn rms_norm(&mut self, src: Buf, weight: Norm, dst: Buf) {
        self.record(Op::RmsNorm { src, weight, dst });
    }

    fn matmul(&mut self, src: Buf, outputs: &[(Weight, Buf)]) {
        for group in outputs.chunks(MAX_OUTPUTS) {
            self.record(Op::Matmul { src, outputs: Outputs::new(group) });
        }
    }

    fn add_bias(&mut self, dst: Buf, bias: Bias) {
        self.record(Op::AddBias { dst, bias });
    }

    fn add_scaled(&mut self, src: Buf, factor: f32, dst: Buf) {
        self.record(Op::AddScaled { src, dst, factor_bits: factor.to_bits() });
    }

    fn matmul_add(&mut self, src: Buf, weight: Weight, dst: Buf) {
        self.record(Op::MatmulAdd { src, weight, dst });
    }

    fn latent_attention(&mut self, layer: usize, input: Buf) {
        self.record(Op::LatentAttention { layer, input });
    }

    fn attention(&mut self, layer: usize) {
        if self.config.qk_norm.is_some() {
            self.record(Op::HeadNorms { layer });
        }
        self.record(Op::Attention { layer });
    }

    fn rms_norm_add(&mut self, src: Buf, weight: Norm, dst: Buf) {
        self.record(Op::RmsNormAdd { src, weight, dst });
    }

    fn gated_activation(&mut self) {
        self.record(Op::Gated);
    }

    fn moe_ffn(&mut self, layer: usize, io: Buf) {
        self.record(Op::Moe { layer, io });
    }

    fn logits(&mut self, out: &mut [f32]) -> Result<(), CudaBackendError> {
        if let Some(reason) = &self.poisoned {
            return Err(CudaBackendError::Poisoned(reason.clone()));
        }
        let expected = match self.output {
            StepOutput::Logits => self.meta.n_logits() * self.config.vocab_size,
            StepOutput::TopK(_) => 0,
        };
        if out.len() != expected {
            return Err(BatchError::LogitsBuffer { expected, found: out.len() }.into());
        }
        let result = guard(|| self.run_step(out));
        if let Err(e) = &result {
            // A device error (or a caught panic) may leave queued work, graphs or the context in any state.
            if !matches!(e, CudaBackendError::Internal(_)) {
                self.poisoned = Some(e.to_string());
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::llama::SyntheticSpec;

    fn config_of(spec: SyntheticSpec) -> LlamaConfig {
        let bytes = spec.writer_with_byte_vocabulary().to_bytes();
        LlamaConfig::from_gguf(&GgufFile::from_bytes(&bytes).unwrap()).unwrap()
    }

    fn check(config: &LlamaConfig) -> Result<(), String> {
        check_options(config, &CudaBackendOptions::single_sequence(256)).map_err(|e| e.to_string())
    }

    #[test]
    fn every_mixture_of_experts_family_passes_the_checks_and_odd_widths_are_refused_by_name() {
        let families = ["qwen3moe-small", "mixtral-small", "qwen2moe-small", "olmoe-small", "granitemoe-small"];
        for family in families.into_iter().chain(["gpt-oss-small", "gpt-oss-small-mxfp4"]) {
            let config = config_of(SyntheticSpec::family(family, 1, 1).unwrap());
            assert!(config.moe.is_some(), "{family}");
            assert_eq!(check(&config), Ok(()), "{family}");
        }
        let mut config = config_of(SyntheticSpec::family("qwen2moe-small", 1, 1).unwrap());
        let moe = config.moe.as_mut().unwrap();
        moe.n_ff_exp = 48;
        let e = check(&config).unwrap_err();
        assert!(e.contains("the experts' width 48"), "{e}");
        let moe = config.moe.as_mut().unwrap();
        moe.n_ff_exp = 64;
        moe.shared.as_mut().unwrap().n_ff = 1000;
        let e = check(&config).unwrap_err();
        assert!(e.contains("the shared expert's width 1000"), "{e}");
        // The file's dense width reads no matrix of a mixture-of-experts model.
        let mut config = config_of(SyntheticSpec::family("olmoe-small", 1, 1).unwrap());
        config.n_ff = 100;
        assert_eq!(check(&config), Ok(()));
        // gpt-oss' sinks, output bias, biased experts and clamped SwiGLU all run; an alpha that cannot divide does not.
        let mut config = config_of(SyntheticSpec::family("gpt-oss-small-mxfp4", 1, 2).unwrap());
        assert!(config.attn_sinks && config.attn_output_bias && config.moe.as_ref().unwrap().biases);
        assert_eq!(config.layers.iter().filter(|l| l.window.is_some()).count(), 1, "windows every other layer");
        config.moe.as_mut().unwrap().activation = ExpertGlu::SwigluOai { alpha: 0.0, limit: 7.0 };
        let e = check(&config).unwrap_err();
        assert!(e.contains("alpha of 0"), "{e}");
    }

    #[test]
    fn deepseeks_pass_the_checks_and_latent_widths_outside_the_kernels_are_refused_by_name() {
        for family in ["deepseek2-lite-small", "deepseek3-small"] {
            let config = config_of(SyntheticSpec::family(family, 1, 2).unwrap());
            check(&config).unwrap_or_else(|e| panic!("{family}: {e}"));
        }
        let mut config = config_of(SyntheticSpec::family("deepseek3-small", 1, 2).unwrap());
        let moe = config.moe.as_ref().unwrap();
        assert!(moe.first_layer == 1 && moe.selection_bias && moe.groups.is_some() && moe.shared.is_some());
        // The leading dense blocks' FFN width is a width the kernels walk.
        config.n_ff = 1000;
        assert!(check(&config).unwrap_err().contains("feed_forward_length 1000"));
        config.n_ff = 1024;
        let latent = config.latent.unwrap();
        config.latent = Some(LatentAttention { nope_dim: 48, ..latent });
        assert!(check(&config).unwrap_err().contains("nope dimensions"));
        config.latent = Some(LatentAttention { q_lora_rank: Some(200), ..latent });
        assert!(check(&config).unwrap_err().contains("q_lora_rank 200"));
        config.latent = Some(LatentAttention { v_head_dim: 161, ..latent });
        assert!(check(&config).unwrap_err().contains("attention output"));
        config.latent = Some(LatentAttention { v_head_dim: 192, ..latent });
        assert!(check(&config).unwrap_err().contains("decompressed to 192 per head"));
        config.latent = Some(latent);
        config.rope_neox = true;
        assert!(check(&config).unwrap_err().contains("NEOX"));
    }
    #[test]
    fn quantized_caches_need_heads_of_whole_blocks() {
        use crate::backend::KvCacheType;
        let with = |config: &LlamaConfig, keys, values| {
            let options = CudaBackendOptions {
                kv_cache: KvCacheTypes { keys, values },
                ..CudaBackendOptions::single_sequence(256)
            };
            check_options(config, &options).map_err(|e| e.to_string())
        };
        // The tiny model's heads of 16; SmolLM2-like heads of 64; DeepSeek's rows of 128 + 32.
        let tiny = config_of(SyntheticSpec::tiny(1));
        let heads64 = config_of(SyntheticSpec { head_dim: Some(64), ..SyntheticSpec::tiny(1) });
        let lite = config_of(SyntheticSpec::family("deepseek2-lite-small", 1, 2).unwrap());
        for t in [KvCacheType::Q8_0, KvCacheType::Q4_0] {
            let e = with(&tiny, t, KvCacheType::F16).unwrap_err();
            assert!(e.contains("a multiple of 32") && e.contains("heads of 16"), "{e}");
            assert!(with(&tiny, KvCacheType::F16, t).is_err());
            assert_eq!(with(&heads64, t, t), Ok(()));
            assert_eq!(with(&lite, t, KvCacheType::F16), Ok(()));
        }
        assert_eq!(with(&tiny, KvCacheType::F16, KvCacheType::F16), Ok(()));
    }
}
