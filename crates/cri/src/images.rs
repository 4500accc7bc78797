//! The image calls' domain, under the CRI ImageService and crius's own Images API: the CRI view of a stored
//! image (its user, whether it is pinned), the credentials a request carries, and list, status, pull, remove
//! and the image filesystem's use over the store. The gRPC adapters (`grpc/image.rs`, `grpc/images_api.rs`)
//! only take requests apart and answer.
//!
//! CRI contracts kept here: ImageStatus of an unknown image is an empty answer, not an error; RemoveImage of
//! an unknown image succeeds (it is idempotent); PullImage returns the image id (the config digest); any of
//! id, tag, `repo@digest` or a short name finds the same image. An `ImageSpec.runtime_handler` (KEP-4216) is
//! accepted and logged once per handler at debug level: the node has one store, one snapshotter and one
//! platform, so every handler shares every image ([`Images::note_handler`]). An OCI artifact (pulled for an
//! image volume) is listed as an image whose `spec` carries its type ([`ARTIFACT_TYPE_ANNOTATION`]).

use std::collections::HashMap;

use base64::Engine as _;
use crius_api::cri;
use crius_image::pull::{Auth, PullOptions};
use crius_image::{ImageRecord, Store};

use crate::ImageConfig;
use crate::error::{Error, Result};

/// The annotation of a listed image's `spec` that gives an OCI artifact's type (`crius images ls` shows it).
pub const ARTIFACT_TYPE_ANNOTATION: &str = "io.crius.image.artifact-type";

/// The images one criusd serves: its store, how it pulls, and its pulls' figures.
#[derive(Debug)]
pub struct Images {
    store: Store,
    config: ImageConfig,
    pulls: crate::metrics::Pulls,
    /// The runtime handlers image requests named so far (each is logged once).
    handlers_seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Runs blocking store work for call `call` off the async workers.
async fn blocking<T: Send + 'static>(
    call: &'static str,
    f: impl FnOnce() -> crius_image::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|source| Error::Image { call, source }),
        Err(e) => Err(Error::TaskFailed {
            call,
            reason: e.to_string(),
        }),
    }
}

/// The image's default user from its config: a numeric user is a uid, anything else a user name.
fn user_of(config: &serde_json::Value) -> (Option<i64>, String) {
    let user = config["config"]["User"].as_str().unwrap_or_default();
    let user = user.split(':').next().unwrap_or_default();
    if user.is_empty() {
        return (None, String::new());
    }
    match user.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user.to_string()),
    }
}

/// Credentials from a CRI AuthConfig.
pub fn auth_of(call: &'static str, a: Option<&cri::AuthConfig>) -> Result<Auth> {
    let Some(a) = a else {
        return Ok(Auth::Anonymous);
    };
    if !a.registry_token.is_empty() {
        return Ok(Auth::Bearer(a.registry_token.clone()));
    }
    if !a.username.is_empty() || !a.password.is_empty() {
        return Ok(Auth::Basic(a.username.clone(), a.password.clone()));
    }
    if !a.auth.is_empty() {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.auth.trim())
            .map_err(|e| Error::invalid(call, "auth.auth", format!("is not base64: {e}")))?;
        let raw = String::from_utf8(raw)
            .map_err(|_| Error::invalid(call, "auth.auth", "is not UTF-8 user:password"))?;
        let (u, p) = raw
            .split_once(':')
            .ok_or_else(|| Error::invalid(call, "auth.auth", "must encode user:password"))?;
        return Ok(Auth::Basic(u.to_string(), p.to_string()));
    }
    if !a.identity_token.is_empty() {
        return Err(Error::invalid(
            call,
            "auth.identity_token",
            "(an OAuth refresh token) is not supported: pass username/password or registry_token",
        ));
    }
    Ok(Auth::Anonymous)
}

/// Now, in ns since the epoch, and never 0 (1 with a clock before the epoch).
fn now_nanos() -> i64 {
    crius_common::time::now_ns().max(1)
}

/// The image a request names (InvalidArgument when it names none).
pub fn reference_of(spec: Option<&cri::ImageSpec>, call: &'static str) -> Result<String> {
    match spec.map(|s| s.image.as_str()) {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(Error::invalid(call, "image.image", "is empty")),
    }
}

impl Images {
    /// The images of `store`, pulled as `config` says, their pulls counted into `pulls`.
    pub fn new(store: Store, config: ImageConfig, pulls: crate::metrics::Pulls) -> Images {
        Images {
            store,
            config,
            pulls,
            handlers_seen: Default::default(),
        }
    }

    /// Notes the runtime handler an image request names (KEP-4216): images are shared by every handler (one
    /// store, one snapshotter, one platform per node), so it changes nothing; the first request naming each
    /// handler is logged at debug level. True when this was that first one.
    pub fn note_handler(&self, call: &'static str, spec: Option<&cri::ImageSpec>) -> bool {
        let Some(handler) = spec.map(|s| s.runtime_handler.as_str()).filter(|h| !h.is_empty()) else {
            return false;
        };
        let first = self
            .handlers_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handler.to_string());
        if first {
            tracing::debug!(
                call,
                runtime_handler = handler,
                "image requests name a runtime handler: images are shared by every handler (one store, \
                 snapshotter and platform per node)"
            );
        }
        first
    }

    /// Where its pulls are counted.
    pub fn pulls(&self) -> &crate::metrics::Pulls {
        &self.pulls
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Pull options from the configuration, with `auth`.
    pub fn pull_options(&self, auth: Auth) -> PullOptions {
        PullOptions {
            insecure: self.config.insecure.clone(),
            mirrors: self.config.mirrors.clone(),
            auth,
            progress_timeout: self.config.pull_progress_timeout,
            max_concurrent_downloads: self.config.max_concurrent_downloads,
            policy: self.config.signature_policy.clone(),
        }
    }

    fn pinned(&self, rec: &ImageRecord) -> bool {
        self.config.pinned.iter().any(|p| {
            rec.names.contains(p)
                || rec.repo_digests.contains(p)
                || crius_image::reference::normalize(p)
                    .ok()
                    .and_then(|n| n.tagged())
                    .is_some_and(|t| rec.names.contains(&t))
        })
    }

    /// The image's config (empty when its blob is missing or unreadable).
    fn config_of(&self, rec: &ImageRecord) -> serde_json::Value {
        self.store
            .read_blob(&rec.id)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The CRI view of a stored image.
    fn to_cri(&self, rec: &ImageRecord) -> cri::Image {
        let config = self.config_of(rec);
        let (uid, username) = user_of(&config);
        cri::Image {
            id: rec.id.to_string(),
            repo_tags: rec.names.clone(),
            repo_digests: rec.repo_digests.clone(),
            size: rec.size.max(1),
            uid: uid.map(|value| cri::Int64Value { value }),
            username,
            spec: Some(cri::ImageSpec {
                image: rec.id.to_string(),
                annotations: rec
                    .artifact_type
                    .iter()
                    .map(|t| (ARTIFACT_TYPE_ANNOTATION.to_string(), t.clone()))
                    .collect(),
                ..Default::default()
            }),
            pinned: self.pinned(rec),
        }
    }

    fn verbose_info(&self, rec: &ImageRecord) -> HashMap<String, String> {
        let config = self.config_of(rec);
        let mut info = serde_json::json!({
            "id": rec.id.as_str(),
            "manifestDigest": rec.manifest.as_str(),
            "diffIDs": rec.diff_ids.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            "layerBlobs": rec.layer_blobs.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            "layerDirs": rec.diff_ids.iter().map(|d| self.store.layer_dir(d)).collect::<Vec<_>>(),
            "imageSpec": config,
        });
        if let Some(t) = &rec.artifact_type {
            // An artifact has no image config: its manifest says what it is.
            info["artifactType"] = t.as_str().into();
            info["imageSpec"] = serde_json::Value::Null;
            info["manifest"] = self.config_of(rec);
        }
        HashMap::from([("info".to_string(), info.to_string())])
    }

    /// ListImages: every image, or the one `filter` names (none if it names none).
    pub async fn list(&self, filter: Option<String>) -> Result<Vec<cri::Image>> {
        let store = self.store.clone();
        let records = blocking("ListImages", move || match filter {
            None => store.images(),
            Some(r) => match store.find(&r) {
                Ok(rec) => Ok(vec![rec]),
                Err(crius_image::Error::NotFound(_)) => Ok(vec![]),
                Err(e) => Err(e),
            },
        })
        .await?;
        Ok(records.iter().map(|r| self.to_cri(r)).collect())
    }

    /// ImageStatus: the image `reference` names, with its details when `verbose`; an unknown image is an
    /// empty answer, not an error (kubelet then pulls it).
    pub async fn status(&self, reference: String, verbose: bool) -> Result<cri::ImageStatusResponse> {
        let store = self.store.clone();
        let found = blocking("ImageStatus", move || match store.find(&reference) {
            Ok(rec) => Ok(Some(rec)),
            Err(crius_image::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        let Some(rec) = found else {
            return Ok(cri::ImageStatusResponse::default());
        };
        let info = if verbose {
            self.verbose_info(&rec)
        } else {
            HashMap::new()
        };
        Ok(cri::ImageStatusResponse {
            image: Some(self.to_cri(&rec)),
            info,
        })
    }

    /// PullImage: pulls `reference` with `auth`; returns the image id.
    pub async fn pull(&self, reference: &str, auth: Auth) -> Result<String> {
        let opts = self.pull_options(auth);
        let started = std::time::Instant::now();
        let report = crius_image::pull::pull(&self.store, reference, &opts)
            .await
            .map_err(|e| {
                tracing::warn!(image = %reference, error = %e, "pull failed");
                self.pulls.failed();
                Error::Image {
                    call: "PullImage",
                    source: e,
                }
            })?;
        tracing::info!(
            image = %reference,
            id = %report.image.id,
            blobs = report.blobs_fetched,
            bytes = report.bytes_fetched,
            ms = started.elapsed().as_millis() as u64,
            "pulled"
        );
        self.pulls.succeeded(report.bytes_fetched, started.elapsed());
        Ok(report.image.id.to_string())
    }

    /// RemoveImage: removing what is not there succeeds (the call is idempotent).
    pub async fn remove(&self, reference: String) -> Result<()> {
        let store = self.store.clone();
        let shown = reference.clone();
        let removed = blocking("RemoveImage", move || match store.remove_image(&reference) {
            Ok(rec) => Ok(Some(rec)),
            Err(crius_image::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        if let Some(rec) = removed {
            tracing::info!(image = %shown, id = %rec.id, names = ?rec.names, "removed");
        }
        Ok(())
    }

    /// ImageFsInfo: what the store's images use, on its root's filesystem, and what containers' writable
    /// layers use where they live (KEP-4191's split image filesystem): the store's snapshot root, its
    /// `snapshots` directory unless criusd's `[storage] container_root` moved it.
    pub async fn fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        let store = self.store.clone();
        let (images, containers) = blocking("ImageFsInfo", move || {
            Ok((store.usage(), store.snapshots_usage()))
        })
        .await?;
        let now = now_nanos();
        let fs = |at: &std::path::Path, u: crius_image::gc::Usage| cri::FilesystemUsage {
            timestamp: now,
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: at.display().to_string(),
            }),
            used_bytes: Some(cri::UInt64Value { value: u.bytes }),
            inodes_used: Some(cri::UInt64Value { value: u.inodes }),
        };
        Ok(cri::ImageFsInfoResponse {
            image_filesystems: vec![fs(self.store.root(), images)],
            container_filesystems: vec![fs(self.store.snapshot_root(), containers)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_from_config() {
        let c = |u: &str| serde_json::json!({"config": {"User": u}});
        assert_eq!(user_of(&c("")), (None, String::new()));
        assert_eq!(user_of(&c("1000")), (Some(1000), String::new()));
        assert_eq!(user_of(&c("1000:1000")), (Some(1000), String::new()));
        assert_eq!(user_of(&c("nobody:users")), (None, "nobody".to_string()));
        assert_eq!(user_of(&serde_json::json!({})), (None, String::new()));
    }

    #[tokio::test]
    async fn the_container_filesystem_is_where_the_writable_layers_live() {
        let dir = tempfile::tempdir().unwrap();
        let images = |store: Store| Images::new(store, ImageConfig::default(), Default::default());
        let fs_of = |r: &cri::ImageFsInfoResponse| {
            let one = |v: &[cri::FilesystemUsage]| {
                assert_eq!(v.len(), 1, "{v:?}");
                let f = &v[0];
                (
                    f.fs_id.as_ref().unwrap().mountpoint.clone(),
                    f.used_bytes.unwrap().value,
                    f.inodes_used.unwrap().value,
                )
            };
            (one(&r.image_filesystems), one(&r.container_filesystems))
        };
        let root = dir.path().join("images");
        let same = images(Store::open(&root).unwrap()).fs_info().await.unwrap();
        let (image_fs, container_fs) = fs_of(&same);
        assert_eq!(image_fs.0, root.display().to_string());
        assert_eq!(container_fs.0, root.join("snapshots").display().to_string());
        assert_eq!(container_fs.2, 1, "no container yet: the snapshot root alone");

        let moved = dir.path().join("containers");
        let store = Store::open(&root).unwrap().with_snapshot_root(&moved).unwrap();
        std::fs::create_dir_all(moved.join("c1/upper")).unwrap();
        std::fs::write(moved.join("c1/upper/log"), vec![0u8; 8192]).unwrap();
        let split = images(store).fs_info().await.unwrap();
        let (image_fs, container_fs) = fs_of(&split);
        assert_eq!(image_fs.0, root.display().to_string());
        assert_eq!(container_fs.0, moved.display().to_string());
        assert_eq!(container_fs.2, 4, "the root, c1, upper and its file");
        assert!(container_fs.1 >= 8192, "{container_fs:?}");
    }

    #[tokio::test]
    async fn a_runtime_handler_is_accepted_and_noted_once_per_handler() {
        let dir = tempfile::tempdir().unwrap();
        let images = Images::new(
            Store::open(dir.path()).unwrap(),
            ImageConfig::default(),
            Default::default(),
        );
        let spec = |h: &str| cri::ImageSpec {
            image: "busybox".into(),
            runtime_handler: h.into(),
            ..Default::default()
        };
        assert!(
            !images.note_handler("PullImage", Some(&spec(""))),
            "no handler, nothing noted"
        );
        assert!(!images.note_handler("PullImage", None));
        assert!(images.note_handler("PullImage", Some(&spec("kata"))));
        assert!(!images.note_handler("ImageStatus", Some(&spec("kata"))), "once");
        assert!(images.note_handler("ListImages", Some(&spec("runc"))));
        let status = images.status("busybox".into(), false).await.unwrap();
        assert!(
            status.image.is_none(),
            "an unknown image is an empty answer, whatever the handler"
        );
    }

    #[test]
    fn auth_from_cri() {
        assert!(matches!(auth_of("PullImage", None), Ok(Auth::Anonymous)));
        let a = cri::AuthConfig {
            auth: base64::engine::general_purpose::STANDARD.encode("u:p:w"),
            ..Default::default()
        };
        assert!(matches!(auth_of("PullImage", Some(&a)), Ok(Auth::Basic(u, p)) if u == "u" && p == "p:w"));
        let a = cri::AuthConfig {
            registry_token: "t".into(),
            username: "u".into(),
            ..Default::default()
        };
        assert!(matches!(auth_of("PullImage", Some(&a)), Ok(Auth::Bearer(t)) if t == "t"));
        let a = cri::AuthConfig {
            auth: "!!".into(),
            ..Default::default()
        };
        assert_eq!(
            tonic::Status::from(auth_of("PullImage", Some(&a)).unwrap_err()).code(),
            tonic::Code::InvalidArgument
        );
    }
}
