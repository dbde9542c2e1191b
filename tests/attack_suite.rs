//! The standing attack suite (issue 43): what a hostile model file or request body can do to the process that
//! embeds ember. Each case runs in a child process of its own (this binary again, told the case's name), under a
//! 2 GiB cap on its address space and a time cap; the child is the host: it calls the C ABI only, as a C or Go
//! program would. A case passes when the child lives, the attack is refused with an error that names its cause and
//! limit, and ember then serves a normal request in that process (the same engine, when the attack was a request).
//! A crash, an abort (an allocation past the cap aborts), a hang (past the time cap) or a wrong error fails it.
//!
//! Cases (`tests/attack/`): hostile chat templates, through the model file and through the `chat_template` option
//! (`template_cases.rs`); grammar and schema bombs (`grammar_cases.rs`); load bombs (`gguf_cases.rs`); integer
//! extremes and oversized bodies (`request_cases.rs`); hostile embeddings and rerank bodies and misuse of their
//! result handle (`encoder_cases.rs`); hostile bodies of every other API (`engine_submit_api`) and their counts
//! (`engine_count_prompt_tokens`), and Responses chained to the context's end (`api_cases.rs`). The gateway's
//! cases are Go tests (`examples/gateway/attack_test.go`).
//!
//! `cargo test --release --test attack_suite [-- NAME...]` runs every case (or those whose names contain a NAME),
//! two at a time, prints a line per case with the attack's duration and its peak memory above the host's before
//! it, and writes them all to `target/attack-report.json`. Durations are reported, never asserted.

mod attack;

use std::collections::VecDeque;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use attack::cases::{all_cases, run_case};
use serde_json::{json, Value};

/// The child's case, by name.
const CASE_VAR: &str = "EMBER_ATTACK_CASE";
/// Where a child writes its files.
const DIR_VAR: &str = "EMBER_ATTACK_DIR";
/// The address-space cap of a child (issue 43: each case "under a memory cap (2 GiB)").
const MEMORY_CAP: u64 = 2 << 30;
/// A child that has not finished by then hangs (a case takes well under ten seconds).
const TIME_CAP: Duration = Duration::from_secs(120);
/// Children run at once.
const PARALLEL: usize = 2;
/// What a child prints its outcome after.
const RESULT_PREFIX: &str = "ATTACK-RESULT ";

fn main() {
    if let Ok(name) = std::env::var(CASE_VAR) {
        std::process::exit(child(&name));
    }
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    std::process::exit(parent(&filters));
}

/// Runs one case as the host: the cap first, then the attack; prints the outcome as one JSON line.
fn child(name: &str) -> i32 {
    cap_address_space(MEMORY_CAP);
    let dir = PathBuf::from(std::env::var_os(DIR_VAR).expect("the parent names a folder"));
    let outcome = run_case(name, &dir);
    let passed = outcome.error.is_none();
    println!("{RESULT_PREFIX}{}", serde_json::to_string(&outcome.to_json(name)).expect("plain JSON"));
    if passed {
        0
    } else {
        1
    }
}

/// Caps this process's address space (RLIMIT_AS): an allocation past it fails, which Rust turns into an abort.
fn cap_address_space(bytes: u64) {
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
    // SAFETY: setrlimit reads one rlimit struct, which lives for the call.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// What one child did, as the parent saw it.
struct Finished {
    name: String,
    verdict: Result<Value, String>,
}

fn parent(filters: &[String]) -> i32 {
    let names: Vec<String> = all_cases()
        .into_iter()
        .filter(|name| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    let started = Instant::now();
    let dir = scratch_dir();
    let mut queue: VecDeque<String> = names.iter().cloned().collect();
    let (done_tx, done_rx) = mpsc::channel::<Finished>();
    let mut running = 0;
    let mut results = Vec::new();
    while running > 0 || !queue.is_empty() {
        while running < PARALLEL {
            let Some(name) = queue.pop_front() else { break };
            let case_dir = dir.join(&name);
            std::fs::create_dir_all(&case_dir).expect("a scratch folder");
            let done = done_tx.clone();
            std::thread::spawn(move || {
                let verdict = run_child(&name, &case_dir);
                let _ = std::fs::remove_dir_all(&case_dir);
                let _ = done.send(Finished { name, verdict });
            });
            running += 1;
        }
        let finished = done_rx.recv().expect("a child's thread reports");
        running -= 1;
        report_line(&finished);
        results.push(finished);
    }
    let failed: Vec<&Finished> = results.iter().filter(|f| f.verdict.is_err()).collect();
    let report = json!({
        "cases": results.len(),
        "failed": failed.len(),
        "seconds": started.elapsed().as_secs_f64(),
        "results": results.iter().map(|f| match &f.verdict {
            Ok(v) => v.clone(),
            Err(e) => json!({"case": f.name, "error": e}),
        }).collect::<Vec<_>>(),
    });
    let report_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/attack-report.json");
    let _ = std::fs::write(&report_path, serde_json::to_string_pretty(&report).unwrap_or_default());
    println!(
        "attack suite: {} cases, {} failed, {:.1} s; report: {}",
        results.len(),
        failed.len(),
        started.elapsed().as_secs_f64(),
        report_path.display()
    );
    for f in &failed {
        println!("FAILED {}: {}", f.name, f.verdict.as_ref().err().map(String::as_str).unwrap_or_default());
    }
    let _ = std::fs::remove_dir_all(&dir);
    i32::from(!failed.is_empty())
}

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ember-attack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// Runs the case in a child and judges what came back: the child's outcome, or how it died.
fn run_child(name: &str, dir: &Path) -> Result<Value, String> {
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .env(CASE_VAR, name)
        .env(DIR_VAR, dir)
        // glibc reserves 64 MiB of address space per arena and thread; a host under an address-space cap
        // limits them, as one would.
        .env("MALLOC_ARENA_MAX", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let (mut stdout, mut stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let readers = std::thread::spawn(move || {
        let (mut out, mut err) = (String::new(), String::new());
        let _ = stdout.read_to_string(&mut out);
        let _ = stderr.read_to_string(&mut err);
        (out, err)
    });
    // The child's exit, or the time cap: a thread waits on the child, this one on the thread.
    let pid = child.id();
    let (exit_tx, exit_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });
    let status = match exit_rx.recv_timeout(TIME_CAP) {
        Ok(status) => status.map_err(|e| e.to_string())?,
        Err(_) => {
            // SAFETY: kill(2) with the child's pid and SIGKILL: no memory is involved.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            return Err(format!("HANG: still running after {} s", TIME_CAP.as_secs()));
        }
    };
    let (out, err) = readers.join().unwrap_or_default();
    let result = out.lines().find_map(|l| l.strip_prefix(RESULT_PREFIX)).map(serde_json::from_str::<Value>);
    match (status.code(), result) {
        (Some(0), Some(Ok(v))) => Ok(v),
        (Some(_), Some(Ok(v))) => Err(v["error"].as_str().unwrap_or("failed").to_owned()),
        (code, _) => {
            use std::os::unix::process::ExitStatusExt;
            let tail: String =
                err.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" | ");
            Err(format!("CRASH: exit {code:?}, signal {:?}: {tail}", status.signal()))
        }
    }
}

fn report_line(f: &Finished) {
    match &f.verdict {
        Ok(v) => println!(
            "ok   {:58} {:>9.1} ms {:>8} KiB  {}",
            f.name,
            v["attack_ms"].as_f64().unwrap_or(0.0),
            v["peak_above_kib"].as_u64().unwrap_or(0),
            v["refusal"].as_str().map(|s| s.chars().take(100).collect::<String>()).unwrap_or_default()
        ),
        Err(e) => println!("FAIL {:58} {}", f.name, e.chars().take(400).collect::<String>()),
    }
}
