//! `crius run`: runs the pods of a Kubernetes manifest on criusd (or any CRI runtime at `--address`) with the
//! pod engine, in the foreground: events on stderr as they happen, the containers' output with `--logs`, a
//! report at the end; SIGINT or SIGTERM terminates the pods gracefully (main containers, then sidecars in
//! reverse order). Nothing of the pods is left afterwards but their log files.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use crius_pod::Control;
use crius_pod::{Event, Phase, PullPolicy, Report};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Pull {
    /// Each container's imagePullPolicy (Kubernetes' default: Always for `:latest` or no tag).
    Policy,
    /// Pull every image.
    Always,
    /// Pull only images that are not there yet.
    Missing,
    /// Never pull: use the images there are.
    Never,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    /// A line per container.
    Text,
    /// The reports as JSON, on stdout.
    Json,
}

#[derive(Debug, Args)]
pub struct Run {
    /// Manifest files: Pods, or Jobs, CronJobs, Deployments, StatefulSets, DaemonSets or ReplicaSets (one pod of
    /// each template); ConfigMaps and Secrets in any of them feed volumes and env. `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Which images to pull (the last one given wins).
    #[arg(long, value_enum, default_value = "policy", overrides_with = "pull")]
    pull: Pull,
    /// Run REF wherever the manifest says NAME (repeatable), e.g. `--image flyway:latest=busybox:1.36`.
    #[arg(long = "image", value_name = "NAME=REF")]
    images: Vec<String>,
    /// Print the containers' output as it comes, each line after its container's name.
    #[arg(long)]
    logs: bool,
    /// The report at the end.
    #[arg(short, long, value_enum, default_value = "text")]
    output: Output,
    /// The first restart back-off, doubling up to 5m (kubelet's is 10s).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    restart_backoff: Duration,
    /// Watch the files: when a container's resources change there, resize it in the running pod (in place, or
    /// by a restart where its resizePolicy says RestartContainer), as kubelet does for a patched pod.
    #[arg(long)]
    watch: bool,
    /// Where pods' volumes go (`<dir>/<pod uid>`).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/crius/pods")]
    pods_dir: PathBuf,
    /// Where pods' log directories go (kubelet's `/var/log/pods`).
    #[arg(long, value_name = "DIR", default_value = "/var/log/pods")]
    log_root: PathBuf,
    /// The cgroup under which each pod gets its own (`<root>/burstable/pod<uid>`...), as kubelet's
    /// `--cgroup-root`; `""` for none (the runtime places containers where it will).
    #[arg(long, value_name = "CGROUP", default_value = "/kubepods")]
    cgroup_root: String,
}

/// `500ms`, `10s`, `2m`.
fn duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {s:?} (examples: 500ms, 10s, 2m)");
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .ok_or_else(bad)?;
    let n: u64 = n.parse().map_err(|_| bad())?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(bad()),
    })
}

/// Runs `crius run` against the CRI runtime at `address`; the process's exit code: 0 when every pod
/// succeeded or was stopped, 1 when one failed.
pub async fn run(address: &str, cmd: Run) -> Result<std::process::ExitCode, String> {
    if cmd.watch && cmd.files.iter().any(|f| f.as_os_str() == "-") {
        return Err(
            "--watch reads the files again as they change: it cannot watch standard input (-)".into(),
        );
    }
    let mut manifest = crius_pod::Manifest::default();
    for file in &cmd.files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).map_err(|e| format!("reading standard input: {e}"))?
        } else {
            std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?
        };
        manifest.merge(crius_pod::parse(&text, &file.display().to_string()).map_err(|e| e.to_string())?);
    }
    for s in &manifest.skipped {
        eprintln!("crius: skipping {s}: only pods and their ConfigMaps and Secrets run here");
    }
    if manifest.pods.is_empty() {
        return Err("no pod or workload to run in the manifests".into());
    }
    let mut images = HashMap::new();
    for m in &cmd.images {
        let (k, v) = m
            .split_once('=')
            .ok_or_else(|| format!("--image {m:?}: use NAME=REF"))?;
        images.insert(k.to_string(), v.to_string());
    }
    let opts = crius_pod::Options {
        pull: match cmd.pull {
            Pull::Policy => PullPolicy::Manifest,
            Pull::Always => PullPolicy::Always,
            Pull::Missing => PullPolicy::Missing,
            Pull::Never => PullPolicy::Never,
        },
        images,
        pods_dir: cmd.pods_dir,
        log_root: cmd.log_root,
        backoff: cmd.restart_backoff,
        cgroup_root: Some(cmd.cgroup_root).filter(|r| !r.is_empty()),
        started: Some(Instant::now()),
        ..Default::default()
    };
    let channel = crius_api::connect(address).await.map_err(|e| e.to_string())?;
    let (senders, mut receivers): (Vec<_>, Vec<_>) = manifest
        .pods
        .iter()
        .map(|_| mpsc::unbounded_channel::<Control>())
        .unzip();
    let stop_all = senders.clone();
    tokio::spawn(async move {
        let (Ok(mut int), Ok(mut term)) = (
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        eprintln!("crius: stopping (SIGTERM to the containers, then SIGKILL after their grace period)");
        for s in &stop_all {
            let _ = s.send(Control::Stop);
        }
    });
    if cmd.watch {
        tokio::spawn(watch_files(cmd.files.clone(), manifest.pods.clone(), senders));
    }
    let t0 = Instant::now();
    let logs = crate::run_logs::Logs::default();
    let ticker = cmd.logs.then(|| {
        let logs = logs.clone();
        tokio::spawn(async move {
            loop {
                logs.drain();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    let runs = manifest
        .pods
        .iter()
        .zip(receivers.drain(..))
        .map(|(def, controls)| {
            let (channel, opts, manifest) = (channel.clone(), &opts, &manifest);
            let follow = cmd.logs.then(|| logs.clone());
            async move {
                let mut pod = def.name.clone();
                crius_pod::run(channel, opts, def, manifest, controls, |e| {
                    if let Event::Sandbox { pod: name, .. } = &e {
                        pod = name.clone();
                    }
                    if let Some(logs) = &follow {
                        // What a container wrote before it exited comes before the line that says so.
                        logs.drain();
                        if let Event::Started { name, log_path, .. } | Event::Adopted { name, log_path, .. } =
                            &e
                        {
                            logs.add(name, log_path.into());
                        }
                    }
                    eprintln!(
                        "{:>7.3}s {}: {e}",
                        t0.elapsed().as_secs_f64(),
                        pod.trim_end_matches('-')
                    );
                })
                .await
            }
        });
    let results = futures::future::join_all(runs).await;
    if let Some(t) = ticker {
        t.abort();
        logs.drain();
    }
    let mut reports = Vec::new();
    let mut failed = false;
    for result in results {
        match result {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("crius: {e}");
                failed = true;
            }
        }
    }
    match cmd.output {
        Output::Json => {
            let json = serde_json::to_string_pretty(&reports).unwrap_or_default();
            let _ = writeln!(std::io::stdout(), "{json}");
        }
        Output::Text => reports.iter().for_each(print_report),
    }
    failed |= reports.iter().any(|r| r.phase == Phase::Failed);
    Ok(if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Reads `files` every half second; when they change, sends each running pod the resources of its containers
/// that changed. Other changes cannot apply to a running pod: they are named and ignored, as the API server
/// refuses them.
async fn watch_files(
    files: Vec<PathBuf>,
    mut pods: Vec<crius_pod::PodDef>,
    to: Vec<mpsc::UnboundedSender<Control>>,
) {
    let read = |files: &[PathBuf]| {
        files
            .iter()
            .map(|f| std::fs::read(f).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let mut seen = read(&files);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = read(&files);
        if now == seen {
            continue;
        }
        seen = now;
        let mut manifest = crius_pod::Manifest::default();
        for (f, bytes) in files.iter().zip(&seen) {
            match crius_pod::parse(&String::from_utf8_lossy(bytes), &f.display().to_string()) {
                Ok(m) => manifest.merge(m),
                Err(e) => {
                    eprintln!("crius: {e} (changes not applied)");
                    manifest.pods.clear();
                    break;
                }
            }
        }
        for (new, (old, tx)) in manifest.pods.iter().zip(pods.iter_mut().zip(&to)) {
            if new.owner != old.owner {
                continue;
            }
            let containers = |d: &crius_pod::PodDef| {
                d.spec
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(&d.spec.containers)
                    .cloned()
                    .collect::<Vec<_>>()
            };
            let (was, is) = (containers(old), containers(new));
            for c in &is {
                let Some(before) = was.iter().find(|b| b.name == c.name) else {
                    eprintln!(
                        "crius: {}: container {:?} cannot be added to a running pod",
                        old.name, c.name
                    );
                    continue;
                };
                let mut a = before.clone();
                let mut b = c.clone();
                a.resources = None;
                b.resources = None;
                if a != b {
                    eprintln!(
                        "crius: {}: only resources of container {:?} can change in a running pod",
                        old.name, c.name
                    );
                }
                if before.resources != c.resources {
                    let _ = tx.send(Control::Resize {
                        container: c.name.clone(),
                        resources: c.resources.clone().unwrap_or_default(),
                    });
                }
            }
            *old = new.clone();
        }
    }
}

fn print_report(r: &Report) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "pod {} {:?}", r.pod, r.phase);
    for c in &r.containers {
        let exit = c.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "  {:<9} {:<24} exit {exit:<4} {:<12} restarts {}",
            c.role.to_string(),
            c.name,
            c.reason,
            c.restarts
        );
    }
}
