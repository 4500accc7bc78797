//! The pod engine's one error type. Each variant is something a caller can act on: fix the manifest, make an
//! image available, look at the runtime (its CRI error keeps its gRPC code), or at this machine.
//!
//! Display carries the whole message, cause included ("creating /x: Permission denied"), because that text is
//! what reaches people: `crius run` prints it, and a container that could not start keeps it as the reason in
//! the report. The cause is also `source()`, for callers that walk the chain rather than print.

use crate::convert::Qos;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong running a pod.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manifest is wrong, or asks for something crius does not run. `at` says where: the file and document
    /// (`pod.yaml, document 1 (Pod "web")`), or the container or volume (`container "app"`).
    #[error("{at}: {reason}")]
    Manifest {
        /// Where in the manifest.
        at: String,
        /// What is wrong there.
        reason: String,
    },
    /// Manifests that strict validation ([`crate::validate::strict`]) refused: every problem found, one a line,
    /// each starting with its file and document.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<crate::validate::Problem>),
    /// An image a container needs is not on the node, and its pull policy forbids pulling it.
    #[error("{of}: image {image} is not present and may not be pulled (pull policy Never)")]
    ImageNotPresent {
        /// Who wants it: `container "app"`, `volume "data"`.
        of: String,
        /// The image, as it was asked for.
        image: String,
    },
    /// The runtime answered a CRI call with an error; [`Error::code`] is its gRPC code.
    #[error("{call}: {:?}: {}", .status.code(), .status.message())]
    Cri {
        /// The call, and on what (`CreateContainer`, `container "app": pulling busybox`).
        call: String,
        /// The runtime's answer (boxed: a `Status` is large, and errors travel in every `Result`).
        #[source]
        status: Box<tonic::Status>,
    },
    /// A container's lifecycle hook (`postStart`, `preStop`) failed or could not be run.
    #[error("{hook} hook: {reason}")]
    Hook {
        /// Which hook.
        hook: &'static str,
        /// How it failed: its command's exit and output, or why it did not run.
        reason: String,
    },
    /// A resize names a container the pod does not have.
    #[error("the pod has no container {0:?}")]
    NoSuchContainer(String),
    /// A resize Kubernetes does not allow (of a regular init container; a restart a `Never` pod forbids).
    #[error("{0}")]
    NotResizable(&'static str),
    /// A resize would change the pod's QoS class, which kubelet refuses too.
    #[error("the pod's QoS class would change from {from:?} to {to:?}: not allowed")]
    QosChange {
        /// The pod's class.
        from: Qos,
        /// The class the resize would give it.
        to: Qos,
    },
    /// The pod's cgroup could not be made, written or removed.
    #[error("{0}")]
    Cgroup(String),
    /// A file or mount on this machine (volumes, log directories) could not be made.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`creating /var/log/pods/...`).
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An invalid-manifest error at `at`.
    pub fn manifest(at: impl Into<String>, reason: impl ToString) -> Error {
        Error::Manifest {
            at: at.into(),
            reason: reason.to_string(),
        }
    }

    /// Turns the runtime's answer to `call` into an error (for `map_err`).
    pub(crate) fn cri(call: impl Into<String>) -> impl FnOnce(tonic::Status) -> Error {
        let call = call.into();
        move |status| Error::Cri {
            call,
            status: Box::new(status),
        }
    }

    /// Turns an I/O error into one that says what was being done (for `map_err`).
    pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// The runtime's gRPC code, for an error the runtime returned.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            Error::Cri { status, .. } => Some(status.code()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of each variant: `crius run` prints it, and tests of the engine look for parts of it.
    #[test]
    fn each_variant_reads_as_before() {
        let cases = [
            (
                Error::manifest("p.yaml, document 1 (Pod \"p\")", "no spec"),
                "p.yaml, document 1 (Pod \"p\"): no spec",
            ),
            (
                Error::ImageNotPresent {
                    of: "container \"work\"".into(),
                    image: "nothere:1".into(),
                },
                "container \"work\": image nothere:1 is not present and may not be pulled (pull policy Never)",
            ),
            (
                Error::cri("RunPodSandbox")(tonic::Status::unavailable("gone")),
                "RunPodSandbox: Unavailable: gone",
            ),
            (
                Error::Hook {
                    hook: "postStart",
                    reason: "exited 1: no".into(),
                },
                "postStart hook: exited 1: no",
            ),
            (
                Error::NoSuchContainer("x".into()),
                "the pod has no container \"x\"",
            ),
            (
                Error::NotResizable("regular init containers cannot be resized"),
                "regular init containers cannot be resized",
            ),
            (
                Error::QosChange {
                    from: Qos::BestEffort,
                    to: Qos::Burstable,
                },
                "the pod's QoS class would change from BestEffort to Burstable: not allowed",
            ),
            (
                Error::io("creating /x")(std::io::Error::from_raw_os_error(13)),
                "creating /x: Permission denied (os error 13)",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn a_runtime_error_keeps_its_code_and_cause() {
        let e = Error::cri("StartContainer")(tonic::Status::not_found("no such container"));
        assert_eq!(e.code(), Some(tonic::Code::NotFound));
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(Error::NoSuchContainer("x".into()).code(), None);
        let io = Error::io("writing /x")(std::io::Error::from_raw_os_error(28));
        let cause = std::error::Error::source(&io).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            cause.map(std::io::Error::kind),
            Some(std::io::ErrorKind::StorageFull)
        );
    }
}
