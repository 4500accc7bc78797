//! What a pod run tells its caller: events as they happen, and the final report.

use serde::Serialize;

/// A container's part in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An init container with `restartPolicy: Always`: started in order before the rest, kept running,
    /// stopped last in reverse order.
    Sidecar,
    /// A regular init container: runs to completion, in order, before the main containers.
    Init,
    /// One of `containers`.
    Main,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Sidecar => "sidecar",
            Role::Init => "init",
            Role::Main => "container",
        })
    }
}

/// The pod's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Its main containers all exited 0 (restart policy Never or OnFailure).
    Succeeded,
    /// A main container failed for good, or a regular init container did under restart policy Never.
    Failed,
    /// It was stopped from outside (a signal to `crius run`) before it completed.
    Stopped,
}

/// Something that happened to the pod.
#[derive(Debug, Clone)]
pub enum Event {
    /// An image is being pulled.
    Pulling(String),
    /// The sandbox runs: the pod's name, the sandbox id and the pod's IP (empty on the host network).
    Sandbox {
        /// The pod.
        pod: String,
        /// Its sandbox.
        id: String,
        /// Its IP.
        ip: String,
    },
    /// A container started; its CRI log file is `log_path`.
    Started {
        /// The container.
        name: String,
        /// Sidecar, init or main.
        role: Role,
        /// Which start of it this is (0: the first).
        attempt: u32,
        /// The runtime's container id.
        id: String,
        /// Its CRI log file.
        log_path: String,
        /// The resources it was started with (its spec's).
        resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,
        /// The image it runs, as the runtime resolved it (its id).
        image_ref: String,
    },
    /// A container's startup is complete (a sidecar's probe passed; the next init container may go).
    Ready {
        /// The container.
        name: String,
    },
    /// A container exited.
    Exited {
        /// The container.
        name: String,
        /// Sidecar, init or main.
        role: Role,
        /// Its exit code.
        code: i32,
        /// The runtime's reason (Completed, Error, OOMKilled).
        reason: String,
    },
    /// A container could not be created or started.
    Failed {
        /// The container.
        name: String,
        /// What the runtime said.
        error: String,
    },
    /// A container will be started again after `after`.
    Restarting {
        /// The container.
        name: String,
        /// The back-off before it starts.
        after: std::time::Duration,
    },
    /// A container is being stopped (SIGTERM, grace `grace_s`, then SIGKILL).
    Stopping {
        /// The container.
        name: String,
        /// Sidecar, init or main.
        role: Role,
        /// Its grace period, seconds.
        grace_s: i64,
    },
    /// A container got new resources: in place, or by a restart its resizePolicy asked for; `applied` is
    /// what the runtime reports.
    Resized {
        /// The container.
        name: String,
        /// Whether it was restarted for it.
        restarted: bool,
        /// The resources the runtime reports now.
        applied: String,
    },
    /// A container's readiness probe changed its verdict.
    Readiness {
        /// The container.
        name: String,
        /// Whether it is ready now.
        ready: bool,
    },
    /// A resize the runtime refused: nothing changed.
    ResizeFailed {
        /// The container.
        name: String,
        /// Why.
        error: String,
    },
    /// A running container was taken back after a restart of the engine's caller.
    Adopted {
        /// The container.
        name: String,
        /// Its restarts so far.
        attempt: u32,
        /// The runtime's container id.
        id: String,
        /// Its CRI log file.
        log_path: String,
    },
    /// A note that is not an error (an unsupported probe kind, a skipped hook).
    Note(String),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Pulling(i) => write!(f, "pulling {i}"),
            Event::Sandbox { id, ip, .. } if ip.is_empty() => {
                write!(f, "sandbox {} (host network)", short(id))
            }
            Event::Sandbox { id, ip, .. } => write!(f, "sandbox {} ip {ip}", short(id)),
            Event::Started {
                name,
                role,
                attempt: 0,
                ..
            } => write!(f, "{role} {name}: started"),
            Event::Started {
                name, role, attempt, ..
            } => write!(f, "{role} {name}: started (restart {attempt})"),
            Event::Ready { name } => write!(f, "sidecar {name}: startup complete"),
            Event::Exited {
                name,
                role,
                code,
                reason,
            } => write!(f, "{role} {name}: exited {code} ({reason})"),
            Event::Failed { name, error } => write!(f, "{name}: {error}"),
            Event::Restarting { name, after } => {
                write!(f, "{name}: restarting in {:.1}s", after.as_secs_f64())
            }
            Event::Stopping { name, role, grace_s } => {
                write!(f, "{role} {name}: stopping (grace {grace_s}s)")
            }
            Event::Resized {
                name,
                restarted: false,
                applied,
            } => write!(f, "{name}: resized in place: {applied}"),
            Event::Resized {
                name,
                restarted: true,
                applied,
            } => {
                write!(
                    f,
                    "{name}: restarted with its new resources (resizePolicy): {applied}"
                )
            }
            Event::Readiness { name, ready: true } => write!(f, "{name}: ready"),
            Event::Readiness { name, ready: false } => write!(f, "{name}: not ready (readiness probe)"),
            Event::ResizeFailed { name, error } => write!(f, "resize of {name}: {error}"),
            Event::Adopted { name, id, .. } => write!(f, "{name}: taken back, running as {}", short(id)),
            Event::Note(n) => f.write_str(n),
        }
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}

/// One container at the end.
#[derive(Debug, Clone, Serialize)]
pub struct ContainerReport {
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// How often it was restarted.
    pub restarts: u32,
    /// Exit code of its last run (None if it never ran).
    pub exit_code: Option<i32>,
    /// The runtime's reason (`Completed`, `Error`, `OOMKilled`), or why it never ran.
    pub reason: String,
    /// When its last run started and finished, in ns since the epoch (0 if not).
    pub started_at: i64,
    /// When its last run finished.
    pub finished_at: i64,
}

/// The pod at the end.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `namespace/name`.
    pub pod: String,
    /// Its uid.
    pub uid: String,
    /// The sandbox id.
    pub sandbox: String,
    /// Its IP (empty on the host network).
    pub ip: String,
    /// The outcome.
    pub phase: Phase,
    /// The containers: init containers and sidecars in spec order, then the main ones.
    pub containers: Vec<ContainerReport>,
}
