//! Making a container or starting an exec: the runtime to use, the bundle's rootfs mounts, and the runtime
//! run (`create`, `exec`, or `restore` of a container created from a checkpoint) with the process's stdio (pipes pumped by the reactor, or a terminal through a console socket).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{
    Container, CreateTask, Process, RUNTIME_FILE, RuntimeChoice, StdioPaths, Tasks, process_name, read_pid,
};
use crate::console::ConsoleSocket;
use crate::error::{Error, Result};
use crate::reactor::Reactor;
use crate::runtime::{ChildIo, Runtime};
use crate::stdio::{self, ProcessIo};

/// Where the runtimes' state roots are made (0700).
const RUNTIME_ROOTS: &str = "/run/crius/shim";

impl Tasks {
    /// The runtime for a new container: the chosen binary and root when given, else `CRIUS_SHIM_RUNTIME` from
    /// the environment, else crius-runc, under `/run/crius/shim/<binary name>/<namespace>`.
    fn runtime_for(&self, choice: &RuntimeChoice) -> Result<Runtime> {
        let binary = choice.binary.clone().unwrap_or_else(|| {
            std::env::var_os("CRIUS_SHIM_RUNTIME")
                .map(PathBuf::from)
                .unwrap_or_else(crate::runtime::default_binary)
        });
        let root = choice.root.clone().unwrap_or_else(|| {
            let name = binary
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            Path::new(RUNTIME_ROOTS).join(name).join(&self.inner.namespace)
        });
        if choice.root.is_none() {
            // The runtime's state (each container's config, its exec FIFO) is root's alone; directories an
            // older shim made looser are tightened.
            let by_binary = root.parent().unwrap_or(&root);
            for dir in [Path::new(RUNTIME_ROOTS), by_binary, &root] {
                crate::address::private_dir(dir)?;
            }
        } else {
            crius_common::private::dir_all(&root).map_err(|source| Error::Io {
                context: format!("creating {}", root.display()),
                source,
            })?;
        }
        let mut runtime = Runtime::new(binary, root, self.inner.reaper.clone());
        runtime.systemd_cgroup = choice.systemd_cgroup;
        Ok(runtime)
    }

    /// Runs the runtime's `create` for `req`, its rootfs mounted first; undoes what it did on failure.
    pub(super) fn make_container(&self, req: &CreateTask) -> Result<Container> {
        let choice = req
            .runtime
            .as_ref()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let runtime = self.runtime_for(choice)?;
        let bundle = req.bundle.clone();
        let rootfs = bundle.join("rootfs");
        if !req.rootfs.is_empty() {
            std::fs::create_dir_all(&rootfs).map_err(|source| Error::Io {
                context: format!("creating {}", rootfs.display()),
                source,
            })?;
            crate::mounts::mount_all(&req.rootfs, &rootfs).inspect_err(|_| {
                crate::mounts::unmount_all(&rootfs);
            })?;
        }
        let fail = |e: Error| {
            if !req.rootfs.is_empty() {
                crate::mounts::unmount_all(&rootfs);
            }
            e
        };
        let note = serde_json::json!({
            "binary": runtime.binary,
            "root": runtime.root,
            "systemd_cgroup": runtime.systemd_cgroup,
        });
        if let Some(image) = &req.checkpoint {
            // Made at Start, by the runtime's restore: nothing runs before.
            if !image.join("inventory.img").is_file() {
                return Err(fail(Error::InvalidArgument(format!(
                    "Create of container {:?}: {} holds no CRIU checkpoint (no inventory.img)",
                    req.id,
                    image.display()
                ))));
            }
            let _ = crius_common::private::write(&bundle.join(RUNTIME_FILE), note.to_string().as_bytes());
            let io = ProcessIo {
                stdin_path: req.stdio.stdin.clone(),
                stdout_path: req.stdio.stdout.clone(),
                stderr_path: req.stdio.stderr.clone(),
                ..Default::default()
            };
            return Ok(Container {
                bundle,
                runtime,
                init: Process::new(process_name(&req.id, ""), io, req.terminal),
                execs: HashMap::new(),
                rootfs_mounted: !req.rootfs.is_empty(),
                restore: Some(image.clone()),
            });
        }
        let pid_file = bundle.join("init.pid");
        let _ = std::fs::remove_file(&pid_file);
        let (b, p) = (bundle.display().to_string(), pid_file.display().to_string());
        let undo = |e: Error| {
            // The runtime may have left a half-made container behind.
            let _ = runtime.run(&["delete", "--force", &req.id], None, &bundle);
            e
        };
        let create = ["create", "--bundle", &b, "--pid-file", &p];
        let io = run_with_stdio(
            &self.inner.reactor,
            |child, console| runtime_command(&runtime, &create, &req.id, child, console, &bundle),
            true,
            &req.stdio,
            req.terminal,
            undo,
        )
        .map_err(fail)?;
        let pid = read_pid(&pid_file).map_err(fail)?;
        let _ = crius_common::private::write(&bundle.join(RUNTIME_FILE), note.to_string().as_bytes());
        let mut init = Process::new(process_name(&req.id, ""), io, req.terminal);
        init.pid = pid;
        Ok(Container {
            bundle,
            runtime,
            init,
            execs: HashMap::new(),
            rootfs_mounted: !req.rootfs.is_empty(),
            restore: None,
        })
    }

    /// Runs the runtime's `restore --detach` of container `id` from CRIU's images in `image`, with the init's
    /// stdio set up as a create's; returns its pid and stdio. CRIU's restore log goes to `<bundle>/criu-work`.
    pub(super) fn run_restore(
        &self,
        runtime: &Runtime,
        bundle: &Path,
        id: &str,
        image: &Path,
        stdio: &StdioPaths,
        terminal: bool,
    ) -> Result<(u32, ProcessIo)> {
        let work = bundle.join("criu-work");
        crius_common::private::dir_all(&work).map_err(|source| Error::Io {
            context: format!("creating {}", work.display()),
            source,
        })?;
        let pid_file = bundle.join("init.pid");
        let _ = std::fs::remove_file(&pid_file);
        let (b, i, w, p) = (
            bundle.display().to_string(),
            image.display().to_string(),
            work.display().to_string(),
            pid_file.display().to_string(),
        );
        let mut restore = vec![
            "restore",
            "--detach",
            "--bundle",
            &b,
            "--image-path",
            &i,
            "--work-path",
            &w,
            "--pid-file",
            &p,
        ];
        if terminal {
            restore.push("--shell-job");
        }
        let log = work.join("restore.log");
        let undo = |e: Error| {
            let e = super::checkpoint::with_criu_log(e, &log);
            // The runtime may have left a half-made container behind.
            let _ = runtime.run(&["delete", "--force", id], None, bundle);
            e
        };
        let io = run_with_stdio(
            &self.inner.reactor,
            |child, console| runtime_command(runtime, &restore, id, child, console, bundle),
            true,
            stdio,
            terminal,
            undo,
        )?;
        let pid = read_pid(&pid_file)?;
        Ok((pid, io))
    }

    /// Runs the runtime's `exec` for exec process `exec_id` of container `id`; returns its pid and stdio.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_exec(
        &self,
        runtime: &Runtime,
        bundle: &Path,
        id: &str,
        exec_id: &str,
        spec: &[u8],
        stdio: &StdioPaths,
        terminal: bool,
    ) -> Result<(u32, ProcessIo)> {
        if runtime.direct_exec() {
            // No runtime command: crius-runc's sealed copy enters the container itself (`crate::direct`).
            let mut pid = 0;
            let io = run_with_stdio(
                &self.inner.reactor,
                |child, console| {
                    pid = crate::direct::exec(runtime, id, spec, child, console)?;
                    Ok(())
                },
                false,
                stdio,
                terminal,
                |e| e,
            )?;
            return Ok((pid, io));
        }
        let spec_file = bundle.join(format!(".exec-{exec_id}.json"));
        let pid_file = bundle.join(format!(".exec-{exec_id}.pid"));
        // The exec's spec holds its env: root's alone while it exists.
        crius_common::private::write(&spec_file, spec).map_err(|source| Error::Io {
            context: format!("writing {}", spec_file.display()),
            source,
        })?;
        let (s, p) = (spec_file.display().to_string(), pid_file.display().to_string());
        let exec = ["exec", "--process", &s, "--detach", "--pid-file", &p];
        let io = run_with_stdio(
            &self.inner.reactor,
            |child, console| runtime_command(runtime, &exec, id, child, console, bundle),
            false,
            stdio,
            terminal,
            |e| e,
        );
        let _ = std::fs::remove_file(&spec_file);
        let io = io?;
        let pid = read_pid(&pid_file)?;
        let _ = std::fs::remove_file(&pid_file);
        Ok((pid, io))
    }
}

/// Runs the runtime's `<args> [--console-socket S] <id>` (a create or an exec) in `bundle` with `child` as its
/// stdio.
fn runtime_command(
    runtime: &Runtime,
    args: &[&str],
    id: &str,
    child: ChildIo,
    console: Option<&str>,
    bundle: &Path,
) -> Result<()> {
    let mut args = args.to_vec();
    if let Some(c) = console {
        args.extend(["--console-socket", c]);
    }
    args.push(id);
    runtime.run(&args, Some(child), bundle).map(drop)
}

/// Starts a process (a create or an exec, by `launch`) with its stdio: pipes copied to the given paths, or a
/// terminal whose master comes back over a console socket (`launch` gets its path). Returns what the shim
/// keeps of the stdio; a failure of `launch`, or of taking its terminal, goes through `launch_failed`.
/// `hold_stdin`: a container's stdin stays open across attaches; an exec's ends with its writer.
fn run_with_stdio(
    reactor: &Reactor,
    launch: impl FnOnce(ChildIo, Option<&str>) -> Result<()>,
    hold_stdin: bool,
    paths: &StdioPaths,
    terminal: bool,
    launch_failed: impl Fn(Error) -> Error,
) -> Result<ProcessIo> {
    let console = if terminal {
        Some(ConsoleSocket::new()?)
    } else {
        None
    };
    let (child, mut io) = if terminal {
        let mut io = stdio::terminal_paths(&paths.stdin, &paths.stdout, &paths.stderr);
        io.hold_stdin = hold_stdin;
        (Default::default(), io)
    } else {
        // Stdio the request names that cannot be opened is the request's fault.
        stdio::setup(reactor, &paths.stdin, &paths.stdout, &paths.stderr, hold_stdin)
            .map_err(|e| Error::InvalidArgument(e.to_string()))?
    };
    let console_path = console.as_ref().map(|c| c.path());
    launch(child, console_path.as_deref()).map_err(&launch_failed)?;
    if let Some(console) = &console {
        let master = console.receive().map_err(&launch_failed)?;
        stdio::attach_terminal(reactor, &mut io, master).map_err(&launch_failed)?;
    }
    Ok(io)
}
