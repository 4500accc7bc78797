//! The container unit tests against the fake shim and image store (no root, no processes): the shared
//! fixtures here, the tests by topic in `tests/`.

use std::sync::Arc;

use crius_api::cri;

use super::{Containers, Setup};
use crate::error::Error;
use crate::image_store::fake::FakeImages;
use crate::shim::fake::FakeShim;
use crate::store::container::State;
use crate::store::sandbox::{Record, Sandbox};

pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) shim: Arc<FakeShim>,
    pub(crate) images: Arc<FakeImages>,
    pub(crate) containers: Containers,
    pub(crate) sandbox: Sandbox,
}

impl World {
    pub(crate) fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let shim = Arc::new(FakeShim::default());
        let images = Arc::new(FakeImages::default());
        images.add("busybox", serde_json::json!({"config": {"Cmd": ["sh"]}}));
        images.add(
            "stoppable",
            serde_json::json!({"config": {"Cmd": ["sh"], "StopSignal": "SIGQUIT"}}),
        );
        let containers = open(&dir, shim.clone(), images.clone());
        let sandbox = ready_pod(&dir);
        World {
            dir,
            shim,
            images,
            containers,
            sandbox,
        }
    }

    pub(crate) fn create(&self, name: &str) -> Result<String, Error> {
        self.create_with(config(name, 0, "busybox"))
    }

    pub(crate) fn create_with(&self, c: cri::ContainerConfig) -> Result<String, Error> {
        self.containers.create(&self.sandbox, self.dir.path(), c)
    }

    pub(crate) fn state(&self, id: &str) -> State {
        self.containers.get(id).unwrap().record.state()
    }
}

/// A READY sandbox `sb1` whose files (empty) are in `dir`, and its logs under `dir/logs`.
pub(crate) fn ready_pod(dir: &tempfile::TempDir) -> Sandbox {
    for f in ["hostname", "hosts", "resolv.conf"] {
        std::fs::write(dir.path().join(f), "").unwrap();
    }
    Sandbox {
        record: Record {
            id: "sb1".into(),
            ready: true,
            ..Default::default()
        },
        config: cri::PodSandboxConfig {
            log_directory: dir.path().join("logs").display().to_string(),
            ..Default::default()
        },
    }
}

pub(crate) fn open(
    dir: &tempfile::TempDir,
    shim: Arc<FakeShim>,
    images: Arc<dyn crate::image_store::ImageStore>,
) -> Containers {
    Containers::open(
        Setup {
            records: dir.path().join("records"),
            bundles: dir.path().join("bundles"),
            intents: Arc::new(crate::store::intents::Intents::open(&dir.path().join("intents")).unwrap()),
        },
        shim,
        images,
    )
    .unwrap()
}

pub(crate) fn config(name: &str, attempt: u32, image: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        log_path: format!("{name}/{attempt}.log"),
        labels: [("app".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

/// ExecSync run to its end on a runtime of its own (the call is a future).
pub(crate) fn exec_sync(
    c: &Containers,
    id: &str,
    cmd: &[String],
    timeout: i64,
) -> Result<cri::ExecSyncResponse, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(c.exec_sync(id, cmd, timeout))
}

mod exec_sync;
mod lifecycle;
mod state;
mod validation;
