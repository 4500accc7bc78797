//! criusd: the crius daemon. It serves the CRI (ImageService; RuntimeService: status, pod sandboxes and the
//! container lifecycle so far) and crius's own API (`crius.images.v1`) on one unix socket, from a config file with a flag for every
//! key.

mod around;
mod authority;
mod config;
mod deadline;
mod memory;
mod metrics;
mod serve;

use std::path::PathBuf;

use clap::Parser;

use config::{Config, DEFAULT_CONFIG};

/// criusd — a container runtime for Kubernetes: serves the CRI on a unix socket.
///
/// Settings come from the config file (`--print-config` shows every key, its meaning and default),
/// and each flag overrides its key.
#[derive(Debug, Parser)]
#[command(name = "criusd", version)]
struct Cli {
    /// Config file; a missing default file means built-in defaults, a missing given file is an error.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the effective configuration (a valid, commented config file) and exit.
    #[arg(long)]
    print_config: bool,
    /// Persistent data directory (images, layers, snapshots) [config: root; default /var/lib/crius].
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Runtime state directory [config: state; default /run/crius].
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
    /// Unix socket to serve on [config: listen; default /run/crius/crius.sock].
    #[arg(long, value_name = "SOCKET")]
    listen: Option<PathBuf>,
    /// Group of the socket, a name or a number; its members may use criusd, which is root-equivalent
    /// [config: listen_group; default root's group].
    #[arg(long, value_name = "GROUP")]
    listen_group: Option<String>,
    /// Pull HOST's images from MIRROR instead (`docker.io=http://127.0.0.1:5000`); repeatable
    /// [config: image.mirrors].
    #[arg(long = "registry-mirror", value_name = "HOST=MIRROR")]
    registry_mirror: Vec<String>,
    /// Reach HOST (host or host:port) over plain http; repeatable [config: image.insecure_registries].
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registry: Vec<String>,
    /// Report this image pinned (kubelet never garbage-collects it); repeatable [config: image.pinned_images].
    #[arg(long = "pinned-image", value_name = "IMAGE")]
    pinned_image: Vec<String>,
    /// CNI network configurations; the first file is the pod network [config: network.cni_conf_dir;
    /// default /etc/cni/net.d].
    #[arg(long, value_name = "DIR")]
    cni_conf_dir: Option<PathBuf>,
    /// A directory of CNI plugins; repeatable, replaces the configured list [config: network.cni_plugin_dirs;
    /// default /opt/cni/bin, /usr/lib/cni].
    #[arg(long = "cni-plugin-dir", value_name = "DIR")]
    cni_plugin_dir: Vec<PathBuf>,
    /// A directory of CDI spec files; repeatable (a later one overrides an earlier one), replaces the
    /// configured list [config: cdi.spec_dirs; default /etc/cdi, /var/run/cdi].
    #[arg(long = "cdi-spec-dir", value_name = "DIR")]
    cdi_spec_dir: Vec<PathBuf>,
    /// Host NRI plugins [config: nri.enable; default: off].
    #[arg(long)]
    nri: bool,
    /// The socket NRI plugins connect to [config: nri.socket_path; default /var/run/nri/nri.sock].
    #[arg(long, value_name = "SOCKET")]
    nri_socket_path: Option<PathBuf>,
    /// Where pre-launched NRI plugins are [config: nri.plugin_path; default /opt/nri/plugins].
    #[arg(long, value_name = "DIR")]
    nri_plugin_path: Option<PathBuf>,
    /// Where their configs are [config: nri.plugin_config_path; default /etc/nri/conf.d].
    #[arg(long, value_name = "DIR")]
    nri_plugin_config_path: Option<PathBuf>,
    /// How long an NRI plugin may take to register [config: nri.plugin_registration_timeout; default 5s].
    #[arg(long, value_name = "DURATION")]
    nri_plugin_registration_timeout: Option<String>,
    /// How long an NRI plugin may take to answer an event [config: nri.plugin_request_timeout; default 2s].
    #[arg(long, value_name = "DURATION")]
    nri_plugin_request_timeout: Option<String>,
    /// The shim binary, one process per pod [config: runtime.shim; default containerd-shim-crius-v2 next to
    /// criusd, else on PATH].
    #[arg(long, value_name = "PATH")]
    shim: Option<PathBuf>,
    /// cgroupfs or systemd: containers' cgroups as directories or as systemd scopes; kubelet's cgroupDriver
    /// must match [config: runtime.cgroup_driver; default cgroupfs].
    #[arg(long, value_name = "DRIVER")]
    cgroup_driver: Option<String>,
    /// Every pod's cgroup_parent must lie within this cgroup (a path under cgroupfs, a slice under systemd;
    /// `/`: any) [config: runtime.cgroup_parent_root; default /].
    #[arg(long, value_name = "CGROUP")]
    cgroup_parent_root: Option<String>,
    /// Execs in crius-runc's containers start without a `crius-runc exec` command (the shim's direct exec)
    /// [config: runtime.direct_exec; default true].
    #[arg(long, value_name = "BOOL")]
    direct_exec: Option<bool>,
    /// error, warn, info, debug, trace, or a tracing filter [config: log_level; default info].
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// text or json [config: log_format; default text].
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Serve Prometheus metrics at http://ADDRESS/metrics (IP:PORT, e.g. 127.0.0.1:9090) [config:
    /// metrics_address; default: off].
    #[arg(long, value_name = "ADDRESS")]
    metrics_address: Option<String>,
    /// The streaming server's address [config: stream.address; default 127.0.0.1].
    #[arg(long, value_name = "IP")]
    stream_address: Option<String>,
    /// The streaming server's port, 0 for a free one [config: stream.port; default 0].
    #[arg(long, value_name = "PORT")]
    stream_port: Option<u16>,
    /// Seconds a stream may be idle before it is closed, 0 for never [config: stream.idle_timeout; default
    /// 14400, 4 h].
    #[arg(long, value_name = "SECONDS")]
    stream_idle_timeout: Option<u64>,
}

impl Cli {
    /// The file's configuration with the flags applied.
    fn config(&self) -> Result<Config, String> {
        let (path, explicit) = match &self.config {
            Some(p) => (p.clone(), true),
            None => (PathBuf::from(DEFAULT_CONFIG), false),
        };
        let mut c = Config::load(&path, explicit)?;
        if let Some(v) = &self.root {
            c.root = v.clone();
        }
        if let Some(v) = &self.state {
            c.state = v.clone();
        }
        if let Some(v) = &self.listen {
            c.listen = v.clone();
        }
        if let Some(v) = &self.listen_group {
            c.listen_group = v.clone();
        }
        if let Some(v) = &self.cni_conf_dir {
            c.network.cni_conf_dir = v.clone();
        }
        if !self.cni_plugin_dir.is_empty() {
            c.network.cni_plugin_dirs = self.cni_plugin_dir.clone();
        }
        if !self.cdi_spec_dir.is_empty() {
            c.cdi.spec_dirs = self.cdi_spec_dir.clone();
        }
        c.nri.enable |= self.nri;
        if let Some(v) = &self.nri_socket_path {
            c.nri.socket_path = v.clone();
        }
        if let Some(v) = &self.nri_plugin_path {
            c.nri.plugin_path = v.clone();
        }
        if let Some(v) = &self.nri_plugin_config_path {
            c.nri.plugin_config_path = v.clone();
        }
        if let Some(v) = &self.nri_plugin_registration_timeout {
            c.nri.plugin_registration_timeout = v.clone();
        }
        if let Some(v) = &self.nri_plugin_request_timeout {
            c.nri.plugin_request_timeout = v.clone();
        }
        if let Some(v) = &self.shim {
            c.runtime.shim = v.clone();
        }
        if let Some(v) = &self.cgroup_driver {
            c.runtime.cgroup_driver = v.clone();
        }
        if let Some(v) = &self.cgroup_parent_root {
            c.runtime.cgroup_parent_root = v.clone();
        }
        if let Some(v) = self.direct_exec {
            c.runtime.direct_exec = v;
        }
        if let Some(v) = &self.log_level {
            c.log_level = v.clone();
        }
        if let Some(v) = &self.log_format {
            c.log_format = v.clone();
        }
        if let Some(v) = &self.metrics_address {
            c.metrics_address = v.clone();
        }
        if let Some(v) = &self.stream_address {
            c.stream.address = v.clone();
        }
        if let Some(v) = self.stream_port {
            c.stream.port = v;
        }
        if let Some(v) = self.stream_idle_timeout {
            c.stream.idle_timeout = v;
        }
        for m in &self.registry_mirror {
            let (host, mirror) = m
                .split_once('=')
                .ok_or_else(|| format!("--registry-mirror {m:?}: use HOST=MIRROR"))?;
            c.image.mirrors.insert(host.to_string(), mirror.to_string());
        }
        c.image
            .insecure_registries
            .extend(self.insecure_registry.iter().cloned());
        c.image.pinned_images.extend(self.pinned_image.iter().cloned());
        c.check()?;
        Ok(c)
    }
}

fn main() -> std::process::ExitCode {
    memory::limit_arenas();
    // Before any thread: the soft limit criusd started with is handed down to the shims, which put it back for
    // the containers (crius_common::nofile).
    let nofile = crius_common::nofile::raise();
    if let Ok((soft, _)) = &nofile {
        // SAFETY: criusd is single-threaded here; nothing reads the environment concurrently.
        unsafe { std::env::set_var(crius_common::nofile::ENV, soft.to_string()) };
    }
    let cli = Cli::parse();
    let config = match cli.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("criusd: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if cli.print_config {
        print!("{}", config.render());
        return std::process::ExitCode::SUCCESS;
    }
    if let Err(e) = serve::init_logging(&config) {
        eprintln!("criusd: {e}");
        return std::process::ExitCode::from(2);
    }
    match nofile {
        Ok((was, (soft, hard))) => tracing::debug!(was, soft, hard, "RLIMIT_NOFILE raised"),
        Err(e) => tracing::warn!("{e}"),
    }
    match serve::run(config) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("criusd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
