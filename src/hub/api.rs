//! The hub's file listing: `GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true` gives the commit the
//! revision is at (`sha`) and each file (`siblings`) with its size and, for LFS files, its sha256
//! (`lfs.sha256`). Every field is checked: paths and hashes become cache paths.

use serde::Deserialize;

use super::cache::{is_commit, is_sha256};
use super::error::HubError;
use super::http::{encode_path, Http};
use super::name::check_repo_path;

/// The most bytes of listing accepted (a repository of thousands of files lists in a few MB).
pub const LISTING_LIMIT: u64 = 32 << 20;
/// The most files a listing may hold.
const MAX_FILES: usize = 100_000;

/// A file of the repository at the listed commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    pub path: String,
    pub size: u64,
    /// Lower-case hex; `None` for a file not stored with LFS.
    pub sha256: Option<String>,
}

/// A repository at one commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub commit: String,
    pub files: Vec<RemoteFile>,
}

impl Listing {
    pub fn file(&self, path: &str) -> Option<&RemoteFile> {
        self.files.iter().find(|f| f.path == path)
    }

    pub fn paths(&self) -> Vec<String> {
        self.files.iter().map(|f| f.path.clone()).collect()
    }
}

#[derive(Deserialize)]
struct Info {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    lfs: Option<Lfs>,
}

#[derive(Deserialize)]
struct Lfs {
    sha256: String,
    size: u64,
}

/// The URL of `repo`'s listing at `revision`.
pub fn listing_url(endpoint: &str, repo: &str, revision: &str) -> String {
    format!("{endpoint}/api/models/{repo}/revision/{}?blobs=true", encode_path(revision).replace('/', "%2F"))
}

/// The URL of `path`'s bytes at `commit`.
pub fn resolve_url(endpoint: &str, repo: &str, commit: &str, path: &str) -> String {
    format!("{endpoint}/{repo}/resolve/{commit}/{}", encode_path(path))
}

/// Asks the hub for `repo` at `revision`.
pub fn fetch_listing(http: &Http, endpoint: &str, repo: &str, revision: &str) -> Result<Listing, HubError> {
    let url = listing_url(endpoint, repo, revision);
    let body = http.get_bytes(&url, LISTING_LIMIT)?;
    parse_listing(&body).map_err(|reason| HubError::BadResponse { url, reason })
}

/// Reads a listing; a file whose path or hash is malformed is an error (the server is not what it claims).
pub fn parse_listing(body: &[u8]) -> Result<Listing, String> {
    let info: Info = serde_json::from_slice(body).map_err(|e| format!("not the hub's model JSON: {e}"))?;
    if !is_commit(&info.sha) {
        return Err(format!("the commit {:?} is not 40 hex digits", info.sha));
    }
    if info.siblings.len() > MAX_FILES {
        return Err(format!("{} files, more than {MAX_FILES}", info.siblings.len()));
    }
    let files = info
        .siblings
        .into_iter()
        .map(|s| {
            check_repo_path(&s.rfilename)?;
            let (size, sha256) = match s.lfs {
                Some(lfs) if is_sha256(&lfs.sha256) => (lfs.size, Some(lfs.sha256.to_ascii_lowercase())),
                Some(lfs) => return Err(format!("{}: the sha256 {:?} is not 64 hex digits", s.rfilename, lfs.sha256)),
                None => (s.size.unwrap_or(0), None),
            };
            Ok(RemoteFile { path: s.rfilename, size, sha256 })
        })
        .collect::<Result<_, String>>()?;
    Ok(Listing { commit: info.sha.to_ascii_lowercase(), files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_read_and_checked() {
        let sha = "ab".repeat(32);
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let body = format!(
            r#"{{"sha":"{commit}","siblings":[{{"rfilename":"README.md","size":5}},
            {{"rfilename":"m.Q4_1.gguf","size":9,"lfs":{{"sha256":"{sha}","size":9,"pointerSize":130}}}}]}}"#
        );
        let listing = parse_listing(body.as_bytes()).unwrap();
        assert_eq!(listing.commit, commit);
        assert_eq!(listing.file("m.Q4_1.gguf").unwrap().sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(listing.file("README.md").unwrap(), &RemoteFile { path: "README.md".into(), size: 5, sha256: None });
        for bad in [
            r#"{"sha":"main","siblings":[]}"#.to_owned(),
            format!(r#"{{"sha":"{commit}","siblings":[{{"rfilename":"../x"}}]}}"#),
            format!(r#"{{"sha":"{commit}","siblings":[{{"rfilename":"/etc/x"}}]}}"#),
            format!(r#"{{"sha":"{commit}","siblings":[{{"rfilename":"x","lfs":{{"sha256":"../../x","size":1}}}}]}}"#),
            "[]".to_owned(),
        ] {
            assert!(parse_listing(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn urls_quote_what_they_carry() {
        assert_eq!(
            listing_url("http://h", "o/r", "refs/pr/1"),
            "http://h/api/models/o/r/revision/refs%2Fpr%2F1?blobs=true"
        );
        assert_eq!(resolve_url("http://h", "o/r", "c", "d/a b.gguf"), "http://h/o/r/resolve/c/d/a%20b.gguf");
    }
}
