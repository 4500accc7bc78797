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

mod cli;
mod default_spec;
mod sealed;

use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use crius_oci::exec::ExecOptions;
use crius_oci::{CreateOptions, Error, Result, err, ops};
use oci_spec::runtime::{LinuxMemory, LinuxPids, LinuxResources, Process};

use cli::{Cli, Command, Format};

fn main() -> ExitCode {
    // The shim's direct exec (crius_oci::direct): a hidden action, before any parsing.
    if std::env::args_os().nth(1).as_deref() == Some(std::ffi::OsStr::new(crius_oci::direct::ARG)) {
        if let Err(e) = sealed::ensure() {
            eprintln!("crius-runc: protecting the runtime binary (CVE-2019-5736): {e}");
            return ExitCode::FAILURE;
        }
        return ExitCode::from(crius_oci::direct::serve() as u8);
    }
    let cli = Cli::parse();
    let preserve = match &cli.command {
        Command::Create(a) | Command::Run { create: a, .. } => Some(a.preserve_fds),
        Command::Exec(a) => Some(a.preserve_fds),
        _ => None,
    };
    if let Some(preserve) = preserve {
        if let Err(e) = sealed::ensure() {
            eprintln!("crius-runc: protecting the runtime binary (CVE-2019-5736): {e}");
            return ExitCode::FAILURE;
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
    crius_oci::log::init(cli.log.clone(), format);
    match run(cli) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            crius_oci::log::write("error", &e.to_string());
            eprintln!("crius-runc: {e}");
            ExitCode::FAILURE
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
    let systemd = cli.systemd_cgroup;
    match cli.command {
        Command::Create(a) => {
            crius_oci::create(root, &a.id, &a.bundle, &create_opts(&a, systemd)?)?;
        }
        Command::Start { id } => ops::start(root, &id)?,
        Command::Run { create, detach, keep } => return run_container(root, &create, detach, keep, systemd),
        Command::State { id } => print_json(&crius_oci::Record::load(root, &id)?.oci_state(root))?,
        Command::Kill { id, signal, all } => ops::kill(root, &id, ops::parse_signal(&signal)?, all)?,
        Command::Delete { id, force } => ops::delete(root, &id, force)?,
        Command::Exec(a) => return exec(root, a),
        Command::Update(a) => ops::update(root, &a.id, &update_resources(&a)?)?,
        Command::Ps { id, format, ps_args } => ps(root, &id, format, &ps_args)?,
        Command::Pause { id } => ops::freeze(root, &id, true)?,
        Command::Resume { id } => ops::freeze(root, &id, false)?,
        Command::Events { id, stats, interval } => events(root, &id, stats, &interval)?,
        Command::Features => print_json(&default_spec::features())?,
        Command::List { format, quiet } => list(root, format, quiet)?,
        Command::Spec { bundle } => {
            let path = bundle.join("config.json");
            if path.exists() {
                return Err(err!("{} already exists", path.display()));
            }
            std::fs::write(&path, default_spec::config())
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

/// Reads a JSON document from a file, or from stdin for `-`; errors name the file and the field.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| err!("reading stdin: {e}"))?;
        s
    } else {
        std::fs::read_to_string(path).map_err(|e| err!("reading {}: {e}", path.display()))?
    };
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de)
        .map_err(|e| Error::config(path.display(), e.path().to_string(), e.inner().to_string()))
}

fn exec(root: &Path, a: cli::ExecArgs) -> Result<i32> {
    let process: Process = match &a.process {
        Some(path) => read_json(path)?,
        None => process_from_flags(root, &a)?,
    };
    let opts = ExecOptions {
        process,
        detach: a.detach,
        pid_file: a.pid_file,
        console_socket: a.console_socket,
        preserve_fds: a.preserve_fds,
    };
    crius_oci::exec::exec(root, &a.id, &opts)
}

/// runc's plain-args exec: the container's own process settings with the command and flags applied.
fn process_from_flags(root: &Path, a: &cli::ExecArgs) -> Result<Process> {
    if a.command.is_empty() {
        return Err(err!("exec needs a command (or --process)"));
    }
    let rec = crius_oci::Record::load(root, &a.id)?;
    let mut p = rec.spec.process().clone().unwrap_or_default();
    p.set_args(Some(a.command.clone()));
    p.set_terminal(Some(a.tty));
    if let Some(cwd) = &a.cwd {
        p.set_cwd(cwd.clone());
    }
    let mut env = p.env().clone().unwrap_or_default();
    for kv in &a.env {
        let name = kv.split('=').next().unwrap_or_default();
        env.retain(|e| e.split('=').next() != Some(name));
        env.push(kv.clone());
    }
    p.set_env(Some(env));
    let mut user = p.user().clone();
    if let Some(u) = &a.user {
        let (uid, gid) = u.split_once(':').unwrap_or((u, "0"));
        user.set_uid(
            uid.parse()
                .map_err(|_| err!("--user {u:?}: expected uid[:gid]"))?,
        );
        user.set_gid(
            gid.parse()
                .map_err(|_| err!("--user {u:?}: expected uid[:gid]"))?,
        );
    }
    if !a.additional_gids.is_empty() {
        user.set_additional_gids(Some(a.additional_gids.clone()));
    }
    p.set_user(user);
    if !a.cap.is_empty() {
        let mut caps = p.capabilities().clone().unwrap_or_default();
        for name in &a.cap {
            let c: oci_spec::runtime::Capability =
                serde_json::from_value(serde_json::json!(name)).map_err(|e| err!("--cap {name}: {e}"))?;
            let add = |s: &Option<oci_spec::runtime::Capabilities>| {
                let mut s = s.clone().unwrap_or_default();
                s.insert(c);
                Some(s)
            };
            caps.set_bounding(add(caps.bounding()));
            caps.set_effective(add(caps.effective()));
            caps.set_permitted(add(caps.permitted()));
        }
        p.set_capabilities(Some(caps));
    }
    if a.no_new_privs {
        p.set_no_new_privileges(Some(true));
    }
    Ok(p)
}

fn update_resources(a: &cli::UpdateArgs) -> Result<LinuxResources> {
    let mut res: LinuxResources = match &a.resources {
        Some(path) => read_json(path)?,
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

fn ps(root: &Path, id: &str, format: Format, args: &[String]) -> Result<()> {
    let pids = ops::pids(root, id)?;
    if format == Format::Json {
        return print_json(&pids);
    }
    let args: Vec<String> = if args.is_empty() {
        vec!["-ef".into()]
    } else {
        args.to_vec()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .output()
        .map_err(|e| err!("running ps: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Ok(()) };
    let col = header
        .split_whitespace()
        .position(|h| h == "PID")
        .ok_or_else(|| err!("ps output has no PID column"))?;
    println!("{header}");
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| pids.contains(&p)) {
            println!("{line}");
        }
    }
    Ok(())
}

fn parse_interval(s: &str) -> Result<std::time::Duration> {
    let bad = || err!("--interval {s:?}: expected a duration such as 5s or 500ms");
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(std::time::Duration::from_millis(n)),
        "s" => Ok(std::time::Duration::from_secs(n)),
        "m" => Ok(std::time::Duration::from_secs(n * 60)),
        _ => Err(bad()),
    }
}

fn events(root: &Path, id: &str, once: bool, interval: &str) -> Result<()> {
    let every = parse_interval(interval)?;
    loop {
        let stats = ops::stats(root, id)?;
        println!(
            "{}",
            serde_json::json!({"type": "stats", "id": id, "data": stats})
        );
        if once {
            return Ok(());
        }
        std::thread::sleep(every);
    }
}

fn list(root: &Path, format: Format, quiet: bool) -> Result<()> {
    let all = ops::list(root)?;
    if quiet {
        for (r, _) in &all {
            println!("{}", r.id);
        }
        return Ok(());
    }
    if format == Format::Json {
        let v: Vec<_> = all.iter().map(|(r, _)| r.oci_state(root)).collect();
        return print_json(&v);
    }
    println!(
        "{:<20} {:<8} {:<10} {:<40} {:<32} OWNER",
        "ID", "PID", "STATUS", "BUNDLE", "CREATED"
    );
    for (r, s) in &all {
        let pid = if *s == crius_oci::Status::Stopped {
            0
        } else {
            r.pid
        };
        println!(
            "{:<20} {:<8} {:<10} {:<40} {:<32} root",
            r.id,
            pid,
            s,
            r.bundle.display(),
            r.created
        );
    }
    Ok(())
}
