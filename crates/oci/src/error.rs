//! Errors of the runtime library: each says what failed and on which object, so a caller can act on it.

use std::fmt::Display;

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
        /// Its status (`created`, `running`, `stopped`, ...).
        status: String,
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
    /// Something else failed; the message carries the context.
    #[error("{0}")]
    Msg(String),
}

impl Error {
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
