//! HTTPS (`--tls-cert`, `--tls-key`): the certificate chain and key read
//! from PEM files at start into a rustls server configuration (the `ring`
//! provider; TLS 1.2 and 1.3, HTTP/1.1 by ALPN). `http::serve` runs each
//! connection's handshake under the header timeout.
//!
//! Imports: nothing of the service.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A PEM file's error, naming the flag and the file.
fn pem_error(flag: &str, path: &Path, e: pem::Error) -> String {
    let why = match e {
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => match flag {
            "--tls-cert" => "no CERTIFICATE block in it".into(),
            _ => "no PRIVATE KEY block (PKCS#8, PKCS#1 or SEC1) in it".into(),
        },
        e => format!("not a valid PEM file: {e}"),
    };
    format!("{flag} {}: {why}", path.display())
}

/// The acceptor of HTTPS connections with the chain in `cert` (the
/// server's certificate first) and the key in `key`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_error("--tls-cert", cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error("--tls-cert", cert, e))?;
    if certs.is_empty() {
        return Err(pem_error("--tls-cert", cert, pem::Error::NoItemsFound));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_error("--tls-key", key, e))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| {
            format!(
                "--tls-cert {} with --tls-key {}: {e}",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
