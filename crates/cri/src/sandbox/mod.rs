//! Pod sandboxes, the CRI's way: RunPodSandbox pins the pod's namespaces ([`Namespaces`]), attaches the node's
//! network ([`Network`]: CNI), writes the files its containers will mount (hostname, hosts, resolv.conf) and
//! records it ([`crate::store::sandbox`]); a pod with `hostUsers: false` gets a user namespace of its own
//! ([`userns`]); Stop detaches the network and drops the namespaces (idempotent);
//! Remove forgets it (idempotent, also for an unknown id). There is no pause container. What sandboxes report
//! is in [`status`].
//!
//! The calls here block (plugins run, mounts are made): the gRPC layer runs them off the async workers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crius_api::cri;
use serde_json::json;

use crate::error::{Error, Kind, Result};
use crate::handlers::Handlers;
use crate::network::{Attachment, Namespaces, NetConf, Network, PortMapping, Wanted, cni};
use crate::store::intents::{Intent, Intents, Op};
use crate::store::names::Taken;
use crate::store::sandbox::{Record, Sandbox, Sandboxes};
use crate::store::{now_ns, random_id};
use crate::validate::namespace_options;

pub mod metrics;
pub mod resources;
pub mod stats;
pub mod status;
pub mod userns;

pub use status::{list, status_of};

/// NamespaceMode NODE: the host's namespace.
const NODE: i32 = cri::NamespaceMode::Node as i32;

/// The pods of one criusd.
pub struct Pods {
    /// The records.
    pub sandboxes: Sandboxes,
    /// The node's network.
    pub network: Arc<dyn Network>,
    namespaces: Arc<dyn Namespaces>,
    /// Where namespaces are pinned (`<state>/ns/<id>/`).
    ns_dir: PathBuf,
    /// Where the files its containers mount are (`<state>/sandboxes/<id>/`).
    files_dir: PathBuf,
    /// One lifecycle change at a time per sandbox.
    busy: crate::store::locks::IdLocks,
    /// Where RunPodSandbox says what it is about to make.
    intents: Arc<Intents>,
    /// The runtime handlers RunPodSandbox picks from.
    pub handlers: Arc<Handlers>,
    /// The node's cgroup driver, the form of every pod's `cgroup_parent`.
    cgroup_driver: crate::cgroup_driver::Driver,
    /// Where every pod's `cgroup_parent` must lie.
    cgroup_parent_root: crate::cgroup_driver::ParentRoot,
}

/// Whether the pod's containers share a PID namespace: its config says PID mode POD, as kubelet does for
/// `shareProcessNamespace`. A config without namespace options gets a PID namespace per container, as kubelet
/// asks for every other pod (the field's zero value, POD, is not taken for a request).
pub(crate) fn shares_pid(c: &cri::PodSandboxConfig) -> bool {
    c.linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_some_and(|o| o.pid == cri::NamespaceMode::Pod as i32)
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
    /// The pods recorded under `dir`, with namespaces pinned under `ns_dir` by `namespaces` and the files
    /// their containers mount under `files_dir`, attached to `network`; RunPodSandbox writes its intents to
    /// `intents`.
    pub fn open(
        dir: &Path,
        ns_dir: PathBuf,
        files_dir: PathBuf,
        network: Arc<dyn Network>,
        namespaces: Arc<dyn Namespaces>,
        intents: Arc<Intents>,
    ) -> std::io::Result<Pods> {
        let ns = namespaces.clone();
        Ok(Pods {
            sandboxes: Sandboxes::open(dir, move |p| ns.alive(p))?,
            network,
            namespaces,
            ns_dir,
            files_dir,
            busy: Default::default(),
            intents,
            handlers: Arc::default(),
            cgroup_driver: Default::default(),
            cgroup_parent_root: Default::default(),
        })
    }

    /// These pods with `handlers` to pick from (else crius-runc alone).
    pub fn with_handlers(self, handlers: Arc<Handlers>) -> Pods {
        Pods { handlers, ..self }
    }

    /// These pods with every `cgroup_parent` in `driver`'s form (else cgroupfs's) and within `root` (else
    /// any).
    pub fn with_cgroups(
        self,
        driver: crate::cgroup_driver::Driver,
        root: crate::cgroup_driver::ParentRoot,
    ) -> Pods {
        Pods {
            cgroup_driver: driver,
            cgroup_parent_root: root,
            ..self
        }
    }

    /// The node's cgroup driver.
    pub fn cgroup_driver(&self) -> crate::cgroup_driver::Driver {
        self.cgroup_driver
    }

    /// The directory of the files (hostname, hosts, resolv.conf) that sandbox `id`'s containers mount. They
    /// are in the state directory (a tmpfs on a node, as `/run` is), not with the record: they are made anew
    /// for every pod and gone with it, and nothing after a reboot mounts them. A sandbox made by a criusd
    /// that kept them with its record has them there.
    pub fn files_of(&self, id: &str) -> PathBuf {
        let dir = self.files_dir.join(id);
        let old = self.sandboxes.dir_of(id);
        if !dir.exists() && old.join("hostname").exists() {
            return old;
        }
        dir
    }

    /// Removes the files of sandbox `id` (gone already is fine).
    fn remove_files(&self, id: &str) {
        match std::fs::remove_dir_all(self.files_dir.join(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(sandbox = %id, "removing its files: {e}");
            }
            _ => {}
        }
    }

    /// The sandbox `id` names, for call `call`.
    pub fn get(&self, call: &'static str, id: &str) -> Result<Sandbox> {
        crate::validate::id(call, "pod_sandbox_id", id)?;
        self.sandboxes.get(id).ok_or_else(|| Error::NotFound {
            call,
            kind: Kind::Sandbox,
            id: id.to_string(),
        })
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
                .map(|p| PortMapping {
                    host_port: p.host_port,
                    container_port: p.container_port,
                    protocol: protocol(p.protocol).into(),
                    host_ip: p.host_ip.clone(),
                })
                .collect(),
        }
    }

    /// RunPodSandbox: returns the new sandbox's id.
    pub fn run(&self, config: cri::PodSandboxConfig, handler: String) -> Result<String> {
        const CALL: &str = "RunPodSandbox";
        let m = config
            .metadata
            .as_ref()
            .ok_or_else(|| Error::invalid(CALL, "config.metadata", "is missing"))?;
        if m.name.is_empty() || m.namespace.is_empty() || m.uid.is_empty() {
            return Err(Error::invalid(
                CALL,
                "metadata",
                format!(
                    "needs a name, namespace and uid (got {:?}/{:?}/{:?})",
                    m.name, m.namespace, m.uid
                ),
            ));
        }
        crate::validate::sandbox_config(&config, self.cgroup_driver)?;
        if let Some(l) = &config.linux {
            self.cgroup_parent_root
                .check(self.cgroup_driver, &l.cgroup_parent)
                .map_err(|e| Error::invalid(CALL, "linux.cgroup_parent", e.to_string()))?;
        }
        let runtime = self.handlers.find(CALL, &handler)?.runtime.clone();
        let id = random_id().map_err(|e| Error::io("reading /dev/urandom", e))?;
        let ns = namespace_options(&config);
        let host_net = ns.network == NODE;
        let mut sandbox = Sandbox {
            record: Record {
                id: id.clone(),
                ready: false,
                created_at: now_ns(),
                runtime_handler: handler,
                runtime,
                ..Default::default()
            },
            config,
        };
        // Reserve the name first: another RunPodSandbox for the same pod attempt is refused at once, and a
        // retry of this one (the same request) gets the sandbox the first call makes.
        let reservation = match self.sandboxes.reserve(&sandbox) {
            Ok(r) => r,
            Err(Taken::Same(id)) => {
                tracing::info!(sandbox = %id, name = %sandbox.name(), "RunPodSandbox retried: the sandbox made");
                return Ok(id);
            }
            Err(Taken::By(holder)) => {
                return Err(Error::AlreadyExists {
                    call: CALL,
                    kind: Kind::Sandbox,
                    name: format!("the name {}", sandbox.name()),
                    holder,
                });
            }
        };
        let lock = self.busy.of(&id);
        let _held = lock.write().unwrap_or_else(|p| p.into_inner());
        // From here on a crash leaves the intent, and the next start undoes what was made.
        let intent = self.intents.begin(&Intent {
            op: Op::RunPodSandbox,
            id: id.clone(),
            sandbox_id: String::new(),
        })?;
        let made = self
            .sandboxes
            .insert(sandbox.clone())
            .and_then(|()| self.set_up(&mut sandbox, host_net, &ns))
            .and_then(|()| {
                sandbox.record.ready = true;
                let rec = sandbox.record.clone();
                self.sandboxes.update(&id, |r| *r = rec)
            });
        if let Err(e) = made {
            self.undo_run(&id);
            intent.done();
            return Err(e);
        }
        intent.done();
        reservation.commit();
        tracing::info!(sandbox = %id, name = %sandbox.name(), ips = ?sandbox.record.ips, "pod sandbox ready");
        Ok(id)
    }

    /// Takes apart what a RunPodSandbox that failed (or was cut short by a crash) made of sandbox `id`: its
    /// network (DEL, when its record says ADD may have run), its pins and its record.
    pub(crate) fn undo_run(&self, id: &str) {
        let attached = self
            .sandboxes
            .get(id)
            .filter(|s| s.record.id == id && s.record.network.is_some());
        if let Some(Err(e)) = attached.map(|s| self.detach(&s)) {
            tracing::warn!(sandbox = %id, "undoing its network: {e}");
        }
        self.namespaces.unpin(&self.ns_dir.join(id));
        self.remove_files(id);
        if let Err(e) = self.sandboxes.remove(id) {
            tracing::warn!(sandbox = %id, "removing its record: {e}");
        }
    }

    fn set_up(&self, s: &mut Sandbox, host_net: bool, ns: &cri::NamespaceOption) -> Result<()> {
        const CALL: &str = "RunPodSandbox";
        let id = s.record.id.clone();
        let hostname = if s.config.hostname.is_empty() || host_net {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            s.config.hostname.clone()
        };
        let dir = self.files_dir.join(&id);
        crate::store::private_dir(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let files = [
            ("hostname", format!("{hostname}\n")),
            ("resolv.conf", resolv_conf(s.config.dns_config.as_ref())),
            ("hosts", std::fs::read_to_string("/etc/hosts").unwrap_or_default()),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text)
                .map_err(|e| Error::io(format!("writing {}", dir.join(name).display()), e))?;
        }
        let want = Wanted {
            net: !host_net,
            ipc: ns.ipc != NODE,
            uts: !host_net,
            hostname,
            pid: shares_pid(&s.config),
            userns: userns::wanted(CALL, "linux.security_context", Some(ns))?,
        };
        // Without a network config there is no pod network to give: say so before making anything.
        let net = if host_net {
            None
        } else {
            Some(self.network.ready().map_err(|e| Error::NetworkNotReady {
                call: CALL,
                source: Box::new(e),
            })?)
        };
        s.record.namespaces =
            self.namespaces
                .pin(&self.ns_dir.join(&id), &want)
                .map_err(|e| Error::Network {
                    call: CALL,
                    id: id.clone(),
                    source: Box::new(e),
                })?;
        if let (Some(net), Some(path)) = (net, s.record.namespaces.net.clone()) {
            // Recorded before ADD: whatever happens next, DEL runs with this config (a crash included).
            s.record.network =
                Some(json!({"name": net.name, "cniVersion": net.version, "plugins": net.plugins}));
            let rec = s.record.clone();
            self.sandboxes.update(&id, |r| *r = rec)?;
            let at = self.attachment(&id, path, &s.config);
            let result = self.network.add(&net, &at).map_err(|e| Error::Network {
                call: CALL,
                id: id.clone(),
                source: Box::new(e),
            })?;
            s.record.ips = cni::pod_ips(&result);
            s.record.cni_result = Some(result);
        }
        Ok(())
    }

    /// StopPodSandbox: the network detached and the namespaces dropped. Idempotent; an unknown id is NotFound.
    pub fn stop(&self, id: &str) -> Result<()> {
        const CALL: &str = "StopPodSandbox";
        let s = self.get(CALL, id)?;
        let id = s.record.id.clone();
        let lock = self.busy.of(&id);
        let _held = lock.write().unwrap_or_else(|p| p.into_inner());
        let Some(s) = self.sandboxes.get(&id) else {
            return Ok(());
        };
        self.detach(&s).map_err(|e| Error::Network {
            call: CALL,
            id: id.clone(),
            source: Box::new(e),
        })?;
        self.namespaces.unpin(&self.ns_dir.join(&id));
        self.sandboxes.update(&id, |r| {
            r.ready = false;
            r.network = None;
        })?;
        tracing::info!(sandbox = %id, "pod sandbox stopped");
        Ok(())
    }

    /// Unpins the namespaces and removes the files of sandboxes not in `known` (what a crash left); returns
    /// how many.
    pub(crate) fn sweep_pins(&self, known: &std::collections::HashSet<String>) -> usize {
        let unowned = |dir: &Path| {
            crate::store::list_dir(dir)
                .into_iter()
                .filter(|id| !known.contains(id))
                .collect::<Vec<_>>()
        };
        let pins = unowned(&self.ns_dir);
        for id in &pins {
            tracing::info!(sandbox = %id, "repaired: unpinned the namespaces of a sandbox no record owns");
            self.namespaces.unpin(&self.ns_dir.join(id));
        }
        let files = unowned(&self.files_dir);
        for id in &files {
            tracing::info!(sandbox = %id, "repaired: removed the files of a sandbox no record owns");
            self.remove_files(id);
        }
        pins.len() + files.len()
    }

    /// CNI DEL of the network `s`'s record names, if any. After a reboot the namespace is gone but the
    /// plugins' IPAM still holds the address: DEL runs anyway, with no namespace (as the CNI spec allows), so
    /// it is released.
    fn detach(&self, s: &Sandbox) -> std::result::Result<(), crate::network::NetError> {
        let (Some(net), Some(path)) = (&s.record.network, &s.record.namespaces.net) else {
            return Ok(());
        };
        let path = if self.namespaces.alive(&s.record.namespaces) {
            path.clone()
        } else {
            PathBuf::new()
        };
        let conf = NetConf {
            name: net["name"].as_str().unwrap_or_default().to_string(),
            version: net["cniVersion"].as_str().unwrap_or_default().to_string(),
            plugins: net["plugins"].as_array().cloned().unwrap_or_default(),
            file: PathBuf::new(),
        };
        let at = self.attachment(&s.record.id, path, &s.config);
        self.network.del(&conf, &at, s.record.cni_result.as_ref())
    }

    /// RemovePodSandbox: stopped if needed, then forgotten. Idempotent, also for an unknown id.
    pub fn remove(&self, id: &str) -> Result<()> {
        let Some(s) = self.sandboxes.get(id) else {
            return Ok(());
        };
        let id = s.record.id.clone();
        if s.record.ready || s.record.network.is_some() {
            self.stop(&id)?;
        }
        let lock = self.busy.of(&id);
        let _held = lock.write().unwrap_or_else(|p| p.into_inner());
        self.namespaces.unpin(&self.ns_dir.join(&id));
        self.remove_files(&id);
        self.sandboxes.remove(&id)?;
        self.busy.forget(&id);
        tracing::info!(sandbox = %id, "pod sandbox removed");
        Ok(())
    }
}

#[cfg(test)]
mod tests;
