//! What containers report, and how their records learn what happened: ContainerStatus and ListContainers read
//! the records only; the shim's events ([`crate::events`]) record exits and OOM kills; a pod's shim dying
//! leaves its containers UNKNOWN; [`crate::recover`] reads what happened while criusd was down.

use std::collections::HashMap;

use crius_api::cri;

use super::Containers;
use crate::error::Result;
use crate::store::container::{Container, State};

/// The CRI state of a record's state.
pub fn cri_state(s: State) -> cri::ContainerState {
    match s {
        State::Created => cri::ContainerState::ContainerCreated,
        State::Running => cri::ContainerState::ContainerRunning,
        State::Exited => cri::ContainerState::ContainerExited,
        State::Unknown => cri::ContainerState::ContainerUnknown,
    }
}

/// Whether `c` is selected by a filter's id prefix, sandbox id prefix and labels (each empty: any), as
/// ListContainers and ListContainerStats filter.
pub(super) fn selected(c: &Container, id: &str, sandbox_id: &str, labels: &HashMap<String, String>) -> bool {
    c.record.id.starts_with(id)
        && c.record.sandbox_id.starts_with(sandbox_id)
        && labels.iter().all(|(k, v)| c.config.labels.get(k) == Some(v))
}

/// The runtime type criusd's containers run under (its shim's name, as containerd names runtimes).
pub const RUNTIME_TYPE: &str = "io.containerd.crius.v2";

/// ContainerStatus's verbose `info["info"]`: the keys crictl users read of containerd's (`crictl inspect C |
/// jq .info.pid`): `sandboxID`, `pid`, `snapshotKey`, `snapshotter`, `runtimeType`, `config` (the CRI
/// config as sent) and `runtimeSpec` (the bundle's config.json, `spec`, when it can be read).
pub fn verbose_info(c: &Container, spec: Option<&[u8]>) -> HashMap<String, String> {
    let spec: serde_json::Value = spec
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    let info = serde_json::json!({
        "sandboxID": c.record.sandbox_id,
        "pid": c.record.pid,
        "removing": false,
        "snapshotKey": c.record.id,
        "snapshotter": "overlayfs",
        "runtimeType": RUNTIME_TYPE,
        "config": c.config,
        "runtimeSpec": spec,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

/// ContainerStatus of `c`.
pub fn status(c: &Container) -> cri::ContainerStatus {
    let state = c.record.state();
    let reason = match state {
        State::Exited if c.record.oom_killed => "OOMKilled",
        State::Exited if c.record.exit_code == 0 => "Completed",
        State::Exited => "Error",
        _ => "",
    };
    cri::ContainerStatus {
        id: c.record.id.clone(),
        metadata: c.config.metadata.clone(),
        state: cri_state(state) as i32,
        created_at: c.record.created_at,
        started_at: c.record.started_at,
        finished_at: c.record.finished_at,
        exit_code: if state == State::Exited {
            c.record.exit_code
        } else {
            0
        },
        image: c.config.image.clone(),
        image_ref: c.record.image_id.clone(),
        reason: reason.into(),
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        mounts: c.config.mounts.clone(),
        log_path: c.record.log_path.clone(),
        image_id: c.record.image_id.clone(),
        resources: Some(cri::ContainerResources {
            linux: Some(c.resources()),
            windows: None,
        }),
        // As created (RUNTIME_DEFAULT: the image's STOPSIGNAL, else SIGTERM, is sent).
        stop_signal: c.config.stop_signal,
        // As created too: the spec's process user, the groups Merge or Strict gave (as containerd reports it).
        user: c.record.user.as_ref().map(|u| cri::ContainerUser {
            linux: Some(cri::LinuxContainerUser {
                uid: u.uid.into(),
                gid: u.gid.into(),
                supplemental_groups: u.groups.iter().map(|&g| g.into()).collect(),
            }),
        }),
        ..Default::default()
    }
}

/// ListContainers: the containers `filter` selects (id prefix, sandbox, state, labels).
pub fn list(all: &Containers, filter: Option<&cri::ContainerFilter>) -> Vec<cri::Container> {
    let wanted = |c: &Container| {
        filter.is_none_or(|f| {
            selected(c, &f.id, &f.pod_sandbox_id, &f.label_selector)
                && f.state
                    .as_ref()
                    .is_none_or(|s| s.state == cri_state(c.record.state()) as i32)
        })
    };
    // Filtered and read in place: a kubelet or engine listing one pod's containers clones the fields it
    // answers with of those, not the node's records with their whole configs.
    all.map_where(wanted, |c| cri::Container {
        id: c.record.id.clone(),
        pod_sandbox_id: c.record.sandbox_id.clone(),
        metadata: c.config.metadata.clone(),
        image: c.config.image.clone(),
        image_ref: c.record.image_id.clone(),
        state: cri_state(c.record.state()) as i32,
        created_at: c.record.created_at,
        labels: c.config.labels.clone(),
        annotations: c.config.annotations.clone(),
        image_id: c.record.image_id.clone(),
    })
}

impl Containers {
    /// The shim reported an OOM kill in container `id`.
    pub fn mark_oom(&self, id: &str) {
        if let Err(e) = self.records.modify(id, |c| c.record.oom_killed = true) {
            tracing::warn!("{e}");
        }
    }

    /// The shim reported container `id`'s exit.
    pub fn mark_exit(&self, id: &str, code: i32, at: i64) {
        if let Err(e) = self.note_exit(id, code, at) {
            tracing::warn!("{e}");
        }
    }

    /// Records container `id`'s exit; the first time, tells listeners it stopped. A later report of the same
    /// exit (the shim's event after Stop's wait, or the other way round) changes nothing.
    pub(super) fn note_exit(&self, id: &str, code: i32, at: i64) -> Result<()> {
        let at = if at == 0 { crate::store::now_ns() } else { at };
        let before = self.records.modify(id, |c| {
            if c.record.finished_at == 0 {
                c.record.exit_code = code;
                c.record.finished_at = at;
                c.record.unknown = false;
            }
        })?;
        if let Some(c) = before.filter(|c| c.record.finished_at == 0) {
            self.emit(&c, cri::ContainerEventType::ContainerStoppedEvent);
        }
        Ok(())
    }

    /// Sandbox `sandbox`'s shim is gone: its containers without a known exit are UNKNOWN from now on.
    pub fn shim_gone(&self, sandbox: &str) {
        for c in self.of_sandbox(sandbox) {
            if matches!(c.record.state(), State::Running | State::Created) {
                tracing::warn!(container = %c.record.id, "the pod's shim is gone: container state unknown");
                if let Err(e) = self.records.modify(&c.record.id, |c| c.record.unknown = true) {
                    tracing::warn!("{e}");
                }
            }
        }
    }
}
