//! A local stand-in for the Hugging Face hub, on 127.0.0.1: the listing (`/api/models/{repo}/revision/{rev}`),
//! `/{repo}/resolve/{rev}/{file}` redirecting (302) to a second origin that serves the bytes (`/cdn/{sha256}`,
//! with `Range`), and faults on demand: a connection broken mid-file, a wrong hash in the listing, a token
//! required. Every request is recorded, and the file bytes sent are counted.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

/// The commit every repository is at.
pub const COMMIT: &str = "c0ffee0123456789abcdef0123456789abcdef01";

/// A file's bytes: in memory, or a file on disk (the real model), served without reading it whole.
#[derive(Clone)]
pub enum Content {
    Bytes(Arc<Vec<u8>>),
    File(PathBuf),
}

impl Content {
    pub fn len(&self) -> u64 {
        match self {
            Content::Bytes(b) => b.len() as u64,
            Content::File(p) => std::fs::metadata(p).unwrap().len(),
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Content::Bytes(b) => b.to_vec(),
            Content::File(p) => std::fs::read(p).unwrap(),
        }
    }

    fn sha256(&self) -> String {
        let mut hasher = Sha256::new();
        match self {
            Content::Bytes(b) => hasher.update(b.as_slice()),
            Content::File(p) => {
                std::io::copy(&mut std::fs::File::open(p).unwrap(), &mut hasher).unwrap();
            }
        }
        format!("{:x}", hasher.finalize())
    }
}

/// One file of a repository.
pub struct HubFile {
    pub path: String,
    pub content: Content,
    /// What the listing says the sha256 is (the content's own unless a test lies).
    pub listed_sha256: String,
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
    /// Which listener: "api" or "cdn".
    pub origin: &'static str,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, Vec<HubFile>>,
    /// Repositories that answer 401 without `Authorization: Bearer {token}`.
    gated: HashMap<String, String>,
    blobs: HashMap<String, Content>,
    seen: Vec<Seen>,
    /// The next CDN responses close the connection after this many body bytes (one entry per response).
    break_after: Vec<u64>,
    /// The next CDN responses stop sending after this many body bytes and hold the connection open (a stall).
    stall_after: Vec<u64>,
    /// Bytes per second the storage sends a body at, at most (a link's speed); `None`: as fast as it can.
    rate: Option<u64>,
    cdn_origin: String,
}

/// The server: two listeners (the hub, and the storage it redirects to) and their state.
pub struct HubServer {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
    served: Arc<AtomicU64>,
}

impl HubServer {
    /// Settings that point the client at this server, with `cache` as its cache, online, no token.
    pub fn settings(&self, cache: &std::path::Path) -> ember::hub::HubSettings {
        ember::hub::HubSettings {
            endpoint: self.endpoint.clone(),
            token: None,
            cache_dir: cache.to_owned(),
            offline: false,
            timeout: std::time::Duration::from_secs(30),
        }
    }

    pub fn start() -> HubServer {
        let state = Arc::new(Mutex::new(State::default()));
        let served = Arc::new(AtomicU64::new(0));
        let api = TcpListener::bind("127.0.0.1:0").unwrap();
        let cdn = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", api.local_addr().unwrap());
        state.lock().unwrap().cdn_origin = format!("http://{}", cdn.local_addr().unwrap());
        for (listener, origin) in [(api, "api"), (cdn, "cdn")] {
            let (state, served) = (Arc::clone(&state), Arc::clone(&served));
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let (state, served) = (Arc::clone(&state), Arc::clone(&served));
                    std::thread::spawn(move || handle(stream, origin, &state, &served));
                }
            });
        }
        HubServer { endpoint, state, served }
    }

    /// Adds (or replaces) a repository.
    pub fn add_repo(&self, repo: &str, files: Vec<(&str, Content)>) {
        let mut state = self.state.lock().unwrap();
        let files: Vec<HubFile> = files
            .into_iter()
            .map(|(path, content)| {
                let sha = content.sha256();
                state.blobs.insert(sha.clone(), content.clone());
                HubFile { path: path.to_owned(), content, listed_sha256: sha }
            })
            .collect();
        state.repos.insert(repo.to_owned(), files);
    }

    /// Makes the listing give `sha256` for `path` (a hash its bytes do not have).
    pub fn lie_about_hash(&self, repo: &str, path: &str, sha256: &str) {
        let mut state = self.state.lock().unwrap();
        let file = state.repos.get_mut(repo).unwrap().iter_mut().find(|f| f.path == path).unwrap();
        file.listed_sha256 = sha256.to_owned();
        let content = file.content.clone();
        state.blobs.insert(sha256.to_owned(), content);
    }

    pub fn gate(&self, repo: &str, token: &str) {
        self.state.lock().unwrap().gated.insert(repo.to_owned(), token.to_owned());
    }

    /// The next CDN responses break their connection after these many body bytes.
    pub fn break_after(&self, bytes: &[u64]) {
        self.state.lock().unwrap().break_after = bytes.to_vec();
    }

    /// The next CDN responses stall (send nothing more, the connection open) after these many body bytes.
    pub fn stall_after(&self, bytes: &[u64]) {
        self.state.lock().unwrap().stall_after = bytes.to_vec();
    }

    /// Sends every later body at `bytes_per_second` at most, as a link of that speed would deliver it.
    pub fn limit_rate(&self, bytes_per_second: u64) {
        self.state.lock().unwrap().rate = Some(bytes_per_second.max(1));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// File bytes offered so far (bodies of `/cdn/` responses, as their headers announced them or a break cut them).
    pub fn served_bytes(&self) -> u64 {
        self.served.load(Ordering::SeqCst)
    }
}

fn handle(stream: TcpStream, origin: &'static str, state: &Mutex<State>, served: &AtomicU64) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let target = request_line.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let seen = Seen {
        path: target.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
        origin,
    };
    state.lock().unwrap().seen.push(seen.clone());
    let mut out = stream;
    let path = target.split('?').next().unwrap_or("");
    let answer = match origin {
        "api" => api(path, &seen, state),
        _ => return cdn(path, &seen, state, served, &mut out),
    };
    let (status, extra, body) = answer;
    let head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n", body.len());
    let _ = out.write_all(head.as_bytes()).and_then(|_| out.write_all(&body));
}

type Answer = (&'static str, String, Vec<u8>);

fn api(path: &str, seen: &Seen, state: &Mutex<State>) -> Answer {
    let state = state.lock().unwrap();
    let not_found = ("404 Not Found", String::new(), br#"{"error":"Repository not found"}"#.to_vec());
    let (repo, rest) = if let Some(rest) = path.strip_prefix("/api/models/") {
        let parts: Vec<&str> = rest.splitn(3, '/').collect();
        if parts.len() < 3 {
            return not_found;
        }
        (format!("{}/{}", parts[0], parts[1]), ("api", parts[2].to_owned()))
    } else {
        let parts: Vec<&str> = path.trim_start_matches('/').splitn(3, '/').collect();
        if parts.len() < 3 {
            return not_found;
        }
        (format!("{}/{}", parts[0], parts[1]), ("resolve", parts[2].to_owned()))
    };
    let Some(files) = state.repos.get(&repo) else { return not_found };
    if let Some(token) = state.gated.get(&repo) {
        if seen.authorization.as_deref() != Some(&format!("Bearer {token}")) {
            return ("401 Unauthorized", String::new(), br#"{"error":"Access to this model is restricted"}"#.to_vec());
        }
    }
    match rest {
        ("api", tail) if tail.starts_with("revision/") => {
            let siblings: Vec<serde_json::Value> = files
                .iter()
                .map(|f| {
                    serde_json::json!({"rfilename": f.path, "size": f.content.len(),
                        "lfs": {"sha256": f.listed_sha256, "size": f.content.len(), "pointerSize": 134}})
                })
                .collect();
            let body = serde_json::json!({"id": repo, "sha": COMMIT, "siblings": siblings});
            ("200 OK", "Content-Type: application/json\r\n".into(), body.to_string().into_bytes())
        }
        ("resolve", tail) => {
            let Some(after) = tail.strip_prefix("resolve/") else { return not_found };
            let file = after.split_once('/').map(|(_, f)| f).unwrap_or("");
            let file = file.replace("%20", " ");
            let Some(f) = files.iter().find(|f| f.path == file) else { return not_found };
            let headers = format!(
                "Location: {}/cdn/{}\r\nX-Repo-Commit: {COMMIT}\r\nX-Linked-Etag: \"{}\"\r\nX-Linked-Size: {}\r\n",
                state.cdn_origin,
                f.listed_sha256,
                f.listed_sha256,
                f.content.len()
            );
            ("302 Found", headers, Vec::new())
        }
        _ => not_found,
    }
}

fn cdn(path: &str, seen: &Seen, state: &Mutex<State>, served: &AtomicU64, out: &mut TcpStream) {
    let (content, break_after, stall, rate) = {
        let mut state = state.lock().unwrap();
        let content = path.strip_prefix("/cdn/").and_then(|sha| state.blobs.get(sha).cloned());
        let next = |faults: &mut Vec<u64>| (!faults.is_empty()).then(|| faults.remove(0));
        let (broken, stalled) = (next(&mut state.break_after), next(&mut state.stall_after));
        (content, broken.or(stalled), stalled.is_some(), state.rate)
    };
    let Some(content) = content else {
        let _ = out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let len = content.len();
    let start = seen
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<u64>().ok());
    let head = match start {
        Some(start) if start >= len => {
            let _ = out.write_all(
                format!("HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            );
            return;
        }
        Some(start) => format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{len}\r\nContent-Length: {}\r\n",
            len - 1,
            len - start
        ),
        None => format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n"),
    };
    let start = start.unwrap_or(0);
    if out.write_all(format!("{head}Accept-Ranges: bytes\r\nConnection: close\r\n\r\n").as_bytes()).is_err() {
        return;
    }
    let limit = break_after.map_or(len - start, |b| b.min(len - start));
    // Counted before sending, so that a test reading the count after its download finished sees it (the bytes a
    // client stops reading early count too: what this response offered).
    served.fetch_add(limit, Ordering::SeqCst);
    let _ = match content {
        Content::Bytes(bytes) => {
            let slice = &bytes[start as usize..(start + limit) as usize];
            out.write_all(slice).map(|_| slice.len() as u64)
        }
        Content::File(path) => {
            let mut file = std::fs::File::open(path).unwrap();
            file.seek(SeekFrom::Start(start)).unwrap();
            match rate {
                None => std::io::copy(&mut file.take(limit), out),
                Some(rate) => paced_copy(&mut file.take(limit), out, rate),
            }
        }
    };
    let _ = out.flush();
    if stall {
        // Long past any client's timeout in the tests; the thread then ends with the connection.
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    // A break: the connection closes with the body short of its Content-Length.
    let _ = out.shutdown(std::net::Shutdown::Both);
}

/// Copies `from` to `out` at `rate` bytes per second at most: each piece of 256 KiB leaves when the schedule says
/// the bytes before it have gone, as a link of that speed paces a download.
fn paced_copy(from: &mut impl Read, out: &mut TcpStream, rate: u64) -> std::io::Result<u64> {
    let start = std::time::Instant::now();
    let mut buffer = vec![0; 256 << 10];
    let mut sent = 0u64;
    loop {
        let due = start + std::time::Duration::from_secs_f64(sent as f64 / rate as f64);
        std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
        let n = from.read(&mut buffer)?;
        if n == 0 {
            return Ok(sent);
        }
        out.write_all(&buffer[..n])?;
        sent += n as u64;
    }
}
