//! `restore`: a container brought back from CRIU's images under a (new) id, with the (new) bundle's rootfs,
//! mounts, namespaces and cgroup, and a state record that `state`, `kill`, `exec` and `delete` read as any other.
//!
//! The restored init is CRIU's sibling (`--restore-sibling`), so crius-runc's own child: `restore` without
//! `--detach` waits for it as `run` does; with `--detach` it is re-parented to the nearest subreaper (a shim), as
//! after `create`. The mount points of the new spec's mounts are made first, as runc makes them. A container with a terminal gets a new pty, whose master goes to `--console-socket`
//! ([`super::terminal`]).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::unistd::Pid;

use crate::cgroup::Cgroup;
use crate::state::Record;
use crate::{Error, Result, err};

use super::criu::{self, Common};
use super::terminal;

/// Options of `restore` (runc's flags).
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// Images, work dir, flags shared with checkpoint.
    pub common: Common,
    /// The bundle whose config.json and rootfs the restored container gets.
    pub bundle: PathBuf,
    /// The socket the new pty master is sent to, when the container has a terminal.
    pub console_socket: Option<PathBuf>,
    /// Write the restored init's pid here.
    pub pid_file: Option<PathBuf>,
    /// The cgroup is a systemd scope (`--systemd-cgroup`): refused, not supported yet.
    pub systemd_cgroup: bool,
    /// An LSM profile for the restored processes (`TYPE:NAME`, CRIU's `--lsm-profile`).
    pub lsm_profile: Option<String>,
    /// An LSM mount context (CRIU's `--lsm-mount-context`).
    pub lsm_mount_context: Option<String>,
}

/// Removes what a failed restore made: the processes, the cgroup, the rootfs bind and the state directory.
struct Undo {
    dir: PathBuf,
    cgroup: Option<Cgroup>,
    criu_root: Option<PathBuf>,
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if let Some(r) = self.criu_root.take() {
            let _ = nix::mount::umount2(&r, MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(&r);
        }
        if !self.armed {
            return;
        }
        if let Some(cg) = &self.cgroup {
            let _ = cg.kill_all();
            let _ = cg.remove();
            crate::create::remove_default_parent(cg);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Restores container `id` under `root` from the images at `opts.common.image_path`, with the bundle at
/// `opts.bundle`. Returns its record once its processes run again.
pub fn restore(root: &Path, id: &str, opts: &RestoreOptions) -> Result<Record> {
    crate::id::validate(id)?;
    if opts.systemd_cgroup {
        return Err(err!(
            "restore into a systemd scope (--systemd-cgroup) is not supported by crius-runc"
        ));
    }
    let bundle = crate::config::load(&opts.bundle)?;
    let spec = &bundle.spec;
    let c = &opts.common;
    let wants_terminal = spec.process().as_ref().and_then(|p| p.terminal()) == Some(true);
    let dumped = match (wants_terminal, terminal::load(&c.image_path)?) {
        (true, Some(d)) => Some(d),
        (false, None) => None,
        (true, None) => {
            return Err(err!(
                "process.terminal is true but the images at {} hold no terminal record ({}): they were dumped \
                 without a terminal, or by another runtime (runc's terminal comes back over CRIU's RPC, \
                 orphan_pts_master, which crius-runc does not drive)",
                c.image_path.display(),
                terminal::TERMINAL
            ));
        }
        (false, Some(_)) => {
            return Err(err!(
                "the checkpoint at {} has a terminal but process.terminal is false in {}",
                c.image_path.display(),
                opts.bundle.display()
            ));
        }
    };
    let console_socket = match (&dumped, &opts.console_socket) {
        (Some(_), None) => {
            return Err(err!(
                "process.terminal is true: --console-socket is required to restore the container's terminal"
            ));
        }
        (_, s) => s.as_deref(),
    };
    let desc_path = c.image_path.join(criu::DESCRIPTORS);
    let text = std::fs::read(&desc_path).map_err(Error::io("reading", &desc_path))?;
    let descriptors: Vec<String> =
        serde_json::from_slice(&text).map_err(|e| err!("corrupt {}: {e}", desc_path.display()))?;
    let dir = Record::create_dir(root, id)?;
    let mut undo = Undo {
        dir: dir.clone(),
        cgroup: None,
        criu_root: None,
        armed: true,
    };
    let linux = spec.linux().as_ref().expect("checked by config::load");
    let cg = Cgroup::resolve(linux.cgroups_path().as_deref(), id)?;
    cg.check_existing()?;
    // A cgroup that already holds processes (warned about) is not emptied if the restore fails.
    let shared = cg.procs().is_ok_and(|p| !p.is_empty());
    cg.create()?;
    if !shared {
        undo.cgroup = Some(cg.clone());
    }
    let criu_root = dir.join("criu-root");
    std::fs::create_dir(&criu_root).map_err(Error::io("creating", &criu_root))?;
    nix::mount::mount(
        Some(&bundle.rootfs),
        &criu_root,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| err!("binding the rootfs {} for CRIU: {e}", bundle.rootfs.display()))?;
    undo.criu_root = Some(criu_root.clone());
    prepare_mountpoints(spec, &bundle.dir, &criu_root)?;
    let pid_path = dir.join("criu-restore.pid");
    let rel = cg
        .dir
        .strip_prefix(&cg.mount)
        .map_err(|_| err!("cgroup {} is outside {}", cg.dir.display(), cg.mount.display()))?;
    let mut args: Vec<String> = vec![
        "restore".into(),
        "--restore-detached".into(),
        "--restore-sibling".into(),
    ];
    args.extend(c.args("restore.log")?);
    args.extend(["--pidfile".into(), criu::path_arg(&pid_path)?]);
    args.extend(["--root".into(), criu::path_arg(&criu_root)?]);
    if c.cgroups_mode() != "ignore" {
        args.extend(["--cgroup-root".into(), format!("/{}", criu::path_arg(rel)?)]);
    }
    args.extend(criu::restore_mounts(
        spec,
        (&bundle.dir, &bundle.rootfs),
        &cg.dir,
    )?);
    let (ns_args, ns_fds): (Vec<String>, Vec<OwnedFd>) = criu::restore_namespaces(spec)?;
    args.extend(ns_args);
    let ext_path = c.image_path.join(criu::EXTERNAL_STDIO);
    let external: Vec<(u32, String)> = match std::fs::read(&ext_path) {
        Ok(t) => serde_json::from_slice(&t).map_err(|e| err!("corrupt {}: {e}", ext_path.display()))?,
        Err(_) => Vec::new(), // images of runc's
    };
    args.extend(criu::inherit_stdio(&descriptors, &external));
    let fresh = match (&dumped, console_socket) {
        (Some(d), Some(sock)) => {
            let mut f = terminal::Fresh::new(spec, sock)?;
            args.extend(f.args(d)?);
            Some(f)
        }
        _ => None,
    };
    if let Some(p) = &opts.lsm_profile {
        args.extend(["--lsm-profile".into(), p.clone()]);
    }
    if let Some(p) = &opts.lsm_mount_context {
        args.extend(["--lsm-mount-context".into(), p.clone()]);
    }
    crius_common::private::dir_all(c.work_dir()).map_err(Error::io("creating", c.work_dir()))?;
    crate::log::debug(|| {
        format!(
            "restore {id}: restoring into cgroup {} with CRIU",
            cg.dir.display()
        )
    });
    let args = super::config::apply(spec, args)?;
    c.run("restore", id, &args, Some(&cg))?;
    drop(ns_fds);
    if let Some(f) = fresh {
        f.send()?;
    }
    let text = std::fs::read_to_string(&pid_path).map_err(Error::io("reading CRIU's pid file", &pid_path))?;
    let pid: i32 = text
        .trim()
        .parse()
        .map_err(|_| err!("CRIU's pid file {} holds {text:?}", pid_path.display()))?;
    let _ = std::fs::remove_file(&pid_path);
    // From here on a failure must end the restored processes too (the cgroup's kill does).
    if let Some(res) = linux.resources() {
        cg.apply(res)?;
    }
    let record = Record::save_new(
        root,
        id,
        pid,
        &bundle,
        (cg.dir.clone(), None),
        opts.pid_file.as_deref(),
    )?;
    crate::log::debug(|| format!("restore {id}: init {} runs again", Pid::from_raw(pid)));
    undo.armed = false;
    Ok(record)
}

/// Makes the mount points of the new spec's mounts in the rootfs (bound at `criu_root`), as runc does before
/// CRIU restores the mounts: those under a tmpfs are skipped (CRIU restores the tmpfs with its content), and each
/// bind is mounted there for a moment so that mount points inside it (a bind nested in a bind, whose directory
/// lies in the first's source) can be made too. The binds are gone again when this returns.
fn prepare_mountpoints(spec: &oci_spec::runtime::Spec, bundle_dir: &Path, criu_root: &Path) -> Result<()> {
    let mounts = spec.mounts().as_deref().unwrap_or_default();
    let tmpfs: Vec<&Path> = mounts
        .iter()
        .filter(|m| m.typ().as_deref() == Some("tmpfs"))
        .map(|m| m.destination().as_path())
        .collect();
    let mut bound: Vec<PathBuf> = Vec::new();
    let mut make = || -> Result<()> {
        for m in mounts {
            let dest = m.destination();
            if tmpfs.iter().any(|t| dest != *t && dest.starts_with(t)) {
                continue;
            }
            let inside = criu::in_root(criu_root, dest);
            let target = criu_root.join(inside.strip_prefix("/").unwrap_or(&inside));
            let typ = m.typ().as_deref().unwrap_or_default();
            let source = (criu::is_external(m) && typ != "cgroup" && typ != "cgroup2")
                .then(|| m.source().as_deref().map(|s| bundle_dir.join(s)))
                .flatten();
            if std::fs::symlink_metadata(&target).is_err() {
                if source.as_deref().is_some_and(|s| !s.is_dir()) {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent).map_err(Error::io("creating", parent))?;
                    }
                    std::fs::File::create(&target).map_err(Error::io("creating", &target))?;
                } else {
                    std::fs::create_dir_all(&target).map_err(Error::io("creating", &target))?;
                }
            }
            if let Some(src) = source {
                nix::mount::mount(
                    Some(&src),
                    &target,
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(|e| {
                    err!(
                        "binding {} at {} to make the mount points in it: {e}",
                        src.display(),
                        dest.display()
                    )
                })?;
                bound.push(target);
            }
        }
        Ok(())
    };
    let made = make();
    for t in bound.iter().rev() {
        let _ = nix::mount::umount2(t, MntFlags::MNT_DETACH);
    }
    made
}
