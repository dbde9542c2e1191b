//! `Engine`: the host's side of an engine. It owns the engine thread; `submit` is thread-safe and returns at once.
//!
//! No global state: each engine has its own thread, model handle, KV cache and counters, so several engines in
//! one process are independent.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::{BackendKind, ConfigError, EngineConfig};
use super::request::{validate_request, Capacity, SubmitError, SubmitRequest};
use super::seq_options::SharedOptions;
use super::waiting_limit::WaitingLimit;
use crate::engine::guided::{GuidedCompiler, MaskTimeSummary};
use crate::engine::kv::kv_pools::KvPools;
use crate::engine::kv::kv_prefix::PrefixCachingAllocator;
use crate::engine::kv::kv_window::WindowBlocks;
use crate::engine::observe::log::{LogLevel, Logger};
use crate::engine::observe::stats::{EngineClock, RequestStateStats};
use crate::engine::observe::telemetry::Telemetry;
use crate::engine::output::{CancelWaker, RequestHandle, RequestShared};
use crate::engine::sampling::prompt_logprobs::PromptScoring;
use crate::engine::sampling::Sampler;
use crate::engine::sequence::Sequence;
use crate::engine::step::core::{EngineCore, EngineShared, NewRequest};
use crate::engine::step::runner::{cpu_forward, cuda_forward, CacheGeometry, CpuServing};
use crate::engine::step::scheduler::SchedulerLimits;
use crate::engine::step::step_runner::StepRunner;
use crate::model::chat_template::{ChatTemplate, TemplateChoice, TemplateError, TemplateOrigin};
use crate::model::gguf::LoadMode;
use crate::model::locate::locate_model;
use crate::model::progress::LoadProgress;
use crate::model::{Model, ModelError};

/// What the prefix cache has done since the engine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheCounters {
    /// Prompt tokens looked up when sequences were admitted (a preempted sequence's readmission included).
    pub queries: u64,
    /// Of those, tokens whose KV blocks were found cached and not computed.
    pub hits: u64,
    /// Blocks findable in the cache now, held by running sequences or free (a free one is evicted, least
    /// recently used first, when a block is needed).
    pub cached_blocks: usize,
}

/// Speculative decoding's counters since the engine started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeculationCounters {
    /// Draft tokens verified.
    pub draft_tokens: u64,
    /// Of those, tokens accepted.
    pub accepted_tokens: u64,
}

/// Why an engine could not start.
#[derive(Debug)]
pub enum EngineError {
    Config(ConfigError),
    Model(ModelError),
    /// The backend could not be built (or the one asked for is unavailable).
    Backend(String),
    /// The engine thread could not be started.
    Thread(std::io::Error),
    /// The host's progress function asked to stop the load (`Engine::start_reporting`).
    LoadCancelled,
}

/// A `chat_template` option that does not compile, as the configuration error naming it.
fn template_error(e: TemplateError) -> EngineError {
    EngineError::Config(ConfigError { options: vec!["chat_template"], message: format!("chat_template: {e}") })
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Config(e) => e.fmt(f),
            EngineError::Model(e) => write!(f, "cannot load the model: {e}"),
            EngineError::Backend(e) => write!(f, "cannot start the backend: {e}"),
            EngineError::Thread(e) => write!(f, "cannot start the engine thread: {e}"),
            EngineError::LoadCancelled => write!(f, "the load was cancelled by its progress callback"),
        }
    }
}

impl std::error::Error for EngineError {}

/// A running engine.
pub struct Engine {
    config: EngineConfig,
    model: Arc<Model>,
    shared: Arc<EngineShared>,
    thread: Option<JoinHandle<()>>,
    clock: EngineClock,
    next_request: AtomicU64,
    capacity: Capacity,
    cache: CacheGeometry,
    /// Whether the global pool caches prefixes (`enable_prefix_caching`, and a model without a window pool).
    prefix_caching: bool,
    backend_description: String,
    /// The kernel path and threads, on the CPU backend.
    cpu: Option<CpuServing>,
    logger: Logger,
    /// Compiles structured-output constraints against the model's vocabulary (built on first use).
    guided: GuidedCompiler,
    /// Backpressure: the requests waiting to start, at most `max_waiting_requests`, and those running
    /// (`waiting_limit.rs`).
    waiting: Arc<WaitingLimit>,
    /// The model file's SHA-256 (hex), computed on first use.
    model_sha256: OnceLock<String>,
    /// From the start of `start_reporting` to the engine ready to serve.
    load_time: Duration,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine").field("backend", &self.backend_description).finish_non_exhaustive()
    }
}

impl Engine {
    /// Loads the model named by `config` and starts the engine.
    pub fn new(config: EngineConfig) -> Result<Self, EngineError> {
        Self::start(config, None, Logger::silent())
    }

    /// Starts an engine on an already loaded model (shared, e.g. between engines of a test), logging to `logger`.
    pub fn with_model(config: EngineConfig, model: Arc<Model>, logger: Logger) -> Result<Self, EngineError> {
        Self::start(config, Some(model), logger)
    }

    /// Starts an engine, loading the model unless one is given, logging to `logger`.
    pub fn start(config: EngineConfig, model: Option<Arc<Model>>, logger: Logger) -> Result<Self, EngineError> {
        Self::start_reporting(config, model, logger, &mut LoadProgress::silent())
    }

    /// Like [`Engine::start`], reporting the load's progress (`engine_new_with_progress`): reading the file
    /// (with `load: "read"`) weighs its length, building the backend (mapping or uploading the weights, the KV
    /// cache) weighs the file's length again, and 1 is reported once the engine serves. A `false` from the
    /// host ends the load at the next report, with `EngineError::LoadCancelled` and nothing left running.
    pub fn start_reporting(
        config: EngineConfig,
        model: Option<Arc<Model>>,
        logger: Logger,
        progress: &mut LoadProgress<'_>,
    ) -> Result<Self, EngineError> {
        let load_started = Instant::now();
        config.validate().map_err(EngineError::Config)?;
        // The chat template is read and compiled before the model, so that a bad one fails at once.
        let template_source = config.chat_template_source().map_err(EngineError::Config)?;
        let template_limits = &config.chat_template_limits;
        if let Some(source) = &template_source {
            ChatTemplate::compile(Some(source), "", "", TemplateOrigin::Option, template_limits)
                .map_err(template_error)?;
        }
        let cancelled = |progress: &LoadProgress<'_>, e: EngineError| match progress.cancelled() {
            true => EngineError::LoadCancelled,
            false => e,
        };
        // The option's template fails as the option; the file's as the model.
        let template_failed = |e| match template_source.is_some() {
            true => template_error(e),
            false => EngineError::Model(ModelError::Template(e)),
        };
        let template = TemplateChoice { source: template_source.clone(), limits: template_limits.clone() };
        let model = match model {
            Some(m) => {
                if !progress.begin(m.file.file_len()) {
                    return Err(EngineError::LoadCancelled);
                }
                match template.is_default() {
                    true => m,
                    false => Arc::new(m.with_chat_template(&template).map_err(template_failed)?),
                }
            }
            None => {
                // A hub name resolves to the cache's file, downloading it first when missing.
                let path = locate_model(config.model.as_deref(), progress)
                    .map_err(|e| cancelled(progress, EngineError::Model(e)))?;
                // The file's length as it is now; the read checks it again.
                let file_len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let read_share = if config.load.resolve(file_len) == LoadMode::Read { file_len } else { 0 };
                if !progress.begin(read_share + file_len) {
                    return Err(EngineError::LoadCancelled);
                }
                // The template is chosen at load: a file whose own template does not compile still serves with
                // the option's.
                let model =
                    Model::load_reporting_with(Some(&path), config.load, progress, &template).map_err(|e| match e {
                        ModelError::Template(e) => template_failed(e),
                        e => cancelled(progress, EngineError::Model(e)),
                    })?;
                Arc::new(model)
            }
        };
        // A template that cannot render the plainest conversation says so now, not on the first request: one
        // that reaches a limit on it is refused (every chat would); one that fails otherwise (a variable of its
        // own that transformers' callers set, `raise_exception` for a turn order it wants) is logged, and each
        // chat it fails gets the error.
        match model.chat_template.probe() {
            Ok(_) => {}
            Err(e @ TemplateError::Limit { .. }) => return Err(template_failed(e)),
            Err(e) => logger.log(
                LogLevel::Warn,
                &format!("{}: it cannot render a plain conversation (system, user): {e}", model.chat_template.origin()),
            ),
        }
        let cache = CacheGeometry::from_config(&config);
        let capacity = Capacity {
            context_length: model.config.context_length,
            kv_cache_tokens: cache.tokens(),
            vocab_size: model.config.vocab_size,
        };
        let clock = EngineClock::new();
        let shared = Arc::new(EngineShared::default());
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Started, String>>();
        let thread = {
            let (model, config, shared, logger) =
                (Arc::clone(&model), config.clone(), Arc::clone(&shared), logger.clone());
            std::thread::Builder::new()
                .name("ember-engine".into())
                .spawn(move || engine_thread(model, config, cache, shared, clock, logger, ready_tx))
                .map_err(EngineError::Thread)?
        };
        let Started { description: backend_description, cpu, cache, prefix_caching } = match ready_rx.recv() {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(EngineError::Backend(e));
            }
            Err(_) => {
                let _ = thread.join();
                return Err(EngineError::Backend("the engine thread stopped while starting".into()));
            }
        };
        let window_pool = match cache.window_blocks {
            Some(n) => format!(" (sliding-window layers: a pool of {n} blocks)"),
            None => String::new(),
        };
        logger.log(
            LogLevel::Info,
            &format!("engine started: {backend_description}, {} KV positions{window_pool}", cache.tokens()),
        );
        let engine = Engine {
            guided: GuidedCompiler::with_limits(config.grammar_limits.clone()),
            waiting: WaitingLimit::new(config.max_waiting_requests_or_default()),
            model_sha256: OnceLock::new(),
            load_time: load_started.elapsed(),
            config,
            model,
            shared,
            thread: Some(thread),
            clock,
            next_request: AtomicU64::new(1),
            capacity,
            cache,
            prefix_caching,
            backend_description,
            cpu,
            logger,
        };
        if !progress.finish() {
            // Dropping the engine stops and joins its thread: nothing is left running.
            drop(engine);
            return Err(EngineError::LoadCancelled);
        }
        Ok(engine)
    }

    /// How long the engine took to start: from the call to ready to serve (the model loaded, the backend built).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The model, shared: for what outlives a borrow of the engine (a request naming its tokens).
    pub fn shared_model(&self) -> Arc<Model> {
        Arc::clone(&self.model)
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The backend in use, e.g. `cpu (avx512 kernels, 2 threads)`.
    pub fn backend_description(&self) -> &str {
        &self.backend_description
    }

    /// The structured-output compiler, held to the engine's `grammar_limits`: for the protocol layer to check a
    /// part of a refused constraint (which of several tools) as `submit` checks the whole.
    pub fn guided_compiler(&self) -> &GuidedCompiler {
        &self.guided
    }

    /// Submits a request; returns at once. Thread-safe.
    pub fn submit(&self, request: SubmitRequest) -> Result<RequestHandle, SubmitError> {
        let arrival = self.config.records_stats().then(|| RequestStateStats::arrived(&self.clock));
        let max_tokens = validate_request(&request, self.capacity)?;
        let SubmitRequest { prompts, n, options } = request;
        let grammar = match &options.guided {
            Some(guided) => Some(self.guided.compile(&self.model.tokenizer, guided).map_err(|message| {
                SubmitError::Invalid { field: guided.field, message: format!("invalid {}: {message}", guided.field) }
            })?),
            None => None,
        };
        let Some(place) = self.waiting.enter() else {
            self.shared.telemetry.lock().unwrap_or_else(|e| e.into_inner()).overloaded += 1;
            return Err(SubmitError::Overloaded { limit: self.waiting.limit() });
        };
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let waker: Weak<dyn CancelWaker> = Arc::downgrade(&self.shared) as Weak<dyn CancelWaker>;
        let n_choices = prompts.len() * n;
        let total_prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
        let shared = RequestShared::new(
            id,
            n_choices,
            total_prompt_tokens as u32,
            options.include_metrics,
            self.clock,
            arrival,
            waker,
        );
        shared.hold_place(place);
        let options = Arc::new(SharedOptions::resolve(options, self.model.tokenizer.eog_ids(), self.clock.now()));
        let mut sequences = Vec::with_capacity(n_choices);
        for (p, prompt) in prompts.iter().enumerate() {
            for j in 0..n {
                let choice = p * n + j;
                shared.with_stats(choice, |s| s.num_prompt_tokens = prompt.len() as u32);
                let mut params = options.given.sampling.clone();
                // Choices of one seeded request must differ, and stay reproducible: seed + choice index.
                params.seed = params.seed.map(|s| s.wrapping_add(choice as u64));
                let default_seed = mix(self.config.seed, id, choice as u64);
                let sampler = Sampler::new(params, prompt, default_seed);
                // Per-choice state, not options: the first choice of a prompt bills it and scores it for all.
                let first = j == 0;
                let scoring = options
                    .given
                    .prompt_logprobs
                    .filter(|_| first)
                    .map(|top| PromptScoring::new(top, choice..choice + n));
                let seq =
                    Sequence::new(0, Arc::clone(&shared), choice, prompt, max_tokens[p], Arc::clone(&options), sampler)
                        .with_prompt_role(first, first && options.given.return_progress, scoring)
                        .with_grammar(grammar.as_ref().map(|g| g.matcher()));
                sequences.push(seq);
            }
        }
        let queued = self.clock.now();
        for choice in 0..n_choices {
            shared.with_stats(choice, |s| s.queued_ts = Some(queued));
        }
        {
            let mut inbox = self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            if inbox.shutdown {
                return Err(SubmitError::EngineStopped);
            }
            inbox.new.push(NewRequest { sequences });
        }
        self.shared.wake.notify_all();
        Ok(RequestHandle::new(shared))
    }

    /// Sequences running (admitted, unfinished).
    pub fn num_running(&self) -> usize {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Sequences waiting for admission.
    pub fn num_waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Requests waiting to start (submitted, not yet scheduled), and how many may (`max_waiting_requests`).
    pub fn waiting_requests(&self) -> (usize, usize) {
        (self.waiting.waiting(), self.waiting.limit())
    }

    /// The `model_name` label of the engine's metrics: `served_model_name`, or the model file's name without
    /// `.gguf`.
    pub fn served_model_name(&self) -> String {
        match &self.config.served_model_name {
            Some(name) => name.clone(),
            None => {
                let file = self.model.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                file.strip_suffix(".gguf").map(str::to_owned).unwrap_or(file)
            }
        }
    }

    /// Positions per KV cache block.
    pub fn kv_block_size(&self) -> usize {
        self.cache.block_size
    }

    /// Requests running: started (a choice scheduled, or ended) and not ended. A request counts once however
    /// many choices it has.
    pub fn running_requests(&self) -> usize {
        self.waiting.running()
    }

    /// KV cache blocks free, and in all (the global pool, which every layer uses but the sliding-window ones that
    /// have their own pool).
    pub fn kv_blocks(&self) -> (usize, usize) {
        (self.shared.free_blocks.load(Ordering::Relaxed), self.cache.num_blocks)
    }

    /// Blocks of the sliding-window layers' own pool free, and in all; `None` when the engine has no such pool
    /// (the model has no sliding-window layers). A sequence holds only the blocks of positions its next step may
    /// still read there, so all are free again once no request runs, like the global pool's.
    pub fn kv_window_blocks(&self) -> Option<(usize, usize)> {
        let free = self.shared.free_window_blocks.load(Ordering::Relaxed);
        self.cache.window_blocks.map(|total| (free, total))
    }

    /// Forward steps run so far.
    pub fn num_steps(&self) -> usize {
        self.shared.steps.load(Ordering::Relaxed)
    }

    /// Sequences preempted so far (their KV blocks taken back for others, to be recomputed).
    pub fn num_preemptions(&self) -> u64 {
        self.shared.preemptions.load(Ordering::Relaxed)
    }

    /// The prefix cache's counters; `None` when the engine does not cache prefixes (`enable_prefix_caching`
    /// false, or a model whose sliding-window layers have a block pool of their own).
    pub fn prefix_cache(&self) -> Option<PrefixCacheCounters> {
        self.prefix_caching.then(|| PrefixCacheCounters {
            queries: self.shared.prefix_cache_queries.load(Ordering::Relaxed),
            hits: self.shared.prefix_cache_hits.load(Ordering::Relaxed),
            cached_blocks: self.shared.prefix_cache_blocks.load(Ordering::Relaxed),
        })
    }

    /// The most positions a request may have: the model's context or the KV cache, whichever is smaller.
    pub fn max_model_len(&self) -> usize {
        self.capacity.limit().0
    }

    /// The SHA-256 of the model file's bytes as loaded, in hex: computed on the first call (it reads every
    /// byte: about a tenth of a second per 100 MB), then remembered.
    pub fn model_sha256(&self) -> &str {
        self.model_sha256.get_or_init(|| {
            use sha2::{Digest, Sha256};
            Sha256::digest(self.model.file.bytes()).iter().map(|b| format!("{b:02x}")).collect()
        })
    }

    /// A copy of the engine's aggregates of the per-request metrics (`telemetry.rs`).
    pub fn telemetry(&self) -> Telemetry {
        self.shared.telemetry.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Speculative decoding's counters; `None` when the engine does not speculate (no `speculative` option).
    pub fn speculation(&self) -> Option<SpeculationCounters> {
        self.config.speculative.map(|_| SpeculationCounters {
            draft_tokens: self.shared.draft_tokens.load(Ordering::Relaxed),
            accepted_tokens: self.shared.accepted_draft_tokens.load(Ordering::Relaxed),
        })
    }

    /// Structured outputs: how long each token's mask took to compute, and how long steps waited for their masks
    /// after the forward pass (the masks are computed beside it).
    pub fn mask_times(&self) -> MaskTimeSummary {
        self.shared.mask_times.summary()
    }

    /// The kernel path and threads serving this engine, when its backend is the CPU (every kernel path computes
    /// the same results; this tells a host how fast to expect them).
    pub fn cpu_serving(&self) -> Option<CpuServing> {
        self.cpu
    }

    /// Stops the engine: unfinished requests end as cancelled, the thread is joined. Also done on drop.
    pub fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.shared.inbox.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
        self.shared.wake.notify_all();
        if thread.join().is_err() {
            self.logger.log(LogLevel::Error, "the engine thread panicked");
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the engine thread reports once its backend is built.
struct Started {
    description: String,
    cpu: Option<CpuServing>,
    /// The geometry of the backend built (its window pool, if any).
    cache: CacheGeometry,
    /// Whether the global pool caches prefixes.
    prefix_caching: bool,
}

/// The engine thread: builds the backend (reporting success or failure to `ready`), then runs the core.
fn engine_thread(
    model: Arc<Model>,
    config: EngineConfig,
    cache: CacheGeometry,
    shared: Arc<EngineShared>,
    clock: EngineClock,
    logger: Logger,
    ready: mpsc::Sender<Result<Started, String>>,
) {
    // The CPU keeps sliding-window layers in a pool of their own (unless `kv_window_pool` is off); the CUDA
    // backend runs no such model.
    let cpu_cache = match config.kv_window_pool {
        true => cache.with_window_pool(
            &model.config,
            config.max_num_batched_tokens_on(BackendKind::Cpu),
            config.max_num_seqs,
        ),
        false => cache,
    };
    let (runner, cache) = match config.backend {
        BackendKind::Cpu => (cpu_forward(&model, &config, cpu_cache, &logger), cpu_cache),
        BackendKind::Cuda => (cuda_forward(&model, &config, cache).map_err(|e| e.to_string()), cache),
        BackendKind::Auto => match cuda_forward(&model, &config, cache) {
            Ok(runner) => (Ok(runner), cache),
            Err(e) => {
                // No GPU here is the ordinary case; a GPU that fails to start is worth a warning.
                let level = if e.is_unavailable() { LogLevel::Info } else { LogLevel::Warn };
                logger.log(level, &format!("backend \"auto\": running on the CPU, the GPU is not usable: {e}"));
                (cpu_forward(&model, &config, cpu_cache, &logger), cpu_cache)
            }
        },
    };
    let runner = match runner {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let max_batch_tokens = runner.max_batch_tokens();
    let description = format!("{}, max_num_batched_tokens {max_batch_tokens}", runner.describe());
    let cpu = runner.cpu();
    let window = cache.window_blocks.zip(model.config.max_window());
    // A cached prefix needs every layer's keys and values of its positions, and a window pool keeps only the
    // windows' (vLLM's hybrid allocator, which caches both kinds, is the model for lifting this).
    let prefix_caching = config.enable_prefix_caching && window.is_none();
    if config.enable_prefix_caching && !prefix_caching {
        logger.log(
            LogLevel::Info,
            "prefix caching is off: the model's sliding-window layers keep only their windows' KV blocks \
             (kv_window_pool: false keeps every position and caches prefixes)",
        );
    }
    let global =
        PrefixCachingAllocator::new(cache.num_blocks, cache.block_size, prefix_root(&model, &config), prefix_caching);
    let blocks =
        KvPools::new(global, window.map(|(blocks, window)| WindowBlocks::new(blocks, cache.block_size, window)));
    let mask_times = Arc::clone(&shared.mask_times);
    let core = EngineCore::new(
        shared,
        StepRunner::new(runner, model.config.vocab_size).with_mask_times(mask_times),
        &model.tokenizer,
        clock,
        SchedulerLimits {
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: max_batch_tokens,
            speculative: config.speculative,
            step_budget: config.step_budget,
        },
        blocks,
        model.config.context_length.min(cache.tokens()),
    );
    // Counters before the host hears that the engine started: it never sees the cache's blocks taken.
    core.publish_initial();
    let _ = ready.send(Ok(Started { description, cpu, cache, prefix_caching }));
    core.run();
    drop(logger);
}

/// The root of the prefix cache's block hashes: what the keys and values depend on besides the tokens (the
/// model's shapes and parameters, the activation precision). An engine's pool only ever holds its own model's
/// blocks; the root keeps a block's hash meaningful on its own.
fn prefix_root(model: &Model, config: &EngineConfig) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    format!("{:?}", model.config).hash(&mut hasher);
    format!("{:?}", config.activation_precision).hash(&mut hasher);
    hasher.finish()
}

/// A per-(engine seed, request, choice) seed: splitmix64 of their combination.
fn mix(seed: u64, request: u64, choice: u64) -> u64 {
    let mut z = seed ^ request.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ choice.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
