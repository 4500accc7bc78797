//! Errors of the image store: each names the image, blob or path it is about; the registry client's errors
//! are sorted into them here (`Error::from_registry`).

use oci_client::errors::OciDistributionError;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A reference, digest or archive is malformed; the message names it.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No such image or blob.
    #[error("not found: {0}")]
    NotFound(String),
    /// Content did not match its digest; nothing was stored.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The blob or layer.
        what: String,
        /// The digest it should have.
        expected: String,
        /// The digest it has.
        actual: String,
    },
    /// A blob is larger (or smaller) than its descriptor says; nothing was stored, and no more than its size
    /// and one byte was read.
    #[error("size mismatch for {what}: its descriptor says {expected} bytes, it has {actual}")]
    SizeMismatch {
        /// The blob.
        what: String,
        /// The size its descriptor gives.
        expected: u64,
        /// What it has ("more" when reading stopped at the size and one byte).
        actual: String,
    },
    /// A layer tries to write outside its directory or is otherwise unsafe; nothing outside was written.
    #[error("unsafe layer entry {path:?}: {why}")]
    UnsafeEntry {
        /// The entry's path in the layer.
        path: String,
        /// Why it is refused.
        why: &'static str,
    },
    /// A layer (or an archive) goes past a cap: its size, its entries, an extension header or a name; nothing
    /// of it is kept.
    #[error("{layer} refused: {why}")]
    LayerRefused {
        /// The layer (`layer sha256:…`) or the archive.
        layer: String,
        /// What it holds and the cap it passes.
        why: String,
    },
    /// The registry refused the credentials (or asked for some).
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The registry could not be reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A download made no progress for the pull's progress timeout and was cancelled; the message names the
    /// blob (or manifest) and its repository. Nothing of it was kept.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// The signature policy refuses the image (rejected, or no signature verifies); the message names the image
    /// and why. Nothing of it was fetched but its manifest.
    #[error("refused by the signature policy: {0}")]
    PolicyRefused(String),
    /// The registry did not deliver: it answered with an error status, or the exchange with it failed other
    /// than by being unreachable; the message names the image and what was said.
    #[error("{0}")]
    Registry(String),
    /// An I/O or system error, with what was being done; the error itself is the source.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (`writing blob sha256:…`).
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Sorts an error of the registry client by what the caller acts on: a missing manifest or an unknown name,
    /// blob or manifest is [`Error::NotFound`], refused credentials [`Error::Unauthenticated`], an unreachable
    /// or silent registry [`Error::Unavailable`], anything else [`Error::Registry`]; each message starts with
    /// `what` (the image, or the blob and its image).
    pub(crate) fn from_registry(what: &str, e: OciDistributionError) -> Error {
        match e {
            OciDistributionError::ImageManifestNotFoundError(m) => Error::NotFound(format!("{what}: {m}")),
            OciDistributionError::RegistryError { envelope, .. }
                if envelope
                    .errors
                    .iter()
                    .any(|x| format!("{:?}", x.code).contains("Unknown")) =>
            {
                Error::NotFound(format!("{what}: {envelope:?}"))
            }
            e @ (OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. }) => {
                Error::Unauthenticated(format!("{what}: {e}"))
            }
            OciDistributionError::RequestError(e) if e.is_connect() || e.is_timeout() => {
                Error::Unavailable(format!("{what}: {e}"))
            }
            other => Error::Registry(format!("{what}: {other}")),
        }
    }
}

/// Wraps an I/O error (or one that converts to it: an errno, a JSON error) with what was being done.
pub(crate) fn io(what: impl std::fmt::Display, e: impl Into<std::io::Error>) -> Error {
    Error::Io {
        context: what.to_string(),
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_keeps_its_source_and_context() {
        let e = io(
            "writing blob sha256:ab",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let Error::Io { context, source } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(context, "writing blob sha256:ab");
        assert_eq!(source.raw_os_error(), Some(libc::ENOSPC));
        assert!(std::error::Error::source(&e).is_some());
        assert!(
            e.to_string().starts_with("writing blob sha256:ab: No space left"),
            "{e}"
        );
    }

    #[test]
    fn registry_errors_are_sorted_by_what_the_caller_does() {
        use oci_client::errors::{OciEnvelope, OciError, OciErrorCode};
        let what = "docker.io/x:1";
        let e = Error::from_registry(
            what,
            OciDistributionError::ImageManifestNotFoundError("gone".into()),
        );
        assert!(
            matches!(&e, Error::NotFound(m) if m == "docker.io/x:1: gone"),
            "{e:?}"
        );
        let unknown = OciDistributionError::RegistryError {
            envelope: OciEnvelope {
                errors: vec![OciError {
                    code: OciErrorCode::ManifestUnknown,
                    message: String::new(),
                    detail: serde_json::Value::Null,
                }],
            },
            url: "http://r/v2/x/manifests/1".into(),
        };
        let e = Error::from_registry(what, unknown);
        assert!(
            matches!(&e, Error::NotFound(m) if m.starts_with("docker.io/x:1: ")),
            "{e:?}"
        );
        let e = Error::from_registry(what, OciDistributionError::AuthenticationFailure("no".into()));
        assert!(
            matches!(&e, Error::Unauthenticated(m) if m == "docker.io/x:1: Authentication failure: no"),
            "{e:?}"
        );
        let e = Error::from_registry(what, OciDistributionError::PullNoLayersError);
        assert!(
            matches!(&e, Error::Registry(m) if m.starts_with("docker.io/x:1: ")),
            "{e:?}"
        );
    }

    #[test]
    fn registry_is_its_message() {
        let e = Error::Registry("docker.io/x:1: manifest: 500 Internal Server Error: down".into());
        assert_eq!(
            e.to_string(),
            "docker.io/x:1: manifest: 500 Internal Server Error: down"
        );
    }
}
