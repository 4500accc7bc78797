//! The list calls' sizes against the fakes: 20,000 exited containers with kubelet's labels and annotations
//! (an answer over 16 MiB) make ListContainers answer ResourceExhausted, and StreamContainers returns them all
//! in chunks of at most 4 MiB; its time and peak memory are printed (a figure, not a timed assertion).

use std::sync::Arc;
use std::time::Instant;

use crius_api::cri;
use crius_api::cri::runtime_service_server::RuntimeService as _;
use prost::Message;
use tokio_stream::StreamExt;
use tonic::{Code, Request};

use super::RuntimeService;
use super::lists::{CHUNK_LIMIT, UNARY_LIMIT, chunks};
use crate::container::{self, Containers};
use crate::image_store::fake::FakeImages;
use crate::network::fake::{FakeNamespaces, FakeNetwork};
use crate::node::Node;
use crate::sandbox::Pods;
use crate::shim::fake::FakeShim;
use crate::store::intents::Intents;
use crate::store::sandbox::{Record, Sandbox};

/// A runtime over the fakes in `dir`, with `n` exited containers of pod `sb1`.
fn node_with_exited(dir: &tempfile::TempDir, n: usize) -> Node {
    let d = dir.path();
    let intents = Arc::new(Intents::open(&d.join("intents")).unwrap());
    let pods = Pods::open(
        &d.join("sandboxes"),
        d.join("ns"),
        d.join("files"),
        Arc::new(FakeNetwork::default()),
        Arc::new(FakeNamespaces),
        intents.clone(),
    )
    .unwrap();
    let shim = Arc::new(FakeShim::default());
    let images = Arc::new(FakeImages::in_dir(tempfile::tempdir_in(d).unwrap()));
    images.add("busybox", serde_json::json!({"config": {"Cmd": ["sh"]}}));
    let containers = Containers::open(
        container::Setup {
            records: d.join("containers"),
            bundles: d.join("bundles"),
            intents,
        },
        shim,
        images,
    )
    .unwrap();
    for f in ["hostname", "hosts", "resolv.conf"] {
        std::fs::write(d.join(f), "").unwrap();
    }
    let sandbox = Sandbox {
        record: Record {
            id: "sb1".into(),
            ready: true,
            ..Default::default()
        },
        config: cri::PodSandboxConfig {
            log_directory: d.join("logs").display().to_string(),
            ..Default::default()
        },
    };
    // On every core: the creates are independent.
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (containers, sandbox) = (&containers, &sandbox);
            s.spawn(move || {
                for i in (t..n).step_by(threads) {
                    let id = containers.create(sandbox, d, kubelets_config(i)).unwrap();
                    containers.start(&id).unwrap();
                    // As the shim's exit event records it (the list asks no shim).
                    containers.mark_exit(&id, 0, crate::store::now_ns());
                }
            });
        }
    });
    Node {
        pods,
        containers: Arc::new(containers),
    }
}

/// A container config as kubelet makes one for attempt `i` of a Deployment's container: its labels and
/// annotations, some 800 bytes listed.
fn kubelets_config(i: usize) -> cri::ContainerConfig {
    let pod = format!("web-7d9f8b6c5d-{:05}", i / 4);
    let labels = [
        ("io.kubernetes.container.name", "app".to_string()),
        ("io.kubernetes.pod.name", pod),
        ("io.kubernetes.pod.namespace", "production-frontend".into()),
        (
            "io.kubernetes.pod.uid",
            format!("6f1c2d7e-4b1a-4c8e-9d3f-{:012}", i / 4),
        ),
    ];
    let annotations = [
        ("io.kubernetes.container.hash", "8a3f5c21".to_string()),
        ("io.kubernetes.container.restartCount", (i % 4).to_string()),
        ("io.kubernetes.container.terminationMessagePath", "/dev/termination-log".into()),
        ("io.kubernetes.container.terminationMessagePolicy", "File".into()),
        ("io.kubernetes.pod.terminationGracePeriod", "30".into()),
        (
            "io.kubernetes.container.ports",
            r#"[{"name":"http","containerPort":8080,"protocol":"TCP"},{"name":"metrics","containerPort":9090,"protocol":"TCP"}]"#
                .into(),
        ),
    ];
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "app".into(),
            attempt: i as u32,
        }),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        log_path: format!("app/{i}.log"),
        labels: labels.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        annotations: annotations.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        ..Default::default()
    }
}

/// This process's resident and peak resident memory, in KiB.
fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_thousand_exited_containers_fail_the_unary_list_clearly_and_stream_whole() {
    const N: usize = 20_000;
    // On a tmpfs where there is one: the records' journal syncs each write, and 20,000 syncs on a disk take
    // minutes.
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let t = Instant::now();
    let service = RuntimeService::new(node_with_exited(&dir, N));
    println!(
        "{N} exited containers made through the fakes in {:?}",
        t.elapsed()
    );

    let t = Instant::now();
    let e = service
        .list_containers(Request::new(cri::ListContainersRequest::default()))
        .await
        .unwrap_err();
    let unary = t.elapsed();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let msg = e.message();
    assert!(
        msg.starts_with(&format!("ListContainers: the answer ({N} containers) is "))
            && msg.contains(&format!("over the gRPC message limit of {UNARY_LIMIT} bytes"))
            && msg.contains("call StreamContainers"),
        "{msg}"
    );

    // The peak is reset (clear_refs 5) so that the streamed list's own peak shows.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (before, _) = rss_kib();
    let t = Instant::now();
    let mut stream = service
        .stream_containers(Request::new(cri::StreamContainersRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let (mut ids, mut sizes) = (Vec::new(), Vec::new());
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        sizes.push(chunk.encoded_len());
        ids.extend(chunk.containers.into_iter().map(|c| c.id));
    }
    let streamed = t.elapsed();
    let (_, peak) = rss_kib();
    assert_eq!(ids.len(), N);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), N, "every container once");
    let total: usize = sizes.iter().sum();
    assert!(total > UNARY_LIMIT, "the list is {total} bytes");
    assert!(sizes.iter().all(|&s| s <= CHUNK_LIMIT), "chunks {sizes:?}");
    assert_eq!(
        sizes.len(),
        total.div_ceil(CHUNK_LIMIT),
        "chunks as full as they go: {sizes:?}"
    );
    println!(
        "{N} containers, {total} bytes: ListContainers refused in {unary:?}; StreamContainers sent {} chunks \
         (largest {} bytes) in {streamed:?}, peak RSS +{} KiB",
        sizes.len(),
        sizes.iter().max().unwrap(),
        peak.saturating_sub(before)
    );
    // A filter that narrows it brings the unary call back.
    let one = cri::ContainerFilter {
        id: ids[0].clone(),
        ..Default::default()
    };
    let listed = service
        .list_containers(Request::new(cri::ListContainersRequest { filter: Some(one) }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.containers.len(), 1);
}

#[test]
fn chunks_keep_the_order_fill_up_to_the_limit_and_an_empty_list_is_one_empty_chunk() {
    let item = |i: usize| cri::Container {
        id: format!("{i:064}"),
        ..Default::default()
    };
    // Each element: 1 tag byte, 1 length byte, 66 bytes of the id field: 68.
    let runs = chunks((0..10).map(item).collect(), 68 * 3);
    assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 3, 1]);
    let ids: Vec<_> = runs.into_iter().flatten().map(|c| c.id).collect();
    assert_eq!(ids, (0..10).map(|i| item(i).id).collect::<Vec<_>>());
    assert_eq!(
        chunks(vec![item(0), item(1)], 10).len(),
        2,
        "an item over the limit goes alone"
    );
    assert_eq!(
        chunks(Vec::<cri::Container>::new(), 100),
        [Vec::<cri::Container>::new()]
    );
}
