//! Download throughput of the hub client against `curl` on the same local server (tests/hub_server: the hub's
//! listing and resolve redirect on one port, the bytes on another): `hub::resolve` of a fresh cache (listing,
//! redirect, download, sha256 check, link) and `curl -L` of the resolve URL into a file, alternated for `--rounds`
//! rounds (default 5), each run a 256 MiB file. Then a resumed download: cancelled at half, resumed, and the bytes
//! the server sent for the resume against what the file lacked.
//!
//! `cargo bench --bench hub_download -- [--rounds N] [--mib N] [--link-mbs N]`: each run's MB/s, the medians and
//! their ratio. With `--link-mbs N` the server sends at N MB/s at most (`HubServer::limit_rate`), as a link of that
//! speed would: where the client's CPU is not what limits it, the two should take the same time.

#[path = "../tests/hub_server/mod.rs"]
mod hub_server;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use ember::hub::{self, DownloadProgress, Freshness, HubRef, Quiet};
use hub_server::{Content, HubServer, COMMIT};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(default)
}

/// CPU seconds of this process (the server's threads and the client's) and of its waited-for children (curl), from
/// `/proc/self/stat`.
fn cpu_seconds() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // The fields after the command's closing parenthesis: utime, stime, cutime, cstime are the 12th to 15th.
    let fields: Vec<f64> =
        stat.rsplit_once(')').unwrap().1.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect();
    let tick = 100.0; // USER_HZ on Linux
    ((fields[11] + fields[12]) / tick, (fields[13] + fields[14]) / tick)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Cancels once half the bytes have been reported.
struct StopAtHalf {
    total: u64,
    seen: u64,
}

impl DownloadProgress for StopAtHalf {
    fn start(&mut self, total: u64) -> bool {
        self.total = total;
        true
    }
    fn advance(&mut self, bytes: u64) -> bool {
        self.seen += bytes;
        self.seen < self.total / 2
    }
}

fn main() {
    let rounds = arg("--rounds", 5);
    let mib = arg("--mib", 256);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hub-download-bench");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Incompressible bytes, written once: the server sends them from the file.
    let source = dir.join("source.gguf");
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    let bytes: Vec<u8> = (0..mib << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(&source, &bytes).unwrap();
    // What the check costs on its own: the sha256 of the whole file in memory, one thread.
    let start = Instant::now();
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&bytes);
    let hash_seconds = start.elapsed().as_secs_f64();
    std::hint::black_box(digest);
    drop(bytes);
    let size = std::fs::metadata(&source).unwrap().len();
    let server = HubServer::start();
    server.add_repo("bench/big", vec![("big-Q4_0.gguf", Content::File(source.clone()))]);
    let link = arg("--link-mbs", 0);
    if link > 0 {
        server.limit_rate(link as u64 * 1_000_000);
        println!("the server sends at {link} MB/s at most");
    }
    let name = HubRef::parse("bench/big:Q4_0").unwrap();
    let url = format!("{}/bench/big/resolve/{COMMIT}/big-Q4_0.gguf", server.endpoint);
    let mb_per_s = |seconds: f64| size as f64 / 1e6 / seconds;
    println!("sha256 alone: {:.0} MB/s", mb_per_s(hash_seconds));

    let (mut ember_rates, mut curl_rates) = (Vec::new(), Vec::new());
    let (mut ember_cpu, mut curl_cpu) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let cache = dir.join(format!("cache-{round}"));
        let (cpu, _) = cpu_seconds();
        let start = Instant::now();
        hub::resolve(&name, &server.settings(&cache), Freshness::Latest, &mut Quiet).unwrap();
        ember_rates.push(mb_per_s(start.elapsed().as_secs_f64()));
        ember_cpu.push(cpu_seconds().0 - cpu);
        std::fs::remove_dir_all(&cache).unwrap();

        let out = dir.join("curl.gguf");
        let (cpu, child_cpu) = cpu_seconds();
        let start = Instant::now();
        let status = Command::new("curl").args(["-sSfL", "-o"]).arg(&out).arg(&url).status().unwrap();
        curl_rates.push(mb_per_s(start.elapsed().as_secs_f64()));
        let (cpu_after, child_cpu_after) = cpu_seconds();
        curl_cpu.push(cpu_after - cpu + child_cpu_after - child_cpu);
        assert!(status.success());
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
        std::fs::remove_file(&out).unwrap();
        println!("round {round}: ember {:7.0} MB/s   curl {:7.0} MB/s", ember_rates[round], curl_rates[round]);
    }
    let (ember, curl) = (median(ember_rates), median(curl_rates));
    println!(
        "median of {rounds}, {mib} MiB: ember {ember:.0} MB/s, curl {curl:.0} MB/s, ember/curl {:.3}",
        ember / curl
    );
    // CPU for one download, the server's included in both: what the client costs where CPUs are shared.
    println!("median CPU seconds a download: ember {:.2}, curl {:.2}", median(ember_cpu), median(curl_cpu));

    let cache = dir.join("cache-resume");
    let mut half = StopAtHalf { total: 0, seen: 0 };
    assert!(hub::resolve(&name, &server.settings(&cache), Freshness::Latest, &mut half).is_err());
    let kept = std::fs::read_dir(cache.join("models--bench--big/blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum::<u64>();
    let before = server.served_bytes();
    hub::resolve(&name, &server.settings(&cache), Freshness::Latest, &mut Quiet).unwrap();
    let resumed = server.served_bytes() - before;
    println!("resume: {kept} bytes kept, the resume fetched {resumed} bytes; the file lacked {}", size - kept);
    assert_eq!(resumed, size - kept);
    std::fs::remove_dir_all(&dir).unwrap();
}
