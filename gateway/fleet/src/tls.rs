//! TLS to the fleet database, with libpq's `sslmode` meanings.
//!
//! The driver knows `sslmode=disable|prefer|require` and neither `verify-ca`, `verify-full`
//! nor `sslrootcert`; operators write the URLs they write for `psql`. So those two
//! parameters are taken out of the URL here and turned into a rustls verifier:
//!
//! | sslmode | encrypted | certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it | only if `sslrootcert` is given |
//! | `require` | always | only if `sslrootcert` is given (chain, as libpq does then) |
//! | `verify-ca` | always | chain to `sslrootcert` or the system's CAs |
//! | `verify-full` | always | chain and host name |

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{FleetError, Result};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

const MODES: &str = "disable, prefer, require, verify-ca or verify-full";

/// What the URL asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A database URL split into what the driver parses and the TLS it asks for.
#[derive(Debug)]
pub(crate) struct Split {
    /// The URL without `sslmode` and `sslrootcert`.
    pub url: String,
    mode: Mode,
    root_cert: Option<PathBuf>,
}

/// Take `sslmode` and `sslrootcert` out of a `postgres://` URL or a `key=value` string.
pub(crate) fn split(url: &str) -> Result<Split> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: &str| -> Result<bool> {
        match key {
            "sslmode" => {
                mode = Some(match value {
                    "disable" => Mode::Disable,
                    "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    other => crate::error::invalid!("sslmode={other} is not known; use {MODES}"),
                });
                Ok(true)
            }
            "sslrootcert" => {
                root_cert = Some(PathBuf::from(value));
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    let rest = if url.contains("://") {
        match url.split_once('?') {
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                    let (key, value) = form_urlencoded::parse(pair.as_bytes())
                        .next()
                        .unwrap_or_default();
                    if !take(&key, &value)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
            None => url.to_owned(),
        }
    } else {
        let mut kept = Vec::new();
        for word in url.split_whitespace() {
            let taken = match word.split_once('=') {
                Some((key, value)) => take(key.trim(), value.trim_matches('\''))?,
                None => false,
            };
            if !taken {
                kept.push(word);
            }
        }
        kept.join(" ")
    };
    let mode = mode.unwrap_or(Mode::Prefer);
    Ok(Split {
        url: rest,
        mode,
        root_cert,
    })
}

impl Split {
    /// The driver's mode: it encrypts; the checks are the verifier's.
    pub fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector, its certificate checks as the table at the top says.
    pub fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(crypto::aws_lc_rs::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.root_cert) {
            (Mode::Disable, _) | (Mode::Prefer | Mode::Require, None) => {
                Arc::new(EncryptOnly(provider.clone()))
            }
            (Mode::VerifyFull, _) => self.webpki(&provider)?,
            (Mode::Prefer | Mode::Require | Mode::VerifyCa, _) => {
                Arc::new(ChainOnly(self.webpki(&provider)?))
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| {
                FleetError::Invalid(format!(
                    "TLS for the fleet database cannot be set up: {error}"
                ))
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }

    fn webpki(&self, provider: &Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>> {
        let mut roots = RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                let certificates = CertificateDer::pem_file_iter(path)
                    .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
                    .map_err(|error| {
                        FleetError::Invalid(format!(
                            "could not read the fleet database's CA certificates from sslrootcert={} ({error}); give a PEM file of the CA that signed the database's certificate",
                            path.display()
                        ))
                    })?;
                let (added, _) = roots.add_parsable_certificates(certificates);
                crate::error::ensure!(
                    added > 0,
                    "sslrootcert={} holds no usable CA certificate; give a PEM file of the CA that signed the database's certificate",
                    path.display()
                );
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
                crate::error::ensure!(
                    !roots.is_empty(),
                    "sslmode verifies the fleet database's certificate, but this system has no CA certificates; give the CA with sslrootcert=PATH in the database URL"
                );
            }
        }
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|error| {
                FleetError::Invalid(format!(
                    "the fleet database's certificate checks cannot be set up: {error}"
                ))
            })
    }
}

/// A hint for a connection error, when it is about TLS. The certificate cases are read from
/// the rustls error in the chain (tokio-rustls wraps it in an `io::Error`); the driver's own
/// "server does not support TLS" has no kind to match, only its words.
pub(crate) fn hint(error: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cause = Some(error);
    let mut tls = false;
    while let Some(error) = cause {
        let inner = error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        let rustls = error
            .downcast_ref::<tokio_rustls::rustls::Error>()
            .or_else(|| inner.and_then(|inner| inner.downcast_ref()));
        if let Some(tokio_rustls::rustls::Error::InvalidCertificate(problem)) = rustls {
            return match problem {
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    "; the database's certificate names another host: connect by a name it holds, or use sslmode=verify-ca to check the CA alone"
                }
                _ => {
                    "; give the CA that signed the database's certificate with sslrootcert=PATH in the database URL, or use sslmode=require to encrypt without checking it"
                }
            };
        }
        tls |= rustls.is_some() || error.to_string().contains("TLS");
        cause = error.source();
    }
    if tls {
        "; the database URL's sslmode asks for TLS the server may not offer (see its ssl setting), or use sslmode=disable or prefer"
    } else {
        ""
    }
}

/// `prefer` and `require` without `sslrootcert`, as libpq: encrypted, the certificate not
/// checked. The handshake's signatures still are (with the provider's algorithms).
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted CA; the host name is not compared. The
/// chain is checked before the name, so a name mismatch means the chain passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(tokio_rustls::rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_both_url_forms() {
        let parts =
            split("postgres://u:p@db:5432/f?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem")
                .unwrap();
        assert_eq!(parts.url, "postgres://u:p@db:5432/f?application_name=x");
        assert_eq!(parts.mode, Mode::VerifyFull);
        assert_eq!(parts.root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(parts.ssl_mode(), SslMode::Require);

        let parts = split("host=db user=u sslmode=require dbname=f").unwrap();
        assert_eq!(parts.url, "host=db user=u dbname=f");
        assert_eq!(parts.mode, Mode::Require);

        let parts = split("postgres://u@db/f").unwrap();
        assert_eq!(parts.mode, Mode::Prefer);
        assert_eq!(parts.url, "postgres://u@db/f");
    }

    #[test]
    fn an_unknown_sslmode_names_the_known_ones() {
        let error = split("postgres://u@db/f?sslmode=allow")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("sslmode=allow") && error.contains("verify-full"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_root_certificate_file_is_named() {
        let parts =
            split("postgres://u@db/f?sslmode=verify-ca&sslrootcert=/nowhere/ca.pem").unwrap();
        let error = parts.connector().err().unwrap().to_string();
        assert!(error.contains("/nowhere/ca.pem"), "{error}");
    }
}
