//! Memory figures of this process from `/proc/self/status` (Linux). Included with `#[path]` by tests and benches.

/// The field `field` (`VmRSS`, `RssAnon`, `RssFile`, ...) in KiB; 0 where there is none.
pub fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'));
    line.and_then(|l| l[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
}
