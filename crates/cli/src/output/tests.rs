use super::*;
use serde_json::json;

fn now() -> SystemTime {
    timefmt::parse_rfc3339("2026-12-01T23:10:00Z").unwrap()
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-12-01T23:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "nginx",
                                 "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "250m"}}}]},
        "status": {"phase": "Running",
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodResizePending", "status": "True",
                                   "reason": "Deferred", "message": "Node didn't have enough capacity"}]},
    })
}

#[test]
fn formats_parse_like_kubectl() {
    assert_eq!(Format::parse("").unwrap(), Format::Table);
    assert_eq!("wide".parse::<Format>().unwrap(), Format::Wide);
    assert_eq!(Format::parse("json").unwrap(), Format::Json);
    assert_eq!(Format::parse("yaml").unwrap(), Format::Yaml);
    assert_eq!(Format::parse("name").unwrap(), Format::Name);
    assert_eq!(
        Format::parse("jsonpath={.a}").unwrap(),
        Format::JsonPath("{.a}".to_owned())
    );
    assert_eq!(
        Format::parse("jsonpath={.a=b}").unwrap(),
        Format::JsonPath("{.a=b}".to_owned())
    );
    assert_eq!(
        Format::parse("jsonpath-as-json={.a}").unwrap(),
        Format::JsonPathAsJson("{.a}".to_owned())
    );
    let err = Format::parse("xml").unwrap_err();
    assert_eq!(
        err,
        "unable to match a printer suitable for the output format \"xml\", allowed formats are: \
         json,jsonpath,jsonpath-as-json,name,wide,yaml"
    );
    assert_eq!(
        Format::parse("jsonpath=").unwrap_err(),
        "template format specified but no template given"
    );
    assert_eq!(
        Format::parse("jsonpath").unwrap_err(),
        "template format specified but no template given"
    );
    assert!(
        Format::parse("jsonpath={.a[")
            .unwrap_err()
            .starts_with("error parsing jsonpath {.a[, ")
    );
}

#[test]
fn json_of_one_object_or_a_list() {
    let one = render("pods", &[pod("a")], true, &Format::Json, now()).unwrap();
    let back: Value = serde_json::from_str(&one).unwrap();
    assert_eq!(back, pod("a"));
    assert!(
        one.starts_with("{\n    \"apiVersion\": \"v1\",\n    \"kind\": \"Pod\",\n"),
        "{one}"
    );
    assert!(one.ends_with("}\n"));

    let many = render("pods", &[pod("a"), pod("b")], false, &Format::Json, now()).unwrap();
    let back: Value = serde_json::from_str(&many).unwrap();
    assert_eq!(
        back,
        json!({"apiVersion": "v1", "kind": "List", "items": [pod("a"), pod("b")],
                            "metadata": {"resourceVersion": ""}})
    );
    assert!(
        many.starts_with("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n"),
        "{many}"
    );
    // A name asked for but several found (or none): still a List, as kubectl does for `get pod a b`.
    let empty = render("pods", &[], false, &Format::Json, now()).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&empty).unwrap()["items"], json!([]));
}

#[test]
fn yaml_sorts_keys_and_reads_back() {
    let out = render("pods", &[pod("a")], true, &Format::Yaml, now()).unwrap();
    assert!(out.starts_with("apiVersion: v1\nkind: Pod\nmetadata:\n"), "{out}");
    assert!(
        out.contains("  containers:\n  - image: nginx\n    name: app\n"),
        "{out}"
    );
    let back: Value = serde_yaml_ng::from_str(&out).unwrap();
    assert_eq!(back, pod("a"));
    let list = render("pods", &[pod("a")], false, &Format::Yaml, now()).unwrap();
    assert!(
        list.starts_with("apiVersion: v1\nitems:\n- apiVersion: v1\n"),
        "{list}"
    );
    assert!(
        list.ends_with("kind: List\nmetadata:\n  resourceVersion: ''\n"),
        "{list}"
    );
}

#[test]
fn names_carry_the_group() {
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"}});
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
    let out = render("all", &[pod("a"), job, deploy], false, &Format::Name, now()).unwrap();
    assert_eq!(out, "pod/a\njob.batch/pi\ndeployment.apps/web\n");
    let bare = json!({"metadata": {"name": "x"}});
    assert_eq!(name_of("jobs", &bare), "job.batch/x");
    assert_eq!(name_of("deploy", &bare), "deployment.apps/x");
    assert_eq!(name_of("po", &bare), "pod/x");
}

#[test]
fn jsonpath_on_the_object_or_the_list() {
    let f = Format::parse("jsonpath={.spec.containers[0].resources}").unwrap();
    let out = render("pod", &[pod("a")], true, &f, now()).unwrap();
    assert_eq!(out, r#"{"limits":{"cpu":"500m"},"requests":{"cpu":"250m"}}"#);

    let f = Format::parse("jsonpath={.status.conditions}").unwrap();
    let out = render("pod", &[pod("a")], true, &f, now()).unwrap();
    let conditions: Value = serde_json::from_str(&out).expect("jq reads it");
    assert_eq!(conditions[1]["reason"], "Deferred");

    let f = Format::parse(r#"jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}"#).unwrap();
    assert_eq!(
        render("pods", &[pod("a"), pod("b")], false, &f, now()).unwrap(),
        "a\nb\n"
    );

    let f = Format::parse("jsonpath={.spec.nodeName}").unwrap();
    assert_eq!(render("pod", &[pod("a")], true, &f, now()).unwrap(), "");
    let strict = RenderOptions {
        allow_missing_template_keys: false,
        ..RenderOptions::default()
    };
    let err = render_with("pod", &[pod("a")], true, &f, now(), strict).unwrap_err();
    assert!(err.ends_with("nodeName is not found"), "{err}");

    let f = Format::parse("jsonpath-as-json={.metadata.name}").unwrap();
    assert_eq!(
        render("pod", &[pod("a")], true, &f, now()).unwrap(),
        "[\n    \"a\"\n]\n"
    );
}

#[test]
fn tables_and_the_empty_message() {
    let out = render("pods", &[pod("a")], false, &Format::Table, now()).unwrap();
    assert_eq!(
        out,
        "NAME   READY   STATUS    RESTARTS   AGE\na      0/1     Running   0          10m\n"
    );
    let wide = render("pods", &[pod("a")], false, &Format::Wide, now()).unwrap();
    assert!(
        wide.starts_with("NAME   READY   STATUS    RESTARTS   AGE   IP       NODE     NOMINATED NODE"),
        "{wide}"
    );
    let all = RenderOptions {
        all_namespaces: true,
        ..RenderOptions::default()
    };
    let out = render_with("pods", &[pod("a")], false, &Format::Table, now(), all).unwrap();
    assert!(out.starts_with("NAMESPACE   NAME"), "{out}");
    assert_eq!(render("pods", &[], false, &Format::Table, now()).unwrap(), "");
    assert_eq!(
        no_resources(Some("default")),
        "No resources found in default namespace."
    );
    assert_eq!(no_resources(None), "No resources found");
}
