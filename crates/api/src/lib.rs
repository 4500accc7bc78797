//! crius-api: the project's own gRPC API (images, pods), generated from `proto/crius/`; the CRI (`runtime.v1`),
//! generated from the project's own transcription of it in `proto/cri/`; and the unix-socket connection that
//! its clients (the `crius` CLI, tests) use for both, as criusd serves them on the same socket.
//!
//! Crates: `thiserror` derives [`ConnectError`], the one error of [`connect`].

use std::path::{Path, PathBuf};

/// `crius.images.v1`: importing archives and pulling with progress events.
pub mod images {
    #![allow(missing_docs, clippy::all, unused_qualifications)]
    tonic::include_proto!("crius.images.v1");
}

/// `crius.pod.v1`: pods and workloads kept by criusd (apply, get, delete, resize, logs, watch).
pub mod pod {
    #![allow(missing_docs, clippy::all, unused_qualifications)]
    tonic::include_proto!("crius.pod.v1");
}

/// `runtime.v1`: the CRI of Kubernetes 1.36 (`RuntimeService`, `ImageService`), client and server, from
/// `proto/cri/runtime/v1/api.proto`. The names are prost's for the upstream messages (`RunPodSandboxRequest`,
/// `ContainerConfig`, enums such as `Signal::Sigusr1`), so code written against the `k8s-cri` crate reads the same.
pub mod cri {
    #![allow(missing_docs, clippy::all, unused_qualifications, rustdoc::all)]
    tonic::include_proto!("runtime.v1");
}

/// The JSON form of a CRI `KeyValue.value` (bytes): text, invalid UTF-8 replaced.
mod env_text {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&String::from_utf8_lossy(v))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        <String as serde::Deserialize>::deserialize(d).map(String::into_bytes)
    }
}

/// Every gRPC method criusd serves, as `/package.Service/Method`, sorted: read from the .proto files at build
/// time.
pub const GRPC_METHODS: &[&str] = include!(concat!(env!("OUT_DIR"), "/grpc_methods.rs"));

/// criusd's default socket.
pub const DEFAULT_SOCKET: &str = "/run/crius/crius.sock";

/// Why [`connect`] found no server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing answered at the socket (missing, refused, not criusd); `source`'s own cause (the socket's errno)
    /// is shown too.
    #[error(
        "connecting to {socket}: {source} {} (is criusd running? --address / CRIUS_ADDRESS)",
        cause(.source)
    )]
    Unreachable {
        /// The socket's path.
        socket: String,
        /// The transport's error.
        #[source]
        source: tonic::transport::Error,
    },
}

/// The cause under a transport error (the socket's errno), or nothing.
fn cause(e: &tonic::transport::Error) -> String {
    std::error::Error::source(e)
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Opens a gRPC channel to the unix socket at `path` (`unix://` prefix allowed). Fails when nothing listens,
/// naming the socket.
pub async fn connect(path: &str) -> Result<tonic::transport::Channel, ConnectError> {
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
        .map_err(|source| ConnectError::Unreachable {
            socket: shown,
            source,
        })
}

/// A channel to the unix socket at `path` that connects on first use (and again after a failure): for a
/// server that reaches its own socket before it serves (criusd's pod service calling its CRI).
pub fn connect_lazy(path: &Path) -> tonic::transport::Channel {
    let path = path.to_path_buf();
    tonic::transport::Endpoint::from_static("http://crius.invalid").connect_with_connector_lazy(
        tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_method_list_holds_every_service_method_once() {
        let m = super::GRPC_METHODS;
        for want in [
            "/runtime.v1.RuntimeService/Version",
            "/runtime.v1.RuntimeService/RunPodSandbox",
            "/runtime.v1.ImageService/PullImage",
            "/crius.pod.v1.PodService/Apply",
            "/crius.images.v1.Images/Pull",
        ] {
            assert!(m.contains(&want), "{want} missing from {m:?}");
        }
        assert!(m.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
        assert!(m.iter().all(|p| p.matches('/').count() == 2 && !p.ends_with('/')));
    }

    #[tokio::test]
    async fn a_socket_nobody_serves_is_unreachable_and_named() {
        let dir = std::env::temp_dir().join(format!("crius-api-test-{}", std::process::id()));
        let sock = dir.join("none.sock");
        let e = super::connect(&format!("unix://{}", sock.display()))
            .await
            .unwrap_err();
        let super::ConnectError::Unreachable { socket, .. } = &e;
        assert_eq!(socket, &sock.display().to_string());
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("connecting to {}: ", sock.display()))
                && text.ends_with("(is criusd running? --address / CRIUS_ADDRESS)"),
            "{text}"
        );
    }

    #[test]
    fn an_environment_value_is_text_in_json() {
        let kv = super::cri::KeyValue {
            key: "A".into(),
            value: b"b c".to_vec(),
        };
        let json = serde_json::to_value(&kv).unwrap();
        assert_eq!(json, serde_json::json!({"key": "A", "value": "b c"}));
        let back: super::cri::KeyValue = serde_json::from_value(json).unwrap();
        assert_eq!(back, kv);
    }
}
