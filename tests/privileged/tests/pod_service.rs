//! The pod service in criusd, driven by the CLI's kubectl verbs on a real CNI network and the seed
//! manifests as written (stand-in images): the seed Job through `crius apply` completes in the sidecar order,
//! shows `Completed` and `1/1`, and its logs stay readable; a bad manifest is refused with its field path and
//! nothing is made; the seed Deployment survives a SIGKILL of criusd with the same container ids, and a
//! sidecar killed while criusd is down is restarted afterwards; a readiness probe failing, then passing,
//! flips READY from 0/1 to 1/1; deleting leaves nothing behind.

use std::time::{Duration, Instant};

use crius_privileged_tests::engine::Setup;
use crius_privileged_tests::service::{cid, json, setup, wait_for, write};
use serde_json::Value;

const MANIFESTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn the_seed_job_through_apply_completes_and_reads_as_kubectl_shows_it() {
    let s = setup("");
    let job = format!("{MANIFESTS}/seed-job.yaml");
    let cm = format!("{MANIFESTS}/fluent-bit-config.yaml");
    let t0 = Instant::now();
    let out = s.d.cli_ok(&["apply", "-f", &cm, "-f", &job]);
    let took = t0.elapsed();
    assert!(out.contains("job.batch/data-processing-job created"), "{out}");
    eprintln!("crius apply of the seed Job returned in {took:?}");
    wait_for("the Job to complete", Duration::from_secs(90), || {
        json(&s, &["get", "jobs", "data-processing-job", "-o", "json"])["status"]["succeeded"] == 1
    });
    let jobs = s.d.cli_ok(&["get", "jobs"]);
    assert!(
        jobs.contains("data-processing-job") && jobs.contains("1/1") && jobs.contains("Complete"),
        "{jobs}"
    );
    let pods = s.d.cli_ok(&["get", "pods"]);
    assert!(pods.contains("Completed"), "{pods}");
    let list = json(
        &s,
        &["get", "pods", "-l", "job-name=data-processing-job", "-o", "json"],
    );
    let pod = &list["items"][0];
    assert_eq!(pod["status"]["phase"], "Succeeded", "{pod}");
    let image_id = pod["status"]["containerStatuses"][0]["imageID"]
        .as_str()
        .unwrap_or("");
    assert!(!image_id.is_empty(), "the worker's imageID: {pod}");
    let name = pod["metadata"]["name"].as_str().unwrap();
    // The seed's order: the log agent started first, the migration ran, then the worker.
    let started = |list: &str, c: &str| {
        let st = pod["status"][list]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == c)
            .unwrap();
        st["state"]["terminated"]["startedAt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (agent, migration, worker) = (
        started("initContainerStatuses", "log-agent"),
        started("initContainerStatuses", "db-migration"),
        started("containerStatuses", "worker"),
    );
    assert!(
        agent <= migration && migration <= worker,
        "{agent} {migration} {worker}"
    );
    let conditions =
        s.d.cli_ok(&["get", "pod", name, "-o", "jsonpath={.status.conditions}"]);
    let conditions: Value = serde_json::from_str(&conditions).unwrap();
    assert!(
        conditions
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["reason"] == "PodCompleted")
    );
    let logs = s.d.cli_ok(&["logs", name, "-c", "worker"]);
    assert!(!logs.is_empty(), "the worker's log");
    let described = s.d.cli_ok(&["describe", "pod", name]);
    assert!(
        described.contains("Events:") && described.contains("Started container worker"),
        "{described}"
    );
    s.d.cli_ok(&["delete", "job", "data-processing-job"]);
    let left = s.d.cli_ok(&["get", "pods", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
    assert!(
        !s.dir.path().join("logs").read_dir().unwrap().any(|e| e.is_ok()),
        "log directories removed"
    );
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn a_bad_manifest_is_refused_with_its_field_and_nothing_is_made() {
    let s = setup("");
    let bad = s.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n  containers: [{name: a, image: busybox}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: a, image: busybox, resourcs: {}}\n",
    )
    .unwrap();
    let out = s.d.cli(&["apply", "-f", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("document 2") && err.contains("spec.containers[0].resourcs"),
        "{err}"
    );
    let pods = s.d.cli_ok(&["get", "pods", "-o", "name"]);
    assert!(pods.trim().is_empty(), "nothing made: {pods}");
    let missing = s.d.cli(&["get", "pod", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("Error from server (NotFound): pods \"nope\" not found"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn the_seed_deployment_survives_a_sigkill_of_criusd_with_the_same_containers() {
    let mut s = setup("");
    let d = format!("{MANIFESTS}/seed-deployment.yaml");
    let cm = format!("{MANIFESTS}/fluent-bit-config.yaml");
    s.d.cli_ok(&["apply", "-f", &cm, "-f", &d]);
    let running = |s: &Setup| {
        let l = json(s, &["get", "pods", "-o", "json"]);
        l["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .find(|p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
            })
    };
    wait_for("the Deployment's pod to run", Duration::from_secs(60), || {
        running(&s).is_some()
    });
    let before = running(&s).unwrap();
    let name = before["metadata"]["name"].as_str().unwrap().to_string();
    let (app, side) = (
        cid(&before, "containerStatuses", "app"),
        cid(&before, "initContainerStatuses", "fluent-bit"),
    );
    s.d.crash();
    // While criusd is down the sidecar dies; the engine that takes the pod back restarts it.
    let side_pid = sidecar_pid(&side);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(side_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    s.restart_daemon();
    wait_for("the sidecar's restart", Duration::from_secs(60), || {
        let p = json(&s, &["get", "pod", &name, "-o", "json"]);
        let st = p["status"]["initContainerStatuses"][0].clone();
        st["restartCount"].as_i64().unwrap_or(0) >= 1 && !st["state"]["running"].is_null()
    });
    let after = json(&s, &["get", "pod", &name, "-o", "json"]);
    assert_eq!(
        cid(&after, "containerStatuses", "app"),
        app,
        "the app container kept running"
    );
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    let deploy = s.d.cli_ok(&["get", "deployments"]);
    assert!(deploy.contains("myapp") && deploy.contains("1/1"), "{deploy}");
    s.d.cli_ok(&["delete", "deployment", "myapp", "--grace-period", "5"]);
    let left = s.d.cli_ok(&["get", "pods", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
}

/// The pid of container `id` (`crius://ID`) from the runtime's view: its init's, by its cgroup or state.
fn sidecar_pid(id: &str) -> i32 {
    let id = id.trim_start_matches("crius://");
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let environ = std::fs::read(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if String::from_utf8_lossy(&environ).contains(id) {
            // The container's first process: the lowest pid in its cgroup.
            return pid;
        }
    }
    panic!("no process of container {id}");
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn a_readiness_probe_failing_then_passing_flips_ready_from_0_to_1() {
    let s = setup("");
    let pod = s.dir.path().join("ready.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  terminationGracePeriodSeconds: 2\n  containers:\n  \
         - name: app\n    image: docker.io/library/myapp:latest\n    command: [sh, -c, 'sleep 3; touch /tmp/ready; sleep 1000']\n    \
         readinessProbe:\n      exec: {command: [test, -f, /tmp/ready]}\n      periodSeconds: 1\n      failureThreshold: 1\n",
    )
    .unwrap();
    s.d.cli_ok(&["apply", "-f", &pod.display().to_string()]);
    let row = |s: &Setup| {
        s.d.cli_ok(&["get", "pods", "web"])
            .lines()
            .nth(1)
            .unwrap_or("")
            .to_string()
    };
    wait_for("the pod to run, not ready", Duration::from_secs(30), || {
        let r = row(&s);
        r.contains("Running") && r.contains("0/1")
    });
    let p = json(&s, &["get", "pod", "web", "-o", "json"]);
    let ready = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["status"]
            .clone()
    };
    assert_eq!(ready(&p), "False", "{p}");
    wait_for("READY 1/1", Duration::from_secs(30), || row(&s).contains("1/1"));
    let p = json(&s, &["get", "pod", "web", "-o", "json"]);
    assert_eq!(ready(&p), "True", "{p}");
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
    s.d.cli_ok(&["delete", "pod", "web", "--now"]);
    assert!(s.d.cli_ok(&["get", "pods", "-o", "name"]).trim().is_empty());
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn jobs_run_to_their_completions_in_parallel_and_fail_past_their_backoff_limit() {
    let s = setup("");
    let many = write(
        &s,
        "many.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: many}\nspec:\n  completions: 3\n  parallelism: 2\n  \
         template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - {name: w, image: \
         docker.io/library/myapp:latest, command: [sh, -c, 'sleep 1']}\n",
    );
    let failing = write(
        &s,
        "failing.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: failing}\nspec:\n  backoffLimit: 1\n  template:\n    \
         spec:\n      restartPolicy: Never\n      containers:\n      - {name: w, image: \
         docker.io/library/myapp:latest, command: [sh, -c, 'exit 3']}\n",
    );
    s.d.cli_ok(&["apply", "-f", &many, "-f", &failing]);
    // Never more than two of the first Job's pods at once.
    let mut most = 0;
    wait_for("3 completions", Duration::from_secs(60), || {
        let j = json(&s, &["get", "job", "many", "-o", "json"]);
        most = most.max(j["status"]["active"].as_i64().unwrap_or(0));
        j["status"]["succeeded"] == 3
    });
    assert!(most <= 2, "at most parallelism pods at once, saw {most}");
    let jobs = s.d.cli_ok(&["get", "jobs"]);
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("many") && l.contains("3/3") && l.contains("Complete")),
        "{jobs}"
    );
    wait_for("the failing Job to fail", Duration::from_secs(60), || {
        let j = json(&s, &["get", "job", "failing", "-o", "json"]);
        j["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Failed" && c["reason"] == "BackoffLimitExceeded")
        })
    });
    let j = json(&s, &["get", "job", "failing", "-o", "json"]);
    assert_eq!(j["status"]["failed"], 2, "backoffLimit 1: two pods failed, {j}");
    let pods = s.d.cli_ok(&["get", "pods", "-l", "job-name=failing"]);
    assert!(pods.contains("Error"), "{pods}");
    s.d.cli_ok(&["delete", "job", "many"]);
    s.d.cli_ok(&["delete", "job", "failing"]);
    assert!(s.d.cli_ok(&["get", "pods", "-o", "name"]).trim().is_empty());
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn a_resize_past_the_node_is_infeasible_one_past_what_is_free_deferred_and_a_qos_change_refused() {
    let s = setup("");
    let pod = |name: &str, cpu: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
             containers:\n  - name: app\n    image: docker.io/library/myapp:latest\n    command: [sleep, '1000']\n    \
             resources: {{requests: {{cpu: {cpu}}}}}\n"
        )
    };
    let a = write(&s, "a.yaml", &pod("a", "100m"));
    let b = write(&s, "b.yaml", &pod("b", "100m"));
    s.d.cli_ok(&["apply", "-f", &a, "-f", &b]);
    wait_for("both pods to run", Duration::from_secs(30), || {
        let l = json(&s, &["get", "pods", "-o", "json"]);
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == 2
    });
    let cpus = std::thread::available_parallelism().unwrap().get() as u64 * 1000;
    let condition = |name: &str| {
        let p = json(&s, &["get", "pod", name, "-o", "json"]);
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "PodResizePending")
            .map(|c| {
                (
                    c["reason"].as_str().unwrap().to_string(),
                    c["message"].as_str().unwrap().to_string(),
                )
            })
    };
    // More than the whole node: Infeasible, and the spec says what was asked.
    let too_much = format!(
        r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{}m"}}}}}}]}}}}"#,
        cpus * 2
    );
    s.d.cli_ok(&["patch", "pod", "a", "--subresource", "resize", "-p", &too_much]);
    let (reason, message) = condition("a").expect("PodResizePending");
    assert_eq!(reason, "Infeasible", "{message}");
    assert!(message.contains("cpu"), "{message}");
    // What fits the node but not beside b: Deferred; b deleted, it is allocated.
    let most = cpus - 150;
    let deferred = format!(
        r#"{{"spec":{{"containers":[{{"name":"app","resources":{{"requests":{{"cpu":"{most}m"}}}}}}]}}}}"#
    );
    s.d.cli_ok(&["patch", "pod", "a", "--subresource", "resize", "-p", &deferred]);
    let (reason, message) = condition("a").expect("PodResizePending");
    assert_eq!(reason, "Deferred", "{message}");
    s.d.cli_ok(&["delete", "pod", "b", "--now"]);
    let end = Instant::now() + Duration::from_secs(20);
    while condition("a").is_some() {
        assert!(
            Instant::now() < end,
            "the deferred resize was not allocated: {:?}",
            condition("a")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let p = json(&s, &["get", "pod", "a", "-o", "json"]);
    assert_eq!(
        p["status"]["containerStatuses"][0]["allocatedResources"]["cpu"],
        format!("{most}m"),
        "{p}"
    );
    // A QoS class change is refused by name, nothing changed.
    let out = s.d.cli(&[
        "resize", "pod", "a", "-c", "app", "--cpu", "1", "--memory", "64Mi",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Pod QoS is immutable"));
    s.d.cli_ok(&["delete", "pod", "a", "--now"]);
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn a_rolling_update_keeps_within_its_surge_and_its_ready_pods() {
    let s = setup("");
    let deployment = |version: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 3\n  \
             selector: {{matchLabels: {{app: web}}}}\n  \
             strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}\n  \
             template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      terminationGracePeriodSeconds: 1\n      \
             containers:\n      - name: app\n        image: docker.io/library/myapp:latest\n        \
             command: [sleep, '1000']\n        env: [{{name: VERSION, value: '{version}'}}]\n        \
             readinessProbe: {{exec: {{command: ['true']}}, periodSeconds: 1}}\n"
        )
    };
    // (pods not terminating, of them ready, of them of the template whose env says `version`)
    let count = |version: &str| {
        let l = json(&s, &["get", "pods", "-o", "json"]);
        let live: Vec<&Value> = l["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        let is_ready = |p: &&&Value| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        };
        let ready = live.iter().filter(is_ready).count();
        let of_version = live
            .iter()
            .filter(is_ready)
            .filter(|p| p["spec"]["containers"][0]["env"][0]["value"] == version)
            .count();
        (live.len(), ready, of_version)
    };
    let v1 = write(&s, "v1.yaml", &deployment("1"));
    s.d.cli_ok(&["apply", "-f", &v1]);
    wait_for("3 ready pods of v1", Duration::from_secs(60), || {
        count("1").2 == 3
    });
    let v2 = write(&s, "v2.yaml", &deployment("2"));
    s.d.cli_ok(&["apply", "-f", &v2]);
    let end = Instant::now() + Duration::from_secs(90);
    let mut most = 0;
    loop {
        let (live, ready, updated) = count("2");
        most = most.max(live);
        assert!(live <= 4, "more than replicas + maxSurge pods: {live}");
        assert!(ready >= 3, "fewer than replicas - maxUnavailable ready: {ready}");
        if updated == 3 && live == 3 {
            break;
        }
        assert!(
            Instant::now() < end,
            "the rollout did not finish: {live} live, {updated} updated"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(most, 4, "the rollout used its surge");
    s.d.cli_ok(&["delete", "deployment", "web"]);
    wait_for("the pods to go", Duration::from_secs(30), || {
        s.d.cli_ok(&["get", "pods", "-o", "name"]).trim().is_empty()
    });
}
