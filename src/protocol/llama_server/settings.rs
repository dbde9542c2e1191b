//! llama-server's sampling defaults, and the `generation_settings` object a `/completion` answer repeats: the
//! settings ember applied, under llama-server's names. A client written for llama-server omits what it wants
//! left at llama-server's defaults, so a `/completion` request without `temperature` samples at llama-server's
//! 0.8, not OpenAI's 1.0 (`docs/protocol.md`, "llama-server endpoints").

use serde_json::{json, Value};

/// llama-server's defaults (`common_params_sampling` in its `common.h`) for the fields ember serves.
pub(super) const TEMPERATURE: f32 = 0.8;
pub(super) const TOP_K: i64 = 40;
pub(super) const TOP_P: f32 = 0.95;
pub(super) const MIN_P: f32 = 0.05;
pub(super) const REPEAT_PENALTY: f32 = 1.0;
/// llama-server's "random seed" (`LLAMA_DEFAULT_SEED`); `-1` in a request means the same.
pub(super) const RANDOM_SEED: u64 = 0xFFFF_FFFF;

/// The order ember's sampler applies its stages in (vLLM's: temperature before top-p and min-p), in
/// llama-server's names. llama-server applies temperature last; `samplers` cannot reorder ember's.
pub(super) const EMBER_SAMPLERS: [&str; 5] = ["penalties", "top_k", "temperature", "top_p", "min_p"];

/// The settings of one request, as ember applies them.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Settings {
    /// `-1`: until the context is full.
    pub n_predict: i64,
    pub seed: u64,
    pub temperature: f32,
    /// `0`: off.
    pub top_k: i64,
    pub top_p: f32,
    pub min_p: f32,
    /// `-1`: ember penalizes repetitions over the whole prompt and output; `0`: no penalties.
    pub repeat_last_n: i64,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub stop: Vec<String>,
    pub n_keep: i64,
    pub n_discard: i64,
    pub ignore_eos: bool,
    pub stream: bool,
    /// `(token, bias)`, as llama-server lists them.
    pub logit_bias: Vec<(u32, f32)>,
    pub n_probs: usize,
    pub timings_per_token: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            n_predict: -1,
            seed: RANDOM_SEED,
            temperature: TEMPERATURE,
            top_k: TOP_K,
            top_p: TOP_P,
            min_p: MIN_P,
            repeat_last_n: -1,
            repeat_penalty: REPEAT_PENALTY,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            stop: Vec::new(),
            n_keep: 0,
            n_discard: 0,
            ignore_eos: false,
            stream: false,
            logit_bias: Vec::new(),
            n_probs: 0,
            timings_per_token: false,
        }
    }
}

impl Settings {
    /// `generation_settings`, in llama-server's field order. The samplers ember does not have are written at
    /// their off values, which is what a request gets (a request that turns one on is refused).
    pub fn json(&self) -> Value {
        let bias: Vec<Value> =
            self.logit_bias.iter().map(|&(token, bias)| json!({"bias": bias, "token": token})).collect();
        json!({
            "seed": self.seed,
            "temperature": self.temperature,
            "dynatemp_range": 0.0,
            "dynatemp_exponent": 1.0,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "top_n_sigma": -1.0,
            "xtc_probability": 0.0,
            "xtc_threshold": 0.1_f32,
            "typical_p": 1.0,
            "repeat_last_n": self.repeat_last_n,
            "repeat_penalty": self.repeat_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "dry_multiplier": 0.0,
            "dry_base": 1.75,
            "dry_allowed_length": 2,
            "dry_penalty_last_n": -1,
            "mirostat": 0,
            "mirostat_tau": 5.0,
            "mirostat_eta": 0.1_f32,
            "stop": self.stop,
            "max_tokens": self.n_predict,
            "n_predict": self.n_predict,
            "n_keep": self.n_keep,
            "n_discard": self.n_discard,
            "ignore_eos": self.ignore_eos,
            "stream": self.stream,
            "logit_bias": bias,
            "n_probs": self.n_probs,
            "min_keep": 0,
            "grammar": "",
            "samplers": EMBER_SAMPLERS,
            "timings_per_token": self.timings_per_token,
            "post_sampling_probs": false,
            "lora": [],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_llama_servers() {
        let s = Settings::default().json();
        assert_eq!((s["n_predict"].as_i64(), s["seed"].as_u64()), (Some(-1), Some(4_294_967_295)));
        assert_eq!((s["top_k"].as_i64(), s["min_keep"].as_u64()), (Some(40), Some(0)));
        // f32 values read back as llama-server writes them (its floats are f32 too).
        assert_eq!(s["temperature"].as_f64(), Some(f64::from(0.8_f32)));
        assert_eq!(s["top_p"].as_f64(), Some(f64::from(0.95_f32)));
        assert_eq!(s["samplers"], json!(["penalties", "top_k", "temperature", "top_p", "min_p"]));
    }
}
