//! The crate's one error: why a streaming server could not start or hand out a URL, why a port could not be
//! forwarded, why a client could not have its session. What a [`Backend`](crate::Backend) reports is a
//! [`Failure`](crate::backend::Failure), which the server shows the client; the SPDY layer keeps its own
//! ([`spdy::conn::Error`](crate::spdy::conn::Error)).

/// The result type of this crate's functions.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O or system error, with what was being done (binding the server, reaching it, reading randomness
    /// for a token); the error itself is the source.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`connecting to 127.0.0.1:10010`).
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The server's TLS certificate or key is unusable; the message names the file.
    #[error("the streaming server's TLS: {0}")]
    Tls(String),
    /// Too many requests wait for their connection already: no token was handed out.
    #[error(
        "{} streaming requests are waiting for their connection already",
        crate::token::MAX_PENDING
    )]
    TooManyPending,
    /// A transport name that is neither `spdy` nor `websocket`.
    #[error("transport {0:?}: spdy or websocket")]
    UnknownTransport(String),
    /// The port-forward request does not let the client reach this port.
    #[error("{}", port_refusal(*port, ports))]
    PortNotAllowed {
        /// The port asked for.
        port: u16,
        /// The ports the PortForward request allows (empty: any but 0).
        ports: Vec<i32>,
    },
    /// The backend could not connect to the pod's port; the message is what kubelet's server says.
    #[error("error forwarding port {port} to pod {sandbox}, uid : {source}")]
    Forward {
        /// The pod.
        sandbox: String,
        /// The port.
        port: u16,
        /// What the backend said.
        source: crate::backend::Failure,
    },
    /// The URL is not one this client can reach.
    #[error("streaming URL {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The server refused the upgrade.
    #[error("the streaming server refused {url}: {status} {body}")]
    Refused {
        /// The URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What it said.
        body: String,
    },
    /// The protocol went wrong, or the session ended with an error the server sent.
    #[error("{0}")]
    Protocol(String),
}

impl Error {
    /// An [`Error::Io`] with `context`, for `map_err`.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

fn port_refusal(port: u16, ports: &[i32]) -> String {
    if port == 0 {
        "port 0 is not a port".into()
    } else {
        format!("port {port} is not among the ports {ports:?} of the PortForward request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{ErrorKind, Failure};

    #[test]
    fn messages_are_the_ones_clients_were_shown() {
        let e = Error::PortNotAllowed {
            port: 0,
            ports: vec![],
        };
        assert_eq!(e.to_string(), "port 0 is not a port");
        let e = Error::PortNotAllowed {
            port: 81,
            ports: vec![80],
        };
        assert_eq!(
            e.to_string(),
            "port 81 is not among the ports [80] of the PortForward request"
        );
        let e = Error::Forward {
            sandbox: "p1".into(),
            port: 80,
            source: Failure::new(ErrorKind::Internal, "refused"),
        };
        assert_eq!(e.to_string(), "error forwarding port 80 to pod p1, uid : refused");
        assert_eq!(
            Error::UnknownTransport("h2".into()).to_string(),
            "transport \"h2\": spdy or websocket"
        );
        assert_eq!(
            Error::TooManyPending.to_string(),
            format!(
                "{} streaming requests are waiting for their connection already",
                crate::token::MAX_PENDING
            )
        );
    }

    #[test]
    fn io_keeps_its_source_and_context() {
        let e = Error::io("binding the streaming server to 127.0.0.1:1")(std::io::Error::from(
            std::io::ErrorKind::AddrInUse,
        ));
        let Error::Io { context, source } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(context, "binding the streaming server to 127.0.0.1:1");
        assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        assert!(std::error::Error::source(&e).is_some());
    }
}
