//! crius-nri-test-plugin: the NRI plugin crius's NRI tests run (tests/privileged/tests/nri.rs), written with
//! crius-nri's plugin side. It logs every event it sees, one line each, to `--log FILE`
//! (`EVENT pod[/container]`), and does what `--behave` lists (comma-separated):
//!
//! - `adjust`: every container it sees created gets env `NRI_PLUGIN=<name>` and, with `--mount DIR`, DIR
//!   bound read-only at `/nri`, and with `--cdi NAME` the CDI device NAME;
//! - `weight`: a container named `weighted*` gets cpu shares 2048 at create (cpu.weight 79 on cgroup v2);
//! - `update`: when the container named `trigger` is created, the one named `target` is updated to cpu
//!   shares 512 (cpu.weight 20) with an UpdateContainers call of its own;
//! - `bump`: when the container named `bumper` is created, the answer updates the one named `target` to cpu
//!   shares 4096 (cpu.weight 303);
//! - `refuse`: the container named `refused` is refused ("the test plugin refuses containers named refused");
//! - `hang`: CreateContainer of the container named `slow` never answers;
//! - `crash`: the plugin exits (status 3) in the middle of CreateContainer of the container named `doomed`.
//!
//! It connects to `--socket PATH` as `--idx IDX` `--name NAME`; without `--socket` it is a pre-launched
//! plugin and takes the connection, name and index the runtime handed over. It exits when the runtime closes
//! the connection.
//!
//! Crates: crius-nri (the protocol and plugin side), tokio, async-trait for its Handler trait.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crius_nri::api;
use crius_nri::plugin::{Handler, Stub};

/// What the arguments ask for.
#[derive(Debug, Default)]
struct Args {
    socket: Option<PathBuf>,
    name: String,
    idx: String,
    log: PathBuf,
    behave: Vec<String>,
    mount: Option<PathBuf>,
    cdi: Option<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        name: "test".into(),
        idx: "50".into(),
        ..Default::default()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--socket" => a.socket = Some(value()?.into()),
            "--name" => a.name = value()?,
            "--idx" => a.idx = value()?,
            "--log" => a.log = value()?.into(),
            "--mount" => a.mount = Some(value()?.into()),
            "--cdi" => a.cdi = Some(value()?),
            "--behave" => {
                a.behave = value()?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.socket.is_none() {
        // Pre-launched: the runtime names it.
        a.name = std::env::var("NRI_PLUGIN_NAME").unwrap_or(a.name);
    }
    if a.log.as_os_str().is_empty() {
        return Err("--log FILE is required".into());
    }
    Ok(a)
}

/// The plugin's state: its arguments, its log, the containers it knows by name, its connection.
struct Plugin {
    args: Args,
    log: Mutex<std::fs::File>,
    ids: Mutex<HashMap<String, String>>,
    stub: OnceLock<Stub>,
}

impl Plugin {
    fn does(&self, what: &str) -> bool {
        self.args.behave.iter().any(|b| b == what)
    }

    fn note(&self, line: String) {
        let mut f = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{line}");
        let _ = f.flush();
    }

    fn seen(&self, event: &str, pod: &api::PodSandbox, ctr: Option<&api::Container>) {
        match ctr {
            Some(c) => {
                self.ids
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(c.name.clone(), c.id.clone());
                self.note(format!("{event} {}/{}", pod.name, c.name));
            }
            None => self.note(format!("{event} {}", pod.name)),
        }
    }

    /// Updates the container named `target` to cpu shares 512, from outside any event.
    async fn update_target(self: Arc<Self>) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let id = self
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get("target")
            .cloned();
        let Some(id) = id else {
            return self.note("UpdateContainers: no container named target".into());
        };
        let update = api::ContainerUpdate {
            container_id: id,
            linux: Some(api::LinuxContainerUpdate {
                resources: Some(shares(512)),
            }),
            ignore_failure: false,
        };
        let Some(stub) = self.stub.get() else { return };
        match stub.update_containers(vec![update], Vec::new()).await {
            Ok(failed) if failed.is_empty() => self.note("UpdateContainers target ok".into()),
            Ok(failed) => self.note(format!("UpdateContainers target failed: {}", failed.len())),
            Err(e) => self.note(format!("UpdateContainers target: {e}")),
        }
    }
}

/// Linux resources of `n` cpu shares.
fn shares(n: u64) -> api::LinuxResources {
    api::LinuxResources {
        cpu: Some(api::LinuxCpu {
            shares: Some(api::OptionalUInt64 { value: n }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The handler, over the shared plugin state.
struct Events(Arc<Plugin>);

fn name_of(e: api::Event) -> &'static str {
    use api::Event as E;
    match e {
        E::RunPodSandbox => "RunPodSandbox",
        E::StopPodSandbox => "StopPodSandbox",
        E::RemovePodSandbox => "RemovePodSandbox",
        E::PostCreateContainer => "PostCreateContainer",
        E::StartContainer => "StartContainer",
        E::PostStartContainer => "PostStartContainer",
        E::PostUpdateContainer => "PostUpdateContainer",
        E::RemoveContainer => "RemoveContainer",
        E::CreateContainer => "CreateContainer",
        E::UpdateContainer => "UpdateContainer",
        E::StopContainer => "StopContainer",
        E::UpdatePodSandbox => "UpdatePodSandbox",
        E::PostUpdatePodSandbox => "PostUpdatePodSandbox",
        _ => "Other",
    }
}

#[async_trait::async_trait]
impl Handler for Events {
    async fn configure(&self, req: api::ConfigureRequest) -> Result<api::ConfigureResponse, String> {
        self.0
            .note(format!("Configure {} {}", req.runtime_name, req.runtime_version));
        Ok(api::ConfigureResponse::default())
    }

    async fn synchronize(&self, req: api::SynchronizeRequest) -> Result<api::SynchronizeResponse, String> {
        for c in &req.containers {
            let mut ids = self.0.ids.lock().unwrap_or_else(|p| p.into_inner());
            ids.insert(c.name.clone(), c.id.clone());
        }
        let mut pods: Vec<&str> = req.pods.iter().map(|p| p.name.as_str()).collect();
        pods.sort();
        self.0.note(format!(
            "Synchronize pods={} containers={}",
            pods.join(","),
            req.containers.len()
        ));
        Ok(api::SynchronizeResponse {
            update: Vec::new(),
            more: req.more,
        })
    }

    async fn notify(
        &self,
        event: api::Event,
        pod: api::PodSandbox,
        container: Option<api::Container>,
    ) -> Result<(), String> {
        self.0.seen(name_of(event), &pod, container.as_ref());
        Ok(())
    }

    async fn update_pod_sandbox(&self, req: api::UpdatePodSandboxRequest) -> Result<(), String> {
        self.0
            .seen("UpdatePodSandbox", &req.pod.unwrap_or_default(), None);
        Ok(())
    }

    async fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, String> {
        let (pod, ctr) = (req.pod.unwrap_or_default(), req.container.unwrap_or_default());
        self.0.seen("CreateContainer", &pod, Some(&ctr));
        let p = &self.0;
        if p.does("refuse") && ctr.name == "refused" {
            return Err("the test plugin refuses containers named refused".into());
        }
        if p.does("hang") && ctr.name == "slow" {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if p.does("crash") && ctr.name == "doomed" {
            p.note("crashing".into());
            std::process::exit(3);
        }
        if p.does("update") && ctr.name == "trigger" {
            tokio::spawn(self.0.clone().update_target());
        }
        let mut adjust = api::ContainerAdjustment::default();
        if p.does("adjust") {
            adjust.env.push(api::KeyValue {
                key: "NRI_PLUGIN".into(),
                value: p.args.name.clone(),
            });
            if let Some(name) = &p.args.cdi {
                adjust.cdi_devices.push(api::CdiDevice { name: name.clone() });
            }
            if let Some(dir) = &p.args.mount {
                adjust.mounts.push(api::Mount {
                    destination: "/nri".into(),
                    r#type: "bind".into(),
                    source: dir.display().to_string(),
                    options: vec!["rbind".into(), "ro".into()],
                });
            }
        }
        if p.does("weight") && ctr.name.starts_with("weighted") {
            adjust.linux = Some(api::LinuxContainerAdjustment {
                resources: Some(shares(2048)),
                ..Default::default()
            });
        }
        let mut update = Vec::new();
        let target = p
            .ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get("target")
            .cloned();
        if let (true, Some(id)) = (p.does("bump") && ctr.name == "bumper", target) {
            update.push(api::ContainerUpdate {
                container_id: id,
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(shares(4096)),
                }),
                ignore_failure: false,
            });
        }
        Ok(api::CreateContainerResponse {
            adjust: Some(adjust),
            update,
            ..Default::default()
        })
    }

    async fn update_container(
        &self,
        req: api::UpdateContainerRequest,
    ) -> Result<api::UpdateContainerResponse, String> {
        let (pod, ctr) = (req.pod.unwrap_or_default(), req.container.unwrap_or_default());
        self.0.seen("UpdateContainer", &pod, Some(&ctr));
        Ok(api::UpdateContainerResponse::default())
    }

    async fn stop_container(
        &self,
        req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, String> {
        let (pod, ctr) = (req.pod.unwrap_or_default(), req.container.unwrap_or_default());
        self.0.seen("StopContainer", &pod, Some(&ctr));
        Ok(api::StopContainerResponse::default())
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("crius-nri-test-plugin: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("crius-nri-test-plugin: {}: {e}", args.log.display());
            return std::process::ExitCode::from(2);
        }
    };
    let plugin = Arc::new(Plugin {
        args,
        log: Mutex::new(log),
        ids: Mutex::default(),
        stub: OnceLock::new(),
    });
    let handler = Arc::new(Events(plugin.clone()));
    let stub = match &plugin.args.socket {
        Some(s) => Stub::connect(s, &plugin.args.name, &plugin.args.idx, handler).await,
        None => Stub::from_env(handler).await,
    };
    let stub = match stub {
        Ok(s) => s,
        Err(e) => {
            plugin.note(format!("not registered: {e}"));
            eprintln!("crius-nri-test-plugin: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    plugin.note("Registered".into());
    let stub = plugin.stub.get_or_init(|| stub);
    stub.closed().await;
    plugin.note("Closed".into());
    std::process::ExitCode::SUCCESS
}
