//! Pulling from OCI and Docker registries (oci-client): manifests, manifest lists and indexes (linux/amd64 is
//! picked), configs and layers, each checked against its digest before it is stored, and none read past its
//! descriptor's size and one byte (manifests: past 4 MiB, see `fetch.rs`); layers the store already has are
//! not downloaded again, the others are downloaded a few at a time ([`PullOptions::max_concurrent_downloads`])
//! and each layer is unpacked as soon as it and the layers below it are there, in order, while the rest
//! download. A download that makes no progress for [`PullOptions::progress_timeout`] is cancelled
//! (see `download.rs`). With a signature policy, the manifest is checked before anything else is fetched
//! (`signature.rs`). An OCI artifact is stored as an image of files (`artifact.rs`). A registry on a loopback address, or a host listed as insecure, is reached over plain
//! http.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt as _;

use oci_client::client::ClientProtocol;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;

use crate::{Digest, Error, ImageRecord, Result, Store};

const MANIFEST_TYPES: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Credentials for a registry.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// No credentials.
    #[default]
    Anonymous,
    /// Username and password (basic auth, or exchanged for a bearer token when the registry asks).
    Basic(String, String),
    /// A bearer token sent to the registry as it is.
    Bearer(String),
}

/// What a pull is doing, for a progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The manifest was read: the blobs the image needs (config first), with their sizes from the manifest.
    Resolved {
        /// Manifest digest.
        manifest: Digest,
        /// Every blob of the image with its size, and whether the store already has it.
        blobs: Vec<(Digest, u64, bool)>,
    },
    /// Bytes of a blob received so far (sent every 256 KiB and at the end).
    Downloading {
        /// The blob.
        digest: Digest,
        /// Bytes received.
        done: u64,
    },
    /// A blob was verified and stored.
    Stored {
        /// The blob.
        digest: Digest,
        /// Its size.
        size: u64,
    },
    /// A layer is being unpacked (once per store).
    Unpacking {
        /// Its uncompressed digest.
        diff_id: Digest,
    },
}

/// How long a download may go without receiving a byte, by default: 5 minutes, as containerd's
/// `image_pull_progress_timeout`.
pub const DEFAULT_PROGRESS_TIMEOUT: Duration = Duration::from_secs(300);

/// How many blobs of one pull download at once, by default (containerd's `max_concurrent_downloads`).
pub const DEFAULT_CONCURRENT_DOWNLOADS: usize = 3;

/// How to reach registries.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Hosts (`host:port`) reached over plain http, besides loopback addresses.
    pub insecure: Vec<String>,
    /// Registry host → mirror host to pull from instead.
    pub mirrors: HashMap<String, String>,
    /// Credentials.
    pub auth: Auth,
    /// A download (a blob, or the manifest) that receives nothing for this long is cancelled with
    /// [`Error::DeadlineExceeded`]; None: never.
    pub progress_timeout: Option<Duration>,
    /// How many blobs of this pull download at once (at least 1).
    pub max_concurrent_downloads: usize,
    /// The signature policy the image must satisfy before any layer is fetched; None: any image.
    pub policy: Option<std::sync::Arc<crate::policy::Policy>>,
}

impl Default for PullOptions {
    fn default() -> PullOptions {
        PullOptions {
            insecure: Vec::new(),
            mirrors: HashMap::new(),
            auth: Auth::Anonymous,
            progress_timeout: Some(DEFAULT_PROGRESS_TIMEOUT),
            max_concurrent_downloads: DEFAULT_CONCURRENT_DOWNLOADS,
            policy: None,
        }
    }
}

/// What a pull did.
#[derive(Debug, Clone)]
pub struct PullReport {
    /// The image as stored.
    pub image: ImageRecord,
    /// Blobs downloaded (manifests not counted): 0 when everything was already there.
    pub blobs_fetched: usize,
    /// Bytes downloaded for those blobs.
    pub bytes_fetched: u64,
}

/// Parses a reference as a container runtime does: `busybox` is `docker.io/library/busybox:latest`.
pub use crate::reference::parse as parse_reference;

fn is_loopback(host: &str) -> bool {
    let name = host
        .rsplit_once(':')
        .map(|(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
        .unwrap_or(host);
    name == "localhost" || name.starts_with("127.") || name == "[::1]"
}

/// Pulls `reference` into `store`; the image gets the normalized name (`docker.io/library/busybox:latest`).
pub async fn pull(store: &Store, reference: &str, opts: &PullOptions) -> Result<PullReport> {
    pull_with_progress(store, reference, opts, &|_| {}).await
}

/// [`pull`], telling `progress` what it does.
pub async fn pull_with_progress(
    store: &Store,
    reference: &str,
    opts: &PullOptions,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<PullReport> {
    let active = crate::gc::Busy::enter(store);
    let mut image = parse_reference(reference)?;
    if let Some(mirror) = opts.mirrors.get(image.registry()) {
        image.set_mirror_registry(mirror.clone());
    }
    let host = image.resolve_registry().to_string();
    let plain_http = is_loopback(&host) || opts.insecure.contains(&host);
    let protocol = if plain_http {
        ClientProtocol::HttpsExcept(vec![host.clone()])
    } else {
        ClientProtocol::Https
    };
    let clients = crate::fetch::Clients::new(protocol).await?;
    let auth = match &opts.auth {
        Auth::Anonymous => RegistryAuth::Anonymous,
        Auth::Basic(u, p) => RegistryAuth::Basic(u.clone(), p.clone()),
        Auth::Bearer(t) => RegistryAuth::Bearer(t.clone()),
    };
    let whole = image.whole();
    let stall = opts.progress_timeout;
    let bytes = crate::fetch::manifest(&clients, &image, &auth, plain_http, MANIFEST_TYPES, stall).await?;
    let mut manifest_digest = Digest::of(&bytes);
    if let Some(want) = image.digest()
        && want != manifest_digest.as_str()
    {
        return Err(Error::DigestMismatch {
            what: format!("manifest of {whole}"),
            expected: want.into(),
            actual: manifest_digest.to_string(),
        });
    }
    if let Some(policy) = &opts.policy {
        // Before anything else is fetched: the digest the reference resolved to must be acceptable.
        let reg = crate::signature::Registry {
            clients: &clients,
            auth: &auth,
            plain_http,
            stall,
        };
        crate::signature::check(policy, &reg, &image, &manifest_digest).await?;
    }
    let mut manifest: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::InvalidArgument(format!("manifest of {whole}: {e}")))?;
    let mut manifest_bytes = bytes;
    if crate::manifest::is_index(&manifest) {
        let d = crate::manifest::pick_linux_amd64(&manifest, &whole)?;
        let by_digest = image.clone_with_digest(d.to_string());
        let b =
            crate::fetch::manifest(&clients, &by_digest, &auth, plain_http, MANIFEST_TYPES, stall).await?;
        manifest_digest = Digest::of(&b);
        if manifest_digest != d {
            return Err(Error::DigestMismatch {
                what: format!("manifest of {whole}"),
                expected: d.to_string(),
                actual: manifest_digest.to_string(),
            });
        }
        manifest =
            serde_json::from_slice(&b).map_err(|e| Error::InvalidArgument(format!("manifest {d}: {e}")))?;
        manifest_bytes = b;
    }
    let descriptor = |v: &Value| -> Result<(Digest, u64)> {
        Ok((
            Digest::parse(v["digest"].as_str().unwrap_or_default())?,
            crate::bounded::descriptor_size(v, &format!("manifest of {whole}"))?,
        ))
    };
    let config = descriptor(&manifest["config"])?;
    let cfg_digest = config.0.clone();
    let layers: Vec<(Digest, u64)> = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(descriptor)
        .collect::<Result<_>>()?;
    let layer_digests: Vec<Digest> = layers.iter().map(|(d, _)| d.clone()).collect();
    // An OCI artifact: its layers become files (or unpacked tars), see `artifact.rs`.
    let artifact = crate::artifact::artifact_type(&manifest);
    let artifact_layers = match artifact {
        Some(_) => Some(crate::artifact::layers(&manifest, &whole)?),
        None => None,
    };
    let blobs: Vec<(Digest, u64, bool)> = std::iter::once(config)
        .chain(layers)
        .map(|(d, size)| {
            let have = store.has_blob(&d);
            (d, size, have)
        })
        .collect();
    let missing: Vec<(Digest, u64)> = blobs
        .iter()
        .filter(|(_, _, have)| !have)
        .map(|(d, size, _)| (d.clone(), *size))
        .collect();
    let had_manifest = store.has_blob(&manifest_digest);
    progress(Progress::Resolved {
        manifest: manifest_digest.clone(),
        blobs,
    });
    let result = async {
        let src = crate::download::Source {
            client: &clients.oci,
            image: &image,
            whole: &whole,
            store,
            stall,
            progress,
        };
        // Downloads, a few at a time, tell the unpacking below each blob they stored.
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Digest>();
        let downloads = async {
            let done_tx = done_tx;
            let mut sizes = Vec::new();
            // Made up front (not in a closure the stream calls), so the pull stays Send.
            let all: Vec<_> = missing
                .iter()
                .map(|(d, size)| crate::download::blob(&src, d, *size))
                .collect();
            let mut running =
                futures::stream::iter(all).buffer_unordered(opts.max_concurrent_downloads.max(1));
            while let Some(r) = running.next().await {
                let (d, got) = r?;
                sizes.extend(got);
                let _ = done_tx.send(d.clone());
            }
            Ok::<Vec<u64>, Error>(sizes)
        };
        // Layers are unpacked in order, each as soon as its blob is stored, while later ones download.
        let unpacking = async {
            let mut stored: HashSet<Digest> = std::iter::once(&cfg_digest)
                .chain(&layer_digests)
                .filter(|d| !missing.iter().any(|(m, _)| m == *d))
                .cloned()
                .collect();
            wait_for(&mut stored, &mut done_rx, &cfg_digest, &whole).await?;
            if let Some(art) = &artifact_layers {
                let mut keys = Vec::new();
                for l in art {
                    wait_for(&mut stored, &mut done_rx, &l.blob, &whole).await?;
                    if !store.layer_dir(&l.key).exists() {
                        progress(Progress::Unpacking {
                            diff_id: l.key.clone(),
                        });
                    }
                    let (s, layer) = (store.clone(), l.clone());
                    tokio::task::spawn_blocking(move || s.ensure_artifact_layer(&layer))
                        .await
                        .map_err(|e| {
                            crate::error::io(format!("making layer {}", l.blob), std::io::Error::other(e))
                        })??;
                    keys.push(l.key.clone());
                }
                return Ok(keys);
            }
            let cfg: Value = serde_json::from_slice(&store.read_blob(&cfg_digest)?)
                .map_err(|e| Error::InvalidArgument(format!("config {cfg_digest}: {e}")))?;
            let diff_ids = crate::manifest::diff_ids(&cfg)?;
            if diff_ids.len() != layer_digests.len() {
                return Err(Error::InvalidArgument(format!(
                    "{whole}: {} layers, {} diff ids",
                    layer_digests.len(),
                    diff_ids.len()
                )));
            }
            for (blob, diff) in layer_digests.iter().zip(&diff_ids) {
                wait_for(&mut stored, &mut done_rx, blob, &whole).await?;
                if !store.layer_dir(diff).exists() {
                    progress(Progress::Unpacking {
                        diff_id: diff.clone(),
                    });
                }
                // Unpacking is blocking file work: off the async workers.
                let (s, b, d) = (store.clone(), blob.clone(), diff.clone());
                tokio::task::spawn_blocking(move || s.ensure_layer(&b, &d))
                    .await
                    .map_err(|e| {
                        crate::error::io(format!("unpacking layer {diff}"), std::io::Error::other(e))
                    })??;
            }
            Ok(diff_ids)
        };
        let (sizes, diff_ids) = tokio::try_join!(downloads, unpacking)?;
        // Only now, with every blob verified and stored, does the manifest enter the store.
        store.put_blob(&manifest_digest, &manifest_bytes, "manifest")?;
        let named = crate::reference::normalize(reference)?;
        let name = named
            .tagged()
            .or_else(|| Some(named.with_digest(manifest_digest.as_str())));
        // Artifacts share the empty config: one is known by its manifest.
        let id = match artifact {
            Some(_) => manifest_digest.clone(),
            None => cfg_digest,
        };
        let record = store.record(
            id,
            manifest_digest.clone(),
            diff_ids,
            layer_digests,
            name,
            artifact.clone(),
        )?;
        Ok(PullReport {
            image: record,
            blobs_fetched: sizes.len(),
            bytes_fetched: sizes.iter().sum(),
        })
    }
    .await;
    // Nothing of a failed pull stays: blobs it stored that no image uses are removed again — unless another pull
    // into this store is running, which may be counting on them (they are valid blobs; they stay).
    if result.is_err() && active.alone() {
        let mut missing: Vec<Digest> = missing.into_iter().map(|(d, _)| d).collect();
        // The manifest too, should the failure have come after it was stored.
        if !had_manifest {
            missing.push(manifest_digest);
        }
        store.remove_unreferenced(&missing);
    }
    result
}

/// Waits until blob `d` of image `whole` is among `stored`, adding those `done` tells of meanwhile.
async fn wait_for(
    stored: &mut HashSet<Digest>,
    done: &mut tokio::sync::mpsc::UnboundedReceiver<Digest>,
    d: &Digest,
    whole: &str,
) -> Result<()> {
    while !stored.contains(d) {
        match done.recv().await {
            Some(got) => {
                stored.insert(got);
            }
            None => return Err(Error::NotFound(format!("blob {d} of {whole}: not downloaded"))),
        }
    }
    Ok(())
}
