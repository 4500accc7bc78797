//! Chaos on the newer paths: criusd SIGKILLed with one of them in flight, started again, and then nothing is
//! lost and nothing leaks. A pod service apply (`crius apply -f`): the pod exists once afterwards, running,
//! after the apply is repeated as a user would if it failed. A streaming exec: the client's session ends with
//! an error, not a hang; the container runs on, and once it is removed no exec process or FIFO is left. An
//! image import (`crius images import`): the image is either all there or absent and importable again, and
//! the image store holds no blob, layer or ingest directory that no image uses. (UpdatePodSandboxResources
//! needs a pure cgroup v2: its case is in vm_chaos_paths.)
//!
//! Each case prints its seed (`CRIUS_CHAOS_SEED` replays the kill times) and each kill.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Stdio as ProcStdio};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::chaos::{Rng, say, seed};
use crius_privileged_tests::cri::{self as c, container, entries, import_busybox};
use crius_privileged_tests::leftovers::{self, CgroupParent};
use crius_privileged_tests::service::{json, setup, wait_for, write};
use crius_stream::client::{self, Stdio, Transport};
use crius_stream::status::Outcome;
use crius_test_support::cni::Network;
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::image::{self, ImageSpec};
use crius_test_support::require_root;
use tokio::io::AsyncReadExt;

const ROUNDS: usize = 3;

/// Waits (`secs` at most) for CLI run `child` to end: whether it succeeded, and its stderr.
fn finished(mut child: Child, secs: u64, what: &str) -> (bool, String) {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return (st.success(), err);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: the CLI hung past the kill ({secs} s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `crius args` against `d`, started and left running.
fn spawn_cli(d: &Daemon, args: &[&str]) -> Child {
    std::process::Command::new(built_binary("crius"))
        .env("CRIUS_ADDRESS", d.socket())
        .args(args)
        .stdin(ProcStdio::null())
        .stdout(ProcStdio::null())
        .stderr(ProcStdio::piped())
        .spawn()
        .expect("running crius")
}

/// The ready sandboxes criusd lists whose metadata name is `name`.
async fn ready_sandboxes_named(d: &Daemon, name: &str) -> Vec<String> {
    let mut cl = c::client(d).await;
    let r = cl
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner();
    r.items
        .into_iter()
        .filter(|s| s.state == cri::PodSandboxState::SandboxReady as i32)
        .filter(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
        .map(|s| s.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_kill_during_a_pod_service_apply_leaves_the_pod_once_and_running() {
    let mut rng = Rng::new(seed("apply"));
    let mut s = setup("");
    for round in 0..ROUNDS {
        let name = format!("chaos-apply-{round}");
        let manifest = write(
            &s,
            &format!("{name}.yaml"),
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
                 containers:\n  - name: app\n    image: docker.io/library/myapp:latest\n    command: [sleep, '1000']\n"
            ),
        );
        // The CLI's answer comes some 50 ms after its start: the kills land before, during and after it, as
        // the pod is made.
        let apply = spawn_cli(&s.d, &["apply", "-f", &manifest]);
        let after = rng.below(150);
        std::thread::sleep(Duration::from_millis(after));
        s.d.crash();
        let (ok, err) = finished(apply, 30, &name);
        say(&format!(
            "apply {name}: kill at {after} ms; the apply {}",
            if ok { "had answered" } else { "failed" }
        ));
        s.restart_daemon();
        if !ok {
            say(&format!("  the apply failed ({}): applied again", err.trim()));
            s.d.cli_ok(&["apply", "-f", &manifest]);
        }
        wait_for(&format!("{name} to run"), Duration::from_secs(60), || {
            let p = json(&s, &["get", "pod", &name, "-o", "json"]);
            p["status"]["phase"] == "Running" && p["status"]["containerStatuses"][0]["ready"] == true
        });
        let listed = s.d.cli_ok(&["get", "pods", "-o", "name"]);
        assert_eq!(
            listed
                .lines()
                .filter(|l| l.ends_with(&format!("/{name}")))
                .count(),
            1,
            "{name} listed once: {listed}"
        );
        let sandboxes = ready_sandboxes_named(&s.d, &name).await;
        assert_eq!(sandboxes.len(), 1, "{name}: one ready sandbox: {sandboxes:?}");
    }
    // Only the applied pods' sandboxes and containers exist.
    let mut cl = c::client(&s.d).await;
    let all = c::list(&mut cl, None).await;
    assert_eq!(all.len(), ROUNDS, "sandboxes: {all:?}");
    let running = c::containers(&mut cl, Default::default()).await;
    assert_eq!(running.len(), ROUNDS, "containers: {running:?}");
    for round in 0..ROUNDS {
        s.d.cli_ok(&["delete", "pod", &format!("chaos-apply-{round}"), "--now"]);
    }
    wait_for("the pods to go", Duration::from_secs(30), || {
        s.d.cli_ok(&["get", "pods", "-o", "name"]).trim().is_empty()
    });
    s.assert_nothing_left();
    let cgroup = CgroupParent::new("crius-chaos-apply");
    let left = leftovers::settled(&s.d, s.net(), &cgroup).await;
    assert!(
        left.is_empty(),
        "left behind: {left:#?}\ncriusd log:\n{}",
        s.d.log()
    );
}

/// The processes whose command line holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains(marker))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_kill_during_a_streaming_exec_ends_the_session_and_leaves_no_exec_behind() {
    require_root();
    let mut rng = Rng::new(seed("exec"));
    let net = Network::new();
    let args = net.daemon_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    import_busybox(&d);
    let mut cl = c::client(&d).await;
    let mut conf = c::config("chaos-exec", "uid-chaos-exec");
    conf.log_directory = d.dir().join("logs").display().to_string();
    let pod = c::run(&mut cl, conf).await.unwrap();
    let id = c::create(
        &mut cl,
        &pod,
        container("sleeper", "busybox:latest", "exec sleep 3600"),
    )
    .await
    .unwrap();
    c::start(&mut cl, &id).await;
    let marker = "chaos-exec-tick";
    for round in 0..ROUNDS {
        let url = cl
            .exec(cri::ExecRequest {
                container_id: id.clone(),
                cmd: vec![
                    "sh".into(),
                    "-c".into(),
                    format!("echo up; while :; do echo {marker}; sleep 0.1; done"),
                ],
                stdout: true,
                stderr: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        let (out_w, mut out_r) = tokio::io::duplex(1 << 20);
        let session = tokio::spawn(async move {
            let stdio = Stdio {
                stdout: Some(Box::pin(out_w)),
                ..Default::default()
            };
            client::remote_command(&url, Transport::Spdy, stdio).await
        });
        // The session runs: its first line came through the streaming server.
        let mut first = [0u8; 3];
        tokio::time::timeout(Duration::from_secs(10), out_r.read_exact(&mut first))
            .await
            .expect("the exec's first line")
            .unwrap();
        let drain = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = out_r.read_to_end(&mut sink).await;
        });
        let after = rng.below(500);
        tokio::time::sleep(Duration::from_millis(after)).await;
        d.crash();
        say(&format!("exec round {round}: kill {after} ms into the session"));
        let ended = tokio::time::timeout(Duration::from_secs(20), session)
            .await
            .expect("the session hung past the kill")
            .unwrap();
        match &ended {
            Err(e) => say(&format!("  the client was told: {e}")),
            Ok(o) => {
                say(&format!("  the session ended: {o:?}"));
                assert_ne!(*o, Outcome::Success, "a session cut by the kill reported success");
            }
        }
        drain.abort();
        d.start_again(&args);
        cl = c::client(&d).await;
        let st = c::cstatus(&mut cl, &id).await.unwrap();
        assert_eq!(st.state, cri::ContainerState::ContainerRunning as i32, "{st:?}");
        let r = cl
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["echo".into(), "still".into()],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.exit_code, r.stdout), (0, b"still\n".to_vec()));
    }
    c::cstop(&mut cl, &id, 0).await;
    c::cremove(&mut cl, &id).await;
    let bundle = d.state().join("containers").join(&id);
    assert!(
        !bundle.exists(),
        "the bundle (and its exec FIFOs) is left: {:?}",
        entries(&bundle)
    );
    let procs = processes_with(marker);
    assert!(procs.is_empty(), "exec processes left: {procs:?}");
    c::remove(&mut cl, &pod).await.unwrap();
    let cgroup = CgroupParent::new("crius-chaos-exec");
    let left = leftovers::settled(&d, &net, &cgroup).await;
    assert!(
        left.is_empty(),
        "left behind: {left:#?}\ncriusd log:\n{}",
        d.log()
    );
}

/// A layout of one image of four layers of `mib` MiB each (bytes of `rng`, which gzip does not shrink): its
/// blob names (hex).
fn big_layout(dir: &Path, rng: &mut Rng, mib: usize) -> BTreeSet<String> {
    let mut layers = Vec::new();
    for i in 0..4 {
        let l = dir.join(format!("layer{i}"));
        std::fs::create_dir_all(&l).unwrap();
        let bytes: Vec<u8> = (0..mib << 17)
            .flat_map(|_| rng.below(u64::MAX).to_le_bytes())
            .collect();
        std::fs::write(l.join(format!("data{i}")), bytes).unwrap();
        layers.push(l);
    }
    let layout = dir.join("layout");
    image::write_layout(
        &layout,
        &[ImageSpec {
            name: "example.test/chaos-big:v1".into(),
            layers,
            entrypoint: vec!["/data0".into()],
            ..Default::default()
        }],
    )
    .unwrap();
    entries(&layout.join("blobs/sha256")).into_iter().collect()
}

/// What the image store under `d` holds, by directory: blobs, layers, image records, ingest dirs.
fn store(d: &Daemon) -> [(String, Vec<String>); 4] {
    let root = d.root().join("images");
    ["blobs/sha256", "layers", "images", "ingest"].map(|sub| (sub.to_string(), entries(&root.join(sub))))
}

fn image_listed(d: &Daemon) -> bool {
    d.cli_ok(&["images", "ls"]).contains("example.test/chaos-big")
}

/// Removes the image; the store is empty after.
fn remove_and_check_empty(d: &Daemon) {
    d.cli_ok(&["images", "rm", "example.test/chaos-big:v1"]);
    for (sub, left) in store(d) {
        assert!(left.is_empty(), "{sub} left after the image's removal: {left:?}");
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_kill_during_an_image_import_leaves_the_image_whole_or_absent_and_nothing_partial() {
    require_root();
    let mut rng = Rng::new(seed("import"));
    let dir = tempfile::tempdir().unwrap();
    let blobs = big_layout(dir.path(), &mut rng, 3);
    let layout = dir.path().join("layout").display().to_string();
    let mut d = Daemon::start(&[]);
    let t0 = Instant::now();
    d.cli_ok(&["images", "import", &layout]);
    let whole = t0.elapsed();
    say(&format!("import: a whole import takes {whole:?}"));
    let stored: BTreeSet<String> = store(&d)[0].1.iter().cloned().collect();
    assert_eq!(stored, blobs, "the store holds the layout's blobs");
    remove_and_check_empty(&d);
    for round in 0..ROUNDS {
        let import = spawn_cli(&d, &["images", "import", &layout]);
        let after = rng.below(whole.as_millis() as u64 + 1);
        std::thread::sleep(Duration::from_millis(after));
        d.crash();
        let (ok, _) = finished(import, 30, "the import");
        d.start_again(&[]);
        let there = image_listed(&d);
        say(&format!(
            "import round {round}: kill at {after} ms; the CLI {}, the image is {}",
            if ok { "succeeded" } else { "failed" },
            if there { "there" } else { "absent" }
        ));
        assert!(!ok || there, "an import that answered is there after the restart");
        if there {
            let stored: BTreeSet<String> = store(&d)[0].1.iter().cloned().collect();
            assert_eq!(stored, blobs, "the image is whole: its blobs");
        } else {
            for (sub, left) in store(&d) {
                assert!(left.is_empty(), "the cut import left {sub}: {left:?}");
            }
            d.cli_ok(&["images", "import", &layout]);
            assert!(image_listed(&d), "imported again");
        }
        remove_and_check_empty(&d);
    }
}
