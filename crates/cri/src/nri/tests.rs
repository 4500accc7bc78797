//! The NRI seam against a recording [`Events`]: which event each CRI call tells, in what order, what a
//! plugin's adjustment and refusal do to CreateContainer, and that a refused update is not applied.

use std::sync::{Arc, Mutex};

use crius_api::cri;
use oci_spec::runtime::Spec;

use super::{ContainerEvent, Events, PodEvent};
use crate::container::adjust::Context;
use crate::container::tests::{config, open, ready_pod};
use crate::error::{Error, Result};
use crate::image_store::fake::FakeImages;
use crate::shim::fake::FakeShim;
use crate::store::container::Container;
use crate::store::sandbox::Sandbox;

/// Writes down every event; adds env `NRI=1` at create, refuses the container named `refused` and
/// updates asking for cpu shares 3.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    fn note(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }

    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Events for Recorder {
    fn pod(&self, event: PodEvent, pod: &Sandbox) {
        self.note(format!("{event:?} {}", pod.record.id));
    }

    fn update_pod(
        &self,
        pod: &Sandbox,
        _: Option<&cri::LinuxContainerResources>,
        _: Option<&cri::LinuxContainerResources>,
    ) {
        self.note(format!("UpdatePod {}", pod.record.id));
    }

    fn create(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()> {
        let name = cx.config.metadata.as_ref().unwrap().name.clone();
        self.note(format!("Create {name}"));
        if name == "refused" {
            return Err(Error::NriRefused {
                call: "CreateContainer",
                plugin: "10-test".into(),
                message: "not this one".into(),
            });
        }
        let mut p = spec.process().clone().unwrap_or_default();
        let mut env = p.env().clone().unwrap_or_default();
        env.push("NRI=1".into());
        p.set_env(Some(env));
        spec.set_process(Some(p));
        Ok(())
    }

    fn undo_create(&self, _: &Sandbox, _: &str, config: &cri::ContainerConfig) {
        self.note(format!("UndoCreate {}", config.metadata.as_ref().unwrap().name));
    }

    fn update(
        &self,
        c: &Container,
        new: &cri::LinuxContainerResources,
    ) -> Result<cri::LinuxContainerResources> {
        self.note(format!("Update {}", c.config.metadata.as_ref().unwrap().name));
        if new.cpu_shares == 3 {
            return Err(Error::NriRefused {
                call: "UpdateContainerResources",
                plugin: "10-test".into(),
                message: "no 3".into(),
            });
        }
        Ok(cri::LinuxContainerResources {
            cpu_shares: 512,
            ..new.clone()
        })
    }

    fn container(&self, event: ContainerEvent, c: &Container) {
        self.note(format!("{event:?} {}", c.config.metadata.as_ref().unwrap().name));
    }
}

#[test]
fn each_call_tells_its_events_in_order_and_a_refusal_fails_the_create() {
    let dir = tempfile::tempdir().unwrap();
    let shim = Arc::new(FakeShim::default());
    let images = Arc::new(FakeImages::default());
    images.add("busybox", serde_json::json!({"config": {"Cmd": ["sh"]}}));
    let containers = open(&dir, shim.clone(), images);
    let pod = ready_pod(&dir);
    let rec = Arc::new(Recorder::default());
    containers.set_nri(rec.clone());
    let id = containers
        .create(&pod, dir.path(), config("web", 0, "busybox"))
        .unwrap();
    let spec: Spec = serde_json::from_slice(
        &std::fs::read(dir.path().join("bundles").join(&id).join("config.json")).unwrap(),
    )
    .unwrap();
    let env = spec.process().as_ref().unwrap().env().clone().unwrap();
    assert!(env.contains(&"NRI=1".to_string()), "{env:?}");
    containers.start(&id).unwrap();
    let new = cri::LinuxContainerResources {
        cpu_shares: 256,
        ..Default::default()
    };
    containers.update(&id, &new).unwrap();
    let c = containers.get(&id).unwrap();
    assert_eq!(c.resources().cpu_shares, 512, "the plugin's version is applied");
    let refused = cri::LinuxContainerResources {
        cpu_shares: 3,
        ..Default::default()
    };
    let e = containers.update(&id, &refused).unwrap_err();
    assert!(e.to_string().contains("10-test"), "{e}");
    assert_eq!(containers.get(&id).unwrap().resources().cpu_shares, 512);
    containers.stop(&id, 10).unwrap();
    containers.remove(&id).unwrap();
    let e = containers
        .create(&pod, dir.path(), config("refused", 0, "busybox"))
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(
        e.to_string().contains("NRI plugin 10-test") && e.to_string().contains("not this one"),
        "{e}"
    );
    assert!(
        containers.list_all().is_empty(),
        "nothing is left of the refused create"
    );
    // A create that fails after the plugins saw it: they hear it is gone.
    *shim.gone.lock().unwrap() = true;
    containers
        .create(&pod, dir.path(), config("unlucky", 0, "busybox"))
        .unwrap_err();
    assert_eq!(
        rec.seen(),
        [
            "Create web",
            "PostCreate web",
            "Start web",
            "PostStart web",
            "Update web",
            "PostUpdate web",
            "Update web",
            "Stop web",
            "Remove web",
            "Create refused",
            "Create unlucky",
            "UndoCreate unlucky",
        ]
    );
}
