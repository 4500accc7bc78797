//! The runtime side of NRI: [`Host`] listens on the NRI socket, starts the plugins of the plugin directory,
//! registers, configures and synchronizes each, and relays criusd's pod and container events to them in index
//! order (src/host/events.rs), merging what they answer (src/merge.rs).
//!
//! Events and plugin synchronization exclude each other (a read/write gate): a plugin that joins sees a
//! snapshot, then every later event, never an event its snapshot already had or one it missed.

mod events;
pub(crate) mod plugin;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use crate::{Error, api};
use plugin::Plugin;

/// Where the host listens and looks for plugins, and how long it waits for them.
#[derive(Debug, Clone)]
pub struct Config {
    /// The socket external plugins connect to (NRI's default `/var/run/nri/nri.sock`); empty: none, only the
    /// plugins of `plugin_dir` run.
    pub socket: PathBuf,
    /// Plugins started by the host, executables named `IDX-NAME` (default `/opt/nri/plugins`).
    pub plugin_dir: PathBuf,
    /// Their configuration, `IDX-NAME.conf` or `NAME.conf` (default `/etc/nri/conf.d`).
    pub plugin_config_dir: PathBuf,
    /// How long a plugin has to register after connecting or being started (NRI's default 5 s).
    pub registration_timeout: Duration,
    /// How long a plugin has to answer a request (NRI's default 2 s); a plugin that takes longer is dropped.
    pub request_timeout: Duration,
    /// The runtime's name told to plugins in Configure.
    pub runtime_name: String,
    /// The runtime's version told to plugins in Configure.
    pub runtime_version: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: PathBuf::from("/var/run/nri/nri.sock"),
            plugin_dir: PathBuf::from("/opt/nri/plugins"),
            plugin_config_dir: PathBuf::from("/etc/nri/conf.d"),
            registration_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(2),
            runtime_name: "crius".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// What the host asks of the runtime (criusd).
#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Every pod and container the runtime knows, for a plugin's Synchronize.
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>);
    /// Applies plugins' updates of running containers (as UpdateContainerResources does) and evictions
    /// (stops); returns the updates that failed. Called outside any event, from a plugin's UpdateContainers,
    /// after its Synchronize, and for UpdateContainer's evictions. Updates are applied directly, not relayed
    /// to plugins again through [`Host::update_container`] (as in NRI); stopping an evicted container does
    /// relay StopContainer.
    async fn update_containers(
        &self,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate>;
}

/// The plugins' merged answer to a CreateContainer.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Created {
    /// Changes to the container being created (give it to [`crate::apply`]); `None` if no plugin changed it.
    pub adjust: Option<api::ContainerAdjustment>,
    /// Updates of other containers, to apply once the container is created.
    pub update: Vec<api::ContainerUpdate>,
    /// Containers plugins want stopped.
    pub evict: Vec<api::ContainerEviction>,
}

/// The NRI host: shared (`Arc`) between criusd's CRI calls.
pub struct Host {
    config: Config,
    runtime: Arc<dyn Runtime>,
    /// Registered, configured and synchronized plugins, in index order.
    plugins: StdMutex<Vec<Arc<Plugin>>>,
    gate: RwLock<()>,
    next_id: AtomicU64,
    listener: StdMutex<Option<JoinHandle<()>>>,
}

impl Host {
    /// Starts the host: listens on the socket (if configured) and starts the plugins of the plugin directory,
    /// returning once each has registered and synchronized or failed (a plugin that fails is logged and left out).
    pub async fn start(config: Config, runtime: Arc<dyn Runtime>) -> Result<Arc<Host>, Error> {
        let host = Arc::new(Host {
            config,
            runtime,
            plugins: StdMutex::new(Vec::new()),
            gate: RwLock::new(()),
            next_id: AtomicU64::new(1),
            listener: StdMutex::new(None),
        });
        if !host.config.socket.as_os_str().is_empty() {
            let listener = bind(&host.config.socket)?;
            let weak = Arc::downgrade(&host);
            *lock(&host.listener) = Some(tokio::spawn(accept(weak, listener)));
        }
        let launched: Vec<_> = plugin::launchable(&host.config.plugin_dir)?
            .into_iter()
            .map(|(idx, name)| {
                let host = host.clone();
                tokio::spawn(async move {
                    if let Err(e) = host.launch(&idx, &name).await {
                        tracing::warn!("NRI: plugin {idx}-{name} not started: {e}");
                    }
                })
            })
            .collect();
        for l in launched {
            let _ = l.await;
        }
        Ok(host)
    }

    /// The registered plugins, as `IDX-NAME`, in the order they are called.
    pub fn plugins(&self) -> Vec<String> {
        lock(&self.plugins).iter().map(|p| p.name()).collect()
    }

    /// Stops listening, closes every plugin's connection and stops the plugins the host started.
    pub async fn shutdown(&self) {
        if let Some(l) = lock(&self.listener).take() {
            l.abort();
            let _ = std::fs::remove_file(&self.config.socket);
        }
        let plugins = std::mem::take(&mut *lock(&self.plugins));
        for p in plugins {
            p.close().await;
        }
    }

    /// Adds a synchronized plugin to the list, in index order.
    fn insert(&self, p: Arc<Plugin>) {
        let mut list = lock(&self.plugins);
        let key = p.ident();
        let at = list.partition_point(|q| q.ident() <= key);
        list.insert(at, p);
    }

    /// Drops a plugin that failed (timed out, died, broke the protocol) with a warning.
    async fn drop_plugin(&self, p: &Plugin, why: &Error) {
        let removed = {
            let mut list = lock(&self.plugins);
            let before = list.len();
            list.retain(|q| q.id != p.id);
            before != list.len()
        };
        if removed {
            tracing::warn!("NRI: dropping plugin {}: {why}", p.name());
        }
        p.close().await;
    }

    /// The plugins subscribed to `event`, in index order.
    fn subscribed(&self, event: api::Event) -> Vec<Arc<Plugin>> {
        lock(&self.plugins)
            .iter()
            .filter(|p| p.subscribed(event))
            .cloned()
            .collect()
    }

    fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

fn bind(path: &std::path::Path) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::io(
                format!("remove the stale socket {}", path.display()),
                e,
            ));
        }
    }
    let l = UnixListener::bind(path).map_err(|e| Error::io(format!("listen on {}", path.display()), e))?;
    // Plugins run as root: the socket is for root only, as NRI's is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("chmod {}", path.display()), e))?;
    Ok(l)
}

async fn accept(host: Weak<Host>, listener: UnixListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("NRI: accepting a plugin connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(host) = host.upgrade() else { return };
        tokio::spawn(async move {
            if let Err(e) = host.connect(stream, None).await {
                tracing::warn!("NRI: external plugin not registered: {e}");
            }
        });
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
