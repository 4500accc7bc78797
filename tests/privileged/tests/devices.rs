//! Device plugins' devices through the CRI (ContainerConfig.devices), end to end: criusd copies the host
//! nodes the test makes with mknod (in a temp dir of its own) into the container at their container paths,
//! with the host's type, numbers, mode and owner, and the cgroup rule of their permissions holds inside.
//!
//! 1:3 and 1:5 (null and zero) are in every container's default allow list (crius-oci's and runc's), so a
//! write refused under `r` is shown on a node of fuse's number, 10:229, which neither allows by default: the
//! write's open fails with EPERM at the cgroup check, before any driver is reached; the read's open passes it.
//! Each case has a criusd of its own, its pod on the host's network.

use std::path::Path;

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container};
use crius_privileged_tests::devnode::char_node;
use crius_test_support::require_root;
use tonic::Code;

fn device(host: &Path, container_path: &str, permissions: &str) -> cri::Device {
    cri::Device {
        host_path: host.display().to_string(),
        container_path: container_path.into(),
        permissions: permissions.into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn device_nodes_are_copied_and_their_permissions_hold() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    char_node(&h.join("null"), 1, 3, 0o640, 1234, 5678);
    char_node(&h.join("zero"), 1, 5, 0o666, 0, 0);
    char_node(&h.join("fuse"), 10, 229, 0o666, 0, 0);
    std::fs::create_dir_all(h.join("set/sub")).unwrap();
    char_node(&h.join("set/a"), 1, 3, 0o600, 0, 0);
    char_node(&h.join("set/sub/b"), 1, 5, 0o644, 0, 0);
    // Neither devices: a regular file and a symlink under the directory are left out.
    std::fs::write(h.join("set/plain"), "x").unwrap();
    std::os::unix::fs::symlink("/dev/null", h.join("set/link")).unwrap();

    let mut p = Pod::on_host_network("devices").await;
    let mut c = container(
        "devs",
        "busybox",
        "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done",
    );
    c.devices = vec![
        device(&h.join("null"), "/dev/rw-null", "rw"),
        device(&h.join("zero"), "/dev/rw-zero", "rwm"),
        device(&h.join("fuse"), "/dev/ro-fuse", "r"),
        device(&h.join("set"), "/dev/set", "rw"),
    ];
    let id = p.started(c).await;
    p.wait_for_log("devs", "ready").await;

    // The nodes: type, major:minor (hex), mode, owner, path, as on the host.
    let (code, out, err) = p.sh(
        &id,
        "stat -c '%F %t:%T %a %u:%g %n' /dev/rw-null /dev/rw-zero /dev/ro-fuse /dev/set/a /dev/set/sub/b; \
         ls /dev/set",
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "character special file 1:3 640 1234:5678 /dev/rw-null\n\
         character special file 1:5 666 0:0 /dev/rw-zero\n\
         character special file a:e5 666 0:0 /dev/ro-fuse\n\
         character special file 1:3 600 0:0 /dev/set/a\n\
         character special file 1:5 644 0:0 /dev/set/sub/b\n\
         a\nsub\n"
    );

    // rw: written and read.
    let (code, out, err) = p.sh(
        &id,
        "echo x > /dev/rw-null && echo wrote; head -c 4 /dev/rw-zero | wc -c; echo y > /dev/set/a && echo wrote-a",
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "wrote\n4\nwrote-a\n"), "{err}");

    // r: the read's open passes the cgroup check; the write's is refused by it.
    let (_, out, err) = p
        .sh(
            &id,
            "(exec 3</dev/ro-fuse) && echo read-open; (exec 3>/dev/ro-fuse) || echo write-refused",
        )
        .await;
    assert_eq!(out, "read-open\nwrite-refused\n", "{err}");
    assert!(err.contains("Operation not permitted"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn what_is_not_a_device_and_bad_permissions_are_refused_by_name() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    char_node(&h.join("null"), 1, 3, 0o666, 0, 0);
    std::fs::write(h.join("plain"), "x").unwrap();
    let mut p = Pod::on_host_network("device-refusals").await;
    for (dev, field, says) in [
        (
            device(&h.join("absent"), "/dev/x", "rw"),
            "devices[1].host_path",
            "absent",
        ),
        (
            device(&h.join("plain"), "/dev/x", "rw"),
            "devices[1].host_path",
            "not a device",
        ),
        (
            device(&h.join("null"), "/dev/x", "rwx"),
            "devices[1].permissions",
            "rwx",
        ),
    ] {
        let mut c = container("refused", "busybox", "true");
        c.devices = vec![device(&h.join("null"), "/dev/ok", "rw"), dev];
        let e = p.create(c).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().contains(field) && e.message().contains(says),
            "{field}: {}",
            e.message()
        );
    }
}

/// A privileged container gets the host's device nodes (here /dev/kmsg and /dev/loop-control, which no
/// container gets by default) and every device allowed: a node of a number nobody asked for, made inside it,
/// opens. An unprivileged container in the same pod has neither.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_privileged_container_gets_the_hosts_devices_and_all_are_allowed() {
    require_root();
    let mut p = Pod::on_host_network("devices-privileged").await;
    let script = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done";
    let mut c = container("all", "busybox", script);
    c.linux
        .get_or_insert_default()
        .security_context
        .get_or_insert_default()
        .privileged = true;
    let all = p.started(c).await;
    let plain = p.started(container("plain", "busybox", script)).await;
    let probe = "stat -c '%F %t:%T %n' /dev/kmsg /dev/loop-control; \
                 mknod /tmp/k c 1 11 && (exec 3</tmp/k) && echo kmsg-opens; ls /dev/pts/ptmx";
    let (code, out, err) = p.sh(&all, probe).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("character special file 1:b /dev/kmsg")
            && out.contains("character special file a:ed /dev/loop-control")
            && out.contains("kmsg-opens"),
        "{out}{err}"
    );
    let (_, out, err) = p.sh(&plain, probe).await;
    assert!(
        !out.contains("kmsg-opens")
            && err.contains("can't stat '/dev/kmsg'")
            && err.contains("/tmp/k: Operation not permitted"),
        "{out}{err}"
    );
}
