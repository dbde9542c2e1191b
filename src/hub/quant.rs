//! Which GGUF file of a repository a name picks: by quantization (`org/repo:Q4_K_M`), as llama.cpp's
//! `-hf org/repo:QUANT` does, and the other parts of a file split in `-00001-of-0000N.gguf` parts.

use super::error::HubError;

/// The quantizations tried, in order, when a name gives none (llama.cpp's), before the first model file.
pub const DEFAULT_QUANTS: [&str; 2] = ["Q4_K_M", "Q8_0"];
/// GGUF files in a repository that are not models: vision projectors, importance matrices, draft heads.
const NOT_MODELS: [&str; 6] = ["mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-"];

/// Where a file stands in a split model: `prefix-00002-of-00003.gguf` is part 2 of 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The name without `-0000i-of-0000N.gguf`.
    pub prefix: String,
    pub index: u32,
    pub count: u32,
}

/// The split of a `.gguf` path (a whole file is part 1 of 1); `None` for any other file.
pub fn split_of(path: &str) -> Option<Split> {
    let stem = strip_suffix_ignore_case(path, ".gguf")?;
    let numbered = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, count)) = stem.rsplit_once("-of-") {
        if let Some((prefix, index)) = head.rsplit_once('-') {
            if numbered(index) && numbered(count) {
                let (index, count) = (index.parse().ok()?, count.parse().ok()?);
                if (1..=count).contains(&index) {
                    return Some(Split { prefix: prefix.to_owned(), index, count });
                }
            }
        }
    }
    Some(Split { prefix: stem.to_owned(), index: 1, count: 1 })
}

/// The quantization a file's name ends in (`Model-Q4_K_M.gguf`, `model.q8_0.gguf`, split or not), upper case.
pub fn quant_of(path: &str) -> Option<String> {
    let split = split_of(path)?;
    let tag = split.prefix.rsplit(['-', '.', '/']).next()?;
    let plausible = tag.len() > 1 && tag.bytes().any(|b| b.is_ascii_digit()) && super::name::is_quant(tag);
    plausible.then(|| tag.to_ascii_uppercase())
}

/// A GGUF file that holds a model (not a projector, matrix or draft head).
pub fn is_model_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    name.ends_with(".gguf") && !NOT_MODELS.iter().any(|n| name.contains(n))
}

/// The first (or only) part of the model file in `files` that `quant` names (any case): one whose quantization is
/// `quant`, else (llama.cpp's rule) one whose name holds `quant` followed by `.` or `-`. Without `quant`,
/// [`DEFAULT_QUANTS`] in order, else the first model file. `files` are taken in sorted order.
pub fn choose(files: &[String], quant: Option<&str>, name: &str) -> Result<String, HubError> {
    let mut models: Vec<&String> =
        files.iter().filter(|f| is_model_file(f) && split_of(f).is_some_and(|s| s.index == 1)).collect();
    models.sort();
    let pick = |q: &str| {
        let upper = q.to_ascii_uppercase();
        let exact = models.iter().find(|f| quant_of(f).as_deref() == Some(upper.as_str()));
        let within = || {
            models.iter().find(|f| {
                let f = f.to_ascii_uppercase();
                f.contains(&format!("{upper}.")) || f.contains(&format!("{upper}-"))
            })
        };
        exact.or_else(within).map(|f| f.to_string())
    };
    let chosen = match quant {
        Some(q) => pick(q),
        None => DEFAULT_QUANTS.iter().find_map(|q| pick(q)).or_else(|| models.first().map(|f| f.to_string())),
    };
    chosen.ok_or_else(|| HubError::NoMatch {
        name: name.to_owned(),
        reason: match quant {
            Some(q) => format!("no GGUF model file of quantization {q}"),
            None => "no GGUF model file".to_owned(),
        },
        available: available(files),
    })
}

/// What a repository offers, for an error: each model file's quantization (its name when it has none).
pub fn available(files: &[String]) -> Vec<String> {
    let mut names: Vec<String> = files
        .iter()
        .filter(|f| is_model_file(f) && split_of(f).is_some_and(|s| s.index == 1))
        .map(|f| quant_of(f).unwrap_or_else(|| f.clone()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every part of the file `first` belongs to, in order (`first` alone when it is not split), named as the split
/// format names them.
pub fn parts_of(first: &str) -> Vec<String> {
    match split_of(first) {
        Some(split) if split.count > 1 => {
            let extension = &first[first.len() - ".gguf".len()..];
            (1..=split.count).map(|i| format!("{}-{i:05}-of-{:05}{extension}", split.prefix, split.count)).collect()
        }
        _ => vec![first.to_owned()],
    }
}

fn strip_suffix_ignore_case<'a>(text: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = text.len().checked_sub(suffix.len())?;
    (text.is_char_boundary(cut) && text[cut..].eq_ignore_ascii_case(suffix)).then(|| &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn quantization_and_split_come_from_the_name() {
        assert_eq!(quant_of("SmolLM2-135M-Instruct.Q4_1.gguf").as_deref(), Some("Q4_1"));
        assert_eq!(quant_of("dir/m-q4_k_m-00002-of-00003.gguf").as_deref(), Some("Q4_K_M"));
        assert_eq!(quant_of("model-F16.gguf").as_deref(), Some("F16"));
        assert_eq!(quant_of("model.gguf"), None);
        assert_eq!(quant_of("README.md"), None);
        let split = split_of("m-Q8_0-00002-of-00003.gguf").unwrap();
        assert_eq!(split, Split { prefix: "m-Q8_0".into(), index: 2, count: 3 });
        assert_eq!(split_of("m-00004-of-00003.gguf").unwrap().count, 1, "a part beyond the count is no split");
        assert_eq!(
            parts_of("m-Q8_0-00001-of-00003.gguf"),
            files(&["m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00002-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"])
        );
        assert_eq!(parts_of("m.gguf"), files(&["m.gguf"]));
    }

    #[test]
    fn a_quantization_picks_its_file_in_any_case() {
        let repo = files(&[
            "README.md",
            "m-Q8_0-00002-of-00002.gguf",
            "m-Q8_0-00001-of-00002.gguf",
            "m-Q4_K_M.gguf",
            "m-Q4_K_S.gguf",
            "mmproj-m-Q4_K_M.gguf",
            "m.Q4_1.gguf",
        ]);
        assert_eq!(choose(&repo, Some("q4_1"), "r").unwrap(), "m.Q4_1.gguf");
        assert_eq!(choose(&repo, Some("Q4_K_S"), "r").unwrap(), "m-Q4_K_S.gguf");
        assert_eq!(choose(&repo, Some("Q8_0"), "r").unwrap(), "m-Q8_0-00001-of-00002.gguf");
        assert_eq!(choose(&repo, None, "r").unwrap(), "m-Q4_K_M.gguf");
        let err = choose(&repo, Some("Q5_K_M"), "org/repo:Q5_K_M").unwrap_err().to_string();
        assert_eq!(
            err,
            "org/repo:Q5_K_M: no GGUF model file of quantization Q5_K_M; available: Q4_1, Q4_K_M, Q4_K_S, Q8_0"
        );
        assert_eq!(choose(&files(&["z.gguf", "a-F16.gguf"]), None, "r").unwrap(), "a-F16.gguf");
        let none = choose(&files(&["README.md"]), None, "r").unwrap_err().to_string();
        assert!(none.contains("no GGUF model files"), "{none}");
    }
}
