//! CDI devices through the CRI, end to end: a vendor's spec file the test writes into a spec dir of its own
//! (given to criusd with `--cdi-spec-dir`) names device nodes the test makes with mknod, a mount, env and a
//! createContainer hook; a container asking for the device by `CDI_devices` gets them all, which ExecSync
//! shows inside. A spec file written between two creates is seen by the second; an unknown device is
//! refused by name.

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container};
use crius_privileged_tests::devnode::char_node;
use crius_test_support::require_root;
use tonic::Code;

fn asking(name: &str, devices: &[&str]) -> cri::ContainerConfig {
    let mut c = container(
        name,
        "busybox",
        "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done",
    );
    c.cdi_devices = devices
        .iter()
        .map(|d| cri::CdiDevice { name: d.to_string() })
        .collect();
    c
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_vendor_spec_puts_nodes_mounts_env_and_hooks_in_the_container() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    let specs = h.join("cdi");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::create_dir_all(h.join("lib")).unwrap();
    std::fs::write(h.join("lib/libgpu.so"), "gpu library\n").unwrap();
    char_node(&h.join("gpu0"), 1, 3, 0o640, 1234, 5678);
    char_node(&h.join("gpu1"), 1, 5, 0o640, 1234, 5678);
    let marker = h.join("hook-ran");
    let spec = format!(
        r#"{{
  "cdiVersion": "0.6.0",
  "kind": "test.example/gpu",
  "containerEdits": {{"env": ["GPU_VENDOR=test"]}},
  "devices": [{{
    "name": "all",
    "containerEdits": {{
      "env": ["GPUS=0,1"],
      "deviceNodes": [
        {{"path": "/dev/gpu0", "hostPath": "{h}/gpu0"}},
        {{"path": "/dev/gpu1", "hostPath": "{h}/gpu1", "permissions": "rw"}}
      ],
      "mounts": [{{"hostPath": "{h}/lib", "containerPath": "/usr/lib/gpu", "options": ["ro", "rbind"]}}],
      "hooks": [{{"hookName": "createContainer", "path": "/bin/sh",
                  "args": ["sh", "-c", "echo ran > {marker}"]}}]
    }}
  }}]
}}"#,
        h = h.display(),
        marker = marker.display()
    );
    std::fs::write(specs.join("test-gpu.json"), spec).unwrap();

    let args = vec!["--cdi-spec-dir".to_string(), specs.display().to_string()];
    let mut p = Pod::on_host_network_with("cdi", args).await;
    let id = p.started(asking("gpu", &["test.example/gpu=all"])).await;
    p.wait_for_log("gpu", "ready").await;
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");

    let (code, out, err) = p
        .sh(
            &id,
            "stat -c '%F %t:%T %a %u:%g %n' /dev/gpu0 /dev/gpu1; cat /usr/lib/gpu/libgpu.so; \
         echo $GPUS $GPU_VENDOR; head -c 3 /dev/gpu1 | wc -c",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "character special file 1:3 640 1234:5678 /dev/gpu0\n\
         character special file 1:5 640 1234:5678 /dev/gpu1\n\
         gpu library\n\
         0,1 test\n\
         3\n"
    );

    // The same device by annotation.
    let mut c = asking("annotated", &[]);
    c.annotations
        .insert("cdi.k8s.io/test".into(), "test.example/gpu=all".into());
    let id = p.started(c).await;
    p.wait_for_log("annotated", "ready").await;
    let (code, out, err) = p.sh(&id, "ls /dev/gpu0 /dev/gpu1; echo $GPUS").await;
    assert_eq!((code, out.as_str()), (0, "/dev/gpu0\n/dev/gpu1\n0,1\n"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_spec_written_between_creates_is_seen_and_unknown_devices_are_refused() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let specs = host.path().join("cdi");
    std::fs::create_dir_all(&specs).unwrap();
    let args = vec!["--cdi-spec-dir".to_string(), specs.display().to_string()];
    let mut p = Pod::on_host_network_with("cdi-refresh", args).await;

    let e = p
        .create(asking("early", &["test.example/nic=eth0"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("CDI_devices[0].name") && e.message().contains("test.example/nic=eth0"),
        "{}",
        e.message()
    );

    std::fs::write(
        specs.join("nic.yaml"),
        "cdiVersion: 1.0.0\nkind: test.example/nic\ndevices:\n- name: eth0\n  containerEdits:\n    env: [NIC=eth0]\n",
    )
    .unwrap();
    let id = p.started(asking("late", &["test.example/nic=eth0"])).await;
    p.wait_for_log("late", "ready").await;
    let (code, out, err) = p.sh(&id, "echo $NIC").await;
    assert_eq!((code, out.as_str()), (0, "eth0\n"), "{err}");

    let e = p
        .create(asking("unknown", &["test.example/nic=eth9"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("test.example/nic=eth9"), "{}", e.message());
}
