//! The one error of the client API ([`crate::client`]): starting a shim, connecting to it, calling its Task
//! API and running its `delete` action. Variants are what a caller acts on: the shim refused (its status
//! code), the call's deadline passed (the connection is fine, the answer is late), the connection is gone,
//! or the shim's process could not be run or reported a failure.

use std::time::Duration;

use containerd_shim_protos::ttrpc::Code;

/// The client API's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The shim answered with an error status.
    #[error("rpc status: {code:?}: {message}")]
    Refused {
        /// Its status code.
        code: Code,
        /// Its message.
        message: String,
    },
    /// No answer came within the call's deadline; the answer, if one comes, is dropped.
    #[error("no answer within the call's deadline ({deadline:?}) for {method}")]
    Timeout {
        /// The Task API method (`Kill`).
        method: String,
        /// The call's deadline.
        deadline: Duration,
    },
    /// The connection ended or broke (the shim exited or closed it, or a write failed): a new connection
    /// may do.
    #[error("socket err: {0}")]
    Closed(String),
    /// A request or answer that is not valid ttrpc or protobuf (encoding, decoding, over the frame size).
    #[error("ttrpc err: {0}")]
    Protocol(String),
    /// The shim's `start` or `delete` action ran and failed: the action (`<shim> delete <id>`) and what it
    /// said.
    #[error("{action}: {output}")]
    Action {
        /// The action and its shim and container.
        action: String,
        /// Its exit status and output, or why its answer is unusable.
        output: String,
    },
    /// A system call failed: connecting to the shim's socket, running the shim binary.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The shim's status code, if it answered with one.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the call's deadline passed (the shim is there; what was asked did not happen in time).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_keeps_its_code() {
        let e = Error::Refused {
            code: Code::NOT_FOUND,
            message: "no task c1".into(),
        };
        assert_eq!(e.code(), Some(Code::NOT_FOUND));
        assert!(!e.is_timeout());
        assert_eq!(e.to_string(), "rpc status: NOT_FOUND: no task c1");
    }

    #[test]
    fn timeout_names_the_method_and_deadline() {
        let e = Error::Timeout {
            method: "Kill".into(),
            deadline: Duration::from_secs(2),
        };
        assert!(e.is_timeout() && e.code().is_none());
        assert_eq!(
            e.to_string(),
            "no answer within the call's deadline (2s) for Kill"
        );
    }

    #[test]
    fn closed_and_protocol_keep_ttrpc_s_wording() {
        let closed = Error::Closed("the shim closed the connection".into());
        assert_eq!(closed.to_string(), "socket err: the shim closed the connection");
        let bad = Error::Protocol("decoding the answer to State: bad".into());
        assert_eq!(bad.to_string(), "ttrpc err: decoding the answer to State: bad");
        assert!(closed.code().is_none() && !bad.is_timeout());
    }

    #[test]
    fn action_and_io() {
        let a = Error::Action {
            action: "/bin/shim delete c1".into(),
            output: "bad response: truncated".into(),
        };
        assert_eq!(a.to_string(), "/bin/shim delete c1: bad response: truncated");
        let io = Error::Io {
            context: "connecting to shim unix:///none".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert!(std::error::Error::source(&io).is_some());
        assert!(
            io.to_string()
                .starts_with("connecting to shim unix:///none: No such file")
        );
    }
}
