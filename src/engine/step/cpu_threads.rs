//! How many CPU threads an engine runs: what `threads` asks, at most the CPUs available to the process.
//!
//! The CPU backend's pool spins while it waits for work, so threads beyond the available CPUs do not add compute:
//! they preempt each other, and on 2 CPUs `"threads": 512` turned a 4-token request from ~0.1 s into 8 s. A value
//! above the CPUs is therefore capped (with a warning naming the key), not refused: a configuration written for a
//! bigger machine still serves, as fast as this one allows.

/// The thread count to run, and the warning to log when it is not what was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCount {
    pub threads: usize,
    pub warning: Option<String>,
}

/// `asked` (the `threads` key; 0 = all) bounded by `available` (CPUs available to the process, at least 1).
pub fn bounded_threads(asked: usize, available: usize) -> ThreadCount {
    let available = available.max(1);
    match asked {
        0 => ThreadCount { threads: available, warning: None },
        n if n > available => ThreadCount {
            threads: available,
            warning: Some(format!(
                "threads = {n} is more than the {available} CPUs available to this process: using {available} \
                 (the CPU threads spin while they wait, so more threads than CPUs only slow each other down)"
            )),
        },
        n => ThreadCount { threads: n, warning: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_all_and_a_fitting_count_is_kept() {
        assert_eq!(bounded_threads(0, 8), ThreadCount { threads: 8, warning: None });
        assert_eq!(bounded_threads(3, 8), ThreadCount { threads: 3, warning: None });
        assert_eq!(bounded_threads(8, 8), ThreadCount { threads: 8, warning: None });
    }

    #[test]
    fn more_than_the_cpus_is_capped_with_a_warning_naming_the_key_and_both_counts() {
        let capped = bounded_threads(512, 2);
        assert_eq!(capped.threads, 2);
        let warning = capped.warning.unwrap();
        assert!(warning.starts_with("threads = 512 ") && warning.contains("using 2"), "{warning}");
        assert_eq!(bounded_threads(4, 0).threads, 1, "an unknown CPU count counts as 1");
    }
}
