//! TLS for `--listen` without a reverse proxy (`--tls-cert`, `--tls-key`): rustls, with the
//! certificate chain and private key read from PEM files once at startup.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

/// Accepts TLS connections with one certificate.
pub type Acceptor = tokio_rustls::TlsAcceptor;

/// The acceptor for the certificate chain in `cert` and the key in `key` (PEM), offering
/// HTTP/2 and HTTP/1.1. Errors name the file and what to do.
pub fn load(cert: &Path, key: &Path) -> Result<Acceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|error| {
            format!(
                "could not read the certificate file {}: {error}; give a PEM file (--tls-cert)",
                cert.display()
            )
        })?
        .collect::<Result<_, _>>()
        .map_err(|error| {
            format!(
                "the certificate file {} is not valid PEM: {error}",
                cert.display()
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "the certificate file {} holds no certificate; give the PEM chain, the server's certificate first (--tls-cert)",
            cert.display()
        ));
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|error| {
        format!(
            "could not read a private key from {}: {error}; give a PEM file with one PKCS#8, PKCS#1 or SEC1 key (--tls-key)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("could not set up TLS: {error}"))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|error| {
            format!(
                "the certificate in {} and the key in {} cannot be used together: {error}",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
