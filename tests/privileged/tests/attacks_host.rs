//! Attacks on the host through criusd, each tried for real: log paths that leave the pod's log directory
//! (`..`, absolute, a symlink planted in the log directory, at CreateContainer and at a log reopen), sysctls
//! that would set the host's values, and an unprivileged user (`nobody`, through `setpriv`) reading what
//! criusd keeps, running a setuid file out of a snapshot or a layer, and connecting to crius's sockets; and a
//! container with CAP_SYS_PTRACE in a pod that shares its PID namespace going through pid 1, the namespace's
//! holder, to the host (its root, its executable, its capabilities, its environment and descriptors).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crius_api::cri;
use crius_privileged_tests::cri::{
    Pod, client, config, container, host_network, import_busybox, list, run, wait_state,
};
use crius_test_support::daemon::Daemon;
use tonic::Code;

/// Asserts `r` is InvalidArgument whose message has every one of `needles`.
fn invalid<T: std::fmt::Debug>(r: Result<T, tonic::Status>, needles: &[&str]) {
    let e = r.expect_err("must be refused");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for n in needles {
        assert!(e.message().contains(n), "{n:?} not in {:?}", e.message());
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn log_paths_never_leave_the_log_directory() {
    let mut pod = Pod::on_host_network("logs").await;
    let outside = pod.d.dir().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&pod.logs).unwrap();
    let with_log = |log_path: &str| {
        let mut c = container("c", "busybox", "echo written; sleep 100");
        c.log_path = log_path.into();
        c
    };
    // `..` and an absolute path: refused before anything is made.
    invalid(pod.create(with_log("../x")).await, &["log_path", "\"..\""]);
    invalid(
        pod.create(with_log(&outside.join("abs.log").display().to_string()))
            .await,
        &["log_path", "absolute"],
    );
    invalid(pod.create(with_log("a//b.log")).await, &["log_path", "clean"]);
    assert!(!pod.d.dir().join("x").exists());
    // A directory of the log path planted as a symlink to outside, and the file itself planted as one.
    std::os::unix::fs::symlink(&outside, pod.logs.join("evil")).unwrap();
    std::os::unix::fs::symlink(outside.join("f.log"), pod.logs.join("f.log")).unwrap();
    invalid(pod.create(with_log("evil/0.log")).await, &["log_path", "symlink"]);
    invalid(
        pod.create(with_log("evil/deeper/0.log")).await,
        &["log_path", "symlink"],
    );
    invalid(pod.create(with_log("f.log")).await, &["log_path", "symlink"]);
    assert_eq!(
        names(&outside),
        Vec::<String>::new(),
        "written outside the log directory"
    );

    // A good path logs; then its directory is swapped for a symlink to outside and the log reopened (as
    // kubelet does after a rotation): the shim refuses to follow it, nothing is written outside.
    let id = pod.started(with_log("late/0.log")).await;
    let c = &mut pod.c;
    wait_state(c, &id, cri::ContainerState::ContainerRunning).await;
    crius_privileged_tests::cri::eventually(
        crius_privileged_tests::cri::in_20s(),
        || "no log line".into(),
        || std::fs::read_to_string(pod.logs.join("late/0.log")).is_ok_and(|t| t.contains("written")),
    )
    .await;
    std::fs::rename(pod.logs.join("late"), pod.logs.join("late.old")).unwrap();
    std::os::unix::fs::symlink(&outside, pod.logs.join("late")).unwrap();
    let reopened = pod
        .c
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        })
        .await;
    let e = reopened.expect_err("a reopen through a symlink must fail");
    assert!(e.message().contains("symlink"), "{e:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        names(&outside),
        Vec::<String>::new(),
        "written outside the log directory"
    );
}

/// A pod on the host's network with `sysctls`, its IPC namespace the host's when `host_ipc`.
fn pod_with(name: &str, host_ipc: bool, sysctls: &[(&str, &str)]) -> cri::PodSandboxConfig {
    let mut conf = host_network(config(name, &format!("uid-{name}")));
    let linux = conf.linux.as_mut().expect("set by host_network");
    linux.sysctls = sysctls
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if host_ipc {
        let ns = linux
            .security_context
            .as_mut()
            .and_then(|s| s.namespace_options.as_mut())
            .expect("set by host_network");
        ns.ipc = cri::NamespaceMode::Node as i32;
    }
    conf
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn sysctls_that_would_set_the_hosts_are_refused() {
    let d = Daemon::start(&[]);
    import_busybox(&d);
    let mut c = client(&d).await;
    let host = |k: &str| std::fs::read_to_string(format!("/proc/sys/{}", k.replace('.', "/"))).unwrap();
    let before = [
        host("kernel.panic"),
        host("net.ipv4.ip_forward"),
        host("kernel.shmmax"),
    ];
    for (conf, name) in [
        (pod_with("panic", false, &[("kernel.panic", "7")]), "kernel.panic"),
        (
            pod_with("fwd", false, &[("net.ipv4.ip_forward", "1")]),
            "net.ipv4.ip_forward",
        ),
        (
            pod_with("shm", true, &[("kernel.shmmax", "12345678")]),
            "kernel.shmmax",
        ),
        (
            pod_with("vm", false, &[("vm.overcommit_memory", "1")]),
            "vm.overcommit_memory",
        ),
    ] {
        invalid(run(&mut c, conf).await, &[&format!("linux.sysctls[\"{name}\"]")]);
    }
    assert!(list(&mut c, None).await.is_empty(), "a refused pod was made");
    assert_eq!(
        [
            host("kernel.panic"),
            host("net.ipv4.ip_forward"),
            host("kernel.shmmax")
        ],
        before,
        "a host sysctl changed"
    );
    // A namespaced one in the pod's own IPC namespace is written there, not on the host.
    let mut conf = pod_with("good", false, &[("kernel.shmmax", "12345678")]);
    let logs = d.dir().join("logs");
    conf.log_directory = logs.display().to_string();
    let pod = run(&mut c, conf).await.unwrap();
    let ctr = crius_privileged_tests::cri::create(
        &mut c,
        &pod,
        container("c", "busybox", "cat /proc/sys/kernel/shmmax"),
    )
    .await
    .unwrap();
    crius_privileged_tests::cri::start(&mut c, &ctr).await;
    wait_state(&mut c, &ctr, cri::ContainerState::ContainerExited).await;
    let log = std::fs::read_to_string(logs.join("c/0.log")).unwrap();
    assert!(log.contains(" F 12345678"), "{log}");
    assert_eq!(host("kernel.shmmax"), before[2]);
}

/// Runs `args` as nobody:nogroup without supplementary groups.
fn as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .args(args)
        .output()
        .expect("setpriv")
}

/// Connects to unix socket `path` (perl, present wherever Debian is): `refused: <errno>` when connect fails,
/// `closed` when the server hung up at once, `open` when the connection stayed up for a second.
const CONNECT: &str = r#"use Socket; socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die "socket: $!";
connect($s, pack_sockaddr_un($ARGV[0])) or do { print "refused: $!\n"; exit 0 };
my $rin = ''; vec($rin, fileno($s), 1) = 1;
if (select(my $rout = $rin, undef, undef, 1) > 0) { my $r = sysread($s, my $b, 1); print(($r ? "data" : "closed"), "\n"); exit 0 }
print "open\n";"#;

fn connect(nobody: bool, path: &Path) -> String {
    let p = path.display().to_string();
    let out = if nobody {
        as_nobody(&["perl", "-e", CONNECT, &p])
    } else {
        Command::new("perl").args(["-e", CONNECT, &p]).output().unwrap()
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every path under `dir` (not into mounts below it: namespace pins, /dev/shm), with `dir` itself.
fn walk(dir: &Path, dev: u64, out: &mut Vec<(PathBuf, std::fs::Metadata)>) {
    let Ok(m) = std::fs::symlink_metadata(dir) else {
        return;
    };
    let is_dir = m.is_dir();
    let same_fs = m.dev() == dev;
    out.push((dir.to_path_buf(), m));
    if is_dir && same_fs {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            walk(&e.path(), dev, out);
        }
    }
}

/// Whether others (not the owner, not the group) can reach `p` below `top`: every directory from `top` down
/// to `p`'s parent lets them search it.
fn reachable(top: &Path, p: &Path) -> bool {
    let mut at = p.parent();
    while let Some(d) = at {
        let m = std::fs::metadata(d).unwrap();
        if m.mode() & 0o001 == 0 {
            return false;
        }
        if d == top {
            return true;
        }
        at = d.parent();
    }
    true
}

/// Runs program `path` as nobody through a shell: setpriv itself still holds root's capabilities when it
/// execs (its lookup of the path overrides permissions), the shell it starts does not.
fn exec_as_nobody(path: &Path) -> Output {
    as_nobody(&["sh", "-c", "exec \"$0\"", &path.display().to_string()])
}

/// A setuid-root copy of `id` at `at`: run by nobody where it can be reached, it prints `euid=0`.
fn plant_setuid_id(at: &Path) {
    std::fs::copy("/usr/bin/id", at).unwrap();
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o4755)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn nobody_reaches_nothing_criusd_keeps() {
    let mut pod = Pod::on_host_network("perms").await;
    let id = pod.started(container("c", "busybox", "sleep 100")).await;
    wait_state(&mut pod.c, &id, cri::ContainerState::ContainerRunning).await;
    let d = &pod.d;
    // The test's own directory lets everyone in: only criusd's modes stand between nobody and its files.
    std::fs::set_permissions(d.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (root, state) = (d.root(), d.state());
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&root), 0o700);
    assert_eq!(
        mode(&state),
        0o711,
        "state: 0711, so that the socket's group reaches a socket in it"
    );

    let bundle = state.join("containers").join(&id);
    let records = [
        bundle.join("config.json"),
        root.join("containers/journal"),
        root.join("sandboxes/journal"),
        state.join("criusd.lock"),
    ];
    for f in &records {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    for dir in [
        root.join("containers"),
        root.join("sandboxes"),
        root.join("images"),
        root.join("images/layers"),
        root.join("images/snapshots"),
        root.join("images/blobs"),
        state.join("containers"),
        bundle.clone(),
        state.join("ns"),
        state.join("intents"),
        state.join("sandboxes"),
        state.join("sandboxes").join(&pod.id),
    ] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    // Every path under root and state: none that others can reach grants them anything (what keeps its own
    // modes, image files, the pod's hostname/hosts/resolv.conf bind-mounted into containers, the bundle files
    // the shim writes, is under a 0700 directory).
    for top in [&root, &state] {
        let mut all = Vec::new();
        walk(top, std::fs::metadata(top).unwrap().dev(), &mut all);
        assert!(all.len() > 8, "{} has too little in it", top.display());
        for (p, m) in &all {
            if p == top || !reachable(top, p) {
                continue;
            }
            assert_eq!(
                m.mode() & 0o007,
                0,
                "{} is {:o} and reachable by others",
                p.display(),
                m.mode()
            );
        }
    }
    // As nobody: no listing, no config.json or record read.
    for dir in [&root, &state, &root.join("images")] {
        assert!(
            !as_nobody(&["ls", &dir.display().to_string()]).status.success(),
            "{}",
            dir.display()
        );
    }
    for f in &records {
        let out = as_nobody(&["cat", &f.display().to_string()]);
        assert!(!out.status.success(), "nobody read {}", f.display());
    }

    // A setuid-root file in the container's snapshot and in an unpacked layer: nobody cannot run it. The same
    // file where nobody can reach it (the control) does run as euid 0, so the refusal is the directories'.
    let control = d.dir().join("control-id");
    plant_setuid_id(&control);
    let out = exec_as_nobody(&control);
    let suid_works = String::from_utf8_lossy(&out.stdout).contains("euid=0");
    let nosuid = nix::sys::statvfs::statvfs(d.dir())
        .unwrap()
        .flags()
        .contains(nix::sys::statvfs::FsFlags::ST_NOSUID);
    assert!(
        suid_works || nosuid,
        "the control setuid file must run as euid 0: {out:?}"
    );
    let snapshot = root.join("images/snapshots").join(&id);
    assert!(snapshot.is_dir(), "{} is missing", snapshot.display());
    let layers = root.join("images/layers");
    let layer = std::fs::read_dir(&layers)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    for planted in [snapshot.join("upper/suid-id"), layer.join("suid-id")] {
        plant_setuid_id(&planted);
        let out = exec_as_nobody(&planted);
        assert!(!out.status.success(), "nobody ran {}: {out:?}", planted.display());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
            "{out:?}"
        );
        std::fs::remove_file(&planted).unwrap();
    }
    std::fs::remove_file(&control).unwrap();

    // Sockets: the CRI socket (0660 root), the pod's shim socket and criusd's events socket (0600 in 0700
    // directories) refuse nobody's connect.
    let shim = PathBuf::from(
        std::fs::read_to_string(bundle.join("address"))
            .unwrap()
            .trim()
            .trim_start_matches("unix://"),
    );
    let events = state.join("events.sock");
    for sock in [&d.socket(), &shim, &events] {
        let r = connect(true, sock);
        assert!(
            r.starts_with("refused: Permission denied"),
            "{}: {r}",
            sock.display()
        );
        // The gRPC server speaks first (its HTTP/2 settings); the ttrpc ones wait for a request.
        let r = connect(false, sock);
        assert!(
            r == "open" || r == "data",
            "root's connect to {}: {r}",
            sock.display()
        );
    }
    // Past the modes, SO_PEERCRED: the shim and events sockets reached through a hard link that nobody may
    // use (mode 0666 for a moment) hang up on nobody at once and keep root's connection.
    let links = tempfile::Builder::new()
        .prefix("crius-peer-")
        .tempdir_in("/run")
        .unwrap();
    std::fs::set_permissions(links.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let events_link = d.dir().join("events-link");
    for (sock, link) in [(&shim, links.path().join("shim")), (&events, events_link)] {
        std::fs::hard_link(sock, &link).unwrap();
        std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (nobody, root_conn) = (connect(true, &link), connect(false, &link));
        std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&link).unwrap();
        assert_eq!(nobody, "closed", "nobody through a link to {}", sock.display());
        assert_eq!(root_conn, "open", "root through a link to {}", sock.display());
    }
    assert_eq!(mode(&shim), 0o600);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn an_older_installs_loose_modes_are_tightened_at_start_up() {
    let mut d = Daemon::start(&[]);
    d.stop();
    let (root, state) = (d.root(), d.state());
    let set = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let dirs = [
        root.join("containers"),
        root.join("sandboxes"),
        root.join("images"),
        root.join("images/layers"),
        root.join("images/snapshots"),
        state.join("containers"),
        state.join("ns"),
        state.join("intents"),
        state.join("sandboxes"),
    ];
    set(&root, 0o711);
    for dir in &dirs {
        set(dir, 0o755);
    }
    set(&state.join("criusd.lock"), 0o644);
    d.start_again(&[]);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&root), 0o700);
    for dir in &dirs {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    assert_eq!(mode(&state.join("criusd.lock")), 0o600);
}

#[path = "attacks_host/pid_holder.rs"]
mod pid_holder;
