//! NRI plugins through the CRI, end to end, over the real socket: a criusd started with `--nri` hosts the
//! test plugin (tests/nri-plugin), pre-launched from a plugin dir of the test's own or connecting to the
//! socket itself. A pre-launched plugin sees a pod's whole lifecycle, in order, and its adjustment (an env
//! var, a mount and a CDI device) is seen inside the container; a plugin's refusal fails CreateContainer with its message
//! and name; a plugin that hangs costs the create about the request timeout and the create succeeds; a
//! plugin that crashes mid-create is dropped and the creates go on. (cpu.weight, which this hybrid host
//! cannot show, is vm_nri's.)

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, eventually, in_20s};
use crius_privileged_tests::nri::{connect, log_lines, nri_args, pre_launch};
use crius_test_support::require_root;

use crius_privileged_tests::nri::LOOP;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_pre_launched_plugin_adjusts_containers_and_sees_a_pods_whole_lifecycle() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    let shared = h.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("hello"), "hello from the host\n").unwrap();
    let log = h.join("logger.log");
    let (log_s, shared_s) = (log.display().to_string(), shared.display().to_string());
    // A CDI device the plugin adds, resolved by criusd's CDI code from the test's spec dir.
    let cdi = h.join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    std::fs::write(
        cdi.join("nri.json"),
        r#"{"cdiVersion": "0.6.0", "kind": "test.example/nri",
            "devices": [{"name": "dev", "containerEdits": {"env": ["FROM_CDI=yes"]}}]}"#,
    )
    .unwrap();
    pre_launch(
        h,
        "10-logger",
        &[
            "--log",
            &log_s,
            "--behave",
            "adjust",
            "--mount",
            &shared_s,
            "--cdi",
            "test.example/nri=dev",
        ],
    );
    let mut args = nri_args(h);
    args.extend(["--cdi-spec-dir".to_string(), cdi.display().to_string()]);
    let mut p = Pod::on_host_network_with("nri", args).await;
    p.c.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: p.id.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let id = p.started(container("web", "busybox", LOOP)).await;
    p.wait_for_log("web", "ready").await;
    let (code, out, err) = p
        .sh(
            &id,
            "echo $NRI_PLUGIN $FROM_CDI; cat /nri/hello; touch /nri/x 2>/dev/null || echo ro",
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("logger yes\nhello from the host\n") && out.ends_with("ro\n"),
        "{out:?}"
    );
    // An update with nothing in it: NRI hears of it, nothing changes.
    p.c.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(Default::default()),
        ..Default::default()
    })
    .await
    .unwrap();
    crius_privileged_tests::cri::cstop(&mut p.c, &id, 10).await;
    crius_privileged_tests::cri::cremove(&mut p.c, &id).await;
    let pod = p.id.clone();
    crius_privileged_tests::cri::stop(&mut p.c, &pod).await.unwrap();
    crius_privileged_tests::cri::remove(&mut p.c, &pod).await.unwrap();

    let lines = log_lines(&log);
    // Registered, configured with the runtime's name, synchronized (nothing yet) before the pod was run.
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix));
    let synced = at("Synchronize pods= containers=0").expect("synchronized");
    assert!(at("Configure crius ").is_some_and(|c| c < synced), "{lines:?}");
    assert!(at("RunPodSandbox").is_some_and(|r| r > synced), "{lines:?}");
    let events: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.contains(" nri"))
        .collect();
    println!("the plugin's log of the pod's lifecycle:\n{}", events.join("\n"));
    assert_eq!(
        events,
        [
            "RunPodSandbox nri",
            "UpdatePodSandbox nri",
            "PostUpdatePodSandbox nri",
            "CreateContainer nri/web",
            "PostCreateContainer nri/web",
            "StartContainer nri/web",
            "PostStartContainer nri/web",
            "UpdateContainer nri/web",
            "PostUpdateContainer nri/web",
            "StopContainer nri/web",
            "RemoveContainer nri/web",
            "StopPodSandbox nri",
            "RemovePodSandbox nri",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn refusals_fail_the_create_and_hung_or_crashed_plugins_are_dropped() {
    require_root();
    let host = tempfile::tempdir().unwrap();
    let h = host.path();
    let mut p = Pod::on_host_network_with("guarded", nri_args(h)).await;
    let guard = connect(h, "20", "guard", "refuse,hang", &h.join("guard.log"));
    // Synchronized with what exists.
    assert!(
        guard
            .lines()
            .iter()
            .any(|l| l == "Synchronize pods=guarded containers=0"),
        "{:?}",
        guard.lines()
    );

    // A refusal: the plugin's message and name, and nothing made.
    let e = p.create(container("refused", "busybox", LOOP)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("NRI plugin 20-guard")
            && e.message()
                .contains("the test plugin refuses containers named refused"),
        "{e:?}"
    );
    println!("CreateContainer refused: {}", e.message());

    // A plugin that hangs: the create waits about the request timeout (1 s), then succeeds without it.
    let t = Instant::now();
    let slow = p.create(container("slow", "busybox", LOOP)).await.unwrap();
    let took = t.elapsed();
    println!("CreateContainer with a hung plugin took {took:?}");
    assert!(
        took >= Duration::from_millis(900),
        "{took:?}: the plugin was not waited for"
    );
    assert!(
        took < Duration::from_secs(4),
        "{took:?}: more than about the timeout"
    );
    // Dropped: the plugin's connection is closed, and creates no longer wait for it.
    eventually(
        in_20s(),
        || format!("{:?}", guard.lines()),
        || guard.lines().iter().any(|l| l == "Closed"),
    )
    .await;
    let t = Instant::now();
    p.create(container("quick", "busybox", LOOP)).await.unwrap();
    assert!(t.elapsed() < Duration::from_millis(900), "{:?}", t.elapsed());
    crius_privileged_tests::cri::start(&mut p.c, &slow).await;

    // A plugin that crashes in the middle of a create: the create succeeds, the plugin is gone, the next
    // create succeeds.
    let mut crasher = connect(h, "30", "crasher", "crash", &h.join("crasher.log"));
    assert!(
        crasher
            .lines()
            .iter()
            .any(|l| l == "Synchronize pods=guarded containers=2"),
        "slow and quick: {:?}",
        crasher.lines()
    );
    p.create(container("doomed", "busybox", LOOP)).await.unwrap();
    let status = crasher.child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{:?}", crasher.lines());
    assert!(crasher.lines().iter().any(|l| l == "crashing"));
    p.create(container("after", "busybox", LOOP)).await.unwrap();
    assert!(
        p.d.log().contains("crasher"),
        "criusd logs the dropped plugin: {}",
        p.d.log()
    );
}
