//! A container's mounts, in the order the runtime makes them: the usual /proc, /dev and /sys, the pod's
//! /dev/shm, the pod's hostname, hosts and resolv.conf files (unless kubelet mounts its own), then
//! kubelet's mounts with their propagation (and `rro` where a mount is recursive read-only; idmapped, with
//! their `uidMappings`/`gidMappings`, in a pod with a user namespace). kubelet's mounts must have absolute
//! paths and stay out of /proc. Image volumes are left out here: CreateContainer's adjust step
//! (`container::adjust`) puts their mounts ([`image_volume_mount`]) in their places among kubelet's.

use std::path::Path;

use crius_api::cri;
use crius_common::inroot::{self, ProcPlace};
use oci_spec::runtime::{Mount, MountBuilder};

use super::{CALL, Input, built};
use crate::error::{Error, Result};

fn mount(destination: &str, typ: &str, source: impl AsRef<Path>, options: &[&str]) -> Result<Mount> {
    built(
        MountBuilder::default()
            .destination(destination)
            .typ(typ)
            .source(source.as_ref())
            .options(options.iter().map(|o| o.to_string()).collect::<Vec<_>>())
            .build(),
    )
}

/// Refuses kubelet's mount `i` unless both paths are absolute and the container's is outside /proc (but
/// for the files lxcfs emulates, which the runtime allows). kubelet never sends such mounts; a client that
/// does is told which field is wrong.
fn check(i: usize, m: &cri::Mount) -> Result<()> {
    if m.host_path.is_empty() || m.container_path.is_empty() {
        return Err(Error::invalid(
            CALL,
            "a mount",
            format!(
                "needs a host_path and a container_path (got {:?} -> {:?})",
                m.host_path, m.container_path
            ),
        ));
    }
    for (field, p) in [("host_path", &m.host_path), ("container_path", &m.container_path)] {
        if !Path::new(p).is_absolute() {
            return Err(Error::invalid(
                CALL,
                format!("mounts[{i}].{field}"),
                format!("{p:?} is not an absolute path"),
            ));
        }
    }
    match inroot::proc_place(Path::new(&m.container_path)) {
        ProcPlace::Outside | ProcPlace::Allowed => Ok(()),
        ProcPlace::Proc | ProcPlace::Inside => Err(Error::invalid(
            CALL,
            format!("mounts[{i}].container_path"),
            format!(
                "{:?} is /proc or inside it: only {} may be mounted there",
                m.container_path,
                inroot::PROC_FILES.join(", ")
            ),
        )),
    }
}

fn propagation(p: i32) -> &'static str {
    match cri::MountPropagation::try_from(p) {
        Ok(cri::MountPropagation::PropagationHostToContainer) => "rslave",
        Ok(cri::MountPropagation::PropagationBidirectional) => "rshared",
        _ => "rprivate",
    }
}

/// The propagation of the container's root mount, as containerd sets it: `rshared` when a mount is
/// Bidirectional (its mounts reach the host through the root's peer group), `rslave` when one is
/// HostToContainer; else the runtime's default (rslave too, for runc and crius-runc).
pub(super) fn rootfs_propagation(mounts: &[cri::Mount]) -> Option<String> {
    let has = |p: cri::MountPropagation| mounts.iter().any(|m| m.propagation == p as i32);
    if has(cri::MountPropagation::PropagationBidirectional) {
        Some("rshared".into())
    } else if has(cri::MountPropagation::PropagationHostToContainer) {
        Some("rslave".into())
    } else {
        None
    }
}

/// The container's mounts. `privileged` gets /sys and its cgroups read-write; `pod_ipc` (the container
/// shares the pod's IPC namespace) binds the pod's /dev/shm, if it has one, instead of a private tmpfs.
pub(super) fn mounts(inp: &Input<'_>, privileged: bool, pod_ipc: bool, readonly: bool) -> Result<Vec<Mount>> {
    let c = inp.config;
    let sys = if privileged { "rw" } else { "ro" };
    let mut out = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"])?,
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        )?,
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        )?,
        mount("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"])?,
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", sys])?,
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", sys],
        )?,
    ];
    out.push(match &inp.sandbox.record.namespaces.shm {
        Some(shm) if pod_ipc => mount("/dev/shm", "bind", shm, &["rbind", "rprivate", "rw"])?,
        _ => mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        )?,
    });
    let kubelet_has = |dest: &str| c.mounts.iter().any(|m| m.container_path == dest);
    let mode = if readonly { "ro" } else { "rw" };
    for (dest, file) in [
        ("/etc/hostname", "hostname"),
        ("/etc/hosts", "hosts"),
        ("/etc/resolv.conf", "resolv.conf"),
    ] {
        if !kubelet_has(dest) {
            out.push(mount(
                dest,
                "bind",
                inp.sandbox_files.join(file),
                &["rbind", "rprivate", mode],
            )?);
        }
    }
    for (i, m) in c.mounts.iter().enumerate() {
        if is_image_volume(m) {
            // Its place is kept: the adjust step puts its mount here ([`image_volume_mount`]).
            continue;
        }
        check(i, m)?;
        let mode = if m.readonly { "ro" } else { "rw" };
        let mut opts = vec!["rbind", propagation(m.propagation), mode];
        // Read-only all the way down, submounts too (`validate::unsupported` made sure it is read-only and private).
        opts.extend(m.recursive_read_only.then_some("rro"));
        out.push(idmapped(
            inp,
            i,
            m,
            mount(&m.container_path, "bind", &m.host_path, &opts)?,
        )?);
    }
    Ok(out)
}

/// Whether kubelet's mount `m` is an image volume (KEP-4639: its `image` names one). `mounts` leaves it
/// out: its source is a snapshot made for the container, which CreateContainer's adjust step mounts.
pub fn is_image_volume(m: &cri::Mount) -> bool {
    m.image.as_ref().is_some_and(|s| !s.image.is_empty())
}

/// The mount of image volume `m`, kubelet's mount `i`, whose snapshot (or the sub path in it) is `source`:
/// read-only, `nosuid`, `nodev` and `noexec` whatever the mount asks, as Kubernetes documents image volumes.
pub fn image_volume_mount(i: usize, m: &cri::Mount, source: &Path) -> Result<Mount> {
    let image_mount = cri::Mount {
        host_path: source.display().to_string(),
        ..m.clone()
    };
    check(i, &image_mount)?;
    // In a pod with a user namespace its snapshot's layers are idmapped already (as the rootfs's are:
    // `sandbox::userns::idmap_rootfs`), whatever mappings kubelet sends for it.
    let mut opts = vec!["rbind", "rprivate", "ro", "nosuid", "nodev", "noexec"];
    opts.extend(m.recursive_read_only.then_some("rro"));
    mount(&m.container_path, "bind", source, &opts)
}

/// kubelet's mount `i` (`m`, made as `made`) idmapped with its uid and gid mappings, if it has them: only in a
/// pod with a user namespace of its own, whose ids they map (kubelet sends the pod's).
fn idmapped(inp: &Input<'_>, i: usize, m: &cri::Mount, mut made: Mount) -> Result<Mount> {
    if m.uid_mappings.is_empty() && m.gid_mappings.is_empty() {
        return Ok(made);
    }
    if inp.sandbox.record.namespaces.user.is_none() {
        return Err(Error::invalid(
            CALL,
            format!("mounts[{i}].uidMappings"),
            "is set in a pod without a user namespace of its own: an idmapped mount maps a pod's user namespace ids",
        ));
    }
    made.set_uid_mappings(Some(crate::sandbox::userns::oci_maps(&m.uid_mappings)));
    made.set_gid_mappings(Some(crate::sandbox::userns::oci_maps(&m.gid_mappings)));
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(host: &str, container: &str) -> cri::Mount {
        cri::Mount {
            host_path: host.into(),
            container_path: container.into(),
            ..Default::default()
        }
    }

    #[test]
    fn relative_paths_and_proc_destinations_are_refused_by_field() {
        assert!(check(0, &m("/var/lib/data", "/data")).is_ok());
        assert!(check(0, &m("/var/lib/lxcfs/proc/cpuinfo", "/proc/cpuinfo")).is_ok());
        assert!(check(0, &m("/var/lib/lxcfs/proc/net/dev", "/proc/net/../net/dev")).is_ok());
        for (i, mount, field, says) in [
            (
                0,
                m("data", "/data"),
                "mounts[0].host_path",
                "\"data\" is not an absolute path",
            ),
            (
                1,
                m("/d", "data/x"),
                "mounts[1].container_path",
                "not an absolute path",
            ),
            (
                2,
                m("/d", "/proc"),
                "mounts[2].container_path",
                "\"/proc\" is /proc or inside it",
            ),
            (
                3,
                m("/d", "/proc/sys/kernel"),
                "mounts[3].container_path",
                "inside it",
            ),
            (
                4,
                m("/d", "/x/../proc/1/root"),
                "mounts[4].container_path",
                "inside it",
            ),
            (5, m("/d", "/proc/"), "mounts[5].container_path", "inside it"),
        ] {
            let e = check(i, &mount).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            let text = e.to_string();
            assert!(text.contains(field) && text.contains(says), "{text}");
        }
    }
}
