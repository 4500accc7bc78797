//! Checkpoint and restore through the CRI, with CRIU (in the VM: Debian's criu does not run on the host's
//! kernel). A counter container is checkpointed with CheckpointContainer (it keeps running), the archive has
//! kubelet's layout, and a CreateContainer whose image is the archive's path restores it: in another pod of the
//! same criusd, and in another criusd with its own state ("another node"); and a checkpoint image the test
//! makes of the archive (CRI-O's format), imported with `crius images import` or pulled from a registry,
//! restores the same way. The restored counter goes on from where it was, a file written before the checkpoint
//! is there and a deleted one stays deleted. A container CRIU cannot dump (an established TCP connection) fails
//! clearly and keeps running.
//!
//! The runtime is criusd's default (crius-runc), or the one `CRIUS_TEST_RUNTIME` names (`runc`), which the
//! pods' shims get through criusd's environment (`CRIUS_SHIM_RUNTIME`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_privileged_tests::cri::{
    Client, client, config, container, create, cremove, cstop, host_network, import_busybox, sh, start,
    wait_state,
};
use crius_test_support::daemon::Daemon;
use crius_test_support::registry::Registry;
use crius_test_support::require_root;

/// The counter: counts in memory (the shell's variable), one line every 200 ms; before it starts it writes
/// `/kept` and deletes the image's `/etc/group`.
const COUNTER: &str =
    "echo kept > /kept; rm /etc/group; i=0; while :; do i=$((i+1)); echo \"n=$i\"; sleep 0.2; done";

/// A criusd ("a node") with busybox, running its pods on the runtime under test.
struct Node {
    d: Daemon,
    c: Client,
}

impl Node {
    async fn start() -> Node {
        require_root();
        assert!(
            Path::new("/usr/sbin/criu").exists(),
            "criu is missing: hack/install-deps.sh installs it"
        );
        let runtime = std::env::var("CRIUS_TEST_RUNTIME").unwrap_or_default();
        if !runtime.is_empty() && runtime != "crius-runc" {
            // The pods' shims inherit criusd's environment, which names their runtime: no config to write and
            // no restart, which the loaded VM makes slow.
            let path = crius_test_support::which(&runtime);
            // SAFETY: set before criusd is spawned, and the same value each time; this process reads its
            // environment nowhere else meanwhile (the tests run one at a time).
            unsafe { std::env::set_var("CRIUS_SHIM_RUNTIME", path) };
        }
        let d = Daemon::start(&[]);
        import_busybox(&d);
        let c = client(&d).await;
        Node { d, c }
    }

    /// Pod `name` in the host's network, logging under the node's dir.
    async fn pod(&mut self, name: &str) -> String {
        let mut conf = host_network(config(name, &format!("uid-{name}")));
        conf.log_directory = self.logs(name).display().to_string();
        self.c
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(conf),
                runtime_handler: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .pod_sandbox_id
    }

    fn logs(&self, pod: &str) -> PathBuf {
        self.d.dir().join("logs").join(pod)
    }

    /// What container `name` of pod `pod` logged.
    fn log(&self, pod: &str, name: &str) -> String {
        std::fs::read_to_string(self.logs(pod).join(name).join("0.log")).unwrap_or_default()
    }

    /// The counter's numbers in the log of `name` in `pod`.
    fn counts(&self, pod: &str, name: &str) -> Vec<u64> {
        counts(&self.log(pod, name))
    }

    /// Waits (30 s at most) until the counter `name` in `pod` logged a number of at least `n`.
    async fn counted_to(&self, pod: &str, name: &str, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.counts(pod, name).last().copied().unwrap_or(0) < n {
            assert!(
                Instant::now() < deadline,
                "{name} never counted to {n}: {:?}",
                self.log(pod, name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Pulls `image` through the CRI.
    async fn pull(&self, image: &str) {
        let ch = crius_api::connect(&self.d.socket().display().to_string())
            .await
            .unwrap();
        ImageServiceClient::new(ch)
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("pulling {image}: {e}\n{}", self.d.log()));
    }

    async fn checkpoint(&mut self, id: &str, to: &Path) -> Result<(), tonic::Status> {
        self.c
            .checkpoint_container(cri::CheckpointContainerRequest {
                container_id: id.into(),
                location: to.display().to_string(),
                timeout: 180,
            })
            .await
            .map(drop)
    }

    /// Restores the checkpoint `image` (an archive's path or a checkpoint image) as container `name` in `pod`
    /// and starts it: its id.
    async fn restore_image(&mut self, pod: &str, name: &str, image: &str) -> String {
        let id = create(&mut self.c, pod, container(name, image, COUNTER))
            .await
            .unwrap_or_else(|e| panic!("restoring {image}: {e}\n{}", self.d.log()));
        self.c
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("starting the restored {id}: {e}\n{}", self.d.log()));
        wait_state(&mut self.c, &id, cri::ContainerState::ContainerRunning).await;
        id
    }

    /// Restores the counter from the checkpoint `image` (an archive's path or a checkpoint image) in a new pod
    /// `pod` and checks it went on from at least `from`, its rootfs changes kept: (the pod's id, the container's).
    async fn restored_in(&mut self, pod: &str, image: &str, from: u64) -> (String, String) {
        let sandbox = self.pod(pod).await;
        let t = Instant::now();
        let id = self.restore_image(&sandbox, "counter", image).await;
        eprintln!("{pod}: {image} restored in {:?}", t.elapsed());
        self.check_restored(pod, "counter", &id, from).await;
        (sandbox, id)
    }

    /// The restored counter `id` (`name` in `pod`) went on from at least `from`, its rootfs changes kept.
    async fn check_restored(&mut self, pod: &str, name: &str, id: &str, from: u64) {
        self.counted_to(pod, name, from + 3).await;
        let first = self.counts(pod, name)[0];
        // The session, for the reader of `--nocapture`: where the dump was, where the copy went on.
        self.counted_to(pod, name, first + 2).await;
        let counts = self.counts(pod, name);
        eprintln!(
            "{pod}/{name} restored: the original had counted to {from} before the dump; the copy's log: {:?}",
            &counts[..counts.len().min(6)]
        );
        assert!(
            first >= from,
            "{name} started again from {first}, not from {from} on: {:?}",
            self.log(pod, name)
        );
        let (code, out, err) = sh(&mut self.c, id, "cat /kept").await;
        assert_eq!((code, out.as_str()), (0, "kept\n"), "{err}");
        let (code, out, _) = sh(&mut self.c, id, "test -e /etc/group && echo there || echo gone").await;
        assert_eq!(
            (code, out.trim()),
            (0, "gone"),
            "the deleted /etc/group came back"
        );
    }

    async fn remove(&mut self, ids: &[&str], pods: &[&str]) {
        for id in ids {
            cstop(&mut self.c, id, 0).await;
            cremove(&mut self.c, id).await;
        }
        for p in pods {
            let pod_sandbox_id = p.to_string();
            self.c
                .stop_pod_sandbox(cri::StopPodSandboxRequest {
                    pod_sandbox_id: pod_sandbox_id.clone(),
                })
                .await
                .unwrap();
            self.c
                .remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id })
                .await
                .unwrap();
        }
    }
}

fn counts(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.rsplit_once("n=").and_then(|(_, n)| n.trim().parse().ok()))
        .collect()
}

/// Writes at `layout` an OCI image layout holding checkpoint image `name` made of the archive at `archive`, in
/// CRI-O's format (as buildah makes it): one layer whose tar is the archive's, the manifest annotated with the
/// checkpointed container's name and its image.
fn checkpoint_image(archive: &Path, layout: &Path, name: &str) {
    use crius_image::{Digest, checkpoint};
    use serde_json::json;
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |bytes: &[u8]| {
        let d = Digest::of(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).unwrap();
        json!({"digest": d.as_str(), "size": bytes.len()})
    };
    // The archive is a plain tar: the layer's blob and its diff id are the same.
    let tar = std::fs::read(archive).unwrap();
    let mut layer = put(&tar);
    layer["mediaType"] = json!("application/vnd.oci.image.layer.v1.tar");
    let config = json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [Digest::of(&tar).as_str()]},
    });
    let mut config_desc = put(&serde_json::to_vec(&config).unwrap());
    config_desc["mediaType"] = json!("application/vnd.oci.image.config.v1+json");
    let manifest = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc, "layers": [layer],
        "annotations": {checkpoint::NAME: "counter", checkpoint::ROOTFS_IMAGE_NAME: "busybox"},
    });
    let mut manifest_desc = put(&serde_json::to_vec(&manifest).unwrap());
    manifest_desc["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json");
    manifest_desc["annotations"] = json!({"org.opencontainers.image.ref.name": name});
    let index = json!({"schemaVersion": 2, "manifests": [manifest_desc]});
    std::fs::write(layout.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::write(layout.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

/// The entries of the archive at `path` outside `checkpoint/`, and whether CRIU's inventory is in it.
fn layout(path: &Path) -> (Vec<String>, bool) {
    let mut a = tar::Archive::new(std::fs::File::open(path).unwrap());
    let mut top = Vec::new();
    let mut inventory = false;
    for e in a.entries().unwrap() {
        let p = e.unwrap().path().unwrap().display().to_string();
        inventory |= p == "checkpoint/inventory.img";
        if !p.starts_with("checkpoint/") || p == "checkpoint/" {
            top.push(p);
        }
    }
    top.sort();
    (top, inventory)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, criu and a kernel criu supports: run through hack/test.sh (in the VM)"]
async fn a_counter_checkpointed_through_the_cri_goes_on_counting_in_another_pod_and_on_another_node() {
    let mut a = Node::start().await;
    // "Another node", started while the VM is idle (criusd's start is slow on a loaded one).
    let mut b = Node::start().await;
    let pod = a.pod("ckpt-a").await;
    let id = create(&mut a.c, &pod, container("counter", "busybox", COUNTER))
        .await
        .unwrap();
    start(&mut a.c, &id).await;
    a.counted_to("ckpt-a", "counter", 5).await;

    let archive = a.d.dir().join("checkpoint-ckpt-a_default-counter.tar");
    // Counted before the dump: the restored counter goes on from there (or a little later: it counts while
    // CRIU prepares the dump, until it freezes it).
    let at = a.counts("ckpt-a", "counter").last().copied().unwrap();
    let t = Instant::now();
    a.checkpoint(&id, &archive)
        .await
        .unwrap_or_else(|e| panic!("CheckpointContainer: {e}\n{}", a.d.log()));
    eprintln!(
        "checkpointed in {:?}: {} bytes",
        t.elapsed(),
        std::fs::metadata(&archive).unwrap().len()
    );
    let after = a.counts("ckpt-a", "counter").last().copied().unwrap();
    let (top, inventory) = layout(&archive);
    assert_eq!(
        top,
        [
            "checkpoint/",
            "config.dump",
            "container.log",
            "deleted.files",
            "rootfs-diff.tar",
            "spec.dump",
            "stats-dump"
        ]
    );
    assert!(inventory, "no CRIU images in the archive");
    // The checkpoint left the original running (kubelet's forensic checkpoint).
    a.counted_to("ckpt-a", "counter", after + 3).await;
    wait_state(&mut a.c, &id, cri::ContainerState::ContainerRunning).await;

    // Restored into another pod of the same node, beside the original.
    let archive_path = archive.display().to_string();
    let (other, again) = a.restored_in("ckpt-b", &archive_path, at).await;

    // From a checkpoint image made of the archive and imported: restored the same way, in a third pod.
    let layout = a.d.dir().join("ckpt-image");
    checkpoint_image(&archive, &layout, "localhost/ckpt/counter:latest");
    a.d.cli_ok(&["images", "import", &layout.display().to_string()]);
    let (third, from_image) = a.restored_in("ckpt-d", "localhost/ckpt/counter:latest", at).await;

    // And on another node: a criusd with its own state and image store.
    let (pod_b, moved) = b.restored_in("ckpt-c", &archive_path, at).await;

    // The checkpoint image pushed to a registry and pulled by the other node: restored the same way.
    let reg = Registry::start();
    reg.push(&layout, "localhost/ckpt/counter:latest", "ckpt/counter:latest");
    let pulled = format!("{}/ckpt/counter:latest", reg.host);
    b.pull(&pulled).await;
    let (pod_e, from_pull) = b.restored_in("ckpt-e", &pulled, at).await;

    b.remove(&[&moved, &from_pull], &[&pod_b, &pod_e]).await;
    a.remove(&[&id, &again, &from_image], &[&pod, &other, &third])
        .await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, criu and a kernel criu supports: run through hack/test.sh (in the VM)"]
async fn a_container_criu_cannot_dump_fails_clearly_and_keeps_running() {
    let mut a = Node::start().await;
    let pod = a.pod("ckpt-tcp").await;
    // An established TCP connection, which CRIU refuses to dump without --tcp-established.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "(while :; do sleep 1; done) | nc 127.0.0.1 {port} & i=0; while :; do i=$((i+1)); echo \"n=$i\"; sleep 0.2; done"
    );
    let id = create(&mut a.c, &pod, container("talker", "busybox", &script))
        .await
        .unwrap();
    start(&mut a.c, &id).await;
    let (_conn, _) = listener.accept().unwrap();
    a.counted_to("ckpt-tcp", "talker", 3).await;

    let archive = a.d.dir().join("tcp.tar");
    let e = a.checkpoint(&id, &archive).await.unwrap_err();
    eprintln!("{e}");
    assert!(
        e.message().contains("CheckpointContainer") && e.message().contains(&id),
        "the error names the call and the container: {e}"
    );
    assert!(
        e.message().contains("checkpoint") && e.message().to_lowercase().contains("criu"),
        "the error carries the runtime's and CRIU's words: {e}"
    );
    assert!(!archive.exists(), "a failed checkpoint left an archive");
    let at = a.counts("ckpt-tcp", "talker").last().copied().unwrap();
    a.counted_to("ckpt-tcp", "talker", at + 3).await;
    wait_state(&mut a.c, &id, cri::ContainerState::ContainerRunning).await;
    a.remove(&[&id], &[&pod]).await;
}
