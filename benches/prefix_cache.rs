//! Automatic prefix caching on the real model: the same load with `enable_prefix_caching` off and on, in one
//! process, the two settings alternated so that a drifting machine disturbs both alike.
//!
//! 1. **Multi-turn chat**: one conversation whose every turn resends the whole history (user turns of ~200
//!    tokens, assistant turns the model's own previous answers), to ~2,000 tokens of context. Per turn: prompt
//!    tokens, cached prompt tokens, TTFT, off against on; the median over `--repeats` conversations. With caching
//!    on one engine serves every turn of a conversation (the reuse being measured); each repeat starts from fresh
//!    engines, so no repeat reuses an earlier one's cache.
//! 2. **Clients sharing the default system prompt**: `--clients` closed-loop threads sending different short user
//!    messages with no system message, so SmolLM2's template inserts its default one and every prompt starts
//!    with the same tokens. TTFT p50 / p99 / mean over all requests, and throughput.
//!
//! Requests go through the protocol layer (`ApiRequest`, as `engine_submit` does), temperature 0.
//!
//! `cargo bench --bench prefix_cache -- [--quick] [--threads 2] [--repeats 3] [--turns 9] [--user-tokens 200]
//! [--answer-tokens 32] [--scenario chat|clients|both] [--clients 16]
//! [--requests-per-client 4] [--json PATH]`. Prints a table per scenario and writes JSON (default
//! `target/bench-prefix-cache.json`).

use std::sync::Arc;
use std::time::Instant;

use ember::engine::metrics::nearest_rank;
use ember::engine::{Engine, EngineConfig, Logger};
use ember::model::chat_template::ChatMessage;
use ember::model::Model;
use ember::protocol::ApiRequest;
use serde_json::{json, Value};

/// The two settings compared; index 0 is off, 1 is on, in every `[_; 2]` below.
const MODES: [bool; 2] = [false, true];
/// Tokens each user turn of the conversation is filled to, its closing question included (`--user-tokens`).
const USER_TURN_TOKENS: usize = 200;
/// `max_tokens` of each assistant turn (`--answer-tokens`).
const ANSWER_TOKENS: usize = 32;
/// `max_tokens` of each request of the concurrent scenario.
const SHORT_ANSWER_TOKENS: usize = 16;

/// The user turns are drawn from these, so that turns differ from one another but every run sends the same text.
const SENTENCES: [&str; 23] = [
    "The old lighthouse keeper wrote down the colour of the sea every morning for forty years.",
    "A river that floods each spring leaves behind the silt that makes the valley fertile.",
    "Engineers who build bridges in cold places must allow the steel to shrink in winter.",
    "The library kept its rarest maps in a room where the air was always dry and cool.",
    "Bees find their way home by remembering the angle of the sun against the hills.",
    "When the market opened at dawn, the first traders to arrive took the shaded stalls.",
    "A good recipe for bread needs only flour, water, salt, yeast and a great deal of patience.",
    "The orchestra tuned to a single note from the oboe before every performance.",
    "Glaciers move so slowly that a stone carried by one may travel for a thousand years.",
    "The town council argued for a month about where to put the new railway station.",
    "Some desert plants open their flowers only at night, when the air is cool enough for moths.",
    "A ship's navigator once used the stars, a clock and a table of numbers to find the way.",
    "The first computers filled whole rooms and needed a team of people to keep them running.",
    "In the mountains the weather can change from sunshine to snow within a single hour.",
    "The painter mixed her colours on a board of glass so that she could see them clearly.",
    "Farmers rotate their crops so that the soil does not lose the same nutrients every year.",
    "A clockmaker's tools are so small that many of them have to be made by hand.",
    "The children planted a row of oak trees that would be tall long after they had grown old.",
    "Salt was once so valuable that soldiers were sometimes paid with it instead of coins.",
    "The museum's oldest boat was carved from a single trunk more than three thousand years ago.",
    "Trains in the north run on time even in deep snow because the tracks are heated.",
    "A letter sent across the ocean used to take several weeks to reach its reader.",
    "The scientist repeated the experiment ten times before she believed the result.",
];

/// The concurrent clients' messages (with the client and request numbers appended, so that no two are equal).
const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "How many legs does a spider have?",
    "Give me a word that rhymes with moon.",
    "What do bees make?",
    "Why is the sky blue?",
    "Suggest a name for a small dog.",
    "What is two plus two?",
];

struct Args {
    quick: bool,
    threads: usize,
    repeats: Option<usize>,
    turns: Option<usize>,
    clients: usize,
    requests_per_client: Option<usize>,
    user_tokens: usize,
    answer_tokens: usize,
    /// Run the multi-turn chat, the concurrent clients, or both (`--scenario chat|clients|both`).
    chat: bool,
    clients_scenario: bool,
    json: String,
}

impl Args {
    /// Explicit options win over `--quick`'s smaller defaults, whatever their order on the command line.
    fn repeats(&self) -> usize {
        self.repeats.unwrap_or(if self.quick { 1 } else { 3 })
    }
    fn turns(&self) -> usize {
        self.turns.unwrap_or(if self.quick { 3 } else { 9 })
    }
    fn requests_per_client(&self) -> usize {
        self.requests_per_client.unwrap_or(if self.quick { 1 } else { 4 })
    }
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        threads: 2,
        repeats: None,
        turns: None,
        clients: 16,
        requests_per_client: None,
        user_tokens: USER_TURN_TOKENS,
        answer_tokens: ANSWER_TOKENS,
        chat: true,
        clients_scenario: true,
        json: "target/bench-prefix-cache.json".into(),
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        let value = |i: usize| raw.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", raw[i])).clone();
        let count = |i: usize| value(i).parse::<usize>().unwrap_or_else(|_| panic!("{} N", raw[i]));
        match raw[i].as_str() {
            "--quick" | "--bench" => {
                // `cargo bench` passes --bench to every bench binary.
                args.quick |= raw[i] == "--quick";
                i += 1;
                continue;
            }
            "--threads" => args.threads = count(i),
            "--repeats" => args.repeats = Some(count(i)),
            "--turns" => args.turns = Some(count(i)),
            "--clients" => args.clients = count(i),
            "--requests-per-client" => args.requests_per_client = Some(count(i)),
            "--user-tokens" => args.user_tokens = count(i),
            "--answer-tokens" => args.answer_tokens = count(i),
            "--scenario" => {
                (args.chat, args.clients_scenario) = match value(i).as_str() {
                    "chat" => (true, false),
                    "clients" => (false, true),
                    "both" => (true, true),
                    other => panic!("--scenario chat|clients|both, not {other}"),
                }
            }
            "--json" => args.json = value(i),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    assert!(args.repeats() > 0 && args.turns() > 0 && args.clients > 0 && args.requests_per_client() > 0);
    args
}

/// A fresh engine, configured through the public JSON keys a host would use.
fn engine(model: &Arc<Model>, threads: usize, prefix_caching: bool) -> Engine {
    let config = json!({
        "backend": "cpu", "threads": threads, "enable_prefix_caching": prefix_caching,
        // Per-request metrics in the response; the stats they come from are recorded by default
        // (`disable_log_stats` false), and the handle's metrics below read those.
        "enable_per_request_metrics": true,
    });
    let config = EngineConfig::from_json(&config.to_string()).unwrap_or_else(|e| panic!("{e}"));
    Engine::with_model(config, Arc::clone(model), Logger::silent()).expect("engine")
}

/// What one request measured.
struct Served {
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
    /// From first scheduling (the metric `time_to_first_token_ms`).
    ttft_ms: f64,
    /// From arrival (queueing included): what a client waits.
    ttft_arrival_ms: f64,
    text: String,
}

/// Sends one chat request, waits for its end and reads what it measured.
fn serve(engine: &Engine, messages: &[Value], max_tokens: usize, ignore_eos: bool) -> Served {
    let body = json!({
        "messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": ignore_eos,
        "include_metrics": true,
    });
    let request = ApiRequest::submit(engine, &body.to_string(), None).unwrap_or_else(|e| panic!("{}", e.to_json()));
    let handle = request.handle();
    handle.wait();
    let doc: Value = serde_json::from_str(&request.response_json().expect("finished")).expect("response JSON");
    assert!(doc.get("error").is_none(), "the request failed: {}", doc["error"]);
    let usage = &doc["usage"];
    let extended = handle.extended_metrics(0);
    // OpenAI's field once the response carries it; until then the engine's own count.
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
    Served {
        prompt_tokens: usage["prompt_tokens"].as_u64().expect("usage.prompt_tokens"),
        cached_tokens: cached.or(extended.num_cached_prompt_tokens.map(u64::from)).expect("cached prompt tokens"),
        completion_tokens: usage["completion_tokens"].as_u64().expect("usage.completion_tokens"),
        ttft_ms: handle.timing_metrics(0).time_to_first_token_ms.expect("TTFT recorded"),
        ttft_arrival_ms: extended.ttft_from_arrival_ms.expect("TTFT from arrival recorded"),
        text: doc["choices"][0]["message"]["content"].as_str().expect("assistant message").to_owned(),
    }
}

/// Which setting goes first at step `k`: alternating, so that neither always runs on the warmer (or noisier) side.
fn order(k: usize) -> [usize; 2] {
    if k.is_multiple_of(2) {
        [0, 1]
    } else {
        [1, 0]
    }
}

/// Nearest-rank median (the lower middle for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    nearest_rank(&v, 50.0).expect("at least one value")
}

// ---- Scenario 1: multi-turn chat ----

/// User turn `turn`: sentences picked by a fixed stride (each turn a different sequence) until ~200 tokens,
/// then a question, so that the model has something to answer.
fn user_turn(model: &Model, turn: usize, tokens: usize) -> String {
    let question = "Summarise these notes in one sentence.";
    let budget = tokens.saturating_sub(model.tokenizer.encode(question, false).len());
    let mut text = format!("Here is part {} of my notes.", turn + 1);
    for j in 0.. {
        let candidate = format!("{text} {}", SENTENCES[(turn * 5 + j * 7) % SENTENCES.len()]);
        if model.tokenizer.encode(&candidate, false).len() > budget {
            break;
        }
        text = candidate;
    }
    format!("{text} {question}")
}

/// One conversation per setting, turn by turn (off and on alternating which goes first), each on a fresh engine
/// that serves all its turns. Each setting keeps its own history: its assistant turns are its own answers.
fn conversation(model: &Arc<Model>, args: &Args, users: &[String], repeat: usize) -> [Vec<Served>; 2] {
    let threads = args.threads;
    let engines = MODES.map(|on| engine(model, threads, on));
    let mut histories: [Vec<Value>; 2] = Default::default();
    let mut turns: [Vec<Served>; 2] = Default::default();
    for (t, user) in users.iter().enumerate() {
        for m in order(repeat + t) {
            histories[m].push(json!({"role": "user", "content": user}));
            let served = serve(&engines[m], &histories[m], args.answer_tokens, false);
            histories[m].push(json!({"role": "assistant", "content": served.text}));
            turns[m].push(served);
        }
    }
    turns
}

/// One turn's medians over the repeats, per setting.
struct TurnRow {
    prompt_tokens: [u64; 2],
    cached_tokens: [u64; 2],
    ttft_ms: [f64; 2],
    /// Every repeat's TTFT, for the JSON.
    ttft_runs_ms: [Vec<f64>; 2],
}

fn turn_rows(runs: &[[Vec<Served>; 2]], turns: usize) -> Vec<TurnRow> {
    let med = |t: usize, m: usize, f: fn(&Served) -> f64| median(runs.iter().map(|r| f(&r[m][t])));
    (0..turns)
        .map(|t| TurnRow {
            // A nearest-rank median is one of the values: the counts stay whole.
            prompt_tokens: [0, 1].map(|m| med(t, m, |s| s.prompt_tokens as f64) as u64),
            cached_tokens: [0, 1].map(|m| med(t, m, |s| s.cached_tokens as f64) as u64),
            ttft_ms: [0, 1].map(|m| med(t, m, |s| s.ttft_ms)),
            ttft_runs_ms: [0, 1].map(|m| runs.iter().map(|r| r[m][t].ttft_ms).collect()),
        })
        .collect()
}

fn print_turns(rows: &[TurnRow], args: &Args) {
    let (repeats, user_tokens, answer_tokens) = (args.repeats(), args.user_tokens, args.answer_tokens);
    println!(
        "\nmulti-turn chat: ~{user_tokens}-token user turns, answers of up to {answer_tokens} tokens, \
         median of {repeats} conversation(s); one engine per setting serves all turns of a conversation, \
         each repeat on fresh engines (no cache carried over)"
    );
    println!(
        "{:>4} {:>10} {:>9} {:>10} {:>9} {:>12} {:>11} {:>7}",
        "turn", "prompt off", "prompt on", "cached off", "cached on", "TTFT off ms", "TTFT on ms", "off/on"
    );
    for (t, r) in rows.iter().enumerate() {
        println!(
            "{:>4} {:>10} {:>9} {:>10} {:>9} {:>12.1} {:>11.1} {:>7.2}",
            t + 1,
            r.prompt_tokens[0],
            r.prompt_tokens[1],
            r.cached_tokens[0],
            r.cached_tokens[1],
            r.ttft_ms[0],
            r.ttft_ms[1],
            r.ttft_ms[0] / r.ttft_ms[1]
        );
    }
    let total = |m: usize| rows.iter().map(|r| r.ttft_ms[m]).sum::<f64>();
    println!(
        "sum of the turns' median TTFTs: off {:.1} ms, on {:.1} ms, off/on {:.2}",
        total(0),
        total(1),
        total(0) / total(1)
    );
}

fn turns_json(rows: &[TurnRow]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .enumerate()
        .map(|(t, r)| {
            json!({
                "turn": t + 1,
                "prompt_tokens_off": r.prompt_tokens[0], "prompt_tokens_on": r.prompt_tokens[1],
                "cached_tokens_off": r.cached_tokens[0], "cached_tokens_on": r.cached_tokens[1],
                "ttft_ms_off": r.ttft_ms[0], "ttft_ms_on": r.ttft_ms[1],
                "ttft_off_over_on": r.ttft_ms[0] / r.ttft_ms[1],
                "ttft_ms_off_runs": r.ttft_runs_ms[0], "ttft_ms_on_runs": r.ttft_runs_ms[1],
            })
        })
        .collect();
    Value::from(rows)
}

// ---- Scenario 2: concurrent clients sharing the default system prompt ----

/// The prompt tokens that every request of this scenario shares: the template's default system prompt and what
/// precedes the user's text (the common prefix of two rendered, tokenized prompts).
fn shared_prefix_tokens(model: &Model) -> usize {
    let tokens = |q: &str| {
        let text = model.chat_template.render(&[ChatMessage::new("user", q)], true).expect("template");
        model.tokenizer.encode(&text, true)
    };
    let (a, b) = (tokens(QUESTIONS[0]), tokens(QUESTIONS[1]));
    a.iter().zip(&b).take_while(|(x, y)| x == y).count()
}

/// All requests of one run on a fresh engine, and its wall time.
struct Load {
    served: Vec<Served>,
    seconds: f64,
}

/// `clients` threads, each sending `requests` requests one after another (closed loop), no system message.
/// `ignore_eos`: every request generates the same number of tokens, so throughput compares like with like.
fn concurrent_load(model: &Arc<Model>, threads: usize, on: bool, clients: usize, requests: usize) -> Load {
    let engine = Arc::new(engine(model, threads, on));
    let start = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                (0..requests)
                    .map(|r| {
                        let question = QUESTIONS[(c * requests + r) % QUESTIONS.len()];
                        let content = format!("{question} (client {c}, question {r})");
                        serve(&engine, &[json!({"role": "user", "content": content})], SHORT_ANSWER_TOKENS, true)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let served = workers.into_iter().flat_map(|w| w.join().expect("client thread")).collect();
    Load { served, seconds: start.elapsed().as_secs_f64() }
}

/// One setting's figures over all its runs (requests pooled).
struct LoadSummary {
    requests: usize,
    ttft_ms: Vec<f64>,
    ttft_arrival_ms: Vec<f64>,
    prompt_tokens: u64,
    cached_tokens: u64,
    completion_tokens: u64,
    seconds: f64,
}

impl LoadSummary {
    fn new(loads: &[Load]) -> Self {
        let served: Vec<&Served> = loads.iter().flat_map(|l| &l.served).collect();
        let sorted = |f: fn(&Served) -> f64| {
            let mut v: Vec<f64> = served.iter().map(|s| f(s)).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        LoadSummary {
            requests: served.len(),
            ttft_ms: sorted(|s| s.ttft_ms),
            ttft_arrival_ms: sorted(|s| s.ttft_arrival_ms),
            prompt_tokens: served.iter().map(|s| s.prompt_tokens).sum(),
            cached_tokens: served.iter().map(|s| s.cached_tokens).sum(),
            completion_tokens: served.iter().map(|s| s.completion_tokens).sum(),
            seconds: loads.iter().map(|l| l.seconds).sum(),
        }
    }
    fn p(&self, p: f64) -> f64 {
        nearest_rank(&self.ttft_ms, p).expect("requests")
    }
    fn arrival_p(&self, p: f64) -> f64 {
        nearest_rank(&self.ttft_arrival_ms, p).expect("requests")
    }
    fn mean(&self) -> f64 {
        self.ttft_ms.iter().sum::<f64>() / self.ttft_ms.len() as f64
    }
    fn tokens_per_s(&self) -> f64 {
        self.completion_tokens as f64 / self.seconds
    }
    fn requests_per_s(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
    fn json(&self) -> Value {
        json!({
            "requests": self.requests, "seconds": self.seconds,
            "ttft_ms_p50": self.p(50.0), "ttft_ms_p99": self.p(99.0), "ttft_ms_mean": self.mean(),
            "ttft_from_arrival_ms_p50": self.arrival_p(50.0), "ttft_from_arrival_ms_p99": self.arrival_p(99.0),
            "prompt_tokens": self.prompt_tokens, "cached_prompt_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens_per_s": self.tokens_per_s(), "requests_per_s": self.requests_per_s(),
        })
    }
}

fn print_load(summaries: &[LoadSummary; 2], args: &Args, shared: usize) {
    let block = EngineConfig::default().kv_block_size;
    println!(
        "\n{} concurrent clients, {} request(s) each (closed loop), no system message (all share the template's \
         {shared}-token default prefix; only whole {block}-token KV blocks can be reused), {SHORT_ANSWER_TOKENS} \
         generated tokens each (ignore_eos); {} run(s) per setting on fresh engines, requests pooled; TTFT from \
         scheduling, \"arr\" from arrival",
        args.clients,
        args.requests_per_client(),
        args.repeats()
    );
    println!(
        "{:>7} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>15} {:>8} {:>10}",
        "caching",
        "requests",
        "TTFT p50",
        "TTFT p99",
        "TTFT mean",
        "arr p50",
        "arr p99",
        "cached/prompt",
        "tokens/s",
        "requests/s"
    );
    for (m, s) in summaries.iter().enumerate() {
        println!(
            "{:>7} {:>8} {:>8.1} {:>8.1} {:>9.1} {:>8.1} {:>8.1} {:>15} {:>8.1} {:>10.2}",
            if MODES[m] { "on" } else { "off" },
            s.requests,
            s.p(50.0),
            s.p(99.0),
            s.mean(),
            s.arrival_p(50.0),
            s.arrival_p(99.0),
            format!("{}/{}", s.cached_tokens, s.prompt_tokens),
            s.tokens_per_s(),
            s.requests_per_s()
        );
    }
    let [off, on] = summaries;
    println!(
        "off/on: TTFT p50 {:.2}, p99 {:.2}, mean {:.2}; throughput on/off {:.2}",
        off.p(50.0) / on.p(50.0),
        off.p(99.0) / on.p(99.0),
        off.mean() / on.mean(),
        on.tokens_per_s() / off.tokens_per_s()
    );
}

fn main() {
    let args = parse_args();
    let model = Arc::new(Model::load(None).unwrap_or_else(|e| panic!("{e}")));
    // Warm-up on a throwaway engine: the first touch of the model's pages, which neither setting should pay.
    serve(&engine(&model, args.threads, false), &[json!({"role": "user", "content": QUESTIONS[0]})], 4, false);
    println!("prefix caching benchmark: {} threads, backend cpu", args.threads);

    let users: Vec<String> = (0..args.turns()).map(|t| user_turn(&model, t, args.user_tokens)).collect();
    let rows = if args.chat {
        let runs: Vec<[Vec<Served>; 2]> = (0..args.repeats()).map(|r| conversation(&model, &args, &users, r)).collect();
        let rows = turn_rows(&runs, args.turns());
        print_turns(&rows, &args);
        rows
    } else {
        Vec::new()
    };

    let mut loads: [Vec<Load>; 2] = Default::default();
    if args.clients_scenario {
        for r in 0..args.repeats() {
            for m in order(r) {
                let load = concurrent_load(&model, args.threads, MODES[m], args.clients, args.requests_per_client());
                loads[m].push(load);
            }
        }
    }
    let summaries = [LoadSummary::new(&loads[0]), LoadSummary::new(&loads[1])];
    let shared = shared_prefix_tokens(&model);
    if args.clients_scenario {
        print_load(&summaries, &args, shared);
    }

    // A scenario that did not run is null.
    let multi_turn = args.chat.then(|| {
        json!({
            "turns": args.turns(), "user_turn_tokens": args.user_tokens, "max_tokens": args.answer_tokens,
            "per_turn": turns_json(&rows),
        })
    });
    let shared_system_prompt = args.clients_scenario.then(|| {
        json!({
            "clients": args.clients, "requests_per_client": args.requests_per_client(),
            "max_tokens": SHORT_ANSWER_TOKENS, "shared_prefix_tokens": shared,
            "kv_block_size": EngineConfig::default().kv_block_size,
            "off": summaries[0].json(), "on": summaries[1].json(),
        })
    });
    let doc = json!({
        "bench": "prefix_cache", "threads": args.threads, "repeats": args.repeats(), "quick": args.quick,
        "fresh_engines_per_repeat": true, "multi_turn": multi_turn, "shared_system_prompt": shared_system_prompt,
    });
    println!("{doc}");
    if let Err(e) = std::fs::write(&args.json, format!("{doc:#}\n")) {
        eprintln!("cannot write {}: {e}", args.json);
    }
}
