//! crius: the command line for criusd. `crius images …` pulls, imports, lists, inspects and removes images,
//! through the CRI ImageService where it suffices and crius's own API for imports and pull progress;
//! `crius run` runs the pods of a Kubernetes manifest with the pod engine (`crius-pod`).

mod images;
mod logs;
#[allow(dead_code)]
mod output;
mod run;
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
        }
    });
    // A read of stdin may still block a thread of the runtime: it is not waited for.
    rt.shutdown_background();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crius: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
