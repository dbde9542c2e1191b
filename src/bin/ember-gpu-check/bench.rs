//! Throughput and latency on the GPU, measured two ways:
//!
//! - the backend alone (`CudaBackend::forward_top_k` with k = 1: greedy decoding with the argmax on the device,
//!   only token ids coming back): what the GPU path can do;
//! - the engine (`backend: "cuda"`): what a user of the library gets, scheduling and sampling included. Until the
//!   engine asks its runner for the top-k (`BatchForward::run_top_k`), it copies whole logits rows to the host and
//!   samples there, which bounds its aggregate decode rate; the two sets of numbers side by side show that cost.
//!
//! Measured: prefill of a 512-token prompt (tok/s, and the engine's TTFT on an idle engine), single-stream decode,
//! aggregate decode at 16, 64 and 256 concurrent sequences, each with ITL (and, for the engine, TTFT) p50/p99.
//! Times are wall-clock on the monotonic clock; a step's time ends when its token ids are on the host. Each
//! measurement follows one unmeasured warm-up, which records the CUDA graphs it needs.

use std::sync::Arc;
use std::time::Instant;

use ember::backend::cuda::{CudaBackend, CudaBackendOptions};
use ember::backend::KvCacheTypes;
use ember::engine::{BackendKind, Engine, EngineConfig, Logger, RequestOptions, SubmitRequest};
use ember::model::llama::SeqChunk;
use ember::model::{Model, TokenId};
use serde_json::{json, Value};

use super::stats::{median, percentile};
use super::Args;

const BLOCK: usize = 16;
const CONCURRENCY: [usize; 3] = [16, 64, 256];

/// Sizes of a run (`--quick` shrinks them for a smoke test).
struct Plan {
    prefill_tokens: usize,
    prefill_runs: usize,
    single_prompt: usize,
    single_tokens: usize,
    batch_prompt: usize,
    batch_tokens: usize,
}

impl Plan {
    fn new(quick: bool) -> Self {
        Plan {
            prefill_tokens: 512,
            prefill_runs: if quick { 2 } else { 5 },
            single_prompt: 128,
            single_tokens: if quick { 32 } else { 256 },
            batch_prompt: 64,
            batch_tokens: if quick { 16 } else { 128 },
        }
    }
}

/// Prompt token `j` of sequence `s`: deterministic, clear of the special ids 0–2.
fn prompt(s: usize, len: usize, vocab: usize) -> Vec<TokenId> {
    (0..len).map(|j| (3 + (s * 7919 + j * 104_729) % (vocab - 3)) as TokenId).collect()
}

fn summary(values_ms: &[f64]) -> Value {
    json!({ "p50": percentile(values_ms, 50.0), "p99": percentile(values_ms, 99.0), "n": values_ms.len() })
}

/// Sequence states for the backend benchmarks: tokens so far and block table.
struct Seqs {
    tokens: Vec<Vec<TokenId>>,
    tables: Vec<Vec<u32>>,
}

impl Seqs {
    fn new(n: usize, prompt_len: usize, blocks_each: usize, vocab: usize) -> Self {
        Seqs {
            tokens: (0..n).map(|s| prompt(s, prompt_len, vocab)).collect(),
            tables: (0..n).map(|s| (s * blocks_each..(s + 1) * blocks_each).map(|b| b as u32).collect()).collect(),
        }
    }

    /// Prefills every prompt (chunks of whole prompts up to `max_tokens` a step), then decodes `steps` tokens for
    /// all of them together with the argmax fed back; returns each decode step's wall time in milliseconds.
    fn run(&mut self, backend: &mut CudaBackend, max_tokens: usize, steps: usize) -> Result<Vec<f64>, String> {
        let n = self.tokens.len();
        let mut ids = vec![0; n];
        let mut values = vec![0f32; n];
        let per_step = (max_tokens / self.tokens[0].len()).max(1);
        for first in (0..n).step_by(per_step) {
            let group = first..(first + per_step).min(n);
            let batch: Vec<SeqChunk<'_>> = group
                .clone()
                .map(|s| SeqChunk {
                    tokens: &self.tokens[s],
                    start_pos: 0,
                    block_table: &self.tables[s],
                    window_table: &[],
                    logit_rows: 1,
                })
                .collect();
            backend.forward_top_k(&batch, 1, &mut ids[group.clone()], &mut values[group]).map_err(|e| e.to_string())?;
        }
        for (s, &id) in ids.iter().enumerate() {
            self.tokens[s].push(id);
        }
        let mut times = Vec::with_capacity(steps);
        for _ in 0..steps {
            let started = Instant::now();
            let batch: Vec<SeqChunk<'_>> = (0..n)
                .map(|s| {
                    let pos = self.tokens[s].len() - 1;
                    SeqChunk {
                        tokens: &self.tokens[s][pos..],
                        start_pos: pos,
                        block_table: &self.tables[s],
                        window_table: &[],
                        logit_rows: 1,
                    }
                })
                .collect();
            backend.forward_top_k(&batch, 1, &mut ids, &mut values).map_err(|e| e.to_string())?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            for (s, &id) in ids.iter().enumerate() {
                self.tokens[s].push(id);
            }
        }
        Ok(times)
    }
}

fn backend_bench(model: &Model, plan: &Plan) -> Result<Value, String> {
    let vocab = model.config.vocab_size;
    let batch_blocks = (plan.batch_prompt + plan.batch_tokens + 2).div_ceil(BLOCK);
    let max_batch = *CONCURRENCY.iter().max().expect("sizes");
    let options = CudaBackendOptions {
        device: 0,
        max_batch_tokens: plan.prefill_tokens.max(max_batch),
        kv_block_size: BLOCK,
        kv_num_blocks: max_batch * batch_blocks + (plan.prefill_tokens + plan.single_tokens + 2).div_ceil(BLOCK),
        kv_cache: KvCacheTypes::default(),
        graphs: true,
    };
    let mut backend = CudaBackend::new(&model.file, model.config.clone(), options).map_err(|e| e.to_string())?;
    let mut out = serde_json::Map::new();

    // Prefill: one fresh 512-token sequence per run, its first token's argmax back on the host.
    let mut seq =
        Seqs::new(1, plan.prefill_tokens, (plan.prefill_tokens + plan.single_tokens + 2).div_ceil(BLOCK), vocab);
    let mut times = Vec::new();
    for run in 0..=plan.prefill_runs {
        let started = Instant::now();
        let batch = [SeqChunk {
            tokens: &seq.tokens[0],
            start_pos: 0,
            block_table: &seq.tables[0],
            window_table: &[],
            logit_rows: 1,
        }];
        backend.forward_top_k(&batch, 1, &mut [0], &mut [0.0]).map_err(|e| e.to_string())?;
        if run > 0 {
            times.push(started.elapsed().as_secs_f64());
        }
    }
    let prefill_s = median(&times);
    println!(
        "backend: prefill of {} tokens {:.2} ms → {:.0} tok/s",
        plan.prefill_tokens,
        prefill_s * 1e3,
        plan.prefill_tokens as f64 / prefill_s
    );
    out.insert("prefill_512_ms".into(), json!(prefill_s * 1e3));
    out.insert("prefill_tok_s".into(), json!(plan.prefill_tokens as f64 / prefill_s));

    // Single stream: warm-up (records the 1-token graph), then the measured run.
    for measured in [false, true] {
        seq.tokens[0].truncate(plan.single_prompt);
        let steps = seq.run(&mut backend, plan.prefill_tokens, if measured { plan.single_tokens } else { 4 })?;
        if measured {
            let total: f64 = steps.iter().sum();
            let rate = steps.len() as f64 / (total / 1000.0);
            println!(
                "backend: single-stream decode {rate:.0} tok/s, ITL p50 {:.3} ms p99 {:.3} ms",
                percentile(&steps, 50.0),
                percentile(&steps, 99.0)
            );
            out.insert("single_decode_tok_s".into(), json!(rate));
            out.insert("single_itl_ms".into(), summary(&steps));
        }
    }

    // Aggregate decode at each concurrency.
    let mut aggregate = serde_json::Map::new();
    for &n in &CONCURRENCY {
        let mut seqs = Seqs::new(n, plan.batch_prompt, batch_blocks, vocab);
        seqs.run(&mut backend, plan.prefill_tokens, 2)?;
        let mut seqs = Seqs::new(n, plan.batch_prompt, batch_blocks, vocab);
        let steps = seqs.run(&mut backend, plan.prefill_tokens, plan.batch_tokens)?;
        let rate = (n * steps.len()) as f64 / (steps.iter().sum::<f64>() / 1000.0);
        println!(
            "backend: {n} sequences decode {rate:.0} tok/s in all, step p50 {:.3} ms p99 {:.3} ms",
            percentile(&steps, 50.0),
            percentile(&steps, 99.0)
        );
        aggregate.insert(n.to_string(), json!({ "tok_s": rate, "itl_ms": summary(&steps) }));
    }
    out.insert("aggregate_decode".into(), Value::Object(aggregate));
    let (graphs, disabled) = backend.graphs();
    out.insert("graphs_recorded".into(), json!(graphs));
    out.insert("graphs_disabled".into(), json!(disabled));
    Ok(Value::Object(out))
}

/// Submits one greedy request per prompt at once and waits for all; returns (wall seconds, the handles).
fn engine_round(
    engine: &Engine,
    prompts: Vec<Vec<TokenId>>,
    max_tokens: usize,
) -> Result<(f64, Vec<ember::engine::RequestHandle>), String> {
    let started = Instant::now();
    let handles = prompts
        .into_iter()
        .map(|p| {
            engine.submit(SubmitRequest::with_options(
                p,
                RequestOptions { max_tokens: Some(max_tokens), ignore_eos: true, ..Default::default() },
            ))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    for h in &handles {
        h.wait();
        if let Some(e) = h.error() {
            return Err(e);
        }
    }
    Ok((started.elapsed().as_secs_f64(), handles))
}

fn engine_bench(model: Arc<Model>, plan: &Plan) -> Result<Value, String> {
    let vocab = model.config.vocab_size;
    let max_batch = *CONCURRENCY.iter().max().expect("sizes");
    let config = EngineConfig {
        backend: BackendKind::Cuda,
        max_num_seqs: max_batch,
        max_num_batched_tokens: Some(plan.prefill_tokens.max(max_batch)),
        kv_cache_tokens: max_batch * (plan.batch_prompt + plan.batch_tokens + BLOCK) + 2 * plan.prefill_tokens,
        ..Default::default()
    };
    let engine = Engine::with_model(config, model, Logger::silent()).map_err(|e| e.to_string())?;
    let mut out = serde_json::Map::new();
    out.insert("backend".into(), json!(engine.backend_description()));

    // TTFT of a 512-token prompt on an idle engine (max_tokens 1).
    let mut ttft = Vec::new();
    for run in 0..=plan.prefill_runs {
        let (_, handles) = engine_round(&engine, vec![prompt(1000 + run, plan.prefill_tokens, vocab)], 1)?;
        if run > 0 {
            ttft.extend(handles[0].extended_metrics(0).ttft_from_arrival_ms);
        }
    }
    println!("engine: TTFT of a {}-token prompt, idle: p50 {:.2} ms", plan.prefill_tokens, median(&ttft));
    out.insert("ttft_512_idle_ms".into(), summary(&ttft));

    // Single stream.
    engine_round(&engine, vec![prompt(1, plan.single_prompt, vocab)], 8)?;
    let (_, handles) = engine_round(&engine, vec![prompt(2, plan.single_prompt, vocab)], plan.single_tokens)?;
    let m = handles[0].timing_metrics(0);
    let x = handles[0].extended_metrics(0);
    let rate = m.mean_itl_ms.map_or(f64::NAN, |itl| 1000.0 / itl);
    println!(
        "engine: single-stream decode {rate:.0} tok/s, ITL p50 {:.3} ms p99 {:.3} ms",
        x.itl_p50_ms.unwrap_or(f64::NAN),
        x.itl_p99_ms.unwrap_or(f64::NAN)
    );
    out.insert("single_decode_tok_s".into(), json!(rate));
    out.insert("single_itl_ms".into(), json!({ "p50": x.itl_p50_ms, "p99": x.itl_p99_ms }));

    // Concurrent requests.
    let mut aggregate = serde_json::Map::new();
    for &n in &CONCURRENCY {
        engine_round(&engine, (0..n).map(|s| prompt(s + 5000, plan.batch_prompt, vocab)).collect(), 2)?;
        let (wall, handles) =
            engine_round(&engine, (0..n).map(|s| prompt(s, plan.batch_prompt, vocab)).collect(), plan.batch_tokens)?;
        let tokens: u32 = handles.iter().map(|h| h.choices()[0].completion_tokens).sum();
        let ttft: Vec<f64> = handles.iter().filter_map(|h| h.extended_metrics(0).ttft_from_arrival_ms).collect();
        let gaps: Vec<f64> = handles
            .iter()
            .filter_map(|h| h.stats(0))
            .flat_map(|s| s.token_ts.windows(2).map(|w| (w[1] - w[0]) * 1000.0).collect::<Vec<_>>())
            .collect();
        let rate = f64::from(tokens) / wall;
        println!(
            "engine: {n} concurrent requests {rate:.0} tok/s in all; TTFT p50 {:.1} ms p99 {:.1} ms; ITL p50 {:.2} ms p99 {:.2} ms",
            percentile(&ttft, 50.0), percentile(&ttft, 99.0), percentile(&gaps, 50.0), percentile(&gaps, 99.0)
        );
        aggregate.insert(n.to_string(), json!({ "tok_s": rate, "ttft_ms": summary(&ttft), "itl_ms": summary(&gaps) }));
    }
    out.insert("aggregate_decode".into(), Value::Object(aggregate));
    Ok(Value::Object(out))
}

pub fn run(args: &Args) -> Result<(), String> {
    let path = args.model()?;
    let model = Arc::new(Model::load(Some(path)).map_err(|e| e.to_string())?);
    let plan = Plan::new(args.quick);
    let backend = backend_bench(&model, &plan)?;
    let engine = engine_bench(Arc::clone(&model), &plan)?;
    super::write_json(
        args,
        &json!({ "model": path.display().to_string(), "quick": args.quick, "backend": backend, "engine": engine }),
    )
}
