//! crius-api: the project's own gRPC API, generated from `proto/crius/`, and the unix-socket connection that
//! its clients (the `crius` CLI, tests) use for it and for the CRI services criusd serves on the same socket.

use std::path::{Path, PathBuf};

/// `crius.images.v1`: importing archives and pulling with progress events.
pub mod images {
    #![allow(missing_docs, clippy::all, unused_qualifications)]
    tonic::include_proto!("crius.images.v1");
}

/// criusd's default socket.
pub const DEFAULT_SOCKET: &str = "/run/crius/crius.sock";

/// Opens a gRPC channel to the unix socket at `path` (`unix://` prefix allowed). Fails when nothing listens,
/// naming the socket.
pub async fn connect(path: &str) -> Result<tonic::transport::Channel, String> {
    let path: PathBuf = Path::new(path.strip_prefix("unix://").unwrap_or(path)).to_path_buf();
    let shown = path.display().to_string();
    // The URI is required by the API but unused: every connection goes to the socket.
    tonic::transport::Endpoint::from_static("http://crius.invalid")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| {
            let cause = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_default();
            format!("connecting to {shown}: {e} {cause} (is criusd running? --address / CRIUS_ADDRESS)")
        })
}
