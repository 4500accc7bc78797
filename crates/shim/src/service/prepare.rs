//! Making a container or an exec: the runtime to use, the bundle's rootfs mounts, and the runtime run with
//! the process's stdio (pipes pumped by the reactor, or a terminal through a console socket).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use containerd_shim_protos as protos;
use protos::api;
use protos::protobuf::{Message, MessageField};
use protos::ttrpc::{self, Code};

use super::{Container, Proc, RUNC_OPTIONS, RUNTIME_FILE, Result, Service, error, protobuf_any, read_pid};
use crate::console::ConsoleSocket;
use crate::reactor::Reactor;
use crate::runtime::Runtime;
use crate::stdio::{self, ProcessIo};

impl Service {
    /// The runtime for a new container: `containerd.runc.v1.Options.binary_name`/`root` when given, else
    /// `CRIUS_SHIM_RUNTIME` from the environment, else crius-runc.
    fn runtime_for(&self, options: &MessageField<protobuf_any::Any>) -> Result<Runtime> {
        let mut binary = std::env::var_os("CRIUS_SHIM_RUNTIME")
            .map(PathBuf::from)
            .unwrap_or_else(crate::runtime::default_binary);
        let mut root = PathBuf::new();
        if let Some(any) = options.as_ref()
            && any.type_url.ends_with(RUNC_OPTIONS)
        {
            let o = protos::shim::oci::Options::parse_from_bytes(&any.value)
                .map_err(|e| error(Code::INVALID_ARGUMENT, format!("runtime options: {e}")))?;
            if !o.binary_name.is_empty() {
                binary = PathBuf::from(o.binary_name);
            }
            if !o.root.is_empty() {
                root = PathBuf::from(o.root);
            }
        }
        if root.as_os_str().is_empty() {
            let name = binary
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            root = Path::new("/run/crius/shim")
                .join(name)
                .join(&self.inner.namespace);
        }
        std::fs::create_dir_all(&root)
            .map_err(|e| error(Code::INTERNAL, format!("creating {}: {e}", root.display())))?;
        Ok(Runtime::new(binary, root, self.inner.reaper.clone()))
    }

    pub(super) fn create_container(&self, req: &api::CreateTaskRequest) -> Result<Container> {
        let bundle = PathBuf::from(&req.bundle);
        let runtime = self.runtime_for(&req.options)?;
        let rootfs = bundle.join("rootfs");
        if !req.rootfs.is_empty() {
            std::fs::create_dir_all(&rootfs)
                .map_err(|e| error(Code::INTERNAL, format!("creating {}: {e}", rootfs.display())))?;
            let mounts: Vec<_> = req.rootfs.iter().map(super::mount_of).collect();
            crate::mounts::mount_all(&mounts, &rootfs).map_err(|e| {
                crate::mounts::unmount_all(&rootfs);
                error(Code::INTERNAL, e)
            })?;
        }
        let fail = |e: ttrpc::Error| {
            if !req.rootfs.is_empty() {
                crate::mounts::unmount_all(&rootfs);
            }
            e
        };
        let pid_file = bundle.join("init.pid");
        let _ = std::fs::remove_file(&pid_file);
        let (b, p) = (bundle.display().to_string(), pid_file.display().to_string());
        let undo = |e: String| {
            // The runtime may have left a half-made container behind.
            let _ = runtime.run(&["delete", "--force", &req.id], None, &bundle);
            error(Code::INTERNAL, e)
        };
        let io = run_with_stdio(
            &self.inner.reactor,
            &runtime,
            &["create", "--bundle", &b, "--pid-file", &p],
            &req.id,
            (&req.stdin, &req.stdout, &req.stderr),
            req.terminal,
            &bundle,
            undo,
        )
        .map_err(fail)?;
        let pid = read_pid(&pid_file).map_err(fail)?;
        let note = serde_json::json!({"binary": runtime.binary, "root": runtime.root});
        let _ = std::fs::write(bundle.join(RUNTIME_FILE), note.to_string());
        let mut init = Proc::new(io, req.terminal);
        init.pid = pid;
        Ok(Container {
            bundle,
            runtime,
            init,
            execs: HashMap::new(),
            rootfs_mounted: !req.rootfs.is_empty(),
        })
    }
}

/// Runs `<args> [--console-socket S] <id>` (a create or an exec) with the process's stdio: pipes copied to
/// the given paths, or a terminal whose master the runtime sends back over a console socket. Returns what
/// the shim keeps of the stdio; a failure of the runtime, or of taking its terminal, goes through
/// `runtime_failed`.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_with_stdio(
    reactor: &Reactor,
    runtime: &Runtime,
    args: &[&str],
    id: &str,
    (stdin, stdout, stderr): (&str, &str, &str),
    terminal: bool,
    bundle: &Path,
    runtime_failed: impl Fn(String) -> ttrpc::Error,
) -> Result<ProcessIo> {
    let console = if terminal {
        Some(ConsoleSocket::new().map_err(|e| error(Code::INTERNAL, e))?)
    } else {
        None
    };
    let (child, mut io) = if terminal {
        (Default::default(), stdio::terminal_paths(stdin, stdout, stderr))
    } else {
        stdio::setup(reactor, stdin, stdout, stderr).map_err(|e| error(Code::INVALID_ARGUMENT, e))?
    };
    let console_path = console.as_ref().map(|c| c.path()).unwrap_or_default();
    let mut args = args.to_vec();
    if console.is_some() {
        args.extend(["--console-socket", &console_path]);
    }
    args.push(id);
    runtime.run(&args, Some(child), bundle).map_err(&runtime_failed)?;
    if let Some(console) = &console {
        let master = console.receive().map_err(&runtime_failed)?;
        stdio::attach_terminal(reactor, &mut io, master).map_err(&runtime_failed)?;
    }
    Ok(io)
}
