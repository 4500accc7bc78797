//! The start-up pass against the fakes: what a crash leaves (intents, unowned bundles, snapshots and pins)
//! is finished or undone, and what calls completed is kept.

use std::path::Path;
use std::sync::Arc;

use crius_api::cri;
use serde_json::json;

use crate::container::{self, Containers};
use crate::image_store::ImageStore;
use crate::image_store::fake::FakeImages;
use crate::network::fake::{FakeNamespaces, FakeNetwork};
use crate::node::Node;
use crate::sandbox::Pods;
use crate::shim::fake::FakeShim;
use crate::shim::{CreateTask, ShimClient};
use crate::store::intents::{Intent, Intents, Op};
use crate::store::sandbox::{Record, Sandbox};

struct Parts {
    shim: Arc<FakeShim>,
    images: Arc<FakeImages>,
    net: Arc<FakeNetwork>,
}

/// A criusd's runtime over `dir`, as a start would open it (the pass not run yet).
fn open(dir: &Path, p: &Parts) -> (Node, Arc<Intents>) {
    let intents = Arc::new(Intents::open(&dir.join("intents")).unwrap());
    let pods = Pods::open(
        &dir.join("sandboxes"),
        dir.join("ns"),
        dir.join("files"),
        p.net.clone(),
        Arc::new(FakeNamespaces),
        intents.clone(),
    )
    .unwrap();
    let containers = Containers::open(
        container::Setup {
            records: dir.join("containers"),
            bundles: dir.join("bundles"),
            intents: intents.clone(),
        },
        p.shim.clone(),
        p.images.clone(),
    )
    .unwrap();
    let rt = Node {
        pods,
        containers: Arc::new(containers),
    };
    (rt, intents)
}

fn pod(name: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: format!("uid-{name}"),
            attempt: 0,
        }),
        ..Default::default()
    }
}

fn container(name: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Container `id`'s bundle as CreateContainer leaves it just before its record: a config naming its sandbox.
fn bundle(dir: &Path, id: &str, sandbox: &str) {
    let b = dir.join("bundles").join(id);
    std::fs::create_dir_all(&b).unwrap();
    let spec = json!({"annotations": {crate::convert::SANDBOX_ID: sandbox}});
    std::fs::write(b.join("config.json"), spec.to_string()).unwrap();
}

#[test]
fn a_crash_mid_call_is_undone_and_finished_calls_are_kept() {
    let d = tempfile::tempdir().unwrap();
    let p = Parts {
        shim: Arc::new(FakeShim::default()),
        images: Arc::new(FakeImages::default()),
        net: Arc::new(FakeNetwork::default()),
    };
    p.images.add("busybox", json!({"config": {"Cmd": ["sh"]}}));
    let image = p.images.find("busybox").unwrap();
    let (rt, intents) = open(d.path(), &p);
    // Finished calls: a READY sandbox with a container.
    let web = rt.pods.run(pod("web"), String::new()).unwrap();
    let kept = rt.create_container(&web, container("kept")).unwrap();

    // CreateContainer cut short after its task was created, before its record.
    let (cut, stray, pin) = ("b".repeat(64), "c".repeat(64), "d".repeat(64));
    let _ = intents
        .begin(&Intent {
            op: Op::CreateContainer,
            id: cut.clone(),
            sandbox_id: web.clone(),
        })
        .unwrap();
    p.images.prepare_snapshot(&cut, &image).unwrap();
    bundle(d.path(), &cut, &web);
    let task = |id: &str| CreateTask {
        id: id.into(),
        bundle: d.path().join("bundles").join(id),
        terminal: false,
        log_path: None,
        capped_log: false,
        stdin: None,
        runtime: None,
        checkpoint: None,
    };
    p.shim.create(&web, &task(&cut)).unwrap();
    // A container no record or intent owns (a crash before intents existed), with its task.
    p.images.prepare_snapshot(&stray, &image).unwrap();
    bundle(d.path(), &stray, &web);
    p.shim.create(&web, &task(&stray)).unwrap();

    // RunPodSandbox cut short after its network was recorded (ADD may have run), before READY.
    let half_id = "e".repeat(64);
    let _ = intents
        .begin(&Intent {
            op: Op::RunPodSandbox,
            id: half_id.clone(),
            sandbox_id: String::new(),
        })
        .unwrap();
    let half = Sandbox {
        record: Record {
            id: half_id.clone(),
            network: Some(json!({"name": "fake", "cniVersion": "1.0.0", "plugins": [{"type": "fake"}]})),
            namespaces: crate::network::Pinned {
                net: Some(d.path().join("ns").join(&half_id).join("net")),
                ..Default::default()
            },
            ..Default::default()
        },
        config: pod("half"),
    };
    let r = rt.pods.sandboxes.reserve(&half).unwrap();
    rt.pods.sandboxes.insert(half).unwrap();
    // Its record written, network and all, as RunPodSandbox writes it before ADD.
    rt.pods.sandboxes.update(&half_id, |_| ()).unwrap();
    r.commit();
    std::fs::create_dir_all(d.path().join("ns").join(&half_id)).unwrap();
    std::fs::create_dir_all(d.path().join("files").join(&half_id)).unwrap();
    // Pins and files no sandbox owns.
    std::fs::create_dir_all(d.path().join("ns").join(&pin)).unwrap();
    let files = "f".repeat(64);
    std::fs::create_dir_all(d.path().join("files").join(&files)).unwrap();
    // A finished RunPodSandbox whose intent outlived it (the crash came just after READY was written).
    let _ = intents
        .begin(&Intent {
            op: Op::RunPodSandbox,
            id: web.clone(),
            sandbox_id: String::new(),
        })
        .unwrap();
    drop((rt, intents));

    let (rt, intents) = open(d.path(), &p);
    assert_eq!(
        rt.reconcile(&[&intents]),
        5,
        "the cut container, the stray one, the half sandbox, the pin, the files"
    );
    assert!(intents.left().is_empty());
    let calls = p.shim.calls();
    for id in [&cut, &stray] {
        assert!(calls.contains(&format!("delete {id}")), "{calls:?}");
        assert!(!d.path().join("bundles").join(id).exists());
        assert!(!p.images.snapshots().contains(id));
    }
    assert!(
        p.net.calls().contains(&format!("DEL {half_id}")),
        "{:?}",
        p.net.calls()
    );
    assert!(rt.pods.sandboxes.get(&half_id).is_none());
    assert!(!d.path().join("ns").join(&half_id).exists());
    assert!(!d.path().join("ns").join(&pin).exists());
    assert!(!d.path().join("files").join(&half_id).exists());
    assert!(!d.path().join("files").join(&files).exists());
    assert!(
        rt.pods.files_of(&web).join("hostname").exists(),
        "a live sandbox's files stay"
    );
    // What finished is all there, and the half sandbox's name is free again.
    assert!(rt.pods.sandboxes.get(&web).unwrap().record.ready);
    assert!(rt.containers.get(&kept).is_some());
    assert!(p.images.snapshots().contains(&kept));
    assert!(d.path().join("bundles").join(&kept).exists());
    let again = rt.pods.run(pod("half"), String::new()).unwrap();
    assert_ne!(again, half_id);
    // A second start finds nothing to repair.
    drop((rt, intents));
    let (rt, intents) = open(d.path(), &p);
    assert_eq!(rt.reconcile(&[&intents]), 0);
}
