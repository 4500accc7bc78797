//! The shim v2 process protocol: `start` (find or launch the pod's shim, print its address), `delete` (clean up
//! after a shim that is gone), and serving (the long-lived process).

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use containerd_shim_protos as protos;
use protos::protobuf::Message;

use crate::address::{private_dir, socket_address, socket_path};
use crate::args::{self, Flags};
use crate::error::{Error, Result};
use crate::events::timestamp;
use crate::publisher::Publisher;
use crate::reactor::{Next, READ, Reactor};
use crate::reaper::Reaper;
use crate::runtime::Runtime;
use crate::task::{EXIT_FILE, FIRST_CREATE, RUNTIME_FILE, Tasks};

/// The annotation that groups a pod's containers into one shim.
pub(crate) const SANDBOX_ANNOTATION: &str = "io.kubernetes.cri.sandbox-id";

/// Runs the shim with `args`; returns the exit code.
pub(crate) fn run(args: impl IntoIterator<Item = String>) -> i32 {
    let flags = match args::parse(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("containerd-shim-crius-v2: {e}");
            return 2;
        }
    };
    if flags.version {
        println!("containerd-shim-crius-v2 {}", env!("CARGO_PKG_VERSION"));
        return 0;
    }
    let r = match flags.action.as_str() {
        "start" => start(&flags),
        "delete" => delete(&flags),
        "pid-init" => crate::pidinit::start(),
        "" => serve(&flags),
        other => Err(Error::InvalidArgument(format!(
            "unknown action {other:?}: use start, delete or pid-init"
        ))),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("containerd-shim-crius-v2: {e}");
            1
        }
    }
}

/// The grouping key of the container whose bundle is `bundle`: its pod's sandbox id, or its own id.
pub(crate) fn grouping(bundle: &Path, id: &str) -> String {
    std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["annotations"][SANDBOX_ANNOTATION].as_str().map(str::to_string))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| id.to_string())
}

fn start(f: &Flags) -> Result<()> {
    if f.id.is_empty() {
        return Err(Error::InvalidArgument("start: -id is required".into()));
    }
    let cwd = std::env::current_dir().map_err(Error::io("cwd"))?;
    let address = socket_address(&f.address, &f.namespace, &grouping(&cwd, &f.id));
    let path = socket_path(&address);
    if UnixStream::connect(&path).is_err() {
        launch(f, &address)?;
        if UnixStream::connect(&path).is_err() {
            return Err(Error::Host(format!(
                "the shim for {} did not come up on {} (its log: {}/shim.log)",
                f.id,
                path.display(),
                cwd.display()
            )));
        }
    }
    crius_common::private::write(&cwd.join("address"), address.as_bytes())
        .map_err(Error::io("writing address"))?;
    print!("{address}");
    let _ = std::io::stdout().flush();
    Ok(())
}

/// Launches the serving process and waits until it listens (it closes its stdout then).
fn launch(f: &Flags, address: &str) -> Result<()> {
    let exe = std::env::current_exe().map_err(Error::io("own binary"))?;
    // The shim's own log: containerd's `log` FIFO in the bundle when it reads one, else shim.log.
    let log = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags_nonblock()
        .open("log")
        .or_else(|_| crius_common::private::append(Path::new("shim.log")))
        .map_err(Error::io("opening the shim log"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["-namespace", &f.namespace, "-id", &f.id, "-address", &f.address])
        .args(["-publish-binary", &f.publish_binary, "-socket", address]);
    if f.debug {
        cmd.arg("-debug");
    }
    if let Some(h) = crius_common::sealed::Handed::inherited() {
        // The serving process keeps criusd's sealed copy of the runtime (close-on-exec in this one since start).
        let fd = h.fd;
        // SAFETY: the hook makes one fcntl call (async-signal-safe) on a descriptor this process holds open.
        unsafe { cmd.pre_exec(move || crius_common::sealed::inherit_in_child(fd)) };
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(Error::io("launching the shim"))?;
    let mut sink = Vec::new();
    let _ = child.stdout.take().expect("piped").read_to_end(&mut sink);
    Ok(())
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

fn serve(f: &Flags) -> Result<()> {
    // Own session: a signal to containerd's process group does not reach the shim.
    let _ = nix::unistd::setsid();
    // SAFETY: mallopt before any thread exists; one arena keeps a small shim small.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let path = socket_path(&f.socket);
    if let Some(dir) = path.parent() {
        private_dir(dir)?;
    }
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if UnixStream::connect(&path).is_ok() {
                // Another shim serves this pod already.
                return Ok(());
            }
            std::fs::remove_file(&path).map_err(Error::io(format!("removing stale {}", path.display())))?;
            UnixListener::bind(&path).map_err(Error::io(format!("listening on {}", path.display())))?
        }
        Err(e) => return Err(Error::io(format!("listening on {}", path.display()))(e)),
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io(format!("setting the mode of {}", path.display())))?;
    let reactor = Reactor::new().map_err(Error::io("the event loop"))?;
    let reaper = Reaper::install().map_err(Error::io("becoming a subreaper"))?;
    reaper.attach(&reactor).map_err(Error::io("reaping"))?;
    let publisher = Publisher::start(&std::env::var("TTRPC_ADDRESS").unwrap_or_default(), &f.namespace);
    let tasks = Tasks::new(&f.namespace, reaper, Arc::new(publisher.clone()), reactor.clone());
    let server = crate::service::server(tasks.clone());
    server
        .listen(&reactor, listener)
        .map_err(Error::io(format!("serving {}", path.display())))?;
    // SIGTERM (a node shutting down, an operator) ends the shim only once it holds no container: the
    // containers outlive everything but their own deletion. A handler (reset by exec, so no child inherits
    // anything) writes to a pipe in the loop; blocking the signal instead would be inherited.
    let term = Arc::new(term_pipe()?);
    let held = term.clone();
    let on_term = tasks.clone();
    reactor
        .add(term.as_fd(), READ, move |_, _| {
            let mut byte = [0u8; 16];
            while (&*held).read(&mut byte).is_ok_and(|n| n > 0) {}
            if !on_term.finish_if_empty() {
                eprintln!("containerd-shim-crius-v2: SIGTERM ignored: containers are still running");
            }
            Next::Keep
        })
        .map_err(Error::io("watching SIGTERM"))?;
    // Serving: release `start`, which waits for our stdout to close.
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto our own stdout.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    // A shim nobody gives a container (its caller died after `start`) does not stay forever.
    tasks.exit_when_idle(FIRST_CREATE);
    reactor.run();
    // Last words: what is still queued (a delete, an exit) gets a moment to reach the owner.
    publisher.drain(std::time::Duration::from_secs(2));
    let _ = std::fs::remove_file(&path);
    Ok(())
}

static TERM_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_sigterm(_: libc::c_int) {
    let fd = TERM_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe.
    unsafe {
        libc::write(fd, b"t".as_ptr().cast(), 1);
    }
}

/// The read end of a pipe that gets a byte per SIGTERM.
fn term_pipe() -> Result<std::fs::File> {
    let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
    let (r, w) = nix::unistd::pipe2(flags).map_err(Error::sys("pipe"))?;
    TERM_PIPE.store(w.into_raw_fd(), std::sync::atomic::Ordering::Relaxed);
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_sigterm),
        nix::sys::signal::SaFlags::SA_RESTART,
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler only calls write(2).
    unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGTERM, &action) }
        .map_err(Error::sys("SIGTERM handler"))?;
    Ok(std::fs::File::from(r))
}

/// `delete`: the shim is gone (or containerd cleans up); delete the container with its runtime, unmount its
/// rootfs, and print its last exit as a DeleteResponse.
fn delete(f: &Flags) -> Result<()> {
    let bundle = if f.bundle.is_empty() {
        std::env::current_dir().map_err(Error::io("cwd"))?
    } else {
        PathBuf::from(&f.bundle)
    };
    if let Ok(note) = std::fs::read(bundle.join(RUNTIME_FILE))
        && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&note)
    {
        let reaper = Reaper::start().map_err(Error::io("becoming a subreaper"))?;
        let mut rt = Runtime::new(
            PathBuf::from(v["binary"].as_str().unwrap_or("crius-runc")),
            PathBuf::from(v["root"].as_str().unwrap_or_default()),
            reaper,
        );
        rt.systemd_cgroup = v["systemd_cgroup"].as_bool().unwrap_or(false);
        if let Err(e) = rt.run(&["delete", "--force", &f.id], None, &bundle) {
            eprintln!("containerd-shim-crius-v2: {e}");
        }
    }
    crate::mounts::unmount_all(&bundle.join("rootfs"));
    let exit: serde_json::Value = std::fs::read(bundle.join(EXIT_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let at = exit["exited_at_ns"]
        .as_u64()
        .map(|ns| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns))
        .unwrap_or_else(std::time::SystemTime::now);
    let resp = protos::api::DeleteResponse {
        pid: exit["pid"].as_u64().unwrap_or(0) as u32,
        // Unknown: it was killed with the shim.
        exit_status: exit["status"].as_u64().unwrap_or(128 + 9) as u32,
        exited_at: Some(timestamp(at)).into(),
        ..Default::default()
    };
    let bytes = resp
        .write_to_bytes()
        .map_err(|e| Error::io("encoding")(std::io::Error::other(e)))?;
    std::io::stdout().write_all(&bytes).map_err(Error::io("writing"))
}
