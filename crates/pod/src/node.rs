//! Facts about this machine, the pod's node: CPUs, memory, hostname, what it offers pods ([`Allocatable`]);
//! and random names.

/// What the node offers its pods: the sum of their requests may not pass it, and a container's limit that is
/// not set is it (the downward API's value). criusd configures it (`[pods]`); the engine gets it through its
/// [`crate::Options`].
/// Its default is nothing at all (zero), never the machine's: a caller names the figure it means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocatable {
    /// milli-CPUs.
    pub milli_cpu: u64,
    /// Bytes of memory.
    pub memory: u64,
}

impl Allocatable {
    /// The machine minus a reserve for the system: 100m of cpu, and a tenth of the memory up to 512 MiB.
    pub fn of_machine() -> Allocatable {
        let cpu = cpus() * 1000;
        let mem = memory_bytes();
        Allocatable {
            milli_cpu: cpu.saturating_sub(100).max(100),
            memory: mem - (mem / 10).min(512 << 20),
        }
    }
}

/// The number of CPUs this process may use.
pub fn cpus() -> u64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1)
}

/// MemTotal from /proc/meminfo, in bytes (0 if unreadable).
pub fn memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// This machine's hostname.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".into())
}

/// This node's IP: the source address of its default route (127.0.0.1 without one). A UDP socket's connect
/// sends nothing; it only picks the route.
pub fn host_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("10.255.255.255:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into())
}

/// `n` random bytes from the kernel.
fn random(n: usize) -> Vec<u8> {
    crius_common::id::random_bytes(n).unwrap_or_else(|_| vec![0; n])
}

/// A random version-4 UUID, as Kubernetes gives pods.
pub fn uuid() -> String {
    let mut b = random(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = crius_common::id::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The 5-character suffix a controller appends to its pods' names (Kubernetes' alphabet, no vowels).
pub fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    random(5)
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_and_suffixes() {
        let u = super::uuid();
        assert_eq!((u.len(), u.as_bytes()[14]), (36, b'4'));
        assert_ne!(u, super::uuid());
        assert_eq!(super::name_suffix().len(), 5);
        assert!(super::memory_bytes() > 0 && super::cpus() > 0);
    }
}
