//! Fetching a manifest, index or referrers list from a registry with its size capped
//! ([`crate::bounded::MAX_MANIFEST`], as containerd): the body is read a chunk at a time and the download is
//! dropped as soon as it passes the cap, so a registry serving gigabytes for a manifest costs criusd 4 MiB at
//! most. oci-client reads a manifest whole, so this GET is ours; oci-client still negotiates the credentials
//! (its token, or Basic), which its blob downloads then reuse. Each wait (the answer, every chunk of it) is
//! bounded by the pull's progress timeout: a registry that goes quiet is [`Error::DeadlineExceeded`].
//! [`Clients`] are a pull's two HTTP clients, built off the async workers.

use oci_client::client::{Client, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};

use crate::bounded::MAX_MANIFEST;
use crate::{Error, Result};

/// A pull's HTTP clients: oci-client's (credentials, blobs) and a plain reqwest one (the manifest GETs here).
pub(crate) struct Clients {
    pub oci: Client,
    pub http: reqwest::Client,
}

impl Clients {
    /// Builds both on a blocking thread. Building an HTTP client reads the system's CA certificates (some 440
    /// files under /etc/ssl/certs: 80 ms in a debug build, seconds in a slow VM), even for a plain-http
    /// registry; on one of criusd's two async workers that stalled every other call, and new connections
    /// went unanswered (critest's next spec failed to connect after its cancelled pull).
    pub(crate) async fn new(protocol: ClientProtocol) -> Result<Clients> {
        let build = move || {
            let oci = Client::new(ClientConfig {
                protocol,
                ..Default::default()
            });
            let http = reqwest::Client::builder().build().map_err(|e| Error::Io {
                context: "building an HTTP client".into(),
                source: std::io::Error::other(e),
            })?;
            Ok(Clients { oci, http })
        };
        tokio::task::spawn_blocking(build).await.map_err(|e| Error::Io {
            context: "building the HTTP clients".into(),
            source: std::io::Error::other(e),
        })?
    }
}

/// The manifest or index `image` names (its digest, else its tag), at most [`MAX_MANIFEST`] bytes.
pub(crate) async fn manifest(
    clients: &Clients,
    image: &Reference,
    auth: &RegistryAuth,
    plain_http: bool,
    accept: &[&str],
    stall: Option<std::time::Duration>,
) -> Result<Vec<u8>> {
    let reference = image.digest().or(image.tag()).unwrap_or("latest");
    let at = Endpoint {
        what: "manifest",
        path: &format!("manifests/{reference}"),
    };
    get(clients, image, auth, plain_http, &at, accept, stall).await
}

/// Where in `image`'s repository a [`get`] reads, and what it reads there (for the errors).
pub(crate) struct Endpoint<'a> {
    /// `manifest`, `referrers`.
    pub what: &'a str,
    /// The path below `/v2/<repository>/`, with its query if any (`referrers/sha256:…?artifactType=…`).
    pub path: &'a str,
}

/// The body of a GET of `at` in `image`'s repository (an index or manifest), at most [`MAX_MANIFEST`] bytes.
pub(crate) async fn get(
    clients: &Clients,
    image: &Reference,
    auth: &RegistryAuth,
    plain_http: bool,
    at: &Endpoint<'_>,
    accept: &[&str],
    stall: Option<std::time::Duration>,
) -> Result<Vec<u8>> {
    let whole = image.whole();
    let what = at.what;
    let quiet = |limit: std::time::Duration| {
        Error::DeadlineExceeded(format!(
            "{what} of {whole} (repository {}): no progress for {}s ([image] pull_progress_timeout)",
            image.repository(),
            limit.as_secs_f32()
        ))
    };
    let unavailable = |e: reqwest::Error| {
        if e.is_connect() || e.is_timeout() {
            Error::Unavailable(format!("{whole}: {e}"))
        } else {
            Error::Registry(format!("{whole}: {e}"))
        }
    };
    let token = clients
        .oci
        .auth(image, auth, RegistryOperation::Pull)
        .await
        .map_err(|e| Error::from_registry(&whole, e))?;
    let registry = image.resolve_registry();
    let url = format!(
        "{scheme}://{registry}/v2/{repository}/{path}{ns}",
        scheme = if plain_http { "http" } else { "https" },
        repository = image.repository(),
        path = at.path,
        ns = image
            .namespace()
            .map(|ns| format!("{}ns={ns}", if at.path.contains('?') { '&' } else { '?' }))
            .unwrap_or_default(),
    );
    let mut req = clients
        .http
        .get(&url)
        .header(reqwest::header::ACCEPT, accept.join(", "));
    req = match (token, auth) {
        (Some(t), _) => req.bearer_auth(t),
        (None, RegistryAuth::Basic(u, p)) => req.basic_auth(u, Some(p)),
        (None, _) => req,
    };
    let mut resp = bounded(stall, &quiet, req.send()).await?.map_err(unavailable)?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        let said: String = body.chars().take(512).collect();
        return Err(match status.as_u16() {
            401 | 403 => Error::Unauthenticated(format!("{whole}: {status}: {said}")),
            404 => Error::NotFound(format!("{whole}: {status}: {said}")),
            _ => Error::Registry(format!("{whole}: {what}: {status}: {said}")),
        });
    }
    let refuse = |n: u64| {
        Error::InvalidArgument(format!(
            "{what} of {whole}: {n} bytes or more, more than the {MAX_MANIFEST} a manifest may have"
        ))
    };
    if let Some(n) = resp.content_length().filter(|&n| n > MAX_MANIFEST) {
        return Err(refuse(n));
    }
    let mut body = Vec::new();
    while let Some(chunk) = bounded(stall, &quiet, resp.chunk()).await?.map_err(unavailable)? {
        body.extend_from_slice(&chunk);
        if body.len() as u64 > MAX_MANIFEST {
            // Dropped here: the rest is never read.
            return Err(refuse(body.len() as u64));
        }
    }
    Ok(body)
}

/// `f`'s output, unless `stall` passes first: then `quiet(stall)`.
async fn bounded<T>(
    stall: Option<std::time::Duration>,
    quiet: &(dyn Fn(std::time::Duration) -> Error + Sync),
    f: impl Future<Output = T>,
) -> Result<T> {
    match stall {
        None => Ok(f.await),
        Some(limit) => tokio::time::timeout(limit, f).await.map_err(|_| quiet(limit)),
    }
}
