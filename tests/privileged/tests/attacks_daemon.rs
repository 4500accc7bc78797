//! Attacks on criusd by a client or a pod that is allowed to talk to it, each tried against a real criusd:
//! - made-up gRPC method names, to grow the metrics' series without bound;
//! - a FIFO put in a container's log place, to park the shim (and the CRI call waiting on it) in open(2);
//! - a pod naming a node cgroup it does not own (`/system.slice`) as its parent, or a user namespace whose
//!   host range holds the host's root;
//! - a local user connecting to the socket, which is root-equivalent: only root and `listen_group` may.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, client, config, container, host_network, remove, run};
use crius_privileged_tests::leftovers::CgroupParent;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use tonic::Code;

/// The Prometheus text of criusd's endpoint at `address`.
fn scrape(address: &str) -> String {
    let mut s = std::net::TcpStream::connect(address).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// 3,000 calls of made-up methods (a real gRPC client: Python's grpcio) leave two label sets of them in the
/// metrics, not 3,000: before, every path was a label (3,000 names made 60,000 series).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn made_up_methods_do_not_grow_the_metrics() {
    require_root();
    let address = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let d = Daemon::start(&["--metrics-address", &address]);
    let script = r#"
import grpc, sys
ch = grpc.insecure_channel("unix://" + sys.argv[1])
codes = set()
for i in range(1500):
    for path in ("/runtime.v1.RuntimeService/Made%d" % i, "/made%d.Up/Call" % i):
        try:
            ch.unary_unary(path)(b"", timeout=10)
        except grpc.RpcError as e:
            codes.add(e.code().name)
print(",".join(sorted(codes)))
"#;
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script, &d.socket().display().to_string()])
        .output()
        .expect("python3 with grpcio (hack/install-deps.sh installs python3-grpcio)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "UNIMPLEMENTED");
    let mut c = client(&d).await;
    c.version(cri::VersionRequest::default()).await.unwrap();
    let text = scrape(&address);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("crius_grpc_requests_total{"))
        .collect();
    assert!(
        series
            .iter()
            .all(|l| l.contains("method=\"Version\"") || l.contains("method=\"unknown\"")),
        "{series:?}"
    );
    let unknown =
        "crius_grpc_requests_total{service=\"unknown\",method=\"unknown\",code=\"Unimplemented\"} 3000";
    assert!(series.contains(&unknown), "{series:?}");
    assert!(series.len() <= 3, "{series:?}");
}

/// A FIFO in place of a running container's log: ReopenContainerLog must fail at once, naming the file, and
/// criusd keep answering. Before, the shim's open(O_WRONLY) of a FIFO with no reader blocked, and the call with
/// it.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_fifo_in_a_log_place_parks_nothing() {
    require_root();
    let mut pod = Pod::on_host_network("fifo-log").await;
    let id = pod.started(container("c", "busybox", "sleep 60")).await;
    let log = pod.log("c");
    std::fs::remove_file(&log).unwrap();
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let started = Instant::now();
    let e = tokio::time::timeout(
        Duration::from_secs(20),
        pod.c.reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: id.clone(),
        }),
    )
    .await
    .expect("ReopenContainerLog blocked on the FIFO")
    .unwrap_err();
    assert!(
        e.message().contains("0.log") && e.message().contains("not a regular file"),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    let t = Instant::now();
    pod.c.version(cri::VersionRequest::default()).await.unwrap();
    pod.c
        .container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let _ = std::fs::remove_file(&log);
}

/// `--cgroup-parent-root`: a pod naming `/system.slice`, a path out of the root through `..`, or the root's
/// sibling is refused before anything is made; a pod within it runs. Before, any existing cgroup could be a
/// pod's parent, and UpdatePodSandboxResources wrote its limits.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_cgroup_parent_outside_the_root_is_refused() {
    require_root();
    let root = CgroupParent::new("crius-test-kubepods");
    // The pod service's pods must be within the root too (criusd refuses to start otherwise).
    let mut d = Daemon::start(&[]);
    std::fs::write(
        d.config_path(),
        format!(
            "[runtime]\ncgroup_parent_root = {:?}\n\n[pods]\ncgroup_root = {:?}\n",
            root.0, root.0
        ),
    )
    .unwrap();
    d.restart(&[]);
    let mut c = client(&d).await;
    for (i, bad) in [
        "/system.slice".to_string(),
        format!("{}/../system.slice", root.0),
        format!("{}x/pod1", root.0),
        "/".to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut conf = host_network(config("outside", &format!("uid-outside-{i}")));
        conf.linux.as_mut().unwrap().cgroup_parent = bad.clone();
        let e = run(&mut c, conf).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains("linux.cgroup_parent"), "{bad}: {e:?}");
    }
    let mut conf = host_network(config("inside", "uid-inside"));
    conf.linux.as_mut().unwrap().cgroup_parent = format!("{}/burstable/pod1", root.0);
    let id = run(&mut c, conf).await.unwrap();
    remove(&mut c, &id).await.unwrap();
}

/// A pod user namespace mapping host uid 0 (or gid 0) is refused: its root would be the host's.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_user_namespace_holding_the_host_root_is_refused() {
    require_root();
    let d = Daemon::start(&[]);
    let mut c = client(&d).await;
    let map = |host_id| cri::IdMapping {
        container_id: 0,
        host_id,
        length: 65536,
    };
    for (uids, gids) in [(0, 65536), (65536, 0)] {
        let mut conf = config("userns-root", "uid-userns-root");
        conf.linux = Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    userns_options: Some(cri::UserNamespace {
                        mode: cri::NamespaceMode::Pod as i32,
                        uids: vec![map(uids)],
                        gids: vec![map(gids)],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let e = run(&mut c, conf).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("maps host ids 0 to 65535"), "{e:?}");
    }
}

/// Whether a process of `uid` and `gid` (and no other group) can connect to `socket`.
fn connects_as(uid: u32, gid: u32, socket: &std::path::Path) -> bool {
    let mut cmd = std::process::Command::new("/usr/bin/python3");
    cmd.args([
        "-c",
        "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
        &socket.display().to_string(),
    ]);
    // std drops the supplementary groups of a root parent when it sets the uid.
    cmd.uid(uid).gid(gid);
    cmd.stderr(std::process::Stdio::null());
    cmd.status().unwrap().success()
}

/// The socket is root-equivalent: a local user reaches it only through `listen_group`.
#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn only_root_and_the_listen_group_reach_the_socket() {
    require_root();
    let d = Daemon::start(&["--listen-group", "54321"]);
    let meta = std::fs::metadata(d.socket()).unwrap();
    assert_eq!(meta.gid(), 54321);
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    // The test's temp dir above the state dir must be searchable by others for this check.
    let mut dir = d.socket();
    while dir.pop() && dir != std::path::Path::new("/") {
        let m = std::fs::metadata(&dir).unwrap();
        if m.permissions().mode() & 0o001 == 0 {
            std::fs::set_permissions(
                &dir,
                std::fs::Permissions::from_mode(m.permissions().mode() | 0o001),
            )
            .unwrap();
        }
    }
    assert!(!connects_as(65534, 65534, &d.socket()), "nobody connected");
    assert!(
        connects_as(65534, 54321, &d.socket()),
        "a member of the listen group could not connect"
    );
}

/// criusd raises its own soft descriptor limit to the hard one (a flood of connections must not exhaust it),
/// but its containers keep the soft limit criusd started with: the shim puts it back.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn criusd_raises_its_descriptor_limit_and_containers_keep_theirs() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    require_root();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // This test's criusd starts with a soft limit below its hard one.
    setrlimit(Resource::RLIMIT_NOFILE, 1000.min(hard), hard).unwrap();
    let mut pod = Pod::on_host_network("nofile").await;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", pod.d.pid())).unwrap();
    let line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("Max open files"))
            .map(|l| l.split_whitespace().skip(3).take(2).collect::<Vec<_>>().join(" "))
            .unwrap()
    };
    assert_eq!(line(&limits), format!("{hard} {hard}"), "criusd's own");
    pod.started(container(
        "c",
        "busybox",
        "grep 'Max open files' /proc/self/limits",
    ))
    .await;
    pod.wait_for_log("c", "Max open files").await;
    let text = pod.log_text("c");
    assert!(
        text.contains(&format!("Max open files            {} ", 1000.min(hard))),
        "the container's: {text}"
    );
}
