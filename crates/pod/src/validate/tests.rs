use super::*;

fn check(text: &str) -> Vec<String> {
    problems(text, "t.yaml").iter().map(ToString::to_string).collect()
}

/// The one problem of `text`; fails the test when there is not exactly one.
fn one(text: &str) -> String {
    let found = check(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    found.into_iter().next().unwrap_or_default()
}

/// A Pod named `p` whose spec is `spec` (YAML at two spaces' indent).
fn pod(spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n{spec}")
}

const APP: &str = "  containers:\n  - name: app\n    image: busybox\n";

#[test]
fn the_seed_manifests_pass() {
    let seeds = [
        include_str!("../../../../tests/privileged/manifests/seed-job.yaml"),
        include_str!("../../../../tests/privileged/manifests/seed-deployment.yaml"),
        include_str!("../../../../tests/privileged/manifests/seed-resize-pod.yaml"),
        include_str!("../../../../tests/privileged/manifests/fluent-bit-config.yaml"),
    ];
    for seed in seeds {
        assert_eq!(check(seed), Vec::<String>::new(), "{seed}");
        assert!(strict(seed, "seed.yaml").is_ok());
        // And what passes is what `crius run` reads.
        crate::parse(seed, "seed.yaml").unwrap();
    }
    let all = seeds.join("---\n");
    assert!(strict(&all, "all.yaml").is_ok());
}

#[test]
fn a_kind_crius_does_not_run_is_named() {
    // The seed article's VerticalPodAutoscaler: `crius run` skips it, `crius apply` refuses it.
    let vpa = "apiVersion: autoscaling.k8s.io/v1\nkind: VerticalPodAutoscaler\nmetadata:\n  name: myapp-vpa\nspec:\n  targetRef: {apiVersion: apps/v1, kind: Deployment, name: myapp}\n";
    let text = format!("{}---\n{vpa}", pod(APP));
    assert_eq!(
        one(&text),
        "t.yaml, document 2 (VerticalPodAutoscaler \"myapp-vpa\"): kind VerticalPodAutoscaler \
         (autoscaling.k8s.io/v1) is not something crius runs: crius apply takes Pod, Job, CronJob, Deployment, \
         ReplicaSet, StatefulSet, DaemonSet, ConfigMap, Secret"
    );
    let e = one("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n");
    assert!(
        e.starts_with("t.yaml, document 1 (Service \"web\"): kind Service (v1) is not something crius runs"),
        "{e}"
    );
    assert_eq!(
        one("apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\n"),
        "t.yaml, document 1 (Deployment \"d\"): apiVersion: Unsupported value: \"apps/v1beta1\": crius reads a \
         Deployment as \"apps/v1\""
    );
    assert_eq!(
        one("kind: Pod\nmetadata: {name: p}\n"),
        "t.yaml, document 1 (Pod \"p\"): apiVersion: Required value"
    );
    assert_eq!(
        one("apiVersion: v1\nmetadata: {name: p}\n"),
        "t.yaml, document 1: kind: Required value"
    );
    assert!(one("- a\n- b\n").contains("document 1: not a Kubernetes object"));
    // Empty documents are nothing, as `crius run` reads them.
    assert!(check(&format!("---\n# only a comment\n---\n{}", pod(APP))).is_empty());
}

#[test]
fn unknown_fields_are_named_by_their_path() {
    let typo =
        pod("  containers:\n  - name: app\n    image: busybox\n    resourcs:\n      limits: {cpu: 1}\n");
    assert_eq!(
        one(&typo),
        "t.yaml, document 1 (Pod \"p\"): spec.containers[0].resourcs: unknown field \"resourcs\""
    );
    let cases = [
        (
            "spec:\n  containers: []\n  restartPolicyy: Never\n",
            "spec.restartPolicyy",
        ),
        (
            "spec:\n  volumes:\n  - name: v\n    emptyDir: {sizelimit: 1Gi}\n",
            "spec.volumes[0].emptyDir.sizelimit",
        ),
        (
            "spec:\n  containers:\n  - name: a\n    livenessProbe:\n      httpGet: {path: /, port: 80, hots: x}\n",
            "spec.containers[0].livenessProbe.httpGet.hots",
        ),
        (
            "spec:\n  containers:\n  - name: a\n    securityContext: {runAsUsr: 1}\n",
            "spec.containers[0].securityContext.runAsUsr",
        ),
        (
            "spec:\n  containers:\n  - name: a\n    resources:\n      limit: {cpu: 1}\n",
            "spec.containers[0].resources.limit",
        ),
        (
            "spec:\n  initContainers:\n  - name: a\n    env:\n    - {name: X, valu: y}\n",
            "spec.initContainers[0].env[0].valu",
        ),
        ("spc: {}\n", "spc"),
    ];
    let e = one(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, lables: {a: b}}\nspec:\n  containers: [{name: a, image: x}]\n",
    );
    assert!(e.ends_with("metadata.lables: unknown field \"lables\""), "{e}");
    for (yaml, path) in cases {
        let text = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\n{yaml}");
        let found = check(&text);
        let key = path.rsplit('.').next().unwrap();
        let want = format!("{path}: unknown field \"{key}\"");
        assert!(found.iter().any(|f| f.ends_with(&want)), "{want} in {found:#?}");
    }
    // In a workload, the path goes through the template.
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: app, image: x, imagee: y}\n";
    assert_eq!(
        one(deployment),
        "t.yaml, document 1 (Deployment \"d\"): spec.template.spec.containers[0].imagee: unknown field \"imagee\""
    );
    let cron = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n          - {name: app, image: x, cmd: [a]}\n";
    assert!(
        one(cron).ends_with("spec.jobTemplate.spec.template.spec.containers[0].cmd: unknown field \"cmd\"")
    );
}

#[test]
fn what_round_trips_is_known() {
    // Nulls, empty maps and lists, int-or-strings, quantities as numbers, times, status, octal modes, free maps.
    let text = r#"apiVersion: v1
kind: Pod
metadata:
  name: p
  creationTimestamp: null
  labels: {app.kubernetes.io/name: web, tier: ""}
  annotations: {example.com/note: "anything at all"}
spec:
  nodeSelector: {}
  tolerations: []
  securityContext: {}
  containers:
  - name: app
    image: busybox
    args: []
    env: [{name: A, value: "1"}, {name: B, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    ports: [{containerPort: 80, name: http}, {containerPort: 81, protocol: UDP}]
    readinessProbe: {httpGet: {path: /, port: http}, periodSeconds: 1}
    livenessProbe: {tcpSocket: {port: 80}}
    lifecycle: {preStop: {sleep: {seconds: 1}}}
    resources:
      requests: {cpu: 0.5, memory: 1e9}
      limits: {cpu: 1, memory: 2Gi, example.com/gpu: 1, hugepages-2Mi: 2Mi}
    volumeMounts: [{name: cfg, mountPath: /etc/cfg, subPath: a/b}]
  volumes:
  - name: cfg
    configMap: {name: c, defaultMode: 0644, items: [{key: a, path: a, mode: 0400}]}
  - name: scratch
    emptyDir: {sizeLimit: 1Gi, medium: null}
status:
  phase: Running
  startTime: "2025-01-01T00:00:00Z"
"#;
    assert_eq!(check(text), Vec::<String>::new());
}

#[test]
fn wrong_types_and_duplicate_keys_are_named() {
    let e = one(&pod(
        "  containers:\n  - name: app\n    image: x\n    ports: [{containerPort: eighty}]\n",
    ));
    assert!(
        e.starts_with(
            "t.yaml, document 1 (Pod \"p\"): spec.containers[0].ports[0].containerPort: invalid type"
        ),
        "{e}"
    );
    assert!(
        !e.contains(" at line "),
        "the line is of the text written back: {e}"
    );
    let e = one(&pod("  containers:\n  - name: app\n    image: x\n    image: y\n"));
    assert!(
        e.starts_with("t.yaml, document 1: spec.containers[0]: duplicate entry with key \"image\" at line 7"),
        "{e}"
    );
    let e = one("apiVersion: v1\nkind: Pod\nmetadata: {name: p\n");
    assert!(e.starts_with("t.yaml, document 1: "), "{e}");
}

#[test]
fn bad_quantities_are_named() {
    let text = pod(
        "  containers:\n  - name: a\n    image: x\n  - name: b\n    image: x\n    resources:\n      limits: {memory: 12xb, cpu: 1}\n      requests: {cpu: 2, memory: -1, ephemeral-storage: '1e-40', memroy: 1Gi}\n  volumes:\n  - name: v\n    emptyDir: {sizeLimit: lots}\n  overhead: {cpu: 1..5}\n",
    );
    let at = "t.yaml, document 1 (Pod \"p\"): ";
    let mut want = vec![
        "spec.volumes[0].emptyDir.sizeLimit: quantity \"lots\" is not valid (examples: 500m, 1.5, 512Mi, 1G)".to_string(),
        "spec.containers[1].resources.limits[memory]: quantity \"12xb\" is not valid (examples: 500m, 1.5, 512Mi, 1G)".into(),
        "spec.containers[1].resources.requests[ephemeral-storage]: quantity \"1e-40\" has more decimal places than crius counts".into(),
        "spec.containers[1].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0".into(),
        "spec.containers[1].resources.requests[memroy]: Invalid value: \"memroy\": must be a standard resource type (cpu, memory, ephemeral-storage, storage, hugepages-<size>) or fully qualified (example.com/gpu)".into(),
        "spec.containers[1].resources.requests[cpu]: Invalid value: \"2\": must be less than or equal to cpu limit of 1".into(),
        "spec.overhead[cpu]: quantity \"1..5\" is not valid (examples: 500m, 1.5, 512Mi, 1G)".into(),
    ];
    for w in &mut want {
        w.insert_str(0, at);
    }
    assert_eq!(check(&text), want);
    // Pod-level resources, StatefulSet claims and ephemeral volumes are quantities too.
    let e = one(&pod(&format!("{APP}  resources: {{limits: {{cpu: 1x}}}}\n")));
    assert!(
        e.ends_with(
            "spec.resources.limits[cpu]: quantity \"1x\" is not valid (examples: 500m, 1.5, 512Mi, 1G)"
        ),
        "{e}"
    );
    let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  template:\n    spec:\n      containers: [{name: a, image: x}]\n  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec: {resources: {requests: {storage: 1GB}}}\n";
    assert!(one(sts).ends_with("spec.volumeClaimTemplates[0].spec.resources.requests[storage]: quantity \"1GB\" is not valid (examples: 500m, 1.5, 512Mi, 1G)"));
    let eph = pod(&format!(
        "{APP}  volumes:\n  - name: e\n    ephemeral: {{volumeClaimTemplate: {{spec: {{resources: {{requests: {{storage: x1}}}}}}}}}}\n"
    ));
    assert!(one(&eph).ends_with("spec.volumes[0].ephemeral.volumeClaimTemplate.spec.resources.requests[storage]: quantity \"x1\" is not valid (examples: 500m, 1.5, 512Mi, 1G)"));
}

#[test]
fn duplicate_and_missing_names() {
    let dup = pod(
        "  initContainers:\n  - {name: app, image: x, restartPolicy: Always}\n  containers:\n  - {name: web, image: x}\n  - {name: app, image: x}\n",
    );
    assert_eq!(
        one(&dup),
        "t.yaml, document 1 (Pod \"p\"): spec.containers[1].name: Duplicate value: \"app\""
    );
    let dup = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: a, image: x}, {name: a, image: y}]\n";
    assert!(one(dup).ends_with("spec.template.spec.containers[1].name: Duplicate value: \"a\""));
    let volumes = pod(&format!(
        "{APP}  volumes: [{{name: v, emptyDir: {{}}}}, {{name: v, emptyDir: {{}}}}]\n"
    ));
    assert!(one(&volumes).ends_with("spec.volumes[1].name: Duplicate value: \"v\""));
    let ports = pod(
        "  containers:\n  - name: a\n    image: x\n    ports: [{name: http, containerPort: 80}, {name: http, containerPort: 81}]\n",
    );
    assert!(one(&ports).ends_with("spec.containers[0].ports[1].name: Duplicate value: \"http\""));
    let mount =
        pod("  containers:\n  - name: a\n    image: x\n    volumeMounts: [{name: data, mountPath: /data}]\n");
    assert_eq!(
        one(&mount),
        "t.yaml, document 1 (Pod \"p\"): spec.containers[0].volumeMounts[0].name: Not found: \"data\""
    );
    let image = pod("  containers:\n  - name: a\n");
    assert!(one(&image).ends_with("spec.containers[0].image: Required value"));
    let unnamed =
        "apiVersion: v1\nkind: Pod\nmetadata: {labels: {a: b}}\nspec:\n  containers: [{name: a, image: x}]\n";
    assert_eq!(
        one(unnamed),
        "t.yaml, document 1 (Pod): metadata.name: Required value"
    );
    assert!(one(&pod("  containers: [{image: x}]\n")).ends_with("spec.containers[0].name: Required value"));
    assert!(one(&pod("  containers: []\n")).ends_with("spec.containers: Required value"));
    assert!(
        one("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
            .ends_with("(Pod \"p\"): spec: Required value")
    );
}

#[test]
fn names_must_be_dns_1123() {
    let e = one(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: My_Pod}\nspec:\n  containers: [{name: a, image: x}]\n",
    );
    assert!(e.starts_with("t.yaml, document 1 (Pod \"My_Pod\"): metadata.name: Invalid value: \"My_Pod\": a lowercase RFC 1123 subdomain"), "{e}");
    let e = one(&pod("  containers: [{name: App.1, image: x}]\n"));
    assert!(
        e.contains("spec.containers[0].name: Invalid value: \"App.1\": a lowercase RFC 1123 label"),
        "{e}"
    );
    let e = one(&pod(
        "  containers: [{name: a, image: x, ports: [{name: HTTP, containerPort: 80}]}]\n",
    ));
    assert!(
        e.contains("spec.containers[0].ports[0].name: Invalid value: \"HTTP\": a port name"),
        "{e}"
    );
    let e = one(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: Web}}\nspec:\n{APP}"
    ));
    assert!(e.contains("metadata.namespace: Invalid value: \"Web\""), "{e}");
    let e = one(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: {{app: 'my app'}}}}\nspec:\n{APP}"
    ));
    assert!(
        e.contains("metadata.labels: Invalid value: \"my app\": a label value"),
        "{e}"
    );
    let e = one(&pod(&format!(
        "{APP}  volumes: [{{name: Data, emptyDir: {{}}}}]\n"
    )));
    assert!(e.contains("spec.volumes[0].name: Invalid value: \"Data\""), "{e}");
}

#[test]
fn containers_ports_probes_and_volumes() {
    let cases = [
        (
            "  containers: [{name: a, image: x}]\n  volumes: [{name: v, image: {pullPolicy: Never}}]\n",
            "spec.volumes[0].image.reference: Required value",
        ),
        (
            "  containers: [{name: a, image: x}]\n  volumes: [{name: v, image: {reference: r, pullPolicy: Sometimes}}]\n",
            "spec.volumes[0].image.pullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
        ),
        (
            "  containers: [{name: a, image: x, imagePullPolicy: Sometimes}]\n",
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
        ),
        (
            "  restartPolicy: Sometimes\n  containers: [{name: a, image: x}]\n",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        ),
        (
            "  initContainers: [{name: i, image: x, restartPolicy: Never}]\n  containers: [{name: a, image: x}]\n",
            "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ),
        (
            "  containers: [{name: a, image: x, restartPolicy: Always}]\n",
            "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers",
        ),
        (
            "  containers: [{name: a, image: x, ports: [{containerPort: 70000}]}]\n",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        (
            "  containers: [{name: a, image: x, ports: [{containerPort: 80, protocol: tcp}]}]\n",
            "spec.containers[0].ports[0].protocol: Unsupported value: \"tcp\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        ),
        (
            "  containers: [{name: a, image: x, ports: [{name: http}]}]\n",
            "spec.containers[0].ports[0].containerPort: Required value",
        ),
        (
            "  containers: [{name: a, image: x, livenessProbe: {periodSeconds: 1}}]\n",
            "spec.containers[0].livenessProbe: Required value: must specify a handler type",
        ),
        (
            "  containers: [{name: a, image: x, readinessProbe: {exec: {command: [x]}, tcpSocket: {port: 1}}}]\n",
            "spec.containers[0].readinessProbe: Forbidden: may not specify more than 1 handler type",
        ),
        (
            "  containers: [{name: a, image: x, startupProbe: {exec: {command: [x]}, successThreshold: 2}}]\n",
            "spec.containers[0].startupProbe.successThreshold: Invalid value: 2: must be 1",
        ),
        (
            "  initContainers: [{name: i, image: x, readinessProbe: {exec: {command: [x]}}}]\n  containers: [{name: a, image: x}]\n",
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ),
        (
            "  containers: [{name: a, image: x, lifecycle: {preStop: {}}}]\n",
            "spec.containers[0].lifecycle.preStop: Required value: must specify a handler type",
        ),
        (
            "  containers: [{name: a, image: x, env: [{value: x}]}]\n",
            "spec.containers[0].env[0].name: Required value",
        ),
        (
            "  containers: [{name: a, image: x, env: [{name: A, value: x, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}]\n",
            "spec.containers[0].env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
        ),
        (
            "  containers: [{name: a, image: x, resizePolicy: [{resourceName: gpu, restartPolicy: NotRequired}]}]\n",
            "spec.containers[0].resizePolicy[0].resourceName: Unsupported value: \"gpu\": supported values: \"cpu\", \"memory\"",
        ),
        (
            "  containers: [{name: a, image: x, resizePolicy: [{resourceName: cpu, restartPolicy: Later}]}]\n",
            "spec.containers[0].resizePolicy[0].restartPolicy: Unsupported value: \"Later\": supported values: \"NotRequired\", \"RestartContainer\"",
        ),
        (
            "  containers: [{name: a, image: x, volumeMounts: [{name: v, mountPath: /a}, {name: v, mountPath: /a}]}]\n  volumes: [{name: v, emptyDir: {}}]\n",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
        ),
        (
            "  containers: [{name: a, image: x, volumeMounts: [{name: v, mountPath: /a, subPath: ../etc}]}]\n  volumes: [{name: v, emptyDir: {}}]\n",
            "spec.containers[0].volumeMounts[0].subPath: Invalid value: \"../etc\": must not contain '..'",
        ),
        (
            "  containers: [{name: a, image: x}]\n  volumes: [{name: v}]\n",
            "spec.volumes[0]: Required value: must specify a volume type",
        ),
        (
            "  containers: [{name: a, image: x}]\n  volumes: [{name: v, emptyDir: {}, hostPath: {path: /x}}]\n",
            "spec.volumes[0]: Forbidden: may not specify more than 1 volume type",
        ),
        (
            "  containers: [{name: a, image: x}]\n  volumes: [{name: v, configMap: {}}]\n",
            "spec.volumes[0].configMap.name: Required value",
        ),
        (
            "  containers: [{name: a, image: x}]\n  ephemeralContainers: [{name: d, image: x}]\n",
            "spec.ephemeralContainers: Forbidden: cannot be set on create",
        ),
    ];
    for (spec, want) in cases {
        let e = one(&pod(spec));
        assert_eq!(e, format!("t.yaml, document 1 (Pod \"p\"): {want}"), "{spec}");
    }
}

#[test]
fn workloads_and_their_templates() {
    let job = |policy: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: j}}\nspec:\n  template:\n    spec:\n{policy}      containers: [{{name: a, image: x}}]\n"
        )
    };
    assert!(check(&job("      restartPolicy: OnFailure\n")).is_empty());
    assert_eq!(
        one(&job("")),
        "t.yaml, document 1 (Job \"j\"): spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
    );
    let dep = |extra: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\nspec:\n{extra}  template:\n    metadata: {{labels: {{app: d}}}}\n    spec:\n      containers: [{{name: a, image: x}}]\n"
        )
    };
    assert!(check(&dep("  replicas: 3\n  selector: {matchLabels: {app: d}}\n")).is_empty());
    assert!(one(&dep("  selector: {matchLabels: {app: other}}\n")).ends_with(
        "spec.template.metadata.labels: Invalid value: \"app=d\": `selector` does not match template `labels`"
    ));
    assert!(
        one(&dep("  replicas: -1\n"))
            .ends_with("spec.replicas: Invalid value: -1: must be greater than or equal to 0")
    );
    assert!(one(&dep("  replicas: 111\n")).ends_with(
        "spec.replicas: Invalid value: 111: more than the 110 pods a node runs (kubelet's maxPods)"
    ));
    assert!(one(&dep("  replicas: many\n")).contains("spec.replicas: invalid type: string \"many\""));
    let never = dep("").replace("containers:", "restartPolicy: Never\n      containers:");
    assert!(one(&never).ends_with(
        "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""
    ));
    assert!(
        one("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds}\nspec: {}\n")
            .ends_with("spec.template.spec: Required value")
    );
    assert!(
        one("apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: rs}\nspec: {}\n")
            .ends_with("spec.template: Required value")
    );
    let cron = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: a, image: x}]\n";
    assert_eq!(
        one(cron),
        "t.yaml, document 1 (CronJob \"c\"): spec.schedule: Required value"
    );
}

#[test]
fn config_maps_and_secrets() {
    assert!(
        check(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a.conf: x}\nbinaryData: {b: aGk=}\n"
        )
        .is_empty()
    );
    assert!(one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a/b: x}\n").ends_with("data[a/b]: Invalid value: \"a/b\": a valid config key: letters, digits, '-', '_' or '.', not '.' and not starting with '..' (e.g. 'key.name')"));
    assert!(
        one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\nbinaryData: {a: aGk=}\n")
            .ends_with("binaryData[a]: Invalid value: \"a\": duplicate of key present in data")
    );
    assert!(
        one("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndat: {a: x}\n")
            .ends_with("dat: unknown field \"dat\"")
    );
    assert!(check("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: aGk=}\nstringData: {a: hi}\ntype: Opaque\n").is_empty());
    let e = one("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: 'not base64!'}\n");
    assert!(
        e.starts_with("t.yaml, document 1 (Secret \"s\"): data.a: "),
        "{e}"
    );
}

#[test]
fn every_problem_is_listed_one_a_line() {
    let text = format!(
        "{}---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n---\n{}",
        pod("  containers: [{name: a, image: x, imagee: y}]\n"),
        pod("  containers: [{name: a}]\n")
    );
    let e = strict(&text, "all.yaml").unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(
        lines[0].starts_with("all.yaml, document 1 (Pod \"p\"): spec.containers[0].imagee"),
        "{e}"
    );
    assert!(
        lines[1].starts_with("all.yaml, document 2 (Service \"s\"): kind Service"),
        "{e}"
    );
    assert!(
        lines[2].starts_with("all.yaml, document 3 (Pod \"p\"): spec.containers[0].image: Required value"),
        "{e}"
    );
    let Err(Error::Invalid(problems)) = strict(&text, "all.yaml") else {
        panic!("not Invalid");
    };
    assert_eq!(
        (
            problems[2].document,
            problems[2].field.as_str(),
            problems[2].detail.as_str()
        ),
        (3, "spec.containers[0].image", "Required value")
    );
}

#[test]
fn downward_and_projected_volumes() {
    let good = pod(
        r#"  containers: [{name: c, image: x, volumeMounts: [{name: info, mountPath: /info}, {name: all, mountPath: /all}]}]
  volumes:
  - name: info
    downwardAPI:
      defaultMode: 0444
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}, mode: 0400}
      - {path: app, fieldRef: {apiVersion: v1, fieldPath: "metadata.labels['app.kubernetes.io/name']"}}
      - {path: mem, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
      - {path: cpu, resourceFieldRef: {containerName: c, resource: requests.cpu, divisor: 1m}}
  - name: all
    projected:
      defaultMode: 0640
      sources:
      - configMap: {name: cfg, items: [{key: a, path: conf/a}]}
      - secret: {name: s, optional: true}
      - downwardAPI: {items: [{path: uid, fieldRef: {fieldPath: metadata.uid}}]}
      - serviceAccountToken: {path: token, expirationSeconds: 3600}
"#,
    );
    assert_eq!(check(&good), Vec::<String>::new());
    let volume = |v: &str| pod(&format!("{APP}  volumes:\n  - name: v\n{v}"));
    let cases = [
        (
            "    downwardAPI: {items: [{path: x, fieldRef: {fieldPath: status.podIP}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: Unsupported value: \"status.podIP\": supported values: \"metadata.annotations\", \"metadata.labels\", \"metadata.name\", \"metadata.namespace\", \"metadata.uid\"",
        ),
        (
            "    downwardAPI: {items: [{path: x, fieldRef: {fieldPath: \"metadata.labels['-bad']\"}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: Invalid value: \"metadata.labels['-bad']\": a label key",
        ),
        (
            "    downwardAPI: {items: [{path: x, resourceFieldRef: {resource: limits.cpu}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.containerName: Required value",
        ),
        (
            "    downwardAPI: {items: [{path: x, resourceFieldRef: {containerName: app, resource: limits.gpu}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.resource: Unsupported value: \"limits.gpu\"",
        ),
        (
            "    downwardAPI: {items: [{path: x, resourceFieldRef: {containerName: app, resource: limits.cpu, divisor: 1Mi}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.divisor: Invalid value: \"1Mi\": only divisor's values 1m and 1 are supported with the cpu resource",
        ),
        (
            "    downwardAPI: {items: [{path: x, resourceFieldRef: {containerName: app, resource: requests.memory, divisor: 3k}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].resourceFieldRef.divisor: Invalid value: \"3k\": only divisor's values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei are supported with the memory resource",
        ),
        (
            "    downwardAPI: {items: [{path: x}]}\n",
            "spec.volumes[0].downwardAPI.items[0].fieldRef: Required value",
        ),
        (
            "    downwardAPI: {items: [{path: ../x, fieldRef: {fieldPath: metadata.name}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].path: Invalid value: \"../x\": must not contain '..'",
        ),
        (
            "    downwardAPI: {items: [{path: ..data, fieldRef: {fieldPath: metadata.name}}]}\n",
            "spec.volumes[0].downwardAPI.items[0].path: Invalid value: \"..data\": must not start with '..'",
        ),
        (
            "    downwardAPI: {defaultMode: 01000}\n",
            "spec.volumes[0].downwardAPI.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive",
        ),
        (
            "    configMap: {name: c, items: [{key: k, path: /abs}]}\n",
            "spec.volumes[0].configMap.items[0].path: Invalid value: \"/abs\": must be a relative path",
        ),
        (
            "    projected: {sources: [{}]}\n",
            "spec.volumes[0].projected.sources[0]: Required value: must specify a source type",
        ),
        (
            "    projected: {sources: [{configMap: {name: a}, secret: {name: b}}]}\n",
            "spec.volumes[0].projected.sources[0]: Forbidden: may not specify more than 1 volume type per source",
        ),
        (
            "    projected: {sources: [{secret: {items: [{key: k, path: p}]}}]}\n",
            "spec.volumes[0].projected.sources[0].secret.name: Required value",
        ),
        (
            "    projected: {sources: [{configMap: {name: a, items: [{key: k, path: p}]}}, {downwardAPI: {items: [{path: p, fieldRef: {fieldPath: metadata.name}}]}}]}\n",
            "spec.volumes[0].projected.sources[1]: Invalid value: \"p\": conflicting duplicate paths",
        ),
        (
            "    projected: {sources: [{serviceAccountToken: {path: t, expirationSeconds: 60}}]}\n",
            "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
        ),
        (
            "    projected: {sources: [{downwardAPI: {items: [{path: x, fieldRef: {fieldPath: metadata.name, feildPath: y}}]}}]}\n",
            "spec.volumes[0].projected.sources[0].downwardAPI.items[0].fieldRef.feildPath: unknown field \"feildPath\"",
        ),
    ];
    for (v, want) in cases {
        let e = one(&volume(v));
        let want = format!("t.yaml, document 1 (Pod \"p\"): {want}");
        assert!(e.starts_with(&want), "{e}\nwanted: {want}");
    }
    // An env var names its own fields.
    let env = pod(
        "  containers: [{name: a, image: x, env: [{name: L, valueFrom: {fieldRef: {fieldPath: metadata.labels}}}]}]\n",
    );
    assert!(
        one(&env).ends_with("spec.containers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"metadata.labels\": supported values: \"metadata.name\", \"metadata.namespace\", \"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", \"status.hostIPs\", \"status.podIP\", \"status.podIPs\""),
        "{}",
        one(&env)
    );
}
