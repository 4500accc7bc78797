//! The host against plugins written with [`crate::plugin`] over a real socket: registration, synchronization,
//! subscriptions, merged adjustments, refusal, conflicts, a plugin that hangs and one that dies mid-call,
//! unsolicited updates, and plugins started from the plugin directory.

use std::sync::Mutex as StdMutex;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::*;
use crate::api::{Event, KeyValue};
use crate::plugin::{self, Handler, Stub};

#[derive(Default)]
struct FakeRuntime {
    pods: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    updated: StdMutex<Vec<(Vec<api::ContainerUpdate>, Vec<api::ContainerEviction>)>>,
}

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        (self.pods.clone(), self.containers.clone())
    }
    async fn update_containers(
        &self,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate> {
        let failed = updates
            .iter()
            .filter(|u| u.container_id == "missing")
            .cloned()
            .collect();
        lock(&self.updated).push((updates, evict));
        failed
    }
}

/// A plugin whose behaviour at CreateContainer the test picks; it records what it is told.
struct TestPlugin {
    events: Vec<Event>,
    create: Create,
    seen: mpsc::UnboundedSender<String>,
}

#[derive(Clone)]
enum Create {
    Env(&'static str, &'static str),
    Refuse,
    Hang,
    Crash(mpsc::UnboundedSender<()>),
}

#[async_trait::async_trait]
impl Handler for TestPlugin {
    async fn configure(&self, req: api::ConfigureRequest) -> Result<api::ConfigureResponse, String> {
        let _ = self.seen.send(format!(
            "configure {} {}ms",
            req.runtime_name, req.request_timeout
        ));
        Ok(api::ConfigureResponse {
            events: plugin::events(&self.events),
        })
    }
    async fn synchronize(&self, req: api::SynchronizeRequest) -> Result<api::SynchronizeResponse, String> {
        let _ = self
            .seen
            .send(format!("synchronize {} {}", req.pods.len(), req.containers.len()));
        Ok(api::SynchronizeResponse {
            update: Vec::new(),
            more: req.more,
        })
    }
    async fn notify(&self, e: Event, pod: api::PodSandbox, _: Option<api::Container>) -> Result<(), String> {
        let _ = self.seen.send(format!("{} {}", e.as_str_name(), pod.id));
        Ok(())
    }
    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, String> {
        let c = req.container.unwrap_or_default();
        let _ = self.seen.send(
            format!("create {} {}", c.id, c.env.join(","))
                .trim_end()
                .to_string(),
        );
        match self.create.clone() {
            Create::Env(k, v) => Ok(api::CreateContainerResponse {
                adjust: Some(api::ContainerAdjustment {
                    env: vec![KeyValue {
                        key: k.into(),
                        value: v.into(),
                    }],
                    ..Default::default()
                }),
                update: vec![api::ContainerUpdate {
                    container_id: format!("other-of-{k}"),
                    ..Default::default()
                }],
                evict: Vec::new(),
            }),
            Create::Refuse => Err("this container shall not pass".into()),
            Create::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Err("woke".into())
            }
            Create::Crash(tx) => {
                let _ = tx.send(());
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Err("woke".into())
            }
        }
    }
}

struct Setup {
    host: Arc<Host>,
    runtime: Arc<FakeRuntime>,
    dir: tempfile::TempDir,
}

async fn host(timeout: Duration) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime {
        pods: vec![api::PodSandbox {
            id: "pod1".into(),
            ..Default::default()
        }],
        containers: vec![api::Container {
            id: "c0".into(),
            pod_sandbox_id: "pod1".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    let config = Config {
        socket: dir.path().join("nri.sock"),
        plugin_dir: dir.path().join("plugins"),
        plugin_config_dir: dir.path().join("conf.d"),
        registration_timeout: Duration::from_millis(500),
        request_timeout: timeout,
        ..Config::default()
    };
    let host = Host::start(config, runtime.clone()).await.unwrap();
    Setup { host, runtime, dir }
}

async fn connect(
    s: &Setup,
    idx: &str,
    name: &str,
    events: &[Event],
    create: Create,
) -> (Stub, mpsc::UnboundedReceiver<String>) {
    let (seen, rx) = mpsc::unbounded_channel();
    let h = Arc::new(TestPlugin {
        events: events.to_vec(),
        create,
        seen,
    });
    let stub = Stub::connect(&s.dir.path().join("nri.sock"), name, idx, h)
        .await
        .unwrap();
    // Registration returns before the host has configured and synchronized the plugin.
    for _ in 0..200 {
        if s.host.plugins().contains(&format!("{idx}-{name}")) {
            return (stub, rx);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("plugin {idx}-{name} never joined");
}

fn pod() -> api::PodSandbox {
    api::PodSandbox {
        id: "pod1".into(),
        ..Default::default()
    }
}

fn ctr(id: &str) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: "pod1".into(),
        ..Default::default()
    }
}

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn plugins_register_synchronize_and_hear_only_their_events_in_index_order() {
    let s = host(T).await;
    let (_b, mut seen_b) = connect(
        &s,
        "20",
        "b",
        &[Event::RunPodSandbox, Event::CreateContainer],
        Create::Env("B", "2"),
    )
    .await;
    let (_a, mut seen_a) = connect(&s, "10", "a", &[Event::CreateContainer], Create::Env("A", "1")).await;
    assert_eq!(s.host.plugins(), ["10-a", "20-b"]);
    assert_eq!(seen_a.recv().await.unwrap(), "configure crius 5000ms");
    assert_eq!(seen_a.recv().await.unwrap(), "synchronize 1 1");

    s.host.run_pod_sandbox(&pod()).await;
    let created = s.host.create_container(&pod(), &ctr("c1")).await.unwrap();
    let env: Vec<_> = created.adjust.unwrap().env.into_iter().map(|e| e.key).collect();
    assert_eq!(env, ["A", "B"], "adjustments merge in index order");
    let updated: Vec<_> = created.update.into_iter().map(|u| u.container_id).collect();
    assert!(
        updated.is_empty(),
        "updates without resources change nothing: {updated:?}"
    );

    assert_eq!(
        seen_a.recv().await.unwrap(),
        "create c1",
        "a plugin does not hear RunPodSandbox it did not ask for"
    );
    // The later plugin sees the container as the earlier one changed it.
    for want in [
        "configure crius 5000ms",
        "synchronize 1 1",
        "RUN_POD_SANDBOX pod1",
        "create c1 A=1",
    ] {
        assert_eq!(seen_b.recv().await.unwrap(), want);
    }
}

#[tokio::test]
async fn a_refusal_fails_the_create_and_a_conflict_names_both_plugins() {
    let s = host(T).await;
    let (_a, _) = connect(&s, "10", "a", &[Event::CreateContainer], Create::Env("A", "1")).await;
    let (_b, _) = connect(&s, "20", "b", &[Event::CreateContainer], Create::Env("A", "2")).await;
    let err = s.host.create_container(&pod(), &ctr("c1")).await.unwrap_err();
    assert_eq!(err.to_string(), "NRI plugins 10-a and 20-b both change env A");

    let (_c, _) = connect(&s, "05", "c", &[Event::CreateContainer], Create::Refuse).await;
    let err = s.host.create_container(&pod(), &ctr("c1")).await.unwrap_err();
    assert!(
        matches!(&err, Error::Refused { plugin, message } if plugin == "05-c" && message.contains("shall not pass")),
        "{err}"
    );
    assert_eq!(
        s.host.plugins(),
        ["05-c", "10-a", "20-b"],
        "a refusal does not drop the plugin"
    );
}

#[tokio::test]
async fn a_plugin_that_hangs_is_dropped_after_the_timeout_and_the_call_goes_on() {
    let s = host(Duration::from_millis(300)).await;
    let (_a, _) = connect(&s, "10", "hang", &[Event::CreateContainer], Create::Hang).await;
    let (_b, _) = connect(&s, "20", "b", &[Event::CreateContainer], Create::Env("B", "2")).await;
    let start = Instant::now();
    let created = s.host.create_container(&pod(), &ctr("c1")).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(created.adjust.unwrap().env[0].key, "B");
    assert_eq!(s.host.plugins(), ["20-b"]);
}

#[tokio::test]
async fn a_plugin_that_dies_mid_call_is_dropped_and_the_call_goes_on() {
    let s = host(T).await;
    let (crash_tx, mut crash_rx) = mpsc::unbounded_channel();
    let (a, _) = connect(
        &s,
        "10",
        "crash",
        &[Event::CreateContainer],
        Create::Crash(crash_tx),
    )
    .await;
    let (_b, _) = connect(&s, "20", "b", &[Event::CreateContainer], Create::Env("B", "2")).await;
    let killer = tokio::spawn(async move {
        crash_rx.recv().await;
        a.close().await;
    });
    let start = Instant::now();
    let created = s.host.create_container(&pod(), &ctr("c1")).await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "a dead plugin is not waited for: {:?}",
        start.elapsed()
    );
    assert_eq!(created.adjust.unwrap().env[0].key, "B");
    killer.await.unwrap();
    assert_eq!(s.host.plugins(), ["20-b"]);
}

#[tokio::test]
async fn unsolicited_updates_reach_the_runtime_and_failures_come_back() {
    let s = host(T).await;
    let (a, _) = connect(&s, "10", "a", &[], Create::Refuse).await;
    let update = |id: &str| api::ContainerUpdate {
        container_id: id.into(),
        ..Default::default()
    };
    let evict = api::ContainerEviction {
        container_id: "c0".into(),
        reason: "test".into(),
    };
    let failed = a
        .update_containers(vec![update("c0"), update("missing")], vec![evict])
        .await
        .unwrap();
    assert_eq!(failed, [update("missing")]);
    let got = lock(&s.runtime.updated).clone();
    assert_eq!((got[0].0.len(), got[0].1[0].container_id.as_str()), (2, "c0"));
}

#[tokio::test]
async fn shutdown_closes_the_plugins_connections() {
    let s = host(T).await;
    let (a, _) = connect(&s, "10", "a", &[], Create::Refuse).await;
    s.host.shutdown().await;
    tokio::time::timeout(T, a.closed())
        .await
        .expect("the plugin sees its connection close");
    assert!(!s.dir.path().join("nri.sock").exists());
}

/// A plugin of the plugin dir gets its name, index and socket (fd 3) through the environment; one that never
/// registers is stopped after the registration timeout, and the host starts without it.
#[tokio::test]
async fn plugins_in_the_plugin_dir_are_started_with_nri_environment() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "#!/bin/sh\necho \"$NRI_PLUGIN_IDX $NRI_PLUGIN_NAME $NRI_PLUGIN_SOCKET $(readlink /proc/self/fd/3 | cut -c1-7)\" > {}\nexec sleep 30\n",
        out.display()
    );
    let path = plugins.join("07-silent");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(plugins.join("not-a-plugin"), "").unwrap();
    let config = Config {
        socket: PathBuf::new(),
        plugin_dir: plugins,
        plugin_config_dir: dir.path().join("conf.d"),
        registration_timeout: Duration::from_millis(500),
        ..Config::default()
    };
    let start = Instant::now();
    let host = Host::start(config, Arc::new(FakeRuntime::default()))
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(host.plugins().is_empty());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "07 silent 3 socket:\n");
}

/// A snapshot over ttrpc's 4 MiB limit goes in chunks, all but the last marked `more`.
#[tokio::test]
async fn a_large_snapshot_is_synchronized_in_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let big = "x".repeat(2048);
    let containers = (0..3000)
        .map(|i| {
            let mut c = ctr(&format!("c{i}"));
            c.annotations.insert("big".into(), big.clone());
            c
        })
        .collect();
    let runtime = Arc::new(FakeRuntime {
        pods: vec![pod()],
        containers,
        ..Default::default()
    });
    let config = Config {
        socket: dir.path().join("nri.sock"),
        plugin_dir: dir.path().join("none"),
        ..Config::default()
    };
    let host = Host::start(config, runtime).await.unwrap();
    let s = Setup {
        host,
        runtime: Arc::new(FakeRuntime::default()),
        dir,
    };
    let (_a, mut seen) = connect(&s, "10", "a", &[], Create::Refuse).await;
    seen.recv().await.unwrap();
    let (mut pods, mut ctrs, mut chunks) = (0, 0, 0);
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), seen.recv()).await {
        let n: Vec<usize> = m.split(' ').skip(1).map(|n| n.parse().unwrap()).collect();
        (pods, ctrs, chunks) = (pods + n[0], ctrs + n[1], chunks + 1);
    }
    assert_eq!((pods, ctrs), (1, 3000));
    assert!(chunks >= 2, "{chunks} chunks");
}

/// An external plugin with a bad index or name is refused in its RegisterPlugin answer, with the reason (as
/// NRI does: containerd's stub would otherwise wait forever for a Configure), and never joins.
#[tokio::test]
async fn a_bad_index_or_name_fails_the_registration_call_itself() {
    let s = host(Duration::from_secs(2)).await;
    let sock = s.dir.path().join("nri.sock");
    let quiet = |_: &str| {
        let (seen, _) = mpsc::unbounded_channel();
        Arc::new(TestPlugin {
            events: Vec::new(),
            create: Create::Refuse,
            seen,
        })
    };
    for (idx, name, why) in [
        ("7x", "bad", "invalid index \"7x\""),
        ("10", "no/slash", "invalid plugin name \"no/slash\""),
    ] {
        let started = Instant::now();
        let Err(Error::Status { code, message, .. }) = Stub::connect(&sock, name, idx, quiet(name)).await
        else {
            panic!("{idx}-{name} was not refused in its RegisterPlugin answer");
        };
        assert_eq!(code, 2, "{message}");
        assert!(message.contains(why), "{message}");
        assert!(started.elapsed() < Duration::from_millis(400));
    }
    assert!(s.host.plugins().is_empty());
}

/// Only executables are plugins, as in NRI: a README, a non-executable `IDX-NAME` and a directory are skipped.
#[test]
fn the_plugin_dir_yields_only_executables_named_idx_name() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = |name: &str, mode: u32| {
        std::fs::write(d.join(name), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    file("20-second", 0o755);
    file("10-first", 0o700);
    file("README", 0o644);
    file("30-not-executable", 0o644);
    file("10-first.conf", 0o644);
    std::fs::create_dir(d.join("40-a-dir")).unwrap();
    std::os::unix::fs::symlink(d.join("20-second"), d.join("50-linked")).unwrap();
    assert_eq!(
        super::plugin::launchable(d).unwrap(),
        [("10", "first"), ("20", "second"), ("50", "linked")].map(|(i, n)| (i.to_string(), n.to_string()))
    );
    assert!(super::plugin::launchable(&d.join("missing")).unwrap().is_empty());
}

/// PostUpdatePodSandbox reaches the plugins that asked for it (containerd's logger does), and only them.
#[tokio::test]
async fn post_update_pod_sandbox_is_relayed_to_its_subscribers() {
    let s = host(T).await;
    let (_a, mut seen_a) = connect(&s, "10", "a", &[Event::PostUpdatePodSandbox], Create::Refuse).await;
    let (_b, mut seen_b) = connect(&s, "20", "b", &[Event::RunPodSandbox], Create::Refuse).await;
    s.host.post_update_pod_sandbox(&pod()).await;
    s.host.run_pod_sandbox(&pod()).await;
    for want in [
        "configure crius 5000ms",
        "synchronize 1 1",
        "POST_UPDATE_POD_SANDBOX pod1",
    ] {
        assert_eq!(seen_a.recv().await.unwrap(), want);
    }
    for want in [
        "configure crius 5000ms",
        "synchronize 1 1",
        "RUN_POD_SANDBOX pod1",
    ] {
        assert_eq!(seen_b.recv().await.unwrap(), want);
    }
}
