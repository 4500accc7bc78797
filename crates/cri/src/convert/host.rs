//! What a container's spec needs from the node and the image's files, read before the conversion
//! ([`Host::probe`]), and what the node needs done for it afterwards ([`create_mount_sources`]). The
//! conversion itself reads nothing, so it is tested with a [`Host`] made by hand.

use std::path::Path;

use crius_api::cri;

use super::{CALL, Input, caps};
use crate::error::{Error, Result};

/// The facts a container's spec is made from besides the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Host {
    /// The capabilities criusd itself may hand on (its bounding set): what "all" means for a privileged
    /// container, as containerd's "all current capabilities" does. Names of [`super::ALL_CAPS`].
    pub bounding: Vec<String>,
    /// Whether the cgroup2 tree has the cpu controller ([`cpu_controller`]).
    pub cpu_controller: bool,
    /// The text of the pod's hostname file (`<sandbox files>/hostname`; empty if unreadable).
    pub hostname: String,
    /// The image's `/etc/passwd` (empty if it has none).
    pub passwd: String,
    /// The image's `/etc/group` (empty if it has none).
    pub group: String,
    /// The Localhost seccomp profile the container asks for: the file's text, or why it could not be read.
    pub seccomp_file: Option<std::result::Result<String, String>>,
    /// The node's loaded AppArmor profiles; `None` where it has no AppArmor (`convert::apparmor::probe`).
    pub apparmor: Option<Vec<String>>,
    /// The running kernel's version, major and minor (`uname -r`), for seccomp rules with a `minKernel`;
    /// (0, 0) when unknown, which no such rule admits.
    pub kernel: (u32, u32),
    /// The node's cgroup driver, which names the container's cgroup (criusd's config, not read here).
    pub cgroup_driver: crate::cgroup_driver::Driver,
    /// What the host has at each of the ContainerConfig's `devices`' host paths, in order
    /// (`convert::devices::probe`).
    pub devices: Vec<super::AtHostPath>,
    /// Every device node of the host's /dev a privileged container gets (`convert::devices::host_devices`);
    /// empty for any other container.
    pub host_devices: Vec<super::HostDevice>,
}

impl Host {
    /// Reads the facts for `input`: criusd's bounding set, the cgroup2 cpu controller, the pod's hostname
    /// file (when the pod has a UTS namespace of its own, the only time the spec names a hostname), the
    /// rootfs's passwd and group files and the host's nodes at the devices' host paths. The passwd and group
    /// files are the image's: read inside the rootfs, capped, and only if regular files
    /// (`convert::image_files`); one that is not (a FIFO, a symlink to /dev/zero, a huge file) is
    /// InvalidArgument naming it, at once. The node's `cgroup_driver` is criusd's setting, passed on.
    pub fn probe(input: &Input<'_>, cgroup_driver: crate::cgroup_driver::Driver) -> Result<Host> {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let image_file = |rel: &str| {
            super::image_files::read_in_root(input.rootfs, rel, super::image_files::MAX_IMAGE_FILE)
                .map_err(|why| Error::invalid(CALL, format!("the image's /{rel}"), why.to_string()))
        };
        Ok(Host {
            bounding: bounding_set(),
            kernel: kernel_version(),
            cpu_controller: cpu_controller(),
            hostname: match input.sandbox.record.namespaces.uts {
                Some(_) => read(&input.sandbox_files.join("hostname")),
                None => String::new(),
            },
            passwd: image_file("etc/passwd")?,
            group: image_file("etc/group")?,
            seccomp_file: match super::seccomp::wanted(
                input
                    .config
                    .linux
                    .as_ref()
                    .and_then(|l| l.security_context.as_ref()),
            ) {
                Ok(super::seccomp::Wanted::Localhost(p)) => {
                    // Capped: a profile is kilobytes; a FIFO or /dev/zero must not hold criusd.
                    Some(super::image_files::read_capped(&p, 1 << 20).map_err(|e| e.to_string()))
                }
                _ => None,
            },
            apparmor: super::apparmor::probe(input.config),
            cgroup_driver,
            devices: super::devices::probe(input.config),
            host_devices: match input
                .config
                .linux
                .as_ref()
                .and_then(|l| l.security_context.as_ref())
            {
                Some(sc) if sc.privileged => super::devices::host_devices(Path::new("/dev")),
                _ => Vec::new(),
            },
        })
    }
}

/// criusd's capability bounding set (`CapBnd` of /proc/self/status); every capability if it cannot be read.
pub fn bounding_set() -> Vec<String> {
    let mask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| {
                    l.strip_prefix("CapBnd:")
                        .map(|h| u64::from_str_radix(h.trim(), 16).ok())
                })
                .flatten()
        })
        .unwrap_or(u64::MAX);
    caps::names_of(mask)
}

/// Whether the cgroup2 tree has the cpu controller. A hybrid host's may not (here: hugetlb alone); cpu shares
/// are then left out, with a warning once, since a relative weight is not a limit and kubelet asks for one in
/// every container (2 for BestEffort ones). A cpu quota still fails there, naming the missing controller.
pub fn cpu_controller() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let mount = crius_common::mountinfo::cgroup2().unwrap_or_else(|| "/sys/fs/cgroup".into());
        let list = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        let has = list.split_whitespace().any(|c| c == "cpu");
        if !has {
            tracing::warn!(
                "the cgroup2 tree at {} has no cpu controller (it has [{}]): cpu shares are not applied",
                mount.display(),
                list.trim()
            );
        }
        has
    })
}

/// Makes the missing host paths of `config`'s mounts, as containerd does: a missing host path becomes a
/// directory. For after [`super::spec`], which refuses a mount without a host path.
pub fn create_mount_sources(config: &cri::ContainerConfig) -> Result<()> {
    for m in config.mounts.iter().filter(|m| !m.host_path.is_empty()) {
        let host = Path::new(&m.host_path);
        if !host.exists() {
            std::fs::create_dir_all(host)
                .map_err(|e| Error::io(format!("{CALL}: creating mount source {}", host.display()), e))?;
        }
    }
    Ok(())
}

/// The running kernel's major and minor version, (0, 0) if `uname` says something unexpected.
pub fn kernel_version() -> (u32, u32) {
    nix::sys::utsname::uname()
        .ok()
        .and_then(|u| super::seccomp::major_minor(&u.release().to_string_lossy()))
        .unwrap_or((0, 0))
}
