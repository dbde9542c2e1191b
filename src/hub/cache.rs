//! The Hugging Face cache layout, shared with `huggingface_hub` (a file that `huggingface-cli download` put there
//! is used as is, and the other way round):
//!
//! ```text
//! {cache}/models--{org}--{name}/refs/{revision}          the commit the branch was at (no newline)
//! {cache}/models--{org}--{name}/blobs/{sha256}           a file's bytes, named by their hash
//! {cache}/models--{org}--{name}/blobs/{sha256}.incomplete  a download under way (resumed from its length)
//! {cache}/models--{org}--{name}/snapshots/{commit}/{path}  a relative symlink to ../../blobs/{sha256}
//! {cache}/.locks/models--{org}--{name}/{sha256}.lock     held while a process downloads that blob
//! ```

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::HubError;
use super::name::{check_repo_path, is_repo_id};
use super::quant::{is_model_file, parts_of, quant_of, split_of};

/// The most entries a snapshot's walk looks at.
const MAX_SNAPSHOT_ENTRIES: usize = 100_000;

/// A commit id: 40 hexadecimal digits.
pub fn is_commit(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A sha256: 64 hexadecimal digits.
pub fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// One repository's part of the cache.
pub struct RepoCache {
    root: PathBuf,
    folder: String,
}

impl RepoCache {
    /// The cache of `repo` (a valid repository id) under `cache_dir`.
    pub fn new(cache_dir: &Path, repo: &str) -> Self {
        let folder = format!("models--{}", repo.replace('/', "--"));
        RepoCache { root: cache_dir.to_owned(), folder }
    }

    pub fn dir(&self) -> PathBuf {
        self.root.join(&self.folder)
    }

    pub fn blob(&self, sha256: &str) -> PathBuf {
        self.dir().join("blobs").join(sha256)
    }

    pub fn incomplete(&self, sha256: &str) -> PathBuf {
        self.dir().join("blobs").join(format!("{sha256}.incomplete"))
    }

    pub fn lock_file(&self, sha256: &str) -> PathBuf {
        self.root.join(".locks").join(&self.folder).join(format!("{sha256}.lock"))
    }

    /// Where `path` (checked by [`check_repo_path`]) of `commit` lies.
    pub fn snapshot_file(&self, commit: &str, path: &str) -> PathBuf {
        self.dir().join("snapshots").join(commit).join(path)
    }

    /// The commit `revision` stands for: a commit itself, else what `refs/{revision}` holds.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_ascii_lowercase());
        }
        check_repo_path(revision).ok()?;
        let text = read_small(&self.dir().join("refs").join(revision))?;
        let commit = text.trim();
        is_commit(commit).then(|| commit.to_ascii_lowercase())
    }

    /// Records that `revision` is at `commit` (replacing the file whole, so a reader never sees half of it).
    pub fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        if is_commit(revision) {
            return Ok(());
        }
        let path = self.dir().join("refs").join(revision);
        write_atomically(&path, commit.as_bytes())
    }

    /// The file `path` of `commit` when the snapshot has it, resolving (a dangling link is not there).
    pub fn snapshot_has(&self, commit: &str, path: &str) -> Option<PathBuf> {
        let file = self.snapshot_file(commit, path);
        fs::metadata(&file).ok().filter(|m| m.is_file()).map(|_| file)
    }

    /// Every file of `commit`'s snapshot, as paths inside the repository, sorted.
    pub fn snapshot_files(&self, commit: &str) -> Vec<String> {
        let base = self.dir().join("snapshots").join(commit);
        let mut found = Vec::new();
        let mut pending = vec![base.clone()];
        // Bounded: a snapshot is the hub's tree, but a link to a directory above it would make the walk endless.
        let mut visited = 0;
        while let Some(dir) = pending.pop() {
            let Ok(entries) = fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                visited += 1;
                if visited > MAX_SNAPSHOT_ENTRIES {
                    found.sort();
                    return found;
                }
                let path = entry.path();
                match fs::metadata(&path) {
                    Ok(meta) if meta.is_dir() => pending.push(path),
                    Ok(meta) if meta.is_file() => {
                        let relative = path.strip_prefix(&base).ok().and_then(|p| p.to_str());
                        if let Some(relative) = relative {
                            found.push(relative.replace(std::path::MAIN_SEPARATOR, "/"));
                        }
                    }
                    _ => {}
                }
            }
        }
        found.sort();
        found
    }

    /// Points `path` of `commit`'s snapshot at the blob `sha256` with a relative link, as `huggingface_hub` does.
    pub fn link(&self, commit: &str, path: &str, sha256: &str) -> Result<PathBuf, HubError> {
        let file = self.snapshot_file(commit, path);
        let parent = file.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(parent).map_err(HubError::io(parent))?;
        // snapshots/{commit}/a/b.gguf -> ../../../blobs/{sha}: up one for each directory of the path.
        let depth = 2 + path.matches('/').count();
        let target: PathBuf =
            std::iter::repeat_n(Path::new(".."), depth).collect::<PathBuf>().join("blobs").join(sha256);
        if fs::symlink_metadata(&file).is_ok() {
            fs::remove_file(&file).map_err(HubError::io(&file))?;
        }
        std::os::unix::fs::symlink(&target, &file).map_err(HubError::io(&file))?;
        Ok(file)
    }
}

/// A model in the cache, for `ember-cli list`: a GGUF model file of a repository's snapshot (all parts of a split
/// one together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedModel {
    /// The name that resolves to it: `org/repo:QUANT`, or `hf://org/repo/path` for a file without a quantization
    /// in its name.
    pub name: String,
    /// The first (or only) file.
    pub path: PathBuf,
    /// All parts' bytes.
    pub bytes: u64,
    /// Parts present of those the name needs.
    pub parts: (usize, usize),
}

/// Every GGUF model in the cache at the commit of its repository's `main` (or, without it, every snapshot).
pub fn cached_models(cache_dir: &Path) -> Vec<CachedModel> {
    let mut models = Vec::new();
    let Ok(entries) = fs::read_dir(cache_dir) else { return models };
    let mut folders: Vec<String> = entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    folders.sort();
    for folder in folders {
        let Some(repo) = folder.strip_prefix("models--").and_then(|r| r.split_once("--")) else { continue };
        let repo = format!("{}/{}", repo.0, repo.1);
        if !is_repo_id(&repo) {
            continue;
        }
        let cache = RepoCache::new(cache_dir, &repo);
        let commits: Vec<String> = match cache.commit_of("main") {
            Some(commit) => vec![commit],
            None => {
                let snapshots = fs::read_dir(cache.dir().join("snapshots")).into_iter().flatten().flatten();
                let mut all: Vec<String> = snapshots.filter_map(|e| e.file_name().into_string().ok()).collect();
                all.sort();
                all
            }
        };
        for commit in commits {
            let files = cache.snapshot_files(&commit);
            for first in files.iter().filter(|f| is_model_file(f) && split_of(f).is_some_and(|s| s.index == 1)) {
                let parts = parts_of(first);
                let present: Vec<u64> = parts
                    .iter()
                    .filter_map(|p| cache.snapshot_has(&commit, p))
                    .filter_map(|p| fs::metadata(p).ok().map(|m| m.len()))
                    .collect();
                let name = match quant_of(first) {
                    Some(quant) => format!("{repo}:{quant}"),
                    None => format!("hf://{repo}/{first}"),
                };
                models.push(CachedModel {
                    name,
                    path: cache.snapshot_file(&commit, first),
                    bytes: present.iter().sum(),
                    parts: (present.len(), parts.len()),
                });
            }
        }
    }
    models.sort_by(|a, b| a.name.cmp(&b.name));
    models
}

/// Reads a small text file (a ref), or `None`.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    fs::File::open(path).ok()?.take(1024).read_to_string(&mut text).ok()?;
    Some(text)
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), HubError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(HubError::io(parent))?;
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let written =
        fs::File::create(&temporary).and_then(|mut f| f.write_all(bytes)).and_then(|_| fs::rename(&temporary, path));
    written.map_err(|e| {
        let _ = fs::remove_file(&temporary);
        HubError::Io { path: path.to_owned(), error: e }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_huggingface_hubs() {
        let dir = std::env::temp_dir().join(format!("ember-hub-cache-{}", std::process::id()));
        let cache = RepoCache::new(&dir, "Org/Some.Model-GGUF");
        assert_eq!(cache.dir(), dir.join("models--Org--Some.Model-GGUF"));
        let sha = "ab".repeat(32);
        let commit = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(cache.incomplete(&sha), cache.dir().join(format!("blobs/{sha}.incomplete")));
        assert_eq!(cache.lock_file(&sha), dir.join(format!(".locks/models--Org--Some.Model-GGUF/{sha}.lock")));
        assert_eq!(cache.commit_of("main"), None);
        cache.write_ref("main", commit).unwrap();
        assert_eq!(cache.commit_of("main").as_deref(), Some(commit));
        assert_eq!(cache.commit_of(commit).as_deref(), Some(commit));
        assert_eq!(cache.commit_of("../x"), None);
        fs::create_dir_all(cache.dir().join("blobs")).unwrap();
        fs::write(cache.blob(&sha), b"GGUF").unwrap();
        let linked = cache.link(commit, "sub/m-Q4_0.gguf", &sha).unwrap();
        assert_eq!(fs::read_link(&linked).unwrap(), PathBuf::from(format!("../../../blobs/{sha}")));
        assert_eq!(fs::read(&linked).unwrap(), b"GGUF");
        assert_eq!(cache.snapshot_files(commit), ["sub/m-Q4_0.gguf"]);
        let listed = cached_models(&dir);
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].name.as_str(), listed[0].bytes, listed[0].parts),
            ("Org/Some.Model-GGUF:Q4_0", 4, (1, 1))
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
