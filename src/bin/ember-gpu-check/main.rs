//! ember-gpu-check: the checks and measurements of the CUDA backend on a GPU machine.
//!
//! ```text
//! ember-gpu-check info [--json PATH]                        the device, and how long NVRTC takes for the kernels
//! ember-gpu-check synthetic PATH [--seed S] [--arch gemma3 [--window W]]
//!                                                           write a model of SmolLM2-135M's (or Gemma 3 270M's)
//!                                                           shapes and types, random weights
//! ember-gpu-check consistency --model PATH [--json PATH]    GPU against CPU logits; batch and graph invariance
//! ember-gpu-check reference --model PATH [--json PATH] [--cpu]  the real model against the float64 and llama.cpp fixtures
//! ember-gpu-check bench --model PATH [--json PATH] [--quick] decode, prefill, concurrency, TTFT and ITL
//! ember-gpu-check table DIR                                 the summary table of the JSON files in DIR
//! ```
//!
//! `scripts/gpu-check.sh` runs them in this order on the GPU machine (which has no Rust: this binary is built here
//! and carried). Every time is wall-clock on the monotonic clock, and a token's time is taken once its id is on the
//! host, after the device work that produced it. Each subcommand prints what it measured and writes it as JSON.

mod bench;
mod consistency;
mod reference;
mod stats;
mod synthetic_vocab;
mod table;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use ember::backend::cuda::{kernels_ptx, module::virtual_arch, nvrtc_library_present, probe};
use ember::model::llama::SyntheticSpec;
use serde_json::json;

const USAGE: &str = "usage: ember-gpu-check info [--json PATH]
       ember-gpu-check synthetic PATH [--seed S] [--arch llama|gemma3] [--window W]
       ember-gpu-check consistency --model PATH [--json PATH] [--threads N]
       ember-gpu-check reference --model PATH [--fixtures DIR] [--json PATH] [--cpu]
       ember-gpu-check bench --model PATH [--json PATH] [--quick]
       ember-gpu-check table DIR";

/// The parsed command line: a subcommand, its positional arguments and its options.
pub struct Args {
    pub command: String,
    pub positional: Vec<String>,
    pub model: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub fixtures: PathBuf,
    pub seed: u64,
    pub threads: usize,
    pub quick: bool,
    /// `reference` on the CPU backend: tries the check where there is no GPU.
    pub cpu: bool,
    /// `synthetic`: the architecture, and Gemma 3's sliding window (its real 512 when absent).
    pub arch: String,
    pub window: Option<usize>,
}

fn parse_args(raw: &[String]) -> Result<Args, String> {
    let mut it = raw.iter();
    let command = it.next().ok_or(USAGE)?.clone();
    let mut args = Args {
        command,
        positional: Vec::new(),
        model: None,
        json: None,
        fixtures: PathBuf::from("tests/fixtures"),
        seed: 1,
        threads: ember::backend::cpu::default_threads(),
        quick: false,
        cpu: false,
        arch: "llama".into(),
        window: None,
    };
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--model" => args.model = Some(value("--model")?.into()),
            "--json" => args.json = Some(value("--json")?.into()),
            "--fixtures" => args.fixtures = value("--fixtures")?.into(),
            "--seed" => args.seed = value("--seed")?.parse().map_err(|_| "--seed: not a number")?,
            "--threads" => {
                args.threads = value("--threads")?.parse().ok().filter(|&n| n > 0).ok_or("--threads: not a count")?
            }
            "--quick" => args.quick = true,
            "--cpu" => args.cpu = true,
            "--arch" => args.arch = value("--arch")?,
            "--window" => {
                args.window = Some(value("--window")?.parse().ok().filter(|&n| n > 0).ok_or("--window: not a count")?)
            }
            other if other.starts_with("--") => return Err(format!("unknown option {other:?}\n{USAGE}")),
            other => args.positional.push(other.to_owned()),
        }
    }
    Ok(args)
}

impl Args {
    pub fn model(&self) -> Result<&Path, String> {
        self.model.as_deref().ok_or_else(|| format!("{} needs --model PATH", self.command))
    }
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let result = parse_args(&raw).and_then(|args| match args.command.as_str() {
        "info" => info(&args),
        "synthetic" => synthetic(&args),
        "consistency" => consistency::run(&args),
        "reference" => reference::run(&args),
        "bench" => bench::run(&args),
        "table" => table::run(&args),
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

/// Writes `value` to the `--json` path, if one was given.
pub fn write_json(args: &Args, value: &serde_json::Value) -> Result<(), String> {
    let Some(path) = &args.json else { return Ok(()) };
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn info(args: &Args) -> Result<(), String> {
    let device = probe(0).map_err(|e| e.to_string())?;
    let arch = virtual_arch(device.compute_capability).ok_or("no architecture for this device")?;
    let started = Instant::now();
    kernels_ptx(arch).map_err(|e| e.to_string())?;
    let compile_ms = started.elapsed().as_secs_f64() * 1000.0;
    println!(
        "device 0: {} (compute capability {}.{}, {} SMs, {} MiB); kernels compiled for {arch} in {compile_ms:.0} ms",
        device.name,
        device.compute_capability.0,
        device.compute_capability.1,
        device.multiprocessors,
        device.total_memory_bytes >> 20
    );
    write_json(
        args,
        &json!({
            "device": device.name,
            "compute_capability": format!("{}.{}", device.compute_capability.0, device.compute_capability.1),
            "multiprocessors": device.multiprocessors,
            "memory_bytes": device.total_memory_bytes,
            "nvrtc_loaded": nvrtc_library_present(),
            "arch": arch,
            "nvrtc_compile_ms": compile_ms,
        }),
    )
}

fn synthetic(args: &Args) -> Result<(), String> {
    let path = args.positional.first().ok_or("synthetic needs a PATH")?;
    let (spec, shapes) = match args.arch.as_str() {
        "llama" => (SyntheticSpec::smollm2_135m(args.seed), "SmolLM2-135M's shapes".to_owned()),
        "gemma3" => {
            let real = SyntheticSpec::gemma3_270m(args.seed);
            let window = args.window.or(real.sliding_window);
            let what = format!("Gemma 3 270M's shapes and weight types, a window of {}", window.unwrap_or(0));
            (SyntheticSpec { sliding_window: window, ..real }, what)
        }
        other => return Err(format!("--arch {other:?}: llama or gemma3")),
    };
    synthetic_vocab::synthetic_model_with_vocab(&spec)
        .write(Path::new(path))
        .map_err(|e| format!("cannot write {path}: {e}"))?;
    println!("wrote {path}: {shapes}, weights of seed {}, a byte-level vocabulary", args.seed);
    Ok(())
}
