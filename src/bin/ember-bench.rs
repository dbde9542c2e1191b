//! ember-bench: the CPU forward pass of the real model, timed end to end. Prints a table and writes it as JSON.
//!
//! ```text
//! ember-bench [--model MODEL] [--threads N] [--json PATH] [--quick] [--no-kv-window-pool]
//!             [--no-rss] [--prefill N,N..] [--decode N] [--depth N] [--runs N] [--streams N]
//!             [--kv-cache-type-k f16|q8_0|q4_0] [--kv-cache-type-v f16|q8_0|q4_0] [--load auto|read|mmap]
//! ```
//!
//! The second line shapes the run for a side-by-side with llama.cpp's `llama-bench` (what
//! `scripts/llamacpp/compare.py` runs): `--no-rss` skips the peak-RSS generation, `--prefill` sets the prompt
//! lengths, `--decode` the tokens decoded (from an empty context, as `llama-bench`'s `tg` does, instead of after a
//! 128-token prompt), `--depth N` adds decode after an N-token prompt (`llama-bench -d N`), `--runs` the
//! runs of each measurement, `--streams N` adds the aggregate decode of N sequences in one batch (as
//! `llama-batched-bench -npp 128 -ntg D -npl N` measures it: each sequence prefilled with 128 random tokens, untimed,
//! then D steps of one random token per sequence, all sequences in one step; tokens/s over all sequences).
//!
//! A model with sliding-window layers (Gemma 3) keeps them in a KV pool of their own, sized for one sequence's
//! windows (`engine::generate::single_sequence_window_blocks`), as the engine and `ember-cli` do;
//! `--no-kv-window-pool` keeps every layer in the one pool of the whole context instead, to measure the difference.
//!
//! What it measures, in this order (the peak-RSS run first, so that no earlier allocation sets the high-water mark):
//! - peak RSS (`VmHWM` of `/proc/self/status`) of a generation that fills a 4096-position KV cache (1024 with
//!   `--quick`): a short prompt, then greedy decoding with the end-of-generation tokens biased away; beside it the
//!   bytes the KV cache allocated (all of them written by then);
//! - prefill speed at 128 and 512 prompt tokens: one forward step of the whole prompt as a fresh sequence, logits
//!   for its last token, as a server's first step of a request computes them;
//! - single-stream decode speed over 128 tokens (32 with `--quick`) after a 128-token prompt, through
//!   `engine::generate` (sampling included, as a user sees it);
//! - the read bandwidth with `--threads` threads each reading its share of a buffer as large as the weights a
//!   decode step reads (at least 256 MiB), and decode's weight traffic against it: weight bytes per token × decode
//!   tokens/s ÷ that bandwidth (the roofline share: 1 means decode reads its weights as fast as the machine
//!   streams that many bytes);
//! - a large memcpy's speed on the same machine, and the share of it decode reaches: weight bytes read per token ×
//!   decode tokens/s ÷ memcpy bytes/s. Decode of a model this small streams its weights for every token, so this
//!   ratio says how close decode is to the memory-bandwidth bound (it can exceed 1: the memcpy runs on one thread
//!   and moves each byte twice, a read and a write; decode runs on `--threads` and mostly reads);
//! - with `--depth N`, decode after an N-token prompt, that prompt's prefill speed (in the engine's chunks, each
//!   attending to the positions before it; tokens over the time to the first token), and the peak RSS through it
//!   (before the bandwidth probes' buffers): with `--no-rss`, what the long prompt's prefill costs in memory beside
//!   the weights and its cache; and the decode's share of the bound, run by run: (weight bytes + the cache of N
//!   positions) × tokens/s ÷ the read bandwidth measured right after that run (`bound_share` in the JSON), since on
//!   a shared host the memory's speed moves from one minute to the next.
//!
//! Each speed is the median of several runs (the best is printed beside it). The machines we measure on share their
//! CPUs with other work, so each measurement also reports the share of its threads' time spent waiting for a CPU
//! (run-queue wait, from `/proc/self/task/*/schedstat`): a figure measured while waiting much is a floor, not the
//! engine's speed. Times use the monotonic clock.

use ember::backend::{KvCacheType, KvCacheTypes};
use std::hint::black_box;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ember::backend::cpu::kernels::read_probe;
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::engine::generate::{generate, single_sequence_window_blocks, GenerateRequest, SingleSequenceLayout};
use ember::engine::sampling::SamplingParams;
use ember::model::gguf::LoadMode;
use ember::model::llama::{forward, LlamaConfig, SeqChunk};
use ember::model::{Model, TokenId};

const USAGE: &str = "usage: ember-bench [--model MODEL] [--threads N] [--json PATH] [--quick] [--no-kv-window-pool] \
                     [--no-rss] [--prefill N,N..] [--decode N] [--depth N] [--runs N] [--streams N] \
                     [--kv-cache-type-k f16|q8_0|q4_0] [--kv-cache-type-v f16|q8_0|q4_0] [--load auto|read|mmap]";

/// `--help`'s explanation below the usage line (the module's comment says more).
const HELP: &str = "Times the CPU forward pass of the model (--model: a GGUF file or a hub name, org/repo:QUANT; else \
                    EMBER_MODEL, else the default model): peak RSS, prefill and decode speed, read bandwidth and \
                    decode's share of it. Prints a table and writes it as JSON (--json, default \
                    target/ember-bench.json); --quick runs less.";

/// Text the prompts are cut from (repeated as needed): ordinary English, so that the prompt is a realistic one.
const PROMPT_TEXT: &str = "The history of astronomy is a story of patient observation. Long before telescopes, people \
    tracked the motions of the Sun, the Moon and the planets against the fixed stars, and built calendars, temples \
    and instruments to predict eclipses and seasons. Greek astronomers measured the size of the Earth and the \
    distance to the Moon with geometry alone. ";

/// Bias that keeps the end-of-generation tokens from being chosen (the most `SamplingParams` allows).
const NEVER: f32 = -100.0;

struct Args {
    model: Option<PathBuf>,
    threads: usize,
    json: PathBuf,
    quick: bool,
    /// Keep the sliding-window layers in the global KV pool.
    no_window_pool: bool,
    /// Skip the peak-RSS generation.
    no_rss: bool,
    /// Prompt lengths to prefill, instead of the plan's.
    prefill: Option<Vec<usize>>,
    /// Tokens to decode from an empty context, instead of the plan's decode after a 128-token prompt.
    decode: Option<usize>,
    /// Also decode after an untimed prompt of this many tokens.
    depth: Option<usize>,
    /// Runs of each measurement, instead of the plan's.
    runs: Option<usize>,
    /// Also measure the aggregate decode of this many sequences batched.
    streams: Option<usize>,
    /// The KV cache's key and value types (`--kv-cache-type-k`, `--kv-cache-type-v`, as the engine options).
    kv_cache: KvCacheTypes,
    /// How the file is brought in (the engine option `load`): a file read into memory stays resident beside the
    /// packed weights, a mapped one leaves as it is packed.
    load: LoadMode,
}

fn parse_args(raw: &[String]) -> Result<Args, String> {
    let mut args = Args {
        model: None,
        threads: 2,
        json: PathBuf::from("target/ember-bench.json"),
        quick: false,
        no_window_pool: false,
        no_rss: false,
        prefill: None,
        decode: None,
        depth: None,
        runs: None,
        streams: None,
        kv_cache: KvCacheTypes::default(),
        load: LoadMode::default(),
    };
    let cache_type =
        |name: &str, v: &str| KvCacheType::from_name(v).ok_or(format!("{name}: {v:?} is not one of f16, q8_0, q4_0"));
    let count =
        |name: &str, v: &str| v.parse::<usize>().ok().filter(|&n| n > 0).ok_or(format!("{name}: {v:?} is not a count"));
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--model" => args.model = Some(value("--model")?.into()),
            "--threads" => {
                args.threads = count("--threads", &value("--threads")?)?;
            }
            "--json" => args.json = value("--json")?.into(),
            "--quick" => args.quick = true,
            "--no-kv-window-pool" => args.no_window_pool = true,
            "--no-rss" => args.no_rss = true,
            "--prefill" => {
                let v = value("--prefill")?;
                args.prefill = Some(v.split(',').map(|n| count("--prefill", n)).collect::<Result<_, _>>()?);
            }
            "--decode" => args.decode = Some(count("--decode", &value("--decode")?)?),
            "--depth" => args.depth = Some(count("--depth", &value("--depth")?)?),
            "--runs" => args.runs = Some(count("--runs", &value("--runs")?)?),
            "--streams" => args.streams = Some(count("--streams", &value("--streams")?)?),
            "--kv-cache-type-k" => args.kv_cache.keys = cache_type(a, &value(a)?)?,
            "--kv-cache-type-v" => args.kv_cache.values = cache_type(a, &value(a)?)?,
            "--load" => args.load = LoadMode::try_from(value(a)?)?,
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// The sizes of a run.
struct Plan {
    prefill_lengths: Vec<usize>,
    prefill_runs: usize,
    decode_prompt: usize,
    decode_tokens: usize,
    decode_runs: usize,
    /// Decode after an untimed prompt of this many tokens, with its runs.
    depth: Option<(usize, usize)>,
    /// Whether to measure the peak RSS.
    rss: bool,
    /// KV positions the peak-RSS generation fills (prompt and generated tokens).
    rss_positions: usize,
    rss_prompt: usize,
    /// Bytes of each memcpy buffer.
    memcpy_bytes: usize,
    memcpy_runs: usize,
    /// Least bytes of the read-bandwidth buffer (it is as large as the weights a decode step reads).
    read_bytes: usize,
}

impl Plan {
    fn new(args: &Args) -> Self {
        let quick = args.quick;
        let mut plan = Plan {
            prefill_lengths: vec![128, 512],
            prefill_runs: if quick { 3 } else { 5 },
            decode_prompt: 128,
            decode_tokens: if quick { 32 } else { 128 },
            decode_runs: 3,
            depth: None,
            rss: !args.no_rss,
            rss_positions: if quick { 1024 } else { 4096 },
            rss_prompt: 32,
            memcpy_bytes: if quick { 64 << 20 } else { 256 << 20 },
            memcpy_runs: 5,
            read_bytes: 256 << 20,
        };
        if let Some(lengths) = &args.prefill {
            plan.prefill_lengths = lengths.clone();
        }
        if let Some(tokens) = args.decode {
            (plan.decode_prompt, plan.decode_tokens) = (0, tokens);
        }
        if let Some(runs) = args.runs {
            (plan.prefill_runs, plan.decode_runs) = (runs, runs);
        }
        plan.depth = args.depth.map(|depth| (depth, args.runs.unwrap_or(1)));
        plan
    }

    /// KV positions the runs need.
    fn context(&self) -> usize {
        let decode = self.decode_prompt.max(1) + self.decode_tokens;
        let depth = self.depth.map_or(0, |(depth, _)| depth + self.decode_tokens);
        let rss = if self.rss { self.rss_positions } else { 0 };
        self.prefill_lengths.iter().copied().max().unwrap_or(0).max(decode).max(depth).max(rss)
    }
}

/// The runs of one measurement, in a unit where more is better, and the share of its threads' time spent waiting
/// for a CPU (`None` where `/proc` does not say).
struct Measurement {
    runs: Vec<f64>,
    waited: Option<f64>,
}

impl Measurement {
    /// Runs `body`, which returns one figure per run, noting how long this process's threads waited for a CPU.
    /// The process must keep the same threads throughout (no backend built or dropped inside `body`).
    fn take(body: impl FnOnce() -> Result<Vec<f64>, String>) -> Result<Self, String> {
        let before = SchedTimes::now();
        let runs = body()?;
        let waited = before.zip(SchedTimes::now()).and_then(|(b, a)| a.waited_share_since(b));
        Ok(Measurement { runs, waited })
    }

    /// One measurement of several, each taken alone: their runs in order, and the mean of the waited shares that
    /// could be read (a part taken just after the read probe's threads exited may find one gone mid-read).
    fn merged(parts: Vec<Measurement>) -> Self {
        let waited: Vec<f64> = parts.iter().filter_map(|m| m.waited).collect();
        let waited = (!waited.is_empty()).then(|| waited.iter().sum::<f64>() / waited.len() as f64);
        Measurement { runs: parts.into_iter().flat_map(|m| m.runs).collect(), waited }
    }

    fn median(&self) -> f64 {
        let mut v = self.runs.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn best(&self) -> f64 {
        self.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }

    fn print(&self, label: &str) {
        let waited = self.waited.map_or("?".to_owned(), |w| format!("{:.0}%", 100.0 * w));
        println!("{label:<40} {:>10.1} {:>10.1} {:>5} {waited:>7}", self.median(), self.best(), self.runs.len());
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "median": self.median(),
            "best": self.best(),
            "runs": self.runs,
            "run_queue_wait_share": self.waited,
        })
    }
}

/// Time this process's threads have spent on a CPU and waiting in a run queue, summed over its threads
/// (`/proc/self/task/*/schedstat`: nanoseconds on the CPU, nanoseconds waiting, time slices).
#[derive(Clone, Copy)]
struct SchedTimes {
    on_cpu_ns: u64,
    waiting_ns: u64,
}

impl SchedTimes {
    fn now() -> Option<Self> {
        let mut total = SchedTimes { on_cpu_ns: 0, waiting_ns: 0 };
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
            let mut fields = stat.split_whitespace().map(|f| f.parse::<u64>().ok());
            total.on_cpu_ns += fields.next()??;
            total.waiting_ns += fields.next()??;
        }
        Some(total)
    }

    /// The share of the time since `earlier` that the threads wanted a CPU and waited for one.
    fn waited_share_since(self, earlier: SchedTimes) -> Option<f64> {
        let waited = self.waiting_ns.checked_sub(earlier.waiting_ns)?;
        let ran = self.on_cpu_ns.checked_sub(earlier.on_cpu_ns)?;
        (waited + ran > 0).then(|| waited as f64 / (waited + ran) as f64)
    }
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\n\n{HELP}");
        return ExitCode::SUCCESS;
    }
    match parse_args(&raw).and_then(|args| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the measurements share: the model, one backend, the sampling that never stops early, the prompt text.
struct Bench<'m> {
    config: &'m LlamaConfig,
    backend: CpuBackend<'m>,
    layout: SingleSequenceLayout,
    sampling: SamplingParams,
    eog: &'m [TokenId],
    /// `PROMPT_TEXT` tokenized.
    text_ids: Vec<TokenId>,
}

impl Bench<'_> {
    /// The first `len` tokens of the prompt text repeated.
    fn prompt(&self, len: usize) -> Vec<TokenId> {
        self.text_ids.iter().copied().cycle().take(len).collect()
    }

    /// Generates `max_tokens` from `prompt` through `engine::generate`: decode tokens per second.
    fn decode(&mut self, prompt: &[TokenId], max_tokens: usize) -> Result<f64, String> {
        self.decode_after(prompt, max_tokens).map(|(_, decode)| decode)
    }

    /// `decode`, and the prompt's prefill before it: (prompt tokens per second to the first token, decode tokens per
    /// second).
    fn decode_after(&mut self, prompt: &[TokenId], max_tokens: usize) -> Result<(f64, f64), String> {
        let request = GenerateRequest {
            prompt,
            max_tokens,
            sampling: self.sampling.clone(),
            stop_ids: self.eog,
            default_seed: 0,
        };
        let generation = generate(self.config, &mut self.backend, self.layout, &request, |_| ControlFlow::Continue(()))
            .map_err(|e| e.to_string())?;
        let decode =
            generation.decode_tokens_per_second().ok_or_else(|| "decode produced too few tokens".to_owned())?;
        Ok((prompt.len() as f64 / generation.time_to_first_token.as_secs_f64(), decode))
    }

    /// Prefills `len` prompt tokens as a fresh sequence `runs` times, after one untimed warm-up: tokens per second.
    fn prefill(&mut self, len: usize, runs: usize) -> Result<Vec<f64>, String> {
        let tokens = self.prompt(len);
        let table: Vec<u32> = (0..self.layout.kv_num_blocks as u32).collect();
        // A fresh sequence's first chunk: its window blocks are the first of the pool, as for the global one.
        let window_table: Vec<u32> = (0..self.layout.kv_window_blocks.unwrap_or(0) as u32).collect();
        let mut logits = vec![0f32; self.config.vocab_size];
        let chunk =
            SeqChunk { tokens: &tokens, start_pos: 0, block_table: &table, window_table: &window_table, logit_rows: 1 };
        let mut speeds = Vec::with_capacity(runs);
        for run in 0..=runs {
            let start = Instant::now();
            forward(self.config, &mut self.backend, &[chunk], &mut logits).map_err(|e| e.to_string())?;
            if run > 0 {
                speeds.push(len as f64 / start.elapsed().as_secs_f64());
            }
        }
        Ok(speeds)
    }
}

/// The activations an engine runs this model with by default (`activation_precision: "auto"`): f32 for a model whose
/// matmul weights are all float, 8-bit otherwise, so that the bench measures what a user gets.
fn engine_default_precision(model: &Model) -> Precision {
    if model.config.matmul_weights_are_float(&model.file) {
        Precision::Float32
    } else {
        Precision::Quantized8
    }
}

fn run(args: &Args) -> Result<(), String> {
    let plan = Plan::new(args);
    let load_at_start = load_average();
    let model = Model::load_with(args.model.as_deref(), args.load).map_err(|e| e.to_string())?;
    let config = &model.config;
    let mut options = CpuBackendOptions {
        threads: args.threads,
        precision: engine_default_precision(&model),
        kv_cache: args.kv_cache,
        ..CpuBackendOptions::single_sequence(plan.context())
    };
    if !args.no_window_pool {
        options.kv_window_blocks = single_sequence_window_blocks(config, &options);
    }
    let layout = SingleSequenceLayout::of(&options);
    let longest_prefill = plan.prefill_lengths.iter().max().copied().unwrap_or(0);
    if longest_prefill > layout.max_batch_tokens {
        return Err(format!("--prefill: at most {} tokens (one step of the backend)", layout.max_batch_tokens));
    }
    let eog = model.tokenizer.eog_ids();
    let sampling = SamplingParams { logit_bias: eog.iter().map(|&id| (id, NEVER)).collect(), ..Default::default() };
    sampling.validate(config.vocab_size).map_err(|e| e.to_string())?;
    let backend_start = Instant::now();
    let backend = CpuBackend::new(&model.file, config.clone(), options).map_err(|e| e.to_string())?;
    let backend_ms = backend_start.elapsed().as_secs_f64() * 1e3;
    let mut bench =
        Bench { config, backend, layout, sampling, eog, text_ids: model.tokenizer.encode(PROMPT_TEXT, false) };
    let kernel_path = bench.backend.kernel_path();
    let weight_bytes = bench.backend.weight_bytes_per_token();
    let kv_bytes = bench.backend.kv_cache_bytes();
    let kv_bytes_per_token = args.kv_cache.bytes_per_position(config.n_layer, config.kv_dim(), config.latent.is_none());
    let whole_kv_bytes = kv_bytes_per_token * plan.rss_positions;
    let quick = if args.quick { ", quick" } else { "" };
    println!("ember-bench: {}, {} threads, {kernel_path} kernels{quick}", model.name(), args.threads);

    // Peak RSS: a generation that fills the cache, first thing after loading. Its last token is sampled but never
    // fed back, so it needs no KV position.
    let mut long = None;
    if plan.rss {
        let rss_tokens = plan.rss_positions - plan.rss_prompt + 1;
        eprintln!("generating {rss_tokens} tokens for the peak RSS...");
        let rss_prompt = bench.prompt(plan.rss_prompt);
        long = Some(Measurement::take(|| Ok(vec![bench.decode(&rss_prompt, rss_tokens)?]))?);
    }
    let peak_rss = proc_status_kib("VmHWM").map(|kib| kib * 1024);

    let mut prefill = Vec::new();
    for &len in &plan.prefill_lengths {
        prefill.push((len, Measurement::take(|| bench.prefill(len, plan.prefill_runs))?));
    }
    let decode_prompt = bench.prompt(plan.decode_prompt.max(1));
    let decode = Measurement::take(|| {
        (0..plan.decode_runs).map(|_| bench.decode(&decode_prompt, plan.decode_tokens + 1)).collect()
    })?;
    // Decode at depth, and the long prompt's prefill timed in the same runs (prefill in chunks, its attention over
    // the positions before each chunk: what `--prefill`'s single step cannot show). The read probe runs right after
    // each run, so that the share of the bound compares the decode with the memory's speed of the same minute:
    // on a shared host that speed moves by a third from one minute to the next.
    let read_bytes = weight_bytes.max(plan.read_bytes);
    let (mut at_depth, mut depth_prefill, mut depth_bound) = (None, None, None);
    let mut depth_peak_rss = None;
    if let Some((depth, runs)) = plan.depth {
        eprintln!("decoding after {depth} prompt tokens...");
        let prompt = bench.prompt(depth);
        let mut prompt_speeds = Vec::with_capacity(runs);
        let mut decodes = Vec::with_capacity(runs);
        let mut reads = Vec::with_capacity(runs);
        for run in 0..runs {
            decodes.push(Measurement::take(|| {
                let (prompt_speed, decode) = bench.decode_after(&prompt, plan.decode_tokens + 1)?;
                prompt_speeds.push(prompt_speed);
                Ok(vec![decode])
            })?);
            // The peak of the long prompt's prefill and decode, before the probe's buffer adds to it: with
            // --no-rss, what a prompt of --depth tokens costs in memory.
            if run == 0 {
                depth_peak_rss = proc_status_kib("VmHWM").map(|kib| kib * 1024);
            }
            let read = Measurement { runs: read_gb_per_second(read_bytes, args.threads, ADJACENT_READS), waited: None };
            reads.push(read.median());
        }
        let reads = Measurement { runs: reads, waited: None };
        let decode = Measurement::merged(decodes);
        let bytes = weight_bytes as f64 + (kv_bytes_per_token * depth) as f64;
        let shares = decode.runs.iter().zip(&reads.runs).map(|(tokens, read)| bytes * tokens / (read * 1e9)).collect();
        depth_bound = Some((bytes, reads, Measurement { runs: shares, waited: None }));
        depth_prefill = Some(Measurement { runs: prompt_speeds, waited: decode.waited });
        at_depth = Some(decode);
    }
    drop(bench);
    let streams = match args.streams {
        Some(n) => {
            eprintln!("decoding {n} sequences batched...");
            let runs = args.runs.unwrap_or(3);
            Some((n, Measurement::take(|| streams_decode(&model, args.threads, n, plan.decode_tokens, runs))?))
        }
        None => None,
    };

    let read = Measurement::take(|| Ok(read_gb_per_second(read_bytes, args.threads, plan.memcpy_runs)))?;
    let memcpy = Measurement::take(|| Ok(memcpy_gb_per_second(plan.memcpy_bytes, plan.memcpy_runs)))?;
    let ratio = weight_bytes as f64 * decode.median() / (memcpy.median() * 1e9);
    let roofline = weight_bytes as f64 * decode.median() / (read.median() * 1e9);
    let load_at_end = load_average();
    let (cpu, cpus) = (cpu_model(), std::thread::available_parallelism().map_or(0, |n| n.get()));

    println!("cpu: {cpu}, {cpus} CPUs; load average {load_at_start} at start, {load_at_end} at end");
    println!("{:<40} {:>10} {:>10} {:>5} {:>7}", "measure", "median", "best", "runs", "waited");
    for (len, m) in &prefill {
        m.print(&format!("prefill {len} tokens (tokens/s)"));
    }
    let decode_label = match plan.decode_prompt {
        0 => format!("decode {} (tokens/s)", plan.decode_tokens),
        prompt => format!("decode {} after {prompt} (tokens/s)", plan.decode_tokens),
    };
    decode.print(&decode_label);
    if let (Some(m), Some(p), Some((depth, _))) = (&at_depth, &depth_prefill, plan.depth) {
        p.print(&format!("prefill {depth} before it (tokens/s)"));
        m.print(&format!("decode {} at depth {depth} (tokens/s)", plan.decode_tokens));
    }
    if let Some((bytes, reads, shares)) = &depth_bound {
        reads.print("  read right after each run (GB/s)");
        let label = format!("  of the bound ({:.1} MB a token / read)", bytes / 1e6);
        println!("{label:<40} {:>10.2} {:>10.2} {:>5}", shares.median(), shares.best(), shares.runs.len());
    }
    if let Some((n, m)) = &streams {
        m.print(&format!("decode {} x {n} streams (tokens/s, all)", plan.decode_tokens));
    }
    if let Some(long) = &long {
        long.print(&format!("decode over {} positions (tokens/s)", plan.rss_positions));
    }
    read.print(&format!("read {} MiB, {} threads (GB/s)", read_bytes >> 20, args.threads));
    memcpy.print(&format!("memcpy {} MiB (GB/s copied)", plan.memcpy_bytes >> 20));
    println!("{:<40} {:>10.1}", "backend start, weights packed (ms)", backend_ms);
    println!("{:<40} {:>10.1}", "weights read per token (MB)", weight_bytes as f64 / 1e6);
    println!(
        "{:<40} {:>10}",
        format!("KV cache bytes per position ({}/{})", args.kv_cache.keys, args.kv_cache.values),
        kv_bytes_per_token
    );
    println!("{:<40} {:>10.2}", "weights/token x decode / read", roofline);
    println!("{:<40} {:>10.2}", "weights/token x decode / memcpy", ratio);
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let rss_label = if plan.rss {
        format!("peak RSS, {} positions (MiB)", plan.rss_positions)
    } else {
        "peak RSS (MiB)".to_owned()
    };
    match peak_rss {
        Some(bytes) => println!("{rss_label:<40} {:>10.1}", mib(bytes)),
        None => println!("peak RSS: /proc/self/status has no VmHWM here"),
    }
    println!("  (of which KV cache {:.1} MiB, model file {:.1} MiB)", mib(kv_bytes as u64), mib(model.file.file_len()));
    if let (Some(bytes), Some((depth, _))) = (depth_peak_rss, plan.depth) {
        let cache = kv_bytes_per_token * (depth + plan.decode_tokens);
        println!("{:<40} {:>10.1}", format!("peak RSS through depth {depth} (MiB)"), mib(bytes));
        println!(
            "  (KV cache of its positions {:.1} MiB, model file {:.1} MiB)",
            mib(cache as u64),
            mib(model.file.file_len())
        );
    }
    match layout.kv_window_blocks {
        Some(blocks) => println!(
            "  (sliding-window layers in a pool of {blocks} blocks; every layer whole: KV cache {:.1} MiB)",
            mib(whole_kv_bytes as u64)
        ),
        None => println!("  (every layer keeps the whole context)"),
    }

    let report = serde_json::json!({
        "model": model.name(),
        "threads": args.threads,
        "kernels": kernel_path,
        "quick": args.quick,
        "cpu": cpu,
        "cpus": cpus,
        "load_average": { "start": load_at_start, "end": load_at_end },
        "prefill_tokens_per_s": prefill.iter().map(|(len, m)| (len.to_string(), m.json())).collect::<serde_json::Map<_, _>>(),
        "decode_tokens_per_s": { "prompt": plan.decode_prompt, "tokens": plan.decode_tokens, "result": decode.json() },
        "decode_at_depth_tokens_per_s": plan.depth.zip(at_depth.as_ref()).map(|((depth, _), m)| serde_json::json!({
            "depth": depth, "tokens": plan.decode_tokens, "result": m.json(),
            "prompt_tokens_per_s": depth_prefill.as_ref().map(Measurement::json),
            "bytes_per_token": depth_bound.as_ref().map(|(bytes, _, _)| *bytes),
            "read_gb_per_s_after_each_run": depth_bound.as_ref().map(|(_, reads, _)| reads.runs.clone()),
            "bound_share": depth_bound.as_ref().map(|(_, _, shares)| shares.json()),
        })),
        "streams_decode_tokens_per_s": streams.as_ref().map(|(n, m)| serde_json::json!({
            "streams": n, "prompt": STREAM_PROMPT, "tokens": plan.decode_tokens, "result": m.json()
        })),
        "read_gb_per_s": { "bytes": read_bytes, "threads": args.threads, "result": read.json() },
        "memcpy_gb_per_s": { "bytes": plan.memcpy_bytes, "result": memcpy.json() },
        "backend_start_ms": backend_ms,
        "weight_bytes_per_token": weight_bytes,
        "decode_bandwidth_over_read": roofline,
        "decode_bandwidth_over_memcpy": ratio,
        "peak_rss": {
            "positions": plan.rss.then_some(plan.rss_positions),
            "bytes": peak_rss,
            "kv_cache_bytes": kv_bytes,
            "kv_cache_type_k": args.kv_cache.keys.name(),
            "kv_cache_type_v": args.kv_cache.values.name(),
            "kv_cache_bytes_per_position": kv_bytes_per_token,
            "kv_cache_bytes_every_layer_whole": whole_kv_bytes,
            "kv_window_pool_blocks": layout.kv_window_blocks,
            "decode_tokens_per_s": long.as_ref().map(Measurement::json)
        },
        "peak_rss_through_depth_bytes": depth_peak_rss,
    });
    if let Some(dir) = args.json.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.json, text + "\n").map_err(|e| format!("cannot write {}: {e}", args.json.display()))?;
    println!("wrote {}", args.json.display());
    Ok(())
}

/// Read-probe runs right after each decode at depth (their median is that run's memory speed).
const ADJACENT_READS: usize = 3;

/// Random prompt tokens each stream is prefilled with (`llama-batched-bench -npp 128`).
const STREAM_PROMPT: usize = 128;

/// The aggregate decode speed of `streams` sequences in one batch, `runs` times: a fresh backend, each sequence
/// prefilled with `STREAM_PROMPT` random tokens (untimed), then `tokens` timed steps of one random token per
/// sequence with logits for each, as `llama-batched-bench` runs its text-generation phase. Tokens/s over all
/// sequences, per run.
fn streams_decode(
    model: &Model,
    threads: usize,
    streams: usize,
    tokens: usize,
    runs: usize,
) -> Result<Vec<f64>, String> {
    let config = &model.config;
    let block = 16;
    let per_seq = (STREAM_PROMPT + tokens).div_ceil(block);
    let options = CpuBackendOptions {
        threads,
        max_batch_tokens: STREAM_PROMPT.max(streams),
        kv_block_size: block,
        kv_num_blocks: streams * per_seq,
        kv_window_blocks: None,
        precision: engine_default_precision(model),
        kv_cache: KvCacheTypes::default(),
    };
    let mut backend = CpuBackend::new(&model.file, config.clone(), options).map_err(|e| e.to_string())?;
    let tables: Vec<Vec<u32>> =
        (0..streams).map(|s| (0..per_seq).map(|b| (s * per_seq + b) as u32).collect()).collect();
    // A fixed generator: every run and every engine's comparison sees the same kind of tokens (uniform ids).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let vocab = config.vocab_size as u64;
    let mut random = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % vocab) as TokenId
    };
    let mut speeds = Vec::with_capacity(runs);
    let mut logits = vec![0f32; streams * config.vocab_size];
    for _ in 0..runs {
        for table in &tables {
            let prompt: Vec<TokenId> = (0..STREAM_PROMPT).map(|_| random()).collect();
            let chunk =
                SeqChunk { tokens: &prompt, start_pos: 0, block_table: table, window_table: &[], logit_rows: 1 };
            forward(config, &mut backend, &[chunk], &mut logits[..config.vocab_size]).map_err(|e| e.to_string())?;
        }
        let start = Instant::now();
        for step in 0..tokens {
            let ids: Vec<[TokenId; 1]> = (0..streams).map(|_| [random()]).collect();
            let chunks: Vec<SeqChunk> = ids
                .iter()
                .zip(&tables)
                .map(|(t, table)| SeqChunk {
                    tokens: t,
                    start_pos: STREAM_PROMPT + step,
                    block_table: table,
                    window_table: &[],
                    logit_rows: 1,
                })
                .collect();
            forward(config, &mut backend, &chunks, &mut logits).map_err(|e| e.to_string())?;
        }
        speeds.push((streams * tokens) as f64 / start.elapsed().as_secs_f64());
    }
    Ok(speeds)
}

/// Reads a buffer of `bytes` with `threads` threads, each reading its contiguous share as the matvec kernels read
/// weights (`kernels::read_probe`), `runs` times: bytes read per second, in GB/s (10⁹), per run. The buffer is
/// written first, so that its pages are mapped; a run's time is from the threads' common start to the last one's
/// end. Sized like the weights a decode step reads, it is what the machine delivers to a decode step at best: a
/// buffer larger than the last-level cache is read from memory, and a smaller one (or part of one, where the cache
/// keeps lines across passes) partly from the cache, as decode's weights are.
fn read_gb_per_second(bytes: usize, threads: usize, runs: usize) -> Vec<f64> {
    let buffer: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let share = bytes.div_ceil(threads).next_multiple_of(64);
    (0..runs)
        .map(|_| {
            let start_line = std::sync::Barrier::new(buffer.chunks(share).len() + 1);
            let elapsed = std::thread::scope(|s| {
                for part in buffer.chunks(share) {
                    let start_line = &start_line;
                    s.spawn(move || {
                        start_line.wait();
                        black_box(read_probe(part));
                    });
                }
                start_line.wait();
                Instant::now()
            });
            bytes as f64 / elapsed.elapsed().as_secs_f64() / 1e9
        })
        .collect()
}

/// Copies `bytes` from one buffer to another `runs` times: bytes copied per second, in GB/s (10⁹), per run. One
/// untimed copy first, so that both buffers' pages are mapped before timing.
fn memcpy_gb_per_second(bytes: usize, runs: usize) -> Vec<f64> {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
            bytes as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect()
}

/// A `/proc/self/status` field given in kB (Linux's kB are KiB), when there is one.
fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// The 1, 5 and 15-minute load averages from `/proc/loadavg`, or "unknown".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The processor's name from `/proc/cpuinfo`, with its family and model numbers (a virtual machine's name can be
/// as bare as "AMD EPYC", which names no generation: family 25 is Zen 3 and 4, family 26 Zen 5), or "unknown".
fn cpu_model() -> String {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return "unknown".to_owned();
    };
    let field = |name: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|key| key.trim() == name))
            .and_then(|l| l.split(':').nth(1))
            .map(|v| v.trim().to_owned())
    };
    let name = field("model name").unwrap_or_else(|| "unknown".to_owned());
    match (field("cpu family"), field("model")) {
        (Some(family), Some(model)) => format!("{name} (family {family}, model {model})"),
        _ => name,
    }
}
