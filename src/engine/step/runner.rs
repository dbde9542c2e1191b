//! The engine's view of a backend: run one batched forward pass (`BatchForward`; sampling is the step runner's,
//! `step_runner.rs`). Building the backend is done here too, on the
//! engine thread, because a backend borrows the model file for as long as it lives.

use crate::backend::cpu::kernels::kernel_selection;
use crate::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use crate::backend::cuda::{CudaBackend, CudaBackendError, CudaBackendOptions};
use crate::backend::KvCacheTypes;
use crate::model::llama::{forward, LlamaBackend, LlamaConfig, SeqChunk};
use crate::model::{Model, TokenId};

use super::cpu_threads::{bounded_threads, ThreadCount};
use super::StepError;
use crate::engine::api::config::{ActivationPrecision, BackendKind, EngineConfig};
use crate::engine::kv::kv_window::WindowBlocks;
use crate::engine::observe::log::{LogLevel, Logger};

/// What serves an engine on the CPU: the kernel path (`"scalar"`, `"avx2"`, `"avx512"`, `"amx"`) and the threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuServing {
    pub kernels: &'static str,
    pub threads: usize,
}

/// One forward pass over a batch, whatever the backend.
pub trait BatchForward {
    /// Runs `batch`; writes the logits rows its chunks ask for (`SeqChunk::logit_rows`), in batch order.
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError>;
    /// Runs `batch` like [`run`](Self::run), but writes for each logits row only its `k` largest
    /// logits, where the backend computes them: `ids` and `values` are `[S][k]`, largest first, the lower id first
    /// among equal logits (so `k = 1` gives the greedy argmax). `None` when the backend cannot (nothing was run;
    /// call `run`). Lets a GPU return a few numbers per sequence instead of a 49,152-float row.
    fn run_top_k(
        &mut self,
        _batch: &[SeqChunk<'_>],
        _k: usize,
        _ids: &mut [TokenId],
        _values: &mut [f32],
    ) -> Option<Result<(), StepError>> {
        None
    }
    /// A description for logs: backend, kernels, threads.
    fn describe(&self) -> String;
    /// The kernel path and threads, when the backend is the CPU.
    fn cpu(&self) -> Option<CpuServing> {
        None
    }
    /// Most tokens one step may hold: what the runner's buffers were sized for, and the scheduler's budget.
    fn max_batch_tokens(&self) -> usize;
}

/// Runs the llama forward pass on any [`LlamaBackend`].
pub struct LlamaForward<B> {
    config: LlamaConfig,
    backend: B,
    description: String,
    max_batch_tokens: usize,
    cpu: Option<CpuServing>,
}

impl<B: LlamaBackend> BatchForward for LlamaForward<B>
where
    B::Error: Into<StepError>,
{
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError> {
        forward(&self.config, &mut self.backend, batch, logits).map_err(Into::into)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn cpu(&self) -> Option<CpuServing> {
        self.cpu
    }

    fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }
}

/// KV cache geometry the engine decided on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheGeometry {
    pub block_size: usize,
    /// Blocks of the global pool (what `kv_cache_tokens` asks for).
    pub num_blocks: usize,
    /// Blocks of the sliding-window layers' own pool, when there is one.
    pub window_blocks: Option<usize>,
}

impl CacheGeometry {
    /// The global pool of `config`, no window pool.
    pub fn from_config(config: &EngineConfig) -> Self {
        CacheGeometry {
            block_size: config.kv_block_size,
            num_blocks: config.kv_cache_tokens.div_ceil(config.kv_block_size),
            window_blocks: None,
        }
    }

    /// This geometry with a window pool for `model`'s sliding-window layers when it has any, sized for up to
    /// `max_num_seqs` sequences in steps of up to `max_chunk_tokens` tokens (`WindowBlocks::pool_size`).
    pub fn with_window_pool(self, model: &LlamaConfig, max_chunk_tokens: usize, max_num_seqs: usize) -> Self {
        let window_blocks = model.max_window().map(|window| {
            WindowBlocks::pool_size(window, max_chunk_tokens, self.block_size, max_num_seqs, self.num_blocks)
        });
        CacheGeometry { window_blocks, ..self }
    }

    pub fn tokens(&self) -> usize {
        self.block_size * self.num_blocks
    }
}

/// Builds the CPU runner, logging why its kernel path differs from the one `EMBER_CPU_KERNELS` asked for and why
/// its thread count differs from `threads` (`cpu_threads.rs`).
/// Whether the model's matmul weights are all float (`activation_precision: "auto"` then runs f32 activations).
fn float_weights(model: &Model) -> bool {
    model.config.matmul_weights_are_float(&model.file)
}

pub fn cpu_forward<'m>(
    model: &'m Model,
    config: &EngineConfig,
    cache: CacheGeometry,
    logger: &Logger,
) -> Result<Box<dyn BatchForward + 'm>, String> {
    let selection = kernel_selection();
    if let Some(warning) = &selection.warning {
        logger.log(LogLevel::Warn, warning);
    }
    let ThreadCount { threads, warning } = bounded_threads(config.threads, crate::backend::cpu::default_threads());
    if let Some(warning) = warning {
        logger.log(LogLevel::Warn, &warning);
    }
    let max_batch_tokens = config.max_num_batched_tokens_on(BackendKind::Cpu);
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens,
        kv_block_size: cache.block_size,
        kv_num_blocks: cache.num_blocks,
        kv_window_blocks: cache.window_blocks,
        precision: match config.activation_precision {
            ActivationPrecision::Auto if float_weights(model) => Precision::Float32,
            ActivationPrecision::Auto | ActivationPrecision::Q8 => Precision::Quantized8,
            ActivationPrecision::F32 => Precision::Float32,
        },
        kv_cache: KvCacheTypes { keys: config.kv_cache_type_k, values: config.kv_cache_type_v },
    };
    let options_precision = options.precision;
    let model_config = model.config.for_context(model.config.context_length.min(cache.tokens()));
    let backend = CpuBackend::new(&model.file, model_config.clone(), options).map_err(|e| e.to_string())?;
    let kernels = backend.kernel_path();
    let how = if selection.forced { " (EMBER_CPU_KERNELS)" } else { "" };
    let activations = match options_precision {
        Precision::Quantized8 => "8-bit",
        Precision::Float32 => "f32",
    };
    let description = format!("cpu ({kernels} kernels{how}, {threads} threads, {activations} activations)");
    let cpu = Some(CpuServing { kernels, threads });
    Ok(Box::new(LlamaForward { config: model_config, backend, description, max_batch_tokens, cpu }))
}

/// The CUDA backend's forward pass, and the top-k of each logits row on the device.
struct CudaForward {
    backend: CudaBackend,
    description: String,
    max_batch_tokens: usize,
}

impl BatchForward for CudaForward {
    fn run(&mut self, batch: &[SeqChunk<'_>], logits: &mut [f32]) -> Result<(), StepError> {
        let config = self.backend.config().clone();
        forward(&config, &mut self.backend, batch, logits).map_err(Into::into)
    }

    fn run_top_k(
        &mut self,
        batch: &[SeqChunk<'_>],
        k: usize,
        ids: &mut [TokenId],
        values: &mut [f32],
    ) -> Option<Result<(), StepError>> {
        Some(self.backend.forward_top_k(batch, k, ids, values).map_err(Into::into))
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }
}

/// Builds the CUDA runner on device 0. An error for which `is_unavailable()` holds means there is no usable GPU.
pub fn cuda_forward<'m>(
    model: &'m Model,
    config: &EngineConfig,
    cache: CacheGeometry,
) -> Result<Box<dyn BatchForward + 'm>, CudaBackendError> {
    let kv_cache = KvCacheTypes { keys: config.kv_cache_type_k, values: config.kv_cache_type_v };
    if config.activation_precision == ActivationPrecision::F32 && kv_cache != KvCacheTypes::default() {
        // The options the CPU refuses too (its precise path keeps an f32 cache): with "auto", the engine then tries
        // the CPU and reports its refusal, as on a machine without a GPU.
        return Err(CudaBackendError::Unsupported(format!(
            "kv_cache_type_k {} / kv_cache_type_v {} with activation_precision \"f32\": the precise path keeps an f32 \
             KV cache",
            kv_cache.keys, kv_cache.values
        )));
    }
    let max_batch_tokens = config.max_num_batched_tokens_on(BackendKind::Cuda);
    let options = CudaBackendOptions {
        device: 0,
        max_batch_tokens,
        kv_block_size: cache.block_size,
        kv_num_blocks: cache.num_blocks,
        kv_cache,
        graphs: true,
    };
    // LongRoPE's factors for the longest sequence this cache holds (`LlamaConfig::for_context`).
    let model_config = model.config.for_context(model.config.context_length.min(cache.tokens()));
    let backend = CudaBackend::new(&model.file, model_config, options)?;
    let info = backend.device();
    let description = format!(
        "cuda ({}, compute capability {}.{}, {} MiB)",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.total_memory_bytes >> 20
    );
    Ok(Box::new(CudaForward { backend, description, max_batch_tokens }))
}
