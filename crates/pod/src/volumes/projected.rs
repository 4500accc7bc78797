//! `projected` volumes: the files of several `sources` (configMap, secret, downwardAPI) in one directory,
//! each as its own volume type would write it, under the projection's `defaultMode`. Two sources writing one
//! path is an error naming both. The sources that need an API server (serviceAccountToken,
//! clusterTrustBundle, podCertificate) are refused by name.

use k8s_openapi::api::core::v1::ProjectedVolumeSource;

use super::files::{self, DEFAULT_MODE, Payload};
use crate::Error;
use crate::downward::PodFields;
use crate::manifest::{Manifest, PodDef};

/// The merged files of projected volume `p`, for volume `at`.
pub(super) fn payload(
    def: &PodDef,
    manifest: &Manifest,
    fields: &PodFields,
    p: &ProjectedVolumeSource,
    at: &str,
) -> Result<Payload, Error> {
    let mode = p.default_mode.unwrap_or(DEFAULT_MODE);
    let mut out = Payload::new();
    for (i, s) in p.sources.iter().flatten().enumerate() {
        let files = if let Some(c) = &s.config_map {
            let name = c.name.as_str();
            let from = format!("sources[{i}] (configMap {name:?})");
            let data = files::object(def, &manifest.config_maps, "configMap", name, c.optional, at)?;
            files::keys(&data, c.items.as_deref(), mode, c.optional, &from, at)?
        } else if let Some(c) = &s.secret {
            let name = c.name.as_str();
            let from = format!("sources[{i}] (secret {name:?})");
            let data = files::object(def, &manifest.secrets, "secret", name, c.optional, at)?;
            files::keys(&data, c.items.as_deref(), mode, c.optional, &from, at)?
        } else if let Some(d) = &s.downward_api {
            let from = format!("sources[{i}] (downwardAPI)");
            files::downward(def, fields, d.items.as_deref().unwrap_or(&[]), mode, &from, at)?
        } else {
            let refused = if s.service_account_token.is_some() {
                "serviceAccountToken: crius has no API server to issue a service account token"
            } else if s.cluster_trust_bundle.is_some() {
                "clusterTrustBundle: crius has no API server to read a ClusterTrustBundle from"
            } else if s.pod_certificate.is_some() {
                "podCertificate: crius has no API server to issue a pod certificate"
            } else {
                "no source type (crius projects configMap, secret and downwardAPI)"
            };
            return Err(Error::manifest(at, format!("projected sources[{i}]: {refused}")));
        };
        for (path, file) in files {
            files::add(&mut out, &path, file, at)?;
        }
    }
    Ok(out)
}
