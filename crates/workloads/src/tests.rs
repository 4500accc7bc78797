//! The service's verbs over its typed store, without a runtime: objects that make no pods (a ConfigMap, a
//! Deployment of 0 replicas) applied, re-applied, scaled, read back, deleted, and read again after a restart.

use crate::{Kind, Service, Settings};

const DEPLOY: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 0
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: conf}
data: {a: b}
";

fn start(dir: &std::path::Path) -> Service {
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
    Service::start(
        Settings {
            dir: dir.into(),
            engine: Default::default(),
        },
        channel,
    )
    .unwrap()
}

fn actions(s: &Service) -> Vec<&'static str> {
    apply(s, DEPLOY)
}

fn apply(s: &Service, text: &str) -> Vec<&'static str> {
    s.apply(text, "t", false)
        .unwrap()
        .into_iter()
        .map(|a| a.action)
        .collect()
}

#[tokio::test]
async fn what_was_applied_reads_as_unchanged_until_it_changes_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    assert_eq!(actions(&s), ["created", "created"]);
    assert_eq!(actions(&s), ["unchanged", "unchanged"]);
    let got = s.get(Kind::Deployment, "", "web", false, "app=web").unwrap();
    // As applied: no `selector: {}` from a typed round trip; the typed metadata over it.
    assert!(got[0]["spec"].get("selector").is_none(), "{}", got[0]);
    assert_eq!(got[0]["metadata"]["generation"], 1);
    assert!(got[0]["metadata"]["uid"].is_string());
    assert!(
        s.get(Kind::Deployment, "", "", false, "app=db")
            .unwrap()
            .is_empty()
    );
    // Scaling to what it has changes nothing; a new label is a change, and so is going back.
    s.scale(Kind::Deployment, "", "web", 0).unwrap();
    assert!(s.scale(Kind::Deployment, "", "web", -1).is_err());
    assert_eq!(actions(&s), ["unchanged", "unchanged"]);
    assert_eq!(
        apply(&s, &DEPLOY.replacen("{app: web}", "{app: web, v: b}", 1)),
        ["configured", "unchanged"]
    );
    assert_eq!(actions(&s), ["configured", "unchanged"]);
    let got = s.get(Kind::Deployment, "", "web", false, "").unwrap();
    assert_eq!(got[0]["metadata"]["generation"], 3);
    s.close();
    drop(s);
    // A restart reads the records back as they were written: the same manifest is still unchanged.
    let s = start(dir.path());
    assert_eq!(actions(&s), ["unchanged", "unchanged"]);
    assert_eq!(
        s.get(Kind::ConfigMap, "default", "conf", false, "").unwrap()[0]["data"]["a"],
        "b"
    );
    s.delete(Kind::ConfigMap, "", "conf", None, true).await.unwrap();
    let e = s.get(Kind::ConfigMap, "", "conf", false, "").unwrap_err();
    assert!(matches!(e, crate::Error::NotFound { .. }), "{e}");
}
