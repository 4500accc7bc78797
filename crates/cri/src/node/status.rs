//! The runtime's Status: RuntimeReady, NetworkReady from the CNI config, the runtime handlers with their
//! features, and (verbose) the network's config and each handler's binary and features document.

use std::collections::HashMap;

use crius_api::cri;

use super::Node;
use crate::handlers::Handler;

impl Node {
    /// The CRI Status: conditions, handlers and features, and with `verbose` the details kubelet logs.
    /// Blocking: the network's readiness reads its config directory.
    pub fn status(&self, verbose: bool) -> cri::StatusResponse {
        let n = &self.pods.network;
        let network = n.ready().map(drop).map_err(|e| e.to_string());
        let condition = |kind: &str, r: &Result<(), String>, reason: &str| cri::RuntimeCondition {
            r#type: kind.into(),
            status: r.is_ok(),
            reason: if r.is_ok() { String::new() } else { reason.into() },
            message: r.as_ref().err().cloned().unwrap_or_default(),
        };
        let mut info = HashMap::new();
        let handlers = self.pods.handlers.all();
        if verbose {
            info.insert("config".to_string(), n.describe().to_string());
            info.insert("runtimeHandlers".to_string(), handlers_info(handlers).to_string());
        }
        cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![
                    condition("RuntimeReady", &Ok(()), ""),
                    condition("NetworkReady", &network, "NetworkPluginNotReady"),
                ],
            }),
            info,
            runtime_handlers: runtime_handlers(handlers),
            features: Some(cri::RuntimeFeatures {
                // Merge and Strict: convert::process::user.
                supplemental_groups_policy: true,
                user_namespaces_host_network: false,
            }),
        }
    }
}

/// Status's handlers: the default as the empty name (what a pod without a RuntimeClass gets), then each by
/// its name, the default's too.
fn runtime_handlers(handlers: &[Handler]) -> Vec<cri::RuntimeHandler> {
    let entry = |name: &str, h: &Handler| {
        let f = h.features();
        cri::RuntimeHandler {
            name: name.into(),
            features: Some(cri::RuntimeHandlerFeatures {
                recursive_read_only_mounts: f.recursive_read_only_mounts,
                user_namespaces: f.user_namespaces,
            }),
        }
    };
    let default = handlers.iter().take(1).map(|h| entry("", h));
    default
        .chain(handlers.iter().map(|h| entry(&h.name, h)))
        .collect()
}

/// Verbose Status's `runtimeHandlers`: each handler's runtime and what its binary's features document says.
fn handlers_info(handlers: &[Handler]) -> serde_json::Value {
    handlers
        .iter()
        .map(|h| {
            serde_json::json!({
                "name": h.name,
                "binary": h.runtime.as_ref().map(|r| r.binary.display().to_string()),
                "root": h.runtime.as_ref().and_then(|r| r.root.as_ref()).map(|p| p.display().to_string()),
                "runtimeFeatures": h.runtime_features,
                "features": h.features(),
            })
        })
        .collect()
}
