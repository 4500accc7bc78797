//! crius-workloads' one error type, and the one place its gRPC codes are chosen ([`From<Error> for Status`]).
//!
//! Variants are what a caller acts on: an object that is not there, a name already taken, a request to fix
//! (a manifest, a patch, a selector, a kind), the pod engine's own error, or this machine's records. Display
//! is the whole message, as kubectl would print it; the gRPC adapter ([`crate::grpc`]) sends it unchanged.

use tonic::{Code, Status};

use crate::Kind;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the pod service.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No object of `kind` named `name` (in the namespace asked).
    #[error("{} {name:?} not found", kind.plural())]
    NotFound {
        /// What was looked for.
        kind: Kind,
        /// Its name.
        name: String,
    },
    /// An object of `kind` named `name` is already kept.
    #[error("{} {name:?} already exists", kind.plural())]
    AlreadyExists {
        /// Its kind.
        kind: Kind,
        /// Its name.
        name: String,
    },
    /// The request is wrong as sent: a manifest or update the API server would refuse, a patch, a selector, a
    /// kind crius does not keep. The text says where and why.
    #[error("{0}")]
    Invalid(String),
    /// The pod engine's error (a manifest it cannot run, a runtime's answer, this machine's).
    #[error(transparent)]
    Pod(#[from] crius_pod::Error),
    /// A record under criusd's root could not be written or removed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`writing /var/lib/crius/pod-service/pods/default_web.json`).
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An invalid request, saying `what`.
    pub(crate) fn invalid(what: impl std::fmt::Display) -> Error {
        Error::Invalid(what.to_string())
    }

    /// Turns an I/O error into one that says what was being done (for `map_err`).
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

/// The only mapping to gRPC: the message is the error's Display, the code what a client acts on. The engine's
/// errors keep the codes the service always gave them: a manifest's mistake is InvalidArgument, a runtime's
/// error keeps its own code, the rest is Internal.
impl From<Error> for Status {
    fn from(e: Error) -> Status {
        let code = match &e {
            Error::NotFound { .. } => Code::NotFound,
            Error::AlreadyExists { .. } => Code::AlreadyExists,
            Error::Invalid(_) => Code::InvalidArgument,
            Error::Pod(
                crius_pod::Error::Manifest { .. }
                | crius_pod::Error::Invalid(_)
                | crius_pod::Error::NoSuchContainer(_),
            ) => Code::InvalidArgument,
            Error::Pod(p) => p.code().unwrap_or(Code::Internal),
            Error::Io { .. } => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

/// An Internal status for a failure that is no error of the service's (a task that panicked).
pub(crate) fn internal(what: impl std::fmt::Display) -> Status {
    Status::new(Code::Internal, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: Error) -> (Code, String) {
        let s = Status::from(e);
        (s.code(), s.message().to_string())
    }

    #[test]
    fn not_found_names_the_resource_and_the_name() {
        let e = Error::NotFound {
            kind: Kind::Deployment,
            name: "web".into(),
        };
        assert_eq!(
            status(e),
            (Code::NotFound, "deployments \"web\" not found".into())
        );
    }

    #[test]
    fn already_exists_names_the_resource_and_the_name() {
        let e = Error::AlreadyExists {
            kind: Kind::Pod,
            name: "web".into(),
        };
        assert_eq!(
            status(e),
            (Code::AlreadyExists, "pods \"web\" already exists".into())
        );
    }

    #[test]
    fn an_invalid_request_is_invalid_argument_with_its_text() {
        let e = Error::invalid("unable to parse requirement: \"a b\"");
        assert_eq!(
            status(e),
            (
                Code::InvalidArgument,
                "unable to parse requirement: \"a b\"".into()
            )
        );
    }

    #[test]
    fn the_engines_errors_keep_their_codes() {
        let manifest = Error::from(crius_pod::Error::manifest("p.yaml", "no spec"));
        assert_eq!(
            status(manifest),
            (Code::InvalidArgument, "p.yaml: no spec".into())
        );
        let none = Error::from(crius_pod::Error::NoSuchContainer("x".into()));
        assert_eq!(status(none).0, Code::InvalidArgument);
        let cri = Error::from(crius_pod::Error::Cri {
            call: "StartContainer".into(),
            status: Box::new(Status::unavailable("gone")),
        });
        assert_eq!(
            status(cri),
            (Code::Unavailable, "StartContainer: Unavailable: gone".into())
        );
        let hook = Error::from(crius_pod::Error::Hook {
            hook: "postStart",
            reason: "exited 1".into(),
        });
        assert_eq!(status(hook).0, Code::Internal);
    }

    #[test]
    fn a_records_failure_is_internal_and_says_what_was_done() {
        let e = Error::io("writing /x")(std::io::Error::from_raw_os_error(28));
        let (code, message) = status(e);
        assert_eq!(code, Code::Internal);
        assert!(message.starts_with("writing /x: "), "{message}");
    }
}
