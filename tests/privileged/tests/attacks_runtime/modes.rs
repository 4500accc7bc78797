//! What crius-runc and the shim keep on disk holds a container's `process.env` (its secrets): crius-runc's
//! `state.json` carries the whole spec, the shim's exec specs the exec's. Everything they make is root's
//! alone: 0700 directories and 0600 files (as runc makes them), the exec FIFO excepted, which the container's
//! user must be able to open for writing (0622, as runc's; only ever reached inside the 0700 directory).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use containerd_shim_protos::api;
use crius_privileged_tests::shim::{Cleanup, create, delete, kill, shim, start, wait};
use crius_shim::client;
use crius_test_support::{Bundle, crius_runc, require_root, unique};

const SECRET: &str = "DB_PASSWORD=hunter2-secret";

/// Every path under `top` (not following symlinks), `top` itself first.
fn walk(top: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) {
    let m = std::fs::symlink_metadata(top).unwrap();
    let dir = m.is_dir();
    out.push((top.to_path_buf(), m));
    if dir {
        for e in std::fs::read_dir(top).unwrap().flatten() {
            walk(&e.path(), out);
        }
    }
}

/// The paths under `top` (but `skip`) whose modes are not 0700 for a directory, 0600 for a file, and for a
/// FIFO unreadable by group and others: `path mode` each.
fn loose(top: &Path, skip: &[&Path]) -> Vec<String> {
    let mut all = Vec::new();
    walk(top, &mut all);
    all.into_iter()
        .filter(|(p, _)| !skip.iter().any(|s| p.starts_with(s)))
        .filter(|(_, m)| {
            let mode = m.mode() & 0o7777;
            let t = m.file_type();
            if t.is_dir() {
                mode != 0o700
            } else if t.is_fifo() {
                mode & 0o044 != 0
            } else {
                t.is_file() && mode != 0o600
            }
        })
        .map(|(p, m)| format!("{} {:o}", p.display(), m.mode() & 0o7777))
        .collect()
}

/// Whether `nobody` can read `path` (setpriv, as attacks_host does).
fn nobody_reads(path: &Path) -> bool {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "cat"])
        .arg(path)
        .output()
        .expect("setpriv")
        .status
        .success()
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_runc_keeps_a_containers_state_from_other_users() {
    require_root();
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A root crius-runc makes itself, two levels deep, as /run/crius-runc would be.
    let root = top.path().join("run/crius-runc");
    let mut b = Bundle::new(&["sleep", "100"]);
    b.config["process"]["env"] = serde_json::json!(["PATH=/bin", SECRET]);
    let dir = b.write().to_path_buf();
    let id = unique("modes");
    let pid_file = top.path().join("run/init.pid");
    let runc = |args: &[&str]| {
        Command::new(crius_runc())
            .arg("--root")
            .arg(&root)
            .arg("--log")
            .arg(root.join("log.json"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(top.path().join("stderr")).unwrap())
            .status()
            .unwrap()
    };
    let out = runc(&[
        "create",
        "--bundle",
        dir.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        &id,
    ]);
    let stderr = std::fs::read_to_string(top.path().join("stderr")).unwrap_or_default();
    assert!(out.success(), "create: {stderr}");
    let state = root.join(&id).join("state.json");
    let held = std::fs::read_to_string(&state).unwrap();
    let found = (loose(&root, &[]), nobody_reads(&state));
    let _ = runc(&["delete", "--force", &id]);
    assert!(held.contains(SECRET), "the state holds the env: {held}");
    assert_eq!(
        found.0,
        Vec::<String>::new(),
        "loose modes under {}",
        root.display()
    );
    assert!(!found.1, "nobody read {}", state.display());
    assert_eq!(
        std::fs::metadata(&pid_file).unwrap().mode() & 0o777,
        0o600,
        "the pid file"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_shim_keeps_what_it_writes_from_other_users() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let (id, pod) = (unique("modes"), unique("pod"));
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![id.clone()],
        needle: owner.clone(),
    };
    let mut b = Bundle::new(&["sleep", "100"]);
    b.config["process"]["env"] = serde_json::json!(["PATH=/bin", SECRET]);
    b.config["annotations"] = serde_json::json!({"io.kubernetes.cri.sandbox-id": pod});
    b.write();
    let c =
        client::connect(&client::start_shim(&shim(), "test", &owner, "", &id, b.path()).unwrap()).unwrap();
    create(&c, &id, &b, "").unwrap();
    start(&c, &id).unwrap();
    // An exec with a secret of its own: its spec goes through a file in the bundle.
    let spec = serde_json::json!({
        "args": ["true"], "env": ["PATH=/bin", SECRET], "cwd": "/", "user": {"uid": 0, "gid": 0},
    });
    let exec = api::ExecProcessRequest {
        id: id.clone(),
        exec_id: "e1".into(),
        spec: Some(containerd_shim_protos::protobuf::well_known_types::any::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Process".into(),
            value: spec.to_string().into_bytes(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &exec).unwrap();
    c.start(
        client::ctx(10),
        &api::StartRequest {
            id: id.clone(),
            exec_id: "e1".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let runtime_root = Path::new("/run/crius/shim/crius-runc/test");
    // What the shim wrote in the bundle (the test made the directory and wrote config.json, as containerd
    // would), and the runtime's directory of the container.
    let config = b.path().join("config.json");
    let in_bundle: Vec<String> = loose(b.path(), &[&config])
        .into_iter()
        .filter(|l| !l.starts_with(&format!("{} ", b.path().display())))
        .collect();
    let in_root = loose(&runtime_root.join(&id), &[]);
    let parents: Vec<String> = [
        Path::new("/run/crius/shim"),
        runtime_root.parent().unwrap(),
        runtime_root,
    ]
    .iter()
    .filter(|d| std::fs::metadata(d).unwrap().mode() & 0o077 != 0)
    .map(|d| d.display().to_string())
    .collect();
    kill(&c, &id, 9);
    wait(&c, &id);
    delete(&c, &id).unwrap();
    assert_eq!(in_bundle, Vec::<String>::new(), "loose modes in the bundle");
    assert_eq!(in_root, Vec::<String>::new(), "loose modes in the runtime's root");
    assert_eq!(parents, Vec::<String>::new(), "runtime roots others may enter");
}
