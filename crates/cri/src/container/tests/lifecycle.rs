//! Create, start, stop and remove against the fake shim: stop signals and grace, the user a process runs
//! as, and concurrent or retried calls on one name or container.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crius_api::cri;
use tonic::Code;

use super::{World, config, open};
use crate::error::{Error, answer as code};
use crate::store::container::State;

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
    let status = crate::container::status::status(&w.containers.get(&id).unwrap());
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
    assert_eq!(
        crate::container::status::status(&w.containers.get(&id).unwrap()).user,
        want
    );
    // Kept in the record: a criusd started again reports the same.
    let again = open(&w.dir, w.shim.clone(), w.images.clone());
    assert_eq!(
        crate::container::status::status(&again.get(&id).unwrap()).user,
        want
    );
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
