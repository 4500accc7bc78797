//! Property tests of the pod engine's input: manifests and quantities. Random YAML and JSON documents, seed
//! manifests (a Pod, a Job with a sidecar, a Deployment, a StatefulSet, a CronJob, a ConfigMap, a Secret)
//! with fields replaced by random values, types and quantities, or with their text cut and spliced, go
//! through `manifest::parse` and then the resource conversion kubelet's rules make of each container; random
//! strings go through `quantity`. Nothing may panic or run away: each step returns, Ok or an error that names
//! where it is.

use std::time::{Duration, Instant};

use crius_pod::convert::{qos, resources};
use crius_pod::manifest::parse;
use crius_pod::quantity::{milli_cpu, value};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use serde_yaml_ng::{Mapping, Value};

const SEEDS: &[&str] = &[
    r#"
apiVersion: v1
kind: Pod
metadata: {name: myapp, namespace: web, labels: {app: myapp}}
spec:
  containers:
  - name: app
    image: myapp:latest
    command: [sh, -c, "echo $(GREETING)"]
    env: [{name: GREETING, value: hi}, {name: FROM, valueFrom: {configMapKeyRef: {name: cfg, key: a}}}]
    ports: [{containerPort: 80, hostPort: 8080}]
    resources:
      requests: {cpu: "500m", memory: "512Mi"}
      limits: {cpu: "1000m", memory: "1Gi", hugepages-2Mi: "4Mi"}
    securityContext: {allowPrivilegeEscalation: false, runAsUser: 1337, capabilities: {add: [NET_ADMIN]}}
    volumeMounts: [{name: conf, mountPath: /etc/app}]
  volumes:
  - name: conf
    configMap: {name: cfg, defaultMode: 0644, items: [{key: a, path: a.conf, mode: 0400}]}
"#,
    r#"
apiVersion: batch/v1
kind: Job
metadata: {name: data-processing-job}
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers:
      - {name: log-agent, image: "fluent/fluent-bit:3.2", restartPolicy: Always}
      - {name: db-migration, image: "flyway:latest", command: [flyway, migrate]}
      containers:
      - {name: worker, image: "data-worker:latest", resources: {limits: {cpu: "2", memory: 1G}}}
"#,
    r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  template:
    spec:
      containers: [{name: pg, image: postgres, resources: {limits: {cpu: 1.5, memory: 2e9}}}]
"#,
    r#"
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 0 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: c, image: busybox, args: [date]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a: "x=1"}
binaryData: {b: aGk=}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
data: {k: c2VjcmV0}
stringData: {plain: text}
"#,
];

/// Quantities: well-formed, odd and malformed.
fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        "[+]?[0-9]{0,25}(\\.[0-9]{0,25})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]{1,12})?",
        prop::sample::select(vec![
            "",
            ".",
            "+",
            "-1",
            "1e",
            "1e-",
            "1e999999999999",
            "1e-40",
            "0.0000000000000000000000000000000000001",
            "99999999999999999999999999999999999999999",
            "18446744073709551616",
            "1Ei",
            "16Ei",
            " 1 ",
            "1 Gi",
            "1gi",
            "١",
            "NaN",
            "inf",
            "0x10",
        ])
        .prop_map(str::to_string),
        ".{0,10}",
    ]
}

/// Scalars a field may be replaced by: wrong types, huge and negative numbers, quantities, tricky strings.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        prop::sample::select(vec![0u64, 1, 3, 1 << 20, 1 << 40, u64::MAX])
            .prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_map(|f| Value::Number(f.into())),
        quantity().prop_map(Value::String),
        prop::sample::select(vec![
            "",
            "Pod",
            "Job",
            "CronJob",
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "ConfigMap",
            "Secret",
            "Always",
            "Never",
            "OnFailure",
            "0644",
            "0999",
            "../../etc",
            "a\u{0}b",
            "é",
        ])
        .prop_map(|s| Value::String(s.to_string())),
        "[ -~]{0,12}".prop_map(Value::String),
    ]
}

/// Random YAML values, nested a few levels.
fn tree() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Sequence),
            prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(vec![
                            "kind",
                            "metadata",
                            "name",
                            "spec",
                            "template",
                            "containers",
                            "image",
                            "replicas",
                            "resources",
                            "limits",
                            "cpu",
                            "memory",
                            "mode",
                            "defaultMode",
                        ])
                        .prop_map(|s| Value::String(s.into())),
                        scalar(),
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Mapping(kv.into_iter().collect::<Mapping>())),
        ]
    })
}

/// One change to a document: at the node reached by `path` (each step picks a child by index, modulo),
/// replace it, delete it, or add a key to it.
#[derive(Debug, Clone)]
enum Edit {
    Replace(Vec<usize>, Value),
    Remove(Vec<usize>),
    Insert(Vec<usize>, String, Value),
    /// Every value of a key (`replicas`, `cpu`, `restartPolicy`, ...) wherever it is.
    Field(&'static str, Value),
}

const FIELDS: &[&str] = &[
    "replicas",
    "cpu",
    "memory",
    "hugepages-2Mi",
    "restartPolicy",
    "image",
    "name",
    "containers",
    "initContainers",
    "mode",
    "defaultMode",
    "kind",
    "hostPort",
    "containerPort",
    "runAsUser",
    "template",
    "spec",
    "data",
    "binaryData",
    "env",
    "valueFrom",
    "volumes",
    "items",
    "metadata",
    "namespace",
];

fn edit() -> impl Strategy<Value = Edit> {
    let path = || prop::collection::vec(any::<usize>(), 0..8);
    prop_oneof![
        4 => (path(), prop_oneof![3 => scalar(), 1 => tree()]).prop_map(|(p, v)| Edit::Replace(p, v)),
        1 => path().prop_map(Edit::Remove),
        1 => (path(), "[a-zA-Z]{1,10}", tree()).prop_map(|(p, k, v)| Edit::Insert(p, k, v)),
        4 => (prop::sample::select(FIELDS), prop_oneof![3 => scalar(), 1 => tree()])
            .prop_map(|(k, v)| Edit::Field(k, v)),
    ]
}

/// The `i`-th child (modulo their number) of a sequence or mapping.
fn child(v: &mut Value, i: usize) -> Option<&mut Value> {
    match v {
        Value::Sequence(s) if !s.is_empty() => {
            let n = s.len();
            s.get_mut(i % n)
        }
        Value::Mapping(m) if !m.is_empty() => {
            let n = m.len();
            m.values_mut().nth(i % n)
        }
        _ => None,
    }
}

fn set_field(v: &mut Value, key: &str, to: &Value) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m.iter_mut() {
                if k.as_str() == Some(key) {
                    *v = to.clone();
                } else {
                    set_field(v, key, to);
                }
            }
        }
        Value::Sequence(s) => s.iter_mut().for_each(|v| set_field(v, key, to)),
        _ => {}
    }
}

fn apply(doc: &mut Value, e: &Edit) {
    if let Edit::Field(k, v) = e {
        return set_field(doc, k, v);
    }
    let (path, last) = match e {
        Edit::Field(..) => unreachable!(),
        Edit::Replace(p, _) | Edit::Remove(p) | Edit::Insert(p, ..) => match p.split_last() {
            Some((last, path)) => (path, *last),
            None => (&[][..], 0),
        },
    };
    let mut at = doc;
    for &i in path {
        match child(at, i) {
            Some(Value::Sequence(_) | Value::Mapping(_)) => at = child(at, i).unwrap(),
            _ => break,
        }
    }
    match (e, at) {
        (Edit::Replace(_, v), at) => match child(at, last) {
            Some(c) => *c = v.clone(),
            None => *at = v.clone(),
        },
        (Edit::Remove(_), Value::Sequence(s)) if !s.is_empty() => {
            let n = s.len();
            s.remove(last % n);
        }
        (Edit::Remove(_), Value::Mapping(m)) if !m.is_empty() => {
            let n = m.len();
            let k = m.keys().nth(last % n).cloned().unwrap();
            m.remove(&k);
        }
        (Edit::Insert(_, k, v), Value::Mapping(m)) => {
            m.insert(Value::String(k.clone()), v.clone());
        }
        (Edit::Insert(_, _, v), Value::Sequence(s)) => s.push(v.clone()),
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum Input {
    /// A seed's documents, edited, written back as YAML.
    Edited { seed: usize, edits: Vec<Edit> },
    /// A seed's text with a slice cut out and other text spliced in.
    Spliced {
        seed: usize,
        at: usize,
        cut: usize,
        text: String,
    },
    /// A random document, as YAML or as JSON.
    Random { doc: Value, json: bool },
    /// Any text.
    Text(String),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        6 => (0..SEEDS.len(), prop::collection::vec(edit(), 1..4))
            .prop_map(|(seed, edits)| Input::Edited { seed, edits }),
        2 => (0..SEEDS.len(), any::<usize>(), 0usize..40, "[ -~\n\t]{0,12}|.{0,6}")
            .prop_map(|(seed, at, cut, text)| Input::Spliced { seed, at, cut, text }),
        2 => (tree(), any::<bool>()).prop_map(|(doc, json)| Input::Random { doc, json }),
        1 => "(.|\n){0,200}".prop_map(Input::Text),
    ]
}

fn text(input: &Input) -> String {
    match input {
        Input::Edited { seed, edits } => serde_yaml_ng::Deserializer::from_str(SEEDS[*seed])
            .map(|d| {
                let mut v: Value = serde::Deserialize::deserialize(d).unwrap();
                // Each edit goes to every document of the seed.
                for e in edits {
                    apply(&mut v, e);
                }
                serde_yaml_ng::to_string(&v).unwrap()
            })
            .collect::<Vec<_>>()
            .join("---\n"),
        Input::Spliced { seed, at, cut, text } => {
            let s = SEEDS[*seed];
            let mut at = at % (s.len() + 1);
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + cut).min(s.len());
            while !s.is_char_boundary(end) {
                end += 1;
            }
            format!("{}{text}{}", &s[..at], &s[end..])
        }
        Input::Random { doc, json: true } => serde_json::to_string(doc).unwrap_or_default(),
        Input::Random { doc, json: false } => serde_yaml_ng::to_string(doc).unwrap(),
        Input::Text(t) => t.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        max_shrink_iters: 500,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn manifests_parse_or_are_refused(input in input()) {
        let text = text(&input);
        let started = Instant::now();
        match parse(&text, "m.yaml") {
            Ok(m) => {
                for def in &m.pods {
                    let Ok(q) = qos(&def.spec) else { continue };
                    for c in &def.spec.containers {
                        let _ = resources(c, q, 4 << 30);
                    }
                }
            }
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.contains("m.yaml"), "the error does not name the file: {}", e);
            }
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }

    #[test]
    fn quantities_are_numbers_or_refused(q in quantity()) {
        let q = Quantity(q);
        if let (Ok(m), Ok(v)) = (milli_cpu(&q), value(&q)) {
            // The same number, in thousandths and in units, both rounded up.
            prop_assert!(m >= v.saturating_sub(1).saturating_mul(1000), "{:?}: {} m, {}", q, m, v);
            prop_assert!(m <= v.saturating_mul(1000), "{:?}: {} m, {}", q, m, v);
        }
    }
}

/// Anchors expanding to a billion nodes ("billion laughs") are refused by the YAML reader, not expanded.
#[test]
fn an_alias_bomb_is_refused_quickly() {
    let mut yaml = String::from("kind: Pod\na0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        yaml += &format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n");
    }
    let started = Instant::now();
    let e = parse(&yaml, "bomb.yaml").unwrap_err().to_string();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(e.contains("bomb.yaml"), "{e}");
}
