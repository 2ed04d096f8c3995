//! What Linux says about processes and the machine (`/proc`), for benchmarks that
//! measure a broker from outside: another process's resident memory and limits, the
//! RabbitMQ node's process, the file-descriptor limit of this one, the ephemeral ports.
//! Off Linux, or when a file cannot be read, the readers answer `None`.

/// The RabbitMQ node's process id (`beam.smp ... -s rabbit boot`), if it runs here.
pub fn rabbitmq_pid() -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let is_beam = words.first().is_some_and(|w| w.ends_with(b"beam.smp"));
        if is_beam
            && words
                .windows(3)
                .any(|w| w == [&b"-s"[..], b"rabbit", b"boot"])
        {
            return Some(pid);
        }
    }
    None
}

/// The id of a process whose program (the first word of its command line) ends with
/// `program` (`mosquitto`), if one runs here.
pub fn pid_of(program: &str) -> Option<u32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let first = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        if first.ends_with(program.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// `/proc/PID/stat` of the RabbitMQ node, for [`super::stomp_load::cpu_s`].
pub fn rabbitmq_stat() -> Option<String> {
    rabbitmq_pid().map(|pid| format!("/proc/{pid}/stat"))
}

/// Resident memory of process `pid` in bytes (`VmRSS` of `/proc/PID/status`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit on open files of process `pid` (`Max open files` in
/// `/proc/PID/limits`); `u64::MAX` for `unlimited`.
pub fn open_files_limit(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// Raises this process's soft limit on open files (RLIMIT_NOFILE) to at least `want`,
/// raising the hard limit too when it is lower (which needs root); children started
/// afterwards inherit it. Answers the soft limit in force afterwards.
pub fn raise_open_files(want: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        if limit.rlim_cur >= want {
            return limit.rlim_cur;
        }
        if limit.rlim_max < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: want,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return want;
            }
        }
        let soft = libc::rlimit {
            rlim_cur: want.min(limit.rlim_max),
            rlim_max: limit.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &soft) == 0 {
            return soft.rlim_cur;
        }
        limit.rlim_cur
    }
}

/// How many ephemeral ports a client may connect from
/// (`/proc/sys/net/ipv4/ip_local_port_range`).
pub fn ephemeral_ports() -> Option<u64> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut parts = range.split_whitespace().map(|p| p.parse::<u64>());
    let (low, high) = (parts.next()?.ok()?, parts.next()?.ok()?);
    Some(high.saturating_sub(low) + 1)
}
