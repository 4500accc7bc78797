//! `checkpoint` and `restore`: runc's flags turned into crius-oci's options (paths made absolute, runc's
//! defaults: images in `./checkpoint`, the bundle `.`), and restore's foreground wait.

use std::path::{Path, PathBuf};

use crius_oci::checkpoint::{CheckpointOptions, Common, RestoreOptions};
use crius_oci::{Result, err, ops};

use crate::cli::{CheckpointArgs, CriuArgs, RestoreArgs};

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| err!("{}: {e}", p.display()))
}

fn common(criu: &Path, a: &CriuArgs) -> Result<Common> {
    let image_path = absolute(a.image_path.as_deref().unwrap_or(Path::new("checkpoint")))?;
    Ok(Common {
        criu: criu.to_path_buf(),
        image_path,
        work_path: a.work_path.as_deref().map(absolute).transpose()?,
        tcp_established: a.tcp_established,
        ext_unix_sk: a.ext_unix_sk,
        shell_job: a.shell_job,
        file_locks: a.file_locks,
        manage_cgroups_mode: a.manage_cgroups_mode.clone(),
        empty_ns: a.empty_ns.clone(),
        auto_dedup: a.auto_dedup,
        lazy_pages: a.lazy_pages,
    })
}

/// `checkpoint`.
pub fn checkpoint(root: &Path, criu: &Path, a: CheckpointArgs) -> Result<()> {
    if a.page_server.is_some() || a.status_fd >= 0 {
        return Err(err!(
            "--page-server and --status-fd are not supported by crius-runc (no lazy migration)"
        ));
    }
    let common = common(criu, &a.criu)?;
    if let Some(parent) = &a.parent_path {
        check_parent_path(&common.image_path, parent)?;
    }
    let opts = CheckpointOptions {
        common,
        leave_running: a.leave_running,
        pre_dump: a.pre_dump,
        parent_path: a.parent_path,
    };
    crius_oci::checkpoint::checkpoint(root, &a.id, &opts)
}

/// `--parent-path` is checked before the container is looked at, as runc checks it: it must be relative and name
/// a directory under the image path (CRIU reads it relative to the images).
fn check_parent_path(image_path: &Path, parent: &Path) -> Result<()> {
    if parent.is_absolute() {
        return Err(err!(
            "--parent-path {}: must be relative to the image path",
            parent.display()
        ));
    }
    let real = image_path.join(parent);
    match std::fs::metadata(&real) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(err!(
            "invalid --parent-path: {} is not a directory",
            real.display()
        )),
        Err(e) => Err(err!("invalid --parent-path: {}: {e}", real.display())),
    }
}

/// `restore`: with `--detach` returns once the container runs again; else waits for it, deletes it and returns
/// its exit code, as `run` does. A terminal without `--console-socket` (and without `--detach`) is relayed to
/// crius-runc's own stdio, as `run` relays it.
pub fn restore(root: &Path, criu: &Path, a: RestoreArgs, systemd_cgroup: bool) -> Result<i32> {
    if !a.detach && !a.no_subreaper {
        crius_oci::wait::become_subreaper()?;
    }
    let foreground = if !a.detach && a.console_socket.is_none() && crate::wants_terminal(&a.bundle) {
        Some(crius_oci::foreground::Foreground::listen()?)
    } else {
        None
    };
    let opts = RestoreOptions {
        common: common(criu, &a.criu)?,
        bundle: a.bundle,
        console_socket: foreground
            .as_ref()
            .map(|f| f.path().to_path_buf())
            .or(a.console_socket),
        pid_file: a.pid_file,
        systemd_cgroup,
        lsm_profile: a.lsm_profile,
        lsm_mount_context: a.lsm_mount_context,
    };
    let rec = crius_oci::checkpoint::restore(root, &a.id, &opts)?;
    let relay = match foreground.map(|fg| fg.attach()).transpose() {
        Ok(r) => r,
        Err(e) => {
            let _ = ops::delete(root, &a.id, true);
            return Err(e);
        }
    };
    if a.detach {
        return Ok(0);
    }
    let resize = relay.as_ref().map(|r| move || r.resize());
    let code = crius_oci::wait::forward_until_exit_resizing(rec.pid, resize.as_ref().map(|f| f as &dyn Fn()));
    if let Some(r) = relay {
        r.finish();
    }
    let code = code?;
    ops::delete(root, &a.id, true)?;
    Ok(code)
}
