//! kubectl's verbs on the pods and workloads criusd keeps (its PodService): apply, get, describe, logs,
//! delete, patch (the resize subresource), resize, scale and edit. Errors read as kubectl's
//! (`Error from server (NotFound): pods "x" not found`), and the exit code is 1 for any of them.

use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use clap::Args;
use crius_api::pod as api;
use crius_api::pod::pod_service_client::PodServiceClient;
use tonic::transport::Channel;

use crate::output;

/// The namespace flags every verb takes.
#[derive(Debug, Args)]
pub struct Scope {
    /// The namespace.
    #[arg(short, long, default_value = "default")]
    pub(crate) namespace: String,
}

#[derive(Debug, Args)]
pub struct Apply {
    #[command(flatten)]
    scope: Scope,
    /// Manifest files or directories (their .yaml, .yml and .json files); `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// `server`: validate only, make nothing.
    #[arg(long, value_name = "MODE")]
    dry_run: Option<String>,
}

#[derive(Debug, Args)]
pub struct Get {
    #[command(flatten)]
    scope: Scope,
    /// pods, jobs, deployments, replicasets, statefulsets, daemonsets, cronjobs, configmaps, secrets.
    kind: String,
    /// One object.
    name: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// wide, yaml, json, name, jsonpath=TEMPLATE, jsonpath-as-json=TEMPLATE.
    #[arg(short, long, default_value = "")]
    output: String,
    /// A label selector (`app=web`).
    #[arg(short = 'l', long, default_value = "")]
    selector: String,
    /// After the list, each change as it happens (pods).
    #[arg(short, long)]
    watch: bool,
}

#[derive(Debug, Args)]
pub struct Describe {
    #[command(flatten)]
    scope: Scope,
    /// `pod` (others are printed as YAML with their pods' events).
    kind: String,
    name: String,
}

/// A container of a pod, for the verbs that name one (`logs`, `checkpoint`).
#[derive(Debug, Args)]
pub struct PodContainer {
    #[command(flatten)]
    pub(crate) scope: Scope,
    pub(crate) pod: String,
    /// The container (default: the first main one).
    #[arg(short, long, default_value = "")]
    pub(crate) container: String,
}

#[derive(Debug, Args)]
pub struct Logs {
    #[command(flatten)]
    target: PodContainer,
    /// Keep printing as the container writes, until it stops.
    #[arg(short, long)]
    follow: bool,
    /// The previous run of the container.
    #[arg(short, long)]
    previous: bool,
    /// The last N lines.
    #[arg(long, default_value_t = -1)]
    tail: i64,
    /// Each line after its time.
    #[arg(long)]
    timestamps: bool,
}

#[derive(Debug, Args)]
pub struct Delete {
    #[command(flatten)]
    scope: Scope,
    kind: String,
    name: String,
    /// Seconds to give the pod to terminate (default: its terminationGracePeriodSeconds).
    #[arg(long)]
    grace_period: Option<i64>,
    /// At once: a grace period of 1 s.
    #[arg(long)]
    now: bool,
    /// Return once the object is gone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wait: bool,
}

#[derive(Debug, Args)]
pub struct Patch {
    #[command(flatten)]
    scope: Scope,
    /// `pod`.
    kind: String,
    name: String,
    /// `resize` (the only subresource a pod patch goes to here).
    #[arg(long, default_value = "resize")]
    subresource: String,
    /// The patch, JSON or YAML.
    #[arg(short, long)]
    patch: String,
    /// strategic, merge or json.
    #[arg(long = "type", default_value = "strategic")]
    patch_type: String,
}

#[derive(Debug, Args)]
pub struct Resize {
    #[command(flatten)]
    scope: Scope,
    /// `pod`.
    kind: String,
    name: String,
    /// The container.
    #[arg(short, long)]
    container: String,
    /// Its cpu request and limit (`800m`).
    #[arg(long)]
    cpu: Option<String>,
    /// Its memory request and limit (`768Mi`).
    #[arg(long)]
    memory: Option<String>,
}

#[derive(Debug, Args)]
pub struct Scale {
    #[command(flatten)]
    scope: Scope,
    kind: String,
    name: String,
    #[arg(long)]
    replicas: i32,
}

#[derive(Debug, Args)]
pub struct Edit {
    #[command(flatten)]
    scope: Scope,
    /// `pod`.
    kind: String,
    name: String,
}

/// kubectl's form of a server error.
pub(crate) fn server(s: tonic::Status) -> String {
    let kind = match s.code() {
        tonic::Code::NotFound => "NotFound",
        tonic::Code::AlreadyExists => "AlreadyExists",
        tonic::Code::InvalidArgument => "Invalid",
        tonic::Code::FailedPrecondition => "Conflict",
        tonic::Code::Unavailable => "ServiceUnavailable",
        _ => "InternalError",
    };
    format!("Error from server ({kind}): {}", s.message())
}

pub(crate) async fn client(address: &str) -> Result<PodServiceClient<Channel>, String> {
    Ok(PodServiceClient::new(
        crius_api::connect(address).await.map_err(|e| e.to_string())?,
    ))
}

pub(crate) fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    if !text.is_empty() && !text.ends_with('\n') {
        let _ = o.write_all(b"\n");
    }
}

fn read_manifests(files: &[PathBuf]) -> Result<Vec<(String, String)>, String> {
    let mut docs = Vec::new();
    for f in files {
        if f.as_os_str() == "-" {
            let text = std::io::read_to_string(std::io::stdin())
                .map_err(|e| format!("reading standard input: {e}"))?;
            docs.push(("-".into(), text));
        } else if f.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(f)
                .map_err(|e| format!("reading {}: {e}", f.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
                })
                .collect();
            entries.sort();
            docs.extend(read_manifests(&entries)?);
        } else {
            let text = std::fs::read_to_string(f).map_err(|e| {
                format!(
                    "error: the path {:?} cannot be read: {e}",
                    f.display().to_string()
                )
            })?;
            docs.push((f.display().to_string(), text));
        }
    }
    Ok(docs)
}

/// `crius apply -f`.
pub async fn apply(address: &str, cmd: Apply) -> Result<(), String> {
    let docs = read_manifests(&cmd.files)?;
    let mut c = client(address).await?;
    let dry = cmd.dry_run.as_deref().is_some_and(|m| m != "none");
    // Every file is validated before any is applied.
    if !dry {
        for (source, text) in &docs {
            c.apply(api::ApplyRequest {
                manifest: text.clone(),
                source: source.clone(),
                dry_run: true,
            })
            .await
            .map_err(server)?;
        }
    }
    for (source, text) in docs {
        let r = c
            .apply(api::ApplyRequest {
                manifest: with_namespace(&text, &cmd.scope.namespace),
                source,
                dry_run: dry,
            })
            .await
            .map_err(server)?
            .into_inner();
        for a in r.applied {
            let note = if dry { " (server dry run)" } else { "" };
            out(&format!("{}/{} {}{note}", a.kind, a.name, a.action));
        }
    }
    Ok(())
}

/// The manifest with `-n NS` given to documents that name no namespace.
fn with_namespace(text: &str, namespace: &str) -> String {
    if namespace == "default" {
        return text.to_string();
    }
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let Ok(mut v) = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc) else {
            return text.to_string();
        };
        if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_mapping_mut())
            && !m.contains_key("namespace")
        {
            m.insert("namespace".into(), namespace.into());
        }
        docs.push(serde_yaml_ng::to_string(&v).unwrap_or_default());
    }
    docs.join("---\n")
}

/// `crius get`.
pub async fn get(address: &str, cmd: Get) -> Result<(), String> {
    let format = output::Format::parse(&cmd.output)?;
    let mut c = client(address).await?;
    let name = cmd.name.clone().unwrap_or_default();
    let r = c
        .get(api::GetRequest {
            kind: cmd.kind.clone(),
            namespace: cmd.scope.namespace.clone(),
            name: name.clone(),
            all_namespaces: cmd.all_namespaces,
            selector: cmd.selector.clone(),
            events: false,
        })
        .await
        .map_err(server)?
        .into_inner();
    let objects: Vec<serde_json::Value> = r
        .objects
        .iter()
        .filter_map(|o| serde_json::from_str(o).ok())
        .collect();
    let opts = output::RenderOptions {
        all_namespaces: cmd.all_namespaces,
        ..Default::default()
    };
    if objects.is_empty() && matches!(format, output::Format::Table | output::Format::Wide) {
        eprintln!(
            "{}",
            output::no_resources((!cmd.all_namespaces).then_some(cmd.scope.namespace.as_str()))
        );
    } else {
        out(&output::render_with(
            &cmd.kind,
            &objects,
            !name.is_empty(),
            &format,
            SystemTime::now(),
            opts,
        )?);
    }
    if cmd.watch {
        let mut w = c
            .watch(api::WatchRequest {
                namespace: cmd.scope.namespace,
                name,
                all_namespaces: cmd.all_namespaces,
            })
            .await
            .map_err(server)?
            .into_inner();
        // The watch starts with what there is: that was printed already.
        let mut seen = objects.len();
        while let Some(e) = w.message().await.map_err(server)? {
            if seen > 0 && e.r#type == "ADDED" {
                seen -= 1;
                continue;
            }
            let Ok(o) = serde_json::from_str::<serde_json::Value>(&e.object) else {
                continue;
            };
            let text = output::render_with(&cmd.kind, &[o], true, &format, SystemTime::now(), opts)?;
            // A table's later rows come without its header, as kubectl's.
            let text = match format {
                output::Format::Table | output::Format::Wide => {
                    text.lines().skip(1).collect::<Vec<_>>().join("\n")
                }
                _ => text,
            };
            out(&text);
        }
    }
    Ok(())
}

/// `crius describe`.
pub async fn describe(address: &str, cmd: Describe) -> Result<(), String> {
    let mut c = client(address).await?;
    let r = c
        .get(api::GetRequest {
            kind: cmd.kind.clone(),
            namespace: cmd.scope.namespace,
            name: cmd.name,
            events: true,
            ..Default::default()
        })
        .await
        .map_err(server)?
        .into_inner();
    let events: Vec<serde_json::Value> = r
        .events
        .iter()
        .filter_map(|o| serde_json::from_str(o).ok())
        .collect();
    for o in &r.objects {
        let v: serde_json::Value = serde_json::from_str(o).map_err(|e| e.to_string())?;
        if v["kind"] == "Pod" {
            out(&output::describe::describe_pod(&v, &events, SystemTime::now()));
        } else {
            out(&output::render(
                &cmd.kind,
                &[v],
                true,
                &output::Format::Yaml,
                SystemTime::now(),
            )?);
            let list = output::render("events", &events, false, &output::Format::Yaml, SystemTime::now())?;
            out(&format!("Events:\n{list}"));
        }
    }
    Ok(())
}

/// `crius logs`.
pub async fn logs(address: &str, cmd: Logs) -> Result<(), String> {
    let mut c = client(address).await?;
    let mut s = c
        .logs(api::LogsRequest {
            namespace: cmd.target.scope.namespace,
            pod: cmd.target.pod,
            container: cmd.target.container,
            follow: cmd.follow,
            previous: cmd.previous,
            tail_lines: cmd.tail,
            timestamps: cmd.timestamps,
        })
        .await
        .map_err(server)?
        .into_inner();
    let mut o = std::io::stdout();
    while let Some(chunk) = s.message().await.map_err(server)? {
        if o.write_all(&chunk.data).and_then(|()| o.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

/// `crius delete`.
pub async fn delete(address: &str, cmd: Delete) -> Result<(), String> {
    let mut c = client(address).await?;
    let grace = if cmd.now { Some(1) } else { cmd.grace_period };
    let r = c
        .delete(api::DeleteRequest {
            kind: cmd.kind,
            namespace: cmd.scope.namespace,
            name: cmd.name.clone(),
            grace_period_seconds: grace,
            wait: cmd.wait,
        })
        .await
        .map_err(server)?
        .into_inner();
    out(&format!("{} \"{}\" deleted", r.kind, cmd.name));
    Ok(())
}

fn only_pods(kind: &str) -> Result<(), String> {
    match kind {
        "pod" | "pods" | "po" => Ok(()),
        other => Err(format!("error: {other}: only pods have the resize subresource")),
    }
}

/// `crius patch pod NAME --subresource resize -p PATCH`.
pub async fn patch(address: &str, cmd: Patch) -> Result<(), String> {
    only_pods(&cmd.kind)?;
    if cmd.subresource != "resize" {
        return Err(format!(
            "error: subresource {:?}: crius patches pods through \"resize\" only",
            cmd.subresource
        ));
    }
    let mut c = client(address).await?;
    c.resize(api::ResizeRequest {
        namespace: cmd.scope.namespace,
        name: cmd.name.clone(),
        patch: cmd.patch,
        patch_type: cmd.patch_type,
    })
    .await
    .map_err(server)?;
    out(&format!("pod/{} patched", cmd.name));
    Ok(())
}

/// `crius resize pod NAME -c CTR --cpu X --memory Y`: requests and limits both.
pub async fn resize(address: &str, cmd: Resize) -> Result<(), String> {
    only_pods(&cmd.kind)?;
    if cmd.cpu.is_none() && cmd.memory.is_none() {
        return Err("error: give --cpu, --memory or both".into());
    }
    let mut amounts = serde_json::Map::new();
    if let Some(c) = &cmd.cpu {
        amounts.insert("cpu".into(), c.clone().into());
    }
    if let Some(m) = &cmd.memory {
        amounts.insert("memory".into(), m.clone().into());
    }
    let patch = serde_json::json!({"spec": {"containers": [{"name": cmd.container,
        "resources": {"requests": amounts, "limits": amounts}}]}});
    patch_resources(address, &cmd.scope.namespace, &cmd.name, &patch).await
}

async fn patch_resources(
    address: &str,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), String> {
    let mut c = client(address).await?;
    c.resize(api::ResizeRequest {
        namespace: namespace.into(),
        name: name.into(),
        patch: patch.to_string(),
        patch_type: "strategic".into(),
    })
    .await
    .map_err(server)?;
    out(&format!("pod/{name} resized"));
    Ok(())
}

/// `crius scale`.
pub async fn scale(address: &str, cmd: Scale) -> Result<(), String> {
    let mut c = client(address).await?;
    c.scale(api::ScaleRequest {
        kind: cmd.kind.clone(),
        namespace: cmd.scope.namespace,
        name: cmd.name.clone(),
        replicas: cmd.replicas,
    })
    .await
    .map_err(server)?;
    out(&format!("{}/{} scaled", cmd.kind.trim_end_matches('s'), cmd.name));
    Ok(())
}

/// `crius edit pod NAME`: the pod in `$EDITOR` (vi without one); changed resources go through a resize, any
/// other change is refused as the API server refuses it.
pub async fn edit(address: &str, cmd: Edit) -> Result<(), String> {
    only_pods(&cmd.kind)?;
    let mut c = client(address).await?;
    let r = c
        .get(api::GetRequest {
            kind: "pods".into(),
            namespace: cmd.scope.namespace.clone(),
            name: cmd.name.clone(),
            ..Default::default()
        })
        .await
        .map_err(server)?
        .into_inner();
    let pod: serde_json::Value =
        serde_json::from_str(r.objects.first().ok_or("no pod")?).map_err(|e| e.to_string())?;
    let before = serde_yaml_ng::to_string(&pod).map_err(|e| e.to_string())?;
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .map_err(|e| e.to_string())?;
    std::fs::write(file.path(), &before).map_err(|e| e.to_string())?;
    let editor = std::env::var("EDITOR").unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .map_err(|e| format!("running {editor}: {e}"))?;
    if !status.success() {
        return Err(format!("error: {editor} exited with {status}: nothing changed"));
    }
    let after = std::fs::read_to_string(file.path()).map_err(|e| e.to_string())?;
    if after == before {
        out("Edit cancelled, no changes made.");
        return Ok(());
    }
    let edited: serde_json::Value =
        serde_yaml_ng::from_str(&after).map_err(|e| format!("error: the edited pod is not YAML: {e}"))?;
    // The whole spec goes as a merge patch: the service refuses anything but resources.
    let patch = serde_json::json!({"spec": edited.get("spec")});
    let mut c = client(address).await?;
    c.resize(api::ResizeRequest {
        namespace: cmd.scope.namespace,
        name: cmd.name.clone(),
        patch: patch.to_string(),
        patch_type: "merge".into(),
    })
    .await
    .map_err(server)?;
    out(&format!("pod/{} edited", cmd.name));
    Ok(())
}
