//! Errors of the runtime library: each says what failed and on which object, so a caller can act on it.
//!
//! Typed variants are what callers tell apart: a container that is not there ([`Error::NotFound`]) or
//! already is ([`Error::AlreadyExists`]), one in the wrong state for the verb ([`Error::WrongState`], with the
//! state), and a system call that failed with its errno, operation and path ([`Error::Io`], [`Error::Sys`];
//! [`Error::errno`] reads either). The rest carry their context in a message ([`Error::Msg`], made by
//! [`err!`](crate::err) and [`Context::ctx`]); CRIU's failures carry its log's end ([`Error::Criu`]).

use std::fmt::Display;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The container id is not usable as a directory name.
    #[error("invalid container id {id:?}: {reason}")]
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No container with this id exists under the root.
    #[error("container {0:?} does not exist")]
    NotFound(String),
    /// A container with this id already exists under the root.
    #[error("container {0:?} already exists")]
    AlreadyExists(String),
    /// The operation is not valid in the container's current state.
    #[error("container {id:?} is {status}: cannot {action}")]
    WrongState {
        /// The container.
        id: String,
        /// Its status.
        status: crate::Status,
        /// What was asked.
        action: String,
    },
    /// The bundle's config.json is malformed or asks for something invalid; `field` names where.
    #[error("invalid config {file}: {field}: {msg}")]
    Config {
        /// The config file.
        file: String,
        /// The JSON path of the field (`process.user.uid`).
        field: String,
        /// What is wrong.
        msg: String,
    },
    /// A cgroup limit cannot be applied (missing controller, value refused, ...).
    #[error("cgroup {path}: {msg}")]
    Cgroup {
        /// The cgroup (or cgroup file).
        path: String,
        /// What failed.
        msg: String,
    },
    /// A system call through std failed: `op` (`opening`, `removing`) on `path`, if it has one.
    #[error("{op}{}: {source}", at(.path))]
    Io {
        /// What was being done.
        op: String,
        /// The file it was done to.
        path: Option<PathBuf>,
        /// Why it failed (its errno, when the kernel gave one).
        #[source]
        source: std::io::Error,
    },
    /// A system call through nix failed: `op` (`kill 42 of "c1"`) on `path`, if it has one, with its errno.
    #[error("{op}{}: {errno}", at(.path))]
    Sys {
        /// What was being done.
        op: String,
        /// The file it was done to.
        path: Option<PathBuf>,
        /// The errno.
        #[source]
        errno: Errno,
    },
    /// CRIU failed to dump or restore a container: what it did, how it ended, its log and the log's last lines
    /// (its `Error` lines when it has some).
    #[error("{action} of container {id:?} failed ({status}); from {}:\n{tail}", log.display())]
    Criu {
        /// `criu dump`, `criu restore`, ...
        action: String,
        /// The container.
        id: String,
        /// How CRIU ended (`exit status: 1`).
        status: String,
        /// CRIU's log file.
        log: PathBuf,
        /// The end of that log.
        tail: String,
    },
    /// Something else failed; the message carries the context.
    #[error("{0}")]
    Msg(String),
}

/// ` <path>`, or nothing: how [`Error::Io`] and [`Error::Sys`] show their path after the operation.
fn at(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}

impl Error {
    /// An [`Error::Io`] of `op` on `path`, for `map_err`.
    pub fn io(op: impl Into<String>, path: impl AsRef<Path>) -> impl FnOnce(std::io::Error) -> Error {
        let (op, path) = (op.into(), path.as_ref().to_path_buf());
        move |source| Error::Io {
            op,
            path: Some(path),
            source,
        }
    }

    /// An [`Error::Sys`] of `op` (on no path), for `map_err`.
    pub fn sys(op: impl Into<String>) -> impl FnOnce(Errno) -> Error {
        let op = op.into();
        move |errno| Error::Sys {
            op,
            path: None,
            errno,
        }
    }

    /// The kernel's errno, when a system call failed ([`Error::Io`] with one, [`Error::Sys`]).
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Io { source, .. } => source.raw_os_error().map(Errno::from_raw),
            Error::Sys { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// A config error about `field` of the given config file.
    pub fn config(file: impl Display, field: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Config {
            file: file.to_string(),
            field: field.into(),
            msg: msg.into(),
        }
    }
}

/// Adds a description of what was being done to a low-level error.
pub trait Context<T> {
    /// Wraps the error as `"<what>: <error>"`.
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Display> Context<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Msg(format!("{}: {e}", what())))
    }
}

/// Builds an [`Error::Msg`] from a format string.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => { $crate::Error::Msg(format!($($arg)*)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_and_sys_show_op_path_and_errno_as_the_messages_did() {
        let e = Error::io("removing", "/run/c1")(std::io::Error::from_raw_os_error(libc::EBUSY));
        assert_eq!(e.errno(), Some(Errno::EBUSY));
        assert!(
            e.to_string()
                .starts_with("removing /run/c1: Device or resource busy"),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        let e = Error::sys("kill 42 of \"c1\"")(Errno::ESRCH);
        assert_eq!(e.errno(), Some(Errno::ESRCH));
        assert_eq!(e.to_string(), "kill 42 of \"c1\": ESRCH: No such process");
        assert_eq!(err!("x").errno(), None);
    }

    #[test]
    fn the_container_variants_keep_runc_s_wording() {
        assert_eq!(
            Error::NotFound("c1".into()).to_string(),
            "container \"c1\" does not exist"
        );
        assert_eq!(
            Error::AlreadyExists("c1".into()).to_string(),
            "container \"c1\" already exists"
        );
        let wrong = Error::WrongState {
            id: "c1".into(),
            status: crate::Status::Paused,
            action: "exec in it".into(),
        };
        assert_eq!(wrong.to_string(), "container \"c1\" is paused: cannot exec in it");
    }
}
