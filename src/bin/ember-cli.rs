//! ember's command-line tool: model facts, tokenization, a chat answer on the CPU, synthetic models, and models
//! from the Hugging Face hub (`pull`, `list`). `ember-cli --help` lists the commands, `ember-cli COMMAND --help`
//! explains one (the text is `COMMANDS` below).
//!
//! `--model` takes a GGUF file or a hub name (`org/repo:QUANT`, `hf://org/repo/file.gguf`: from the Hugging Face
//! cache, downloaded into it when missing); without it, `EMBER_MODEL`, else the default model (docs/models.md).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions};
use ember::engine::generate::{generate, single_sequence_window_blocks, GenerateRequest, SingleSequenceLayout};
use ember::engine::sampling::SamplingParams;
use ember::hub::{self, DownloadProgress, Freshness, HubRef, HubSettings};
use ember::model::chat_template::ChatMessage;
use ember::model::encoder::{decoder_family_writer, SyntheticEncoder, DECODER_FAMILIES};
use ember::model::gguf::GgufFile;
use ember::model::llama::architecture::MultiplierRule;
use ember::model::llama::{Architecture, GraniteScales, SyntheticSpec};
use ember::model::tokenizer::{StreamDecoder, Tokenizer};
use ember::model::{Model, ModelError};

/// Each command: its name, its arguments, and what it does (its `--help`).
const COMMANDS: [(&str, &str, &str); 9] = [
    ("info", "[--model MODEL] [MESSAGE]", "Prints the model's facts and a tokenized chat prompt."),
    (
        "tokenize",
        "[--model MODEL] [--special] TEXT",
        "Prints TEXT's token ids and texts (--special: special tokens parsed).",
    ),
    (
        "chat",
        "[--model MODEL] [--max-tokens N] [--threads N] [--temperature T] [--seed S] MESSAGE",
        "Answers MESSAGE as a one-turn chat, on the CPU, and prints the timings.",
    ),
    (
        "complete",
        "[--model MODEL] [--max-tokens N] [--threads N] [--temperature T] [--seed S] PROMPT",
        "Continues a plain-text PROMPT (base models such as Gemma 3 270M).",
    ),
    (
        "synthetic",
        "PATH [--seed S] [--tiny] | PATH --family F --layers N [--seed S] [--arch A] [--vocab V]",
        "Writes a model of SmolLM2-135M's shapes with random weights (--tiny: 2 layers of width 64 and a byte \
         vocabulary, which an engine loads and runs in milliseconds); with --family, that family's layer shapes, N \
         layers and a byte vocabulary (an encoder family takes its tokenizer from the vocabulary-only GGUF V); \
         --arch writes those shapes as another architecture.",
    ),
    ("kernels", "[--default]", "Prints the CPU kernel paths this CPU runs, or (--default) the one in use."),
    (
        "pull",
        "NAME",
        "Downloads NAME (org/repo:QUANT, org/repo, hf://org/repo/file.gguf) into the Hugging Face cache at the \
         repository's latest commit, resuming a partial download, checked against the hub's sha256; prints the \
         file's path (each part's, for a split model). HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE, \
         HF_HUB_OFFLINE and HF_HUB_DOWNLOAD_TIMEOUT apply (docs/models.md).",
    ),
    ("list", "", "Lists the GGUF models in the Hugging Face cache: the name that loads each, its size, its path."),
    ("help", "[COMMAND]", "Explains COMMAND, or lists the commands."),
];

/// The list of commands.
fn usage() -> String {
    let lines: Vec<String> =
        COMMANDS.iter().map(|(name, args, _)| format!("  ember-cli {name:<9} {args}").trim_end().to_owned()).collect();
    format!(
        "usage:\n{}\n\nMODEL is a GGUF file or a hub name (org/repo:QUANT); `ember-cli COMMAND --help` explains one.",
        lines.join("\n")
    )
}

/// One command's help, or `None` for an unknown command.
fn command_help(command: &str) -> Option<String> {
    let (name, args, what) = COMMANDS.iter().find(|(name, _, _)| *name == command)?;
    Some(format!("usage: ember-cli {name} {args}\n\n{what}"))
}

/// Parsed command-line options (every command takes the subset it needs).
#[derive(Default)]
struct Args {
    model: Option<PathBuf>,
    help: bool,
    max_tokens: Option<usize>,
    threads: Option<usize>,
    temperature: Option<f32>,
    seed: Option<u64>,
    special: bool,
    tiny: bool,
    default: bool,
    family: Option<String>,
    layers: Option<usize>,
    arch: Option<String>,
    vocab: Option<PathBuf>,
    positional: Vec<String>,
}

fn parse_args(raw: &[String]) -> Result<Args, String> {
    let mut args = Args::default();
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--model" => args.model = Some(value("--model")?.into()),
            "--family" => args.family = Some(value("--family")?),
            "--layers" => args.layers = Some(parse_num(&value("--layers")?, "--layers")?),
            "--arch" => args.arch = Some(value("--arch")?),
            "--vocab" => args.vocab = Some(value("--vocab")?.into()),
            "--max-tokens" => args.max_tokens = Some(parse_num(&value("--max-tokens")?, "--max-tokens")?),
            "--threads" => args.threads = Some(parse_num(&value("--threads")?, "--threads")?),
            "--temperature" => args.temperature = Some(parse_num(&value("--temperature")?, "--temperature")?),
            "--seed" => args.seed = Some(parse_num(&value("--seed")?, "--seed")?),
            "--special" => args.special = true,
            "--tiny" => args.tiny = true,
            "--default" => args.default = true,
            "--help" | "-h" => args.help = true,
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            _ => args.positional.push(a.clone()),
        }
    }
    Ok(args)
}

fn parse_num<T: std::str::FromStr>(s: &str, name: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("{name}: cannot parse {s:?}"))
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = raw.split_first() else {
        eprintln!("{}", usage());
        return ExitCode::from(2);
    };
    let result = parse_args(rest).and_then(|args| match command.as_str() {
        "--help" | "-h" => show(Some(usage()), command),
        "help" => match args.positional.first() {
            Some(topic) => show(command_help(topic), topic),
            None => show(Some(usage()), command),
        },
        name if args.help => show(command_help(name), name),
        "info" => info(&args),
        "tokenize" => tokenize(&args),
        "chat" => chat(&args),
        "complete" => complete(&args),
        "synthetic" => synthetic(&args),
        "kernels" => kernel_paths(&args),
        "pull" => pull(&args),
        "list" => list(),
        other => Err(format!("unknown command {other:?}\n{}", usage())),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a help text, or says that `topic` is no command.
fn show(text: Option<String>, topic: &str) -> Result<(), String> {
    let text = text.ok_or_else(|| format!("unknown command {topic:?}\n{}", usage()))?;
    println!("{text}");
    Ok(())
}

/// The model file `--model` names: a hub name is resolved (downloaded, with progress on stderr, when the cache
/// lacks it); a path, or no `--model`, goes to the loader's rule as it is.
fn model_path(args: &Args) -> Result<Option<PathBuf>, String> {
    let Some(model) = &args.model else { return Ok(None) };
    if !ember::model::locate::names_hub_model(Some(model)) {
        return Ok(Some(model.clone()));
    }
    let name = HubRef::parse(&model.to_string_lossy()).map_err(|e| e.to_string())?;
    let found = fetch(&name, Freshness::CacheFirst)?;
    if found.files.len() > 1 {
        return Err(ModelError::Split { name: name.to_string(), parts: found.files }.to_string());
    }
    Ok(Some(found.first().clone()))
}

/// Resolves `name` through the hub, reporting a download on stderr.
fn fetch(name: &HubRef, freshness: Freshness) -> Result<ember::hub::Resolved, String> {
    let mut progress = Downloading { name: name.to_string(), total: 0, done: 0, shown: 0, start: Instant::now() };
    hub::resolve(name, &HubSettings::from_env(), freshness, &mut progress).map_err(|e| e.to_string())
}

/// A download's progress on stderr, a line every tenth.
struct Downloading {
    name: String,
    total: u64,
    done: u64,
    shown: u64,
    start: Instant,
}

impl DownloadProgress for Downloading {
    fn start(&mut self, total_bytes: u64) -> bool {
        self.total = total_bytes;
        if total_bytes > 0 {
            eprintln!("downloading {} ({})", self.name, size_text(total_bytes));
        }
        true
    }

    fn advance(&mut self, bytes: u64) -> bool {
        self.done += bytes;
        let tenths = (self.done * 10).checked_div(self.total).unwrap_or(10);
        if tenths > self.shown {
            self.shown = tenths;
            let rate = self.done as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
            eprintln!(
                "  {:3}%  {} of {}, {}/s",
                tenths * 10,
                size_text(self.done),
                size_text(self.total),
                size_text(rate as u64)
            );
        }
        true
    }
}

/// Bytes as a person reads them (decimal units, as the hub shows sizes).
fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{:.1} GB", b as f64 / 1e9),
        b if b >= 1_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b if b >= 1_000 => format!("{:.1} kB", b as f64 / 1e3),
        b => format!("{b} B"),
    }
}

/// `pull NAME`: the latest commit's file in the cache, its path(s) on stdout.
fn pull(args: &Args) -> Result<(), String> {
    let [name] = args.positional.as_slice() else { return Err(format!("pull needs one NAME\n{}", usage())) };
    let name = HubRef::parse(name).map_err(|e| e.to_string())?;
    let found = fetch(&name, Freshness::Latest)?;
    for file in &found.files {
        println!("{}", file.display());
    }
    match found.fetched_bytes {
        0 => eprintln!("{name} is in the cache (commit {})", found.commit),
        n => eprintln!("{name}: {} downloaded (commit {})", size_text(n), found.commit),
    }
    Ok(())
}

/// `list`: the cache's GGUF models, one a line.
fn list() -> Result<(), String> {
    let settings = HubSettings::from_env();
    let models = hub::cached_models(&settings.cache_dir);
    if models.is_empty() {
        eprintln!("no GGUF models in the Hugging Face cache {}", settings.cache_dir.display());
        return Ok(());
    }
    let width = models.iter().map(|m| m.name.len()).max().unwrap_or(0).max(4);
    println!("{:<width$}  {:>9}  PATH", "NAME", "SIZE");
    for m in models {
        let parts = match m.parts {
            (_, 1) => String::new(),
            (present, all) => format!(" ({present} of {all} parts)"),
        };
        println!("{:<width$}  {:>9}  {}{parts}", m.name, size_text(m.bytes), m.path.display());
    }
    Ok(())
}

fn load(args: &Args) -> Result<(Model, f64), String> {
    let start = Instant::now();
    let model = Model::load(model_path(args)?.as_deref()).map_err(|e| e.to_string())?;
    Ok((model, start.elapsed().as_secs_f64() * 1000.0))
}

fn chat_prompt(model: &Model, message: &str) -> Result<Vec<u32>, String> {
    let rendered = model.chat_template.render(&[ChatMessage::new("user", message)], true).map_err(|e| e.to_string())?;
    let mut ids = Vec::new();
    if model.tokenizer.add_bos() {
        ids.extend(model.tokenizer.bos_id());
    }
    ids.extend(model.tokenizer.encode(&rendered, true));
    Ok(ids)
}

fn info(args: &Args) -> Result<(), String> {
    let (model, load_ms) = load(args)?;
    let c = &model.config;
    println!("model        {} ({})", model.name(), model.path.display());
    println!(
        "loaded in    {load_ms:.1} ms (GGUF v{}, {} tensors)",
        model.file.version(),
        model.file.tensor_infos().len()
    );
    println!("layers       {}, width {}, FFN {}", c.n_layer, c.n_embd, c.n_ff);
    println!("heads        {} query, {} key/value, {} wide", c.n_head, c.n_head_kv, c.head_dim);
    println!("rope         base {}, {} dims; rms eps {}", c.rope_base, c.rope_dim, c.rms_eps);
    println!("context      {} tokens; vocabulary {} tokens", c.context_length, c.vocab_size);
    println!("output       {}", if c.tied_output { "tied to the token embedding" } else { "separate" });
    for (i, (dtype, count, bytes)) in model.file.type_summary().into_iter().enumerate() {
        let label = if i == 0 { "types" } else { "" };
        println!("{label:<12} {:<7} {count:4} tensors {:10.2} MiB", dtype.name(), bytes as f64 / (1 << 20) as f64);
    }
    let message = args.positional.first().map_or("What is the boiling point of water in Celsius?", String::as_str);
    let rendered = model.chat_template.render(&[ChatMessage::new("user", message)], true).map_err(|e| e.to_string())?;
    let ids = chat_prompt(&model, message)?;
    println!("\nchat prompt ({} tokens):\n{rendered}", ids.len());
    println!("token ids: {ids:?}");
    Ok(())
}

/// Tokenizes with the file's vocabulary alone: no weights are read, so a vocabulary-only GGUF (such as llama.cpp's
/// `ggml-vocab-*.gguf`) works too.
fn tokenize(args: &Args) -> Result<(), String> {
    let text = args.positional.first().ok_or("tokenize needs a TEXT")?;
    let path = ember::model::path::resolve_model_path(model_path(args)?.as_deref()).map_err(|e| e.to_string())?;
    let file = GgufFile::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tokenizer = Tokenizer::from_gguf(&file).map_err(|e| format!("{}: {e}", path.display()))?;
    for id in tokenizer.encode(text, args.special) {
        println!("{id:6} {:?}", tokenizer.token_text(id).unwrap_or(""));
    }
    Ok(())
}

fn chat(args: &Args) -> Result<(), String> {
    let (model, load_ms) = load(args)?;
    let message = args.positional.first().ok_or("chat needs a MESSAGE")?;
    let prompt = chat_prompt(&model, message)?;
    run(args, &model, load_ms, message, &prompt)
}

/// Continues `PROMPT` as plain text: BOS when the vocabulary asks for it, then the text (special tokens parsed, as
/// the completions API does).
fn complete(args: &Args) -> Result<(), String> {
    let (model, load_ms) = load(args)?;
    let text = args.positional.first().ok_or("complete needs a PROMPT")?;
    let mut prompt: Vec<u32> = model.tokenizer.bos_id().filter(|_| model.tokenizer.add_bos()).into_iter().collect();
    prompt.extend(model.tokenizer.encode(text, true));
    run(args, &model, load_ms, text, &prompt)
}

/// Generates from `prompt` on the CPU, printing the text as it comes and a line of timings.
fn run(args: &Args, model: &Model, load_ms: f64, message: &str, prompt: &[u32]) -> Result<(), String> {
    let mut options = CpuBackendOptions::single_sequence(model.config.context_length.min(4096));
    if let Some(t) = args.threads {
        options.threads = t;
    }
    // Sliding-window layers keep only their windows' blocks.
    options.kv_window_blocks = single_sequence_window_blocks(&model.config, &options);
    let layout = SingleSequenceLayout::of(&options);
    let mut backend = CpuBackend::new(&model.file, model.config.clone(), options).map_err(|e| e.to_string())?;
    let sampling =
        SamplingParams { temperature: args.temperature.unwrap_or(0.0), seed: args.seed, ..Default::default() };
    sampling.validate(model.config.vocab_size).map_err(|e| e.to_string())?;
    let request = GenerateRequest {
        prompt,
        max_tokens: args.max_tokens.unwrap_or(128),
        sampling,
        stop_ids: model.tokenizer.eog_ids(),
        default_seed: 0,
    };
    println!("> {message}");
    let mut stream = StreamDecoder::new(false);
    let mut stdout = std::io::stdout();
    let generation =
        generate(&model.config, &mut backend, layout, &request, |token| match stream.push(&model.tokenizer, token) {
            Ok(text) => {
                let _ = stdout.write_all(text.as_bytes());
                let _ = stdout.flush();
                ControlFlow::Continue(())
            }
            Err(_) => ControlFlow::Break(()),
        })
        .map_err(|e| e.to_string())?;
    println!("{}", stream.finish());
    let n = generation.tokens.len();
    println!(
        "\n[{} prompt tokens, {n} generated ({}); load {load_ms:.0} ms, first token {:.0} ms, decode {} on {} threads, {} kernels]",
        prompt.len(),
        generation.finish_reason,
        generation.time_to_first_token.as_secs_f64() * 1000.0,
        generation.decode_tokens_per_second().map_or("n/a".to_owned(), |r| format!("{r:.1} tokens/s")),
        backend.options().threads,
        backend.kernel_path(),
    );
    Ok(())
}

fn synthetic(args: &Args) -> Result<(), String> {
    let path = args.positional.first().ok_or("synthetic needs a PATH")?;
    let seed = args.seed.unwrap_or(0);
    let writer = match args.family.as_deref() {
        // With a byte vocabulary, so that an engine can load it: hosts' tests that need any model, fast.
        None if args.tiny => SyntheticSpec::tiny(seed).writer_with_byte_vocabulary(),
        None => SyntheticSpec::smollm2_135m(seed).writer(),
        Some(family) if SyntheticEncoder::FAMILIES.contains(&family) => {
            let layers = args.layers.ok_or("--family needs --layers")?;
            let spec = SyntheticEncoder::family(family, seed, layers).ok_or("unknown encoder family")?;
            let vocab = args.vocab.as_ref().ok_or("an encoder family needs --vocab VOCAB.gguf (its tokenizer)")?;
            let vocab = GgufFile::open(vocab).map_err(|e| format!("{}: {e}", vocab.display()))?;
            spec.writer(&vocab)
        }
        Some(family) if DECODER_FAMILIES.contains(&family) => {
            let layers = args.layers.ok_or("--family needs --layers")?;
            decoder_family_writer(family, seed, layers).ok_or("unknown decoder embedding family")?
        }
        Some(family) => {
            let layers = args.layers.ok_or("--family needs --layers")?;
            let mut spec = SyntheticSpec::family(family, seed, layers).ok_or_else(|| {
                let names: Vec<&str> = SyntheticSpec::FAMILIES
                    .iter()
                    .chain(&SyntheticEncoder::FAMILIES)
                    .chain(&DECODER_FAMILIES)
                    .copied()
                    .collect();
                format!("unknown family {family:?} ({})", names.join(", "))
            })?;
            if let Some(name) = &args.arch {
                let names: Vec<&str> = Architecture::all().iter().map(|a| a.name()).collect();
                spec.arch = Architecture::named(name)
                    .ok_or_else(|| format!("unknown architecture {name:?} ({})", names.join(", ")))?;
                // A Granite file must carry its logit divisor: Granite 3.1's multipliers.
                if spec.arch.spec().multipliers == MultiplierRule::Granite && spec.granite.is_none() {
                    spec.granite = Some(GraniteScales::GRANITE_3_1_2B);
                }
            }
            spec.writer_with_byte_vocabulary()
        }
    };
    writer.write(std::path::Path::new(path)).map_err(|e| format!("cannot write {path}: {e}"))?;
    println!("{path}");
    Ok(())
}

/// Prints the kernel paths this CPU runs, slowest first, one per line; with `--default`, the one an engine uses
/// (the fastest, or the one `EMBER_CPU_KERNELS` names; its warning, if any, on stderr).
fn kernel_paths(args: &Args) -> Result<(), String> {
    use ember::backend::cpu::kernels::{kernel_selection, supported_kernels};
    if args.default {
        let selection = kernel_selection();
        if let Some(warning) = &selection.warning {
            eprintln!("ember-cli: {warning}");
        }
        println!("{}", selection.kernels.name);
    } else {
        for k in supported_kernels() {
            println!("{}", k.name);
        }
    }
    Ok(())
}
