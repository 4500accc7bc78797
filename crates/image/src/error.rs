//! Errors of the image store: each names the image, blob or path it is about.

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
    /// An I/O or system error, with what was being done.
    #[error("{0}")]
    Io(String),
}

/// Wraps an I/O error with context.
pub(crate) fn io(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{what}: {e}"))
}
