//! How much of a reference a numerics test checks on this run.

/// How many of a reference's `total` cases to check: all of them, unless `EMBER_NUMERICS_CASES` sets fewer (empty
/// is unset).
/// `make numerics-per-path` sets it for the scalar kernel path only: that path runs the same cases some ten
/// times slower than the vector paths, whose bits it equals kernel by kernel (`tests/kernel_paths_agree.rs`), so
/// its end-to-end run checks the first cases rather than every one (it took 8 of CI's 38 minutes on an AVX2-only
/// machine).
#[allow(dead_code)] // each test crate that includes this file uses one of its two functions
pub fn cases_to_check(total: usize) -> usize {
    match cases_limit() {
        Some(n) => {
            println!("checking the first {} of {total} cases (EMBER_NUMERICS_CASES)", n.min(total));
            n.min(total)
        }
        None => total,
    }
}

/// Whether this run is trimmed (`EMBER_NUMERICS_CASES` set): a test without numbered cases then leaves out what
/// repeats a check its other parts make.
#[allow(dead_code)] // each test crate that includes this file uses one of its two functions
pub fn trimmed() -> bool {
    cases_limit().is_some()
}

fn cases_limit() -> Option<usize> {
    match std::env::var("EMBER_NUMERICS_CASES") {
        Ok(v) if !v.is_empty() => {
            Some(v.parse().unwrap_or_else(|_| panic!("EMBER_NUMERICS_CASES={v:?} is not a count")))
        }
        _ => None,
    }
}
