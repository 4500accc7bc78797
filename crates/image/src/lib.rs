//! crius-image: where container images live on a node.
//!
//! ```text
//! <root>/blobs/sha256/<hex>      content-addressed blobs (manifests, configs, compressed layers), digest-checked
//! <root>/ingest/                 blobs being written; renamed into blobs/ only once their digest matches
//! <root>/layers/<diff-id>/fs     each layer unpacked once (whiteouts as overlayfs whiteouts)
//! <root>/images/<config-hex>.json image records: id (config digest), names, repo digests, manifest, layers
//! <root>/snapshots/<id>/{upper,work,rootfs}   a container's overlay of the image's layers (the snapshot
//!                                 root can be moved elsewhere: [`Store::with_snapshot_root`])
//! ```
//! Nothing half-done is visible: blobs and layers are written under temporary names and renamed into place,
//! image records are written atomically, and a crash leaves only temporary entries that the next open removes.
//!
//! Pulls and imports store blobs and layers first and the image record last; removing an image collects the
//! blobs and layers nothing uses any more (see [`gc`]).

pub mod artifact;
pub mod bounded;
pub mod checkpoint;
pub mod digest;
mod download;
pub mod entries;
pub mod error;
mod fetch;
pub mod gate;
pub mod gc;
pub mod import;
pub mod ingest;
pub mod manifest;
pub mod mount_points;
pub mod policy;
pub mod pull;
pub mod reference;
mod signature;
pub mod snapshot;
pub mod store;
pub mod unpack;

pub use digest::Digest;
pub use error::{Error, Result};
pub use store::{ImageRecord, Store};
