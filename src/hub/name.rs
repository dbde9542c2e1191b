//! What a model string names: a file on disk, or a file of a hub repository: `hf://org/repo/path/file.gguf`,
//! `org/repo:QUANT` (the file of that quantization, as llama.cpp's `-hf org/repo:QUANT` picks it) or `org/repo`
//! (its default quantization).

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::HubError;

/// The scheme that marks a hub name explicitly.
pub const HUB_SCHEME: &str = "hf://";
/// The branch a name without one resolves at.
pub const DEFAULT_REVISION: &str = "main";
/// The longest repository id (`org/name`) accepted: the hub's own limit is 96 characters a part.
const MAX_REPO_ID: usize = 200;
/// The longest path of a file inside a repository.
const MAX_REPO_PATH: usize = 1024;

/// A model string, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// A file on disk.
    Path(PathBuf),
    /// A file of a hub repository.
    Hub(HubRef),
}

/// Which file of a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChoice {
    /// This path inside the repository.
    File(String),
    /// The model file of this quantization (`Q4_K_M`, any case), or the default one (`None`).
    Quant(Option<String>),
}

/// A model named on the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRef {
    /// `org/name`.
    pub repo: String,
    pub choice: FileChoice,
    /// A branch, tag or commit: [`DEFAULT_REVISION`] for the names above.
    pub revision: String,
}

impl fmt::Display for HubRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.choice {
            FileChoice::File(path) => write!(f, "{HUB_SCHEME}{}/{path}", self.repo),
            FileChoice::Quant(Some(quant)) => write!(f, "{}:{quant}", self.repo),
            FileChoice::Quant(None) => f.write_str(&self.repo),
        }
    }
}

impl HubRef {
    /// Reads a hub name: `hf://org/repo/file`, `hf://org/repo[:QUANT]` or `org/repo[:QUANT]`.
    pub fn parse(name: &str) -> Result<HubRef, HubError> {
        let invalid = |why: &str| HubError::InvalidName(format!("{name:?}: {why}"));
        let explicit = name.strip_prefix(HUB_SCHEME);
        let rest = explicit.unwrap_or(name);
        let mut parts = rest.splitn(3, '/');
        let (org, second, file) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next());
        let (repo_name, quant) = match second.split_once(':') {
            Some((repo_name, quant)) => (repo_name, Some(quant)),
            None => (second, None),
        };
        let repo = format!("{org}/{repo_name}");
        if !is_repo_id(&repo) {
            return Err(invalid("expected org/repo, org/repo:QUANT or hf://org/repo/file.gguf"));
        }
        let choice = match (file, quant) {
            (Some(_), _) if explicit.is_none() => return Err(invalid("a file inside a repository needs hf://")),
            (Some(_), Some(_)) => return Err(invalid("give a file or a :QUANT, not both")),
            (Some(file), None) => {
                check_repo_path(file).map_err(|why| invalid(&why))?;
                FileChoice::File(file.to_owned())
            }
            (None, Some(quant)) if !is_quant(quant) => return Err(invalid("a quantization is letters, digits and _")),
            (None, quant) => FileChoice::Quant(quant.map(str::to_owned)),
        };
        Ok(HubRef { repo, choice, revision: DEFAULT_REVISION.to_owned() })
    }
}

/// Reads a model string: `hf://...` is a hub name; a string that names something on disk is a path; so is one
/// that looks like a path (absolute, `./`, `~`, a `.gguf` ending, more than one `/`); `org/repo` and
/// `org/repo:QUANT` otherwise are hub names.
pub fn parse_model_spec(text: &str) -> Result<ModelSpec, HubError> {
    if text.starts_with(HUB_SCHEME) {
        return HubRef::parse(text).map(ModelSpec::Hub);
    }
    let path = Path::new(text);
    let looks_like_a_path = path.is_absolute()
        || text.starts_with('.')
        || text.starts_with('~')
        || text.to_ascii_lowercase().ends_with(".gguf")
        || text.matches('/').count() != 1;
    // `symlink_metadata`: a dangling link is still the user's path, and its error says so.
    if looks_like_a_path || std::fs::symlink_metadata(path).is_ok() {
        return Ok(ModelSpec::Path(path.to_owned()));
    }
    HubRef::parse(text).map(ModelSpec::Hub)
}

/// A repository id as the hub spells them: `org/name`, each of letters, digits, `_`, and `.`/`-` between them.
pub fn is_repo_id(repo: &str) -> bool {
    let Some((org, name)) = repo.split_once('/') else { return false };
    repo.len() <= MAX_REPO_ID && is_id_part(org) && is_id_part(name)
}

fn is_id_part(part: &str) -> bool {
    let special = |c: char| c == '.' || c == '-';
    !part.is_empty()
        && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || special(c))
        && !part.starts_with(special)
        && !part.ends_with(special)
        && !part.contains("..")
        && !part.contains("--")
}

/// A quantization name: `Q4_K_M`, `F16`, `IQ2_XXS`, `BF16`...
pub fn is_quant(quant: &str) -> bool {
    !quant.is_empty() && quant.len() <= 32 && quant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A path inside a repository, as the server or the user gives it: relative, `/`-separated, without empty, `.` or
/// `..` components, backslashes or control characters, so that joining it under the cache stays under the cache.
pub fn check_repo_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > MAX_REPO_PATH {
        return Err(format!("a file path of {} bytes", path.len()));
    }
    if path.chars().any(|c| c.is_control() || c == '\\') {
        return Err(format!("{path:?} has a control character or a backslash"));
    }
    if path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        return Err(format!("{path:?} is not a plain relative path"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(repo: &str, choice: FileChoice) -> ModelSpec {
        ModelSpec::Hub(HubRef { repo: repo.into(), choice, revision: DEFAULT_REVISION.into() })
    }

    #[test]
    fn names_and_paths_are_told_apart() {
        let quant = |q: &str| FileChoice::Quant(Some(q.into()));
        assert_eq!(parse_model_spec("org/repo:Q4_1").unwrap(), hub("org/repo", quant("Q4_1")));
        assert_eq!(parse_model_spec("org/repo").unwrap(), hub("org/repo", FileChoice::Quant(None)));
        assert_eq!(parse_model_spec("hf://org/repo:q8_0").unwrap(), hub("org/repo", quant("q8_0")));
        assert_eq!(
            parse_model_spec("hf://org/re.po/sub/m-Q4_K_M.gguf").unwrap(),
            hub("org/re.po", FileChoice::File("sub/m-Q4_K_M.gguf".into()))
        );
        for path in ["models/m.gguf", "/abs/m", "./org/repo", "~/m", "m.gguf", "a/b/c", "plain", "src/hub"] {
            assert_eq!(parse_model_spec(path).unwrap(), ModelSpec::Path(path.into()), "{path}");
        }
    }

    #[test]
    fn malformed_names_say_why() {
        for bad in [
            "hf://org",
            "hf://org/",
            "org/re po",
            "org/-repo",
            "org/a..b",
            "hf://org/repo/../x.gguf",
            "hf://org/repo//x.gguf",
            "hf://org/repo:Q4/x.gguf",
            "org/repo:Q4/K",
            "org/repo:",
            "hf://org/repo/a\\b",
        ] {
            let err = parse_model_spec(bad).and_then(|_| HubRef::parse(bad)).unwrap_err();
            assert!(matches!(err, HubError::InvalidName(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn a_name_prints_as_written() {
        for name in ["org/repo", "org/repo:Q4_1", "hf://org/repo/dir/x.gguf"] {
            assert_eq!(HubRef::parse(name).unwrap().to_string(), name);
        }
        assert_eq!(HubRef::parse("hf://org/repo").unwrap().to_string(), "org/repo");
    }
}
