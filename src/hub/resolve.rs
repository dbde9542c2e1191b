//! From a hub name to files in the cache: the cache first (no request) unless the latest commit is asked for,
//! else the hub's listing, the file the name picks (and its other split parts), each downloaded unless its blob is
//! there, and the snapshot's links.

use std::path::PathBuf;

use super::api::{fetch_listing, resolve_url, RemoteFile};
use super::cache::RepoCache;
use super::download::{blob_present, download_blob, DownloadProgress};
use super::error::HubError;
use super::http::Http;
use super::name::{FileChoice, HubRef};
use super::quant::{available, choose, parts_of};
use super::settings::HubSettings;

/// Whether a name the cache holds is used as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The cache's file when it has one (no request at all); the hub otherwise. What loading a model does.
    CacheFirst,
    /// The revision's commit as the hub has it now (what `ember-cli pull` does); the files it already has are not
    /// fetched again.
    Latest,
}

/// A name resolved to files in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The commit the files are of.
    pub commit: String,
    /// The file, or all parts of a split one in order (the first is what a loader opens).
    pub files: Vec<PathBuf>,
    /// Bytes fetched from the network by this call (0: all from the cache).
    pub fetched_bytes: u64,
}

impl Resolved {
    /// The file a loader opens: the only one, or the first part.
    pub fn first(&self) -> &PathBuf {
        &self.files[0]
    }
}

/// Resolves `name` to files in the cache of `settings`, downloading what is missing (never in offline mode).
pub fn resolve(
    name: &HubRef,
    settings: &HubSettings,
    freshness: Freshness,
    progress: &mut dyn DownloadProgress,
) -> Result<Resolved, HubError> {
    let cache = RepoCache::new(&settings.cache_dir, &name.repo);
    if settings.offline || freshness == Freshness::CacheFirst {
        if let Some(found) = from_cache(name, &cache) {
            return Ok(found);
        }
        if settings.offline {
            return Err(HubError::NotCached { name: name.to_string(), cache: settings.cache_dir.clone() });
        }
    }
    let http = Http::new(settings);
    let listing = fetch_listing(&http, &settings.endpoint, &name.repo, &name.revision)?;
    let paths = listing.paths();
    let first = match &name.choice {
        FileChoice::File(path) if listing.file(path).is_some() => path.clone(),
        FileChoice::File(path) => {
            return Err(HubError::NoMatch {
                name: name.to_string(),
                reason: format!("the repository has no file {path}"),
                available: available(&paths),
            })
        }
        FileChoice::Quant(quant) => choose(&paths, quant.as_deref(), &name.to_string())?,
    };
    let wanted: Vec<&RemoteFile> = parts_of(&first)
        .iter()
        .map(|part| {
            listing.file(part).ok_or_else(|| HubError::NoMatch {
                name: name.to_string(),
                reason: format!("{first} is split, but the repository lacks its part {part}"),
                available: available(&paths),
            })
        })
        .collect::<Result<_, _>>()?;
    let hashes: Vec<&str> = wanted
        .iter()
        .map(|f| f.sha256.as_deref().ok_or_else(|| HubError::MissingHash { file: f.path.clone() }))
        .collect::<Result<_, _>>()?;
    let missing: u64 =
        wanted.iter().zip(&hashes).filter(|(f, sha)| !blob_present(&cache, sha, f.size)).map(|(f, _)| f.size).sum();
    if !progress.start(missing) {
        return Err(HubError::Cancelled);
    }
    cache.write_ref(&name.revision, &listing.commit)?;
    let mut files = Vec::with_capacity(wanted.len());
    for (file, sha) in wanted.iter().zip(&hashes) {
        let url = resolve_url(&settings.endpoint, &name.repo, &listing.commit, &file.path);
        download_blob(&http, &cache, &url, file, sha, progress)?;
        files.push(cache.link(&listing.commit, &file.path, sha)?);
    }
    Ok(Resolved { commit: listing.commit, files, fetched_bytes: missing })
}

/// `name`'s files from the cache alone, when it holds all of them; `None` otherwise. Never asks the network.
pub fn resolve_cached(name: &HubRef, settings: &HubSettings) -> Option<Resolved> {
    from_cache(name, &RepoCache::new(&settings.cache_dir, &name.repo))
}

fn from_cache(name: &HubRef, cache: &RepoCache) -> Option<Resolved> {
    let commit = cache.commit_of(&name.revision)?;
    let present = cache.snapshot_files(&commit);
    let first = match &name.choice {
        FileChoice::File(path) => present.contains(path).then(|| path.clone())?,
        FileChoice::Quant(quant) => choose(&present, quant.as_deref(), &name.repo).ok()?,
    };
    let files = parts_of(&first).iter().map(|part| cache.snapshot_has(&commit, part)).collect::<Option<Vec<_>>>()?;
    Some(Resolved { commit, files, fetched_bytes: 0 })
}
