//! crius-cri: the CRI services criusd serves, as adapters over the crates that do the work:
//! `runtime.v1.ImageService` ([`image::ImageService`]) and the project's own `crius.images.v1.Images`
//! ([`images_api::ImagesApi`]), both over one [`crius_image::Store`]; and `runtime.v1.RuntimeService`
//! ([`runtime::RuntimeService`]), which so far serves the runtime's status, the pod sandboxes ([`pod`]: pinned
//! namespaces from [`netns`], networks from CNI plugins via [`cni`], records in [`sandbox`]) and the container
//! lifecycle ([`containers`], run by the pod's shim from a spec made by [`convert`]).
//!
//! Errors become gRPC statuses that name what they are about: a malformed reference is `InvalidArgument`, an
//! unknown image `NotFound`, refused credentials `Unauthenticated`, an unreachable registry `Unavailable`.

pub mod cni;
pub mod containers;
pub mod convert;
pub mod error;
pub mod events;
pub mod exec;
pub mod image;
pub mod images_api;
pub mod netns;
pub mod pod;
mod records;
pub mod runtime;
pub mod sandbox;
pub mod shim;

use std::collections::HashMap;

/// How images are pulled and kept; from criusd's config file and flags.
#[derive(Debug, Clone, Default)]
pub struct ImageConfig {
    /// Registry host → mirror host (`docker.io` → `mirror.local:5000`).
    pub mirrors: HashMap<String, String>,
    /// Hosts reached over plain http (loopback registries always are).
    pub insecure: Vec<String>,
    /// Images reported `pinned` (exempt from kubelet's image GC), e.g. the sandbox image.
    pub pinned: Vec<String>,
}

/// The gRPC status for an image error.
pub fn status(e: crius_image::Error) -> tonic::Status {
    use crius_image::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidArgument(_) | E::UnsafeEntry { .. } => tonic::Status::invalid_argument(msg),
        E::NotFound(_) => tonic::Status::not_found(msg),
        E::Unauthenticated(_) => tonic::Status::unauthenticated(msg),
        E::Unavailable(_) => tonic::Status::unavailable(msg),
        E::DigestMismatch { .. } => tonic::Status::data_loss(msg),
        E::Io(_) => tonic::Status::internal(msg),
    }
}
