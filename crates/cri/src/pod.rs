//! Pod sandboxes, the CRI's way: RunPodSandbox pins the pod's namespaces ([`crate::netns`]), attaches the CNI
//! network ([`crate::cni`]), writes the files its containers will mount (hostname, hosts, resolv.conf) and
//! records it ([`crate::sandbox`]); Stop detaches the network and drops the namespaces (idempotent); Remove
//! forgets it (idempotent, also for an unknown id). There is no pause container.
//!
//! The calls here block (plugins run, mounts are made): the gRPC layer runs them off the async workers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use k8s_cri::v1 as cri;
use serde_json::json;
use tonic::Status;

use crate::cni::{self, Attachment, Cni};
use crate::netns;
use crate::records::now_ns;
use crate::sandbox::{Record, Sandbox, Sandboxes};

/// NamespaceMode NODE: the host's namespace.
const NODE: i32 = cri::NamespaceMode::Node as i32;

/// The pods of one criusd.
pub struct Pods {
    /// The records.
    pub sandboxes: Sandboxes,
    /// The CNI setup.
    pub cni: Cni,
    /// Where namespaces are pinned (`<state>/ns/<id>/`).
    ns_dir: PathBuf,
    /// One lifecycle change at a time per sandbox.
    busy: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// A new sandbox or container id: 64 random hex digits.
pub(crate) fn random_id() -> Result<String, Status> {
    let mut b = [0u8; 32];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Status::internal(format!("reading /dev/urandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The pod's namespace options (defaults: all the pod's own).
pub(crate) fn namespace_options(c: &cri::PodSandboxConfig) -> cri::NamespaceOption {
    c.linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// resolv.conf for the pod: kubelet's DNS config, else the host's file.
fn resolv_conf(dns: Option<&cri::DnsConfig>) -> String {
    match dns {
        Some(d) if !(d.servers.is_empty() && d.searches.is_empty() && d.options.is_empty()) => {
            let mut out = String::new();
            if !d.searches.is_empty() {
                out += &format!("search {}\n", d.searches.join(" "));
            }
            for s in &d.servers {
                out += &format!("nameserver {s}\n");
            }
            if !d.options.is_empty() {
                out += &format!("options {}\n", d.options.join(" "));
            }
            out
        }
        _ => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
    }
}

fn protocol(p: i32) -> &'static str {
    match cri::Protocol::try_from(p) {
        Ok(cri::Protocol::Udp) => "udp",
        Ok(cri::Protocol::Sctp) => "sctp",
        _ => "tcp",
    }
}

impl Pods {
    /// The pods recorded under `dir`, with namespaces pinned under `ns_dir`.
    pub fn open(dir: &std::path::Path, ns_dir: PathBuf, cni: Cni) -> std::io::Result<Pods> {
        Ok(Pods {
            sandboxes: Sandboxes::open(dir)?,
            cni,
            ns_dir,
            busy: Mutex::new(HashMap::new()),
        })
    }

    fn guard(&self, id: &str) -> Arc<Mutex<()>> {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    fn attachment(&self, id: &str, netns: PathBuf, c: &cri::PodSandboxConfig) -> Attachment {
        let m = c.metadata.clone().unwrap_or_default();
        Attachment {
            id: id.to_string(),
            netns,
            ifname: "eth0".into(),
            args: vec![
                ("K8S_POD_NAMESPACE".into(), m.namespace),
                ("K8S_POD_NAME".into(), m.name),
                ("K8S_POD_INFRA_CONTAINER_ID".into(), id.to_string()),
                ("K8S_POD_UID".into(), m.uid),
            ],
            ports: c
                .port_mappings
                .iter()
                .filter(|p| p.host_port > 0)
                .map(|p| cni::PortMapping {
                    host_port: p.host_port,
                    container_port: p.container_port,
                    protocol: protocol(p.protocol).into(),
                    host_ip: p.host_ip.clone(),
                })
                .collect(),
        }
    }

    /// RunPodSandbox: returns the new sandbox's id.
    pub fn run(&self, config: cri::PodSandboxConfig, handler: String) -> Result<String, Status> {
        let m = config
            .metadata
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("RunPodSandbox: config.metadata is missing"))?;
        if m.name.is_empty() || m.namespace.is_empty() || m.uid.is_empty() {
            return Err(Status::invalid_argument(format!(
                "RunPodSandbox: metadata needs a name, namespace and uid (got {:?}/{:?}/{:?})",
                m.name, m.namespace, m.uid
            )));
        }
        if !handler.is_empty() {
            return Err(Status::invalid_argument(format!(
                "RunPodSandbox: runtime handler {handler:?} is not configured (only the default, \"\")"
            )));
        }
        let id = random_id()?;
        let ns = namespace_options(&config);
        let host_net = ns.network == NODE;
        let mut sandbox = Sandbox {
            record: Record {
                id: id.clone(),
                ready: false,
                created_at: now_ns(),
                runtime_handler: handler,
                ..Default::default()
            },
            config,
        };
        // Reserve the name first: a second RunPodSandbox for the same pod attempt is refused at once.
        if let Err(holder) = self.sandboxes.insert(sandbox.clone()) {
            return Err(Status::already_exists(format!(
                "RunPodSandbox: the name {} is taken by sandbox {holder}",
                sandbox.name()
            )));
        }
        let lock = self.guard(&id);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let made = self.set_up(&mut sandbox, host_net, &ns);
        match made {
            Ok(()) => {
                sandbox.record.ready = true;
                let rec = sandbox.record.clone();
                self.sandboxes
                    .update(&id, |r| *r = rec)
                    .map_err(Status::internal)?;
                tracing::info!(sandbox = %id, name = %sandbox.name(), ips = ?sandbox.record.ips, "pod sandbox ready");
                Ok(id)
            }
            Err(e) => {
                netns::remove(&self.ns_dir.join(&id));
                let _ = self.sandboxes.remove(&id);
                Err(e)
            }
        }
    }

    fn set_up(&self, s: &mut Sandbox, host_net: bool, ns: &cri::NamespaceOption) -> Result<(), Status> {
        let id = s.record.id.clone();
        let hostname = if s.config.hostname.is_empty() || host_net {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            s.config.hostname.clone()
        };
        let dir = self.sandboxes.dir_of(&id);
        let files = [
            ("hostname", format!("{hostname}\n")),
            ("resolv.conf", resolv_conf(s.config.dns_config.as_ref())),
            ("hosts", std::fs::read_to_string("/etc/hosts").unwrap_or_default()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text)
                .map_err(|e| Status::internal(format!("writing {}: {e}", dir.join(name).display())))?;
        }
        let want = netns::Wanted {
            net: !host_net,
            ipc: ns.ipc != NODE,
            uts: !host_net,
            hostname,
        };
        // Without a network config there is no pod network to give: say so before making anything.
        let net = if host_net {
            None
        } else {
            Some(cni::ready(&self.cni).map_err(|e| {
                Status::failed_precondition(format!("RunPodSandbox: the pod network is not ready: {e}"))
            })?)
        };
        s.record.namespaces = netns::create(&self.ns_dir.join(&id), &want)
            .map_err(|e| Status::internal(format!("RunPodSandbox: pod namespaces: {e}")))?;
        if let (Some(net), Some(path)) = (net, s.record.namespaces.net.clone()) {
            let at = self.attachment(&id, path, &s.config);
            let result = self
                .cni
                .add(&net, &at)
                .map_err(|e| Status::internal(format!("RunPodSandbox: {e}")))?;
            s.record.ips = cni::pod_ips(&result);
            s.record.network =
                Some(json!({"name": net.name, "cniVersion": net.version, "plugins": net.plugins}));
            s.record.cni_result = Some(result);
        }
        Ok(())
    }

    /// StopPodSandbox: the network detached and the namespaces dropped. Idempotent; an unknown id is NotFound.
    pub fn stop(&self, id: &str) -> Result<(), Status> {
        let s = self
            .sandboxes
            .get(id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id:?} not found")))?;
        let id = s.record.id.clone();
        let lock = self.guard(&id);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let Some(s) = self.sandboxes.get(&id) else {
            return Ok(());
        };
        if let (Some(net), Some(path)) = (&s.record.network, &s.record.namespaces.net) {
            // After a reboot the namespace is gone but the plugins' IPAM still holds the address: DEL runs
            // anyway, with no namespace (as the CNI spec allows), so it is released.
            let path = if s.record.namespaces.alive() {
                path.clone()
            } else {
                PathBuf::new()
            };
            let conf = cni::NetConf {
                name: net["name"].as_str().unwrap_or_default().to_string(),
                version: net["cniVersion"].as_str().unwrap_or_default().to_string(),
                plugins: net["plugins"].as_array().cloned().unwrap_or_default(),
                file: PathBuf::new(),
            };
            let at = self.attachment(&id, path, &s.config);
            self.cni
                .del(&conf, &at, s.record.cni_result.as_ref())
                .map_err(|e| Status::internal(format!("StopPodSandbox {id}: {e}")))?;
        }
        netns::remove(&self.ns_dir.join(&id));
        self.sandboxes
            .update(&id, |r| {
                r.ready = false;
                r.network = None;
            })
            .map_err(Status::internal)?;
        tracing::info!(sandbox = %id, "pod sandbox stopped");
        Ok(())
    }

    /// RemovePodSandbox: stopped if needed, then forgotten. Idempotent, also for an unknown id.
    pub fn remove(&self, id: &str) -> Result<(), Status> {
        let Some(s) = self.sandboxes.get(id) else {
            return Ok(());
        };
        let id = s.record.id.clone();
        if s.record.ready || s.record.network.is_some() {
            self.stop(&id)?;
        }
        let lock = self.guard(&id);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        netns::remove(&self.ns_dir.join(&id));
        self.sandboxes
            .remove(&id)
            .map_err(|e| Status::internal(format!("RemovePodSandbox {id}: {e}")))?;
        self.busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        tracing::info!(sandbox = %id, "pod sandbox removed");
        Ok(())
    }
}

fn state_of(s: &Sandbox) -> i32 {
    if s.record.ready {
        cri::PodSandboxState::SandboxReady as i32
    } else {
        cri::PodSandboxState::SandboxNotready as i32
    }
}

/// PodSandboxStatus of `s`; `verbose` adds `info["info"]`, the record as JSON.
pub fn status_of(s: &Sandbox, verbose: bool) -> cri::PodSandboxStatusResponse {
    let ips = &s.record.ips;
    let status = cri::PodSandboxStatus {
        id: s.record.id.clone(),
        metadata: s.config.metadata.clone(),
        state: state_of(s),
        created_at: s.record.created_at,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: ips.first().cloned().unwrap_or_default(),
            additional_ips: ips
                .iter()
                .skip(1)
                .map(|ip| cri::PodIp { ip: ip.clone() })
                .collect(),
        }),
        linux: Some(cri::LinuxPodSandboxStatus {
            namespaces: Some(cri::Namespace {
                options: Some(namespace_options(&s.config)),
            }),
        }),
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
        runtime_handler: s.record.runtime_handler.clone(),
    };
    let mut info = HashMap::new();
    if verbose {
        info.insert(
            "info".to_string(),
            serde_json::to_string(&s.record).unwrap_or_default(),
        );
    }
    cri::PodSandboxStatusResponse {
        status: Some(status),
        info,
        ..Default::default()
    }
}

/// The sandboxes `filter` selects, as ListPodSandbox returns them.
pub fn list(all: Vec<Sandbox>, filter: Option<&cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
    all.into_iter()
        .filter(|s| {
            let Some(f) = filter else { return true };
            (f.id.is_empty() || s.record.id.starts_with(&f.id))
                && f.state.as_ref().is_none_or(|st| st.state == state_of(s))
                && f.label_selector
                    .iter()
                    .all(|(k, v)| s.config.labels.get(k) == Some(v))
        })
        .map(|s| cri::PodSandbox {
            id: s.record.id.clone(),
            metadata: s.config.metadata.clone(),
            state: state_of(&s),
            created_at: s.record.created_at,
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            runtime_handler: s.record.runtime_handler.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_follows_kubelet_else_the_host() {
        let d = cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&d)),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        assert_eq!(resolv_conf(None), host);
        assert_eq!(resolv_conf(Some(&cri::DnsConfig::default())), host);
    }
}
