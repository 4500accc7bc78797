//! A pod's network counters: the interfaces of its network namespace as `/proc/net/dev` shows them from
//! inside (read by a short-lived thread that joins the pinned namespace), for PodSandboxStats.

use std::path::Path;

/// One interface's counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Counters {
    /// The interface.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Send errors.
    pub tx_errors: u64,
}

/// The interfaces in `/proc/net/dev` text `text`, loopback left out.
pub fn parse(text: &str) -> Vec<Counters> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
            // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes packets errs ...
            (name != "lo" && f.len() >= 11).then(|| Counters {
                name: name.to_string(),
                rx_bytes: f[0],
                rx_errors: f[2],
                tx_bytes: f[8],
                tx_errors: f[10],
            })
        })
        .collect()
}

/// The counters of the interfaces in the network namespace pinned at `netns`.
pub fn read(netns: &Path) -> std::io::Result<Vec<Counters>> {
    super::netns::within(Some(netns), "pod-netdev", || {
        std::fs::read_to_string("/proc/thread-self/net/dev").map(|t| parse(&t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_dev_is_read_without_loopback() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0
  eth0:    1882      21    3    0    0     0          0         0     1096      12    4    0    0     0       0          0
";
        assert_eq!(
            parse(text),
            [Counters {
                name: "eth0".into(),
                rx_bytes: 1882,
                rx_errors: 3,
                tx_bytes: 1096,
                tx_errors: 4,
            }]
        );
    }
}
