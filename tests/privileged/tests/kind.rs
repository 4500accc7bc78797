//! The kind node's pieces that run here (hack/kind; the image itself needs a Docker engine): criusd with
//! hack/kind/criusd.toml as its config file (its paths moved to the test's temp dir by flags) runs a pod on a
//! kindnet-like conflist (Debian's ptp, host-local and portmap plugins) and serves it on its pod IP and on a host
//! port; `crius images import -` reads an archive from a pipe and `crius images tag` names it again, as `kind load`
//! needs; hack/kind/preload-images.sh imports a directory of archives as crius-preload.service does at boot.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crius_api::cri;
use crius_privileged_tests::cri::{
    client, config, container, create, import_busybox, in_20s, remove, run, start, status, stop,
};
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::{image, require_root};

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// A kindnet-like CNI config: ptp with host-local on a /24 no other test (or process) uses, then portmap.
struct KindNet {
    dir: tempfile::TempDir,
    subnet_prefix: String,
}

impl KindNet {
    fn new() -> KindNet {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::tempdir().unwrap();
        let n = (std::process::id() * 7 + NEXT.fetch_add(1, Ordering::Relaxed) * 31) % 200 + 20;
        let subnet_prefix = format!("10.214.{n}.");
        let conf = serde_json::json!({
            "cniVersion": "0.3.1",
            "name": "kindnet",
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": dir.path().join("ipam"),
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "ranges": [[{"subnet": format!("{subnet_prefix}0/24")}]],
                    },
                    "mtu": 1500,
                },
                {"type": "portmap", "capabilities": {"portMappings": true}},
            ],
        });
        std::fs::create_dir(dir.path().join("net.d")).unwrap();
        std::fs::write(dir.path().join("net.d/10-kindnet.conflist"), conf.to_string()).unwrap();
        KindNet { dir, subnet_prefix }
    }

    fn conf_dir(&self) -> String {
        self.dir.path().join("net.d").display().to_string()
    }

    fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam/kindnet")
    }
}

/// criusd with the kind config file, its socket and directories in the test's temp dir, on `net`.
fn kind_daemon(net: &KindNet) -> Daemon {
    let mut d = Daemon::start(&[]);
    std::fs::copy(repo_file("hack/kind/criusd.toml"), d.config_path()).unwrap();
    // The kind config's systemd cgroup driver needs systemd as PID 1, which the host has not: the driver is
    // tested in the VM (vm_systemd), the rest of the config here. Its parent root is a slice, which means
    // nothing under cgroupfs: any parent here.
    d.restart(&[
        "--cni-conf-dir",
        &net.conf_dir(),
        "--cni-plugin-dir",
        "/usr/lib/cni",
        "--cgroup-driver",
        "cgroupfs",
        "--cgroup-parent-root",
        "/",
    ]);
    d
}

/// An HTTP/1.0 GET of `/` at `addr`: the response, or why there is none.
fn http_get(addr: &str) -> Result<String, String> {
    let mut s = std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| format!("{addr}: {e}"))?;
    Ok(out)
}

fn nat_rules() -> String {
    let out = Command::new("iptables")
        .args(["-t", "nat", "-S"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn the_kind_config_runs_a_pod_on_a_kindnet_like_conflist_reached_on_its_ip_and_a_host_port() {
    require_root();
    let net = KindNet::new();
    let d = kind_daemon(&net);
    let mut c = client(&d).await;
    let st = c
        .status(cri::StatusRequest { verbose: false })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    let ready = st.conditions.iter().find(|c| c.r#type == "NetworkReady").unwrap();
    assert!(ready.status, "NetworkReady: {ready:?}\n{}", d.log());
    import_busybox(&d);

    // A free host port, for the pod's mapping.
    let host_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut conf = config("kind-web", "uid-kind-web");
    conf.log_directory = d.dir().join("logs").display().to_string();
    conf.port_mappings = vec![cri::PortMapping {
        protocol: cri::Protocol::Tcp as i32,
        container_port: 8080,
        host_port: i32::from(host_port),
        host_ip: String::new(),
    }];
    let pod = run(&mut c, conf.clone()).await.unwrap();
    let ip = status(&mut c, &pod).await.unwrap().network.unwrap().ip;
    assert!(
        ip.starts_with(&net.subnet_prefix),
        "pod IP {ip} outside the conflist's range"
    );
    assert!(net.ipam_dir().join(&ip).exists(), "host-local recorded {ip}");
    let web = create(
        &mut c,
        &pod,
        container(
            "web",
            "busybox",
            "mkdir -p /www; echo served-by-a-kind-pod > /www/index.html; exec httpd -f -p 8080 -h /www",
        ),
    )
    .await
    .unwrap();
    start(&mut c, &web).await;

    // ptp routes the pod IP to the pod's veth; portmap DNATs the host port to it.
    let direct = format!("{ip}:8080");
    let deadline = in_20s();
    loop {
        match http_get(&direct) {
            Ok(r) if r.contains("served-by-a-kind-pod") => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "{direct} never served the page: {other:?}\n{}",
                d.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rules = nat_rules();
    let dport = format!("--dport {host_port}");
    assert!(
        rules.contains(&dport) && rules.contains(&format!("{ip}:8080")),
        "no portmap DNAT of {host_port} to {ip}:8080:\n{rules}"
    );
    let host_ip = Command::new("ip")
        .args(["-4", "-o", "route", "get", "1.1.1.1"])
        .output()
        .unwrap();
    let route = String::from_utf8_lossy(&host_ip.stdout).into_owned();
    let src = route
        .split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .unwrap_or_else(|| panic!("no source address in {route:?}"))
        .to_string();
    let mapped = format!("{src}:{host_port}");
    let page = http_get(&mapped).unwrap_or_else(|e| panic!("the host port: {e}\n{rules}"));
    assert!(page.contains("served-by-a-kind-pod"), "{mapped}: {page}");

    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
    assert!(!net.ipam_dir().join(&ip).exists(), "{ip} still allocated");
    assert!(!nat_rules().contains(&dport), "the DNAT of {host_port} is left");
}

/// A layout of the busybox test image named `name` whose index entry carries containerd's full name next to a
/// bare tag, as `docker save` (Docker 25+) and `ctr images export` write it; archived at `archive`.
fn archive_as_docker_saves_it(dir: &Path, name: &str, tag: &str, archive: &Path) {
    let layout = dir.join(format!("layout-{tag}"));
    image::busybox(&layout, name).unwrap();
    let path = layout.join("index.json");
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for m in index["manifests"].as_array_mut().unwrap() {
        m["annotations"] = serde_json::json!({
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": tag,
        });
    }
    std::fs::write(&path, index.to_string()).unwrap();
    image::write_archive(&layout, archive).unwrap();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_archive_piped_to_images_import_then_tagged_is_listed_under_both_names() {
    require_root();
    let d = Daemon::start(&[]);
    let archive = d.dir().join("saved.tar");
    archive_as_docker_saves_it(d.dir(), "example.test/kind/app:v2", "v2", &archive);
    let bytes = std::fs::read(&archive).unwrap();

    // A pipe, written in small pieces by another thread, as `docker save | docker exec -i` gives it.
    let mut child = Command::new(built_binary("crius"))
        .env("CRIUS_ADDRESS", d.socket())
        .args(["images", "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for chunk in bytes.chunks(4096) {
            stdin.write_all(chunk).unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    assert!(
        stdout.contains("example.test/kind/app:v2"),
        "named by io.containerd.image.name, not the bare tag: {stdout}"
    );
    let id = stdout.split_whitespace().next().unwrap().to_string();

    let tagged = d.cli_ok(&[
        "images",
        "tag",
        "example.test/kind/app:v2",
        "kind.local/app:loaded",
    ]);
    assert!(tagged.starts_with(&id), "{tagged}");
    let ls = d.cli_ok(&["images", "ls"]);
    for (repo, tag) in [("example.test/kind/app", "v2"), ("kind.local/app", "loaded")] {
        assert!(
            ls.lines().any(|l| l.split_whitespace().take(2).eq([repo, tag])),
            "{repo}:{tag} not listed:\n{ls}"
        );
    }
    assert_eq!(
        d.cli_ok(&["images", "ls", "-q"]).trim(),
        id,
        "one image, two names"
    );
    let inspect: serde_json::Value =
        serde_json::from_str(&d.cli_ok(&["images", "inspect", "kind.local/app:loaded"])).unwrap();
    let tags = inspect["status"]["repoTags"].as_array().unwrap();
    assert_eq!(tags.len(), 2, "{tags:?}");

    // Errors name the image.
    let missing = d.cli(&["images", "tag", "example.test/kind/absent:v9", "kind.local/x:1"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && err.contains("example.test/kind/absent:v9"),
        "{err}"
    );
    // A truncated archive fails, and the error says it came from stdin.
    let half = std::fs::read(&archive).unwrap();
    let cut = d.dir().join("cut.tar");
    std::fs::write(&cut, &half[..half.len() / 2]).unwrap();
    let bad = d.cli_with_stdin(&["images", "import", "-"], std::fs::File::open(&cut).unwrap());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("stdin"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_preload_script_imports_every_archive_of_the_directory_once() {
    require_root();
    let d = Daemon::start(&[]);
    let images = d.dir().join("kind-images");
    std::fs::create_dir(&images).unwrap();
    archive_as_docker_saves_it(
        d.dir(),
        "registry.k8s.io/pause:3.10",
        "3.10",
        &images.join("a.tar"),
    );
    archive_as_docker_saves_it(
        d.dir(),
        "docker.io/kindest/kindnetd:v1",
        "v1",
        &images.join("b.tar"),
    );
    let stamp = d.dir().join("var/lib/crius/kind-preloaded");
    let out = Command::new("sh")
        .arg(repo_file("hack/kind/preload-images.sh"))
        .env("KIND_IMAGES", &images)
        .env("PRELOADED_STAMP", &stamp)
        .env("CRIUS_ADDRESS", d.socket())
        .env("CRIUS", built_binary("crius"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    assert_eq!(
        std::fs::read_to_string(&stamp).unwrap().trim(),
        "2 archives imported"
    );
    let ls = d.cli_ok(&["images", "ls"]);
    assert!(
        ls.contains("registry.k8s.io/pause") && ls.contains("docker.io/kindest/kindnetd"),
        "{ls}"
    );
}
