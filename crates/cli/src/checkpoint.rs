//! `crius checkpoint POD [-c CTR] [-o FILE]`: a running container of a pod that criusd keeps, checkpointed
//! with CRIU through the pod service (which calls the CRI's CheckpointContainer). The archive is kubelet's
//! (`checkpoint-<pod>_<namespace>-<container>-<time>.tar` in the current directory unless `-o` names it;
//! `.tar.gz` is gzip); the container keeps running. A pod manifest whose container's `image` is the archive's
//! path restores it (README, "Checkpoint and restore").

use std::path::PathBuf;

use clap::Args;
use crius_api::pod as api;

use crate::pods::{PodContainer, client, out, server};

#[derive(Debug, Args)]
pub struct Checkpoint {
    #[command(flatten)]
    target: PodContainer,
    /// The archive to write (default: kubelet's name, in the current directory).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Seconds the checkpoint may take (0: criusd's default).
    #[arg(long, default_value_t = 0)]
    timeout: i64,
}

/// kubelet's name for the archive of `container` in pod `namespace/pod`, at `now` (RFC 3339).
fn kubelet_name(pod: &str, namespace: &str, container: &str, now: &str) -> String {
    format!("checkpoint-{pod}_{namespace}-{container}-{now}.tar")
}

/// `crius checkpoint`.
pub async fn run(address: &str, cmd: Checkpoint) -> Result<(), String> {
    // To the second, as kubelet names its archives.
    let secs = crius_common::time::now_ns().div_euclid(1_000_000_000);
    let now = crius_common::time::rfc3339(secs, 0, crius_common::time::Fraction::Trimmed);
    let PodContainer {
        scope,
        pod,
        container,
    } = cmd.target;
    let shown = if container.is_empty() { "main" } else { &container };
    let file = cmd
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(kubelet_name(&pod, &scope.namespace, shown, &now)));
    // criusd writes it: the path must hold on the node, which is this machine.
    let file = std::path::absolute(&file).map_err(|e| format!("error: {}: {e}", file.display()))?;
    let mut c = client(address).await?;
    let r = c
        .checkpoint(api::CheckpointRequest {
            namespace: scope.namespace,
            pod: pod.clone(),
            container,
            location: file.display().to_string(),
            timeout_seconds: cmd.timeout,
        })
        .await
        .map_err(server)?
        .into_inner();
    out(&format!(
        "pod/{} checkpointed (container {}): {}",
        pod, r.container_id, r.location
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_name_is_kubelets() {
        assert_eq!(
            super::kubelet_name("web", "default", "app", "2026-01-02T03:04:05Z"),
            "checkpoint-web_default-app-2026-01-02T03:04:05Z.tar"
        );
    }
}
