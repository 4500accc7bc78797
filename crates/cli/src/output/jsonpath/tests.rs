use super::JsonPath;
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "myapp",
            "labels": {"app.kubernetes.io/name": "web", "tier": "front"},
        },
        "spec": {"containers": [
            {"name": "app", "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "128Mi"},
                                                            "requests": {"cpu": "250m"}}},
            {"name": "log", "image": "busybox"},
        ]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
                {"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": "a<b"},
            ],
            "containerStatuses": [
                {"name": "app", "restartCount": 3, "ready": true},
                {"name": "log", "restartCount": 0, "ready": false},
            ],
        },
    })
}

fn run(t: &str, v: &Value) -> String {
    JsonPath::parse(t).unwrap().execute(v).unwrap()
}

fn strict(t: &str, v: &Value) -> Result<String, String> {
    JsonPath::parse(t).unwrap().allow_missing_keys(false).execute(v)
}

#[test]
fn the_seed_commands() {
    let p = pod();
    assert_eq!(
        run("{.spec.containers[0].resources}", &p),
        r#"{"limits":{"cpu":"500m","memory":"128Mi"},"requests":{"cpu":"250m"}}"#
    );
    let conditions = run("{.status.conditions}", &p);
    let parsed: Value = serde_json::from_str(&conditions).expect("valid JSON for jq");
    assert_eq!(parsed, p["status"]["conditions"]);
    assert!(conditions.contains(r#""message":"a\u003cb""#), "{conditions}");
    assert_eq!(
        run(
            r#"{range .status.containerStatuses[*]}{.name}{"\t"}{.restartCount}{"\n"}{end}"#,
            &p
        ),
        "app\t3\nlog\t0\n"
    );
}

#[test]
fn text_fields_and_scalars() {
    let p = pod();
    assert_eq!(run("name: {.metadata.name}!", &p), "name: myapp!");
    assert_eq!(run("{$.metadata.name}", &p), "myapp");
    assert_eq!(run("{@.status.phase}", &p), "Running");
    assert_eq!(run("{.status.containerStatuses[0].ready}", &p), "true");
    assert_eq!(run("{.status.containerStatuses[0].restartCount}", &p), "3");
    assert_eq!(run("{@}", &json!({"b": 1, "a": [2]})), r#"{"a":[2],"b":1}"#);
    assert_eq!(run("plain text", &p), "plain text");
    assert_eq!(run("{ .metadata.name }", &p), "myapp");
}

#[test]
fn lists_join_with_spaces() {
    let p = pod();
    assert_eq!(run("{.spec.containers[*].name}", &p), "app log");
    assert_eq!(
        run("{.spec.containers[*].resources}", &p),
        r#"{"limits":{"cpu":"500m","memory":"128Mi"},"requests":{"cpu":"250m"}}"#
    );
    assert_eq!(
        run("{.status.containerStatuses[*]['name','restartCount']}", &p),
        "app log 3 0"
    );
}

#[test]
fn indexes_and_slices() {
    let v = json!({"a": [0, 1, 2, 3, 4]});
    assert_eq!(run("{.a[1:3]}", &v), "1 2");
    assert_eq!(run("{.a[-1]}", &v), "4");
    assert_eq!(run("{.a[-2:]}", &v), "3 4");
    assert_eq!(run("{.a[:2]}", &v), "0 1");
    assert_eq!(run("{.a[::2]}", &v), "0 2 4");
    assert_eq!(run("{.a[2:2]}", &v), "");
    assert_eq!(run("{.a[0,4]}", &v), "0 4");
    let err = JsonPath::parse("{.a[5]}").unwrap().execute(&v).unwrap_err();
    assert!(
        err.contains("array index out of bounds: index 5, length 5"),
        "{err}"
    );
    let err = JsonPath::parse("{.a.b[0]}")
        .unwrap()
        .execute(&json!({"a": {"b": "x"}}))
        .unwrap_err();
    assert!(err.contains("string is not array or slice"), "{err}");
}

#[test]
fn recursive_descent_and_wildcards() {
    let p = pod();
    assert_eq!(run("{..image}", &p), "nginx busybox");
    assert_eq!(run("{.metadata.labels.*}", &p), "web front");
    assert_eq!(run("{.spec.containers[0].resources.limits.*}", &p), "500m 128Mi");
}

#[test]
fn filters() {
    let p = pod();
    assert_eq!(
        run(r#"{.status.conditions[?(@.type=="Ready")].status}"#, &p),
        "False"
    );
    assert_eq!(
        run(r#"{.status.conditions[?(@.type == 'Ready')].reason}"#, &p),
        "ContainersNotReady"
    );
    assert_eq!(
        run(r#"{.status.conditions[?(@.status!="True")].type}"#, &p),
        "Ready"
    );
    assert_eq!(
        run("{.status.conditions[?(@.reason)].type}", &p),
        "Ready PodResizePending"
    );
    assert_eq!(
        run("{.status.containerStatuses[?(@.restartCount>0)].name}", &p),
        "app"
    );
    assert_eq!(
        run("{.status.containerStatuses[?(@.restartCount<=0)].name}", &p),
        "log"
    );
    assert_eq!(
        run("{.status.containerStatuses[?(@.restartCount>=3)].name}", &p),
        "app"
    );
    assert_eq!(
        run("{.status.containerStatuses[?(@.restartCount<3)].name}", &p),
        "log"
    );
    assert_eq!(
        run("{.status.containerStatuses[?(@.ready==true)].name}", &p),
        "app"
    );
    assert_eq!(run(r#"{.status.conditions[?(@.type>"Q")].type}"#, &p), "Ready");
    let err = JsonPath::parse(r#"{.status.containerStatuses[?(@.restartCount=="3")].name}"#)
        .unwrap()
        .execute(&p)
        .unwrap_err();
    assert!(err.contains("incompatible types for comparison"), "{err}");
}

#[test]
fn escaped_dots_and_quoted_keys() {
    let p = pod();
    assert_eq!(run(r"{.metadata.labels.app\.kubernetes\.io/name}", &p), "web");
    assert_eq!(run("{.metadata.labels['app.kubernetes.io/name']}", &p), "web");
    assert_eq!(run("{['metadata.name']}", &p), "myapp");
    assert_eq!(
        run("{.spec.containers[*]['name', 'image']}", &p),
        "app log nginx busybox"
    );
}

#[test]
fn nested_ranges_and_literals() {
    let p = pod();
    let t = r#"{range .spec.containers[*]}{.name}:{range .resources.limits.*}[{@}]{end}{'\n'}{end}"#;
    assert_eq!(run(t, &p), "app:[500m][128Mi]\nlog:\n");
    assert_eq!(run(r#"{"a\"b\u0041"}"#, &p), "a\"bA");
    assert_eq!(run("{range .missing[*]}x{end}done", &p), "done");
}

#[test]
fn missing_keys_print_nothing_by_default_and_fail_when_refused() {
    let p = pod();
    assert_eq!(run("[{.spec.nodeName}]", &p), "[]");
    assert_eq!(run("{.status.containerStatuses[*].state.running}", &p), "");
    let err = strict("{.spec.nodeName}", &p).unwrap_err();
    assert_eq!(
        err,
        r#"error executing jsonpath "{.spec.nodeName}": Error executing template: nodeName is not found"#
    );
    assert_eq!(strict("{.metadata.name}", &p).unwrap(), "myapp");
    let err = strict("{.metadata.labels['x.y']}", &p).unwrap_err();
    assert!(err.ends_with("x.y is not found"), "{err}");
}

#[test]
fn json_output_wraps_each_block_in_a_list() {
    let p = pod();
    let out = JsonPath::parse("{.spec.containers[*].name}")
        .unwrap()
        .json_output(true)
        .execute(&p)
        .unwrap();
    assert_eq!(out, "[\n    \"app\",\n    \"log\"\n]\n");
}

#[test]
fn parse_errors_name_the_position() {
    let cases = [
        ("{.a", "unclosed action (at position 3)"),
        ("x{.a[0}", "unterminated array (at position 4)"),
        ("{.a[x]}", "invalid array index x (at position 4)"),
        ("{.a[?(@.b==1)}", "unclosed array expect ] (at position 13)"),
        (
            "{.a[?(@.b=~1)]}",
            "unrecognized filter operator =~ (at position 9)",
        ),
        ("{'abc}", "unterminated quoted string (at position 1)"),
        ("{end}", "not in range, nothing to end (at position 0)"),
        ("ab{range .a}x", "range without end (at position 2)"),
        (
            "{.a #}",
            "unrecognized character in action: U+0023 '#' (at position 4)",
        ),
        ("{foo}", "unrecognized identifier foo (at position 1)"),
        ("{....a}", "invalid multiple recursive descent (at position 3)"),
    ];
    for (t, want) in cases {
        let err = JsonPath::parse(t).unwrap_err();
        assert_eq!(err, format!("error parsing jsonpath {t}, {want}"), "{t}");
    }
}
