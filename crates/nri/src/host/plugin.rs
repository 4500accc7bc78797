//! One plugin's connection, from the host's side: starting a plugin of the plugin directory (a socket pair, its
//! end handed over as fd 3 with NRI's environment: `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`, `NRI_PLUGIN_SOCKET=3`),
//! then, for it or a plugin that connected to the socket: registration, Configure and Synchronize.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};

use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::{Host, lock};
use crate::mux::{Mux, PLUGIN_CONN, RUNTIME_CONN};
use crate::ttrpc::{self, Client, code, status};
use crate::{Error, api};

/// The service plugins serve.
pub(crate) const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// The service the runtime serves.
pub(crate) const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// Reported to plugins as the runtime's NRI version: the protocol this crate transcribes.
const NRI_VERSION: &str = "v0.9.0";
/// How long a plugin whose registration was refused has to read the refusal before its connection is closed.
const REFUSAL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);
/// Room left in a Synchronize message for the envelope, so that a chunk stays under ttrpc's limit.
const SYNC_MARGIN: usize = 64 << 10;

/// A registered plugin.
pub(crate) struct Plugin {
    pub(crate) id: u64,
    /// Index and name, known once the plugin registered.
    ident: StdMutex<(String, String)>,
    events: AtomicU32,
    client: Client,
    mux: Mux,
    child: StdMutex<Option<std::process::Child>>,
}

impl Plugin {
    /// `(IDX, NAME)`: the order plugins are called in.
    pub(crate) fn ident(&self) -> (String, String) {
        lock(&self.ident).clone()
    }

    /// `IDX-NAME`.
    pub(crate) fn name(&self) -> String {
        let (idx, base) = self.ident();
        format!("{idx}-{base}")
    }

    pub(crate) fn subscribed(&self, e: api::Event) -> bool {
        let n = e as i32;
        n > 0 && self.events.load(Ordering::Relaxed) & (1 << (n - 1)) != 0
    }

    /// Calls a Plugin method within the request timeout.
    pub(crate) async fn call<Req: Message, Resp: Message + Default>(
        &self,
        method: &str,
        req: &Req,
        timeout: std::time::Duration,
    ) -> Result<Resp, Error> {
        self.client.call(PLUGIN_SERVICE, method, req, timeout).await
    }

    /// Closes the connection and stops the process if the host started it.
    pub(crate) async fn close(&self) {
        self.mux.close().await;
        let child = lock(&self.child).take();
        if let Some(mut child) = child {
            let _ = child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        }
    }
}

/// The `(IDX, NAME)` of each executable `IDX-NAME` in `dir`, sorted; none if `dir` does not exist. As in NRI,
/// directories and files no one may execute (a README, a config left there) are skipped without a word; an
/// executable with another name is skipped with a warning (NRI refuses to start any plugin then).
pub(crate) fn launchable(dir: &Path) -> Result<Vec<(String, String)>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("read the NRI plugin dir {}", dir.display()), e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        use std::os::unix::fs::PermissionsExt;
        // Through symlinks, as exec does.
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        let file = entry.file_name().to_string_lossy().into_owned();
        match file.split_once('-') {
            Some((idx, name)) if valid_index(idx) && valid_name(name) => {
                out.push((idx.to_string(), name.to_string()));
            }
            _ => tracing::warn!("NRI: ignoring {file} in the plugin dir: not named IDX-NAME"),
        }
    }
    out.sort();
    Ok(out)
}

fn valid_index(idx: &str) -> bool {
    idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
}

impl Host {
    /// Starts the plugin `dir/IDX-NAME` on one end of a socket pair and registers it.
    pub(super) async fn launch(self: &Arc<Self>, idx: &str, name: &str) -> Result<(), Error> {
        let path = self.config.plugin_dir.join(format!("{idx}-{name}"));
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| Error::io(format!("socket pair for {}", path.display()), e))?;
        let theirs = OwnedFd::from(theirs);
        let fd = theirs.as_raw_fd();
        let mut cmd = std::process::Command::new(&path);
        cmd.env_clear()
            .env("NRI_PLUGIN_NAME", name)
            .env("NRI_PLUGIN_IDX", idx)
            .env("NRI_PLUGIN_SOCKET", "3")
            .stdin(std::process::Stdio::null());
        // SAFETY: between fork and exec only dup2, which is async-signal-safe; it also clears close-on-exec on
        // fd 3, so the plugin inherits its end of the pair there and nothing else of ours.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("start {}", path.display()), e))?;
        drop(theirs);
        ours.set_nonblocking(true)
            .map_err(|e| Error::io("socket pair", e))?;
        let stream = UnixStream::from_std(ours).map_err(|e| Error::io("socket pair", e))?;
        let config = self.plugin_config(idx, name)?;
        self.connect_as(
            stream,
            Some((idx.to_string(), name.to_string(), config)),
            Some(child),
        )
        .await
    }

    /// The drop-in configuration of plugin `IDX-NAME`: `IDX-NAME.conf`, else `NAME.conf`, else none.
    fn plugin_config(&self, idx: &str, name: &str) -> Result<String, Error> {
        for file in [format!("{idx}-{name}.conf"), format!("{name}.conf")] {
            let path = self.config.plugin_config_dir.join(file);
            match std::fs::read_to_string(&path) {
                Ok(text) => return Ok(text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("read {}", path.display()), e)),
            }
        }
        Ok(String::new())
    }

    /// Registers a plugin that connected to the socket.
    pub(super) async fn connect(self: &Arc<Self>, stream: UnixStream, _: Option<()>) -> Result<(), Error> {
        self.connect_as(stream, None, None).await
    }

    /// Serves the Runtime service to the plugin on `stream`, waits for its registration, configures it,
    /// synchronizes it and adds it to the list. `known`: the index, name and config of a plugin the host
    /// started (its registration cannot rename it).
    async fn connect_as(
        self: &Arc<Self>,
        stream: UnixStream,
        known: Option<(String, String, String)>,
        child: Option<std::process::Child>,
    ) -> Result<(), Error> {
        let id = self.new_id();
        let (mux, mut conns) = Mux::new(stream, &[PLUGIN_CONN, RUNTIME_CONN]);
        let (runtime_conn, plugin_conn) = (conns.pop().expect("two conns"), conns.pop().expect("two conns"));
        let (reg_tx, reg_rx) = oneshot::channel();
        let name = Arc::new(StdMutex::new(String::from("unregistered")));
        let registration = Registration {
            tx: StdMutex::new(Some(reg_tx)),
            external: known.is_none(),
        };
        ttrpc::serve(
            runtime_conn,
            runtime_handler(Arc::downgrade(self), registration, name.clone()),
        );
        let weak = Arc::downgrade(self);
        let client = Client::new(plugin_conn, move || {
            if let Some(host) = weak.upgrade() {
                tokio::spawn(async move {
                    let gone = lock(&host.plugins).iter().find(|p| p.id == id).cloned();
                    if let Some(p) = gone {
                        host.drop_plugin(&p, &Error::Closed).await;
                    }
                });
            }
        });
        let plugin = Arc::new(Plugin {
            id,
            ident: StdMutex::new((String::new(), String::new())),
            events: AtomicU32::new(0),
            client,
            mux,
            child: StdMutex::new(child),
        });
        if let Err(e) = self.register(&plugin, reg_rx, known, &name).await {
            plugin.close().await;
            return Err(e);
        }
        Ok(())
    }

    async fn register(
        self: &Arc<Self>,
        plugin: &Arc<Plugin>,
        reg_rx: oneshot::Receiver<Result<api::RegisterPluginRequest, Error>>,
        known: Option<(String, String, String)>,
        shown: &StdMutex<String>,
    ) -> Result<(), Error> {
        let timeout = self.config.registration_timeout;
        let reg = match tokio::time::timeout(timeout, reg_rx).await {
            Ok(Ok(Ok(r))) => r,
            Ok(Ok(Err(refused))) => {
                // Let the refusal reach the plugin before the connection closes: it hangs up on reading it.
                plugin.mux.hung_up(REFUSAL_GRACE).await;
                return Err(refused);
            }
            Ok(Err(_)) => return Err(Error::Closed),
            Err(_) => {
                return Err(Error::Timeout {
                    method: "RegisterPlugin".into(),
                    after: timeout,
                });
            }
        };
        let (idx, base, config) = match known {
            Some(k) => k,
            // Checked by the Runtime service when it answered the registration.
            None => (reg.plugin_idx, reg.plugin_name, String::new()),
        };
        *lock(&plugin.ident) = (idx, base);
        *lock(shown) = plugin.name();
        tracing::info!(
            "NRI: plugin {} registered (NRI {})",
            plugin.name(),
            reg.nri_version
        );

        let req = api::ConfigureRequest {
            config,
            runtime_name: self.config.runtime_name.clone(),
            runtime_version: self.config.runtime_version.clone(),
            registration_timeout: self.config.registration_timeout.as_millis() as i64,
            request_timeout: self.config.request_timeout.as_millis() as i64,
            nri_version: NRI_VERSION.into(),
        };
        let resp: api::ConfigureResponse = plugin
            .call("Configure", &req, self.config.request_timeout)
            .await?;
        let all = (1u32 << (api::Event::Last as i32 - 1)) - 1;
        let events = resp.events as u32;
        if events & !all != 0 {
            return Err(Error::Protocol(format!(
                "plugin {} subscribed to unknown events {:#x}",
                plugin.name(),
                events & !all
            )));
        }
        plugin
            .events
            .store(if events == 0 { all } else { events }, Ordering::Relaxed);

        // No event may pass between the snapshot and the plugin joining the list.
        let updates = {
            let _gate = self.gate.write().await;
            let (pods, containers) = self.runtime.snapshot().await;
            let updates = synchronize(plugin, pods, containers, self.config.request_timeout).await?;
            self.insert(plugin.clone());
            updates
        };
        // Applied outside the gate: the runtime may relay events while it updates.
        if !updates.is_empty() {
            let failed = self.runtime.update_containers(updates, Vec::new()).await;
            if !failed.is_empty() {
                tracing::warn!(
                    "NRI: {} of plugin {}'s updates at synchronization failed",
                    failed.len(),
                    plugin.name()
                );
            }
        }
        Ok(())
    }
}

/// Sends the snapshot, in chunks under ttrpc's size limit if it is large: every chunk but the last says
/// `more`, and the plugin must answer those with `more` and no updates (NRI's split synchronization).
async fn synchronize(
    plugin: &Plugin,
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    timeout: std::time::Duration,
) -> Result<Vec<api::ContainerUpdate>, Error> {
    let limit = ttrpc::MAX_MESSAGE - SYNC_MARGIN;
    let mut chunks = vec![api::SynchronizeRequest::default()];
    let mut size = 0;
    let mut add = |len: usize, chunks: &mut Vec<api::SynchronizeRequest>| {
        if size + len > limit && size > 0 {
            chunks.push(api::SynchronizeRequest::default());
            size = 0;
        }
        size += len + 8;
    };
    for p in pods {
        add(p.encoded_len(), &mut chunks);
        chunks.last_mut().expect("a chunk").pods.push(p);
    }
    for c in containers {
        add(c.encoded_len(), &mut chunks);
        chunks.last_mut().expect("a chunk").containers.push(c);
    }
    let n = chunks.len();
    for (i, mut chunk) in chunks.into_iter().enumerate() {
        chunk.more = i + 1 < n;
        let resp: api::SynchronizeResponse = plugin.call("Synchronize", &chunk, timeout).await?;
        if !chunk.more {
            return Ok(resp.update);
        }
        if !resp.more || !resp.update.is_empty() {
            return Err(Error::Protocol(format!(
                "plugin {} does not take a synchronization in chunks",
                plugin.name()
            )));
        }
    }
    Ok(Vec::new())
}

/// Where the Runtime service hands a plugin's registration to [`Host::register`].
struct Registration {
    tx: StdMutex<Option<oneshot::Sender<Result<api::RegisterPluginRequest, Error>>>>,
    /// A plugin that connected to the socket names itself; one the host started was named by its file.
    external: bool,
}

/// Why an external plugin's registration is refused: a name outside `[A-Za-z0-9-_.+]` or an index that is not
/// two digits (NRI's rules).
fn check_registration(req: &api::RegisterPluginRequest) -> Option<String> {
    if !valid_name(&req.plugin_name) {
        return Some(format!(
            "invalid plugin name {:?}: want one or more of [A-Za-z0-9-_.+]",
            req.plugin_name
        ));
    }
    if !valid_index(&req.plugin_idx) {
        return Some(format!(
            "plugin {:?} registered with invalid index {:?}: want two digits",
            req.plugin_name, req.plugin_idx
        ));
    }
    None
}

/// Serves the Runtime service to one plugin: its registration, then its unsolicited updates. An external
/// plugin's bad name or index fails its RegisterPlugin call with the reason (as NRI does: the plugin learns
/// why instead of waiting for a Configure that never comes) and the host drops the connection.
fn runtime_handler(host: Weak<Host>, reg: Registration, name: Arc<StdMutex<String>>) -> ttrpc::Handler {
    let reg = Arc::new(reg);
    Arc::new(move |service, method, payload| {
        let (host, reg, name) = (host.clone(), reg.clone(), name.clone());
        Box::pin(async move {
            let bad = |e: prost::DecodeError| status(code::INVALID_ARGUMENT, format!("{method}: {e}"));
            match (service.as_str(), method.as_str()) {
                (RUNTIME_SERVICE, "RegisterPlugin") => {
                    let req = api::RegisterPluginRequest::decode(payload.as_slice()).map_err(bad)?;
                    let Some(tx) = lock(&reg.tx).take() else {
                        return Err(status(code::INVALID_ARGUMENT, "plugin already registered"));
                    };
                    match check_registration(&req).filter(|_| reg.external) {
                        None => {
                            let _ = tx.send(Ok(req));
                            Ok(api::Empty {}.encode_to_vec())
                        }
                        Some(why) => {
                            let _ = tx.send(Err(Error::Protocol(why.clone())));
                            Err(status(code::UNKNOWN, why))
                        }
                    }
                }
                (RUNTIME_SERVICE, "UpdateContainers") => {
                    let req = api::UpdateContainersRequest::decode(payload.as_slice()).map_err(bad)?;
                    let host = host
                        .upgrade()
                        .ok_or_else(|| status(code::UNKNOWN, "NRI is shutting down"))?;
                    tracing::info!(
                        "NRI: plugin {} asks to update {} containers",
                        lock(&name),
                        req.update.len()
                    );
                    let failed = host.runtime.update_containers(req.update, req.evict).await;
                    Ok(api::UpdateContainersResponse { failed }.encode_to_vec())
                }
                _ => Err(status(code::UNIMPLEMENTED, format!("{service}/{method}"))),
            }
        })
    })
}
