use super::describe_pod;
use crate::output::timefmt::parse_rfc3339;
use serde_json::{Value, json};
use std::time::SystemTime;

fn now() -> SystemTime {
    parse_rfc3339("2026-12-01T23:10:00Z").unwrap()
}

fn resize_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "resize-demo", "namespace": "default", "uid": "6f1c",
            "creationTimestamp": "2026-12-01T23:00:00Z",
            "labels": {"app": "demo", "tier": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "hello"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "demo-7d9f", "controller": true}],
        },
        "spec": {
            "nodeName": "node1",
            "priority": 0,
            "serviceAccountName": "default",
            "initContainers": [
                {"name": "setup", "image": "busybox", "command": ["sh", "-c", "echo ready"]},
                {"name": "proxy", "image": "envoy", "restartPolicy": "Always"},
            ],
            "containers": [{
                "name": "app", "image": "nginx:1.27",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "args": ["--port", "80"],
                "resources": {"limits": {"cpu": "800m", "memory": "768Mi"},
                              "requests": {"cpu": "800m", "memory": "768Mi"}},
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                 {"resourceName": "memory", "restartPolicy": "RestartContainer"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 80}, "periodSeconds": 5},
                "livenessProbe": {"exec": {"command": ["cat", "/tmp/ok"]}},
                "env": [
                    {"name": "MODE", "value": "prod"},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                ],
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "cfg", "mountPath": "/etc/app", "readOnly": true, "subPath": "app"}],
            }],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "cfg", "hostPath": {"path": "/srv/cfg", "type": "Directory"}},
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running",
            "hostIP": "192.168.1.10",
            "podIP": "10.88.0.7",
            "podIPs": [{"ip": "10.88.0.7"}],
            "startTime": "2026-12-01T23:00:01Z",
            "qosClass": "Guaranteed",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
                {"type": "PodResizeInProgress", "status": "True"},
            ],
            "initContainerStatuses": [
                {"name": "setup", "containerID": "crius://aaa", "imageID": "sha256:111", "ready": false,
                 "restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0,
                  "startedAt": "2026-12-01T23:00:02Z", "finishedAt": "2026-12-01T23:00:03Z"}}},
                {"name": "proxy", "containerID": "crius://bbb", "imageID": "sha256:222", "ready": true,
                 "started": true, "restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T23:00:04Z"}}},
            ],
            "containerStatuses": [{
                "name": "app", "containerID": "crius://ccc", "imageID": "sha256:333", "ready": true,
                "restartCount": 1, "started": true,
                "state": {"running": {"startedAt": "2026-12-01T23:05:00Z"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 137, "signal": 9,
                              "startedAt": "2026-12-01T23:00:05Z", "finishedAt": "2026-12-01T23:04:59Z"}},
                "allocatedResources": {"cpu": "800m", "memory": "512Mi"},
                "resources": {"limits": {"cpu": "800m", "memory": "512Mi"}},
            }],
        },
    })
}

fn events() -> Vec<Value> {
    vec![
        json!({"type": "Normal", "reason": "Started", "message": "Started container app",
               "source": {"component": "crius"}, "count": 2,
               "firstTimestamp": "2026-12-01T23:00:05Z", "lastTimestamp": "2026-12-01T23:05:00Z"}),
        json!({"type": "Normal", "reason": "Scheduled", "message": "Successfully assigned default/resize-demo to node1 ",
               "reportingComponent": "crius-scheduler",
               "firstTimestamp": "2026-12-01T23:00:00Z", "lastTimestamp": "2026-12-01T23:00:00Z"}),
        json!({"type": "Warning", "reason": "ResizeDeferred", "message": "Node didn't have enough capacity",
               "source": {"component": "crius"}, "count": 1,
               "firstTimestamp": "2026-12-01T23:09:00Z", "lastTimestamp": "2026-12-01T23:09:00Z"}),
    ]
}

#[test]
fn the_whole_layout() {
    let got = describe_pod(&resize_pod(), &events(), now());
    let want = include_str!("want_resize_demo.txt");
    if got != want {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "line {}", i + 1);
        }
        assert_eq!(got, want);
    }
}

#[test]
fn a_bare_pending_pod() {
    let pod = json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    });
    let got = describe_pod(&pod, &[], now());
    let want = "\
Name:         p
Namespace:    ns
Node:         <none>
Labels:       <none>
Annotations:  <none>
Status:       Pending
IP:           
IPs:          <none>
Containers:
  c:
    Image:        busybox
    Port:         <none>
    Host Port:    <none>
    Environment:  <none>
    Mounts:       <none>
Volumes:          <none>
QoS Class:        BestEffort
Node-Selectors:   <none>
Tolerations:      <none>
Events:           <none>
";
    assert_eq!(got, want);
}

#[test]
fn terminating_waiting_and_long_annotations() {
    let long = "x".repeat(150);
    let pod = json!({
        "metadata": {"name": "p", "namespace": "ns", "deletionTimestamp": "2026-12-01T23:10:30Z",
                     "deletionGracePeriodSeconds": 30, "annotations": {"a": "one\ntwo", "b": long}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [
            {"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP"}]}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    });
    let got = describe_pod(&pod, &[], now());
    assert!(
        got.contains("Status:                    Terminating (lasts 30s)\n"),
        "{got}"
    );
    assert!(got.contains("Termination Grace Period:  30s\n"), "{got}");
    assert!(
        got.contains("Annotations:               a:\n                             one\n"),
        "{got}"
    );
    assert!(
        got.contains(&format!("                             {}...\n", "x".repeat(138))),
        "{got}"
    );
    assert!(
        got.contains("    Ports:          80/TCP (http), 53/UDP\n"),
        "{got}"
    );
    assert!(got.contains("    Host Ports:     0/TCP, 0/UDP\n"), "{got}");
    assert!(
        got.contains("    State:          Waiting\n      Reason:       CrashLoopBackOff\n"),
        "{got}"
    );
}
