//! What sandboxes report: PodSandboxStatus and ListPodSandbox, from the records alone.

use std::collections::HashMap;

use crius_api::cri;

use crate::store::sandbox::Sandbox;
use crate::validate::namespace_options;

pub(crate) fn state_of(s: &Sandbox) -> i32 {
    if s.record.ready {
        cri::PodSandboxState::SandboxReady as i32
    } else {
        cri::PodSandboxState::SandboxNotready as i32
    }
}

/// PodSandboxStatus of `s`; `verbose` adds `info["info"]`, the record as JSON.
pub fn status_of(s: &Sandbox, verbose: bool) -> cri::PodSandboxStatusResponse {
    let ips = &s.record.ips;
    let status = cri::PodSandboxStatus {
        id: s.record.id.clone(),
        metadata: s.config.metadata.clone(),
        state: state_of(s),
        created_at: s.record.created_at,
        network: Some(cri::PodSandboxNetworkStatus {
            ip: ips.first().cloned().unwrap_or_default(),
            additional_ips: ips
                .iter()
                .skip(1)
                .map(|ip| cri::PodIp { ip: ip.clone() })
                .collect(),
        }),
        linux: Some(cri::LinuxPodSandboxStatus {
            namespaces: Some(cri::Namespace {
                options: Some(namespace_options(&s.config)),
            }),
        }),
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
        runtime_handler: s.record.runtime_handler.clone(),
    };
    let mut info = HashMap::new();
    if verbose {
        info.insert(
            "info".to_string(),
            serde_json::to_string(&s.record).unwrap_or_default(),
        );
    }
    cri::PodSandboxStatusResponse {
        status: Some(status),
        info,
        ..Default::default()
    }
}

/// Whether sandbox `s` has an id starting with `id` (any, when empty) and every label of `labels`: the part of a
/// filter that ListPodSandbox and ListPodSandboxStats share.
pub fn selected(s: &Sandbox, id: &str, labels: &HashMap<String, String>) -> bool {
    s.record.id.starts_with(id) && labels.iter().all(|(k, v)| s.config.labels.get(k) == Some(v))
}

/// The sandboxes `filter` selects, as ListPodSandbox returns them.
pub fn list(all: Vec<Sandbox>, filter: Option<&cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
    all.into_iter()
        .filter(|s| {
            let Some(f) = filter else { return true };
            selected(s, &f.id, &f.label_selector) && f.state.as_ref().is_none_or(|st| st.state == state_of(s))
        })
        .map(|s| cri::PodSandbox {
            id: s.record.id.clone(),
            metadata: s.config.metadata.clone(),
            state: state_of(&s),
            created_at: s.record.created_at,
            labels: s.config.labels.clone(),
            annotations: s.config.annotations.clone(),
            runtime_handler: s.record.runtime_handler.clone(),
        })
        .collect()
}
