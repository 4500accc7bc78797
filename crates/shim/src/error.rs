//! The shim's one error type, and its one mapping to ttrpc status codes (`From<Error> for ttrpc::Error`).
//! Variants are what the caller acts on (runwasi's shape), each carrying the message it gets; a test pins the
//! code of every variant.

use containerd_shim_protos::ttrpc::{self, Code};

use crate::task::State;

/// The shim's result.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// No such container or exec process (the message names it).
    #[error("{0} not found")]
    NotFound(String),
    /// Signalling a process that has exited. containerd's clients take NOT_FOUND there as "already done",
    /// as a Stop of something gone is.
    #[error("{0}: process already finished")]
    Finished(String),
    /// A Create or Exec of an id in use.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A malformed request, or stdio the request names that cannot be opened.
    #[error("{0}")]
    InvalidArgument(String),
    /// The process's state does not allow the transition the call asks for.
    #[error("{what} is {from}: {} (no transition {from} → {to})", refusal(.from, .to))]
    FailedPrecondition {
        /// The process.
        what: String,
        /// The state it is in.
        from: State,
        /// The state the call would have moved it to.
        to: State,
    },
    /// A call that needs the container's init running (Exec).
    #[error("{what} is {state}: {op} needs a running container")]
    NotRunning {
        /// The container.
        what: String,
        /// The state its init is in.
        state: State,
        /// What needed it.
        op: &'static str,
    },
    /// ResizePty of a process without a terminal.
    #[error("{0} has no terminal")]
    NoTerminal(String),
    /// The OCI runtime failed or misbehaved: its own message.
    #[error("{0}")]
    Runtime(String),
    /// The shim's own work on the host failed: mounting the rootfs, a terminal, a log file.
    #[error("{0}")]
    Host(String),
    /// A file the shim writes, or a system call of its own, failed.
    #[error("{context}: {source}")]
    Io {
        /// What the shim was doing.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A system call the shim makes through nix failed: its errno, shown as nix names it (`EPERM: ...`).
    #[error("{context}: {errno}")]
    Sys {
        /// What the shim was doing.
        context: String,
        /// The errno.
        #[source]
        errno: nix::errno::Errno,
    },
}

/// Why a transition is refused, for [`Error::FailedPrecondition`]'s message.
fn refusal(from: &State, to: &State) -> &'static str {
    State::refusal(*from, *to)
}

impl Error {
    /// The ttrpc code a caller gets for this error: the one place codes are chosen.
    pub(crate) fn code(&self) -> Code {
        match self {
            Error::NotFound(_) | Error::Finished(_) => Code::NOT_FOUND,
            Error::AlreadyExists(_) => Code::ALREADY_EXISTS,
            Error::InvalidArgument(_) => Code::INVALID_ARGUMENT,
            Error::FailedPrecondition { .. } | Error::NotRunning { .. } | Error::NoTerminal(_) => {
                Code::FAILED_PRECONDITION
            }
            Error::Runtime(_) | Error::Host(_) | Error::Io { .. } | Error::Sys { .. } => Code::INTERNAL,
        }
    }

    /// An [`Error::Io`]: `context` and the error.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }

    /// An [`Error::Sys`]: `context` and the errno.
    pub(crate) fn sys(context: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> Error {
        let context = context.into();
        move |errno| Error::Sys { context, errno }
    }
}

impl From<Error> for ttrpc::Error {
    fn from(e: Error) -> ttrpc::Error {
        ttrpc::Error::RpcStatus(ttrpc::get_status(e.code(), e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(e: Error) -> (Code, String) {
        match ttrpc::Error::from(e) {
            ttrpc::Error::RpcStatus(s) => (s.code(), s.message().to_string()),
            other => panic!("not a status: {other:?}"),
        }
    }

    #[test]
    fn not_found() {
        let got = status(Error::NotFound("container \"c1\"".into()));
        assert_eq!(got, (Code::NOT_FOUND, "container \"c1\" not found".into()));
    }

    #[test]
    fn finished() {
        let got = status(Error::Finished("the init process of \"c1\"".into()));
        let msg = "the init process of \"c1\": process already finished";
        assert_eq!(got, (Code::NOT_FOUND, msg.into()));
    }

    #[test]
    fn already_exists() {
        let got = status(Error::AlreadyExists("exec \"e1\"".into()));
        assert_eq!(got, (Code::ALREADY_EXISTS, "exec \"e1\" already exists".into()));
    }

    #[test]
    fn invalid_argument() {
        let got = status(Error::InvalidArgument("Create: id is empty".into()));
        assert_eq!(got, (Code::INVALID_ARGUMENT, "Create: id is empty".into()));
    }

    #[test]
    fn failed_precondition_names_from_and_to() {
        let (code, msg) = status(Error::FailedPrecondition {
            what: "the init process of container \"c1\"".into(),
            from: State::Running,
            to: State::Starting,
        });
        assert_eq!(code, Code::FAILED_PRECONDITION);
        assert_eq!(
            msg,
            "the init process of container \"c1\" is running: only a created process starts \
             (no transition running → starting)"
        );
    }

    #[test]
    fn not_running() {
        let (code, msg) = status(Error::NotRunning {
            what: "container \"c1\"".into(),
            state: State::Paused,
            op: "exec",
        });
        assert_eq!(code, Code::FAILED_PRECONDITION);
        assert_eq!(msg, "container \"c1\" is paused: exec needs a running container");
    }

    #[test]
    fn no_terminal() {
        let got = status(Error::NoTerminal("exec \"e1\" of container \"c1\"".into()));
        let msg = "exec \"e1\" of container \"c1\" has no terminal";
        assert_eq!(got, (Code::FAILED_PRECONDITION, msg.into()));
    }

    #[test]
    fn runtime() {
        let msg = "crius-runc create c1: exit status 1: process.user.uid: invalid type";
        assert_eq!(status(Error::Runtime(msg.into())), (Code::INTERNAL, msg.into()));
    }

    #[test]
    fn host() {
        let msg = "mounting overlay (overlay) on /b/rootfs: EPERM";
        assert_eq!(status(Error::Host(msg.into())), (Code::INTERNAL, msg.into()));
    }

    #[test]
    fn io_keeps_its_source() {
        let e = Error::Io {
            context: "writing /b/.update.json".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        assert!(std::error::Error::source(&e).is_some());
        let (code, msg) = status(e);
        assert_eq!(code, Code::INTERNAL);
        assert!(msg.starts_with("writing /b/.update.json: No space left"), "{msg}");
    }

    #[test]
    fn sys_keeps_nix_s_wording_and_its_errno() {
        let e = Error::sys("fork")(nix::errno::Errno::EAGAIN);
        assert!(matches!(
            &e,
            Error::Sys {
                errno: nix::errno::Errno::EAGAIN,
                ..
            }
        ));
        assert!(std::error::Error::source(&e).is_some());
        let (code, msg) = status(e);
        assert_eq!((code, msg.as_str()), (Code::INTERNAL, "fork: EAGAIN: Try again"));
    }
}
