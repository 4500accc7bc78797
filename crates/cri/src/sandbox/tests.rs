//! The sandbox lifecycle against the fake network and namespaces: no root.

use std::sync::Arc;

use crius_api::cri;
use tonic::Code;

use super::*;
use crate::error::answer as code;
use crate::network::fake::{FakeNamespaces, FakeNetwork};

struct World {
    dir: tempfile::TempDir,
    net: Arc<FakeNetwork>,
    pods: Pods,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let net = Arc::new(FakeNetwork::default());
    let pods = Pods::open(
        &dir.path().join("sandboxes"),
        dir.path().join("ns"),
        dir.path().join("files"),
        net.clone(),
        Arc::new(FakeNamespaces),
        Arc::new(Intents::open(&dir.path().join("intents")).unwrap()),
    )
    .unwrap();
    World { dir, net, pods }
}

fn config(name: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            attempt: 0,
        }),
        hostname: name.into(),
        labels: [("app".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

#[test]
fn run_stop_remove_with_a_network() {
    let w = world();
    let id = w.pods.run(config("web"), String::new()).unwrap();
    let s = w.pods.sandboxes.get(&id).unwrap();
    assert!(s.record.ready);
    assert_eq!(s.record.ips, ["10.88.0.2"]);
    assert!(s.record.namespaces.net.is_some() && s.record.namespaces.uts.is_some());
    let files = w.pods.files_of(&id);
    assert_eq!(
        files,
        w.dir.path().join("files").join(&id),
        "in the state directory"
    );
    assert_eq!(std::fs::read_to_string(files.join("hostname")).unwrap(), "web\n");
    assert!(
        !w.pods.sandboxes.dir_of(&id).join("hostname").exists(),
        "not with the record"
    );
    let st = status_of(&s, true);
    assert_eq!(
        st.status.as_ref().unwrap().network.as_ref().unwrap().ip,
        "10.88.0.2"
    );
    assert!(st.info["info"].contains("cni_result"), "{:?}", st.info);
    w.pods.stop(&id).unwrap();
    w.pods.stop(&id).unwrap();
    assert!(!w.pods.sandboxes.get(&id).unwrap().record.ready);
    assert!(!w.dir.path().join("ns").join(&id).exists(), "unpinned");
    w.pods.remove(&id).unwrap();
    w.pods.remove(&id).unwrap();
    assert!(w.pods.sandboxes.get(&id).is_none());
    assert!(!files.exists(), "its files go with it");
    assert_eq!(w.net.calls(), [format!("ADD {id}"), format!("DEL {id}")]);
}

#[test]
fn host_network_pods_get_no_cni_and_no_pins() {
    let w = world();
    let mut c = config("host");
    c.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                network: NODE,
                ipc: NODE,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    // Even without a network config.
    *w.net.not_ready.lock().unwrap() = true;
    let id = w.pods.run(c, String::new()).unwrap();
    let s = w.pods.sandboxes.get(&id).unwrap();
    assert_eq!(s.record.namespaces, Default::default());
    assert!(w.net.calls().is_empty());
}

#[test]
fn a_failed_run_leaves_nothing_and_frees_the_name() {
    let w = world();
    *w.net.not_ready.lock().unwrap() = true;
    let (c, msg) = code(w.pods.run(config("web"), String::new()).unwrap_err());
    assert_eq!(c, Code::FailedPrecondition);
    assert!(msg.contains("no network config"), "{msg}");
    *w.net.not_ready.lock().unwrap() = false;
    *w.net.fail_add.lock().unwrap() = Some("bridge: no luck".into());
    let (c, msg) = code(w.pods.run(config("web"), String::new()).unwrap_err());
    assert_eq!(c, Code::Internal);
    assert!(msg.contains("bridge: no luck"), "{msg}");
    assert!(w.pods.sandboxes.list().is_empty());
    assert_eq!(
        std::fs::read_dir(w.dir.path().join("ns"))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
    *w.net.fail_add.lock().unwrap() = None;
    w.pods.run(config("web"), String::new()).unwrap();
}

#[test]
fn concurrent_runs_of_one_pod_make_one_sandbox() {
    let w = world();
    // Other configs of one pod attempt: one is made, the others are told which.
    let results: Vec<Result<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let w = &w;
                s.spawn(move || {
                    let mut c = config("db");
                    c.labels.insert("v".into(), i.to_string());
                    w.pods.run(c, String::new())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let made: Vec<String> = results.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    assert_eq!(made.len(), 1, "{results:?}");
    for e in results.into_iter().filter_map(Result::err) {
        let (c, msg) = code(e);
        assert_eq!(c, Code::AlreadyExists);
        assert!(msg.contains(&made[0]), "{msg}");
    }
    assert_eq!(w.pods.sandboxes.list().len(), 1);
}

#[test]
fn a_retried_run_gets_the_sandbox_the_first_call_made() {
    let w = world();
    let results: Vec<Result<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| w.pods.run(config("db"), String::new())))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ids: Vec<String> = results.into_iter().map(Result::unwrap).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(w.pods.sandboxes.list().len(), 1);
    assert_eq!(w.net.calls(), [format!("ADD {}", ids[0])], "one network set-up");
    assert_eq!(w.pods.run(config("db"), String::new()).unwrap(), ids[0]);
    // A refused request holds no name.
    let mut gone = config("other");
    gone.hostname = "h".repeat(65);
    assert!(w.pods.run(gone, String::new()).is_err());
    w.pods.run(config("other"), String::new()).unwrap();
}

#[test]
fn bad_requests_name_the_field() {
    let w = world();
    let (c, msg) = code(
        w.pods
            .run(cri::PodSandboxConfig::default(), String::new())
            .unwrap_err(),
    );
    assert_eq!(
        (c, msg.as_str()),
        (Code::InvalidArgument, "RunPodSandbox: config.metadata is missing")
    );
    let mut no_uid = config("x");
    no_uid.metadata.as_mut().unwrap().uid.clear();
    let (c, msg) = code(w.pods.run(no_uid, String::new()).unwrap_err());
    assert_eq!(c, Code::InvalidArgument);
    assert!(msg.contains("uid"), "{msg}");
    // An unknown runtime handler is NotFound, as containerd answers it.
    let (c, msg) = code(w.pods.run(config("x"), "kata".into()).unwrap_err());
    assert_eq!(c, Code::NotFound);
    assert!(msg.contains("\"kata\""), "{msg}");
    assert_eq!(code(w.pods.stop("nope").unwrap_err()).0, Code::NotFound);
    w.pods.remove("nope").unwrap();
    assert!(w.net.calls().is_empty());
}

/// A RunPodSandbox of `c` is refused with InvalidArgument naming `field`, and nothing is made.
fn refused(w: &World, c: cri::PodSandboxConfig, field: &str) {
    let files = || crate::validate::tests::tree(w.dir.path());
    let before = files();
    let (code_, msg) = code(w.pods.run(c, String::new()).unwrap_err());
    assert_eq!(code_, Code::InvalidArgument, "{msg}");
    assert!(
        msg.starts_with(&format!("RunPodSandbox: {field} ")),
        "names {field}: {msg}"
    );
    assert!(w.pods.sandboxes.list().is_empty(), "no record");
    assert!(w.net.calls().is_empty(), "no network");
    assert_eq!(files(), before, "no files");
}

#[test]
fn a_hostname_over_64_bytes_is_refused() {
    let w = world();
    let mut c = config("x");
    c.hostname = "h".repeat(65);
    refused(&w, c, "hostname");
    let mut c = config("x");
    c.hostname = "h".repeat(64);
    w.pods.run(c, String::new()).unwrap();
}

#[test]
fn a_relative_or_dotdot_log_directory_is_refused() {
    let w = world();
    for dir in ["var/log/pods/x", "/var/log/pods/../../etc"] {
        let mut c = config("x");
        c.log_directory = dir.into();
        refused(&w, c, "log_directory");
    }
}

#[test]
fn empty_sandbox_ids_are_refused() {
    let w = world();
    assert_eq!(
        code(w.pods.get("PodSandboxStatus", "").unwrap_err()),
        (
            Code::InvalidArgument,
            "PodSandboxStatus: pod_sandbox_id is empty".to_string()
        )
    );
}

#[test]
fn listing_filters_by_id_state_and_labels() {
    let w = world();
    let a = w.pods.run(config("a"), String::new()).unwrap();
    let b = w.pods.run(config("b"), String::new()).unwrap();
    w.pods.stop(&b).unwrap();
    let ids = |f: Option<cri::PodSandboxFilter>| {
        let mut v: Vec<String> = list(w.pods.sandboxes.list(), f.as_ref())
            .into_iter()
            .map(|s| s.id)
            .collect();
        v.sort();
        v
    };
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(ids(None), both);
    let ready = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    assert_eq!(ids(Some(ready)), std::slice::from_ref(&a));
    let labelled = cri::PodSandboxFilter {
        label_selector: [("app".to_string(), "b".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(ids(Some(labelled)), std::slice::from_ref(&b));
    let prefix = cri::PodSandboxFilter {
        id: a[..8].to_string(),
        ..Default::default()
    };
    assert_eq!(ids(Some(prefix)), [a]);
}

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

#[test]
fn only_a_pod_that_asks_for_pid_mode_pod_shares_a_pid_namespace() {
    let with = |pid: Option<cri::NamespaceMode>| {
        let mut c = config("p");
        c.linux = pid.map(|m| cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    pid: m as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        shares_pid(&c)
    };
    assert!(with(Some(cri::NamespaceMode::Pod)));
    assert!(!with(Some(cri::NamespaceMode::Container)));
    assert!(!with(Some(cri::NamespaceMode::Node)));
    assert!(!with(None), "no options: a namespace per container");
}

#[test]
fn the_handler_picked_is_recorded_with_its_runtime_and_an_unknown_one_is_not_found() {
    use crate::handlers::{Features, Handler, Handlers};
    use crate::shim::OciBinary;
    let w = world();
    let runc = OciBinary {
        binary: "/usr/sbin/runc".into(),
        root: None,
    };
    let handlers = Handlers::new(
        Features::default(),
        vec![Handler {
            name: "runc".into(),
            runtime: Some(runc.clone()),
            runtime_features: Features::default(),
        }],
    );
    let World { dir, net, pods } = w;
    let pods = pods.with_handlers(Arc::new(handlers));
    let id = pods.run(config("web"), "runc".into()).unwrap();
    let s = pods.sandboxes.get(&id).unwrap();
    assert_eq!(
        (s.record.runtime_handler.as_str(), s.record.runtime),
        ("runc", Some(runc))
    );
    let default = pods.run(config("db"), String::new()).unwrap();
    assert_eq!(pods.sandboxes.get(&default).unwrap().record.runtime, None);
    let (c, msg) = code(pods.run(config("kv"), "kata".into()).unwrap_err());
    assert_eq!(c, Code::NotFound, "{msg}");
    assert!(
        msg.contains("\"kata\"") && msg.contains("crius-runc, runc"),
        "{msg}"
    );
    assert_eq!(pods.sandboxes.list().len(), 2);
    drop((dir, net));
}
