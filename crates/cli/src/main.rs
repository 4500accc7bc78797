//! crius: the command line for criusd. `crius images …` pulls, imports, lists, inspects and removes images,
//! through the CRI ImageService where it suffices and crius's own API for imports and pull progress;
//! `crius run` runs the pods of a Kubernetes manifest with the pod engine (`crius-pod`) in the foreground;
//! `crius apply/get/describe/logs/delete/patch/resize/scale/edit` drive the pods criusd keeps, as kubectl's
//! verbs do; `crius checkpoint` checkpoints one of their containers with CRIU.
//!
//! Crates chosen: `jiff` reads RFC 3339 and writes RFC 1123 times (k8s-openapi already builds it; no calendar
//! maths of our own); `tabwriter` aligns table and describe columns by display width (Go's text/tabwriter rules,
//! which kubectl's look comes from); `tracing-subscriber` (the workspace's, as criusd's) prints the engine's
//! diagnostics when `RUST_LOG` asks for them.
//! Our own: the JSONPath of `-o jsonpath=` (output/jsonpath), since kubectl's template dialect (`{range}`,
//! `{end}`, several expressions in one template) is not the RFC 9535 query language the crates implement.

mod checkpoint;
mod images;
mod import;
mod output;
mod pods;
mod run;
mod run_logs;
mod stream;

use clap::{Parser, Subcommand};

/// crius — talk to criusd, the crius container runtime daemon.
#[derive(Debug, Parser)]
#[command(name = "crius", version)]
struct Cli {
    /// criusd's socket (for `crius run`, any CRI runtime's: containerd's too).
    #[arg(long, global = true, env = "CRIUS_ADDRESS", default_value = crius_api::DEFAULT_SOCKET)]
    address: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pull, import, list, inspect and remove images.
    #[command(subcommand, visible_alias = "image")]
    Images(images::Images),
    /// Run the pods of a Kubernetes manifest (Pod, Job, Deployment, ...) until they complete or are stopped.
    Run(run::Run),
    /// Run a command in a container of a running pod (`crius exec -it POD -- sh`).
    Exec(stream::Exec),
    /// Attach to the output (and input, with -i) of a running container.
    Attach(stream::Attach),
    /// Forward local ports to a pod (`crius port-forward POD 8080:80`).
    PortForward(stream::PortForward),
    /// Create or update pods and workloads in criusd from manifests (`-f FILE|DIR|-`); they outlive the CLI.
    Apply(pods::Apply),
    /// List pods, jobs, deployments... or show one (`-o wide|yaml|json|name|jsonpath=...`).
    Get(pods::Get),
    /// Show a pod in detail, its events last.
    Describe(pods::Describe),
    /// Print a container's log (`-f`, `-p`, `--tail N`, `--timestamps`).
    Logs(pods::Logs),
    /// Delete a pod (gracefully: main containers, then sidecars) or a workload and its pods.
    Delete(pods::Delete),
    /// Patch a pod's resources through the resize subresource (`--subresource resize -p JSON`).
    Patch(pods::Patch),
    /// Resize a container of a pod in place (`crius resize pod NAME -c CTR --cpu 800m --memory 768Mi`).
    Resize(pods::Resize),
    /// Set a Deployment's, ReplicaSet's or StatefulSet's replicas (a Job's parallelism).
    Scale(pods::Scale),
    /// Edit a pod in $EDITOR: its resources change through a resize.
    Edit(pods::Edit),
    /// Checkpoint a running container of a pod with CRIU (`crius checkpoint POD [-c CTR] -o FILE`); it runs on.
    Checkpoint(checkpoint::Checkpoint),
}

fn done(r: Result<(), String>) -> Result<std::process::ExitCode, String> {
    r.map(|()| std::process::ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::Images(_) = cli.command {
        // `crius images ls | head` ends quietly, as other Unix tools do. Not for `crius run`: there the default
        // disposition would kill the process the moment criusd goes away under a write to its socket (a
        // criusd restart), leaving the pods without their engine.
        // SAFETY: restoring the default disposition of SIGPIPE before any thread exists.
        let _ = unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            )
        };
    }
    // Diagnostics only when asked for: `RUST_LOG=crius_pod::probe=debug crius run ...` times each exec probe.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crius: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Images(cmd) => images::run(&cli.address, cmd)
                .await
                .map(|()| std::process::ExitCode::SUCCESS),
            Command::Run(cmd) => run::run(&cli.address, cmd).await,
            Command::Exec(cmd) => stream::exec(&cli.address, cmd).await,
            Command::Attach(cmd) => stream::attach(&cli.address, cmd).await,
            Command::PortForward(cmd) => stream::port_forward(&cli.address, cmd).await,
            Command::Apply(cmd) => done(pods::apply(&cli.address, cmd).await),
            Command::Get(cmd) => done(pods::get(&cli.address, cmd).await),
            Command::Describe(cmd) => done(pods::describe(&cli.address, cmd).await),
            Command::Logs(cmd) => done(pods::logs(&cli.address, cmd).await),
            Command::Delete(cmd) => done(pods::delete(&cli.address, cmd).await),
            Command::Patch(cmd) => done(pods::patch(&cli.address, cmd).await),
            Command::Resize(cmd) => done(pods::resize(&cli.address, cmd).await),
            Command::Scale(cmd) => done(pods::scale(&cli.address, cmd).await),
            Command::Edit(cmd) => done(pods::edit(&cli.address, cmd).await),
            Command::Checkpoint(cmd) => done(checkpoint::run(&cli.address, cmd).await),
        }
    });
    // A read of stdin may still block a thread of the runtime: it is not waited for.
    rt.shutdown_background();
    match result {
        Ok(code) => code,
        // kubectl's forms (`Error from server (NotFound): ...`, `error: ...`) are printed as they are.
        Err(e) if e.starts_with("Error from server") || e.starts_with("error: ") => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("crius: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
