//! crius-nri's one error type. Variants are what the caller acts on: a plugin refused the container (fail the
//! CRI call with its message), two plugins changed one field (fail, naming both), an adjustment that cannot be
//! applied (fail, naming the field), or the socket or protocol failing (log; NRI is then unavailable).

/// An error of the NRI host, the plugin side, or [`crate::apply`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A plugin answered a create or update with an error: the container must not be created or updated.
    #[error("NRI plugin {plugin} refused: {message}")]
    Refused {
        /// The plugin, as `IDX-NAME`.
        plugin: String,
        /// What the plugin said.
        message: String,
    },
    /// Two plugins changed the same field of one container (NRI's ownership rule).
    #[error("NRI plugins {} and {} both change {field}", plugins[0], plugins[1])]
    Conflict {
        /// The field, with the entry it is about where it has entries (e.g. `env FOO`, `mount /data`).
        field: String,
        /// The plugin that changed it first, then the one that tried again.
        plugins: [String; 2],
    },
    /// An adjustment that cannot be put into the OCI spec (an unknown rlimit, a device type, ...).
    #[error("NRI adjustment: invalid {field}: {reason}")]
    Invalid {
        /// The adjusted field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A system call on the socket, the plugin dir or a plugin process failed.
    #[error("NRI: {context}: {source}")]
    Io {
        /// What was being done, naming the path or plugin.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The peer broke the protocol (a bad frame, an undecodable message, an oversized message).
    #[error("NRI protocol: {0}")]
    Protocol(String),
    /// A message larger than ttrpc allows (4 MiB).
    #[error("NRI message of {len} bytes exceeds ttrpc's maximum of {max}")]
    Oversized {
        /// The message's length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The peer answered a call with a ttrpc error status.
    #[error("NRI call {method}: status {code}: {message}")]
    Status {
        /// `Service/Method`.
        method: String,
        /// The gRPC status code.
        code: i32,
        /// The peer's message.
        message: String,
    },
    /// A logical connection held more received and unread bytes than its budget (the peer sends faster than
    /// it is read): the multiplexed stream was closed, every connection on it with it.
    #[error(
        "NRI connection {conn}: {queued} bytes received and not read, over its budget of {budget}; the stream was closed"
    )]
    Overrun {
        /// The logical connection (1: the Plugin service, 2: the Runtime service).
        conn: u32,
        /// The bytes it held with the frame that passed the budget.
        queued: usize,
        /// The budget.
        budget: usize,
    },
    /// The connection closed before the answer came.
    #[error("NRI connection closed")]
    Closed,
    /// No answer within the timeout.
    #[error("NRI call {method} timed out after {after:?}")]
    Timeout {
        /// `Service/Method`.
        method: String,
        /// The timeout that passed.
        after: std::time::Duration,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}
