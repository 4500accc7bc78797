//! crius-cri's one error type, and the one place its gRPC codes are chosen ([`From<Error> for Status`]).
//!
//! Variants are what a caller acts on — a field to fix, an object that is not there or not ready, a deadline
//! that passed, a shim that could not be reached — not one per dependency. Each names the CRI call it failed
//! in and the object it is about, so the message a client prints is enough to act on.

use std::fmt;

use tonic::Status;

use crate::network::NetError;
use crate::shim::{ShimCode, ShimError};

/// What an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A pod sandbox.
    Sandbox,
    /// A container.
    Container,
    /// An image.
    Image,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Sandbox => "sandbox",
            Kind::Container => "container",
            Kind::Image => "image",
        })
    }
}

/// An error of a CRI call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be served as sent: `field` is missing or malformed.
    #[error("{call}: {field} {reason}")]
    InvalidArgument {
        /// The CRI call.
        call: &'static str,
        /// The request field (or the thing it names, such as an image's user).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No such sandbox or container.
    #[error("{call}: {kind} {id:?} not found")]
    NotFound {
        /// The CRI call.
        call: &'static str,
        /// What was looked for.
        kind: Kind,
        /// The id (or reference) asked for.
        id: String,
    },
    /// A RuntimeClass handler criusd is not configured with.
    #[error("{call}: runtime handler {name:?} not found (configured: {})", known.join(", "))]
    UnknownHandler {
        /// The CRI call.
        call: &'static str,
        /// The handler asked for.
        name: String,
        /// The handlers there are.
        known: Vec<String>,
    },
    /// The image a container needs is not on the node.
    #[error("{call}: image {reference:?} not found: pull it first")]
    ImageNotPulled {
        /// The CRI call.
        call: &'static str,
        /// The image reference.
        reference: String,
    },
    /// A name that another sandbox or container holds.
    #[error("{call}: {name} is taken by {kind} {holder}")]
    AlreadyExists {
        /// The CRI call.
        call: &'static str,
        /// What holds the name.
        kind: Kind,
        /// The name asked for.
        name: String,
        /// The id of its holder.
        holder: String,
    },
    /// The object is not in a state that allows the call.
    #[error("{call}: {kind} {id} {reason}")]
    FailedPrecondition {
        /// The CRI call.
        call: &'static str,
        /// What the call is about.
        kind: Kind,
        /// Its id.
        id: String,
        /// Why it cannot be done now.
        reason: String,
    },
    /// The node's pod network cannot give a pod an address yet (no CNI config).
    #[error("{call}: the pod network is not ready: {source}")]
    NetworkNotReady {
        /// The CRI call.
        call: &'static str,
        /// What is missing.
        #[source]
        source: Box<NetError>,
    },
    /// The call's time ran out; what it waited for did not happen.
    #[error("{call}: {kind} {id} {reason}")]
    DeadlineExceeded {
        /// The CRI call.
        call: &'static str,
        /// What the call is about.
        kind: Kind,
        /// Its id.
        id: String,
        /// What did not happen in time.
        reason: String,
    },
    /// A file or system call on the node failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the path.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The pod's shim refused or failed a call.
    #[error("{call} {id}: {source}")]
    Shim {
        /// The CRI call.
        call: &'static str,
        /// The container (or sandbox) it was about.
        id: String,
        /// What the shim said, or why it could not be asked.
        #[source]
        source: ShimError,
    },
    /// The image store refused or failed.
    #[error("{call}: {source}")]
    Image {
        /// The CRI call.
        call: &'static str,
        /// The store's error.
        #[source]
        source: crius_image::Error,
    },
    /// A CNI plugin failed, the network it was given is unusable, or the pod's namespaces could not be made.
    #[error("{call} {id}: {source}")]
    Network {
        /// The CRI call.
        call: &'static str,
        /// The sandbox.
        id: String,
        /// What failed (boxed: it is the largest cause, and errors travel by value).
        #[source]
        source: Box<NetError>,
    },
    /// A file the request names that is not there.
    #[error("{call}: {} does not exist", path.display())]
    NoSuchPath {
        /// The call.
        call: &'static str,
        /// The path.
        path: std::path::PathBuf,
    },
    /// The thread doing the call's work panicked (a bug): the call did not finish.
    #[error("{call}: the call's task failed: {reason}")]
    TaskFailed {
        /// The call.
        call: &'static str,
        /// The panic.
        reason: String,
    },
    /// An NRI plugin refused the call (a create or an update it does not allow).
    #[error("{call}: NRI plugin {plugin} refused: {message}")]
    NriRefused {
        /// The call.
        call: &'static str,
        /// The plugin, `IDX-NAME`.
        plugin: String,
        /// What it said.
        message: String,
    },
    /// What the NRI plugins asked for cannot be done: two of them changed one field, or an adjustment or
    /// update does not apply.
    #[error("{call}: NRI: {reason}")]
    Nri {
        /// The call.
        call: &'static str,
        /// What went wrong, naming the plugins.
        reason: String,
    },
    /// A client of the container events stream fell this many events behind.
    #[error("{0} container events were dropped while this client fell behind: list again")]
    EventsLost(u64),
    /// A unary list's answer is over the gRPC message size kubelet takes: its Stream* call sends it in chunks.
    #[error(
        "{call}: the answer ({items} {what}) is {bytes} bytes, over the gRPC message limit of {limit} bytes: \
         narrow the filter, or call {instead}, which sends it in chunks"
    )]
    ListTooLarge {
        /// The call.
        call: &'static str,
        /// What it lists ("containers", ...).
        what: &'static str,
        /// How many there are.
        items: usize,
        /// The answer's encoded size.
        bytes: usize,
        /// The limit.
        limit: usize,
        /// The streaming call to use instead.
        instead: &'static str,
    },
    /// A call crius does not serve.
    #[error("crius does not serve RuntimeService/{0} yet")]
    Unimplemented(&'static str),
}

/// The result of a CRI call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// A malformed or missing request field.
    pub fn invalid(call: &'static str, field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            call,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The gRPC code of this error.
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::NotFound { .. } | Error::ImageNotPulled { .. } | Error::UnknownHandler { .. } => {
                Code::NotFound
            }
            Error::AlreadyExists { .. } => Code::AlreadyExists,
            Error::FailedPrecondition { .. } | Error::NetworkNotReady { .. } => Code::FailedPrecondition,
            Error::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Error::Io { .. } | Error::Network { .. } | Error::TaskFailed { .. } => Code::Internal,
            Error::NoSuchPath { .. } => Code::NotFound,
            Error::Shim { source, .. } => match source {
                ShimError::Refused { code, .. } => match code {
                    ShimCode::NotFound => Code::NotFound,
                    ShimCode::AlreadyExists => Code::AlreadyExists,
                    ShimCode::FailedPrecondition => Code::FailedPrecondition,
                    ShimCode::InvalidArgument => Code::InvalidArgument,
                    ShimCode::DeadlineExceeded => Code::DeadlineExceeded,
                    ShimCode::Unimplemented => Code::Unimplemented,
                    ShimCode::Other => Code::Internal,
                },
                ShimError::Timeout(_) => Code::DeadlineExceeded,
                ShimError::Unreachable(_) => Code::Unavailable,
                ShimError::Start(_) => Code::Internal,
            },
            Error::Image { source, .. } => image_code(source),
            Error::NriRefused { .. } => Code::FailedPrecondition,
            Error::Nri { .. } => Code::Internal,
            Error::EventsLost(_) => Code::DataLoss,
            Error::ListTooLarge { .. } => Code::ResourceExhausted,
            Error::Unimplemented(_) => Code::Unimplemented,
        }
    }
}

/// The gRPC code of an image store error: a malformed reference is `InvalidArgument`, an unknown image
/// `NotFound`, refused credentials `Unauthenticated`, an unreachable registry `Unavailable`.
fn image_code(e: &crius_image::Error) -> tonic::Code {
    use crius_image::Error as E;
    use tonic::Code;
    match e {
        E::InvalidArgument(_) | E::UnsafeEntry { .. } | E::LayerRefused { .. } => Code::InvalidArgument,
        E::NotFound(_) => Code::NotFound,
        E::Unauthenticated(_) => Code::Unauthenticated,
        E::Unavailable(_) => Code::Unavailable,
        E::DeadlineExceeded(_) => Code::DeadlineExceeded,
        E::PolicyRefused(_) => Code::PermissionDenied,
        E::DigestMismatch { .. } | E::SizeMismatch { .. } => Code::DataLoss,
        E::Registry(_) | E::Io { .. } => Code::Internal,
    }
}

impl From<Error> for Status {
    /// A failure of the node or of the runtime (Internal, Unknown) is also logged: the client's log is not the
    /// operator's. The answers to bad or stale requests (InvalidArgument, NotFound, ...) are the client's alone.
    fn from(e: Error) -> Status {
        let code = e.code();
        if matches!(code, tonic::Code::Internal | tonic::Code::Unknown) {
            tracing::warn!(code = ?code, "{e}");
        }
        Status::new(code, e.to_string())
    }
}

/// The gRPC code and message a client gets for `e` (for tests).
#[cfg(test)]
pub(crate) fn answer(e: Error) -> (tonic::Code, String) {
    let s = Status::from(e);
    (s.code(), s.message().to_string())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::Code;

    use super::*;

    use super::answer as status;

    #[test]
    fn invalid_argument_names_the_call_and_field() {
        let e = Error::invalid("ExecSync", "cmd", "is empty");
        assert_eq!(
            status(e),
            (Code::InvalidArgument, "ExecSync: cmd is empty".into())
        );
    }

    #[test]
    fn not_found_quotes_the_id() {
        let e = Error::NotFound {
            call: "ContainerStatus",
            kind: Kind::Container,
            id: "nope".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::NotFound,
                "ContainerStatus: container \"nope\" not found".into()
            )
        );
    }

    #[test]
    fn a_missing_image_says_pull_it_first() {
        let e = Error::ImageNotPulled {
            call: "CreateContainer",
            reference: "busybox".into(),
        };
        let (code, msg) = status(e);
        assert_eq!(code, Code::NotFound);
        assert!(
            msg.contains("\"busybox\"") && msg.ends_with("pull it first"),
            "{msg}"
        );
    }

    #[test]
    fn already_exists_names_the_holder() {
        let e = Error::AlreadyExists {
            call: "RunPodSandbox",
            kind: Kind::Sandbox,
            name: "web_default_u1_0".into(),
            holder: "abc".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::AlreadyExists,
                "RunPodSandbox: web_default_u1_0 is taken by sandbox abc".into()
            )
        );
    }

    #[test]
    fn failed_precondition_and_network_not_ready() {
        let e = Error::FailedPrecondition {
            call: "CreateContainer",
            kind: Kind::Sandbox,
            id: "abc".into(),
            reason: "is not ready".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::FailedPrecondition,
                "CreateContainer: sandbox abc is not ready".into()
            )
        );
        let e = Error::NetworkNotReady {
            call: "RunPodSandbox",
            source: Box::new(NetError::NoConfig("/etc/cni/net.d".into())),
        };
        assert_eq!(
            status(e),
            (
                Code::FailedPrecondition,
                "RunPodSandbox: the pod network is not ready: no network config found in /etc/cni/net.d"
                    .into()
            )
        );
    }

    #[test]
    fn deadline_exceeded() {
        let e = Error::DeadlineExceeded {
            call: "StopContainer",
            kind: Kind::Container,
            id: "abc".into(),
            reason: "is still running 60 s after SIGKILL".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::DeadlineExceeded,
                "StopContainer: container abc is still running 60 s after SIGKILL".into()
            )
        );
    }

    #[test]
    fn io_is_internal_with_its_context() {
        let e = Error::io("writing /x/config.json", std::io::Error::other("disk full"));
        assert_eq!(
            status(e),
            (Code::Internal, "writing /x/config.json: disk full".into())
        );
    }

    #[test]
    fn internal_failures_are_logged_and_bad_requests_are_not() {
        #[derive(Clone, Default)]
        struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Log {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Log::default();
        let w = log.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            let _ = status(Error::io(
                "writing /x/config.json",
                std::io::Error::other("disk full"),
            ));
            let _ = status(Error::NotFound {
                call: "ContainerStatus",
                kind: Kind::Container,
                id: "abc".into(),
            });
        });
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("WARN") && text.contains("writing /x/config.json: disk full"),
            "{text}"
        );
        assert!(!text.contains("abc"), "{text}");
    }

    #[test]
    fn shim_errors_keep_the_shims_code() {
        let shim = |source| Error::Shim {
            call: "StartContainer",
            id: "abc".into(),
            source,
        };
        let refused = |code| ShimError::Refused {
            code,
            message: "no".into(),
        };
        for (code, want) in [
            (ShimCode::NotFound, Code::NotFound),
            (ShimCode::AlreadyExists, Code::AlreadyExists),
            (ShimCode::FailedPrecondition, Code::FailedPrecondition),
            (ShimCode::InvalidArgument, Code::InvalidArgument),
            (ShimCode::DeadlineExceeded, Code::DeadlineExceeded),
            (ShimCode::Unimplemented, Code::Unimplemented),
            (ShimCode::Other, Code::Internal),
        ] {
            assert_eq!(status(shim(refused(code))).0, want, "{code:?}");
        }
        assert_eq!(status(shim(refused(ShimCode::Other))).1, "StartContainer abc: no");
        let (code, msg) = status(shim(ShimError::Timeout(Duration::from_secs(3))));
        assert_eq!(code, Code::DeadlineExceeded);
        assert!(msg.contains("3s"), "{msg}");
        let (code, msg) = status(shim(ShimError::Unreachable("connection refused".into())));
        assert_eq!(code, Code::Unavailable);
        assert!(
            msg.contains("the pod's shim") && msg.contains("connection refused"),
            "{msg}"
        );
        assert_eq!(
            status(shim(ShimError::Start("no binary".into()))).0,
            Code::Internal
        );
    }

    #[test]
    fn image_errors_keep_the_stores_meaning() {
        use crius_image::Error as E;
        let image = |source| Error::Image {
            call: "PullImage",
            source,
        };
        for (e, want) in [
            (E::InvalidArgument("x".into()), Code::InvalidArgument),
            (E::NotFound("x".into()), Code::NotFound),
            (E::Unauthenticated("x".into()), Code::Unauthenticated),
            (E::Unavailable("x".into()), Code::Unavailable),
            (E::DeadlineExceeded("x".into()), Code::DeadlineExceeded),
            (E::PolicyRefused("x".into()), Code::PermissionDenied),
            (E::Registry("x".into()), Code::Internal),
            (
                E::Io {
                    context: "x".into(),
                    source: std::io::Error::other("y"),
                },
                Code::Internal,
            ),
        ] {
            assert_eq!(status(image(e)).0, want);
        }
    }

    #[test]
    fn a_missing_path_and_a_failed_task() {
        let e = Error::NoSuchPath {
            call: "Import",
            path: "/nonexistent.tar".into(),
        };
        assert_eq!(
            status(e),
            (Code::NotFound, "Import: /nonexistent.tar does not exist".into())
        );
        let e = Error::TaskFailed {
            call: "ListImages",
            reason: "panicked".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::Internal,
                "ListImages: the call's task failed: panicked".into()
            )
        );
    }

    #[test]
    fn network_events_and_unimplemented() {
        let e = Error::Network {
            call: "RunPodSandbox",
            id: "abc".into(),
            source: Box::new(NetError::io("pinning", std::io::Error::other("no such device"))),
        };
        assert_eq!(
            status(e),
            (
                Code::Internal,
                "RunPodSandbox abc: pinning: no such device".into()
            )
        );
        let e = Error::NriRefused {
            call: "CreateContainer",
            plugin: "10-policy".into(),
            message: "no GPUs here".into(),
        };
        assert_eq!(
            status(e),
            (
                Code::FailedPrecondition,
                "CreateContainer: NRI plugin 10-policy refused: no GPUs here".into()
            )
        );
        let e = Error::Nri {
            call: "CreateContainer",
            reason: "plugins 10-a and 20-b both set linux.resources.cpu.shares".into(),
        };
        assert_eq!(status(e).0, Code::Internal);
        let (code, msg) = status(Error::EventsLost(7));
        assert_eq!(code, Code::DataLoss);
        assert!(msg.starts_with("7 container events"), "{msg}");
        assert_eq!(
            status(Error::Unimplemented("Exec")),
            (
                Code::Unimplemented,
                "crius does not serve RuntimeService/Exec yet".into()
            )
        );
    }
}
