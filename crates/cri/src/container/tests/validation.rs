//! Bad input refused with InvalidArgument, naming the call and the field, before anything is made or the
//! shim is asked.

use crius_api::cri;
use tonic::Code;

use super::{World, config, exec_sync};
use crate::error::{Error, answer as code};

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
