//! Runtime handlers (RuntimeClass) for the runtime_handlers suite and its VM twin: a criusd configured with
//! `[runtimes.runc]` and `[runtimes.crun]` (Debian's binaries, roots under the test's dir), pods on a chosen
//! handler, and the check that a container is the chosen runtime's: its `state` command knows it as running
//! under the handler's root, and no other handler's root has it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cri::{
    Client, client, config, container, create, cremove, cstop, entries, host_network, import_busybox,
    restart, start, status, wait_state,
};
use crius_api::cri;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;

/// runc, as Debian installs it.
pub const RUNC: &str = "/usr/sbin/runc";
/// crun, as Debian installs it.
pub const CRUN: &str = "/usr/bin/crun";

/// A criusd whose config names runc and crun, each with a root under the test's dir.
pub struct Handlers {
    /// The daemon.
    pub d: Daemon,
    /// A client of it.
    pub c: Client,
}

impl Handlers {
    /// The daemon, started on the config, with busybox imported.
    pub async fn start() -> Handlers {
        require_root();
        for b in [RUNC, CRUN] {
            assert!(
                Path::new(b).is_file(),
                "{b} is missing: hack/install-deps.sh installs it"
            );
        }
        let mut d = Daemon::start(&[]);
        let (runc_root, crun_root) = (d.dir().join("runc-root"), d.dir().join("crun-root"));
        std::fs::write(
            d.config_path(),
            format!(
                "[runtimes.runc]\npath = \"{RUNC}\"\nroot = \"{}\"\n\n[runtimes.crun]\npath = \"{CRUN}\"\nroot = \"{}\"\n",
                runc_root.display(),
                crun_root.display()
            ),
        )
        .unwrap();
        // Started again to read the config written into its directory.
        d.restart(&[]);
        import_busybox(&d);
        let c = client(&d).await;
        Handlers { d, c }
    }

    /// The state root of `handler`'s runtime.
    pub fn root(&self, handler: &str) -> PathBuf {
        match handler {
            "runc" => self.d.dir().join("runc-root"),
            "crun" => self.d.dir().join("crun-root"),
            // crius-runc's, the shim's default.
            _ => PathBuf::from("/run/crius/shim/crius-runc/k8s.io"),
        }
    }

    /// Pod `name` on `handler`, in the host's network, logging under the test's dir.
    pub async fn pod(&mut self, name: &str, handler: &str) -> Result<String, tonic::Status> {
        let mut conf = host_network(config(name, &format!("uid-{name}")));
        conf.log_directory = self.d.dir().join("logs").join(name).display().to_string();
        self.c
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(conf),
                runtime_handler: handler.into(),
            })
            .await
            .map(|r| r.into_inner().pod_sandbox_id)
    }

    /// Starts container `name` in `pod`; checks that `handler`'s runtime runs it; returns its id.
    pub async fn running(&mut self, pod: &str, handler: &str, name: &str) -> String {
        let id = create(
            &mut self.c,
            pod,
            container(name, "busybox", "echo ready; exec sleep 1000"),
        )
        .await
        .unwrap();
        start(&mut self.c, &id).await;
        wait_state(&mut self.c, &id, cri::ContainerState::ContainerRunning).await;
        let r = self
            .c
            .exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: vec!["echo".into(), format!("exec on {handler}")],
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (r.exit_code, String::from_utf8_lossy(&r.stdout).trim()),
            (0, format!("exec on {handler}").as_str())
        );
        self.check_runs_on(&id, handler);
        id
    }

    /// Container `id` is `handler`'s: its runtime's state says running, and the other roots lack it.
    pub fn check_runs_on(&self, id: &str, handler: &str) {
        let (binary, root) = match handler {
            "runc" => (RUNC.to_string(), self.root("runc")),
            "crun" => (CRUN.to_string(), self.root("crun")),
            _ => (
                crius_test_support::daemon::built_binary("crius-runc")
                    .display()
                    .to_string(),
                self.root(""),
            ),
        };
        let out = Command::new(&binary)
            .arg("--root")
            .arg(&root)
            .args(["state", id])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{binary} state {id} under {}: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(st["status"], "running", "{binary}: {st}");
        assert!(entries(&root).contains(&id.to_string()), "{}", root.display());
        for other in ["runc", "crun", ""] {
            if other != handler && !(other.is_empty() && handler == "crius-runc") {
                assert!(
                    !entries(&self.root(other)).contains(&id.to_string()),
                    "{id} of {handler} is also under {other:?}'s root"
                );
            }
        }
    }

    /// PodSandboxStatus's handler of `pod`.
    pub async fn handler_of(&mut self, pod: &str) -> String {
        status(&mut self.c, pod).await.unwrap().runtime_handler
    }

    /// ListPodSandbox: (name, handler) of each pod, sorted.
    pub async fn listed_handlers(&mut self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self
            .c
            .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .items
            .into_iter()
            .map(|s| (s.metadata.unwrap().name, s.runtime_handler))
            .collect();
        v.sort();
        v
    }

    /// Stops and removes `containers`, then `pod`.
    pub async fn remove_pod(&mut self, pod: &str, containers: &[&str]) {
        for id in containers {
            cstop(&mut self.c, id, 0).await;
            cremove(&mut self.c, id).await;
        }
        self.c
            .stop_pod_sandbox(cri::StopPodSandboxRequest {
                pod_sandbox_id: pod.into(),
            })
            .await
            .unwrap();
        self.c
            .remove_pod_sandbox(cri::RemovePodSandboxRequest {
                pod_sandbox_id: pod.into(),
            })
            .await
            .unwrap();
    }
}

/// Pods on each of `handlers` (pod name, handler), a container running in each on the handler's runtime; then
/// criusd restarted: each pod keeps its handler, its container still runs there and a second one runs there
/// too; then all removed, leaving nothing under the runtimes' roots.
pub async fn pods_on(handlers: &[(&str, &str)]) {
    let mut h = Handlers::start().await;
    let mut pods = Vec::new();
    for &(name, handler) in handlers {
        let pod = h.pod(name, handler).await.unwrap();
        let runs_on = if handler.is_empty() { "crius-runc" } else { handler };
        let c = h.running(&pod, runs_on, "first").await;
        assert_eq!(h.handler_of(&pod).await, handler);
        pods.push((pod, handler, runs_on, vec![c]));
    }
    let mut want: Vec<(String, String)> = handlers
        .iter()
        .map(|(n, h)| (n.to_string(), h.to_string()))
        .collect();
    want.sort();
    assert_eq!(h.listed_handlers().await, want);

    // The choice is the sandbox's record: after a restart each pod keeps it, and a new container runs there.
    restart(&mut h.d, &mut h.c, &[]).await;
    for (pod, handler, runs_on, cs) in &mut pods {
        assert_eq!(h.handler_of(pod).await, *handler);
        h.check_runs_on(&cs[0], runs_on);
        let second = h.running(pod, runs_on, "second").await;
        cs.push(second);
    }
    for (pod, _, runs_on, cs) in &pods {
        let ids: Vec<&str> = cs.iter().map(String::as_str).collect();
        h.remove_pod(pod, &ids).await;
        for id in &ids {
            assert!(
                !entries(&h.root(runs_on)).contains(&id.to_string()),
                "{id} left under {runs_on}'s root"
            );
        }
    }
}
