//! criusd's own process figures, read from `/proc/self` at scrape time, under the names every Prometheus
//! client library gives them (`process_*`), so that the usual dashboards and alerts work unchanged.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

/// The figures of one read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// User plus system cpu time, seconds.
    pub cpu_seconds: f64,
    /// Resident set, bytes.
    pub resident_bytes: u64,
    /// Address space, bytes.
    pub virtual_bytes: u64,
    /// Threads.
    pub threads: u64,
    /// Start time, seconds since the epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on them.
    pub max_fds: u64,
}

/// The fields of `/proc/<pid>/stat` text `stat` that [`Figures`] takes, given the clock tick rate, the page
/// size and the boot time (`btime` of `/proc/stat`). The command name may hold spaces and parentheses, so
/// fields are counted from the last `)`.
pub fn parse_stat(stat: &str, ticks: f64, page: u64, boot: u64) -> Option<Figures> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(Figures {
        cpu_seconds: (num(14)? + num(15)?) as f64 / ticks,
        threads: num(20)?,
        start_time_seconds: boot as f64 + num(22)? as f64 / ticks,
        virtual_bytes: num(23)?,
        resident_bytes: num(24)? * page,
        ..Figures::default()
    })
}

/// `btime` of `/proc/stat` text `text`.
pub fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// This process's figures now (None if /proc cannot be read).
pub fn read() -> Option<Figures> {
    // SAFETY: sysconf reads a constant of the system; it takes no pointers.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
    let page = if page > 0 { page as u64 } else { 4096 };
    let boot = boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let mut f = parse_stat(
        &std::fs::read_to_string("/proc/self/stat").ok()?,
        ticks,
        page,
        boot,
    )?;
    f.open_fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count() as u64)
        .unwrap_or(0);
    f.max_fds = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(0);
    Some(f)
}

/// Writes `f` as the `process_*` gauges and counter.
pub fn encode(f: &Figures, e: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let gauges: [(&str, &str, u64); 5] = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            f.resident_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            f.virtual_bytes,
        ),
        ("process_open_fds", "Number of open file descriptors.", f.open_fds),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            f.max_fds,
        ),
        (
            "process_threads",
            "Number of OS threads in the process.",
            f.threads,
        ),
    ];
    for (name, help, v) in gauges {
        e.encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&v)?;
    }
    e.encode_descriptor(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        None,
        MetricType::Gauge,
    )?
    .encode_gauge(&f.start_time_seconds)?;
    // The encoder adds `_total` to a counter's name.
    e.encode_descriptor(
        "process_cpu_seconds",
        "Total user and system CPU time spent in seconds.",
        None,
        MetricType::Counter,
    )?
    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(&f.cpu_seconds, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
        // cstime priority nice num_threads itrealvalue starttime vsize rss ...
        let stat = "4242 (crius d) (x)) S 1 4242 4242 0 -1 4194560 900 0 3 0 250 50 0 0 20 0 7 0 1000 \
                    123456789 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let f = parse_stat(stat, 100.0, 4096, 1_700_000_000).unwrap();
        assert_eq!(f.cpu_seconds, 3.0);
        assert_eq!(f.threads, 7);
        assert_eq!(f.start_time_seconds, 1_700_000_010.0);
        assert_eq!(f.virtual_bytes, 123456789);
        assert_eq!(f.resident_bytes, 2500 * 4096);
        assert_eq!(parse_stat("4242 (short) S 1", 100.0, 4096, 0), None);
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reads_itself() {
        let f = read().unwrap();
        assert!(f.resident_bytes > 0 && f.threads >= 1 && f.open_fds >= 3, "{f:?}");
        assert!(f.start_time_seconds > 1_600_000_000.0, "{f:?}");
    }
}
