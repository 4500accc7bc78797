//! The container lifecycle against the fake shim and image store: no root, no processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crius_api::cri;
use tonic::Code;

use super::{Containers, Setup};
use crate::error::{Error, answer as code};
use crate::image_store::fake::FakeImages;
use crate::shim::fake::FakeShim;
use crate::store::container::State;
use crate::store::sandbox::{Record, Sandbox};

struct World {
    dir: tempfile::TempDir,
    shim: Arc<FakeShim>,
    images: Arc<FakeImages>,
    containers: Containers,
    sandbox: Sandbox,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let shim = Arc::new(FakeShim::default());
        let images = Arc::new(FakeImages::default());
        images.add("busybox", serde_json::json!({"config": {"Cmd": ["sh"]}}));
        images.add(
            "stoppable",
            serde_json::json!({"config": {"Cmd": ["sh"], "StopSignal": "SIGQUIT"}}),
        );
        let containers = open(&dir, shim.clone(), images.clone());
        let sandbox = ready_pod(&dir);
        World {
            dir,
            shim,
            images,
            containers,
            sandbox,
        }
    }

    fn create(&self, name: &str) -> Result<String, Error> {
        self.create_with(config(name, 0, "busybox"))
    }

    fn create_with(&self, c: cri::ContainerConfig) -> Result<String, Error> {
        self.containers.create(&self.sandbox, self.dir.path(), c)
    }

    fn state(&self, id: &str) -> State {
        self.containers.get(id).unwrap().record.state()
    }
}

/// A READY sandbox `sb1` whose files (empty) are in `dir`, and its logs under `dir/logs`.
pub(crate) fn ready_pod(dir: &tempfile::TempDir) -> Sandbox {
    for f in ["hostname", "hosts", "resolv.conf"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    Sandbox {
        record: Record {
            id: "sb1".into(),
            ready: true,
            ..Default::default()
        },
        config: cri::PodSandboxConfig {
            log_directory: dir.path().join("logs").display().to_string(),
            ..Default::default()
        },
    }
}

pub(crate) fn open(
    dir: &tempfile::TempDir,
    shim: Arc<FakeShim>,
    images: Arc<dyn crate::image_store::ImageStore>,
) -> Containers {
    Containers::open(
        Setup {
            records: dir.path().join("records"),
            bundles: dir.path().join("bundles"),
            intents: Arc::new(crate::store::intents::Intents::open(&dir.path().join("intents")).unwrap()),
        },
        shim,
        images,
    )
    .unwrap()
}

pub(crate) fn config(name: &str, attempt: u32, image: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        log_path: format!("{name}/{attempt}.log"),
        labels: [("app".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

#[test]
fn create_start_stop_remove() {
    let w = World::new();
    let mut events = w.containers.subscribe();
    let id = w.create("web").unwrap();
    assert_eq!(w.state(&id), State::Created);
    assert!(
        w.dir
            .path()
            .join("bundles")
            .join(&id)
            .join("config.json")
            .is_file()
    );
    assert!(w.dir.path().join("logs/web").is_dir(), "the log dir is made");
    w.containers.start(&id).unwrap();
    assert_eq!(w.state(&id), State::Running);
    // Verbose: what crictl inspect users read (containerd's keys).
    let c = w.containers.get(&id).unwrap();
    let spec = std::fs::read(w.dir.path().join("bundles").join(&id).join("config.json")).unwrap();
    let info = crate::container::status::verbose_info(&c, Some(&spec));
    let info: serde_json::Value = serde_json::from_str(&info["info"]).unwrap();
    assert!(c.record.pid > 0);
    assert_eq!(info["pid"], c.record.pid);
    assert_eq!(info["sandboxID"], "sb1");
    assert_eq!(info["snapshotKey"], id.as_str());
    assert_eq!(info["runtimeSpec"]["process"]["args"][0], "sh", "{info}");
    assert_eq!(info["config"]["metadata"]["name"], "web", "{info}");
    w.containers.stop(&id, 10).unwrap();
    let st = crate::container::status::status(&w.containers.get(&id).unwrap());
    assert_eq!(st.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!((st.exit_code, st.reason.as_str()), (143, "Error"));
    w.containers.remove(&id).unwrap();
    assert!(w.containers.get(&id).is_none());
    assert!(!w.dir.path().join("bundles").join(&id).exists());
    assert_eq!(
        w.shim.calls(),
        [
            format!("create {id}"),
            format!("start {id}"),
            format!("kill {id} 15"),
            format!("wait {id}"),
            format!("delete {id}"),
        ]
    );
    let kinds: Vec<i32> = std::iter::from_fn(|| events.try_recv().ok())
        .map(|c| c.kind as i32)
        .collect();
    use cri::ContainerEventType as E;
    assert_eq!(
        kinds,
        [
            E::ContainerCreatedEvent as i32,
            E::ContainerStartedEvent as i32,
            E::ContainerStoppedEvent as i32,
            E::ContainerDeletedEvent as i32
        ]
    );
}

#[test]
fn the_images_stop_signal_is_sent_first() {
    let w = World::new();
    let id = w.create_with(config("q", 0, "stoppable")).unwrap();
    w.containers.start(&id).unwrap();
    w.containers.stop(&id, 5).unwrap();
    assert!(
        w.shim.calls().contains(&format!("kill {id} 3")),
        "{:?}",
        w.shim.calls()
    );
}

#[test]
fn the_configs_stop_signal_comes_before_the_images() {
    let w = World::new();
    let mut c = config("u", 0, "stoppable");
    c.stop_signal = cri::Signal::Sigusr1 as i32;
    let id = w.create_with(c).unwrap();
    w.containers.start(&id).unwrap();
    let status = super::status::status(&w.containers.get(&id).unwrap());
    assert_eq!(status.stop_signal, cri::Signal::Sigusr1 as i32);
    w.containers.stop(&id, 5).unwrap();
    let calls = w.shim.calls();
    assert!(calls.contains(&format!("kill {id} 10")), "{calls:?}");
    assert!(!calls.contains(&format!("kill {id} 3")), "{calls:?}");
}

#[test]
fn status_reports_the_user_the_process_was_created_with() {
    let w = World::new();
    let mut c = config("u", 0, "busybox");
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_user: Some(cri::Int64Value { value: 1000 }),
            run_as_group: Some(cri::Int64Value { value: 3000 }),
            supplemental_groups: vec![1234],
            supplemental_groups_policy: cri::SupplementalGroupsPolicy::Strict as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = w.create_with(c).unwrap();
    let want = Some(cri::ContainerUser {
        linux: Some(cri::LinuxContainerUser {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![3000, 1234],
        }),
    });
    assert_eq!(super::status::status(&w.containers.get(&id).unwrap()).user, want);
    // Kept in the record: a criusd started again reports the same.
    let again = open(&w.dir, w.shim.clone(), w.images.clone());
    assert_eq!(super::status::status(&again.get(&id).unwrap()).user, want);
}

#[test]
fn an_unknown_stop_signal_is_refused_at_create() {
    let w = World::new();
    let mut c = config("u", 0, "stoppable");
    c.stop_signal = 99;
    let e = w.create_with(c).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.to_string().contains("stop_signal"), "{e}");
    assert!(w.containers.list_all().is_empty());
}

#[test]
fn stop_keeps_its_grace_period_when_sigterm_is_ignored() {
    let w = World::new();
    *w.shim.ignore_next.lock().unwrap() = vec![15];
    let id = w.create("stubborn").unwrap();
    w.containers.start(&id).unwrap();
    let t = Instant::now();
    w.containers.stop(&id, 1).unwrap();
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "StopContainer with a 1 s grace period took {took:?}"
    );
    let calls = w.shim.calls();
    let waits = calls.iter().filter(|c| c.starts_with("wait")).count();
    assert_eq!(
        waits, 2,
        "one wait for the grace period, one after SIGKILL: {calls:?}"
    );
    assert!(calls.contains(&format!("kill {id} 9")));
    assert_eq!(w.containers.get(&id).unwrap().record.exit_code, 137);
}

/// ExecSync run to its end on a runtime of its own (the call is a future).
fn exec_sync(c: &Containers, id: &str, cmd: &[String], timeout: i64) -> Result<cri::ExecSyncResponse, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(c.exec_sync(id, cmd, timeout))
}

#[test]
fn concurrent_creates_of_one_name_make_one_container() {
    let w = Arc::new(World::new());
    // Another config for the same name: exactly one of them makes it, the others are told who did.
    let results: Vec<Result<String, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let w = &w;
                s.spawn(move || {
                    let mut c = config("web", 0, "busybox");
                    c.labels.insert("v".into(), i.to_string());
                    w.create_with(c)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made: Vec<String> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    assert_eq!(made.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(e.to_string().contains(made[0].as_str()), "names the holder: {e}");
        }
    }
    let codes: Vec<Code> = results
        .into_iter()
        .filter_map(Result::err)
        .map(|e| code(e).0)
        .collect();
    assert_eq!(codes, [Code::AlreadyExists; 5]);
    assert_eq!(w.containers.list_all().len(), 1);
    // kubelet's restart of it is a new attempt, which is a new name; removing frees the old one.
    let again = w.create_with(config("web", 1, "busybox")).unwrap();
    w.containers.remove(&made[0]).unwrap();
    w.create("web").unwrap();
    assert_ne!(again, made[0]);
}

#[test]
fn concurrent_stops_and_removes_of_one_container_all_succeed() {
    for round in 0..20 {
        let w = World::new();
        let id = w.create("web").unwrap();
        w.containers.start(&id).unwrap();
        let results: Vec<Result<(), Error>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let (w, id) = (&w, &id);
                    s.spawn(move || {
                        if i % 2 == 0 {
                            w.containers.stop(id, 0)
                        } else {
                            w.containers.remove(id)
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            if let Err(e) = r {
                let (c, msg) = code(e);
                assert_eq!(c, Code::NotFound, "round {round}: {msg}");
            }
        }
        assert!(w.containers.get(&id).is_none(), "round {round}: removed");
    }
}

#[test]
fn a_retried_create_gets_the_container_the_first_call_made() {
    let w = Arc::new(World::new());
    // kubelet retries a CreateContainer after its own deadline: the same request, maybe while the first runs.
    let results: Vec<Result<String, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6).map(|_| s.spawn(|| w.create("db"))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: Vec<String> = results.into_iter().map(Result::unwrap).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(w.containers.list_all().len(), 1);
    let creates = w.shim.calls().iter().filter(|c| c.starts_with("create ")).count();
    assert_eq!(creates, 1, "one task: {:?}", w.shim.calls());
    // After the first call, a retry gets the same id still.
    assert_eq!(w.create("db").unwrap(), ids[0]);
}

#[test]
fn a_failed_create_leaves_nothing_and_frees_its_name() {
    let w = World::new();
    *w.shim.gone.lock().unwrap() = true;
    let (c, msg) = code(w.create("web").unwrap_err());
    assert_eq!(c, Code::Unavailable, "{msg}");
    assert!(w.containers.list_all().is_empty());
    assert_eq!(
        std::fs::read_dir(w.dir.path().join("bundles")).unwrap().count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(w.images.dir.path()).unwrap().count(),
        0,
        "snapshot removed"
    );
    *w.shim.gone.lock().unwrap() = false;
    w.create("web").unwrap();
}

#[test]
fn bad_input_gets_its_code_before_anything_is_made() {
    let w = World::new();
    let (c, msg) = code(w.create_with(cri::ContainerConfig::default()).unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert_eq!(msg, "CreateContainer: config.metadata is missing");
    let (c, msg) = code(w.create_with(config("", 0, "busybox")).unwrap_err());
    assert_eq!(
        (c, msg.as_str()),
        (Code::InvalidArgument, "CreateContainer: metadata.name is empty")
    );
    let (c, msg) = code(w.create_with(config("x", 0, "nope:1")).unwrap_err());
    assert_eq!(c, Code::NotFound);
    assert!(
        msg.contains("\"nope:1\"") && msg.contains("pull it first"),
        "{msg}"
    );
    w.images.add("model:1", serde_json::json!({}));
    w.images.make_artifact("model:1", "application/vnd.example.model");
    let (c, msg) = code(w.create_with(config("x", 0, "model:1")).unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert!(
        msg.contains("model:1 is an OCI artifact (application/vnd.example.model)")
            && msg.contains("image volume"),
        "{msg}"
    );
    let mut not_ready = World::new();
    not_ready.sandbox.record.ready = false;
    let (c, msg) = code(not_ready.create("x").unwrap_err());
    assert_eq!(c, Code::FailedPrecondition);
    assert!(msg.contains("sb1") && msg.contains("not ready"), "{msg}");
    let mut group_only = config("g", 0, "busybox");
    group_only.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_group: Some(cri::Int64Value { value: 5 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let (c, msg) = code(w.create_with(group_only).unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert!(msg.contains("run_as_group"), "{msg}");
    assert!(
        w.shim.calls().is_empty(),
        "the shim was never asked: {:?}",
        w.shim.calls()
    );
    assert!(w.containers.list_all().is_empty());
    // Calls on unknown ids: status-like ones are NotFound, stop and remove are done.
    assert_eq!(code(w.containers.start("nope").unwrap_err()).0, Code::NotFound);
    assert_eq!(
        code(w.containers.update("nope", &Default::default()).unwrap_err()).0,
        Code::NotFound
    );
    assert_eq!(
        code(w.containers.reopen_log("nope").unwrap_err()).0,
        Code::NotFound
    );
    w.containers.stop("nope", 1).unwrap();
    w.containers.remove("nope").unwrap();
}

/// CreateContainer of `c` is refused with InvalidArgument naming `field`; nothing is made (no record, no
/// file, no snapshot, no shim call), and the name is still free.
fn refused(c: cri::ContainerConfig, field: &str) {
    let w = World::new();
    let before = (
        crate::validate::tests::tree(w.dir.path()),
        crate::validate::tests::tree(w.images.dir.path()),
    );
    let name = c.metadata.as_ref().unwrap().name.clone();
    let (code_, msg) = code(w.create_with(c).unwrap_err());
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    assert!(
        msg.starts_with(&format!("CreateContainer: {field} ")),
        "names {field}: {msg}"
    );
    assert!(w.containers.list_all().is_empty(), "no record");
    assert!(w.shim.calls().is_empty(), "no shim call: {:?}", w.shim.calls());
    assert_eq!(
        (
            crate::validate::tests::tree(w.dir.path()),
            crate::validate::tests::tree(w.images.dir.path())
        ),
        before,
        "nothing made"
    );
    w.create(&name).unwrap();
}

fn with_linux(mut c: cri::ContainerConfig, r: cri::LinuxContainerResources) -> cri::ContainerConfig {
    c.linux = Some(cri::LinuxContainerConfig {
        resources: Some(r),
        ..Default::default()
    });
    c
}

#[test]
fn a_missing_image_reference_is_invalid_not_not_found() {
    let mut c = config("x", 0, "");
    refused(c.clone(), "image.image");
    c.image = None;
    refused(c, "image.image");
}

#[test]
fn a_log_path_that_leaves_the_log_directory_is_refused() {
    for p in ["/etc/passwd", "../../etc/cron.d/x", "x/../../y.log"] {
        let mut c = config("x", 0, "busybox");
        c.log_path = p.into();
        refused(c, "log_path");
    }
}

#[test]
fn nul_bytes_in_argv_or_env_are_refused() {
    let mut c = config("x", 0, "busybox");
    c.command = vec!["sh".into(), "-c\0x".into()];
    refused(c, "command[1]");
    let mut c = config("x", 0, "busybox");
    c.args = vec!["a\0".into()];
    refused(c, "args[0]");
    let mut c = config("x", 0, "busybox");
    c.envs = vec![cri::KeyValue {
        key: "A".into(),
        value: "b\0c".into(),
    }];
    refused(c, "envs[0].value");
}

#[test]
fn an_env_key_that_is_empty_or_has_an_equals_sign_is_refused() {
    for key in ["", "A=B"] {
        let mut c = config("x", 0, "busybox");
        c.envs = vec![
            cri::KeyValue {
                key: "OK".into(),
                value: "1".into(),
            },
            cri::KeyValue {
                key: key.into(),
                value: "2".into(),
            },
        ];
        refused(c, "envs[1].key");
    }
}

#[test]
fn cpu_quota_and_period_out_of_range_are_refused() {
    let c = || config("x", 0, "busybox");
    refused(
        with_linux(
            c(),
            cri::LinuxContainerResources {
                cpu_quota: -1,
                ..Default::default()
            },
        ),
        "linux.resources.cpu_quota",
    );
    for period in [999, 1_000_001, -5] {
        refused(
            with_linux(
                c(),
                cri::LinuxContainerResources {
                    cpu_period: period,
                    ..Default::default()
                },
            ),
            "linux.resources.cpu_period",
        );
    }
}

#[test]
fn a_memory_limit_below_the_floor_is_refused() {
    for limit in [1, 4 * 1024 * 1024, -1] {
        refused(
            with_linux(
                config("x", 0, "busybox"),
                cri::LinuxContainerResources {
                    memory_limit_in_bytes: limit,
                    ..Default::default()
                },
            ),
            "linux.resources.memory_limit_in_bytes",
        );
    }
}

#[test]
fn unknown_unified_keys_are_refused() {
    for key in ["cgroup.procs", "memory.current", "memroy.max"] {
        refused(
            with_linux(
                config("x", 0, "busybox"),
                cri::LinuxContainerResources {
                    unified: [(key.to_string(), "1".to_string())].into(),
                    ..Default::default()
                },
            ),
            "linux.resources.unified",
        );
    }
}

#[test]
fn updates_are_checked_the_same_way() {
    let w = World::new();
    let id = w.create("web").unwrap();
    w.containers.start(&id).unwrap();
    let calls = w.shim.calls().len();
    for (r, field) in [
        (
            cri::LinuxContainerResources {
                cpu_period: 10,
                ..Default::default()
            },
            "linux.cpu_period",
        ),
        (
            cri::LinuxContainerResources {
                unified: [("cgroup.procs".to_string(), "1".to_string())].into(),
                ..Default::default()
            },
            "linux.unified",
        ),
    ] {
        let (c, msg) = code(w.containers.update(&id, &r).unwrap_err());
        assert_eq!(c, Code::InvalidArgument, "{msg}");
        assert!(
            msg.starts_with(&format!("UpdateContainerResources: {field} ")),
            "{msg}"
        );
    }
    assert_eq!(w.shim.calls().len(), calls, "the shim was not asked");
}

#[test]
fn empty_container_ids_are_invalid_in_every_call() {
    let w = World::new();
    let empty = |r: Result<(), Error>, call: &str| {
        assert_eq!(
            code(r.unwrap_err()),
            (Code::InvalidArgument, format!("{call}: container_id is empty"))
        );
    };
    let c = &w.containers;
    empty(c.start(""), "StartContainer");
    empty(c.stop("", 1), "StopContainer");
    empty(c.remove(""), "RemoveContainer");
    empty(c.update("", &Default::default()), "UpdateContainerResources");
    empty(c.reopen_log(""), "ReopenContainerLog");
    empty(exec_sync(c, "", &["true".into()], 1).map(drop), "ExecSync");
    empty(c.check_exec("", &["true".into()], false, false), "Exec");
    empty(c.check_attach("", false, false, true), "Attach");
    empty(
        c.get_or_not_found("ContainerStatus", "").map(drop),
        "ContainerStatus",
    );
}

#[test]
fn nul_bytes_in_an_exec_command_are_refused() {
    let w = World::new();
    let id = w.create("web").unwrap();
    w.containers.start(&id).unwrap();
    let (c, msg) = code(exec_sync(&w.containers, &id, &["a\0b".into()], 1).unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert!(msg.starts_with("ExecSync: cmd[0] "), "{msg}");
    let (c, msg) = code(
        w.containers
            .check_exec(&id, &["x".into(), "\0".into()], false, false)
            .unwrap_err(),
    );
    assert_eq!(c, Code::InvalidArgument);
    assert!(msg.starts_with("Exec: cmd[1] "), "{msg}");
}

#[test]
fn exits_come_from_events_once() {
    let w = World::new();
    let mut events = w.containers.subscribe();
    let id = w.create("job").unwrap();
    w.containers.start(&id).unwrap();
    let exit = w.shim.exit(&id, "", 0);
    w.containers.mark_exit(&id, exit.status as i32, exit.at_ns);
    w.containers.mark_exit(&id, 1, exit.at_ns + 5);
    let c = w.containers.get(&id).unwrap();
    assert_eq!(
        (c.record.state(), c.record.exit_code, c.record.finished_at),
        (State::Exited, 0, exit.at_ns)
    );
    let st = crate::container::status::status(&c);
    assert_eq!(st.reason, "Completed");
    let stopped = std::iter::from_fn(|| events.try_recv().ok())
        .filter(|c| c.kind == cri::ContainerEventType::ContainerStoppedEvent)
        .count();
    assert_eq!(stopped, 1);
    // Stop of an exited container does nothing; an OOM kill reads as such.
    let n = w.shim.calls().len();
    w.containers.stop(&id, 10).unwrap();
    assert_eq!(w.shim.calls().len(), n);
    w.containers.mark_oom(&id);
    assert_eq!(
        crate::container::status::status(&w.containers.get(&id).unwrap()).reason,
        "OOMKilled"
    );
}

#[test]
fn listing_a_thousand_containers_asks_no_shim() {
    let w = World::new();
    let mut ids = Vec::new();
    for i in 0..1000 {
        ids.push(w.create(&format!("c{i}")).unwrap());
    }
    for id in ids.iter().step_by(2) {
        w.containers.start(id).unwrap();
    }
    let before = w.shim.calls().len();
    let all = crate::container::list(&w.containers, None);
    assert_eq!(all.len(), 1000);
    // The image id as ContainerStatus and ImageStatus give it (critest's image identifier consistency).
    let st = crate::container::status::status(&w.containers.get(&all[0].id).unwrap());
    assert!(!all[0].image_id.is_empty());
    assert_eq!(
        (all[0].image_id.as_str(), all[0].image_ref.as_str()),
        (st.image_id.as_str(), st.image_ref.as_str())
    );
    let running = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    assert_eq!(crate::container::list(&w.containers, Some(&running)).len(), 500);
    let labelled = cri::ContainerFilter {
        label_selector: [("app".to_string(), "c7".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(crate::container::list(&w.containers, Some(&labelled)).len(), 1);
    for id in &ids[..10] {
        crate::container::status::status(&w.containers.get(id).unwrap());
    }
    assert_eq!(w.shim.calls().len(), before, "no shim call for listing or status");
}

#[test]
fn a_dead_shim_makes_its_containers_unknown_until_an_exit_is_known() {
    let w = World::new();
    let a = w.create("a").unwrap();
    let b = w.create("b").unwrap();
    w.containers.start(&a).unwrap();
    w.containers.start(&b).unwrap();
    w.containers.mark_exit(&b, 2, 0);
    w.containers.shim_gone("sb1");
    assert_eq!(w.state(&a), State::Unknown);
    assert_eq!(w.state(&b), State::Exited, "a known exit stays");
    // Stop of an unknown container is done; a late exit event still lands.
    w.containers.stop(&a, 1).unwrap();
    w.containers.mark_exit(&a, 137, 0);
    assert_eq!(w.state(&a), State::Exited);
}

#[test]
fn recovery_reads_each_unfinished_container_once() {
    let w = World::new();
    let running = w.create("running").unwrap();
    let exited = w.create("exited").unwrap();
    let created = w.create("created").unwrap();
    w.containers.start(&running).unwrap();
    w.containers.start(&exited).unwrap();
    // While criusd is down, one exits.
    w.shim.exit(&exited, "", 9);
    let before = w.shim.calls().len();
    let again = open(&w.dir, w.shim.clone(), w.images.clone());
    again.recover();
    let states = |c: &Containers| [&running, &exited, &created].map(|id| c.get(id).unwrap().record.state());
    assert_eq!(states(&again), [State::Running, State::Exited, State::Created]);
    assert_eq!(again.get(&exited).unwrap().record.exit_code, 9);
    assert_eq!(w.shim.calls().len() - before, 3, "one state call each");
    // Names come back with the records, and with the requests that took them: the same request again is a
    // retry (the container made), another one is refused naming the holder.
    let same = again.create(&w.sandbox, w.dir.path(), config("running", 0, "busybox"));
    assert_eq!(same.unwrap(), running);
    let mut other = config("running", 0, "busybox");
    other.labels.insert("v".into(), "2".into());
    let (c, msg) = code(again.create(&w.sandbox, w.dir.path(), other).unwrap_err());
    assert_eq!(c, Code::AlreadyExists);
    assert!(msg.contains(&running), "{msg}");
    // With the shim gone, unfinished containers are UNKNOWN.
    *w.shim.gone.lock().unwrap() = true;
    let third = open(&w.dir, w.shim.clone(), w.images.clone());
    third.recover();
    assert_eq!(states(&third), [State::Unknown, State::Exited, State::Unknown]);
}

#[test]
fn updates_merge_apply_live_and_are_reported() {
    let w = World::new();
    let mut c = config("web", 0, "busybox");
    c.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = w.create_with(c).unwrap();
    w.containers.start(&id).unwrap();
    let new = cri::LinuxContainerResources {
        cpu_quota: 150_000,
        ..Default::default()
    };
    w.containers.update(&id, &new).unwrap();
    let sent = w
        .shim
        .calls()
        .into_iter()
        .find(|c| c.starts_with("update"))
        .unwrap();
    assert!(
        sent.contains("\"quota\":150000") && sent.contains("\"period\":100000"),
        "{sent}"
    );
    assert!(sent.contains("\"limit\":67108864"), "{sent}");
    let st = crate::container::status::status(&w.containers.get(&id).unwrap());
    let r = st.resources.unwrap().linux.unwrap();
    assert_eq!(
        (r.cpu_quota, r.cpu_period, r.memory_limit_in_bytes),
        (150_000, 100_000, 64 << 20)
    );
    w.containers.reopen_log(&id).unwrap();
    assert!(w.shim.calls().contains(&format!("reopen-log {id}")));
}

#[test]
fn stats_come_from_the_shim_for_running_containers() {
    let w = World::new();
    let a = w.create("a").unwrap();
    let b = w.create("b").unwrap();
    w.containers.start(&a).unwrap();
    let all = crate::container::list_stats(&w.containers, None);
    assert_eq!(all.len(), 1);
    let s = &all[0];
    assert_eq!(s.attributes.as_ref().unwrap().id, a);
    assert_eq!(
        s.memory.as_ref().unwrap().usage_bytes.as_ref().unwrap().value,
        1 << 20
    );
    assert_eq!(
        s.cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds
            .as_ref()
            .unwrap()
            .value,
        5_000_000
    );
    // Pressure where the shim has it (the fake's cpu and memory), none where it has not (its io).
    let some = |p: &Option<cri::PsiStats>| p.as_ref().and_then(|p| p.some.as_ref()).map(|d| d.total);
    assert_eq!(some(&s.cpu.as_ref().unwrap().psi), Some(1000));
    assert_eq!(some(&s.memory.as_ref().unwrap().psi), Some(1000));
    assert!(s.io.is_none());
    let idle = w.containers.stats(&w.containers.get(&b).unwrap());
    assert!(idle.cpu.is_none() && idle.writable_layer.is_some());
}

mod exec_sync;
