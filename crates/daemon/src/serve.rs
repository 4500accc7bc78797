//! Starting and stopping: logging, directories, the single-instance lock, the socket, the gRPC server, NRI's plugin host (`[nri] enable`), and a
//! clean shutdown on SIGTERM or SIGINT (in-flight calls finish, the socket file is removed).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crius_api::cri::image_service_server::ImageServiceServer;
use crius_api::cri::runtime_service_server::RuntimeServiceServer;
use crius_api::images::images_server::ImagesServer;
use crius_api::pod::pod_service_server::PodServiceServer;
use nix::fcntl::{Flock, FlockArg};
use tokio::signal::unix::{SignalKind, signal};

use crate::config::Config;

/// Sets up `tracing` on stderr as the config asks.
pub fn init_logging(c: &Config) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(&c.log_level)
        .map_err(|e| format!("log_level {:?}: {e}", c.log_level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let r = if c.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.with_ansi(false).try_init()
    };
    r.map_err(|e| format!("setting up logging: {e}"))
}

fn mkdir(p: &Path, mode: u32) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("creating {}: {e}", p.display()))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("setting the mode of {}: {e}", p.display()))
}

/// The directories criusd keeps under `--root` and `--state`, made 0700 before anything is put in them.
const PRIVATE_DIRS: &[(&str, &str)] = &[
    ("root", "containers"),
    ("root", "sandboxes"),
    ("root", "images"),
    ("state", "containers"),
    ("state", "ns"),
    ("state", "sandboxes"),
    ("state", "intents"),
];

/// Gives every entry directly in `dir` its owner's access alone: directories 0700, files and sockets 0600
/// (what an older criusd made 0755 or 0644 is tightened at start-up). Symlinks are left alone.
fn tighten(dir: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        let mode = if t.is_dir() {
            crius_cri::store::DIR_MODE
        } else if t.is_symlink() {
            continue;
        } else {
            crius_cri::store::FILE_MODE
        };
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode))
            .map_err(|err| format!("setting the mode of {}: {err}", e.path().display()))?;
    }
    Ok(())
}

/// Holds `<state>/criusd.lock` for the daemon's lifetime: a second criusd on the same state dir is refused.
fn lock(state: &Path) -> Result<Flock<std::fs::File>, String> {
    let path = state.join("criusd.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(crius_cri::store::FILE_MODE)
        .open(&path)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut held = Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|_| {
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        format!(
            "another criusd (pid {}) is using state dir {}",
            pid.trim(),
            state.display()
        )
    })?;
    held.set_len(0)
        .and_then(|_| held.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(held)
}

/// Binds the socket: a stale file (nothing listening) is replaced; a live one is an error.
fn bind(c: &Config) -> Result<tokio::net::UnixListener, String> {
    let path = &c.listen;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{} is in use by another server", path.display()));
        }
        std::fs::remove_file(path).map_err(|e| format!("removing stale {}: {e}", path.display()))?;
    }
    let l =
        tokio::net::UnixListener::bind(path).map_err(|e| format!("listening on {}: {e}", path.display()))?;
    if let Some(gid) = c.listen_gid()? {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| format!("setting the group of {} to {gid}: {e}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(c.listen_mode))
        .map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
    Ok(l)
}

/// Watches SIGTERM and SIGINT from now on. It is called before the socket exists, so that a client that
/// sees the socket and signals criusd never meets the default action (death without clean-up).
fn shutdown_signal() -> impl Future<Output = ()> {
    let watched = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
    async move {
        let (Ok(mut term), Ok(mut int)) = watched else {
            tracing::error!("cannot watch SIGTERM/SIGINT; stop criusd with SIGKILL");
            return std::future::pending().await;
        };
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(c: Config) -> Result<(), String> {
    // Nothing under root is anyone else's business. State is 0711 so that the socket's group (listen_mode)
    // reaches a socket kept in it; everything in it is 0700 or 0600.
    mkdir(&c.root, 0o700)?;
    mkdir(&c.state, 0o711)?;
    let _lock = lock(&c.state)?;
    for (base, name) in PRIVATE_DIRS {
        let dir = if *base == "root" { &c.root } else { &c.state }.join(name);
        crius_cri::store::private_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    // crius's AppArmor profile for RuntimeDefault containers, where the kernel has AppArmor. Without it those
    // containers are refused (each create tries to load it again), the others run: not fatal.
    match crius_cri::convert::load_apparmor_default() {
        Ok(true) => tracing::info!(
            "loaded the AppArmor profile {}",
            crius_cri::convert::APPARMOR_DEFAULT_PROFILE
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            "loading the AppArmor profile {}: {e}",
            crius_cri::convert::APPARMOR_DEFAULT_PROFILE
        ),
    }
    let driver = c.runtime.cgroup_driver()?;
    tracing::info!(cgroup_driver = ?driver, "cgroup driver");
    let mut store = crius_image::Store::open(&c.root.join("images"))
        .map_err(|e| format!("opening the image store: {e}"))?
        .with_limits(c.image.limits());
    if let Some(dir) = c.storage.snapshot_root() {
        store = store
            .with_snapshot_root(&dir)
            .map_err(|e| format!("[storage] container_root: {e}"))?;
        tracing::info!(snapshots = %dir.display(), "containers' writable layers");
    }
    // A pull or import cut off by a crash stored blobs and layers before the image record that uses them: with
    // no writer running yet, whatever no image or snapshot uses is dropped now.
    match store.collect_garbage() {
        Ok(c) if c != crius_image::gc::Collected::default() => {
            tracing::info!(
                blobs = c.blobs,
                layers = c.layers,
                "image store: repaired, unused content removed"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("image store: collecting unused content: {e}"),
    }
    let runtime = crius_cri::node::Node::open(
        &crius_cri::node::Setup {
            root: c.root.clone(),
            state: c.state.clone(),
            shim: c.shim(),
            owner: c.listen.display().to_string(),
            cni: c.cni(),
            handlers: std::sync::Arc::new(c.handlers()?),
            cgroup_driver: driver,
            cgroup_parent_root: c.runtime.cgroup_parent_root()?,
            direct_exec: c.runtime.direct_exec,
            cdi_spec_dirs: c.cdi.spec_dirs.clone(),
        },
        store.clone(),
    )
    .map_err(|e| e.to_string())?;
    for dir in [&c.root, &c.state, &c.root.join("images")] {
        tighten(dir)?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        // A blocking thread idle for 2 s ends, giving back its stack: bursts (a pod start, a pull) come and go.
        .thread_keep_alive(std::time::Duration::from_secs(2))
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    let result = rt.block_on(async {
        crate::memory::spawn_trimmer();
        let stop = shutdown_signal();
        let listener = bind(&c)?;
        let metrics = c.metrics_address()?.map(|a| (a, crate::metrics::Metrics::new()));
        let pulls = metrics.as_ref().map(|(_, m)| m.pulls.clone()).unwrap_or_default();
        let images = crius_cri::grpc::image::ImageService::counting(store, c.image_config()?, pulls);
        let api = crius_cri::grpc::images_api::ImagesApi::new(images.clone());
        tracing::info!(
            socket = %c.listen.display(),
            root = %c.root.display(),
            state = %c.state.display(),
            version = env!("CARGO_PKG_VERSION"),
            "criusd serving"
        );
        let runtime = std::sync::Arc::new(runtime);
        let kept = runtime.clone();
        let nri = if c.nri.enable {
            let (registration_timeout, request_timeout) = c.nri.timeouts()?;
            let config = crius_cri::nri::Config {
                socket: c.nri.socket_path.clone(),
                plugin_dir: c.nri.plugin_path.clone(),
                plugin_config_dir: c.nri.plugin_config_path.clone(),
                registration_timeout,
                request_timeout,
                runtime_name: crius_cri::grpc::runtime_service::RUNTIME_NAME.into(),
                runtime_version: env!("CARGO_PKG_VERSION").into(),
            };
            let started = crius_cri::nri::start(config, &runtime)
                .await
                .map_err(|e| format!("starting NRI on {}: {e}", c.nri.socket_path.display()))?;
            tracing::info!(socket = %c.nri.socket_path.display(), plugins = %c.nri.plugin_path.display(), "NRI plugins hosted");
            Some(started)
        } else {
            None
        };
        let calls = match metrics {
            Some((address, mut m)) => {
                m.watch(runtime.clone());
                let calls = m.calls.clone();
                let bound = crate::metrics::serve(address, std::sync::Arc::new(m)).await?;
                tracing::info!(address = %bound, "metrics at http://{bound}/metrics");
                Some(calls)
            }
            None => None,
        };
        let stream_config = c.stream_config()?;
        // One limit on the threads of calls that wait, for the RuntimeService's and the streams' alike.
        let waiting = crius_cri::grpc::waiting::Waiting::default();
        let streams = crius_stream::server::Server::start(
            stream_config,
            std::sync::Arc::new(
                crius_cri::streaming::Streaming::new(runtime.clone()).with_waiting(waiting.clone()),
            ),
        )
        .await
        .map_err(|e| e.to_string())?;
        tracing::info!(address = %streams.local_addr(), "streaming server listening");
        let pods = crius_workloads::Service::start(
            crius_workloads::Settings {
                dir: c.root.join("pod-service"),
                engine: crius_pod::Options {
                    pods_dir: c.root.join("pods"),
                    log_root: c.pods.log_root.clone(),
                    backoff: std::time::Duration::from_millis(c.pods.restart_backoff_ms),
                    pull: c.pods.pull_policy()?,
                    cgroup_root: c.pods.cgroup_root(driver)?,
                    allocatable: c.pods.allocatable(),
                    started: Some(std::time::Instant::now()),
                    ..Default::default()
                },
            },
            crius_api::connect_lazy(&c.listen),
        )
        .map_err(|e| format!("starting the pod service: {e}"))?;
        let (down, shutdown) = tokio::sync::watch::channel(false);
        let served = tonic::transport::Server::builder()
            .layer(tower::util::option_layer(calls.map(|c| c.layer())))
            .layer(crate::deadline::LAYER)
            .add_service(ImageServiceServer::new(images.clone()))
            .add_service(RuntimeServiceServer::new(
                crius_cri::grpc::runtime_service::RuntimeService::shared(runtime)
                    .with_waiting(waiting)
                    .with_streaming(std::sync::Arc::new(streams))
                    .with_shutdown(shutdown),
            ))
            .add_service(ImagesServer::new(api))
            .add_service(PodServiceServer::new(pods.clone()))
            .serve_with_incoming_shutdown(
                tokio_stream::StreamExt::map(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    |accepted| accepted.map(crate::authority::Lenient::new),
                ),
                async move {
                    stop.await;
                    // The pods stay as they are: their engines' view of a runtime going away is not news.
                    pods.close();
                    let _ = down.send(true);
                },
            )
            .await;
        let _ = std::fs::remove_file(&c.listen);
        if let Some(nri) = nri {
            nri.shutdown().await;
        }
        served.map_err(|e| format!("serving on {}: {e}", c.listen.display()))?;
        let census = kept.census();
        let count = |by: &[(&str, u64)]| by.iter().map(|(_, n)| n).sum::<u64>();
        tracing::info!(
            sandboxes = count(&census.pods),
            containers = count(&census.containers),
            "stopped (the records it keeps for the next start)"
        );
        Ok(())
    });
    // Calls still waiting on a shim (an exec or attach session's wait for its process) are not waited for:
    // the shims keep the containers, and the sessions end with criusd.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
