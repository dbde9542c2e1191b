//! ember's command-line tool: model facts, tokenization, a chat answer on the CPU, synthetic models.
//!
//! ```text
//! ember-cli info     [--model PATH] [MESSAGE]      model facts and a tokenized chat prompt
//! ember-cli tokenize [--model PATH] [--special] TEXT
//! ember-cli chat     [--model PATH] [--max-tokens N] [--threads N] [--temperature T] [--seed S] MESSAGE
//! ember-cli complete [--model PATH] [--max-tokens N] [--threads N] [--temperature T] [--seed S] PROMPT
//!                                                  continue a plain-text prompt (base models such as Gemma 3 270M)
//! ember-cli synthetic PATH [--seed S] [--tiny]     write a model of SmolLM2-135M's shapes with random weights
//!                                                  (--tiny: 2 layers of width 64 and a byte vocabulary, which an
//!                                                  engine loads and runs in milliseconds)
//! ember-cli synthetic PATH --family F --layers N [--seed S] [--arch A] [--vocab V]   (encoder families: V is
//!                                               the vocabulary-only GGUF whose tokenizer the file gets)
//!                                                  a family's layer shapes (SyntheticSpec::FAMILIES), N layers,
//!                                                  a 512-token byte vocabulary (what scripts/llamacpp/family_fixtures.py
//!                                                  feeds llama.cpp); --arch writes those shapes as another
//!                                                  architecture (to compare architectures' speed at equal bytes)
//! ember-cli kernels  [--default]                   the CPU kernel paths this CPU runs, or the one in use
//! ```

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use ember::backend::cpu::{CpuBackend, CpuBackendOptions};
use ember::engine::generate::{generate, single_sequence_window_blocks, GenerateRequest, SingleSequenceLayout};
use ember::engine::sampling::SamplingParams;
use ember::model::chat_template::ChatMessage;
use ember::model::encoder::{decoder_family_writer, SyntheticEncoder, DECODER_FAMILIES};
use ember::model::gguf::GgufFile;
use ember::model::llama::architecture::MultiplierRule;
use ember::model::llama::{Architecture, GraniteScales, SyntheticSpec};
use ember::model::tokenizer::{StreamDecoder, Tokenizer};
use ember::model::Model;

const USAGE: &str = "usage:
  ember-cli info      [--model PATH] [MESSAGE]
  ember-cli tokenize  [--model PATH] [--special] TEXT
  ember-cli chat      [--model PATH] [--max-tokens N] [--threads N] [--temperature T] [--seed S] MESSAGE
  ember-cli complete  [--model PATH] [--max-tokens N] [--threads N] [--temperature T] [--seed S] PROMPT
  ember-cli synthetic PATH [--seed S] [--tiny]
  ember-cli synthetic PATH --family F --layers N [--seed S] [--arch A] [--vocab V]
  ember-cli kernels   [--default]";

/// Parsed command-line options (every command takes the subset it needs).
#[derive(Default)]
struct Args {
    model: Option<PathBuf>,
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
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = parse_args(rest).and_then(|args| match command.as_str() {
        "info" => info(&args),
        "tokenize" => tokenize(&args),
        "chat" => chat(&args),
        "complete" => complete(&args),
        "synthetic" => synthetic(&args),
        "kernels" => kernel_paths(&args),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(args: &Args) -> Result<(Model, f64), String> {
    let start = Instant::now();
    let model = Model::load(args.model.as_deref()).map_err(|e| e.to_string())?;
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
    let path = ember::model::path::resolve_model_path(args.model.as_deref()).map_err(|e| e.to_string())?;
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
