//! `runtime.v1.ImageService` over the image store: list, status, pull, remove, and the image filesystem's use.
//!
//! CRI contracts kept here: ImageStatus of an unknown image is an empty response, not an error; RemoveImage of
//! an unknown image succeeds (it is idempotent); PullImage returns the image id (the config digest); any of
//! id, tag, `repo@digest` or a short name finds the same image.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use crius_api::cri;
use crius_image::pull::{Auth, PullOptions};
use crius_image::{ImageRecord, Store};
use tonic::{Request, Response, Status};

use crate::ImageConfig;
use crate::error::Error;

/// The image service: one store, one configuration.
#[derive(Debug, Clone)]
pub struct ImageService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    config: ImageConfig,
    pulls: crate::metrics::Pulls,
}

/// Runs blocking store work for call `call` off the async workers.
async fn blocking<T: Send + 'static>(
    call: &'static str,
    f: impl FnOnce() -> crius_image::Result<T> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|source| Error::Image { call, source }.into()),
        Err(e) => Err(Error::TaskFailed {
            call,
            reason: e.to_string(),
        }
        .into()),
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
pub(crate) fn auth_of(call: &'static str, a: Option<&cri::AuthConfig>) -> Result<Auth, Error> {
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

fn reference_of(spec: Option<&cri::ImageSpec>, call: &'static str) -> Result<String, Error> {
    match spec.map(|s| s.image.as_str()) {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(Error::invalid(call, "image.image", "is empty")),
    }
}

impl ImageService {
    /// A service over `store`.
    pub fn new(store: Store, config: ImageConfig) -> ImageService {
        ImageService::counting(store, config, Default::default())
    }

    /// A service over `store` that counts its pulls into `pulls`.
    pub fn counting(store: Store, config: ImageConfig, pulls: crate::metrics::Pulls) -> ImageService {
        ImageService {
            inner: Arc::new(Inner { store, config, pulls }),
        }
    }

    /// Where its pulls are counted.
    pub fn pulls(&self) -> &crate::metrics::Pulls {
        &self.inner.pulls
    }

    /// The store it serves.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Pull options from the configuration, with `auth`.
    pub fn pull_options(&self, auth: Auth) -> PullOptions {
        PullOptions {
            insecure: self.inner.config.insecure.clone(),
            mirrors: self.inner.config.mirrors.clone(),
            auth,
        }
    }

    fn pinned(&self, rec: &ImageRecord) -> bool {
        self.inner.config.pinned.iter().any(|p| {
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
        self.inner
            .store
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
                ..Default::default()
            }),
            pinned: self.pinned(rec),
        }
    }

    fn verbose_info(&self, rec: &ImageRecord) -> HashMap<String, String> {
        let config = self.config_of(rec);
        let info = serde_json::json!({
            "id": rec.id.as_str(),
            "manifestDigest": rec.manifest.as_str(),
            "diffIDs": rec.diff_ids.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            "layerBlobs": rec.layer_blobs.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            "layerDirs": rec.diff_ids.iter().map(|d| self.inner.store.layer_dir(d)).collect::<Vec<_>>(),
            "imageSpec": config,
        });
        HashMap::from([("info".to_string(), info.to_string())])
    }
}

#[tonic::async_trait]
impl cri::image_service_server::ImageService for ImageService {
    async fn list_images(
        &self,
        request: Request<cri::ListImagesRequest>,
    ) -> Result<Response<cri::ListImagesResponse>, Status> {
        let filter = request
            .into_inner()
            .filter
            .and_then(|f| f.image)
            .map(|s| s.image)
            .filter(|s| !s.is_empty());
        let store = self.inner.store.clone();
        let records = blocking("ListImages", move || match filter {
            None => store.images(),
            Some(r) => match store.find(&r) {
                Ok(rec) => Ok(vec![rec]),
                Err(crius_image::Error::NotFound(_)) => Ok(vec![]),
                Err(e) => Err(e),
            },
        })
        .await?;
        let images = records.iter().map(|r| self.to_cri(r)).collect();
        Ok(Response::new(cri::ListImagesResponse { images }))
    }

    type StreamImagesStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<cri::StreamImagesResponse, Status>> + Send + 'static>,
    >;

    /// ListImages' answer as one chunk.
    async fn stream_images(
        &self,
        request: Request<cri::StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        let filter = request.into_inner().filter;
        let listed = self.list_images(Request::new(cri::ListImagesRequest { filter }));
        let images = listed.await?.into_inner().images;
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(
            cri::StreamImagesResponse { images },
        )))))
    }

    async fn image_status(
        &self,
        request: Request<cri::ImageStatusRequest>,
    ) -> Result<Response<cri::ImageStatusResponse>, Status> {
        let req = request.into_inner();
        let reference = reference_of(req.image.as_ref(), "ImageStatus")?;
        let store = self.inner.store.clone();
        let found = blocking("ImageStatus", move || match store.find(&reference) {
            Ok(rec) => Ok(Some(rec)),
            Err(crius_image::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        // An unknown image is an empty answer, not an error (kubelet then pulls it).
        let Some(rec) = found else {
            return Ok(Response::new(cri::ImageStatusResponse::default()));
        };
        let info = if req.verbose {
            self.verbose_info(&rec)
        } else {
            HashMap::new()
        };
        Ok(Response::new(cri::ImageStatusResponse {
            image: Some(self.to_cri(&rec)),
            info,
        }))
    }

    async fn pull_image(
        &self,
        request: Request<cri::PullImageRequest>,
    ) -> Result<Response<cri::PullImageResponse>, Status> {
        let req = request.into_inner();
        let reference = reference_of(req.image.as_ref(), "PullImage")?;
        let opts = self.pull_options(auth_of("PullImage", req.auth.as_ref())?);
        let started = std::time::Instant::now();
        let report = crius_image::pull::pull(&self.inner.store, &reference, &opts)
            .await
            .map_err(|e| {
                tracing::warn!(image = %reference, error = %e, "pull failed");
                self.inner.pulls.failed();
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
        self.inner
            .pulls
            .succeeded(report.bytes_fetched, started.elapsed());
        Ok(Response::new(cri::PullImageResponse {
            image_ref: report.image.id.to_string(),
        }))
    }

    async fn remove_image(
        &self,
        request: Request<cri::RemoveImageRequest>,
    ) -> Result<Response<cri::RemoveImageResponse>, Status> {
        let reference = reference_of(request.into_inner().image.as_ref(), "RemoveImage")?;
        let store = self.inner.store.clone();
        let shown = reference.clone();
        let removed = blocking("RemoveImage", move || match store.remove_image(&reference) {
            Ok(rec) => Ok(Some(rec)),
            // Removing what is not there succeeds: the call is idempotent.
            Err(crius_image::Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        if let Some(rec) = removed {
            tracing::info!(image = %shown, id = %rec.id, names = ?rec.names, "removed");
        }
        Ok(Response::new(cri::RemoveImageResponse {}))
    }

    async fn image_fs_info(
        &self,
        _: Request<cri::ImageFsInfoRequest>,
    ) -> Result<Response<cri::ImageFsInfoResponse>, Status> {
        let store = self.inner.store.clone();
        let usage = blocking("ImageFsInfo", move || Ok(store.usage())).await?;
        let fs = cri::FilesystemUsage {
            timestamp: now_nanos(),
            fs_id: Some(cri::FilesystemIdentifier {
                mountpoint: self.inner.store.root().display().to_string(),
            }),
            used_bytes: Some(cri::UInt64Value { value: usage.bytes }),
            inodes_used: Some(cri::UInt64Value { value: usage.inodes }),
        };
        Ok(Response::new(cri::ImageFsInfoResponse {
            image_filesystems: vec![fs],
            container_filesystems: vec![],
        }))
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
            auth_of("PullImage", Some(&a)).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
