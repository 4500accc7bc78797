//! The streaming server over TLS, with a certificate and key from PEM files: a TLS client that trusts the
//! certificate reaches it (and is told its token is unknown), and the URLs it hands out are https.

#[allow(dead_code)]
mod local;

use std::sync::Arc;

use crius_stream::server::{Config, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

#[tokio::test]
async fn the_server_speaks_tls_with_the_configured_certificate() {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let cfg = Config {
        tls: Some((cert_path, key_path.clone())),
        ..Config::default()
    };
    let s = Server::start(cfg, Arc::new(local::Local::default()))
        .await
        .unwrap();
    let url = s.url(local::exec(&["true"], false)).unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(cert.der().to_vec())).unwrap();
    let client = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(s.local_addr()).await.unwrap();
    let mut tls = TlsConnector::from(Arc::new(client))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the TLS handshake");
    tls.write_all(b"GET /exec/unknown HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("unknown, used already, or expired"), "{answer}");

    // A key that is not one is refused at start, naming the file.
    std::fs::write(&key_path, "not a key").unwrap();
    let bad = Config {
        tls: Some((dir.path().join("cert.pem"), key_path)),
        ..Config::default()
    };
    let e = Server::start(bad, Arc::new(local::Local::default()))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("key.pem"), "{e}");
}
