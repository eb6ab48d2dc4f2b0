//! Small helpers for the benchmarks: percentiles and a process's RSS.

/// The `p` quantile (0..1) of `v`, nearest rank; sorts `v`.
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Resident set size of `pid` in KiB (0 if unknown): `VmRSS` in
/// `/proc/PID/status` on Linux.
#[cfg(target_os = "linux")]
pub fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Resident set size of `pid` in KiB (0 if unknown): the task's
/// `pti_resident_size` (`proc_pidinfo`) on macOS, which has no `/proc`.
#[cfg(target_os = "macos")]
pub fn rss_kb(pid: u32) -> u64 {
    crate::macos::task_info(pid).map_or(0, |t| t.pti_resident_size / 1024)
}
