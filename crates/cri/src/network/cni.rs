//! Pod networking through CNI plugins, as the CNI spec has a runtime do it: the first network configuration in
//! the config directory (`*.conflist`, `*.conf`, `*.json`, in lexical order, as kubelet's runtimes pick it) is
//! applied to a pod's network namespace by executing each plugin with `CNI_COMMAND=ADD` (the previous plugin's
//! result passed on as `prevResult`), and removed with `DEL` in reverse order (`CHECK` verifies it in between). Port mappings reach plugins
//! that declare the `portMappings` capability. The standard plugins (bridge, host-local, portmap, …) work.
//!
//! Each plugin run has a deadline ([`Cni::plugin_timeout`], [`DEFAULT_PLUGIN_TIMEOUT`]): a plugin that has not
//! exited by then is killed, with everything it started (it runs in a process group of its own), and the call
//! fails naming the plugin and the deadline, so a hung plugin cannot hold RunPodSandbox forever.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::NetError;

/// Where configurations and plugins are.
#[derive(Debug, Clone)]
pub struct Cni {
    /// The directory of network configurations (kubelet's default is `/etc/cni/net.d`).
    pub conf_dir: PathBuf,
    /// Directories searched for plugin binaries, in order.
    pub plugin_dirs: Vec<PathBuf>,
    /// How long one plugin run (one ADD, CHECK or DEL of one plugin) may take before it is killed.
    pub plugin_timeout: Duration,
}

/// The deadline of one plugin run unless configured: CRI-O's fixed CNI timeout. (containerd has none of its
/// own and relies on the request's context; kubelet's old dockershim gave a plugin 220 s.) Under kubelet's
/// 2-minute runtime request timeout, so a hung ADD fails the call before kubelet gives up on it.
pub const DEFAULT_PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// A network configuration list, normalised (a single `.conf` becomes a list of one plugin).
#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    /// Its `name`.
    pub name: String,
    /// Its `cniVersion`.
    pub version: String,
    /// The plugin configurations, in order.
    pub plugins: Vec<Value>,
    /// The file it came from.
    pub file: PathBuf,
}

/// A host port published by a pod (`PodSandboxConfig.port_mappings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    /// Port on the host.
    pub host_port: i32,
    /// Port in the pod.
    pub container_port: i32,
    /// tcp, udp or sctp.
    pub protocol: String,
    /// Host address to bind (empty: all).
    pub host_ip: String,
}

/// What a network is attached to.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// The sandbox id (`CNI_CONTAINERID`).
    pub id: String,
    /// The network namespace's path.
    pub netns: PathBuf,
    /// The interface to create in it.
    pub ifname: String,
    /// `CNI_ARGS` pairs (kubelet's runtimes pass `K8S_POD_NAMESPACE`, `K8S_POD_NAME`, …).
    pub args: Vec<(String, String)>,
    /// Port mappings for plugins with the `portMappings` capability.
    pub ports: Vec<PortMapping>,
}

/// The addresses an ADD gave the pod: the first IPv4 (else first) address, then the others.
pub fn pod_ips(result: &Value) -> Vec<String> {
    let mut ips: Vec<String> = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .map(|a| a.split('/').next().unwrap_or(a).to_string())
        .collect();
    if let Some(i) = ips.iter().position(|a| !a.contains(':')) {
        let v4 = ips.remove(i);
        ips.insert(0, v4);
    }
    ips
}

impl Cni {
    /// The network configuration in use, if any; a file that does not parse is an error naming it.
    pub fn load(&self) -> Result<Option<NetConf>, NetError> {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&self.conf_dir) {
            Ok(d) => d
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x == "conflist" || x == "conf" || x == "json")
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(NetError::io(format!("reading {}", self.conf_dir.display()), e)),
        };
        files.sort();
        let Some(file) = files.into_iter().next() else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(&file)
            .map_err(|e| NetError::io(format!("reading {}", file.display()), e))?;
        let bad = |what: &str| NetError::BadConfig {
            file: file.clone(),
            reason: what.to_string(),
        };
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        let name = v["name"].as_str().ok_or_else(|| bad("no \"name\""))?.to_string();
        let version = v["cniVersion"].as_str().unwrap_or("0.4.0").to_string();
        let plugins = match v.get("plugins") {
            Some(Value::Array(p)) if !p.is_empty() => p.clone(),
            Some(_) => return Err(bad("\"plugins\" must be a non-empty list")),
            None => vec![v.clone()],
        };
        if let Some(p) = plugins.iter().find(|p| !p["type"].is_string()) {
            return Err(bad(&format!("a plugin without \"type\": {p}")));
        }
        Ok(Some(NetConf {
            name,
            version,
            plugins,
            file,
        }))
    }

    fn find(&self, kind: &str) -> Result<PathBuf, NetError> {
        if kind.contains('/') {
            return Err(NetError::BadPluginName(kind.to_string()));
        }
        self.plugin_dirs
            .iter()
            .map(|d| d.join(kind))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                let dirs: Vec<String> = self.plugin_dirs.iter().map(|d| d.display().to_string()).collect();
                NetError::NoPlugin {
                    kind: kind.to_string(),
                    dirs: dirs.join(":"),
                }
            })
    }

    fn exec(
        &self,
        cmd: &'static str,
        net: &NetConf,
        plugin: &Value,
        at: &Attachment,
        prev: Option<&Value>,
    ) -> Result<Value, NetError> {
        let kind = plugin["type"].as_str().unwrap_or_default();
        let binary = self.find(kind)?;
        let mut conf = plugin.clone();
        conf["name"] = json!(net.name);
        conf["cniVersion"] = json!(net.version);
        if let Some(p) = prev {
            conf["prevResult"] = p.clone();
        }
        if plugin["capabilities"]["portMappings"].as_bool() == Some(true) && !at.ports.is_empty() {
            let ports: Vec<Value> = at
                .ports
                .iter()
                .map(|p| {
                    let mut m = json!({"hostPort": p.host_port, "containerPort": p.container_port,
                        "protocol": p.protocol});
                    if !p.host_ip.is_empty() {
                        m["hostIP"] = json!(p.host_ip);
                    }
                    m
                })
                .collect();
            conf["runtimeConfig"]["portMappings"] = json!(ports);
        }
        let mut args = vec![("IgnoreUnknown".to_string(), "1".to_string())];
        args.extend(at.args.iter().cloned());
        let cni_args: Vec<String> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let path: Vec<String> = self.plugin_dirs.iter().map(|d| d.display().to_string()).collect();
        let child = Command::new(&binary)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("CNI_COMMAND", cmd)
            .env("CNI_CONTAINERID", &at.id)
            .env("CNI_NETNS", &at.netns)
            .env("CNI_IFNAME", &at.ifname)
            .env("CNI_ARGS", cni_args.join(";"))
            .env("CNI_PATH", path.join(":"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so that on expiry whatever it started goes with it.
            .process_group(0)
            .spawn()
            .map_err(|e| NetError::io(format!("running CNI plugin {}", binary.display()), e))?;
        let out = run_with_deadline(child, conf.to_string().into_bytes(), self.plugin_timeout).map_err(
            |e| match e {
                Late::Killed => NetError::Timeout {
                    kind: kind.to_string(),
                    cmd,
                    network: net.name.clone(),
                    after: self.plugin_timeout,
                },
                Late::Io(e) => NetError::io(format!("running CNI plugin {}", binary.display()), e),
            },
        )?;
        if !out.status.success() {
            // The spec's error: {"code", "msg", "details"} on stdout.
            let err: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let msg = match (err["msg"].as_str(), err["details"].as_str()) {
                (Some(m), Some(d)) if !d.is_empty() => format!("{m}: {d}"),
                (Some(m), _) => m.to_string(),
                _ => {
                    let text = String::from_utf8_lossy(&out.stdout).trim().to_string()
                        + String::from_utf8_lossy(&out.stderr).trim();
                    format!("{} ({text})", out.status)
                }
            };
            return Err(NetError::Plugin {
                kind: kind.to_string(),
                cmd,
                network: net.name.clone(),
                msg,
            });
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(prev.cloned().unwrap_or_default());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| NetError::BadResult {
            kind: kind.to_string(),
            cmd,
            reason: e.to_string(),
        })
    }

    /// Attaches `net` to the pod: each plugin's ADD in order. On a failure the plugins that ran are undone.
    pub fn add(&self, net: &NetConf, at: &Attachment) -> Result<Value, NetError> {
        let mut result: Option<Value> = None;
        for (i, plugin) in net.plugins.iter().enumerate() {
            match self.exec("ADD", net, plugin, at, result.as_ref()) {
                Ok(r) => result = Some(r),
                Err(e) => {
                    let partial = NetConf {
                        plugins: net.plugins[..=i].to_vec(),
                        ..net.clone()
                    };
                    let _ = self.del(&partial, at, result.as_ref());
                    return Err(e);
                }
            }
        }
        Ok(result.unwrap_or_default())
    }

    /// Checks that `net` is still attached as ADD left it: each plugin's CHECK in order, with ADD's result.
    pub fn check(&self, net: &NetConf, at: &Attachment, result: &Value) -> Result<(), NetError> {
        for plugin in &net.plugins {
            self.exec("CHECK", net, plugin, at, Some(result))?;
        }
        Ok(())
    }

    /// Detaches `net`: each plugin's DEL in reverse order, all of them even if one fails (the first error is
    /// returned). `result` is what ADD returned, if it is known.
    pub fn del(&self, net: &NetConf, at: &Attachment, result: Option<&Value>) -> Result<(), NetError> {
        let mut first = None;
        for plugin in net.plugins.iter().rev() {
            if let Err(e) = self.exec("DEL", net, plugin, at, result)
                && first.is_none()
            {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// What a plugin run printed, and how it ended.
struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Why [`run_with_deadline`] has no output.
enum Late {
    /// The deadline passed: the plugin's process group was killed (and the plugin reaped).
    Killed,
    /// Waiting for it failed.
    Io(std::io::Error),
}

/// Feeds `input` to `child` and collects what it prints until it exits, or kills its process group once
/// `timeout` has passed. Stdin and the two outputs are served by threads, so a plugin that does not read its
/// input or fills a pipe cannot stall the wait; on expiry they are left to end when the killed group's pipes
/// close.
fn run_with_deadline(mut child: Child, input: Vec<u8>, timeout: Duration) -> Result<Output, Late> {
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    if let Some(mut stdin) = child.stdin.take() {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let stdout = drain(child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let stderr = drain(child.stderr.take().map(|o| Box::new(o) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    // Polled: a plugin run is tens of milliseconds, so the first checks come quickly, then every 20 ms.
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                // The child is not reaped yet, so its pid (the group's id) is still its own.
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.wait();
                return Err(Late::Killed);
            }
            Ok(None) => {
                std::thread::sleep(pause.min(deadline.saturating_duration_since(Instant::now())));
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(Late::Io(e)),
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// The plugin directories criusd searches by default: the CNI convention's, then Debian's.
pub fn default_plugin_dirs() -> Vec<PathBuf> {
    vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
}

/// The configuration pods get, for RunPodSandbox and the NetworkReady condition: it, or why there is none.
pub fn ready(cni: &Cni) -> Result<NetConf, NetError> {
    match cni.load()? {
        Some(n) => Ok(n),
        None => Err(NetError::NoConfig(cni.conf_dir.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn cni(dir: &Path) -> Cni {
        Cni {
            conf_dir: dir.to_path_buf(),
            plugin_dirs: vec![dir.join("bin")],
            plugin_timeout: DEFAULT_PLUGIN_TIMEOUT,
        }
    }

    /// Plugin `name` in `dir`'s bin/, running `script`; a network of it alone, and an attachment to apply it to.
    fn one_plugin(dir: &Path, name: &str, script: &str) -> (NetConf, Attachment) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let fake = dir.join("bin").join(name);
        std::fs::write(&fake, script).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let net = NetConf {
            name: "n".into(),
            version: "1.0.0".into(),
            plugins: vec![json!({ "type": name })],
            file: PathBuf::new(),
        };
        let at = Attachment {
            id: "x".into(),
            netns: "/nonexistent".into(),
            ifname: "eth0".into(),
            args: vec![],
            ports: vec![],
        };
        (net, at)
    }

    #[test]
    fn the_first_config_wins_and_a_single_conf_becomes_a_list() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(cni(d.path()).load().unwrap(), None);
        assert!(
            ready(&cni(d.path()))
                .unwrap_err()
                .to_string()
                .contains("no network config")
        );
        std::fs::write(
            d.path().join("20-b.conf"),
            r#"{"cniVersion":"0.4.0","name":"b","type":"bridge"}"#,
        )
        .unwrap();
        std::fs::write(
            d.path().join("10-a.conflist"),
            r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("00-ignored.txt"), "x").unwrap();
        let n = cni(d.path()).load().unwrap().unwrap();
        assert_eq!(
            (n.name.as_str(), n.version.as_str(), n.plugins.len()),
            ("a", "1.0.0", 2)
        );
        std::fs::remove_file(d.path().join("10-a.conflist")).unwrap();
        let n = cni(d.path()).load().unwrap().unwrap();
        assert_eq!((n.name.as_str(), n.plugins.len()), ("b", 1));
        std::fs::write(d.path().join("05-bad.conflist"), "{").unwrap();
        assert!(
            cni(d.path())
                .load()
                .unwrap_err()
                .to_string()
                .contains("05-bad.conflist")
        );
    }

    #[test]
    fn pod_ips_put_ipv4_first_and_drop_prefixes() {
        let r = json!({"ips": [{"address": "fd00::5/64"}, {"address": "10.1.2.3/24"}]});
        assert_eq!(pod_ips(&r), vec!["10.1.2.3", "fd00::5"]);
        assert!(pod_ips(&json!({})).is_empty());
    }

    #[test]
    fn a_plugin_past_its_deadline_is_killed_with_what_it_started() {
        let d = tempfile::tempdir().unwrap();
        let sleeper = d.path().join("sleeper");
        let script = format!(
            "#!/bin/sh\nsleep 30 &\necho $! > {}\ncat >/dev/null\nwait\n",
            sleeper.display()
        );
        let (net, at) = one_plugin(d.path(), "hang", &script);
        let cni = Cni {
            plugin_timeout: Duration::from_secs(1),
            ..cni(d.path())
        };
        let started = Instant::now();
        let e = cni.add(&net, &at).unwrap_err();
        // The ADD, then the DEL that undoes it, each stopped at its deadline.
        let took = started.elapsed();
        assert!(matches!(e, NetError::Timeout { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "CNI plugin hang ADD for network n: no answer within 1s; killed"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        // The plugin's child went with it: gone, or a zombie waiting for its new parent to reap it. SIGKILL
        // is delivered asynchronously, so its death is waited for a moment.
        let pid = std::fs::read_to_string(&sleeper).unwrap();
        let dead = || {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
            stat.is_empty() || stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !dead() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(dead(), "the plugin's sleep {} lives on", pid.trim());
    }

    #[test]
    fn a_plugin_error_is_reported_with_its_message() {
        let d = tempfile::tempdir().unwrap();
        let script = "#!/bin/sh\ncat >/dev/null\nprintf '{\"code\":7,\"msg\":\"no luck\",\"details\":\"for %s\"}' \"$CNI_COMMAND\"\nexit 1\n";
        let (net, at) = one_plugin(d.path(), "fail", script);
        let e = cni(d.path()).add(&net, &at).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CNI plugin fail ADD for network n: no luck: for ADD"
        );
        let missing = NetConf {
            plugins: vec![json!({"type": "nope"})],
            ..net
        };
        assert!(
            cni(d.path())
                .add(&missing, &at)
                .unwrap_err()
                .to_string()
                .contains("\"nope\" not found")
        );
    }
}
