use super::*;
use crate::output::timefmt::parse_rfc3339;
use serde_json::json;

fn now() -> SystemTime {
    parse_rfc3339("2026-12-01T23:10:00Z").unwrap()
}

/// A pod created at 23:00 with these containers, init containers and statuses.
fn pod(name: &str, containers: &[&str], init: Value, status: Value) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|c| json!({"name": c, "image": "busybox"}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-12-01T23:00:00Z"},
        "spec": {"containers": containers, "initContainers": init, "nodeName": "node1"},
        "status": status,
    })
}

fn running(name: &str, ready: bool, restarts: i64) -> Value {
    json!({"name": name, "ready": ready, "restartCount": restarts, "started": true,
           "state": {"running": {"startedAt": "2026-12-01T23:01:00Z"}}})
}

fn waiting(name: &str, reason: &str) -> Value {
    json!({"name": name, "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason}}})
}

fn terminated(name: &str, reason: &str, code: i64) -> Value {
    json!({"name": name, "ready": false, "restartCount": 0,
           "state": {"terminated": {"reason": reason, "exitCode": code,
                                    "startedAt": "2026-12-01T23:01:00Z", "finishedAt": "2026-12-01T23:02:00Z"}}})
}

fn cells(p: &Value) -> (String, String, String) {
    let c = pod_cells(p, false, now());
    (c[1].clone(), c[2].clone(), c[3].clone())
}

fn status_of(containers: &[&str], init: Value, status: Value) -> String {
    cells(&pod("p", containers, init, status)).1
}

#[test]
fn pod_status_follows_kubectl() {
    let none = json!([]);
    let init2 = json!([{"name": "i1"}, {"name": "i2"}]);
    let st = |phase: &str, init: Value, main: Value| json!({"phase": phase, "initContainerStatuses": init, "containerStatuses": main});
    let cases = [
        (
            "Pending",
            status_of(&["a"], none.clone(), json!({"phase": "Pending"})),
        ),
        (
            "Init:0/2",
            status_of(
                &["a"],
                init2.clone(),
                st("Pending", json!([waiting("i1", "PodInitializing")]), json!([])),
            ),
        ),
        (
            "Init:1/2",
            status_of(
                &["a"],
                init2.clone(),
                st(
                    "Pending",
                    json!([terminated("i1", "Completed", 0), running("i2", false, 0)]),
                    json!([]),
                ),
            ),
        ),
        (
            "Init:CrashLoopBackOff",
            status_of(
                &["a"],
                init2.clone(),
                st("Pending", json!([waiting("i1", "CrashLoopBackOff")]), json!([])),
            ),
        ),
        (
            "Init:Error",
            status_of(
                &["a"],
                init2.clone(),
                st("Pending", json!([terminated("i1", "Error", 1)]), json!([])),
            ),
        ),
        (
            "Init:ExitCode:3",
            status_of(
                &["a"],
                init2.clone(),
                st("Pending", json!([terminated("i1", "", 3)]), json!([])),
            ),
        ),
        (
            "PodInitializing",
            status_of(
                &["a"],
                init2.clone(),
                st(
                    "Pending",
                    json!([terminated("i1", "Completed", 0), terminated("i2", "Completed", 0)]),
                    json!([waiting("a", "PodInitializing")]),
                ),
            ),
        ),
        (
            "ContainerCreating",
            status_of(
                &["a"],
                none.clone(),
                st("Pending", json!([]), json!([waiting("a", "ContainerCreating")])),
            ),
        ),
        (
            "ErrImagePull",
            status_of(
                &["a"],
                none.clone(),
                st("Pending", json!([]), json!([waiting("a", "ErrImagePull")])),
            ),
        ),
        (
            "CrashLoopBackOff",
            status_of(
                &["a", "b"],
                none.clone(),
                st(
                    "Running",
                    json!([]),
                    json!([running("a", true, 0), waiting("b", "CrashLoopBackOff")]),
                ),
            ),
        ),
        (
            "Running",
            status_of(
                &["a"],
                none.clone(),
                st("Running", json!([]), json!([running("a", true, 0)])),
            ),
        ),
        (
            "Completed",
            status_of(
                &["a"],
                none.clone(),
                st("Succeeded", json!([]), json!([terminated("a", "Completed", 0)])),
            ),
        ),
        (
            "Error",
            status_of(
                &["a"],
                none.clone(),
                st("Failed", json!([]), json!([terminated("a", "Error", 1)])),
            ),
        ),
        (
            "OOMKilled",
            status_of(
                &["a"],
                none.clone(),
                st("Running", json!([]), json!([terminated("a", "OOMKilled", 137)])),
            ),
        ),
        (
            "ExitCode:137",
            status_of(
                &["a"],
                none.clone(),
                st("Failed", json!([]), json!([terminated("a", "", 137)])),
            ),
        ),
        (
            "Signal:9",
            status_of(
                &["a"],
                none.clone(),
                st(
                    "Failed",
                    json!([]),
                    json!([{"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]),
                ),
            ),
        ),
        (
            "Evicted",
            status_of(
                &["a"],
                none.clone(),
                json!({"phase": "Failed", "reason": "Evicted"}),
            ),
        ),
    ];
    for (want, got) in cases {
        assert_eq!(got, want);
    }
}

#[test]
fn completed_with_a_running_container_is_running_or_not_ready() {
    let status = |ready: &str| {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": ready}],
               "containerStatuses": [terminated("a", "Completed", 0), running("b", true, 0)]})
    };
    // Statuses are walked last to first, so the first container's Completed is the reason left.
    assert_eq!(status_of(&["a", "b"], json!([]), status("True")), "Running");
    assert_eq!(status_of(&["a", "b"], json!([]), status("False")), "NotReady");
}

#[test]
fn terminating_unless_the_phase_is_final() {
    let mut p = pod(
        "p",
        &["a"],
        json!([]),
        json!({"phase": "Running", "containerStatuses": [running("a", true, 0)]}),
    );
    p["metadata"]["deletionTimestamp"] = json!("2026-12-01T23:09:00Z");
    assert_eq!(cells(&p).1, "Terminating");
    p["status"]["phase"] = json!("Succeeded");
    p["status"]["containerStatuses"] = json!([terminated("a", "Completed", 0)]);
    assert_eq!(cells(&p).1, "Completed");
}

#[test]
fn ready_counts_native_sidecars() {
    let init = json!([{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}]);
    let status = json!({
        "phase": "Running",
        "conditions": [{"type": "Initialized", "status": "True"}],
        "initContainerStatuses": [terminated("setup", "Completed", 0), running("proxy", true, 2)],
        "containerStatuses": [running("app", true, 1)],
    });
    let p = pod("p", &["app"], init.clone(), status);
    assert_eq!(
        cells(&p),
        ("2/2".to_owned(), "Running".to_owned(), "3".to_owned())
    );

    let starting = json!({
        "phase": "Pending",
        "initContainerStatuses": [terminated("setup", "Completed", 0),
                                  {"name": "proxy", "started": false, "ready": false, "restartCount": 0,
                                   "state": {"running": {"startedAt": "2026-12-01T23:01:00Z"}}}],
        "containerStatuses": [waiting("app", "PodInitializing")],
    });
    assert_eq!(cells(&pod("p", &["app"], init, starting)).1, "Init:1/2");
}

#[test]
fn restarts_say_how_long_ago() {
    let mut a = running("a", true, 2);
    a["lastState"] = json!({"terminated": {"exitCode": 1, "finishedAt": "2026-12-01T23:05:00Z"}});
    let p = pod(
        "p",
        &["a"],
        json!([]),
        json!({"phase": "Running", "containerStatuses": [a]}),
    );
    assert_eq!(cells(&p).2, "2 (5m ago)");
    let p = pod(
        "p",
        &["a"],
        json!([]),
        json!({"phase": "Running", "containerStatuses": [running("a", true, 4)]}),
    );
    assert_eq!(cells(&p).2, "4");
}

#[test]
fn the_pod_table_is_aligned_like_kubectl() {
    let a = pod(
        "myapp",
        &["app"],
        json!([]),
        json!({"phase": "Running", "podIP": "10.88.0.5", "podIPs": [{"ip": "10.88.0.5"}],
               "containerStatuses": [running("app", true, 0)]}),
    );
    let mut b = pod(
        "pi-8xk2p",
        &["pi"],
        json!([]),
        json!({"phase": "Succeeded", "containerStatuses": [terminated("pi", "Completed", 0)]}),
    );
    b["metadata"]["creationTimestamp"] = json!("2026-11-29T20:00:00Z");
    let out = render_table("pods", &[a.clone(), b.clone()], false, false, now());
    assert_eq!(
        out,
        "NAME       READY   STATUS      RESTARTS   AGE\n\
         myapp      1/1     Running     0          10m\n\
         pi-8xk2p   0/1     Completed   0          2d3h\n"
    );
    let wide = render_table("po", &[a, b], true, true, now());
    assert_eq!(
        wide,
        "NAMESPACE   NAME       READY   STATUS      RESTARTS   AGE    IP          NODE    NOMINATED NODE   READINESS GATES\n\
         default     myapp      1/1     Running     0          10m    10.88.0.5   node1   <none>           <none>\n\
         default     pi-8xk2p   0/1     Completed   0          2d3h   <none>      node1   <none>           <none>\n"
    );
    assert_eq!(render_table("pods", &[], false, false, now()), "");
}

#[test]
fn readiness_gates_count_true_conditions() {
    let mut p = pod(
        "p",
        &["a"],
        json!([]),
        json!({"phase": "Running",
        "conditions": [{"type": "example.com/gate", "status": "True"}, {"type": "other", "status": "False"}]}),
    );
    p["spec"]["readinessGates"] = json!([{"conditionType": "example.com/gate"}, {"conditionType": "other"}]);
    assert_eq!(pod_cells(&p, true, now())[8], "1/2");
}

fn job(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "pi", "creationTimestamp": "2026-12-01T23:00:00Z"},
           "spec": spec, "status": status})
}

#[test]
fn job_columns() {
    let complete = job(
        json!({"completions": 1, "selector": {"matchLabels": {"job-name": "pi"}},
               "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}]}}}),
        json!({"succeeded": 1, "startTime": "2026-12-01T23:00:01Z", "completionTime": "2026-12-01T23:00:13Z",
               "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}),
    );
    assert_eq!(
        job_cells(&complete, true, now()),
        ["pi", "Complete", "1/1", "12s", "10m", "pi", "perl", "job-name=pi"]
    );
    let running = job(
        json!({"completions": 3, "parallelism": 2}),
        json!({"active": 2, "succeeded": 1, "startTime": "2026-12-01T23:08:00Z"}),
    );
    assert_eq!(
        job_cells(&running, false, now()),
        ["pi", "Running", "1/3", "2m", "10m"]
    );
    let failed = job(
        json!({"completions": 1}),
        json!({"failed": 2, "startTime": "2026-12-01T23:00:00Z",
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
    );
    assert_eq!(job_cells(&failed, false, now())[1..4], ["Failed", "0/1", "10m"]);
    let unset = job(json!({"parallelism": 2}), json!({}));
    assert_eq!(job_cells(&unset, false, now())[1..4], ["Running", "0/1 of 2", ""]);
    let table = render_table("jobs", &[complete], false, false, now());
    assert_eq!(
        table,
        "NAME   STATUS     COMPLETIONS   DURATION   AGE\npi     Complete   1/1           12s        10m\n"
    );
}

#[test]
fn deployment_columns() {
    let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "creationTimestamp": "2026-12-01T20:00:00Z"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                 "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                      {"key": "canary", "operator": "DoesNotExist"}]},
                 "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"},
                                                      {"name": "log", "image": "busybox"}]}}},
        "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
    assert_eq!(
        deployment_cells(&d, true, now()),
        [
            "web",
            "2/3",
            "3",
            "2",
            "3h10m",
            "nginx,log",
            "nginx:1.27,busybox",
            "app=web,!canary,tier in (a,b)"
        ]
    );
    let table = render_table("deploy", &[d], false, false, now());
    assert_eq!(
        table,
        "NAME   READY   UP-TO-DATE   AVAILABLE   AGE\nweb    2/3     3            2           3h10m\n"
    );
    let bare = json!({"metadata": {"name": "x"}, "spec": {}});
    assert_eq!(
        deployment_cells(&bare, false, now())[1..],
        ["0/1", "0", "0", "<unknown>"]
    );
}

#[test]
fn other_kinds_get_name_and_age() {
    let cm = json!({"metadata": {"name": "cfg", "creationTimestamp": "2026-12-01T23:09:55Z"}});
    assert_eq!(
        render_table("configmaps", &[cm], false, false, now()),
        "NAME   AGE\ncfg    5s\n"
    );
}
