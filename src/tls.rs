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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Longest a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the certificate and key are: `[tls]` in the configuration file.
pub use crate::config::TlsSection as TlsFiles;

/// Why the TLS files cannot be used. Each text names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate file that cannot be read.
    #[error("cannot read {what} {}: {reason}", path.display())]
    Read {
        /// `certificate file` or `client CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (the PEM reader's words).
        reason: String,
    },
    /// A file that is not PEM certificates.
    #[error("{what} {} is not PEM certificates: {reason}", path.display())]
    NotPem {
        /// `certificate file` or `client CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (the PEM reader's words).
        reason: String,
    },
    /// A file with no certificate in it.
    #[error("{what} {} holds no certificate", path.display())]
    Empty {
        /// `certificate file` or `client CA file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// A key file with no PEM private key.
    #[error("key file {}: no PEM private key ({reason})", path.display())]
    NoKey {
        /// The file.
        path: PathBuf,
        /// Why (the PEM reader's words).
        reason: String,
    },
    /// A client CA that rustls does not take.
    #[error("client CA file {}: {reason}", path.display())]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// Why (rustls's words).
        reason: String,
    },
    /// A certificate and key that do not go together.
    #[error("certificate {} and key {} do not go together: {reason}", cert.display(), key.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why (rustls's words).
        reason: String,
    },
    /// rustls refused its own protocol versions (not expected).
    #[error("{0}")]
    Rustls(rustls::Error),
}

fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::Read {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NotPem {
            what,
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

impl TlsFiles {
    /// The rustls server configuration these files make.
    ///
    /// Errors ([`TlsError`], naming the file): a file that cannot be read, holds no
    /// certificate or key, or a key that does not match the certificate.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates(&self.cert_file, "certificate file")?;
        let key = PrivateKeyDer::from_pem_file(&self.key_file).map_err(|e| TlsError::NoKey {
            path: self.key_file.clone(),
            reason: e.to_string(),
        })?;
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?;
        let client_ca = |ca: &Path, e: &dyn std::fmt::Display| TlsError::ClientCa {
            path: ca.to_path_buf(),
            reason: e.to_string(),
        };
        let builder = match &self.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in certificates(ca, "client CA file")? {
                    roots.add(cert).map_err(|e| client_ca(ca, &e))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .map_err(|e| client_ca(ca, &e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        builder
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Mismatch {
                cert: self.cert_file.clone(),
                key: self.key_file.clone(),
                reason: e.to_string(),
            })
    }

    /// An acceptor for these files, with `alpn` protocols offered (`http/1.1` for the
    /// HTTP server; none for STOMP). Errors: as [`TlsFiles::server_config`].
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Result<TlsAcceptor, TlsError> {
        let mut config = self.server_config()?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// The subject of the client certificate `connection`'s peer presented (verified by
/// the handshake against `[tls] client_ca_file`), read from the certificate's own
/// RDNs and attributes (never re-parsed from text, so a value holding `,` or `+`
/// stays one value); `None` without client certificates, for one that does not
/// parse, or for a subject that is not strict DER ([`subject_of`]): such a
/// certificate logs in as nobody (logged).
pub fn certificate_subject(
    connection: &rustls::ServerConnection,
) -> Option<crate::auth::DistinguishedName> {
    let leaf = connection.peer_certificates()?.first()?;
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    match subject_of(certificate.subject()) {
        Ok(subject) => Some(subject),
        Err(why) => {
            tracing::info!(%why, "client certificate: its subject is not strict DER, so it logs in as nobody");
            None
        }
    }
}

/// What of a certificate's subject is not strict DER.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotDer {
    /// The part named.
    #[error("{0} is not DER")]
    Part(&'static str),
    /// An OID whose encoding (these bytes) is padded or cut short.
    #[error("the OID {0:02x?} (padded or cut short) is not DER")]
    Oid(Vec<u8>),
    /// A value tagged outside the universal class, or constructed (its tag).
    #[error("an attribute's value is tagged {0:#04x}: not a primitive of the universal class")]
    ValueTag(u8),
}

/// `name` as a [`crate::auth::DistinguishedName`]: each attribute's type as its
/// dotted OID, its value as text when it is one of X.520's string types
/// (UTF8String, PrintableString, IA5String, NumericString, BMPString,
/// UniversalString), else as its bytes (which no configured subject matches).
///
/// The parser reads more than DER allows, and another reader of the same bytes (a
/// CA's policy check, OpenSSL) may see another name in them, or none: an OID whose
/// encoding is padded (`55 04 80 03` read as 2.5.4.3) or cut short, a value tagged
/// in another class with a string type's number, BER's long or indefinite lengths,
/// high tag numbers, constructed strings. Such a subject is refused whole
/// ([`strict_der_name`] says why), so a name is only ever read one way.
fn subject_of(
    name: &x509_parser::x509::X509Name<'_>,
) -> Result<crate::auth::DistinguishedName, NotDer> {
    use x509_parser::asn1_rs::Tag;
    strict_der_name(name.as_raw())?;
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
    Ok(crate::auth::DistinguishedName::from_rdns(rdns))
}

/// Checks that `raw`, a Name's encoding (`SEQUENCE OF SET OF SEQUENCE { OID, value
/// }`), is DER in every part a reader could take another way: each tag in the
/// low-tag-number form, each length definite and minimal, each structure the type it
/// must be with nothing after its parts, each OID minimal ([`minimal_oid`]), each
/// value a primitive of the universal class. The error says what is not.
fn strict_der_name(raw: &[u8]) -> Result<(), NotDer> {
    let not_der = |what: &'static str| Err(NotDer::Part(what));
    let Some((0x30, mut rdns, &[])) = der_tlv(raw) else {
        return not_der("the name's SEQUENCE");
    };
    while !rdns.is_empty() {
        let Some((0x31, mut set, next)) = der_tlv(rdns) else {
            return not_der("an RDN's SET");
        };
        rdns = next;
        while !set.is_empty() {
            let Some((0x30, attribute, next)) = der_tlv(set) else {
                return not_der("an attribute's SEQUENCE");
            };
            set = next;
            let Some((0x06, oid, value)) = der_tlv(attribute) else {
                return not_der("an attribute's type (an OID)");
            };
            if !minimal_oid(oid) {
                return Err(NotDer::Oid(oid.to_vec()));
            }
            let Some((tag, _, &[])) = der_tlv(value) else {
                return not_der("an attribute's value");
            };
            if tag & 0xe0 != 0 {
                return Err(NotDer::ValueTag(tag));
            }
        }
    }
    Ok(())
}

/// The DER TLV at the start of `bytes`: (tag byte, contents, what follows); `None`
/// for a tag in the high-tag-number form, a length that is indefinite, longer than
/// it needs to be (long form under 128, leading zero bytes), over 4 bytes, or past
/// the end of `bytes`.
fn der_tlv(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n || rest[0] == 0 {
            return None;
        }
        let length = rest[..n]
            .iter()
            .fold(0usize, |a, b| (a << 8) | usize::from(*b));
        if length < 0x80 {
            return None;
        }
        (length, &rest[n..])
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// Whether `bytes` (an OID's content octets) are DER: at least one byte, every
/// sub-identifier without a leading `0x80` byte (padding), the last byte ending one
/// (not cut short).
fn minimal_oid(bytes: &[u8]) -> bool {
    let Some(last) = bytes.last() else {
        return false;
    };
    let starts = std::iter::once(0).chain(
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b < 0x80)
            .map(|(i, _)| i + 1),
    );
    last & 0x80 == 0
        && starts
            .filter(|&i| i < bytes.len())
            .all(|i| bytes[i] != 0x80)
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

#[cfg(test)]
mod tests {
    use super::{der_tlv, minimal_oid, strict_der_name, subject_of};
    use x509_parser::prelude::FromDer;

    /// The DER of a Name of one RDN of one attribute: type `oid` (content octets),
    /// value `value` with tag byte `tag`.
    fn name(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        let tlv = |tag: u8, content: &[u8]| {
            let mut out = vec![tag, content.len() as u8];
            out.extend_from_slice(content);
            out
        };
        let attribute = [tlv(0x06, oid), tlv(tag, value.as_bytes())].concat();
        tlv(0x30, &tlv(0x31, &tlv(0x30, &attribute)))
    }

    #[test]
    fn a_subject_is_read_one_way_or_refused() {
        let read = |der: &[u8]| {
            let (_, parsed) = x509_parser::x509::X509Name::from_der(der).unwrap();
            subject_of(&parsed)
        };
        let cn = "CN=orders-service".parse().unwrap();
        let der = name(&[0x55, 0x04, 0x03], 0x0c, "orders-service");
        assert_eq!(read(&der), Ok(cn));
        // What a lenient parser reads as CN, another as nothing: refused.
        let padded = read(&name(&[0x55, 0x04, 0x80, 0x03], 0x0c, "orders-service"));
        assert!(padded
            .unwrap_err()
            .to_string()
            .contains("padded or cut short"));
        let short = read(&name(&[0x55, 0x04, 0x83], 0x0c, "orders-service"));
        assert!(short
            .unwrap_err()
            .to_string()
            .contains("padded or cut short"));
        // A context-class tag with UTF8String's number is not a UTF8String.
        let context = read(&name(&[0x55, 0x04, 0x03], 0x8c, "orders-service"));
        assert!(context
            .unwrap_err()
            .to_string()
            .contains("not a primitive of the universal class"));
        // A constructed UTF8String: BER, not DER.
        let constructed = read(&name(&[0x55, 0x04, 0x03], 0x2c, "orders-service"));
        assert!(constructed
            .unwrap_err()
            .to_string()
            .contains("not a primitive"));
    }

    #[test]
    fn only_minimal_oids_pass() {
        assert!(minimal_oid(&[0x55, 0x04, 0x03]), "2.5.4.3");
        assert!(minimal_oid(&[
            0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01
        ]));
        assert!(!minimal_oid(&[0x55, 0x04, 0x80, 0x03]), "padded");
        assert!(!minimal_oid(&[0x80, 0x55]), "padded first");
        assert!(!minimal_oid(&[0x55, 0x04, 0x83]), "cut short");
        assert!(!minimal_oid(&[]));
    }

    #[test]
    fn ber_lengths_and_tags_are_not_der() {
        assert_eq!(
            der_tlv(&[0x0c, 0x01, b'a']),
            Some((0x0c, &b"a"[..], &[][..]))
        );
        assert_eq!(
            der_tlv(&[0x0c, 0x81, 0x01, b'a']),
            None,
            "long form under 128"
        );
        assert_eq!(
            der_tlv(&[0x0c, 0x82, 0x00, 0x01, b'a']),
            None,
            "leading zero"
        );
        assert_eq!(der_tlv(&[0x0c, 0x80, b'a', 0, 0]), None, "indefinite");
        assert_eq!(der_tlv(&[0x1f, 0x0c, 0x01, b'a']), None, "high tag number");
        assert_eq!(der_tlv(&[0x0c, 0x05, b'a']), None, "past the end");
        let long = [vec![0x0c, 0x81, 0x80], vec![b'x'; 128]].concat();
        assert_eq!(der_tlv(&long).map(|t| t.1.len()), Some(128));
        // A whole name with a long-form length inside is refused.
        let ok = name(&[0x55, 0x04, 0x03], 0x0c, "orders-service");
        assert_eq!(strict_der_name(&ok), Ok(()));
        let mut ber = ok.clone();
        let at = ber.len() - "orders-service".len() - 1;
        ber.insert(at, 0x81);
        for i in [1, 3, 5] {
            ber[i] += 1; // the enclosing lengths
        }
        assert!(
            strict_der_name(&ber)
                .unwrap_err()
                .to_string()
                .contains("is not DER"),
            "{ber:02x?}"
        );
    }
}
