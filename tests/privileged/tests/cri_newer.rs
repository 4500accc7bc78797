//! What criusd does with the CRI of Kubernetes 1.32–1.36 (its own `proto/cri`): a container's `stop_signal`
//! is what StopContainer sends first, UpdatePodSandboxResources checks its sandbox, an image volume mounts
//! its image (or a sub path of it) read-only and noexec, a recursive read-only mount is read-only down to its
//! submounts, SupplementalGroupsPolicy Merge adds the image's groups of the user and Strict does not (and
//! ContainerStatus reports the user), and the request fields crius does not act on yet are refused by name. (The pod cgroup it writes is checked in vm_pods.rs.)
//! Each case has a criusd of its own, its pod on the host's network.

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, cstatus, cstop};
use crius_test_support::require_root;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_stop_signal_of_sigusr1_reaches_the_process_before_sigterm() {
    require_root();
    let mut p = Pod::on_host_network("stop-signal").await;
    let mut c = container(
        "usr1",
        "busybox",
        "trap 'echo got-usr1; exit 7' USR1; trap 'echo got-term; exit 8' TERM; echo ready; \
         while :; do sleep 0.1; done",
    );
    c.stop_signal = cri::Signal::Sigusr1 as i32;
    let id = p.started(c).await;
    p.wait_for_log("usr1", "ready").await;
    let before = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(before.stop_signal, cri::Signal::Sigusr1 as i32);
    cstop(&mut p.c, &id, 10).await;
    let after = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(after.state, cri::ContainerState::ContainerExited as i32);
    let log = p.log_text("usr1");
    assert_eq!(after.exit_code, 7, "{log}");
    assert!(log.contains(" stdout F got-usr1"), "{log}");
    assert!(!log.contains("got-term"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn request_fields_crius_does_not_act_on_are_refused_by_name() {
    require_root();
    let mut p = Pod::on_host_network("refusals").await;
    let mut sub_path_alone = container("sp", "busybox", "true");
    sub_path_alone.mounts.push(cri::Mount {
        container_path: "/data".into(),
        host_path: "/tmp".into(),
        image_sub_path: "etc".into(),
        ..Default::default()
    });
    let e = p.create(sub_path_alone).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("mounts[0].image_sub_path"),
        "{}",
        e.message()
    );

    let mut bad_signal = container("bs", "busybox", "true");
    bad_signal.stop_signal = 1000;
    let e = p.create(bad_signal).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("stop_signal"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn update_pod_sandbox_resources_names_an_unknown_sandbox_and_leaves_kubelets_cgroup_to_it() {
    require_root();
    let mut p = Pod::on_host_network("pod-resources").await;
    let resources = cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    // No cgroup_parent of crius's to write: the answer is OK, kubelet resized the pod cgroup itself.
    p.c.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: p.id.clone(),
        overhead: None,
        resources: Some(resources.clone()),
    })
    .await
    .unwrap();
    let e =
        p.c.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: "nope".into(),
            overhead: None,
            resources: Some(resources),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("sandbox \"nope\""), "{}", e.message());
}

fn image_mount(container_path: &str, sub: &str) -> cri::Mount {
    cri::Mount {
        container_path: container_path.into(),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        readonly: true,
        ..Default::default()
    }
}

/// The image volume snapshots (`<container>-vol<i>`) in criusd's image store.
fn volume_snapshots(p: &Pod) -> Vec<String> {
    crius_privileged_tests::cri::entries(&p.d.root().join("images/snapshots"))
        .into_iter()
        .filter(|s| s.contains("-vol"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn an_image_volume_mounts_the_image_or_its_sub_path_read_only_and_noexec() {
    require_root();
    let mut p = Pod::on_host_network("image-volume").await;
    let mut c = container(
        "iv",
        "busybox",
        "test -e /vol/bin/busybox && test -e /volbin/busybox && echo both-there; \
         touch /vol/x 2>/dev/null || echo read-only; \
         /volbin/busybox true 2>/dev/null || echo noexec; echo done",
    );
    c.mounts = vec![image_mount("/vol", ""), image_mount("/volbin", "bin")];
    let id = p.started(c).await;
    p.wait_for_log("iv", "done").await;
    let log = p.log_text("iv");
    for line in ["both-there", "read-only", "noexec"] {
        assert!(log.contains(&format!(" stdout F {line}")), "{line}: {log}");
    }
    assert_eq!(volume_snapshots(&p).len(), 2, "one snapshot per image mount");
    cstop(&mut p.c, &id, 2).await;
    crius_privileged_tests::cri::cremove(&mut p.c, &id).await;
    assert!(
        volume_snapshots(&p).is_empty(),
        "snapshots removed with the container"
    );

    // A sub path that is not in the image: InvalidArgument naming it, nothing left.
    let mut missing = container("miss", "busybox", "true");
    missing.mounts = vec![image_mount("/v", "no/such/dir")];
    let e = p.create(missing).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("mounts[0].image_sub_path") && e.message().contains("does not exist"),
        "{}",
        e.message()
    );
    assert!(
        volume_snapshots(&p).is_empty(),
        "a failed create leaves no snapshot"
    );
    // An image that is not pulled: NotFound, as for the container's own image.
    let mut absent = container("absent", "busybox", "true");
    absent.mounts = vec![cri::Mount {
        image: Some(cri::ImageSpec {
            image: "docker.io/library/nothere:1".into(),
            ..Default::default()
        }),
        ..image_mount("/v", "")
    }];
    let e = p.create(absent).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_recursive_read_only_mount_is_read_only_down_to_its_submounts() {
    require_root();
    let mut p = Pod::on_host_network("rro").await;
    let status =
        p.c.status(cri::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    let default = status
        .runtime_handlers
        .iter()
        .find(|h| h.name.is_empty())
        .unwrap();
    assert!(default.features.unwrap().recursive_read_only_mounts, "{status:?}");

    let host = tempfile::tempdir().unwrap();
    let sub = Tmpfs::at(host.path().join("tmpfs"));
    let bind = |at: &str, recursive_read_only: bool| cri::Mount {
        container_path: at.into(),
        host_path: host.path().display().to_string(),
        readonly: true,
        recursive_read_only,
        ..Default::default()
    };
    let mut c = container(
        "rro",
        "busybox",
        "touch /rro/tmpfs/f 2>/dev/null || echo rro-sub-read-only; \
         touch /ro/tmpfs/f && echo ro-sub-writable; echo done",
    );
    c.mounts = vec![bind("/rro", true), bind("/ro", false)];
    p.started(c).await;
    p.wait_for_log("rro", "done").await;
    let log = p.log_text("rro");
    for line in ["rro-sub-read-only", "ro-sub-writable"] {
        assert!(log.contains(&format!(" stdout F {line}")), "{line}: {log}");
    }
    assert!(
        sub.0.join("f").exists(),
        "the plain read-only bind wrote the host's submount"
    );

    let mut bad = container("rw", "busybox", "true");
    bad.mounts = vec![cri::Mount {
        readonly: false,
        ..bind("/rro", true)
    }];
    let e = p.create(bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message()
            .contains("mounts[0].recursive_read_only is set without readonly"),
        "{}",
        e.message()
    );
}

/// A tmpfs mounted on the host for a test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn at(dir: std::path::PathBuf) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "none"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mounting a tmpfs on {}", dir.display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Imports `groups:latest`: busybox whose /etc/group makes `app` (1000, primary group 1000) a member of
/// `in-image` (50000), USER 1000, as critest's test-image-predefined-group.
fn import_groups_image(p: &Pod) -> tempfile::TempDir {
    use crius_test_support::image::{ImageSpec, write_layout};
    let dir = tempfile::tempdir().unwrap();
    let (base, etc) = (dir.path().join("base"), dir.path().join("etc-layer"));
    crius_test_support::build_busybox_rootfs(&base).unwrap();
    std::fs::create_dir_all(etc.join("etc")).unwrap();
    std::fs::write(
        etc.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
    )
    .unwrap();
    std::fs::write(
        etc.join("etc/group"),
        "root:x:0:\napp:x:1000:\nin-image:x:50000:app\n",
    )
    .unwrap();
    let layout = dir.path().join("layout");
    write_layout(
        &layout,
        &[ImageSpec {
            name: "groups:latest".into(),
            layers: vec![base, etc],
            cmd: vec!["sh".into()],
            env: vec!["PATH=/bin".into()],
            user: "1000".into(),
            ..Default::default()
        }],
    )
    .unwrap();
    p.d.cli_ok(&["images", "import", &layout.display().to_string()]);
    dir
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn supplemental_groups_merge_adds_the_image_s_groups_and_strict_does_not() {
    require_root();
    let mut p = Pod::on_host_network("groups").await;
    let _image = import_groups_image(&p);
    let status =
        p.c.status(cri::StatusRequest { verbose: false })
            .await
            .unwrap()
            .into_inner();
    assert!(status.features.unwrap().supplemental_groups_policy);
    for (name, policy, groups, user) in [
        (
            "merge",
            cri::SupplementalGroupsPolicy::Merge,
            "1000 1234 50000",
            vec![1000, 50000, 1234],
        ),
        (
            "strict",
            cri::SupplementalGroupsPolicy::Strict,
            "1000 1234",
            vec![1000, 1234],
        ),
    ] {
        let mut c = container(name, "groups", "id -G; echo done");
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 1000 }),
                supplemental_groups: vec![1234],
                supplemental_groups_policy: policy as i32,
                ..Default::default()
            }),
            ..Default::default()
        });
        let id = p.started(c).await;
        p.wait_for_log(name, "done").await;
        let log = p.log_text(name);
        assert!(log.contains(&format!(" stdout F {groups}\n")), "{name}: {log}");
        let st = cstatus(&mut p.c, &id).await.unwrap();
        assert_eq!(
            st.user,
            Some(cri::ContainerUser {
                linux: Some(cri::LinuxContainerUser {
                    uid: 1000,
                    gid: 1000,
                    supplemental_groups: user,
                }),
            }),
            "{name}"
        );
    }
}
