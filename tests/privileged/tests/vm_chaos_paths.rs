//! Chaos on UpdatePodSandboxResources, the case of chaos_paths that needs a pure cgroup-v2 kernel (the pod
//! cgroup must take memory and cpu limits): criusd SIGKILLed while a client resizes a pod over and over, one
//! call after another, so the kill cuts one. Afterwards the pod cgroup holds what the last answered call or the
//! cut one wrote, nothing older; the cut call, repeated as kubelet does, answers and is what the pod cgroup
//! holds; the sandbox is ready, its container runs with its own limits untouched, and once the pod is removed
//! no cgroup is left. The seed is printed (`CRIUS_CHAOS_SEED` replays the kill times). hack/test.sh runs this
//! binary inside hack/vm.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use crius_api::cri;
use crius_privileged_tests::chaos::{Rng, say, seed};
use crius_privileged_tests::cri::{self as c, Pod, container};
use crius_test_support::require_pure_cgroup_v2;

const ROUNDS: i64 = 2;

/// The pod's limits for step `i`: (64 + i) MiB and (10 + i) ms of cpu per 100 ms.
fn limits(i: i64) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 10_000 + i * 1_000,
        memory_limit_in_bytes: (64 + i) << 20,
        ..Default::default()
    }
}

/// What the pod cgroup holds for step `i`: memory.max and cpu.max.
fn written(i: i64) -> (String, String) {
    (
        ((64 + i) << 20).to_string(),
        format!("{} 100000", 10_000 + i * 1_000),
    )
}

fn update(id: &str, i: i64) -> cri::UpdatePodSandboxResourcesRequest {
    cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: id.into(),
        overhead: None,
        resources: Some(limits(i)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs cgroup v2 with controllers: hack/test.sh runs it in the VM"]
async fn a_kill_during_update_pod_sandbox_resources_leaves_the_pod_cgroup_as_told() {
    require_pure_cgroup_v2();
    let mut rng = Rng::new(seed("update-pod-resources"));
    let mut p = Pod::in_the_vm("chaos-resize").await;
    let id = p.started(container("app", "busybox", "exec sleep 1000")).await;
    let pod_cgroup = p.cgroup(&id).parent().unwrap().to_path_buf();
    let read = |file: &str| {
        let path = pod_cgroup.join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .trim()
            .to_string()
    };
    let own = std::fs::read_to_string(p.cgroup(&id).join("memory.max")).unwrap();
    let t0 = std::time::Instant::now();
    let mut next = 0;
    for round in 0..ROUNDS {
        // What the pod cgroup held before this round's first answer: the limits it was made with, then the last
        // round's.
        let before = (read("memory.max"), read("cpu.max"));
        // A client resizing the pod call after call: `told` is the last step answered, `sent` the one in flight.
        let (told, sent) = (Arc::new(AtomicI64::new(next - 1)), Arc::new(AtomicI64::new(next)));
        let stop = Arc::new(AtomicBool::new(false));
        let resizer = {
            let (mut cl, sandbox) = (p.c.clone(), p.id.clone());
            let (told, sent, stop) = (told.clone(), sent.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = sent.load(Ordering::SeqCst);
                while !stop.load(Ordering::SeqCst) {
                    sent.store(i, Ordering::SeqCst);
                    if cl
                        .update_pod_sandbox_resources(update(&sandbox, i))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    told.store(i, Ordering::SeqCst);
                    i += 1;
                }
            })
        };
        let after = 50 + rng.below(400);
        tokio::time::sleep(Duration::from_millis(after)).await;
        p.d.crash();
        stop.store(true, Ordering::SeqCst);
        tokio::time::timeout(Duration::from_secs(20), resizer)
            .await
            .expect("a resize hung past the kill")
            .unwrap();
        let (told, sent) = (told.load(Ordering::SeqCst), sent.load(Ordering::SeqCst));
        say(&format!(
            "round {round} ({:.1} s in): kill at {after} ms, step {told} answered, step {sent} in flight",
            t0.elapsed().as_secs_f64()
        ));
        p.d.start_again(&[]);
        p.c = c::client(&p.d).await;
        // What the cgroup holds: the last answer's or the cut call's (each file on its own), nothing older.
        let now = (read("memory.max"), read("cpu.max"));
        let last = if told < next { before } else { written(told) };
        let may = [last, written(sent)];
        assert!(
            may.iter().any(|w| w.0 == now.0) && may.iter().any(|w| w.1 == now.1),
            "the pod cgroup holds {now:?}: neither step {told} nor step {sent} ({may:?})"
        );
        // The cut call again, as kubelet repeats it: then the cgroup and the call agree.
        p.c.update_pod_sandbox_resources(update(&p.id, sent))
            .await
            .unwrap();
        assert_eq!((read("memory.max"), read("cpu.max")), written(sent));
        let st = c::status(&mut p.c, &p.id).await.unwrap();
        assert_eq!(st.state, cri::PodSandboxState::SandboxReady as i32, "{st:?}");
        let cs = c::cstatus(&mut p.c, &id).await.unwrap();
        assert_eq!(cs.state, cri::ContainerState::ContainerRunning as i32, "{cs:?}");
        let mine = std::fs::read_to_string(p.cgroup(&id).join("memory.max")).unwrap();
        assert_eq!(mine, own, "the container's own limit is left as it was");
        next = sent + 1;
    }
    c::cstop(&mut p.c, &id, 0).await;
    c::cremove(&mut p.c, &id).await;
    c::remove(&mut p.c, &p.id).await.unwrap();
    assert!(!p.cgroup(&id).exists(), "the container's cgroup is left");
    say(&format!("{ROUNDS} rounds in {:.1} s", t0.elapsed().as_secs_f64()));
}
