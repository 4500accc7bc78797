//! Mount options as mount(8) and the OCI config name them, turned into mount(2) flags, propagation and data.
//! The recursive ones of runc 1.1 (`rro`, `rnosuid`, ...; mount(8)'s `X-mount.` has no such names) apply to
//! the mount and every submount below it, through `mount_setattr` with `AT_RECURSIVE`.

use nix::mount::MsFlags;

/// Mount flags and data of an options list.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// Flags for the mount call.
    pub flags: MsFlags,
    /// Propagation flags, applied by a second call.
    pub propagation: MsFlags,
    /// Filesystem-specific options, comma-separated.
    pub data: String,
    /// A bind mount (`bind` or `rbind`).
    pub bind: bool,
    /// Flags set on the mount and all its submounts (`rro`, `rnosuid`, `rnodev`, `rnoexec`).
    pub rec_set: MsFlags,
    /// Flags cleared on the mount and all its submounts (`rrw`, `rsuid`, `rdev`, `rexec`).
    pub rec_clear: MsFlags,
    /// `ridmap`: an idmapped mount idmaps its submounts too (`idmap`, the default, only the mount itself).
    pub idmap_recursive: bool,
}

/// The recursive options: each name, the flag it sets and whether it clears it instead.
const RECURSIVE: &[(&str, MsFlags, bool)] = &[
    ("rro", MsFlags::MS_RDONLY, false),
    ("rrw", MsFlags::MS_RDONLY, true),
    ("rnosuid", MsFlags::MS_NOSUID, false),
    ("rsuid", MsFlags::MS_NOSUID, true),
    ("rnodev", MsFlags::MS_NODEV, false),
    ("rdev", MsFlags::MS_NODEV, true),
    ("rnoexec", MsFlags::MS_NOEXEC, false),
    ("rexec", MsFlags::MS_NOEXEC, true),
];

/// The names of the recursive options, as the runtime's features document lists them.
pub fn recursive_names() -> impl Iterator<Item = &'static str> {
    RECURSIVE.iter().map(|(name, _, _)| *name)
}

/// Parses mount options as mount(8) names them.
pub fn parse_options(opts: &[String]) -> Options {
    let mut o = Options {
        flags: MsFlags::empty(),
        propagation: MsFlags::empty(),
        data: String::new(),
        bind: false,
        rec_set: MsFlags::empty(),
        rec_clear: MsFlags::empty(),
        idmap_recursive: false,
    };
    let mut data = Vec::new();
    for opt in opts {
        if let Some(&(_, flag, clear)) = RECURSIVE.iter().find(|(name, _, _)| name == opt) {
            // The last of `rro` and `rrw` wins, as for `ro` and `rw`.
            if clear {
                o.rec_set.remove(flag);
                o.rec_clear.insert(flag);
            } else {
                o.rec_clear.remove(flag);
                o.rec_set.insert(flag);
            }
            continue;
        }
        let (set, clear) = match opt.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
            "remount" => (MsFlags::MS_REMOUNT, MsFlags::empty()),
            "mand" => (MsFlags::MS_MANDLOCK, MsFlags::empty()),
            "nomand" => (MsFlags::empty(), MsFlags::MS_MANDLOCK),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
            "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME),
            "bind" => {
                o.bind = true;
                (MsFlags::MS_BIND, MsFlags::empty())
            }
            "rbind" => {
                o.bind = true;
                (MsFlags::MS_BIND | MsFlags::MS_REC, MsFlags::empty())
            }
            "private" | "rprivate" | "shared" | "rshared" | "slave" | "rslave" | "unbindable"
            | "runbindable" => {
                o.propagation |= propagation(opt).unwrap_or(MsFlags::empty());
                continue;
            }
            "tmpcopyup" | "defaults" => continue,
            // The mappings are the mount's uidMappings and gidMappings (see `sources`).
            "idmap" | "ridmap" => {
                o.idmap_recursive = opt == "ridmap";
                continue;
            }
            other => {
                data.push(other.to_string());
                continue;
            }
        };
        o.flags = (o.flags | set) & !clear;
    }
    o.data = data.join(",");
    o
}

/// Propagation flags of a propagation name (`rslave`, `private`, ...).
pub fn propagation(name: &str) -> Option<MsFlags> {
    let rec = if name.starts_with('r') {
        MsFlags::MS_REC
    } else {
        MsFlags::empty()
    };
    let kind = match name.trim_start_matches('r') {
        "private" => MsFlags::MS_PRIVATE,
        "shared" => MsFlags::MS_SHARED,
        "slave" => MsFlags::MS_SLAVE,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        _ => return None,
    };
    Some(kind | rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        let o =
            parse_options(&["nosuid", "noexec", "mode=755", "size=65536k", "rslave", "ro"].map(String::from));
        assert_eq!(
            o.flags,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY
        );
        assert_eq!(o.propagation, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        assert_eq!(o.data, "mode=755,size=65536k");
        let o = parse_options(&["rbind", "ro", "rw"].map(String::from));
        assert!(o.bind && o.flags == MsFlags::MS_BIND | MsFlags::MS_REC);
        assert!(o.rec_set.is_empty() && o.rec_clear.is_empty());
    }

    #[test]
    fn recursive_options_are_flags_of_their_own_not_data() {
        let o = parse_options(&["rbind", "ro", "rro", "rnosuid", "rexec", "rprivate"].map(String::from));
        assert_eq!(o.flags, MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_RDONLY);
        assert_eq!(o.rec_set, MsFlags::MS_RDONLY | MsFlags::MS_NOSUID);
        assert_eq!(o.rec_clear, MsFlags::MS_NOEXEC);
        assert_eq!(o.propagation, MsFlags::MS_PRIVATE | MsFlags::MS_REC);
        assert_eq!(o.data, "");
        let o = parse_options(&["rro", "rrw"].map(String::from));
        assert_eq!((o.rec_set, o.rec_clear), (MsFlags::empty(), MsFlags::MS_RDONLY));
        assert_eq!(recursive_names().count(), 8);
        let o = parse_options(&["rbind", "ridmap"].map(String::from));
        assert!(o.idmap_recursive && o.data.is_empty());
        assert!(!parse_options(&["idmap".into()]).idmap_recursive);
    }
}
