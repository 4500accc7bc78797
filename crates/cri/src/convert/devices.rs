//! A container's devices from its ContainerConfig's `devices` (what kubelet's device plugins allocate: GPUs,
//! `/dev/fuse`, `/dev/kvm`, SR-IOV nodes): each becomes OCI `linux.devices` entries copying the host node
//! (type, major, minor, mode, uid, gid) at the CRI `container_path`, and `linux.resources.devices` allow rules
//! with the CRI `permissions`, after the deny-all rule. They are conversion, not an adjustment: the request
//! names them itself, so they are made here, not in `container::adjust`.
//!
//! The host's nodes are facts ([`probe`], read by [`super::Host::probe`] into [`super::Host::devices`]), so
//! the mapping ([`devices`]) is pure. As containerd and CRI-O do:
//! - a `host_path` is followed if it is a symlink; a device node there is one device;
//! - a directory there gives every char and block node under it, recursively (symlinks under it are not
//!   followed), each at `container_path` joined with its path under the directory, in path order;
//! - an empty `container_path` is the `host_path`; an empty `permissions` is `rwm`.
//!
//! A `host_path` that does not exist, or is neither a device node nor a directory, fails CreateContainer with
//! InvalidArgument naming it (field `devices[i].host_path`); so does a `permissions` with a letter other than
//! r, w and m, and a relative `container_path`.
//!
//! A privileged container also gets every device node of the host's /dev ([`host_devices`]), and one rule
//! allowing every device, as containerd and CRI-O give it ([`privileged`]); what it asks for wins at the same
//! path. Left out, as containerd leaves them: the nodes under /dev/pts, /dev/shm, /dev/fd, /dev/mqueue and
//! the .lxc, .lxd-mounts and .udev directories, and /dev/console (the runtime's own). So is /dev/ptmx: the
//! container's /dev/ptmx stays the link to its own devpts instance, which a terminal is checked to come from.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crius_api::cri;
use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceBuilder, LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType,
};

use super::{CALL, built};
use crate::error::{Error, Result};

/// A char or block device node of the host, as `stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDevice {
    /// Where it is on the host.
    pub path: PathBuf,
    /// A block device (else a char device).
    pub block: bool,
    /// Its device number's major part.
    pub major: u64,
    /// Its device number's minor part.
    pub minor: u64,
    /// Its permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

/// What the host has at one CRI Device's `host_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtHostPath {
    /// A device node (the path, or what its symlink leads to).
    Node(HostDevice),
    /// A directory, and the device nodes under it (recursively), in path order.
    Dir(Vec<HostDevice>),
    /// Neither: why (it does not exist, it is a regular file, it cannot be read).
    Not(String),
}

/// The device node at `path` from its metadata, or `None` if it is not a char or block device.
fn node(path: &Path, m: &std::fs::Metadata) -> Option<HostDevice> {
    let t = m.file_type();
    if !t.is_char_device() && !t.is_block_device() {
        return None;
    }
    let rdev = m.rdev();
    Some(HostDevice {
        path: path.to_path_buf(),
        block: t.is_block_device(),
        major: nix::sys::stat::major(rdev),
        minor: nix::sys::stat::minor(rdev),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
    })
}

/// The device node at `path` (a symlink followed), or why there is none: what CDI's device nodes that give
/// only a path take from the host (`crate::cdi`).
pub fn host_device(path: &Path) -> std::result::Result<HostDevice, String> {
    let m = std::fs::metadata(path).map_err(|e| e.to_string())?;
    node(path, &m).ok_or_else(|| "it is not a device node".into())
}

/// Appends the device nodes under `dir` (recursively, no symlink followed) to `out`, in path order.
/// Entries that vanish or cannot be read while walking are left out, as containerd does.
fn walk(dir: &Path, out: &mut Vec<HostDevice>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            walk(&p, out);
        } else if let Some(d) = node(&p, &m) {
            out.push(d);
        }
    }
}

/// What the host has at each of `config`'s devices' `host_path`, in order: the facts [`devices`] maps.
pub fn probe(config: &cri::ContainerConfig) -> Vec<AtHostPath> {
    config
        .devices
        .iter()
        .map(|d| {
            let path = Path::new(&d.host_path);
            match std::fs::metadata(path) {
                Err(e) => AtHostPath::Not(e.to_string()),
                Ok(m) if m.is_dir() => {
                    let mut found = Vec::new();
                    walk(path, &mut found);
                    AtHostPath::Dir(found)
                }
                Ok(m) => match node(path, &m) {
                    Some(n) => AtHostPath::Node(n),
                    None => AtHostPath::Not("it is not a device node or a directory".into()),
                },
            }
        })
        .collect()
}

/// Refuses a device whose `container_path` differs from its `host_path` in a pod with its own user namespace
/// (`hostUsers: false`): there a node cannot be made, and the runtime binds the host's node at the container
/// path (as runc does), which would be another node, or none.
pub fn same_paths_in_userns(config: &cri::ContainerConfig) -> Result<()> {
    for (i, d) in config.devices.iter().enumerate() {
        if !d.container_path.is_empty() && d.container_path != d.host_path {
            return Err(Error::invalid(
                CALL,
                format!("devices[{i}].container_path"),
                format!(
                    "{} differs from host_path {}: in a pod with its own user namespace (hostUsers: false) \
                     a device is bound from the host at its container path, so the two must be the same",
                    d.container_path, d.host_path
                ),
            ));
        }
    }
    Ok(())
}

/// Directories of the host's /dev, at any depth, that a privileged container gets no nodes from.
const NOT_FROM: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

/// Nodes of the host's /dev that a privileged container does not get: the runtime makes its own.
const NOT_GIVEN: &[&str] = &["console", "ptmx"];

/// Every device node under `dev` (the host's /dev) a privileged container gets, in path order; entries that
/// vanish while walking are left out.
pub fn host_devices(dev: &Path) -> Vec<HostDevice> {
    let mut out = Vec::new();
    let mut dirs = vec![dev.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                continue;
            };
            if m.is_dir() {
                if !NOT_FROM.contains(&name.as_ref()) {
                    dirs.push(e.path());
                }
            } else if dir != dev || !NOT_GIVEN.contains(&name.as_ref()) {
                out.extend(node(&e.path(), &m));
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A privileged container's devices: the host's nodes `host` (at their host paths) before `devs`, those
/// `devs` already has a node at left out, and a rule allowing every device after `rules`.
pub fn privileged(
    host: &[HostDevice],
    devs: &mut Vec<LinuxDevice>,
    rules: &mut Vec<LinuxDeviceCgroup>,
) -> Result<()> {
    let mut all = Vec::with_capacity(host.len() + devs.len());
    for d in host {
        if !devs.iter().any(|asked| asked.path() == &d.path) {
            all.push(entry(d, d.path.clone(), "rwm")?.0);
        }
    }
    all.append(devs);
    *devs = all;
    rules.push(built(
        LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(LinuxDeviceType::A)
            .access("rwm")
            .build(),
    )?);
    Ok(())
}

/// The CRI `permissions` as a cgroup rule's access: letters of r, w and m; empty means `rwm`.
fn access(i: usize, permissions: &str) -> Result<String> {
    if let Some(bad) = permissions.chars().find(|c| !matches!(c, 'r' | 'w' | 'm')) {
        return Err(Error::invalid(
            CALL,
            format!("devices[{i}].permissions"),
            format!("{permissions:?} has {bad:?}: only r, w and m are allowed"),
        ));
    }
    Ok(if permissions.is_empty() {
        "rwm".into()
    } else {
        permissions.into()
    })
}

/// The OCI entry and the cgroup rule of host node `d`, at `path` in the container.
fn entry(d: &HostDevice, path: PathBuf, access: &str) -> Result<(LinuxDevice, LinuxDeviceCgroup)> {
    let typ = if d.block {
        LinuxDeviceType::B
    } else {
        LinuxDeviceType::C
    };
    let dev = built(
        LinuxDeviceBuilder::default()
            .path(path)
            .typ(typ)
            .major(d.major as i64)
            .minor(d.minor as i64)
            .file_mode(d.mode)
            .uid(d.uid)
            .gid(d.gid)
            .build(),
    )?;
    let rule = built(
        LinuxDeviceCgroupBuilder::default()
            .allow(true)
            .typ(typ)
            .major(d.major as i64)
            .minor(d.minor as i64)
            .access(access)
            .build(),
    )?;
    Ok((dev, rule))
}

/// `config`'s devices as OCI `linux.devices` entries and their cgroup allow rules, from the host's facts
/// `found` ([`probe`]'s answer for the same config; a device it has no answer for is refused as unread).
pub fn devices(
    config: &cri::ContainerConfig,
    found: &[AtHostPath],
) -> Result<(Vec<LinuxDevice>, Vec<LinuxDeviceCgroup>)> {
    let (mut devs, mut rules) = (Vec::new(), Vec::new());
    for (i, d) in config.devices.iter().enumerate() {
        let access = access(i, &d.permissions)?;
        let at = if d.container_path.is_empty() {
            &d.host_path
        } else {
            &d.container_path
        };
        let at = Path::new(at);
        if !at.is_absolute() {
            return Err(Error::invalid(
                CALL,
                format!("devices[{i}].container_path"),
                format!("{} is not an absolute path", at.display()),
            ));
        }
        let refuse = |why: &str| {
            Error::invalid(
                CALL,
                format!("devices[{i}].host_path"),
                format!("{}: {why}", d.host_path),
            )
        };
        match found.get(i) {
            Some(AtHostPath::Node(n)) => {
                let (dev, rule) = entry(n, at.to_path_buf(), &access)?;
                devs.push(dev);
                rules.push(rule);
            }
            Some(AtHostPath::Dir(nodes)) => {
                for n in nodes {
                    let under = n.path.strip_prefix(&d.host_path).unwrap_or(&n.path);
                    let (dev, rule) = entry(n, at.join(under), &access)?;
                    devs.push(dev);
                    rules.push(rule);
                }
            }
            Some(AtHostPath::Not(why)) => return Err(refuse(why)),
            None => return Err(refuse("not read from the host")),
        }
    }
    Ok((devs, rules))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(host: &str, ctr: &str, perms: &str) -> cri::Device {
        cri::Device {
            host_path: host.into(),
            container_path: ctr.into(),
            permissions: perms.into(),
        }
    }

    fn null_at(path: &str) -> HostDevice {
        HostDevice {
            path: path.into(),
            block: false,
            major: 1,
            minor: 3,
            mode: 0o666,
            uid: 0,
            gid: 0,
        }
    }

    fn config(devices: Vec<cri::Device>) -> cri::ContainerConfig {
        cri::ContainerConfig {
            devices,
            ..Default::default()
        }
    }

    #[test]
    fn a_node_is_copied_to_its_container_path_with_a_rule_of_its_permissions() {
        let c = config(vec![device("/dev/nvidia0", "/dev/gpu0", "rw")]);
        let found = [AtHostPath::Node(HostDevice {
            path: "/dev/nvidia0".into(),
            block: false,
            major: 195,
            minor: 0,
            mode: 0o660,
            uid: 0,
            gid: 44,
        })];
        let (devs, rules) = devices(&c, &found).unwrap();
        assert_eq!(
            serde_json::to_value(&devs).unwrap(),
            json!([{"path": "/dev/gpu0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o660,
                    "uid": 0, "gid": 44}])
        );
        assert_eq!(
            serde_json::to_value(&rules).unwrap(),
            json!([{"allow": true, "type": "c", "major": 195, "minor": 0, "access": "rw"}])
        );
    }

    #[test]
    fn a_block_node_keeps_its_type_and_empty_paths_and_permissions_take_the_defaults() {
        let c = config(vec![device("/dev/loop7", "", "")]);
        let found = [AtHostPath::Node(HostDevice {
            path: "/dev/loop7".into(),
            block: true,
            major: 7,
            minor: 7,
            mode: 0o600,
            uid: 0,
            gid: 6,
        })];
        let (devs, rules) = devices(&c, &found).unwrap();
        assert_eq!(devs[0].path(), Path::new("/dev/loop7"));
        assert_eq!(devs[0].typ(), LinuxDeviceType::B);
        assert_eq!(rules[0].access().as_deref(), Some("rwm"));
        assert_eq!(rules[0].typ(), Some(LinuxDeviceType::B));
    }

    #[test]
    fn a_directory_maps_every_node_under_the_container_path() {
        let c = config(vec![device("/dev/dri", "/dev/gfx", "r")]);
        let found = [AtHostPath::Dir(vec![
            null_at("/dev/dri/card0"),
            null_at("/dev/dri/by-x/renderD128"),
        ])];
        let (devs, rules) = devices(&c, &found).unwrap();
        let paths: Vec<_> = devs.iter().map(|d| d.path().clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/dev/gfx/card0"),
                PathBuf::from("/dev/gfx/by-x/renderD128")
            ]
        );
        assert!(
            rules
                .iter()
                .all(|r| r.access().as_deref() == Some("r") && r.allow())
        );
        // An empty directory gives nothing, and is no error.
        assert_eq!(devices(&c, &[AtHostPath::Dir(vec![])]).unwrap().0, vec![]);
    }

    #[test]
    fn what_is_not_a_device_is_refused_naming_the_path_and_the_field() {
        let c = config(vec![
            device("/dev/null", "/dev/null", "rwm"),
            device("/nope", "/dev/x", "rw"),
        ]);
        let found = [
            AtHostPath::Node(null_at("/dev/null")),
            AtHostPath::Not("No such file or directory (os error 2)".into()),
        ];
        let e = devices(&c, &found).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("devices[1].host_path") && msg.contains("/nope"),
            "{msg}"
        );
        // Unread facts are refused too, never dropped.
        let e = devices(&c, &found[..1]).unwrap_err().to_string();
        assert!(e.contains("devices[1].host_path"), "{e}");
    }

    #[test]
    fn permissions_other_than_r_w_m_and_relative_container_paths_are_refused() {
        let found = [AtHostPath::Node(null_at("/dev/null"))];
        for (perms, ctr, field) in [
            ("rwx", "/dev/n", "devices[0].permissions"),
            ("R", "/dev/n", "devices[0].permissions"),
            ("r w", "/dev/n", "devices[0].permissions"),
            ("rw", "dev/n", "devices[0].container_path"),
        ] {
            let e = devices(&config(vec![device("/dev/null", ctr, perms)]), &found).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
            assert!(e.to_string().contains(field), "{perms} {ctr}: {e}");
        }
    }

    #[test]
    fn the_spec_has_the_nodes_and_their_rules_after_deny_all() {
        let c = config(vec![
            device("/dev/mine", "/dev/ro", "r"),
            device("/dev/set", "/dev/set", "rw"),
        ]);
        let host = super::super::Host {
            devices: vec![
                AtHostPath::Node(null_at("/dev/mine")),
                AtHostPath::Dir(vec![null_at("/dev/set/a"), null_at("/dev/set/b")]),
            ],
            ..Default::default()
        };
        let spec = super::super::tests::spec_of(&c, &super::super::tests::a_pod(), &host).unwrap();
        let linux = serde_json::to_value(spec.linux()).unwrap();
        let paths: Vec<_> = linux["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].clone())
            .collect();
        assert_eq!(
            paths,
            [json!("/dev/ro"), json!("/dev/set/a"), json!("/dev/set/b")]
        );
        assert_eq!(
            linux["resources"]["devices"],
            json!([
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "r"},
                {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rw"},
                {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rw"},
            ])
        );
        // Without devices, no `linux.devices` at all, as before.
        let plain = super::super::tests::spec_of(
            &config(vec![]),
            &super::super::tests::a_pod(),
            &Default::default(),
        );
        assert!(plain.unwrap().linux().as_ref().unwrap().devices().is_none());
    }

    #[test]
    fn a_privileged_container_gets_the_hosts_nodes_but_its_own_win_and_every_device_is_allowed() {
        let mut c = config(vec![device("/dev/mine", "/dev/null", "r")]);
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                privileged: true,
                ..Default::default()
            }),
            ..Default::default()
        });
        let host = super::super::Host {
            devices: vec![AtHostPath::Node(null_at("/dev/mine"))],
            host_devices: vec![null_at("/dev/kmsg"), null_at("/dev/null"), null_at("/dev/vda")],
            ..Default::default()
        };
        let spec = super::super::tests::spec_of(&c, &super::super::tests::a_pod(), &host).unwrap();
        let linux = serde_json::to_value(spec.linux()).unwrap();
        let paths: Vec<_> = linux["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(paths, ["/dev/kmsg", "/dev/vda", "/dev/null"]);
        assert_eq!(
            linux["resources"]["devices"].as_array().unwrap().last().unwrap(),
            &json!({"allow": true, "type": "a", "access": "rwm"})
        );
    }

    #[test]
    fn the_hosts_dev_is_walked_without_pts_shm_console_or_ptmx() {
        let found = host_devices(Path::new("/dev"));
        let has = |p: &str| found.iter().any(|d| d.path == Path::new(p));
        assert!(has("/dev/null") && has("/dev/zero"), "{found:?}");
        assert!(!has("/dev/console") && !has("/dev/ptmx"), "{found:?}");
        assert!(!found.iter().any(|d| d.path.starts_with("/dev/pts")), "{found:?}");
        assert!(found.windows(2).all(|w| w[0].path < w[1].path));
    }

    #[test]
    fn in_a_user_namespace_a_device_must_keep_its_host_path() {
        let same = config(vec![
            device("/dev/fuse", "", "rw"),
            device("/dev/kvm", "/dev/kvm", "rw"),
        ]);
        assert!(same_paths_in_userns(&same).is_ok());
        let moved = config(vec![
            device("/dev/fuse", "", "rw"),
            device("/dev/nvidia0", "/dev/gpu0", "rw"),
        ]);
        let e = same_paths_in_userns(&moved).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(
            e.to_string().contains("devices[1].container_path") && e.to_string().contains("/dev/nvidia0"),
            "{e}"
        );
    }

    #[test]
    fn the_probe_reads_nodes_directories_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir_all(sub.join("deeper")).unwrap();
        std::fs::write(sub.join("plain"), "x").unwrap();
        // Device nodes need root to make; a symlink to the host's /dev/null stands in where they cannot be.
        std::os::unix::fs::symlink("/dev/null", dir.path().join("null")).unwrap();
        std::os::unix::fs::symlink("/dev/null", sub.join("deeper/link")).unwrap();
        let c = config(vec![
            device("/dev/null", "/dev/null", "rw"),
            device(dir.path().join("null").to_str().unwrap(), "/dev/n", "rw"),
            device(sub.to_str().unwrap(), "/dev/sub", "rw"),
            device(sub.join("plain").to_str().unwrap(), "/dev/p", "rw"),
            device(dir.path().join("absent").to_str().unwrap(), "/dev/a", "rw"),
        ]);
        let found = probe(&c);
        let AtHostPath::Node(n) = &found[0] else {
            panic!("{:?}", found[0])
        };
        assert_eq!((n.block, n.major, n.minor), (false, 1, 3));
        // A symlink given as the host path is followed: the node it leads to, under the given path.
        assert!(
            matches!(&found[1], AtHostPath::Node(n) if n.major == 1 && n.minor == 3),
            "{:?}",
            found[1]
        );
        // Under a directory, symlinks and regular files are not devices.
        assert_eq!(found[2], AtHostPath::Dir(vec![]));
        assert!(
            matches!(&found[3], AtHostPath::Not(why) if why.contains("not a device")),
            "{:?}",
            found[3]
        );
        assert!(matches!(&found[4], AtHostPath::Not(_)), "{:?}", found[4]);
    }
}
