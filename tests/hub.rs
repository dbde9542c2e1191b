//! The model hub client (`ember::hub`) against a local stand-in for the hub (tests/hub_server): names resolved to
//! the Hugging Face cache layout, through redirects, resumed after a broken connection or a cancelled run (only
//! the rest fetched), checked against the listed sha256, offline from the cache alone, a token sent to the hub
//! but not to its storage; and `ember-cli pull`, `list` and `--help`.

mod hub_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ember::hub::{self, DownloadProgress, Freshness, HubError, HubRef, HubSettings, Quiet};
use hub_server::{Content, HubServer, COMMIT};

/// Deterministic bytes of `len` (a stand-in GGUF: the client never reads inside them).
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    let mut state = 0x9E37_79B9_u32 ^ seed as u32;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect()
}

const Q4_LEN: usize = 3 << 20;
const Q8_LEN: usize = 5 << 20;

/// A server with `org/tiny`: a Q4_1 file, a Q8_0 file split in three parts, a projector and a README.
fn server() -> (HubServer, Vec<u8>, Vec<u8>) {
    let server = HubServer::start();
    let (q4, q8) = (bytes(Q4_LEN, 1), bytes(Q8_LEN, 2));
    let third = Q8_LEN / 3;
    let part = |range: std::ops::Range<usize>| Content::Bytes(Arc::new(q8[range].to_vec()));
    server.add_repo(
        "org/tiny",
        vec![
            ("README.md", Content::Bytes(Arc::new(b"# tiny".to_vec()))),
            ("tiny.Q4_1.gguf", Content::Bytes(Arc::new(q4.clone()))),
            ("q8/tiny-Q8_0-00001-of-00003.gguf", part(0..third)),
            ("q8/tiny-Q8_0-00002-of-00003.gguf", part(third..2 * third)),
            ("q8/tiny-Q8_0-00003-of-00003.gguf", part(2 * third..Q8_LEN)),
            ("mmproj-tiny-F16.gguf", Content::Bytes(Arc::new(b"projector".to_vec()))),
        ],
    );
    (server, q4, q8)
}

/// A fresh cache directory under the target directory.
fn cache_dir(test: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("hub-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn name(text: &str) -> HubRef {
    HubRef::parse(text).unwrap()
}

fn repo_dir(cache: &Path) -> PathBuf {
    cache.join("models--org--tiny")
}

#[test]
fn a_quantization_downloads_through_redirects_into_the_cache_layout() {
    let (server, q4, _) = server();
    let cache = cache_dir("layout");
    let mut settings = server.settings(&cache);
    settings.token = Some("hf_secret".into());
    let found = hub::resolve(&name("org/tiny:q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap();
    let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&q4));
    let repo = repo_dir(&cache);
    assert_eq!(found.files, [repo.join(format!("snapshots/{COMMIT}/tiny.Q4_1.gguf"))]);
    assert_eq!((found.commit.as_str(), found.fetched_bytes), (COMMIT, Q4_LEN as u64));
    assert_eq!(std::fs::read_link(&found.files[0]).unwrap(), PathBuf::from(format!("../../blobs/{sha}")));
    assert_eq!(std::fs::read(repo.join("blobs").join(&sha)).unwrap(), q4);
    assert_eq!(std::fs::read_to_string(repo.join("refs/main")).unwrap(), COMMIT);
    assert!(!repo.join(format!("blobs/{sha}.incomplete")).exists());
    let seen = server.seen();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/api/models/org/tiny/revision/main?blobs=true".to_owned(),
            format!("/org/tiny/resolve/{COMMIT}/tiny.Q4_1.gguf"),
            format!("/cdn/{sha}"),
        ]
    );
    // The token goes to the hub, not to the storage it redirects to (another origin).
    let auth: Vec<Option<&str>> = seen.iter().map(|s| s.authorization.as_deref()).collect();
    assert_eq!(auth, [Some("Bearer hf_secret"), Some("Bearer hf_secret"), None]);
}

#[test]
fn a_name_in_the_cache_is_used_without_any_request_and_pull_fetches_nothing_new() {
    let (server, _, _) = server();
    let cache = cache_dir("cached");
    let settings = server.settings(&cache);
    let first = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap();
    let (requests, served) = (server.seen().len(), server.served_bytes());
    let again = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap();
    assert_eq!((again.files.clone(), again.fetched_bytes), (first.files.clone(), 0));
    assert_eq!(server.seen().len(), requests, "no request for a cached name");
    // The latest commit asks for the listing only: the blob is there.
    let latest = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::Latest, &mut Quiet).unwrap();
    assert_eq!((latest.files, latest.fetched_bytes), (first.files, 0));
    assert_eq!(server.seen().len(), requests + 1);
    assert_eq!(server.served_bytes(), served);
}

#[test]
fn a_file_put_there_by_huggingface_cli_is_used_as_is_and_offline_needs_nothing_else() {
    let cache = cache_dir("foreign");
    // The layout huggingface_hub writes, by hand: a blob, a relative link to it, refs/main.
    let repo = cache.join("models--Someone--Model-GGUF");
    let sha = "ab".repeat(32);
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join(format!("snapshots/{COMMIT}"))).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("blobs").join(&sha), b"GGUF bytes").unwrap();
    std::os::unix::fs::symlink(
        format!("../../blobs/{sha}"),
        repo.join(format!("snapshots/{COMMIT}/model-Q4_K_M.gguf")),
    )
    .unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    // No server at all: an endpoint nothing listens on, and offline.
    let mut settings = HubSettings {
        endpoint: "http://127.0.0.1:9".into(),
        token: None,
        cache_dir: cache.clone(),
        offline: true,
        timeout: Duration::from_secs(5),
    };
    let expected = repo.join(format!("snapshots/{COMMIT}/model-Q4_K_M.gguf"));
    for text in ["Someone/Model-GGUF", "Someone/Model-GGUF:q4_k_m", "hf://Someone/Model-GGUF/model-Q4_K_M.gguf"] {
        let found = hub::resolve(&name(text), &settings, Freshness::CacheFirst, &mut Quiet).unwrap();
        assert_eq!(found.files, std::slice::from_ref(&expected), "{text}");
    }
    let err = hub::resolve(&name("Someone/Model-GGUF:Q8_0"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    assert!(err.to_string().contains("ember-cli pull Someone/Model-GGUF:Q8_0"), "{err}");
    // Offline wins over asking for the latest commit.
    settings.offline = true;
    assert!(hub::resolve(&name("Someone/Model-GGUF"), &settings, Freshness::Latest, &mut Quiet).is_ok());
    let listed = hub::cached_models(&cache);
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].name.as_str(), listed[0].bytes), ("Someone/Model-GGUF:Q4_K_M", 10));
}

#[test]
fn offline_mode_asks_nothing_of_the_server() {
    let (server, _, _) = server();
    let cache = cache_dir("offline");
    let mut settings = server.settings(&cache);
    settings.offline = true;
    let err = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::Latest, &mut Quiet).unwrap_err();
    assert!(matches!(err, HubError::NotCached { .. }), "{err}");
    assert!(server.seen().is_empty());
}

#[test]
fn a_connection_broken_mid_file_resumes_with_a_range_request() {
    let (server, q4, _) = server();
    let cache = cache_dir("broken");
    server.break_after(&[1 << 20, 0]);
    let found =
        hub::resolve(&name("org/tiny:Q4_1"), &server.settings(&cache), Freshness::CacheFirst, &mut Quiet).unwrap();
    assert_eq!(std::fs::read(&found.files[0]).unwrap(), q4);
    let ranges: Vec<Option<String>> =
        server.seen().iter().filter(|s| s.origin == "cdn").map(|s| s.range.clone()).collect();
    // Broken after 1 MiB, then after nothing, then the rest: both resumes ask from byte 1 MiB.
    let from = Some(format!("bytes={}-", 1 << 20));
    assert_eq!(ranges, [None, from.clone(), from]);
    assert_eq!(server.served_bytes(), Q4_LEN as u64, "every byte served once");
}

#[test]
fn a_stalled_connection_times_out_and_resumes() {
    let (server, q4, _) = server();
    let cache = cache_dir("stalled");
    server.stall_after(&[1 << 20]);
    let mut settings = server.settings(&cache);
    settings.timeout = Duration::from_secs(1);
    let found = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap();
    assert_eq!(std::fs::read(&found.files[0]).unwrap(), q4);
    let ranges: Vec<Option<String>> =
        server.seen().iter().filter(|s| s.origin == "cdn").map(|s| s.range.clone()).collect();
    assert_eq!(ranges, [None, Some(format!("bytes={}-", 1 << 20))]);
}

#[test]
fn a_download_that_keeps_breaking_gives_up_after_a_bounded_number_of_attempts() {
    let (server, _, _) = server();
    let cache = cache_dir("give-up");
    server.break_after(&[0; 16]);
    let err =
        hub::resolve(&name("org/tiny:Q4_1"), &server.settings(&cache), Freshness::CacheFirst, &mut Quiet).unwrap_err();
    match &err {
        HubError::Interrupted { attempts, .. } => assert_eq!(*attempts, hub::MAX_FAILURES_IN_A_ROW),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("run again to resume"), "{err}");
}

/// Cancels once `stop_at` bytes have been reported.
struct CancelAt {
    stop_at: u64,
    seen: u64,
    totals: Vec<u64>,
}

impl DownloadProgress for CancelAt {
    fn start(&mut self, total: u64) -> bool {
        self.totals.push(total);
        true
    }
    fn advance(&mut self, bytes: u64) -> bool {
        self.seen += bytes;
        self.seen < self.stop_at
    }
}

#[test]
fn a_cancelled_download_resumes_later_and_fetches_only_the_rest() {
    let (server, q4, _) = server();
    let cache = cache_dir("resume");
    let settings = server.settings(&cache);
    let mut cancel = CancelAt { stop_at: Q4_LEN as u64 / 2, seen: 0, totals: vec![] };
    let err = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut cancel).unwrap_err();
    assert!(matches!(err, HubError::Cancelled), "{err}");
    let sha = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&q4));
    let kept = std::fs::metadata(repo_dir(&cache).join(format!("blobs/{sha}.incomplete"))).unwrap().len();
    assert!(kept >= Q4_LEN as u64 / 2 && kept < Q4_LEN as u64, "{kept}");
    let served_before = server.served_bytes();
    let mut watch = CancelAt { stop_at: u64::MAX, seen: 0, totals: vec![] };
    let found = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut watch).unwrap();
    assert_eq!(std::fs::read(&found.files[0]).unwrap(), q4);
    assert_eq!(server.served_bytes() - served_before, Q4_LEN as u64 - kept, "only the rest is fetched");
    assert_eq!(server.seen().last().unwrap().range, Some(format!("bytes={kept}-")));
    // The kept bytes count as done: the progress covers the whole file.
    assert_eq!((watch.totals, watch.seen), (vec![Q4_LEN as u64], Q4_LEN as u64));
}

#[test]
fn a_wrong_hash_deletes_the_download_and_says_so() {
    let (server, _, _) = server();
    let cache = cache_dir("wrong-hash");
    let wrong = "0".repeat(64);
    server.lie_about_hash("org/tiny", "tiny.Q4_1.gguf", &wrong);
    let err =
        hub::resolve(&name("org/tiny:Q4_1"), &server.settings(&cache), Freshness::CacheFirst, &mut Quiet).unwrap_err();
    assert!(matches!(&err, HubError::HashMismatch { expected, .. } if *expected == wrong), "{err}");
    assert!(err.to_string().contains("the download was deleted"), "{err}");
    let blobs: Vec<_> = std::fs::read_dir(repo_dir(&cache).join("blobs")).unwrap().flatten().collect();
    assert!(blobs.is_empty(), "{blobs:?}");
    assert!(!repo_dir(&cache).join(format!("snapshots/{COMMIT}/tiny.Q4_1.gguf")).exists());
}

#[test]
fn a_split_model_downloads_every_part_in_order() {
    let (server, _, q8) = server();
    let cache = cache_dir("split");
    let found =
        hub::resolve(&name("org/tiny:Q8_0"), &server.settings(&cache), Freshness::CacheFirst, &mut Quiet).unwrap();
    assert_eq!(found.files.len(), 3);
    let joined: Vec<u8> = found.files.iter().flat_map(|f| std::fs::read(f).unwrap()).collect();
    assert_eq!(joined, q8);
    assert!(found.files[2].ends_with("q8/tiny-Q8_0-00003-of-00003.gguf"));
    // Naming a later part picks the same set.
    let by_part = name("hf://org/tiny/q8/tiny-Q8_0-00002-of-00003.gguf");
    let again = hub::resolve(&by_part, &server.settings(&cache), Freshness::CacheFirst, &mut Quiet).unwrap();
    assert_eq!(again.files, found.files);
}

#[test]
fn a_quantization_the_repository_lacks_lists_those_it_has() {
    let (server, _, _) = server();
    let cache = cache_dir("no-quant");
    let err = hub::resolve(&name("org/tiny:Q5_K_M"), &server.settings(&cache), Freshness::CacheFirst, &mut Quiet)
        .unwrap_err();
    assert_eq!(err.to_string(), "org/tiny:Q5_K_M: no GGUF model file of quantization Q5_K_M; available: Q4_1, Q8_0");
    let err = hub::resolve(&name("hf://org/tiny/nope.gguf"), &server.settings(&cache), Freshness::Latest, &mut Quiet)
        .unwrap_err();
    assert!(err.to_string().contains("the repository has no file nope.gguf"), "{err}");
    let err = hub::resolve(&name("org/missing"), &server.settings(&cache), Freshness::Latest, &mut Quiet).unwrap_err();
    assert!(matches!(err, HubError::Status { status: 404, .. }), "{err}");
}

#[test]
fn a_gated_repository_needs_the_token() {
    let (server, _, _) = server();
    server.gate("org/tiny", "hf_right");
    let cache = cache_dir("gated");
    let mut settings = server.settings(&cache);
    let err = hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).unwrap_err();
    assert!(matches!(err, HubError::Status { status: 401, .. }), "{err}");
    assert!(err.to_string().contains("set HF_TOKEN"), "{err}");
    settings.token = Some("hf_right".into());
    assert!(hub::resolve(&name("org/tiny:Q4_1"), &settings, Freshness::CacheFirst, &mut Quiet).is_ok());
}

fn ember_cli(args: &[&str], server: &HubServer, cache: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ember-cli"))
        .args(args)
        .env("HF_ENDPOINT", &server.endpoint)
        .env("HF_HUB_CACHE", cache)
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN")
        .output()
        .unwrap()
}

#[test]
fn ember_cli_pulls_lists_and_explains_itself() {
    let (server, _, _) = server();
    let cache = cache_dir("cli");
    let out = ember_cli(&["pull", "org/tiny:Q4_1"], &server, &cache);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        repo_dir(&cache).join(format!("snapshots/{COMMIT}/tiny.Q4_1.gguf")).display().to_string()
    );
    let out = ember_cli(&["pull", "org/tiny:Q8_0"], &server, &cache);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = ember_cli(&["list"], &server, &cache);
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 3, "{listing}");
    assert!(lines[1].starts_with("org/tiny:Q4_1 ") && lines[1].contains("3.1 MB"), "{listing}");
    assert!(
        lines[2].starts_with("org/tiny:Q8_0 ") && lines[2].contains("5.2 MB") && lines[2].contains("3 parts"),
        "{listing}"
    );
    let out = ember_cli(&["pull", "org/tiny:Q5_K_M"], &server, &cache);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("available: Q4_1, Q8_0"));
}

#[test]
fn every_subcommand_answers_help() {
    let cli = env!("CARGO_BIN_EXE_ember-cli");
    let bench = env!("CARGO_BIN_EXE_ember-bench");
    // ember-bench has no subcommands: its options are its whole interface.
    let mut cases: Vec<(&str, Vec<&str>)> = vec![(cli, vec!["--help"]), (bench, vec!["--help"]), (bench, vec!["-h"])];
    for command in ["info", "tokenize", "chat", "complete", "synthetic", "kernels", "pull", "list"] {
        cases.push((cli, vec![command, "--help"]));
    }
    for (program, args) in cases {
        let out = Command::new(program).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.starts_with("usage:"), "{program} {args:?}: {text}");
        if let [command, _] = args.as_slice() {
            assert!(text.contains(command), "{program} {args:?}: {text}");
        }
    }
}
