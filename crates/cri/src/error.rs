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
#[path = "error_tests.rs"]
mod tests;
