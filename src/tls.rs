//! TLS (the `tls` feature, part of `cli`) with rustls: STOMP over TLS (ActiveMQ's
//! `stomp+ssl` transport) and the HTTP server as `https` and `wss`.
//!
//! The certificate chain and private key come from PEM files named in the
//! configuration (`[tls] cert_file`, `key_file`); with `client_ca_file`, every client
//! must present a certificate signed by that CA (mutual TLS: the handshake fails
//! otherwise), on top of STOMP's own login. A TLS handshake must end within
//! [`HANDSHAKE_TIMEOUT`], so a client that opens a socket and says nothing holds it
//! no longer than that. Nothing here is a certificate: tests make theirs at run time.
//!
//! The verified client certificate's subject ([`certificate_subject`]) can log a
//! connection in as the user whose `certificate_subject` it is ([`crate::auth`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the certificate and key are: `[tls]` in the configuration file.
pub use crate::config::TlsSection as TlsFiles;

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {} is not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{what} {} holds no certificate", path.display()));
    }
    Ok(certs)
}

impl TlsFiles {
    /// The rustls server configuration these files make.
    ///
    /// Errors (as text naming the file): a file that cannot be read, holds no
    /// certificate or key, or a key that does not match the certificate.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates(&self.cert_file, "certificate file")?;
        let key = PrivateKeyDer::from_pem_file(&self.key_file).map_err(|e| {
            format!(
                "key file {}: no PEM private key ({e})",
                self.key_file.display()
            )
        })?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(ca, "client CA file")? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("client CA file {}: {e}", ca.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| format!("client CA file {}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        builder.with_single_cert(chain, key).map_err(|e| {
            format!(
                "certificate {} and key {} do not go together: {e}",
                self.cert_file.display(),
                self.key_file.display()
            )
        })
    }

    /// An acceptor for these files, with `alpn` protocols offered (`http/1.1` for the
    /// HTTP server; none for STOMP). Errors: as [`TlsFiles::server_config`].
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Result<TlsAcceptor, String> {
        let mut config = self.server_config()?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// The subject of the client certificate `connection`'s peer presented (verified by
/// the handshake against `[tls] client_ca_file`), read from the certificate's own
/// RDNs and attributes (never re-parsed from text, so a value holding `,` or `+`
/// stays one value); `None` without client certificates or for one that does not
/// parse.
pub fn certificate_subject(
    connection: &rustls::ServerConnection,
) -> Option<crate::auth::DistinguishedName> {
    let leaf = connection.peer_certificates()?.first()?;
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    Some(subject_of(certificate.subject()))
}

/// `name` as a [`crate::auth::DistinguishedName`]: each attribute's type as its
/// dotted OID, its value as text when it is one of X.520's string types
/// (UTF8String, PrintableString, IA5String, NumericString, BMPString,
/// UniversalString), else as its bytes (which no configured subject matches).
fn subject_of(name: &x509_parser::x509::X509Name<'_>) -> crate::auth::DistinguishedName {
    use x509_parser::asn1_rs::Tag;
    let rdns = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attribute| {
                    let raw = attribute.attr_value();
                    let value = match raw.tag() {
                        Tag::BmpString => utf16(raw.data),
                        Tag::UniversalString => utf32(raw.data),
                        _ => attribute.as_str().ok().map(str::to_string),
                    };
                    let oid = attribute.attr_type().to_id_string();
                    (oid, value.ok_or_else(|| raw.data.to_vec()))
                })
                .collect()
        })
        .collect();
    crate::auth::DistinguishedName::from_rdns(rdns)
}

/// A BMPString's bytes (UTF-16, big-endian) as text.
fn utf16(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    let units: Vec<u16> = bytes
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16(&units).ok()
}

/// A UniversalString's bytes (UTF-32, big-endian) as text.
fn utf32(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    bytes
        .chunks(4)
        .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
        .collect()
}
