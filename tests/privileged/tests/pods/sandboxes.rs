//! Pod sandboxes: Version, Status and RuntimeConfig without a network config, pinned namespaces, the pods'
//! network, listing, restarts, stop and removal.

use super::*;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn version_runtime_config_and_status_name_the_missing_network_config() {
    let (d, empty) = without_a_network_config();
    let mut c = client(&d).await;
    let v = c
        .version(cri::VersionRequest {
            version: "0.1.0".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            v.version.as_str(),
            v.runtime_name.as_str(),
            v.runtime_api_version.as_str()
        ),
        ("0.1.0", "crius", "v1")
    );
    let rc = c
        .runtime_config(cri::RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        cri::CgroupDriver::Cgroupfs as i32
    );
    let st = c
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conds = st.status.unwrap().conditions;
    assert!(conds.iter().any(|c| c.r#type == "RuntimeReady" && c.status));
    let net = conds.iter().find(|c| c.r#type == "NetworkReady").unwrap();
    assert!(!net.status);
    assert_eq!(net.reason, "NetworkPluginNotReady");
    assert!(
        net.message.contains(&empty.path().display().to_string()),
        "{}",
        net.message
    );
    assert!(st.info["config"].contains("cniConfDir"), "{:?}", st.info);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn without_a_network_config_only_a_host_network_pod_runs() {
    let (d, _empty) = without_a_network_config();
    let mut c = client(&d).await;
    // A pod needs the network: refused, naming why, and nothing is left.
    let e = run(&mut c, config("web", "u1")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("no network config"), "{}", e.message());
    assert!(records(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("ns")).is_empty());
    // A host-network pod needs none.
    let host = host_network(config("host", "u2"));
    let id = run(&mut c, host).await.unwrap();
    let s = status(&mut c, &id).await.unwrap();
    assert_eq!(s.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(s.network.unwrap().ip, "");
    // Its own IPC namespace (and /dev/shm), the host's network and UTS.
    let mut pinned = entries(&d.state().join("ns").join(&id));
    pinned.sort();
    assert_eq!(pinned, ["ipc", "shm"]);
    remove(&mut c, &id).await.unwrap();
    assert!(entries(&d.state().join("ns")).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn bad_requests_are_refused_with_their_code_and_what_is_wrong() {
    let (d, _empty) = without_a_network_config();
    let mut c = client(&d).await;
    let mut nameless = config("", "u3");
    nameless.metadata.as_mut().unwrap().name.clear();
    let e = run(&mut c, nameless).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .create_container(cri::CreateContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("config is missing"), "{}", e.message());
    let e = c.exec(cri::ExecRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("Exec: stdin, stdout and stderr"),
        "{}",
        e.message()
    );
    let e = status(&mut c, "nope").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("\"nope\""));
}

/// criusd on a CNI network of the test's own, with two pods: a (with a DNS config) and b.
struct TwoPods {
    c: Client,
    a: String,
    b: String,
    a_conf: cri::PodSandboxConfig,
    d: Daemon,
    args: Vec<String>,
    net: Network,
}

impl TwoPods {
    async fn start() -> TwoPods {
        require_root();
        let net = Network::new();
        let args = net.daemon_args();
        let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let mut c = client(&d).await;
        let mut a_conf = config("pod-a", "ua");
        a_conf.dns_config = Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        });
        let a = run(&mut c, a_conf.clone()).await.unwrap();
        let b = run(&mut c, config("pod-b", "ub")).await.unwrap();
        TwoPods {
            c,
            a,
            b,
            a_conf,
            d,
            args,
            net,
        }
    }

    async fn ip(&mut self, id: &str) -> String {
        status(&mut self.c, id).await.unwrap().network.unwrap().ip
    }

    /// Where pod `id`'s namespaces are pinned.
    fn pins(&self, id: &str) -> std::path::PathBuf {
        self.d.state().join("ns").join(id)
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn pods_get_pinned_namespaces_an_address_each_and_reach_each_other() {
    let mut p = TwoPods::start().await;
    let ready = network_ready(&mut p.c).await;
    assert!(ready.status, "{ready:?}");
    let (a, b) = (p.a.clone(), p.b.clone());
    assert_eq!(a.len(), 64);
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.metadata.as_ref().unwrap().name, "pod-a");
    assert_eq!(sa.annotations["note"], "kept verbatim");
    let ip_a = sa.network.unwrap().ip;
    let ip_b = p.ip(&b).await;
    assert!(ip_a.starts_with(&p.net.subnet_prefix), "{ip_a}");
    assert!(ip_b.starts_with(&p.net.subnet_prefix) && ip_a != ip_b, "{ip_b}");

    // The namespaces: the pod's hostname, lo up, eth0 with the reported address; pods reach each other.
    let pins = p.pins(&a);
    let netns = format!("--net={}", pins.join("net").display());
    let uts = format!("--uts={}", pins.join("uts").display());
    assert_eq!(nsenter(&[&uts, "hostname"]).trim(), "pod-a");
    assert!(nsenter(&[&netns, "ip", "-o", "link", "show", "lo"]).contains("UP"));
    assert!(nsenter(&[&netns, "ip", "-o", "-4", "addr", "show", "eth0"]).contains(&format!("{ip_a}/24")));
    nsenter(&[&netns, "busybox", "ping", "-c", "1", "-W", "5", &ip_b]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_pods_resolv_conf_and_hostname_are_written_for_its_containers() {
    let p = TwoPods::start().await;
    let files = p.d.state().join("sandboxes").join(&p.a);
    assert_eq!(
        std::fs::read_to_string(files.join("resolv.conf")).unwrap(),
        "search default.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("hostname")).unwrap(),
        "pod-a\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_second_sandbox_of_one_pod_attempt_is_refused() {
    let mut p = TwoPods::start().await;
    // Another config for the same pod attempt is refused, naming the sandbox that holds it.
    let mut other = p.a_conf.clone();
    other.hostname = "another".into();
    let e = run(&mut p.c, other).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);
    assert!(e.message().contains(&p.a), "{}", e.message());
    // The same request again is kubelet's retry: it gets the sandbox made.
    assert_eq!(run(&mut p.c, p.a_conf.clone()).await.unwrap(), p.a);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn pods_are_listed_by_label_id_prefix_and_state() {
    let mut p = TwoPods::start().await;
    let (a, b) = (p.a.clone(), p.b.clone());
    let c = &mut p.c;
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(list(c, None).await, both);
    let by_label = cri::PodSandboxFilter {
        label_selector: [("app".to_string(), "pod-b".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(list(c, Some(by_label)).await, vec![b.clone()]);
    let by_prefix = cri::PodSandboxFilter {
        id: a[..12].to_string(),
        ..Default::default()
    };
    assert_eq!(list(c, Some(by_prefix)).await, vec![a.clone()]);
    assert_eq!(
        status(c, &a[..12]).await.unwrap().id,
        a,
        "a unique prefix finds it"
    );
    stop(c, &a).await.unwrap();
    let ready_only = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    assert_eq!(list(c, Some(ready_only)).await, vec![b.clone()]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_criusd_restart_keeps_the_pods_as_they_were() {
    let mut p = TwoPods::start().await;
    let a = p.a.clone();
    let ip_a = p.ip(&a).await;
    restart(&mut p.d, &mut p.c, &p.args).await;
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.network.unwrap().ip, ip_a);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn stopping_a_pod_releases_its_network_and_namespaces_and_may_be_repeated() {
    let mut p = TwoPods::start().await;
    let a = p.a.clone();
    let ip_a = p.ip(&a).await;
    let pins = p.pins(&a);
    // Stop: the network and namespaces go, the address is released; stopping again is fine.
    stop(&mut p.c, &a).await.unwrap();
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxNotready as i32);
    assert!(!pins.exists(), "namespace pins left behind");
    assert!(
        !p.net.ipam_dir().join(&ip_a).exists(),
        "address {ip_a} not released"
    );
    stop(&mut p.c, &a).await.unwrap();
    // Stopping an unknown sandbox is done, as kubelet and critest expect.
    stop(&mut p.c, "nope").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn removing_pods_releases_their_addresses_even_with_their_namespaces_gone_and_leaves_nothing() {
    let mut p = TwoPods::start().await;
    let (a, b) = (p.a.clone(), p.b.clone());
    let ip_b = p.ip(&b).await;
    stop(&mut p.c, &a).await.unwrap();
    // As after a reboot, b's namespaces are gone: its Remove still has CNI release its address.
    for n in ["net", "ipc", "uts", "shm"] {
        nix::mount::umount2(&p.pins(&b).join(n), nix::mount::MntFlags::MNT_DETACH).unwrap();
    }
    // Remove (b without a Stop first); removing again, or an unknown id, is fine.
    let (c, d) = (&mut p.c, &p.d);
    remove(c, &a).await.unwrap();
    remove(c, &b).await.unwrap();
    remove(c, &b).await.unwrap();
    remove(c, "nope").await.unwrap();
    assert!(list(c, None).await.is_empty());
    assert!(records(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("ns")).is_empty());
    assert!(!p.net.ipam_dir().join(&ip_b).exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&d.state().display().to_string()),
        "mounts left under the state dir"
    );
}
