//! criusd's configuration: `/etc/crius/config.toml`, then flags on top. Every key, its meaning and its default
//! are in [`Config::render`], which `criusd --print-config` prints (a valid config file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod cdi;
pub mod nri;
pub mod pods;
pub mod runtimes;
pub mod storage;
pub mod stream;

pub use storage::StorageSection;
pub use stream::StreamSection;

/// Where the config file is looked for when `--config` is not given (a missing default file is fine).
pub const DEFAULT_CONFIG: &str = "/etc/crius/config.toml";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Persistent data: images, layers, snapshots.
    pub root: PathBuf,
    /// Runtime state that does not survive a reboot.
    pub state: PathBuf,
    /// The unix socket criusd serves the CRI and its own API on.
    pub listen: PathBuf,
    /// Mode of that socket (octal).
    pub listen_mode: u32,
    /// The socket's group (a name or a number); empty: root's group.
    pub listen_group: String,
    /// error, warn, info, debug or trace (or a tracing filter such as `info,crius_cri=debug`).
    pub log_level: String,
    /// text or json.
    pub log_format: String,
    /// Where `/metrics` (Prometheus) is served, `host:port`; empty: nowhere.
    pub metrics_address: String,
    /// Image settings.
    pub image: ImageSection,
    /// Pod network settings.
    pub network: NetworkSection,
    /// How containers are run.
    pub runtime: RuntimeSection,
    /// The streaming server behind Exec, Attach and PortForward.
    pub stream: StreamSection,
    /// Runtime handlers beyond the default, crius-runc (`[runtimes.NAME]`).
    pub runtimes: runtimes::RuntimesSection,
    /// The pod service.
    pub pods: pods::PodsSection,
    /// Where containers' writable layers live.
    pub storage: StorageSection,
    /// Where CDI spec files are.
    pub cdi: cdi::CdiSection,
    /// Whether and how NRI plugins are hosted.
    pub nri: nri::NriSection,
}

/// The `[runtime]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeSection {
    /// The shim binary (one process per pod); empty: `containerd-shim-crius-v2` next to criusd, else on PATH.
    pub shim: PathBuf,
    /// `cgroupfs` (the default) or `systemd`: how containers' cgroups are made, as kubelet's
    /// `cgroupDriver` must say too (RuntimeConfig tells it).
    pub cgroup_driver: String,
    /// The cgroup every pod's `cgroup_parent` must lie within (a path under cgroupfs, a slice under
    /// systemd); `/`: any.
    pub cgroup_parent_root: String,
    /// Execs in containers run by crius-runc start without a `crius-runc exec` command: the shim has the
    /// runtime's sealed copy enter the container directly (other runtimes keep `<runtime> exec`).
    pub direct_exec: bool,
}

impl Default for RuntimeSection {
    fn default() -> RuntimeSection {
        RuntimeSection {
            shim: PathBuf::new(),
            cgroup_driver: "cgroupfs".into(),
            cgroup_parent_root: "/".into(),
            direct_exec: true,
        }
    }
}

impl RuntimeSection {
    /// The cgroup driver it names.
    pub fn cgroup_driver(&self) -> Result<crius_cri::cgroup_driver::Driver, String> {
        match self.cgroup_driver.as_str() {
            "" => Ok(Default::default()),
            s => s.parse().map_err(|e| format!("[runtime] {e}")),
        }
    }

    /// The root every pod's `cgroup_parent` must lie within, in the driver's form.
    pub fn cgroup_parent_root(&self) -> Result<crius_cri::cgroup_driver::ParentRoot, String> {
        crius_cri::cgroup_driver::ParentRoot::new(self.cgroup_driver()?, &self.cgroup_parent_root)
            .map_err(|e| format!("[runtime] {e}"))
    }
}

/// The `[network]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSection {
    /// CNI network configurations; the first file (lexical order) is the pod network.
    pub cni_conf_dir: PathBuf,
    /// Directories searched for CNI plugin binaries, in order.
    pub cni_plugin_dirs: Vec<PathBuf>,
    /// Seconds one CNI plugin run may take before it is killed and the call fails.
    pub cni_plugin_timeout: u64,
}

impl Default for NetworkSection {
    fn default() -> NetworkSection {
        NetworkSection {
            cni_conf_dir: "/etc/cni/net.d".into(),
            cni_plugin_dirs: crius_cri::network::cni::default_plugin_dirs(),
            cni_plugin_timeout: crius_cri::network::cni::DEFAULT_PLUGIN_TIMEOUT.as_secs(),
        }
    }
}

/// The `[image]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageSection {
    /// Registries reached over plain http (`host` or `host:port`); loopback registries always are.
    pub insecure_registries: Vec<String>,
    /// Images reported pinned to kubelet (never garbage-collected by it), e.g. a sandbox image.
    pub pinned_images: Vec<String>,
    /// Registry host → mirror (`host:port`, or `http://host:port` for a plain-http mirror).
    pub mirrors: BTreeMap<String, String>,
    /// The most bytes of uncompressed tar one layer (or an archive imported) may hold.
    pub max_layer_bytes: u64,
    /// The most entries one layer (or an archive imported) may hold.
    pub max_layer_entries: u64,
    /// Seconds a pull's download may go without receiving a byte before it is cancelled; 0: never.
    pub pull_progress_timeout: u64,
    /// How many blobs of one pull download at once.
    pub max_concurrent_downloads: usize,
    /// A signature policy (containers-policy.json) every pull must satisfy; empty: none.
    pub signature_policy: PathBuf,
}

impl Default for ImageSection {
    fn default() -> ImageSection {
        let limits = crius_image::gate::Limits::default();
        ImageSection {
            insecure_registries: Vec::new(),
            pinned_images: Vec::new(),
            mirrors: BTreeMap::new(),
            max_layer_bytes: limits.max_bytes,
            max_layer_entries: limits.max_entries,
            pull_progress_timeout: crius_image::pull::DEFAULT_PROGRESS_TIMEOUT.as_secs(),
            max_concurrent_downloads: crius_image::pull::DEFAULT_CONCURRENT_DOWNLOADS,
            signature_policy: PathBuf::new(),
        }
    }
}

impl ImageSection {
    /// The caps on each layer unpacked and each archive imported.
    pub fn limits(&self) -> crius_image::gate::Limits {
        crius_image::gate::Limits {
            max_bytes: self.max_layer_bytes,
            max_entries: self.max_layer_entries,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            root: "/var/lib/crius".into(),
            state: "/run/crius".into(),
            listen: crius_api::DEFAULT_SOCKET.into(),
            listen_mode: 0o660,
            listen_group: String::new(),
            log_level: "info".into(),
            log_format: "text".into(),
            metrics_address: String::new(),
            image: ImageSection::default(),
            network: NetworkSection::default(),
            runtime: RuntimeSection::default(),
            stream: StreamSection::default(),
            runtimes: Default::default(),
            pods: Default::default(),
            storage: Default::default(),
            cdi: Default::default(),
            nri: Default::default(),
        }
    }
}

fn toml_value<T: Serialize>(v: &T) -> String {
    toml::Value::try_from(v)
        .map(|v| v.to_string())
        .unwrap_or_else(|e| format!("\"<{e}>\""))
}

impl Config {
    /// Reads `path`; when `explicit` is false a missing file means the defaults.
    pub fn load(path: &Path, explicit: bool) -> Result<Config, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(Config::default()),
            Err(e) => return Err(format!("reading config {}: {e}", path.display())),
        };
        toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// Checks values a flag or file may have got wrong.
    pub fn check(&self) -> Result<(), String> {
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(format!("log_format {:?}: use text or json", self.log_format));
        }
        if self.listen_mode > 0o777 {
            return Err(format!("listen_mode {:o}: not a file mode", self.listen_mode));
        }
        for (p, what) in [
            (&self.root, "root"),
            (&self.state, "state"),
            (&self.listen, "listen"),
        ] {
            if !p.is_absolute() {
                return Err(format!("{what} {}: must be an absolute path", p.display()));
            }
        }
        if !self.network.cni_conf_dir.is_absolute() {
            return Err(format!(
                "cni_conf_dir {}: must be an absolute path",
                self.network.cni_conf_dir.display()
            ));
        }
        if let Some(d) = self.network.cni_plugin_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(format!("cni_plugin_dirs {}: must be absolute paths", d.display()));
        }
        if self.network.cni_plugin_timeout == 0 {
            return Err("cni_plugin_timeout: must be at least 1 (seconds)".into());
        }
        self.stream_config()?;
        self.storage.check()?;
        self.cdi.check()?;
        self.nri.check()?;
        self.metrics_address()?;
        let driver = self.runtime.cgroup_driver()?;
        let parents = self.runtime.cgroup_parent_root()?;
        if let Some(pods) = self.pods.cgroup_root(driver)? {
            parents.check(driver, &pods).map_err(|e| {
                format!("[pods] cgroup_root: {e}; set [runtime] cgroup_parent_root to include it")
            })?;
        }
        if !self.listen_group.is_empty() {
            self.listen_gid()?;
        }
        runtimes::check(&self.runtimes)?;
        self.pods.pull_policy()?;
        if self.image.max_layer_bytes == 0 || self.image.max_layer_entries == 0 {
            return Err("[image] max_layer_bytes and max_layer_entries must be above 0".into());
        }
        if self.image.max_concurrent_downloads == 0 {
            return Err("[image] max_concurrent_downloads must be at least 1".into());
        }
        self.signature_policy()?;
        for (host, mirror) in &self.image.mirrors {
            if host.is_empty() || mirror_host(mirror).is_empty() {
                return Err(format!(
                    "mirror {host:?} = {mirror:?}: both sides must name a host"
                ));
            }
        }
        Ok(())
    }

    /// The gid of `listen_group` (a group name of /etc/group, or a number); None when it is empty.
    pub fn listen_gid(&self) -> Result<Option<u32>, String> {
        let g = self.listen_group.as_str();
        if g.is_empty() {
            return Ok(None);
        }
        if let Ok(n) = g.parse::<u32>() {
            return Ok(Some(n));
        }
        match nix::unistd::Group::from_name(g) {
            Ok(Some(group)) => Ok(Some(group.gid.as_raw())),
            Ok(None) => Err(format!("listen_group {g:?}: no such group (in /etc/group)")),
            Err(e) => Err(format!("listen_group {g:?}: looking it up: {e}")),
        }
    }

    /// The signature policy `[image] signature_policy` names, read (None when it names none).
    pub fn signature_policy(&self) -> Result<Option<std::sync::Arc<crius_image::policy::Policy>>, String> {
        let p = &self.image.signature_policy;
        if p.as_os_str().is_empty() {
            return Ok(None);
        }
        if !p.is_absolute() {
            return Err(format!(
                "[image] signature_policy {}: must be an absolute path",
                p.display()
            ));
        }
        crius_image::policy::Policy::load(p)
            .map(|p| Some(std::sync::Arc::new(p)))
            .map_err(|e| format!("[image] signature_policy: {e}"))
    }

    /// The image service's settings: a mirror given as `http://…` is also reached over plain http; the
    /// signature policy is read.
    pub fn image_config(&self) -> Result<crius_cri::ImageConfig, String> {
        let mut insecure = self.image.insecure_registries.clone();
        let mut mirrors = std::collections::HashMap::new();
        for (host, m) in &self.image.mirrors {
            let h = mirror_host(m).to_string();
            if m.starts_with("http://") && !insecure.contains(&h) {
                insecure.push(h.clone());
            }
            mirrors.insert(host.clone(), h);
        }
        Ok(crius_cri::ImageConfig {
            mirrors,
            insecure,
            pinned: self.image.pinned_images.clone(),
            pull_progress_timeout: (self.image.pull_progress_timeout > 0)
                .then(|| std::time::Duration::from_secs(self.image.pull_progress_timeout)),
            max_concurrent_downloads: self.image.max_concurrent_downloads,
            signature_policy: self.signature_policy()?,
        })
    }

    /// The address to serve `/metrics` on (None: metrics are off).
    pub fn metrics_address(&self) -> Result<Option<std::net::SocketAddr>, String> {
        if self.metrics_address.is_empty() {
            return Ok(None);
        }
        self.metrics_address.parse().map(Some).map_err(|_| {
            format!(
                "metrics_address {:?}: not an IP address and port (127.0.0.1:9090, [::1]:9090)",
                self.metrics_address
            )
        })
    }

    /// The streaming server's settings.
    pub fn stream_config(&self) -> Result<crius_stream::server::Config, String> {
        self.stream.server_config()
    }

    /// The shim binary to run pods with.
    pub fn shim(&self) -> PathBuf {
        if !self.runtime.shim.as_os_str().is_empty() {
            return self.runtime.shim.clone();
        }
        let next_to_us = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("containerd-shim-crius-v2")))
            .filter(|p| p.is_file());
        next_to_us.unwrap_or_else(|| "containerd-shim-crius-v2".into())
    }

    /// The runtime handlers pods pick from, each binary's features read once.
    pub fn handlers(&self) -> Result<crius_cri::handlers::Handlers, String> {
        runtimes::handlers(&self.runtimes, &self.shim())
    }

    /// The CNI setup pods get their network from.
    pub fn cni(&self) -> crius_cri::network::Cni {
        crius_cri::network::Cni {
            conf_dir: self.network.cni_conf_dir.clone(),
            plugin_dirs: self.network.cni_plugin_dirs.clone(),
            plugin_timeout: std::time::Duration::from_secs(self.network.cni_plugin_timeout),
        }
    }

    /// The configuration as a commented TOML file: every key with what it means and its default.
    pub fn render(&self) -> String {
        let d = Config::default();
        let mut out = String::from(
            "# criusd configuration (criusd --print-config). Flags override these keys; see criusd --help.\n\n",
        );
        let mut key = |doc: &str, name: &str, value: String, default: String| {
            out += &format!("# {doc}\n# default: {default}\n{name} = {value}\n\n");
        };
        key(
            "Persistent data: images, unpacked layers, container snapshots (--root); made 0700, root's alone.",
            "root",
            toml_value(&self.root),
            toml_value(&d.root),
        );
        key(
            "Runtime state, gone after a reboot (--state); made 0711 (a socket in it stays reachable), all in it 0700/0600.",
            "state",
            toml_value(&self.state),
            toml_value(&d.state),
        );
        key(
            "Unix socket for the CRI and crius's own API (--listen).",
            "listen",
            toml_value(&self.listen),
            toml_value(&d.listen),
        );
        key(
            "File mode of that socket; 0o660 lets root and the socket's group in.",
            "listen_mode",
            format!("0o{:o}", self.listen_mode),
            format!("0o{:o}", d.listen_mode),
        );
        key(
            "Group of that socket, a name or a number (--listen-group); empty: root's. Whoever can connect can run \
             privileged pods, mount host paths and join host namespaces: root-equivalent, as kubelet's runtime \
             socket is.",
            "listen_group",
            toml_value(&self.listen_group),
            toml_value(&d.listen_group),
        );
        key(
            "error, warn, info, debug, trace, or a tracing filter like \"info,crius_cri=debug\" (--log-level).",
            "log_level",
            toml_value(&self.log_level),
            toml_value(&d.log_level),
        );
        key(
            "Log lines as text or json, on stderr (--log-format).",
            "log_format",
            toml_value(&self.log_format),
            toml_value(&d.log_format),
        );
        key(
            "Serve Prometheus metrics at http://ADDRESS/metrics, as IP:port such as \"127.0.0.1:9090\"; empty: off \
             (--metrics-address). Plain http, no authentication: keep it on loopback or a trusted network.",
            "metrics_address",
            toml_value(&self.metrics_address),
            toml_value(&d.metrics_address),
        );
        out += "[image]\n";
        let mut key = |doc: &str, name: &str, value: String| {
            out += &format!("# {doc}\n# default: []\n{name} = {value}\n\n");
        };
        key(
            "Registries reached over plain http, as host or host:port (--insecure-registry). Loopback registries always are.",
            "insecure_registries",
            toml_value(&self.image.insecure_registries),
        );
        key(
            "Images reported pinned to kubelet, which then never garbage-collects them (--pinned-image).",
            "pinned_images",
            toml_value(&self.image.pinned_images),
        );
        let (ours, theirs) = (&self.image, &d.image);
        out += &format!(
            "# The most bytes of uncompressed tar one layer may hold, and the most entries: a layer past either \
             (or an\n# archive given to `crius images import`) is refused with InvalidArgument naming it and the \
             cap, and\n# nothing of it is stored. The defaults are about three times the largest layers of real \
             images.\n# default: {}\nmax_layer_bytes = {}\n\n# default: {}\nmax_layer_entries = {}\n\n",
            theirs.max_layer_bytes, ours.max_layer_bytes, theirs.max_layer_entries, ours.max_layer_entries
        );
        out += &format!(
            "# Seconds a pull's download (a blob, a manifest) may go without receiving a byte: past it the pull \
             is\n# cancelled with DeadlineExceeded naming the blob, and nothing of it is kept; 0: never (as \
             containerd's\n# image_pull_progress_timeout).\n# default: {}\npull_progress_timeout = {}\n\n\
             # How many blobs of one pull download at once; each layer is unpacked as soon as it and those \
             below it\n# are there.\n# default: {}\nmax_concurrent_downloads = {}\n\n\
             # A signature policy in the containers-policy.json format (insecureAcceptAnything, reject, \
             sigstoreSigned\n# with a cosign key) every pull must satisfy before any layer is fetched \
             (PermissionDenied naming\n# the image otherwise); empty: none.\n# default: \"\"\n\
             signature_policy = {}\n\n",
            theirs.pull_progress_timeout,
            ours.pull_progress_timeout,
            theirs.max_concurrent_downloads,
            ours.max_concurrent_downloads,
            toml_value(&ours.signature_policy)
        );
        out += "[network]\n";
        let mut key = |doc: &str, name: &str, value: String, default: String| {
            out += &format!("# {doc}\n# default: {default}\n{name} = {value}\n\n");
        };
        key(
            "CNI network configurations; the first file in lexical order is the pod network (--cni-conf-dir).",
            "cni_conf_dir",
            toml_value(&self.network.cni_conf_dir),
            toml_value(&d.network.cni_conf_dir),
        );
        key(
            "Directories searched for CNI plugins, in order (--cni-plugin-dir, repeatable).",
            "cni_plugin_dirs",
            toml_value(&self.network.cni_plugin_dirs),
            toml_value(&d.network.cni_plugin_dirs),
        );
        key(
            "Seconds one CNI plugin run (an ADD, CHECK or DEL) may take; past it the plugin is killed and the call fails.",
            "cni_plugin_timeout",
            self.network.cni_plugin_timeout.to_string(),
            d.network.cni_plugin_timeout.to_string(),
        );
        out += "[runtime]\n";
        out += &format!(
            "# The shim binary, one process per pod (--shim); empty: containerd-shim-crius-v2 next to criusd,\n\
             # else on PATH.\n# default: \"\"\nshim = {}\n\n",
            toml_value(&self.runtime.shim)
        );
        out += &format!(
            "# How containers' cgroups are made: \"cgroupfs\" (directories below the pod's cgroup_parent) or\n\
             # \"systemd\" (transient scopes in the pod's slice, through systemd's D-Bus API). kubelet's\n\
             # cgroupDriver must be the same (RuntimeConfig reports it).\n# default: \"cgroupfs\"\ncgroup_driver = {}\n\n",
            toml_value(&if self.runtime.cgroup_driver.is_empty() {
                "cgroupfs"
            } else {
                &self.runtime.cgroup_driver
            })
        );
        out += &format!(
            "# The cgroup every pod's cgroup_parent must lie within: a path under cgroupfs (\"/kubepods\"), a\n\
             # slice under systemd (\"kubepods.slice\"); \"/\": any. RunPodSandbox refuses a parent outside it\n\
             # (InvalidArgument), so no client can name another cgroup of the node (\"/system.slice\") for\n\
             # UpdatePodSandboxResources to write.\n# default: \"/\"\ncgroup_parent_root = {}\n\n",
            toml_value(&self.runtime.cgroup_parent_root)
        );
        out += &format!(
            "# Execs (ExecSync, Exec, exec probes) in containers run by crius-runc start without a\n\
             # `crius-runc exec` command: the shim has the runtime's sealed copy join the container and exec\n\
             # directly, with the same security steps. Containers of other runtimes (runc, crun) always run\n\
             # `<runtime> exec`.\n# default: true\ndirect_exec = {}\n\n",
            self.runtime.direct_exec
        );
        out += &self.stream.render(|v| v.toml());
        out += &self.storage.render(|p| toml_value(&p));
        out += "# Registry host = mirror to pull from instead: \"host:port\", or \"http://host:port\" for plain http\n\
                # (--registry-mirror HOST=MIRROR). Example: \"docker.io\" = \"http://127.0.0.1:5000\"\n\
                # default: none\n[image.mirrors]\n";
        for (k, v) in &self.image.mirrors {
            out += &format!("{} = {}\n", toml_value(k), toml_value(v));
        }
        out += "\n";
        out += &runtimes::render(&self.runtimes, |p| toml_value(&p));
        out += "\n";
        out += &self.pods.render(|v| v.toml());
        out += &self.cdi.render(|p| toml_value(&p));
        out += &self.nri.render(|p| toml_value(&p));
        out
    }
}

/// The host of a mirror given as `host:port` or `http(s)://host:port[/]`.
pub fn mirror_host(m: &str) -> &str {
    let m = m
        .strip_prefix("http://")
        .or_else(|| m.strip_prefix("https://"))
        .unwrap_or(m);
    m.trim_end_matches('/')
}

#[cfg(test)]
mod tests;
