//! `checkpoint` and `restore`: a running container saved to CRIU's images, and brought back from them, under
//! the same or another id and state root (another node), with runc's command line and runc's mapping of mounts,
//! namespaces, cgroup and stdio.
//!
//! ```text
//! checkpoint ID: descriptors.json, external-stdio.json, terminal.json (init's stdio) ─► criu dump --tree INIT
//!                  --root ROOTFS --freeze-cgroup CG --external mnt[..] net[..] file[..] tty[..]
//!                  ─► (without --leave-running) the container is deleted
//! restore ID:    cgroup made ─► ROOTFS bound at <root>/ID/criu-root ─► criu (in CG) restore -d -S --root it
//!                  --external mnt[..]:SOURCE --inherit-fd (stdio pipes and files, joined netns, a new pty's
//!                  slave) ─► pty master to the console socket, limits set, state.json, pid file
//!                  ─► (without --detach) wait, delete, exit with its code
//! ```
//! The cgroup mode is `ignore` unless `--manage-cgroups-mode` says otherwise (runc 1.1.5 takes only soft, full
//! or strict and gives CRIU no cgroup root on v2, so its restored tasks go back to the cgroup they were dumped
//! from): CRIU runs in the new spec's cgroup, so the tasks it restores start there (another mode adds
//! `--cgroup-root CG`).
//! CRIU is driven through its command line rather than its RPC (`criu swrk` with rpc.proto): each call is one
//! command that can be copied from the debug log and rerun by hand, no protobuf schema has to be transcribed and
//! kept, and the features used here (external mounts and namespaces, inherited descriptors, cgroup root,
//! detached sibling restore, pid file) all have options. A terminal too: where runc has CRIU make the new pty
//! (`orphan_pts_master`, RPC only), crius-runc makes it and hands CRIU the slave as an external tty
//! ([`terminal`]). What the RPC alone offers is not supported: notify callbacks (restore runs no hooks) and lazy
//! pages.
//!
//! The container's CRIU configuration file (annotation `org.criu.config`, else `/etc/criu/runc.conf`) applies
//! as with runc ([`config`]).
//!
//! A failed checkpoint leaves the container running: CRIU thaws what it froze, and the cgroup is thawed again
//! here if it still reads frozen. Errors are [`Error::Criu`] with the end of CRIU's log.

pub mod config;
pub mod criu;
mod restore;
pub mod terminal;

use std::path::{Path, PathBuf};

use crate::cgroup::Cgroup;
use crate::state::{Record, Status};
use crate::{Error, Result, err};

pub use criu::Common;
pub use restore::{RestoreOptions, restore};

/// Options of `checkpoint` (runc's flags).
#[derive(Debug, Clone, Default)]
pub struct CheckpointOptions {
    /// Images, work dir, flags shared with restore.
    pub common: Common,
    /// Leave the container running after the dump.
    pub leave_running: bool,
    /// Dump memory only (`criu pre-dump`), leaving the container running, as the parent of a later dump.
    pub pre_dump: bool,
    /// Images of a previous (pre-)dump, relative to the image path (CRIU's `--prev-images-dir`).
    pub parent_path: Option<PathBuf>,
}

/// `checkpoint`: dumps container `id` under `root` into the image path. Without `leave_running` or `pre_dump` the
/// container is gone afterwards (its processes ended by CRIU, its cgroup and state removed), as with runc.
pub fn checkpoint(root: &Path, id: &str, opts: &CheckpointOptions) -> Result<()> {
    let rec = Record::load(root, id)?;
    let status = rec.status(root);
    if !matches!(status, Status::Running | Status::Paused) {
        return Err(Error::WrongState {
            id: id.to_string(),
            status,
            action: "checkpoint it (only a running or paused container can be)".into(),
        });
    }
    if rec.systemd_unit.is_some() {
        return Err(err!(
            "container {id:?}: checkpoint of a container in a systemd scope (--systemd-cgroup) is not supported"
        ));
    }
    let has_terminal = rec.spec.process().as_ref().and_then(|p| p.terminal()) == Some(true);
    let c = &opts.common;
    let log = if opts.pre_dump { "pre-dump.log" } else { "dump.log" };
    let mut args = vec![if opts.pre_dump { "pre-dump" } else { "dump" }.to_string()];
    args.extend(["--tree".into(), rec.pid.to_string()]);
    args.extend(c.args(log)?);
    args.extend(["--root".into(), criu::path_arg(&rec.rootfs)?]);
    args.extend(["--freeze-cgroup".into(), criu::path_arg(&rec.cgroup)?]);
    if opts.leave_running && !opts.pre_dump {
        args.push("--leave-running".into());
    }
    if let Some(parent) = &opts.parent_path {
        args.extend(["--prev-images-dir".into(), criu::path_arg(parent)?]);
    }
    if opts.pre_dump || opts.parent_path.is_some() {
        args.push("--track-mem".into());
    }
    args.extend(criu::dump_mounts(&rec.spec, &rec.rootfs)?);
    args.extend(criu::dump_namespaces(&rec.spec)?);
    for dir in [&c.image_path, &c.work_dir().to_path_buf()] {
        crius_common::private::dir_all(dir).map_err(Error::io("creating", dir))?;
    }
    if !opts.pre_dump {
        let external = criu::external_stdio(rec.pid);
        for (_, key) in &external {
            args.extend(["--external".into(), key.clone()]);
        }
        write_json(&c.image_path.join(criu::EXTERNAL_STDIO), &external)?;
        write_json(&c.image_path.join(criu::DESCRIPTORS), &criu::descriptors(rec.pid))?;
        let record = c.image_path.join(terminal::TERMINAL);
        let pids = Cgroup::at(&rec.cgroup)
            .and_then(|cg| cg.procs())
            .unwrap_or_default();
        match has_terminal.then(|| terminal::dump(rec.pid, &pids)).flatten() {
            Some(t) => {
                args.extend(terminal::dump_args(&t));
                write_json(&record, &t)?;
            }
            None => {
                let _ = std::fs::remove_file(&record);
            }
        }
    }
    crate::log::debug(|| format!("checkpoint {id}: dumping init {} with CRIU", rec.pid));
    let args = config::apply(&rec.spec, args)?;
    let result = c.run(if opts.pre_dump { "pre-dump" } else { "dump" }, id, &args, None);
    // Whatever CRIU did, a container that ran before runs after (unless it is gone: a dump that succeeded).
    if status == Status::Running && crate::state::process_alive(rec.pid, rec.pid_start) {
        let cg = Cgroup::at(&rec.cgroup)?;
        if cg.read("cgroup.freeze").is_ok_and(|s| s.trim() == "1") {
            cg.freeze(false)?;
        }
    }
    result?;
    if !opts.leave_running && !opts.pre_dump {
        crate::log::debug(|| format!("checkpoint {id}: dumped; removing the container"));
        crate::ops::delete(root, id, true)?;
    }
    Ok(())
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> Result<()> {
    let bytes = serde_json::to_vec(v).map_err(|e| err!("encoding {}: {e}", path.display()))?;
    std::fs::write(path, bytes).map_err(Error::io("writing", path))
}
