//! Downloads one file into its blob: resumed from the `.incomplete` part (a `Range` request), checked against the
//! hub's sha256, renamed into place only when whole and right. One process at a time per blob (a lock file).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use sha2::{Digest, Sha256};

use super::api::RemoteFile;
use super::cache::RepoCache;
use super::error::HubError;
use super::http::{status_error, Http};

/// Attempts in a row that bring no new byte before a download gives up.
pub const MAX_FAILURES_IN_A_ROW: u32 = 5;
/// Attempts in all for one file, however much each brings.
pub const MAX_ATTEMPTS: u32 = 64;
/// Bytes handed from the reading thread to the writing one at a time.
const CHUNK: usize = 1 << 20;
/// Chunks in flight between them.
const BUFFERS: usize = 4;

/// Where a download reports: the bytes still to fetch, then each advance. `false` cancels.
pub trait DownloadProgress {
    fn start(&mut self, total_bytes: u64) -> bool;
    fn advance(&mut self, bytes: u64) -> bool;
}

/// A download nobody watches.
pub struct Quiet;

impl DownloadProgress for Quiet {
    fn start(&mut self, _: u64) -> bool {
        true
    }
    fn advance(&mut self, _: u64) -> bool {
        true
    }
}

/// Whether the blob of `file` is in the cache, whole.
pub fn blob_present(cache: &RepoCache, sha256: &str, size: u64) -> bool {
    fs::metadata(cache.blob(sha256)).is_ok_and(|m| m.is_file() && m.len() == size)
}

/// How far an attempt got.
enum Attempt {
    /// The response ended (whole, or short: the caller compares the length).
    Ended,
    /// Worth another attempt: the connection broke, stalled, or the server is busy.
    Retry(String),
}

/// The download of one file into `cache`'s blob `sha256`, from `url` (the hub's resolve URL).
pub fn download_blob(
    http: &Http,
    cache: &RepoCache,
    url: &str,
    file: &RemoteFile,
    sha256: &str,
    progress: &mut dyn DownloadProgress,
) -> Result<PathBuf, HubError> {
    let blob = cache.blob(sha256);
    if blob_present(cache, sha256, file.size) {
        return Ok(blob);
    }
    let blobs = cache.dir().join("blobs");
    fs::create_dir_all(&blobs).map_err(HubError::io(&blobs))?;
    let lock_path = cache.lock_file(sha256);
    if let Some(dir) = lock_path.parent() {
        fs::create_dir_all(dir).map_err(HubError::io(dir))?;
    }
    let lock = File::create(&lock_path).map_err(HubError::io(&lock_path))?;
    // Another process fetching the same blob finishes (or gives up, bounded by its timeouts) before this goes on.
    lock.lock().map_err(HubError::io(&lock_path))?;
    if blob_present(cache, sha256, file.size) {
        return Ok(blob);
    }
    let part_path = cache.incomplete(sha256);
    let mut part = Part::open(part_path.clone(), file.size)?;
    // What an earlier run kept counts as done.
    let mut reporter = Reporter { progress, reported: 0 };
    reporter.at(part.len)?;
    let (mut failures, mut attempts) = (0, 0);
    while part.len < file.size {
        attempts += 1;
        let before = part.len;
        let outcome = fetch_rest(http, url, &mut part, file.size, &mut reporter)?;
        let reason = match outcome {
            Attempt::Ended if part.len == file.size => break,
            Attempt::Ended => format!("the connection closed at byte {} of {}", part.len, file.size),
            Attempt::Retry(reason) => reason,
        };
        failures = if part.len > before { 0 } else { failures + 1 };
        if failures >= MAX_FAILURES_IN_A_ROW || attempts >= MAX_ATTEMPTS {
            return Err(HubError::Interrupted { file: file.path.clone(), attempts, last: reason });
        }
    }
    let actual = format!("{:x}", part.hasher.finalize_reset());
    drop(part.file);
    if actual != sha256 {
        let _ = fs::remove_file(&part_path);
        return Err(HubError::HashMismatch { file: file.path.clone(), expected: sha256.to_owned(), actual });
    }
    fs::rename(&part_path, &blob).map_err(HubError::io(&blob))?;
    Ok(blob)
}

/// Reports the bytes held as they grow, each byte once (a restart from 0 reports nothing until it passes the mark).
struct Reporter<'p> {
    progress: &'p mut dyn DownloadProgress,
    reported: u64,
}

impl Reporter<'_> {
    fn at(&mut self, held: u64) -> Result<(), HubError> {
        if held <= self.reported {
            return Ok(());
        }
        let go_on = self.progress.advance(held - self.reported);
        self.reported = held;
        go_on.then_some(()).ok_or(HubError::Cancelled)
    }
}

/// The `.incomplete` file: its bytes so far, and their hash.
struct Part {
    path: PathBuf,
    file: File,
    len: u64,
    hasher: Sha256,
}

impl Part {
    /// Opens the part left by an earlier attempt (hashing what it holds), or a new one.
    fn open(path: PathBuf, size: u64) -> Result<Part, HubError> {
        let io = HubError::io(&path);
        let file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path).map_err(io)?;
        let mut part = Part { path, file, len: 0, hasher: Sha256::new() };
        let held = part.file.metadata().map_err(HubError::io(&part.path))?.len();
        if held > size {
            part.restart()?;
            return Ok(part);
        }
        let mut buffer = vec![0; CHUNK];
        loop {
            let n = part.file.read(&mut buffer).map_err(HubError::io(&part.path))?;
            if n == 0 {
                break;
            }
            part.hasher.update(&buffer[..n]);
            part.len += n as u64;
        }
        Ok(part)
    }

    /// Empties the part: the server sends the file from its start.
    fn restart(&mut self) -> Result<(), HubError> {
        self.file.set_len(0).map_err(HubError::io(&self.path))?;
        self.file.seek(SeekFrom::Start(0)).map_err(HubError::io(&self.path))?;
        self.len = 0;
        self.hasher = Sha256::new();
        Ok(())
    }
}

/// One request for the bytes from `part.len` on, appended as they come. Errors that another attempt cannot mend
/// (a 4xx status, a server sending more than the file, a disk error) return `Err`.
fn fetch_rest(
    http: &Http,
    url: &str,
    part: &mut Part,
    size: u64,
    reporter: &mut Reporter<'_>,
) -> Result<Attempt, HubError> {
    let mut response = match http.get(url, part.len) {
        Ok(response) => response,
        Err(HubError::Network { reason, .. }) => return Ok(Attempt::Retry(reason)),
        Err(e) => return Err(e),
    };
    match response.status().as_u16() {
        200 => part.restart()?, // the whole file: a server that ignores ranges
        206 => {
            let start = response.headers().get("content-range").and_then(|v| v.to_str().ok()).and_then(range_start);
            if start != Some(part.len) {
                return Err(HubError::BadResponse {
                    url: url.to_owned(),
                    reason: format!("asked for bytes from {}, got Content-Range from {start:?}", part.len),
                });
            }
        }
        416 if part.len == size => return Ok(Attempt::Ended),
        416 => {
            part.restart()?;
            return Ok(Attempt::Retry("the server has fewer bytes than were kept: starting over".into()));
        }
        429 | 500..=599 => return Ok(Attempt::Retry(status_error(url, &mut response).to_string())),
        _ => return Err(status_error(url, &mut response)),
    }
    let mut reader = response.body_mut().as_reader();
    pump(&mut reader, part, size, reporter).map_err(|e| match e {
        HubError::BadResponse { reason, .. } => HubError::BadResponse { url: url.to_owned(), reason },
        e => e,
    })
}

/// Copies the body into the part in three stages on three threads: this one reads the connection, a second writes
/// the chunks read, a third hashes the chunks written (the sha256 alone runs at about the speed of a local
/// connection: on one thread they would add up). What was read before an error or a cancel is written and hashed
/// before this returns, so the part's length is what arrived.
fn pump(reader: &mut dyn Read, part: &mut Part, size: u64, reporter: &mut Reporter<'_>) -> Result<Attempt, HubError> {
    let (to_write, write_queue) = mpsc::sync_channel::<(Vec<u8>, usize)>(BUFFERS);
    let (to_hash, hash_queue) = mpsc::sync_channel::<(Vec<u8>, usize)>(BUFFERS);
    let (to_pool, pool) = mpsc::channel::<Vec<u8>>();
    for _ in 0..BUFFERS {
        let _ = to_pool.send(vec![0; CHUNK]);
    }
    let mut received = part.len;
    let Part { path, file, len, hasher } = part;
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> Result<(), HubError> {
            for (buffer, n) in write_queue {
                file.write_all(&buffer[..n]).map_err(HubError::io(&*path))?;
                if to_hash.send((buffer, n)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        scope.spawn(move || {
            for (buffer, n) in hash_queue {
                hasher.update(&buffer[..n]);
                *len += n as u64;
                let _ = to_pool.send(buffer);
            }
        });
        let read = loop {
            // No buffer back: the writer stopped on an error, which its join gives.
            let Ok(mut buffer) = pool.recv() else { break Ok(Attempt::Ended) };
            let (n, end) = fill(reader, &mut buffer);
            if received + n as u64 > size {
                break Err(HubError::BadResponse {
                    url: String::new(),
                    reason: format!("more than the {size} bytes the hub lists"),
                });
            }
            received += n as u64;
            if n > 0 && to_write.send((buffer, n)).is_err() {
                break Ok(Attempt::Ended);
            }
            if let Err(e) = reporter.at(received) {
                break Err(e);
            }
            if let Some(end) = end {
                break Ok(end);
            }
        };
        drop(to_write);
        let written = writer.join().unwrap_or_else(|_| {
            Err(HubError::Io { path: PathBuf::new(), error: std::io::Error::other("the writing thread panicked") })
        });
        written.and(read)
    })
}

/// Reads into `buffer` until it is full, the body ends, or the connection fails: the bytes read, and how the body
/// ended when it did.
fn fill(reader: &mut dyn Read, buffer: &mut [u8]) -> (usize, Option<Attempt>) {
    let mut n = 0;
    while n < buffer.len() {
        match reader.read(&mut buffer[n..]) {
            Ok(0) => return (n, Some(Attempt::Ended)),
            Ok(read) => n += read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(Attempt::Retry(e.to_string()))),
        }
    }
    (n, None)
}

/// The first byte of a `Content-Range: bytes START-END/TOTAL`.
fn range_start(value: &str) -> Option<u64> {
    value.trim().strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn content_range_start() {
        assert_eq!(super::range_start("bytes 100-199/200"), Some(100));
        assert_eq!(super::range_start("bytes */200"), None);
        assert_eq!(super::range_start("items 1-2/3"), None);
    }
}
