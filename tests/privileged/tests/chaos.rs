//! Chaos: criusd SIGKILLed at random points of a churn of pods, and started again each time. Four streams
//! of calls (as kubelet's workers) take pods through RunPodSandbox, CreateContainer, StartContainer, ExecSync,
//! StopContainer, StopPodSandbox and RemovePodSandbox, each pod to a depth of its own, retrying a call that a
//! crash cut off as kubelet does. Afterwards every pod and container the client was told of is listed, in the
//! state it was last told, and nothing else is; once everything is removed nothing is left: no mounts, pins,
//! cgroups, veths, IP allocations, shims, processes or files under the state and root directories.
//!
//! The seed is printed (`CRIUS_CHAOS_SEED` replays a run); so is each kill and what the start-up pass
//! repaired.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use crius_privileged_tests::chaos::{Rng, say};
use crius_privileged_tests::cri::{self as c, Client, container, import_busybox};
use crius_privileged_tests::leftovers::{self, CgroupParent};
use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use tonic::Code;

const STREAMS: u64 = 4;
const SLOTS: u64 = 5;
const KILLS: usize = 10;

/// How far a pod has been taken, in the order its calls are made; each step is told when its call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Ready,
    Created,
    Started,
    Execed,
    Stopped,
    PodStopped,
    PodRemoved,
}

const STEPS: [Step; 7] = [
    Step::Ready,
    Step::Created,
    Step::Started,
    Step::Execed,
    Step::Stopped,
    Step::PodStopped,
    Step::PodRemoved,
];

/// A pod as the client was told of it.
#[derive(Debug, Clone, Default)]
struct Told {
    sandbox: String,
    container: String,
    step: Option<Step>,
}

/// A connection to the criusd at `socket`, waiting (60 s at most) while it is down.
async fn connect(socket: &Path) -> Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match crius_api::connect(&socket.display().to_string()).await {
            Ok(ch) => return RuntimeServiceClient::new(ch),
            Err(e) => assert!(Instant::now() < deadline, "criusd did not come back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `s` says the call never reached criusd or was cut off with it.
fn cut_off(s: &tonic::Status) -> bool {
    matches!(s.code(), Code::Unavailable | Code::Unknown | Code::Cancelled)
}

/// One stream's client: each call is made until it answers, on a new connection after a crash.
struct Stream {
    socket: PathBuf,
    c: Client,
}

macro_rules! call {
    ($s:expr, $what:expr, |$c:ident| $body:expr) => {{
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let $c = &mut $s.c;
            match tokio::time::timeout(Duration::from_secs(60), $body).await {
                Ok(Ok(r)) => break r.into_inner(),
                Ok(Err(e)) if cut_off(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    $s.c = connect(&$s.socket).await;
                }
                Ok(Err(e)) => panic!("{}: {e:?}", $what),
                Err(_) => panic!("{}: no answer within 60 s", $what),
            }
        }
    }};
}

impl Stream {
    /// Takes pod `name` (in cgroup parent `parent`) to `depth`; what each answered call told is kept in
    /// `told`.
    async fn take(&mut self, name: &str, parent: &str, logs: &Path, depth: Step, told: &mut Told) {
        let mut conf = c::config(name, &format!("uid-{name}"));
        conf.log_directory = logs.display().to_string();
        conf.linux.get_or_insert_with(Default::default).cgroup_parent = parent.to_string();
        let mut cont = container("main", "busybox", "");
        cont.command = vec!["sleep".into(), "3600".into()];
        for step in STEPS.into_iter().take_while(|s| *s <= depth) {
            let what = format!("{name}: {step:?}");
            match step {
                Step::Ready => {
                    let req = cri::RunPodSandboxRequest {
                        config: Some(conf.clone()),
                        runtime_handler: String::new(),
                    };
                    told.sandbox = call!(self, what, |c| c.run_pod_sandbox(req.clone())).pod_sandbox_id;
                }
                Step::Created => {
                    let req = cri::CreateContainerRequest {
                        pod_sandbox_id: told.sandbox.clone(),
                        config: Some(cont.clone()),
                        sandbox_config: Some(conf.clone()),
                    };
                    told.container = call!(self, what, |c| c.create_container(req.clone())).container_id;
                }
                Step::Started => {
                    // A start that a crash cut off may have happened: its retry is refused then.
                    let req = cri::StartContainerRequest {
                        container_id: told.container.clone(),
                    };
                    let deadline = Instant::now() + Duration::from_secs(120);
                    loop {
                        match self.c.start_container(req.clone()).await {
                            Ok(_) => break,
                            Err(e) if cut_off(&e) && Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                self.c = connect(&self.socket).await;
                                let st = self.status(&told.container).await;
                                if st.state == cri::ContainerState::ContainerRunning as i32 {
                                    break;
                                }
                            }
                            Err(e) => panic!("{what}: {e:?}"),
                        }
                    }
                }
                Step::Execed => {
                    let req = cri::ExecSyncRequest {
                        container_id: told.container.clone(),
                        cmd: vec!["echo".into(), name.into()],
                        timeout: 30,
                    };
                    let r = call!(self, what, |c| c.exec_sync(req.clone()));
                    assert_eq!(
                        (r.exit_code, r.stdout),
                        (0, format!("{name}\n").into_bytes()),
                        "{what}"
                    );
                }
                Step::Stopped => {
                    let req = cri::StopContainerRequest {
                        container_id: told.container.clone(),
                        timeout: 0,
                    };
                    call!(self, what, |c| c.stop_container(req.clone()));
                }
                Step::PodStopped => {
                    let req = cri::StopPodSandboxRequest {
                        pod_sandbox_id: told.sandbox.clone(),
                    };
                    call!(self, what, |c| c.stop_pod_sandbox(req.clone()));
                }
                Step::PodRemoved => {
                    let req = cri::RemovePodSandboxRequest {
                        pod_sandbox_id: told.sandbox.clone(),
                    };
                    call!(self, what, |c| c.remove_pod_sandbox(req.clone()));
                }
            }
            told.step = Some(step);
        }
    }

    async fn status(&mut self, id: &str) -> cri::ContainerStatus {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        call!(self, format!("status of {id}"), |c| c
            .container_status(req.clone()))
        .status
        .expect("a status")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs root: run through hack/test.sh"]
async fn criusd_killed_at_random_points_of_a_churn_loses_nothing_and_leaks_nothing() {
    require_root();
    let seed = crius_privileged_tests::chaos::seed("churn");
    let net = Network::new();
    let args = net.daemon_args();
    let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    import_busybox(&d);
    let socket = d.socket();
    let logs = d.dir().join("logs");
    let cgroup = CgroupParent::new("crius-chaos");
    let parent = cgroup.0.clone();

    // The killer: SIGKILL at a random moment, start again, ten times over, while the streams churn.
    let done = Arc::new(AtomicBool::new(false));
    let killer = {
        let (done, args) = (done.clone(), args.clone());
        let mut rng = Rng::new(seed);
        let mut d = d;
        std::thread::spawn(move || {
            let t0 = Instant::now();
            for k in 1..=KILLS {
                std::thread::sleep(Duration::from_millis(150 + rng.below(900)));
                d.crash();
                say(&format!("kill {k} at {:.2} s", t0.elapsed().as_secs_f64()));
                std::thread::sleep(Duration::from_millis(rng.below(200)));
                let lines_before = d.log().lines().count();
                d.start_again(&args.iter().map(String::as_str).collect::<Vec<_>>());
                // The pass runs before criusd listens, so its lines are there once it does.
                for l in d
                    .log()
                    .lines()
                    .skip(lines_before)
                    .filter(|l| l.contains("repaired"))
                {
                    say(&format!("  after kill {k}: {l}"));
                }
            }
            done.store(true, Ordering::SeqCst);
            d
        })
    };

    // The streams: each takes its slots' pods to random depths, round after round, until the killer is done.
    let mut streams = Vec::new();
    for s in 0..STREAMS {
        let (socket, logs, parent, done) = (socket.clone(), logs.clone(), parent.clone(), done.clone());
        let mut rng = Rng::new(seed ^ (s + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        streams.push(tokio::spawn(async move {
            let mut st = Stream {
                c: connect(&socket).await,
                socket,
            };
            let mut last: Vec<Told> = vec![Told::default(); SLOTS as usize];
            let mut round = 0;
            while round == 0 || !done.load(Ordering::SeqCst) {
                for (slot, prev) in last.iter_mut().enumerate() {
                    // The slot's pod of the last round goes first (if it was not removed already): only its
                    // removal is left to do.
                    if prev.step.is_some_and(|s| s < Step::PodRemoved) {
                        let name = format!("chaos-{s}-{slot}-{}", round - 1);
                        st.take_removal(&name, prev).await;
                    }
                    let depth = STEPS[rng.below(STEPS.len() as u64) as usize];
                    let name = format!("chaos-{s}-{slot}-{round}");
                    *prev = Told::default();
                    st.take(&name, &parent, &logs, depth, prev).await;
                }
                round += 1;
            }
            (round, last)
        }));
    }
    let mut told = Vec::new();
    let mut rounds = 0;
    for s in streams {
        let (r, last) = s.await.unwrap();
        rounds += r;
        told.extend(last);
    }
    let d = killer.join().unwrap();
    say(&format!(
        "{rounds} rounds of {SLOTS} pods on {STREAMS} streams, {KILLS} kills"
    ));

    // Every pod and container told of is listed, in its last told state, and nothing else.
    let mut c = c::client(&d).await;
    let mut want_pods = BTreeSet::new();
    let mut want_containers = BTreeSet::new();
    for t in told
        .iter()
        .filter(|t| t.step.is_some_and(|s| s < Step::PodRemoved))
    {
        let step = t.step.unwrap();
        let st = c::status(&mut c, &t.sandbox).await.unwrap();
        let ready = step < Step::PodStopped;
        assert_eq!(
            st.state == cri::PodSandboxState::SandboxReady as i32,
            ready,
            "sandbox {} told {step:?}: {st:?}",
            t.sandbox
        );
        want_pods.insert(t.sandbox.clone());
        if step >= Step::Created {
            let cs = c::cstatus(&mut c, &t.container).await.unwrap();
            let want = match step {
                Step::Created => cri::ContainerState::ContainerCreated,
                Step::Started | Step::Execed => cri::ContainerState::ContainerRunning,
                _ => cri::ContainerState::ContainerExited,
            };
            assert_eq!(
                cs.state, want as i32,
                "container {} told {step:?}: {cs:?}",
                t.container
            );
            want_containers.insert(t.container.clone());
        }
    }
    let pods: BTreeSet<String> = c::list(&mut c, None).await.into_iter().collect();
    assert_eq!(pods, want_pods, "the sandboxes listed are those told of");
    let listed: BTreeSet<String> = c::containers(&mut c, Default::default())
        .await
        .into_iter()
        .collect();
    assert_eq!(listed, want_containers, "the containers listed are those told of");
    say(&format!(
        "{} sandboxes and {} containers listed as told",
        want_pods.len(),
        want_containers.len()
    ));

    // Everything removed: nothing is left.
    for id in &pods {
        c::remove(&mut c, id).await.unwrap();
    }
    let left = leftovers::settled(&d, &net, &cgroup).await;
    assert!(
        left.is_empty(),
        "left behind: {left:#?}\ncriusd log:\n{}",
        d.log()
    );
    drop(d);
    drop(cgroup);
}

impl Stream {
    /// The rest of pod `name`'s life after `told.step`: its sandbox removed (with its containers).
    async fn take_removal(&mut self, name: &str, told: &mut Told) {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: told.sandbox.clone(),
        };
        call!(self, format!("{name}: removal"), |c| c
            .remove_pod_sandbox(req.clone()));
        told.step = Some(Step::PodRemoved);
    }
}
