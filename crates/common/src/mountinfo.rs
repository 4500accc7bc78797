//! The kernel's mount table (`/proc/self/mountinfo`), parsed once in one place.

use std::path::{Path, PathBuf};

/// One mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (octal escapes such as `\040` decoded).
    pub mount_point: PathBuf,
    /// Its filesystem type (`cgroup2`, `overlay`, `nsfs`, ...).
    pub fs_type: String,
    /// Its source (`none`, a device, ...).
    pub source: String,
    /// It is in a peer group (`shared:N` among its optional fields): mounts under it propagate.
    pub shared: bool,
}

/// Undoes mountinfo's octal escapes (space, tab, newline, backslash).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.clone().take(3).collect();
            if code.len() == 3
                && let Ok(n) = u8::from_str_radix(&code, 8)
            {
                out.push(n as char);
                chars.nth(2);
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// Parses mountinfo text. Lines it cannot read are skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            // id parent maj:min root mountpoint opts [optional...] - fstype source superopts
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let shared = left.split(' ').skip(6).any(|f| f.starts_with("shared:"));
            let mut r = right.split(' ');
            Some(Mount {
                mount_point: PathBuf::from(unescape(mount_point)),
                fs_type: r.next()?.to_string(),
                source: r.next().unwrap_or_default().to_string(),
                shared,
            })
        })
        .collect()
}

/// The mount among `mounts` that holds `path` (the one with the longest mount point above it; the last one
/// mounted there, when several are).
pub fn holding<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
}

/// This process's mounts.
pub fn mounts() -> std::io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The cgroup2 mount among `mounts`: `/sys/fs/cgroup` if it is cgroup2 (a pure v2 host), else the first
/// cgroup2 mount (`/sys/fs/cgroup/unified` on a hybrid host).
pub fn cgroup2_in(mounts: &[Mount]) -> Option<PathBuf> {
    let v2: Vec<&Mount> = mounts.iter().filter(|m| m.fs_type == "cgroup2").collect();
    let preferred = Path::new("/sys/fs/cgroup");
    v2.iter()
        .find(|m| m.mount_point == preferred)
        .or(v2.first())
        .map(|m| m.mount_point.clone())
}

/// This process's cgroup2 mount, if any, as [`cgroup2_in`] finds it: `/sys/fs/cgroup` when it is cgroup2 (one
/// statfs), else the first cgroup2 mount of the mount table, read only as far as that mount. The kernel prints
/// the table as it is read, and whole, with a node's hundreds of pods (each pins namespaces and mounts a
/// rootfs), it costs about a millisecond of kernel time, on every container start; cgroup mounts come early.
pub fn cgroup2() -> Option<PathBuf> {
    use std::io::BufRead;
    let preferred = Path::new("/sys/fs/cgroup");
    let is_v2 = |p: &Path| {
        nix::sys::statfs::statfs(p)
            .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    if is_v2(preferred) {
        return Some(preferred.to_path_buf());
    }
    let table = std::fs::File::open("/proc/self/mountinfo").ok()?;
    std::io::BufReader::new(table)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| parse(&l).pop())
        .find(|m| m.fs_type == "cgroup2")
        .map(|m| m.mount_point)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
35 33 0:30 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory
90 30 0:50 / /run/my\\040dir rw - tmpfs none rw
bad line
";

    #[test]
    fn hybrid_and_pure_v2_hosts() {
        let m = parse(HYBRID);
        assert_eq!(m.len(), 5);
        assert_eq!(cgroup2_in(&m), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(m[4].mount_point, PathBuf::from("/run/my dir"));
        assert_eq!((m[4].fs_type.as_str(), m[4].source.as_str()), ("tmpfs", "none"));
        assert!(m[0].shared && !m[4].shared, "shared:N among the optional fields");
        let pure = "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n\
                    31 1 0:27 / /mnt/v2 rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_in(&parse(pure)), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_in(&parse("")), None);
    }

    #[test]
    fn the_cgroup2_mount_read_as_far_as_it_is_the_one_in_the_whole_table() {
        assert_eq!(cgroup2(), cgroup2_in(&mounts().unwrap()));
    }
}
