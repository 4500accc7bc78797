//! Capabilities: the five sets of the OCI process, applied with `capset`, `PR_CAPBSET_DROP` and `PR_CAP_AMBIENT`.

use std::str::FromStr;

use oci_spec::runtime::{Capabilities, LinuxCapabilities};

use crate::{Result, err};

/// Capability sets as bit masks (bit n = capability number n).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sets {
    /// Bounding set.
    pub bounding: u64,
    /// Effective set.
    pub effective: u64,
    /// Permitted set.
    pub permitted: u64,
    /// Inheritable set.
    pub inheritable: u64,
    /// Ambient set.
    pub ambient: u64,
}

fn mask(set: &Option<Capabilities>) -> Result<u64> {
    let mut m = 0u64;
    for c in set.iter().flatten() {
        let name = format!("CAP_{c}");
        let cap = caps::Capability::from_str(&name).map_err(|e| err!("capability {name}: {e}"))?;
        m |= 1 << cap.index();
    }
    Ok(m)
}

impl Sets {
    /// Converts the OCI sets; a missing set is empty.
    pub fn from_oci(c: &LinuxCapabilities) -> Result<Sets> {
        Ok(Sets {
            bounding: mask(c.bounding())?,
            effective: mask(c.effective())?,
            permitted: mask(c.permitted())?,
            inheritable: mask(c.inheritable())?,
            ambient: mask(c.ambient())?,
        })
    }

    /// The ambient capabilities the kernel would refuse to raise: those not both permitted and inheritable
    /// (`runc spec` asks for three it does not make inheritable). runc warns about them and goes on; so
    /// does crius-runc, raising only the others.
    pub fn unraisable_ambient(&self) -> u64 {
        self.ambient & !(self.permitted & self.inheritable)
    }
}

/// The `CAP_` names of the capabilities in `mask`.
pub fn names_of(mask: u64) -> Vec<String> {
    all_names()
        .into_iter()
        .filter(|(n, _)| mask & (1 << n) != 0)
        .map(|(_, name)| name.to_uppercase())
        .collect()
}

/// The highest capability number this kernel knows.
pub fn last_cap() -> u8 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// Every capability this library knows, as (number, `CAP_NAME`).
pub fn all_names() -> Vec<(u8, String)> {
    caps::all()
        .into_iter()
        .map(|c| (c.index(), c.to_string()))
        .collect()
}

/// Drops every capability outside `bounding` from the bounding set (needs CAP_SETPCAP, so do it first).
pub fn drop_bounding(bounding: u64) -> Result<()> {
    for cap in 0..=last_cap() {
        if bounding & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments only.
            let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(err!("dropping capability {cap} from the bounding set: {e}"));
                }
            }
        }
    }
    Ok(())
}

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Sets effective, permitted and inheritable at once, then raises the ambient ones.
pub fn apply(s: &Sets) -> Result<()> {
    let hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let split = |m: u64| [m as u32, (m >> 32) as u32];
    let (e, p, i) = (split(s.effective), split(s.permitted), split(s.inheritable));
    let data = [
        Data {
            effective: e[0],
            permitted: p[0],
            inheritable: i[0],
        },
        Data {
            effective: e[1],
            permitted: p[1],
            inheritable: i[1],
        },
    ];
    // SAFETY: header and a two-element data array as capset(2) expects for version 3.
    let r = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) };
    if r != 0 {
        return Err(err!("capset: {}", std::io::Error::last_os_error()));
    }
    // The caller warned about the others (see `Sets::unraisable_ambient`).
    let ambient = s.ambient & !s.unraisable_ambient();
    for cap in 0..=last_cap() {
        if ambient & (1 << cap) != 0 {
            // SAFETY: prctl with integer arguments only.
            let r = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                    0,
                )
            };
            if r != 0 {
                return Err(err!(
                    "raising ambient capability {cap}: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_from_names() {
        let c: LinuxCapabilities =
            serde_json::from_str(r#"{"bounding":["CAP_CHOWN","CAP_KILL"],"effective":["CAP_SYS_ADMIN"]}"#)
                .unwrap();
        let s = Sets::from_oci(&c).unwrap();
        assert_eq!(s.bounding, (1 << 0) | (1 << 5));
        assert_eq!(s.effective, 1 << 21);
        assert_eq!(s.ambient, 0);
    }
}
