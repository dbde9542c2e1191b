//! The engine's configuration. Field names are the configuration keys of `engine_new`'s JSON (a public contract):
//! unknown keys are refused, so a misspelt option is an error rather than silently ignored. Parsing the JSON, with
//! errors that name their key, is `config_json.rs`.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::backend::KvCacheType;
use crate::engine::guided::GrammarLimits;
use crate::engine::speculative::SpeculativeConfig;
use crate::engine::step::step_budget::StepBudget;
use crate::model::chat_template::TemplateLimits;
use crate::model::gguf::LoadMode;

/// Which backend runs the forward pass.
// Read through a string so that a wrong type says "expected a string" and an unknown name lists the names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum BackendKind {
    /// The GPU when a CUDA driver and device are present, otherwise the CPU (the choice is logged).
    #[default]
    Auto,
    Cpu,
    /// The GPU; an error when none is usable.
    Cuda,
}

impl TryFrom<String> for BackendKind {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "auto" => Ok(BackendKind::Auto),
            "cpu" => Ok(BackendKind::Cpu),
            "cuda" => Ok(BackendKind::Cuda),
            _ => Err(format!("unknown backend {name:?}, expected \"auto\", \"cpu\" or \"cuda\"")),
        }
    }
}

/// How the CPU backend multiplies activations with the weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum ActivationPrecision {
    /// What llama.cpp pairs with the model's weights: `F32` for a model whose matmul weights are all float (F32,
    /// F16, BF16; llama.cpp multiplies them with float activations), `Q8` otherwise (quantized weights meet 8-bit
    /// activations there too).
    #[default]
    Auto,
    /// 8-bit activation blocks with integer dot products (fast; what llama.cpp does for quantized weights).
    Q8,
    /// f32 activations against dequantized weights, and an f32 KV cache (precise; the quantized types' kernels are
    /// slower this way).
    F32,
}

impl TryFrom<String> for ActivationPrecision {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        match name.as_str() {
            "auto" => Ok(ActivationPrecision::Auto),
            "q8" => Ok(ActivationPrecision::Q8),
            "f32" => Ok(ActivationPrecision::F32),
            _ => Err(format!("unknown activation precision {name:?}, expected \"auto\", \"q8\" or \"f32\"")),
        }
    }
}

/// Engine options. `Default` gives the documented defaults. `Serialize` lists the keys (`config_json.rs`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// The GGUF model; `None` follows the model-path rule (`EMBER_MODEL`, then the default location).
    pub model: Option<PathBuf>,
    /// How the model file is brought in: `"read"` (into memory, so later changes to the file cannot affect the
    /// engine), `"mmap"` (mapped; shared page cache, but the file must not be truncated or rewritten while the
    /// engine runs), or `"auto"` (the default: `"read"` below 1 GiB, `"mmap"` from there; `LoadMode::Auto`).
    pub load: LoadMode,
    /// The chat template that replaces the model's (`tokenizer.chat_template`), like llama-server's
    /// `--chat-template-file` and vLLM's `--chat-template`: Jinja text, or the path of a file holding it
    /// ([`EngineConfig::chat_template_source`]). `None`: the model's own, or ChatML when it has none.
    pub chat_template: Option<String>,
    /// What compiling and rendering the chat template (the model's, or `chat_template`'s) may cost: fuel, output,
    /// value depth, call depth, expression size, source size and time (`TemplateLimits`, docs/reliability.md).
    pub chat_template_limits: TemplateLimits,
    pub backend: BackendKind,
    /// CPU threads; 0 = all available cores.
    pub threads: usize,
    /// Most sequences in one step (running decodes plus prefills).
    pub max_num_seqs: usize,
    /// Most tokens computed in one step; long prompts are prefilled in chunks of what is left. `None`: the
    /// backend's default ([`CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS`], [`CUDA_DEFAULT_MAX_NUM_BATCHED_TOKENS`]).
    pub max_num_batched_tokens: Option<usize>,
    /// How many prompt tokens may join a step that carries decodes (`step_budget.rs`): `"auto"` (the default: a
    /// step with prefill may cost 1.25× its decodes alone, as learned), a target step time in milliseconds, or
    /// `"throughput"` (prefill takes whatever `max_num_batched_tokens` leaves, at the cost of the streams'
    /// inter-token latency).
    pub step_budget: StepBudget,
    /// KV cache capacity in tokens (positions over all sequences), rounded up to whole blocks.
    pub kv_cache_tokens: usize,
    /// Positions per KV cache block.
    pub kv_block_size: usize,
    /// Seeds requests that do not set `seed`, so that an engine's outputs are reproducible.
    pub seed: u64,
    /// Lets responses carry `metrics` for requests that ask (`include_metrics`): the first half of the double gate.
    pub enable_per_request_metrics: bool,
    /// Records no timing stats at all: every metric is absent. Conflicts with `enable_per_request_metrics`.
    pub disable_log_stats: bool,
    /// Streams end with a usage chunk even when the request did not ask for one (`stream_options.include_usage`).
    pub force_include_usage: bool,
    /// CPU activation precision (`"auto"`, the default, `"q8"` or `"f32"`).
    pub activation_precision: ActivationPrecision,
    /// The KV cache's key type (`"f16"`, the default, `"q8_0"` or `"q4_0"`: `backend::KvCacheType`), as llama.cpp's
    /// `-ctk`. CPU backend only, on the 8-bit activation path.
    pub kv_cache_type_k: KvCacheType,
    /// The KV cache's value type, as llama.cpp's `-ctv` (ignored by latent attention, whose values are its keys).
    pub kv_cache_type_v: KvCacheType,
    /// Automatic prefix caching: full KV blocks are kept, keyed by their tokens and everything before them, and
    /// reused by later requests that start with the same tokens (`kv_prefix.rs`).
    pub enable_prefix_caching: bool,
    /// On the CPU, a model's sliding-window layers keep only their windows' KV blocks, in a pool of their own (less
    /// memory: Gemma 3's five windowed layers in six, gpt-oss' one in two). Such an engine caches no prefixes and
    /// drafts no speculative tokens; `false` stores every position of every layer in the one pool, as for any
    /// other model, and both work.
    pub kv_window_pool: bool,
    /// n-gram speculative decoding (`speculative/`); `None` (the default): off.
    pub speculative: Option<SpeculativeConfig>,
    /// Most requests waiting to start (submitted, not yet scheduled): a submit beyond it is refused at once
    /// (`SubmitError::Overloaded`), nothing queued. `None`: [`EngineConfig::max_waiting_requests_or_default`].
    pub max_waiting_requests: Option<usize>,
    /// The model's name in the Prometheus metrics' `model_name` label (vLLM's `--served-model-name`). `None`:
    /// the model file's name without `.gguf`, as the gateway's `/v1/models` names it.
    pub served_model_name: Option<String>,
    /// Serve the model as an embedding model with this pooling (`"mean"`, `"cls"`, `"last"`, `"rank"`; llama.cpp's
    /// `--pooling`): a chat model's file then gives vectors, an embedding model's file pools this way unless a
    /// request names another. `None`: the file's `pooling_type` (a file without one generates text).
    pub pooling: Option<crate::model::encoder::Pooling>,
    /// The metrics the inference gateway's endpoint picker reads (requests waiting and running, KV cache usage,
    /// cache configuration, prefix cache counters) also under vLLM's names (`vllm:num_requests_waiting`, ...), so
    /// that a picker configured for vLLM reads ember unchanged.
    pub metrics_vllm_names: bool,
    /// What compiling one request's structured-output constraint (schema, grammar, regex, choices, tools) may
    /// cost: input size, schema depth and branches, regex intersections, Lark definitions and terminals, grammar
    /// symbols, lexer fuel and states, Earley row work and items, mask fuel, and time (`GrammarLimits`,
    /// docs/reliability.md). A constraint beyond them is refused at submit, naming its field.
    pub grammar_limits: GrammarLimits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            model: None,
            load: LoadMode::Auto,
            chat_template: None,
            chat_template_limits: TemplateLimits::default(),
            backend: BackendKind::Auto,
            threads: 0,
            max_num_seqs: 64,
            max_num_batched_tokens: None,
            step_budget: StepBudget::Auto,
            kv_cache_tokens: 16_384,
            kv_block_size: 16,
            seed: 0,
            enable_per_request_metrics: false,
            disable_log_stats: false,
            force_include_usage: false,
            activation_precision: ActivationPrecision::Auto,
            kv_cache_type_k: KvCacheType::F16,
            kv_cache_type_v: KvCacheType::F16,
            enable_prefix_caching: true,
            kv_window_pool: true,
            speculative: None,
            max_waiting_requests: None,
            served_model_name: None,
            pooling: None,
            metrics_vllm_names: false,
            grammar_limits: GrammarLimits::default(),
        }
    }
}

/// `max_num_batched_tokens` on the CPU when the configuration leaves it out. A step's time grows with its tokens
/// (two cores compute ~700 tokens/s), and every running decode waits for the step: 128 tokens keep a prefilling
/// neighbour's cost to ~0.15 s per token instead of ~0.6 s at 512, at the same throughput (`cargo bench --bench
/// engine -- --max-num-batched-tokens N`, docs/performance.md).
pub const CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 128;
/// `max_num_batched_tokens` on a GPU when the configuration leaves it out: a GPU step costs little more for
/// thousands of tokens than for one, and the budget must cover a step of `max_num_seqs` decodes plus prefills.
pub const CUDA_DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 2048;

/// A configuration that cannot work, naming the options at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The configuration keys involved.
    pub options: Vec<&'static str>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl EngineConfig {
    /// Checks the options against each other and their ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |options: Vec<&'static str>, message: String| Err(ConfigError { options, message });
        if self.enable_per_request_metrics && self.disable_log_stats {
            return err(
                vec!["enable_per_request_metrics", "disable_log_stats"],
                "enable_per_request_metrics and disable_log_stats cannot both be true: per-request metrics are \
                 computed from the stats that disable_log_stats turns off"
                    .into(),
            );
        }
        let ranges: [(&'static str, usize, usize, usize); 5] = [
            ("max_num_seqs", self.max_num_seqs, 1, 4096),
            ("max_num_batched_tokens", self.max_num_batched_tokens.unwrap_or(1), 1, 65_536),
            ("kv_block_size", self.kv_block_size, 1, 1024),
            ("kv_cache_tokens", self.kv_cache_tokens, 1, 1 << 24),
            ("max_waiting_requests", self.max_waiting_requests.unwrap_or(1), 1, 1 << 24),
        ];
        for (name, value, lo, hi) in ranges {
            if !(lo..=hi).contains(&value) {
                return err(vec![name], format!("{name} = {value} is not in {lo}..={hi}"));
            }
        }
        if let Some(problem) = self.chat_template_limits.problem() {
            return err(vec!["chat_template_limits"], problem);
        }
        if let Some(problem) = self.step_budget.problem() {
            return err(vec!["step_budget"], problem);
        }
        if let Some(problem) = self.speculative.as_ref().and_then(SpeculativeConfig::problem) {
            return err(vec!["speculative"], problem);
        }
        if let Some(problem) = self.grammar_limits.problem() {
            return err(vec!["grammar_limits"], problem);
        }
        if self.served_model_name.as_deref().is_some_and(|name| name.trim().is_empty()) {
            return err(vec!["served_model_name"], "served_model_name is empty".into());
        }
        if self.threads > 1024 {
            return err(vec!["threads"], format!("threads = {} is not in 0..=1024", self.threads));
        }
        Ok(())
    }

    /// The Jinja text of `chat_template`: the value itself when it holds a Jinja tag (`{{` or `{%`, as vLLM tells
    /// text from a path), else the contents of the file it names. An unreadable file is an error naming
    /// `chat_template`.
    pub fn chat_template_source(&self) -> Result<Option<String>, ConfigError> {
        let Some(value) = &self.chat_template else { return Ok(None) };
        if value.contains("{{") || value.contains("{%") {
            return Ok(Some(value.clone()));
        }
        std::fs::read_to_string(value).map(Some).map_err(|e| ConfigError {
            options: vec!["chat_template"],
            message: format!(
                "chat_template: {value:?} is neither a Jinja template (no {{{{ or {{%) nor a readable file: {e}"
            ),
        })
    }

    /// `max_num_batched_tokens` as the engine uses it with `backend` (`Cpu` or `Cuda`): the configured value, or
    /// that backend's default.
    pub fn max_num_batched_tokens_on(&self, backend: BackendKind) -> usize {
        let default = match backend {
            BackendKind::Cuda => CUDA_DEFAULT_MAX_NUM_BATCHED_TOKENS,
            BackendKind::Cpu | BackendKind::Auto => CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS,
        };
        self.max_num_batched_tokens.unwrap_or(default)
    }

    /// `max_waiting_requests` as the engine uses it: the configured value, or one request per KV cache block,
    /// but at least four full batches (`4 × max_num_seqs`). A waiting request holds no KV memory, but each needs
    /// at least one block to start, so more than that many cannot all start even once the cache is empty: beyond
    /// them a queue only grows, and a host is better told at once (and can retry elsewhere) than left to wait.
    /// The floor keeps a small cache from refusing an ordinary burst.
    pub fn max_waiting_requests_or_default(&self) -> usize {
        let blocks = self.kv_cache_tokens.div_ceil(self.kv_block_size);
        self.max_waiting_requests.unwrap_or_else(|| blocks.max(4 * self.max_num_seqs))
    }

    /// Whether timing stats are recorded.
    pub fn records_stats(&self) -> bool {
        !self.disable_log_stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_json_overrides_them() {
        assert!(EngineConfig::default().validate().is_ok());
        let c =
            EngineConfig::from_json(r#"{"threads": 2, "backend": "cpu", "enable_per_request_metrics": true}"#).unwrap();
        assert_eq!((c.threads, c.backend, c.enable_per_request_metrics), (2, BackendKind::Cpu, true));
        assert_eq!(c.max_num_seqs, 64);
        assert_eq!(EngineConfig::from_json("  ").unwrap(), EngineConfig::default());
    }

    #[test]
    fn the_metrics_conflict_names_both_options() {
        let e =
            EngineConfig::from_json(r#"{"enable_per_request_metrics": true, "disable_log_stats": true}"#).unwrap_err();
        assert_eq!(e.options, ["enable_per_request_metrics", "disable_log_stats"]);
        assert!(e.message.contains("enable_per_request_metrics") && e.message.contains("disable_log_stats"));
    }

    #[test]
    fn unknown_keys_wrong_types_and_ranges_are_errors() {
        assert!(EngineConfig::from_json(r#"{"max_num_seq": 4}"#).unwrap_err().message.contains("max_num_seq"));
        assert!(EngineConfig::from_json(r#"{"threads": "two"}"#).is_err());
        assert!(EngineConfig::from_json(r#"{"backend": "tpu"}"#).is_err());
        assert_eq!(EngineConfig::from_json(r#"{"max_num_seqs": 0}"#).unwrap_err().options, ["max_num_seqs"]);
        assert!(EngineConfig::from_json("[1]").is_err());
        let zero = EngineConfig::from_json(r#"{"max_num_batched_tokens": 0}"#).unwrap_err();
        assert_eq!(zero.options, ["max_num_batched_tokens"]);
    }

    #[test]
    fn speculation_is_off_by_default_and_checked_when_on() {
        assert_eq!(EngineConfig::default().speculative, None);
        let on = r#"{"speculative": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}}"#;
        let c = EngineConfig::from_json(on).unwrap().speculative.unwrap();
        assert_eq!((c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max), (4, 2, 3));
        let bad = r#"{"speculative": {"method": "ngram", "num_speculative_tokens": 99}}"#;
        assert_eq!(EngineConfig::from_json(bad).unwrap_err().options, ["speculative"]);
    }

    #[test]
    fn the_step_budget_is_auto_by_default_and_a_target_must_be_positive() {
        assert_eq!(EngineConfig::default().step_budget, StepBudget::Auto);
        let read = |json: &str| EngineConfig::from_json(json).map(|c| c.step_budget);
        assert_eq!(read(r#"{"step_budget": "throughput"}"#).unwrap(), StepBudget::Throughput);
        assert_eq!(read(r#"{"step_budget": 30}"#).unwrap(), StepBudget::TargetMs(30.0));
        for bad in ["0", "-5", "1e9"] {
            let e = read(&format!(r#"{{"step_budget": {bad}}}"#)).unwrap_err();
            assert_eq!(e.options, ["step_budget"], "{bad}: {e}");
        }
        let e = read(r#"{"step_budget": "fast"}"#).unwrap_err();
        assert_eq!(e.options, ["step_budget"]);
        assert!(e.message.starts_with(r#"step_budget: unknown step budget "fast""#), "{e}");
    }

    #[test]
    fn the_token_budget_defaults_by_backend_and_a_set_value_wins() {
        let unset = EngineConfig::from_json(r#"{"max_num_batched_tokens": null}"#).unwrap();
        assert_eq!(unset, EngineConfig::default());
        assert_eq!(unset.max_num_batched_tokens_on(BackendKind::Cpu), CPU_DEFAULT_MAX_NUM_BATCHED_TOKENS);
        assert_eq!(unset.max_num_batched_tokens_on(BackendKind::Cuda), CUDA_DEFAULT_MAX_NUM_BATCHED_TOKENS);
        let set = EngineConfig::from_json(r#"{"max_num_batched_tokens": 300}"#).unwrap();
        assert_eq!(set.max_num_batched_tokens_on(BackendKind::Cpu), 300);
        assert_eq!(set.max_num_batched_tokens_on(BackendKind::Cuda), 300);
    }
}
