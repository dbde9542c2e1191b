//! Choosing a kernel path at run time: the best one this CPU supports, unless `EMBER_CPU_KERNELS` names another.
//!
//! The library ships as a shared object to machines we do not know, so nothing here depends on compile-time
//! `target-feature`s: each SIMD path detects its own features (`is_x86_feature_detected!`, cached by std) and only
//! then hands out its table.

use std::sync::OnceLock;

use super::scalar;
use super::table::Kernels;

/// The environment variable that forces a path: `scalar`, `avx2` or `avx512`. Read once, on the first call of
/// [`kernels`].
pub const KERNELS_ENV_VAR: &str = "EMBER_CPU_KERNELS";

/// Every path's name, slowest first.
pub const KERNEL_NAMES: [&str; 3] = ["scalar", "avx2", "avx512"];

/// The path called `name`, when this CPU supports it (`None` for an unsupported or unknown name).
pub fn kernels_named(name: &str) -> Option<&'static Kernels> {
    match name {
        "scalar" => Some(scalar::kernels()),
        #[cfg(target_arch = "x86_64")]
        "avx2" => super::avx2::kernels(),
        #[cfg(target_arch = "x86_64")]
        "avx512" => super::avx512::kernels(),
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

/// The kernels to compute with: the fastest path this CPU supports, or the one `EMBER_CPU_KERNELS` names. A
/// name this CPU cannot run (or an unknown one) falls back to the fastest path with a line on stderr.
pub fn kernels() -> &'static Kernels {
    static CHOSEN: OnceLock<&'static Kernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let requested = std::env::var(KERNELS_ENV_VAR).ok().filter(|v| !v.is_empty());
        choose(requested.as_deref())
    })
}

/// `kernels`' rule, with the request passed in so that it is testable without touching the environment.
fn choose(requested: Option<&str>) -> &'static Kernels {
    let Some(name) = requested else { return best() };
    kernels_named(name).unwrap_or_else(|| {
        let fallback = best();
        let why = if KERNEL_NAMES.contains(&name) { "is not supported by this CPU" } else { "is unknown" };
        eprintln!(
            "ember: {KERNELS_ENV_VAR}={name} {why} (paths: {}); using {}",
            KERNEL_NAMES.join(", "),
            fallback.name
        );
        fallback
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_picks_a_supported_path_or_falls_back_to_the_best() {
        assert_eq!(choose(Some("scalar")).name, "scalar");
        assert_eq!(choose(None).name, best().name);
        assert_eq!(choose(Some("sse9")).name, best().name);
        for name in KERNEL_NAMES {
            let expected = kernels_named(name).map_or(best().name, |k| k.name);
            assert_eq!(choose(Some(name)).name, expected);
        }
    }
}
