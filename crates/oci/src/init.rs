//! The container's init process: everything between "namespaces exist" and "the user's program runs".

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use oci_spec::runtime::{ContainerState, Spec};

use crate::channel::Channel;
use crate::config::Bundle;
use crate::{Result, err};

/// Runs init. Returns only errors that happen before the runtime was told "created"; later errors are printed on
/// the container's stderr and end the process, since nobody waits for them on the channel any more.
/// `userns`: whether the container has a user namespace, and what the runtime made before it
/// ([`crate::rootfs::Sources`]).
pub fn run(
    id: &str,
    b: &Bundle,
    ch: &Channel,
    fifo: &OwnedFd,
    console: Option<UnixStream>,
    (userns, sources): (bool, crate::rootfs::Sources),
    preserve_fds: u32,
) -> Result<()> {
    let spec = &b.spec;
    let process = spec.process().as_ref().expect("checked");
    nix::unistd::setsid().map_err(|e| err!("setsid: {e}"))?;
    let root = crate::rootfs::prepare(spec, &b.rootfs, &b.dir, userns, sources)?;
    set_names(spec)?;
    ch.send("hooks")?;
    let go = ch.recv()?;
    let host_pid: i32 = match go.strip_prefix("go ") {
        Some(p) => p.parse().unwrap_or(0),
        None => return Err(err!("setup aborted by the runtime: {go:?}")),
    };
    let hooks = spec.hooks().clone().unwrap_or_default();
    if let Some(h) = hooks.create_container() {
        // In the container's mount namespace, in its rootfs (not yet its root), as runc runs them.
        crate::hooks::run_in(
            "createContainer",
            h,
            &crate::state::document(id, ContainerState::Created, host_pid, &b.dir, spec),
            Some(&root.path),
        )?;
    }
    crate::rootfs::pivot(&root, crate::rootfs::own_mount_namespace(spec))?;
    drop(root);
    // The terminal before the masks and the read-only root: /dev/console is bound in a /dev still writable.
    if let Some(sock) = console {
        crate::console::setup(&sock, process.console_size().as_ref(), true)?;
    }
    crate::rootfs::finalize(spec, userns)?;
    let cwd = process.cwd();
    let _ = std::fs::create_dir_all(cwd);
    nix::unistd::chdir(cwd).map_err(|e| err!("process.cwd {}: {e}", cwd.display()))?;
    crate::process::check_cwd(cwd)?;
    let seccomp = spec.linux().as_ref().and_then(|l| l.seccomp().as_ref());
    crate::process::set_personality(spec.linux().as_ref().and_then(|l| l.personality().as_ref()))?;
    let prepared = crate::process::prepare(process, seccomp)?;
    ch.send("created")?;

    // From here on, errors go to the container's stderr.
    let fail = |e: crate::Error| -> ! {
        let _ = writeln!(std::io::stderr(), "crius-runc: container {id}: {e}");
        // SAFETY: end the process without running destructors.
        unsafe { libc::_exit(127) }
    };
    // `start` opens the fifo; startContainer hooks run then, with the process's user, capabilities and seccomp
    // filter in place (runc's order), before the byte that lets `start` return.
    let start = || {
        let mut f = wait_for_start(fifo)?;
        if let Some(h) = hooks.start_container() {
            let state = crate::state::document(id, ContainerState::Running, host_pid, &b.dir, spec);
            crate::hooks::run("startContainer", h, &state)?;
        }
        f.write_all(b"0").map_err(|e| err!("writing the exec fifo: {e}"))
    };
    // A filter's listener goes to the runtime, for the seccomp agent, before anything else runs under it.
    let listener: crate::seccomp::Listener<'_> = Some(Box::new(|fd| {
        ch.send_fd("seccomp", &fd)?;
        drop(fd);
        ch.expect("go")
    }));
    match crate::process::finish(process, prepared, preserve_fds, listener, start) {
        Ok(never) => match never {},
        Err(e) => fail(e),
    }
}

fn set_names(spec: &Spec) -> Result<()> {
    if let Some(h) = spec.hostname().as_deref().filter(|h| !h.is_empty()) {
        nix::unistd::sethostname(h).map_err(|e| err!("sethostname {h:?}: {e}"))?;
    }
    if let Some(d) = spec.domainname().as_deref().filter(|d| !d.is_empty()) {
        // SAFETY: pointer and length of a live string.
        if unsafe { libc::setdomainname(d.as_ptr().cast(), d.len()) } != 0 {
            return Err(err!("setdomainname {d:?}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Blocks until `start` opens the exec fifo for reading.
fn wait_for_start(fifo: &OwnedFd) -> Result<std::fs::File> {
    let path = format!("/proc/self/fd/{}", fifo.as_raw_fd());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map_err(|e| err!("opening the exec fifo through {path} (is /proc mounted in the container?): {e}"))
}
