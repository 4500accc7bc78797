//! Command-line definitions: runc's verbs and flags.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Open Container Initiative runtime
///
/// crius-runc is an OCI runtime with runc's command line (cgroup v2 only): it runs containers packaged in the
/// OCI bundle format (a directory holding config.json and a root filesystem).
#[derive(Parser, Debug)]
#[command(name = "crius-runc", disable_version_flag = true)]
pub struct Cli {
    /// Print the version (with the commit, the runtime-spec version and libseccomp's).
    #[arg(short = 'v', long)]
    pub version: bool,
    /// Directory for container state (tmpfs recommended).
    #[arg(
        long,
        global = true,
        default_value = "/run/crius-runc",
        env = "CRIUS_RUNC_ROOT"
    )]
    pub root: PathBuf,
    /// Write the runtime's log to this file (errors, warnings, and with --debug each step).
    #[arg(long, global = true)]
    pub log: Option<PathBuf>,
    /// Format of the log file.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Containers' cgroups are systemd scopes: cgroupsPath is slice:prefix:name (default system.slice:crius:ID).
    #[arg(long, global = true)]
    pub systemd_cgroup: bool,
    /// Log each step at level debug (to --log, else to stderr).
    #[arg(long, global = true)]
    pub debug: bool,
    /// The CRIU binary checkpoint and restore run.
    #[arg(long, global = true, default_value = "criu")]
    pub criu: PathBuf,
    /// Accepted for compatibility (rootless mode is detected from the config).
    #[arg(long, global = true)]
    pub rootless: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Log file format.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum LogFormat {
    /// `time=... level=... msg=...`
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format of list and ps.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table for humans.
    Table,
    /// JSON.
    Json,
}

/// Options shared by create and run.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Container id.
    pub id: String,
    /// Path to the bundle directory (holding config.json).
    #[arg(short, long, default_value = ".")]
    pub bundle: PathBuf,
    /// File to write the container's init pid to.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Unix socket that receives the pty master fd when process.terminal is true.
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Accepted for compatibility (pivot_root is always used).
    #[arg(long)]
    pub no_pivot: bool,
    /// Accepted for compatibility (no session keyring is created).
    #[arg(long)]
    pub no_new_keyring: bool,
    /// Pass this many extra fds (from 3) to the container; every other fd above stderr is closed.
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a container: set it up and leave its process waiting for `start`.
    Create(CreateArgs),
    /// Start a created container.
    Start {
        /// Container id.
        id: String,
    },
    /// Create and start a container; without --detach, wait for it, then delete it and exit with its code.
    Run {
        #[command(flatten)]
        create: CreateArgs,
        /// Return once the container runs.
        #[arg(short, long)]
        detach: bool,
        /// Keep the container's state after it exits.
        #[arg(long)]
        keep: bool,
    },
    /// Print the OCI state of a container as JSON.
    State {
        /// Container id.
        id: String,
    },
    /// Send a signal (default SIGTERM; 0 checks the process exists) to a container's init process.
    Kill {
        /// Container id.
        id: String,
        /// Signal name (KILL, SIGKILL) or number.
        #[arg(default_value = "SIGTERM")]
        signal: String,
        /// Send the signal to every process of the container.
        #[arg(short, long)]
        all: bool,
    },
    /// Delete a stopped (or created) container.
    Delete {
        /// Container id.
        id: String,
        /// Kill a running container first; no error if it does not exist.
        #[arg(short, long)]
        force: bool,
    },
    /// Run a new process in a running container.
    Exec(ExecArgs),
    /// Change a running container's cgroup limits live.
    Update(UpdateArgs),
    /// List the processes of a container.
    Ps {
        /// Container id.
        id: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Options passed to ps(1) for the table format.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        ps_args: Vec<String>,
    },
    /// Freeze every process of a container.
    Pause {
        /// Container id.
        id: String,
    },
    /// Thaw a paused container.
    Resume {
        /// Container id.
        id: String,
    },
    /// Print resource statistics of a container.
    Events {
        /// Container id.
        id: String,
        /// Print statistics once and exit.
        #[arg(long)]
        stats: bool,
        /// Interval between statistics, e.g. 5s or 500ms.
        #[arg(long, default_value = "5s")]
        interval: String,
    },
    /// Print what this runtime supports, as JSON (OCI runtime features).
    Features,
    /// List containers.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Print ids only.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Checkpoint a running container with CRIU (it is removed afterwards unless --leave-running).
    Checkpoint(CheckpointArgs),
    /// Restore a container from a previous checkpoint (CRIU's images).
    Restore(RestoreArgs),
    /// Write a default config.json (busybox-ready, `sh` on a terminal) into the current directory or --bundle.
    Spec {
        /// Directory to write config.json to.
        #[arg(short, long, default_value = ".")]
        bundle: PathBuf,
    },
}

/// exec's options (as runc's).
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Container id.
    pub id: String,
    /// The command and its arguments (unless --process is given).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// A JSON file describing the process (OCI `process` object).
    #[arg(short, long)]
    pub process: Option<PathBuf>,
    /// Return once the process runs.
    #[arg(short, long)]
    pub detach: bool,
    /// File to write the process's pid to.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Unix socket that receives the pty master fd (with --tty).
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Allocate a pseudo-terminal.
    #[arg(short, long)]
    pub tty: bool,
    /// Working directory in the container.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Set an environment variable (NAME=value), repeatable.
    #[arg(short, long)]
    pub env: Vec<String>,
    /// User as `uid[:gid]`.
    #[arg(short, long)]
    pub user: Option<String>,
    /// Additional gid, repeatable.
    #[arg(short = 'g', long)]
    pub additional_gids: Vec<u32>,
    /// Add a capability (CAP_NAME), repeatable.
    #[arg(short, long)]
    pub cap: Vec<String>,
    /// Set no_new_privileges.
    #[arg(long)]
    pub no_new_privs: bool,
    /// Pass this many extra fds (from 3) to the process; every other fd above stderr is closed.
    #[arg(long, default_value_t = 0)]
    pub preserve_fds: u32,
    /// Run it in a paused container too (it starts frozen, with the others).
    #[arg(long)]
    pub ignore_paused: bool,
    /// Run it in this cgroup below the container's: `path`, or `controller[,controller]:path` (one tree
    /// on cgroup v2, so every entry must name the same path).
    #[arg(long)]
    pub cgroup: Vec<String>,
    /// The --process file's text, read before the descriptors beyond --preserve-fds are closed (so that
    /// `-p /dev/fd/N` of a shell's process substitution can be read).
    #[arg(skip)]
    pub process_text: Option<String>,
}

/// update's options (as runc's).
#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Container id.
    pub id: String,
    /// OCI LinuxResources JSON from a file, or `-` for stdin.
    #[arg(short, long)]
    pub resources: Option<PathBuf>,
    /// CPU CFS period (µs).
    #[arg(long)]
    pub cpu_period: Option<u64>,
    /// CPU CFS quota (µs; -1 = unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub cpu_quota: Option<i64>,
    /// CPU shares (converted to cpu.weight).
    #[arg(long)]
    pub cpu_share: Option<u64>,
    /// CPUs to use (cpuset).
    #[arg(long)]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes to use (cpuset).
    #[arg(long)]
    pub cpuset_mems: Option<String>,
    /// Memory limit in bytes, or with a unit as runc takes it (`50M`, `1.5g`, `512KiB`; -1 = unlimited).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_size)]
    pub memory: Option<i64>,
    /// Memory reservation (memory.low), as --memory.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_size)]
    pub memory_reservation: Option<i64>,
    /// Memory plus swap limit, as --memory (-1 = unlimited).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_size)]
    pub memory_swap: Option<i64>,
    /// Maximum number of pids (-1 or 0 = unlimited).
    #[arg(long, allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    /// Block IO weight (10-1000).
    #[arg(long)]
    pub blkio_weight: Option<u16>,
}

/// The CRIU options checkpoint and restore share (as runc's).
#[derive(Args, Debug)]
pub struct CriuArgs {
    /// Path of CRIU's image files (default: ./checkpoint).
    #[arg(long)]
    pub image_path: Option<PathBuf>,
    /// Path for CRIU's work files and logs (default: the image path).
    #[arg(long)]
    pub work_path: Option<PathBuf>,
    /// Allow open TCP connections.
    #[arg(long)]
    pub tcp_established: bool,
    /// Allow external unix sockets.
    #[arg(long)]
    pub ext_unix_sk: bool,
    /// Allow shell jobs.
    #[arg(long)]
    pub shell_job: bool,
    /// Handle file locks, for safety.
    #[arg(long)]
    pub file_locks: bool,
    /// cgroups mode: 'soft' (default), 'full', 'strict' or 'ignore'.
    #[arg(long)]
    pub manage_cgroups_mode: Option<String>,
    /// Create a namespace, but do not restore its properties (network only).
    #[arg(long)]
    pub empty_ns: Vec<String>,
    /// Enable auto deduplication of memory images.
    #[arg(long)]
    pub auto_dedup: bool,
    /// Use userfaultfd to lazily restore memory pages (not supported: refused).
    #[arg(long)]
    pub lazy_pages: bool,
}

/// checkpoint's options (as runc's).
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    /// Container id.
    pub id: String,
    #[command(flatten)]
    pub criu: CriuArgs,
    /// Path of the previous CRIU images (a pre-dump's), relative to the image path.
    #[arg(long)]
    pub parent_path: Option<PathBuf>,
    /// Leave the process running after checkpointing.
    #[arg(long)]
    pub leave_running: bool,
    /// Dump the container's memory only, leaving it running.
    #[arg(long)]
    pub pre_dump: bool,
    /// CRIU writes \0 to this fd once lazy-pages is ready (not supported: refused).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub status_fd: i32,
    /// ADDRESS:PORT of the page server (not supported: refused).
    #[arg(long)]
    pub page_server: Option<String>,
}

/// restore's options (as runc's).
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// Container id.
    pub id: String,
    #[command(flatten)]
    pub criu: CriuArgs,
    /// Path to the bundle directory (holding config.json).
    #[arg(short, long, default_value = ".")]
    pub bundle: PathBuf,
    /// Unix socket that receives the restored terminal's new pty master.
    #[arg(long)]
    pub console_socket: Option<PathBuf>,
    /// Detach from the container's process.
    #[arg(short, long)]
    pub detach: bool,
    /// File to write the process id to.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Do not become the subreaper of the restored processes.
    #[arg(long)]
    pub no_subreaper: bool,
    /// Accepted for compatibility (CRIU restores into the rootfs with pivot_root).
    #[arg(long)]
    pub no_pivot: bool,
    /// An LSM profile for the restored processes, TYPE:NAME.
    #[arg(long)]
    pub lsm_profile: Option<String>,
    /// An LSM mount context for the restore.
    #[arg(long)]
    pub lsm_mount_context: Option<String>,
}

/// A size in bytes as runc's `update` reads it: `-1`, or a number (a fraction allowed) with an optional space
/// and binary unit `k`, `m`, `g`, `t`, `p` (either case, optionally followed by `i` and `b`/`B`).
pub fn parse_size(s: &str) -> Result<i64, String> {
    if s == "-1" {
        return Ok(-1);
    }
    let bad = || format!("invalid size {s:?}: expected bytes such as 67108864, 64M or 1.5g");
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: f64 = num.parse().map_err(|_| bad())?;
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(bad()),
    };
    Ok((num * (1u64 << shift) as f64) as i64)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_runc_reads_them() {
        use super::parse_size;
        for (s, want) in [
            ("-1", -1),
            ("67108864", 67108864),
            ("50M", 50 << 20),
            ("50m", 50 << 20),
            ("1.5g", 3 << 29),
            ("512KiB", 512 << 10),
            ("10 MB", 10 << 20),
            ("2b", 2),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for s in ["", "M", "5x", "-2", "1e3"] {
            assert!(parse_size(s).is_err(), "{s}");
        }
    }
}
