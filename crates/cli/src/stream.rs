//! `crius exec`, `crius attach` and `crius port-forward`: a pod found by name (and namespace), its
//! container, then the CRI Exec, Attach or PortForward call and a session on the URL it returned
//! (crius-stream's client, SPDY or WebSocket), as kubectl does through a kubelet.

use std::io::IsTerminal;

use clap::Args;
use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use crius_stream::client::{self, Stdio, Transport};
use crius_stream::status::Outcome;
use tonic::transport::Channel;

/// Which pod and container, as kubectl names them.
#[derive(Debug, Args)]
pub struct Target {
    /// The pod's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// The container (default: the pod's only running container, else its newest).
    #[arg(short = 'c', long)]
    container: Option<String>,
    /// spdy (kubelet's and crictl's default) or websocket.
    #[arg(long, default_value = "spdy")]
    transport: Transport,
}

/// `crius exec`: run a command in a container of a pod.
#[derive(Debug, Args)]
pub struct Exec {
    /// The pod.
    pod: String,
    #[command(flatten)]
    target: Target,
    /// Pass stdin to the command.
    #[arg(short = 'i', long)]
    stdin: bool,
    /// Give the command a terminal (this terminal, in raw mode).
    #[arg(short = 't', long)]
    tty: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `crius attach`: the output (and with -i, the input) of a running container.
#[derive(Debug, Args)]
pub struct Attach {
    /// The pod.
    pod: String,
    #[command(flatten)]
    target: Target,
    /// Pass stdin to the container (it must have been created with stdin).
    #[arg(short = 'i', long)]
    stdin: bool,
    /// The container has a terminal: use this one, in raw mode.
    #[arg(short = 't', long)]
    tty: bool,
}

/// `crius port-forward`: local ports to ports of a pod.
#[derive(Debug, Args)]
pub struct PortForward {
    /// The pod.
    pod: String,
    /// LOCAL:REMOTE, or PORT for the same on both sides, or :REMOTE for a free local port.
    #[arg(required = true)]
    ports: Vec<String>,
    /// The pod's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    namespace: String,
    /// Local address to listen on (kubectl's `--address`; crius's `--address` is criusd's socket).
    #[arg(long = "bind-address", default_value = "127.0.0.1")]
    bind_address: String,
    /// spdy or websocket.
    #[arg(long, default_value = "spdy")]
    transport: Transport,
}

async fn runtime(address: &str) -> Result<RuntimeServiceClient<Channel>, String> {
    Ok(RuntimeServiceClient::new(
        crius_api::connect(address).await.map_err(|e| e.to_string())?,
    ))
}

/// The ready sandbox of pod `name` in `namespace` (the newest, if several).
async fn find_pod(
    rt: &mut RuntimeServiceClient<Channel>,
    namespace: &str,
    name: &str,
) -> Result<String, String> {
    let pods = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest::default())
        .await
        .map_err(|s| format!("listing pods: {}", s.message()))?
        .into_inner()
        .items;
    pods.into_iter()
        .filter(|p| {
            p.state == cri::PodSandboxState::SandboxReady as i32
                && p.metadata
                    .as_ref()
                    .is_some_and(|m| m.name == name && m.namespace == namespace)
        })
        .max_by_key(|p| p.created_at)
        .map(|p| p.id)
        .ok_or_else(|| format!("pods \"{name}\" not found in namespace \"{namespace}\""))
}

/// The running container `want` of the pod, or its default one.
async fn find_container(
    rt: &mut RuntimeServiceClient<Channel>,
    sandbox: &str,
    pod: &str,
    want: Option<&str>,
) -> Result<String, String> {
    let filter = cri::ContainerFilter {
        pod_sandbox_id: sandbox.into(),
        ..Default::default()
    };
    let mut all = rt
        .list_containers(cri::ListContainersRequest { filter: Some(filter) })
        .await
        .map_err(|s| format!("listing containers: {}", s.message()))?
        .into_inner()
        .containers;
    all.retain(|c| c.state == cri::ContainerState::ContainerRunning as i32);
    all.sort_by_key(|c| c.created_at);
    let name = |c: &cri::Container| c.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
    if let Some(want) = want {
        return all
            .iter()
            .rev()
            .find(|c| name(c) == want)
            .map(|c| c.id.clone())
            .ok_or_else(|| format!("container {want} is not running in pod {pod}"));
    }
    let Some(last) = all.last() else {
        return Err(format!("pod {pod} has no running container"));
    };
    if all.len() > 1 {
        let names: Vec<String> = all.iter().map(name).collect();
        eprintln!(
            "Defaulted container \"{}\" out of: {}",
            name(last),
            names.join(", ")
        );
    }
    Ok(last.id.clone())
}

/// Puts the local terminal in raw mode until dropped.
struct RawMode(Option<nix::sys::termios::Termios>);

impl RawMode {
    fn new(on: bool) -> RawMode {
        use nix::sys::termios;
        if !on || !std::io::stdin().is_terminal() {
            return RawMode(None);
        }
        let stdin = std::io::stdin();
        let Ok(saved) = termios::tcgetattr(&stdin) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

/// This terminal's size (columns, rows).
fn terminal_size() -> Option<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we own.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some((ws.ws_col, ws.ws_row))
}

/// The terminal's size now and after every SIGWINCH.
fn sizes() -> tokio::sync::mpsc::Receiver<(u16, u16)> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        if let Some(s) = terminal_size() {
            let _ = tx.send(s).await;
        }
        let Ok(mut winch) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        else {
            return;
        };
        while winch.recv().await.is_some() {
            if let Some(s) = terminal_size()
                && tx.send(s).await.is_err()
            {
                return;
            }
        }
    });
    rx
}

fn local_stdio(stdin: bool, tty: bool) -> Stdio {
    Stdio {
        stdin: stdin.then(|| Box::pin(tokio::io::stdin()) as _),
        stdout: Some(Box::pin(tokio::io::stdout())),
        stderr: (!tty).then(|| Box::pin(tokio::io::stderr()) as _),
        resize: tty.then(sizes),
    }
}

fn exit_of(outcome: Outcome) -> Result<std::process::ExitCode, String> {
    match outcome {
        Outcome::Success => Ok(std::process::ExitCode::SUCCESS),
        Outcome::Exit(code) => {
            eprintln!("command terminated with exit code {code}");
            Ok(std::process::ExitCode::from(
                u8::try_from(code.clamp(0, 255)).unwrap_or(1),
            ))
        }
        Outcome::Failed(m) => Err(m),
    }
}

/// The session behind `url` with this terminal's stdio (raw while it lasts, with a terminal); its exit code.
async fn run_session(
    url: &str,
    transport: Transport,
    stdin: bool,
    tty: bool,
) -> Result<std::process::ExitCode, String> {
    let raw = RawMode::new(tty);
    let outcome = client::remote_command(url, transport, local_stdio(stdin, tty))
        .await
        .map_err(|e| e.to_string());
    drop(raw);
    exit_of(outcome?)
}

/// The id of the running container `target` names in pod `pod`.
async fn target_container(
    rt: &mut RuntimeServiceClient<Channel>,
    pod: &str,
    target: &Target,
) -> Result<String, String> {
    let sandbox = find_pod(rt, &target.namespace, pod).await?;
    find_container(rt, &sandbox, pod, target.container.as_deref()).await
}

/// Runs `crius exec`.
pub async fn exec(address: &str, cmd: Exec) -> Result<std::process::ExitCode, String> {
    let mut rt = runtime(address).await?;
    let id = target_container(&mut rt, &cmd.pod, &cmd.target).await?;
    let url = rt
        .exec(cri::ExecRequest {
            container_id: id,
            cmd: cmd.command.clone(),
            tty: cmd.tty,
            stdin: cmd.stdin,
            stdout: true,
            stderr: !cmd.tty,
        })
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner()
        .url;
    run_session(&url, cmd.target.transport, cmd.stdin, cmd.tty).await
}

/// Runs `crius attach`.
pub async fn attach(address: &str, cmd: Attach) -> Result<std::process::ExitCode, String> {
    let mut rt = runtime(address).await?;
    let id = target_container(&mut rt, &cmd.pod, &cmd.target).await?;
    let url = rt
        .attach(cri::AttachRequest {
            container_id: id,
            tty: cmd.tty,
            stdin: cmd.stdin,
            stdout: true,
            stderr: !cmd.tty,
        })
        .await
        .map_err(|s| s.message().to_string())?
        .into_inner()
        .url;
    run_session(&url, cmd.target.transport, cmd.stdin, cmd.tty).await
}

/// LOCAL:REMOTE, PORT or :REMOTE.
fn port_pair(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("port {s:?}: use LOCAL:REMOTE, PORT or :REMOTE");
    let num = |p: &str| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad);
    match s.split_once(':') {
        None => num(s).map(|p| (p, p)),
        Some(("", r)) => Ok((0, num(r)?)),
        Some((l, r)) => Ok((num(l)?, num(r)?)),
    }
}

/// A line on stdout, as kubectl prints them; a stdout that went away is no reason to stop forwarding.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Runs `crius port-forward` until interrupted.
pub async fn port_forward(address: &str, cmd: PortForward) -> Result<std::process::ExitCode, String> {
    let pairs = cmd
        .ports
        .iter()
        .map(|p| port_pair(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut rt = runtime(address).await?;
    let sandbox = find_pod(&mut rt, &cmd.namespace, &cmd.pod).await?;
    let mut tasks = Vec::new();
    for (local, remote) in pairs {
        let listener = tokio::net::TcpListener::bind((cmd.bind_address.as_str(), local))
            .await
            .map_err(|e| format!("listening on {}:{local}: {e}", cmd.bind_address))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        say(&format!("Forwarding from {bound} -> {remote}"));
        let (rt, sandbox, transport) = (rt.clone(), sandbox.clone(), cmd.transport);
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                say(&format!("Handling connection for {}", bound.port()));
                let (mut rt, sandbox) = (rt.clone(), sandbox.clone());
                tokio::spawn(async move {
                    // A URL per connection: each one's token is used once.
                    let url = match rt
                        .port_forward(cri::PortForwardRequest {
                            pod_sandbox_id: sandbox,
                            port: vec![i32::from(remote)],
                        })
                        .await
                    {
                        Ok(r) => r.into_inner().url,
                        Err(s) => {
                            eprintln!("error: {}", s.message());
                            return;
                        }
                    };
                    if let Err(e) = client::port_forward(&url, transport, remote, conn).await {
                        eprintln!("error: {e}");
                    }
                });
            }
        }));
    }
    let _ = tokio::signal::ctrl_c().await;
    for t in tasks {
        t.abort();
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs_read_as_kubectl_reads_them() {
        assert_eq!(port_pair("8080:80").unwrap(), (8080, 80));
        assert_eq!(port_pair("80").unwrap(), (80, 80));
        assert_eq!(port_pair(":80").unwrap(), (0, 80));
        assert!(port_pair("x:80").is_err());
        assert!(port_pair("0").is_err());
    }
}
