//! `crius-runc`: the crius OCI runtime with runc's command line, so shims and tools that drive runc can drive it.
//!
//! The subcommands that enter a container (`create`, `run`, `exec`) protect the host's crius-runc binary
//! against CVE-2019-5736 before anything else: they re-execute from a sealed memfd copy of themselves
//! ([`sealed`]), so `/proc/<pid>/exe` of every crius-runc process a container can see is that copy, which
//! cannot be written; and they make themselves non-dumpable, so a container process without CAP_SYS_PTRACE
//! cannot open their `/proc/<pid>/` files (exe, fds, memory) while they work in its namespaces (the exec'd
//! program is dumpable again after its execve, as the kernel resets it). The price is one in-kernel copy of
//! the binary (2 ms for the 4 MB release build) and one more exec and start-up per such command: about 8 ms
//! more per `create` on the loaded 2-core test host (about 85 ms with the 61 MB debug build).
//!
//! Crates: clap for the command line ([`help`] lays it out as runc's), nix (the workspace's) for `list`'s owner.

mod checkpoint;
mod cli;
mod default_spec;
mod exec;
mod help;
mod output;
mod sealed;

use std::path::Path;
use std::process::ExitCode;

use crius_oci::{CreateOptions, Result, err, ops};
use oci_spec::runtime::{LinuxMemory, LinuxPids, LinuxResources};

use cli::{Cli, Command};

fn main() -> ExitCode {
    // The shim's direct exec (crius_oci::direct): a hidden action, before any parsing.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(crius_oci::direct::ARG)) {
        if let Err(e) = sealed::ensure() {
            eprintln!("crius-runc: protecting the runtime binary (CVE-2019-5736): {e}");
            return ExitCode::FAILURE;
        }
        return ExitCode::from(crius_oci::direct::serve() as u8);
    }
    let mut cli = match help::parse() {
        help::Parsed::Run(cli) => *cli,
        help::Parsed::Exit(code) => return ExitCode::from(code),
    };
    let preserve = match &cli.command {
        Some(Command::Create(a) | Command::Run { create: a, .. }) => Some(a.preserve_fds),
        Some(Command::Exec(a)) => Some(a.preserve_fds),
        _ => None,
    };
    // runc's exec reports its own failures (not the process's) with 255.
    let failure = match &cli.command {
        Some(Command::Exec(_)) => 255,
        _ => 1,
    };
    if let Some(preserve) = preserve {
        if let Err(e) = sealed::ensure() {
            eprintln!("crius-runc: protecting the runtime binary (CVE-2019-5736): {e}");
            return ExitCode::from(failure);
        }
        // `exec -p /dev/fd/N` (a shell's process substitution) names a descriptor about to be closed: read it
        // first. Its errors are exec's to report, later.
        if let Some(Command::Exec(a)) = &mut cli.command
            && let Some(path) = a.process.as_ref().filter(|p| p.as_os_str() != "-")
        {
            a.process_text = exec::read_text(path).ok();
        }
        // Descriptors the caller leaked (CVE-2024-21626) reach neither hooks nor the container, nor serve as a
        // process.cwd of /proc/self/fd/N; only the --preserve-fds ones stay.
        // SAFETY: close_range with integer arguments; nothing in this process owns those descriptors yet.
        unsafe { libc::syscall(libc::SYS_close_range, 3 + preserve, u32::MAX, 0) };
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    }
    let format = match cli.log_format {
        cli::LogFormat::Text => crius_oci::log::Format::Text,
        cli::LogFormat::Json => crius_oci::log::Format::Json,
    };
    crius_oci::log::init(cli.log.clone(), format, cli.debug);
    match run(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            crius_oci::log::write("error", &e.to_string());
            eprintln!("crius-runc: {e}");
            ExitCode::from(failure)
        }
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let s = serde_json::to_string_pretty(v).map_err(|e| err!("encoding JSON: {e}"))?;
    println!("{s}");
    Ok(())
}

fn create_opts(a: &cli::CreateArgs, systemd_cgroup: bool) -> Result<CreateOptions> {
    Ok(CreateOptions {
        pid_file: a.pid_file.clone(),
        console_socket: a.console_socket.clone(),
        preserve_fds: a.preserve_fds,
        systemd_cgroup,
    })
}

fn run(cli: Cli) -> Result<i32> {
    let root = cli.root.as_path();
    let criu = cli.criu;
    let systemd = cli.systemd_cgroup;
    let Some(command) = cli.command else {
        return Ok(0);
    };
    match command {
        Command::Create(a) => {
            crius_oci::create(root, &a.id, &a.bundle, &create_opts(&a, systemd)?)?;
        }
        Command::Start { id } => ops::start(root, &id)?,
        Command::Run { create, detach, keep } => return run_container(root, &create, detach, keep, systemd),
        Command::State { id } => output::state(root, &id)?,
        Command::Kill { id, signal, all } => ops::kill(root, &id, ops::parse_signal(&signal)?, all)?,
        Command::Delete { id, force } => ops::delete(root, &id, force)?,
        Command::Exec(a) => return exec::exec(root, a),
        Command::Update(a) => ops::update(root, &a.id, &update_resources(&a)?)?,
        Command::Ps { id, format, ps_args } => output::ps(root, &id, format, &ps_args)?,
        Command::Pause { id } => ops::freeze(root, &id, true)?,
        Command::Resume { id } => ops::freeze(root, &id, false)?,
        Command::Events { id, stats, interval } => output::events(root, &id, stats, &interval)?,
        Command::Checkpoint(a) => checkpoint::checkpoint(root, &criu, a)?,
        Command::Restore(a) => return checkpoint::restore(root, &criu, a, systemd),
        Command::Features => print_json(&default_spec::features())?,
        Command::List { format, quiet } => output::list(root, format, quiet)?,
        Command::Spec { bundle } => {
            let path = bundle.join("config.json");
            if path.exists() {
                return Err(err!("{} already exists", path.display()));
            }
            let pure_v2 = crius_oci::cgroup::mount_point().is_ok_and(|m| m == Path::new("/sys/fs/cgroup"));
            std::fs::write(&path, default_spec::config(pure_v2))
                .map_err(|e| err!("writing {}: {e}", path.display()))?;
        }
    }
    Ok(0)
}

/// Whether the bundle's process asks for a terminal (an unreadable config is create's to report).
fn wants_terminal(bundle: &Path) -> bool {
    std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|v| v["process"]["terminal"] == true)
}

fn run_container(root: &Path, a: &cli::CreateArgs, detach: bool, keep: bool, systemd: bool) -> Result<i32> {
    if !detach {
        crius_oci::wait::become_subreaper()?;
    }
    let mut opts = create_opts(a, systemd)?;
    // A terminal in the foreground, as runc gives one, when nobody else takes the master.
    let foreground = if !detach && opts.console_socket.is_none() && wants_terminal(&a.bundle) {
        let fg = crius_oci::foreground::Foreground::listen()?;
        opts.console_socket = Some(fg.path().to_path_buf());
        Some(fg)
    } else {
        None
    };
    let rec = crius_oci::create(root, &a.id, &a.bundle, &opts)?;
    let relay = match foreground.map(|fg| fg.attach()).transpose() {
        Ok(r) => r,
        Err(e) => {
            let _ = ops::delete(root, &a.id, true);
            return Err(e);
        }
    };
    if let Err(e) = ops::start(root, &a.id) {
        let _ = ops::delete(root, &a.id, true);
        return Err(e);
    }
    if detach {
        return Ok(0);
    }
    let resize = relay.as_ref().map(|r| move || r.resize());
    let code = crius_oci::wait::forward_until_exit_resizing(rec.pid, resize.as_ref().map(|f| f as &dyn Fn()));
    if let Some(r) = relay {
        r.finish();
    }
    let code = code?;
    if !keep {
        ops::delete(root, &a.id, true)?;
    }
    Ok(code)
}

fn update_resources(a: &cli::UpdateArgs) -> Result<LinuxResources> {
    let mut res: LinuxResources = match &a.resources {
        Some(path) => exec::read_json(path)?,
        None => LinuxResources::default(),
    };
    let mut cpu = res.cpu().clone().unwrap_or_default();
    let mut cpu_set = false;
    macro_rules! set {
        ($target:ident, $flag:expr, $setter:ident, $marker:ident) => {
            if let Some(v) = $flag.clone() {
                $target.$setter(Some(v));
                $marker = true;
            }
        };
    }
    set!(cpu, a.cpu_period, set_period, cpu_set);
    set!(cpu, a.cpu_quota, set_quota, cpu_set);
    set!(cpu, a.cpu_share, set_shares, cpu_set);
    set!(cpu, a.cpuset_cpus, set_cpus, cpu_set);
    set!(cpu, a.cpuset_mems, set_mems, cpu_set);
    if cpu_set {
        res.set_cpu(Some(cpu));
    }
    let mut mem: LinuxMemory = (*res.memory()).unwrap_or_default();
    let mut mem_set = false;
    set!(mem, a.memory, set_limit, mem_set);
    set!(mem, a.memory_reservation, set_reservation, mem_set);
    set!(mem, a.memory_swap, set_swap, mem_set);
    if mem_set {
        res.set_memory(Some(mem));
    }
    if let Some(limit) = a.pids_limit {
        let mut p = LinuxPids::default();
        p.set_limit(limit);
        res.set_pids(Some(p));
    }
    if let Some(w) = a.blkio_weight {
        let mut io = res.block_io().clone().unwrap_or_default();
        io.set_weight(Some(w));
        res.set_block_io(Some(io));
    }
    Ok(res)
}
