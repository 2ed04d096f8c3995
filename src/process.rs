//! The process's own memory, as the operating system counts it: resident memory now
//! and its peak, in bytes.
//!
//! Read from Linux's `/proc/self/status` (`VmRSS` and `VmHWM`, which the kernel writes
//! in KiB); elsewhere, or when the file cannot be read, both read 0. Each call reads
//! the file once (a few microseconds): `Broker::stats` takes them for every
//! [`Broker::stats`](crate::Broker::stats) snapshot, the metrics endpoint publishes
//! them from there, and `ebb soak` samples them while its backlog grows.

/// Resident memory of this process now, bytes (`VmRSS`; 0 when unknown).
pub fn resident_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// Peak resident memory of this process since it started, bytes (`VmHWM`, the
/// "high water mark"; 0 when unknown).
pub fn peak_resident_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// The value of `field` in `/proc/self/status`, KiB; 0 when the file or the field is
/// missing.
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| field_kib(&status, field))
        .unwrap_or(0)
}

/// The number after `field` (a line such as `VmRSS:  12345 kB`, tab-separated) in
/// `status`.
fn field_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str =
        "Name:\tebb\nVmPeak:\t  900000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   20480 kB\n";

    #[test]
    fn fields_are_read_by_name_in_kib() {
        assert_eq!(field_kib(STATUS, "VmRSS:"), Some(20_480));
        assert_eq!(field_kib(STATUS, "VmHWM:"), Some(40_960));
        assert_eq!(field_kib(STATUS, "VmSwap:"), None);
        assert_eq!(field_kib("VmRSS:\tlots kB\n", "VmRSS:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_resident_memory_within_its_peak() {
        assert!(resident_bytes() > 0, "a running process has resident pages");
        assert_eq!(resident_bytes() % 1024, 0, "whole KiB, in bytes");
        assert!(peak_resident_bytes() > 0);
        // Both fields from one reading: the kernel writes the peak as at least the
        // resident memory of the same moment.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let (now, peak) = (field_kib(&status, "VmRSS:"), field_kib(&status, "VmHWM:"));
        assert!(
            now.is_some_and(|n| n > 0) && peak >= now,
            "{now:?} {peak:?}"
        );
    }
}
