//! TLS for the streaming server: a certificate chain and key in PEM files.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result};

/// An acceptor serving the chain in `cert` with the key in `key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| Error::Tls(format!("reading certificates from {}: {e}", cert.display())))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Tls(format!("reading certificates from {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(Error::Tls(format!("{} holds no certificate", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| Error::Tls(format!("reading the key {}: {e}", key.display())))?;
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| Error::Tls(format!("the certificate and key: {e}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
