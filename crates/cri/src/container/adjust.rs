//! CreateContainer's adjust step: the one seam where the spec that [`crate::convert::spec`] made from the
//! request is changed by what the request points at outside itself. Each [`Adjust`] gets the spec and the
//! request's [`Context`], in order; an error fails the create (its rollback takes apart what was made).
//!
//! Two adjusters run, in this order: the image volumes' mounts ([`super::image_volumes::Mounts`]), whose
//! sources are the snapshots the snapshot step made; then the CDI devices ([`crate::cdi::Devices`]: the
//! request's `CDI_devices` and `cdi.k8s.io/*` annotations resolved to device nodes, mounts, env, hooks and
//! groups); then the NRI plugins' adjustment ([`crate::nri::Adjuster`], when NRI is on: the plugins see the
//! spec the others made, and a CDI device a plugin adds is resolved by the CDI code). Nothing else in the
//! create path changes the spec. An adjuster that needs node state reads it itself; the conversion stays
//! pure.
//!
//! The trait is sync: CreateContainer runs on a blocking thread, never an async worker (see
//! [`super`]), so an adjuster with async work (NRI's ttrpc calls) hands it to the runtime and waits for it
//! there, bounded by its own timeout.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crius_api::cri;
use oci_spec::runtime::Spec;

use crate::error::Result;
use crate::store::sandbox::Sandbox;

/// What an adjuster may read of the request being created.
pub(crate) struct Context<'a> {
    /// The container's id.
    pub id: &'a str,
    /// kubelet's ContainerConfig.
    pub config: &'a cri::ContainerConfig,
    /// The pod it belongs to.
    pub sandbox: &'a Sandbox,
    /// Where each image volume (by its index in `config.mounts`) is on the host: its snapshot, or the sub
    /// path in it.
    pub image_volumes: &'a BTreeMap<usize, PathBuf>,
}

/// One change of a container's spec from outside the request.
pub(crate) trait Adjust: Send + Sync {
    /// What it changes, for logs.
    fn name(&self) -> &'static str;

    /// Changes `spec` for the container `cx` describes.
    fn adjust(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()>;
}

/// Runs `adjusters` on `spec`, in order; the first error is the answer.
pub(crate) fn adjust(adjusters: &[Box<dyn Adjust>], spec: &mut Spec, cx: &Context<'_>) -> Result<()> {
    for a in adjusters {
        let (container, sandbox) = (cx.id, &cx.sandbox.record.id);
        tracing::debug!(container, sandbox, adjuster = a.name(), "adjusting the spec");
        a.adjust(spec, cx)?;
    }
    Ok(())
}

/// The adjusters every container gets, CDI specs read from `cdi_dirs`, NRI's from `nri` when it is set.
pub(crate) fn defaults(cdi_dirs: Vec<PathBuf>, nri: crate::nri::Slot) -> Vec<Box<dyn Adjust>> {
    vec![
        Box::new(super::image_volumes::Mounts),
        Box::new(crate::cdi::Devices { dirs: cdi_dirs }),
        Box::new(crate::nri::Adjuster(nri)),
    ]
}
