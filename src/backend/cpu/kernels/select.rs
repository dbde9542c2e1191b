//! Choosing a kernel path at run time: the best one this CPU supports, unless `EMBER_CPU_KERNELS` names another.
//!
//! The library ships as a shared object to machines we do not know, so nothing here depends on compile-time
//! `target-feature`s: each SIMD path detects its own features (`is_x86_feature_detected!`, cached by std) and only
//! then hands out its table.

use std::sync::OnceLock;

use super::scalar;
use super::table::Kernels;

/// The environment variable that forces a path: `scalar`, `avx2`, `avx512` or `amx`. Read once, on the first call of
/// [`kernels`].
pub const KERNELS_ENV_VAR: &str = "EMBER_CPU_KERNELS";

/// Every path's name, slowest first.
pub const KERNEL_NAMES: [&str; 4] = ["scalar", "avx2", "avx512", "amx"];

/// The path called `name`, when this CPU supports it (`None` for an unsupported or unknown name).
pub fn kernels_named(name: &str) -> Option<&'static Kernels> {
    match name {
        "scalar" => Some(scalar::kernels()),
        #[cfg(target_arch = "x86_64")]
        "avx2" => super::avx2::kernels(),
        #[cfg(target_arch = "x86_64")]
        "avx512" => super::avx512::kernels(),
        #[cfg(target_arch = "x86_64")]
        "amx" => super::avx512::amx_kernels(),
        _ => None,
    }
}

/// Every path this CPU supports, slowest first (for tests and benchmarks that compare paths).
pub fn supported_kernels() -> impl Iterator<Item = &'static Kernels> {
    KERNEL_NAMES.into_iter().filter_map(kernels_named)
}

/// The fastest path this CPU supports.
fn best() -> &'static Kernels {
    supported_kernels().last().unwrap_or_else(scalar::kernels)
}

/// Which kernels this process computes with, and how they were chosen.
#[derive(Debug)]
pub struct KernelSelection {
    pub kernels: &'static Kernels,
    /// Whether `EMBER_CPU_KERNELS` named the path (rather than the CPU's features deciding).
    pub forced: bool,
    /// A line for the host's log when `EMBER_CPU_KERNELS` named a path this CPU cannot run or an unknown one (the
    /// fastest path is used instead). A library does not write to stderr: the engine logs it when it starts.
    pub warning: Option<String>,
}

/// The selection [`kernels`] follows: made once per process, on the first call, from `EMBER_CPU_KERNELS` and the
/// CPU's features.
pub fn kernel_selection() -> &'static KernelSelection {
    static CHOSEN: OnceLock<KernelSelection> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let requested = std::env::var(KERNELS_ENV_VAR).ok().filter(|v| !v.is_empty());
        choose(requested.as_deref())
    })
}

/// The kernels to compute with: the fastest path this CPU supports, or the one `EMBER_CPU_KERNELS` names. A
/// name this CPU cannot run (or an unknown one) falls back to the fastest path, with the reason in
/// [`kernel_selection`]'s `warning`.
pub fn kernels() -> &'static Kernels {
    kernel_selection().kernels
}

/// `kernel_selection`'s rule, with the request passed in so that it is testable without touching the environment.
fn choose(requested: Option<&str>) -> KernelSelection {
    let Some(name) = requested else { return KernelSelection { kernels: best(), forced: false, warning: None } };
    match kernels_named(name) {
        Some(kernels) => KernelSelection { kernels, forced: true, warning: None },
        None => {
            let fallback = best();
            let why = if KERNEL_NAMES.contains(&name) { "is not supported by this CPU" } else { "is unknown" };
            let warning =
                format!("{KERNELS_ENV_VAR}={name} {why} (paths: {}); using {}", KERNEL_NAMES.join(", "), fallback.name);
            KernelSelection { kernels: fallback, forced: false, warning: Some(warning) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_picks_a_supported_path_or_falls_back_to_the_best_with_a_warning() {
        let scalar = choose(Some("scalar"));
        assert_eq!((scalar.kernels.name, scalar.forced, scalar.warning.is_none()), ("scalar", true, true));
        let default = choose(None);
        assert_eq!((default.kernels.name, default.forced, default.warning.is_none()), (best().name, false, true));
        let unknown = choose(Some("sse9"));
        assert_eq!((unknown.kernels.name, unknown.forced), (best().name, false));
        let warning = unknown.warning.expect("an unknown path is worth a warning");
        assert!(warning.contains("EMBER_CPU_KERNELS=sse9 is unknown"), "{warning}");
        for name in KERNEL_NAMES {
            let chosen = choose(Some(name));
            let expected = kernels_named(name).map_or(best().name, |k| k.name);
            assert_eq!(chosen.kernels.name, expected);
            assert_eq!(chosen.warning.is_some(), kernels_named(name).is_none(), "{name}");
        }
    }
}
