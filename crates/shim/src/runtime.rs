//! Running the OCI runtime binary (crius-runc by default; runc or crun when configured). Its errors are read
//! from its `--log` file (JSON lines), because during `create` its stdio belongs to the container.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crius_common::sealed::Handed;

use crate::error::{Error, Result};
use crate::reaper::Reaper;

/// A runtime binary with its state root.
#[derive(Clone)]
pub(crate) struct Runtime {
    /// The binary.
    pub(crate) binary: PathBuf,
    /// Its `--root`.
    pub(crate) root: PathBuf,
    /// Pass `--systemd-cgroup` (the container's cgroup is a systemd scope).
    pub(crate) systemd_cgroup: bool,
    reaper: Reaper,
}

/// The container's stdio for `create` or `exec` (None = /dev/null).
#[derive(Default)]
pub(crate) struct ChildIo {
    /// stdin.
    pub(crate) stdin: Option<OwnedFd>,
    /// stdout.
    pub(crate) stdout: Option<OwnedFd>,
    /// stderr.
    pub(crate) stderr: Option<OwnedFd>,
}

fn stdio(fd: Option<OwnedFd>) -> Stdio {
    fd.map(Stdio::from).unwrap_or_else(Stdio::null)
}

/// The default runtime: `crius-runc` next to the shim's own binary, else on PATH.
pub(crate) fn default_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| beside(&e))
        .unwrap_or_else(|| PathBuf::from("crius-runc"))
}

/// `crius-runc` next to the shim binary `shim`, if there is one: the runtime a shim there runs by default.
pub(crate) fn beside(shim: &Path) -> Option<PathBuf> {
    Some(shim.parent()?.join("crius-runc")).filter(|p| p.exists())
}

/// The sealed copy of the runtime criusd handed this shim (`crius_common::sealed::ENV`), checked once.
fn handed() -> Option<&'static Handed> {
    static HANDED: OnceLock<Option<Handed>> = OnceLock::new();
    HANDED
        .get_or_init(|| {
            let h = Handed::inherited();
            if let Some(h) = &h {
                eprintln!(
                    "containerd-shim-crius-v2: the runtime {} runs from criusd's sealed copy (fd {})",
                    h.path.display(),
                    h.fd
                );
            }
            h
        })
        .as_ref()
}

/// The command that runs `binary`: through the handed sealed copy when it was made of this very file (same
/// path, and the file on disk not replaced since), so crius-runc need not copy itself; else by its path.
pub(crate) fn command_for(binary: &Path) -> Command {
    match handed().filter(|h| h.path == binary && h.current()) {
        Some(h) => {
            // The copy is close-on-exec here: an ELF file executed through /proc/self/fd needs no descriptor
            // after the exec, and the runtime inherits none.
            let mut cmd = Command::new(format!("/proc/self/fd/{}", h.fd));
            cmd.arg0(binary);
            cmd
        }
        None => Command::new(binary),
    }
}

impl Runtime {
    /// A runtime `binary` keeping its state under `root`.
    pub(crate) fn new(binary: PathBuf, root: PathBuf, reaper: Reaper) -> Runtime {
        Runtime {
            binary,
            root,
            systemd_cgroup: false,
            reaper,
        }
    }

    /// Whether its execs go the direct way (`crate::direct`): the runtime is crius-runc and the switch is on.
    pub(crate) fn direct_exec(&self) -> bool {
        crate::direct::applies(&self.binary)
    }

    /// The reaper that collects the runtime's processes.
    pub(crate) fn reaper(&self) -> &Reaper {
        &self.reaper
    }

    /// Runs `<binary> --root R --log L --log-format json <args>` in `scratch` (a directory for its output),
    /// with `io` as its stdio if given; returns its stdout. A failure of the runtime is [`Error::Runtime`] with
    /// its own error message; one to run it at all, [`Error::Io`].
    pub(crate) fn run(&self, args: &[&str], io: Option<ChildIo>, scratch: &Path) -> Result<String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let log = scratch.join(format!(".runtime-{n}.log"));
        let out = scratch.join(format!(".runtime-{n}.out"));
        let shown = format!("{} {}", self.binary.display(), args.join(" "));
        let result = (|| {
            let mut cmd = command_for(&self.binary);
            cmd.arg("--root")
                .arg(&self.root)
                .arg("--log")
                .arg(&log)
                .arg("--log-format")
                .arg("json");
            if self.systemd_cgroup {
                cmd.arg("--systemd-cgroup");
            }
            cmd.args(args).current_dir(scratch);
            match io {
                Some(io) => {
                    cmd.stdin(stdio(io.stdin))
                        .stdout(stdio(io.stdout))
                        .stderr(stdio(io.stderr));
                }
                None => {
                    let f =
                        crius_common::private::create(&out).map_err(Error::io(out.display().to_string()))?;
                    let e = f.try_clone().map_err(Error::io(out.display().to_string()))?;
                    cmd.stdin(Stdio::null()).stdout(f).stderr(e);
                }
            }
            let child = cmd.spawn().map_err(Error::io(shown.clone()))?;
            drop(cmd);
            let exit = self.reaper.wait(child.id() as i32);
            let stdout = std::fs::read_to_string(&out).unwrap_or_default();
            if exit.status == 0 {
                return Ok(stdout);
            }
            let mut why: Vec<String> = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| matches!(v["level"].as_str(), Some("error" | "fatal")))
                .filter_map(|v| v["msg"].as_str().map(str::to_string))
                .collect();
            if why.is_empty() && !stdout.trim().is_empty() {
                why.push(stdout.trim().to_string());
            }
            Err(Error::Runtime(format!(
                "{shown}: exit status {}: {}",
                exit.status,
                why.join("; ")
            )))
        })();
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&out);
        result
    }
}
