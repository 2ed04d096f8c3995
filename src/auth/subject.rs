//! Distinguished names of client certificates, as RFC 4514 writes them.
//!
//! A certificate's subject is a sequence of relative distinguished names (RDNs),
//! each a set of `TYPE=value` attributes (usually one; `CN=a+UID=b` is one RDN with
//! two). Login by certificate compares that structure, never text: the subject
//! comes from the certificate's own RDNs and attributes, and the configured
//! `certificate_subject` is parsed with RFC 4514's escapes, so a common name that
//! holds `, O=Example` or `+O=Example` is one value of one attribute and never
//! passes for two.

use std::fmt;

/// Attribute types by OID, with the name RFC 4514 (or common use) writes them by
/// and the other names accepted for them in configuration, compared without case.
const ATTRIBUTE_TYPES: &[(&str, &str, &[&str])] = &[
    ("2.5.4.3", "CN", &["commonName"]),
    ("2.5.4.4", "SN", &["surname"]),
    ("2.5.4.5", "serialNumber", &[]),
    ("2.5.4.6", "C", &["countryName"]),
    ("2.5.4.7", "L", &["localityName"]),
    ("2.5.4.8", "ST", &["stateOrProvinceName"]),
    ("2.5.4.9", "STREET", &["streetAddress"]),
    ("2.5.4.10", "O", &["organizationName"]),
    ("2.5.4.11", "OU", &["organizationalUnitName"]),
    ("2.5.4.12", "title", &[]),
    ("2.5.4.42", "givenName", &["GN"]),
    ("2.5.4.46", "dnQualifier", &[]),
    ("2.5.4.65", "pseudonym", &[]),
    ("0.9.2342.19200300.100.1.1", "UID", &["userId"]),
    ("0.9.2342.19200300.100.1.25", "DC", &["domainComponent"]),
    ("1.2.840.113549.1.9.1", "emailAddress", &["E", "email"]),
];

/// A distinguished name: RDNs in order, each a set of attributes (attribute type as a
/// dotted OID, and its value).
///
/// Two names are equal when they hold the same RDNs in the same order, or one in
/// the reverse order of the other (RFC 4514 text writes a certificate's last RDN
/// first, `CN=orders,O=Example,C=DE`; OpenSSL writes its first RDN first,
/// `C=DE, O=Example, CN=orders`: both name one certificate), each RDN with the same
/// attributes in any order (a multi-valued RDN is a set). No other order matches:
/// `OU=prod,OU=payments` is not `OU=payments,OU=prod`. Values compare exactly (case
/// and spaces count), attribute types by OID (`CN`, `cn`, `commonName` and
/// `2.5.4.3` are one type). [`fmt::Display`] writes RFC 4514 text in the order held
/// (`CN=orders\, Inc.,O=Example`), which [`str::parse`] reads back to an equal name.
#[derive(Debug, Clone)]
pub struct DistinguishedName {
    /// The RDNs, each one's attributes sorted (the order inside an RDN carries no
    /// meaning), so that names compare without sorting.
    rdns: Vec<Vec<Attribute>>,
}

/// One `TYPE=value` of an RDN.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Attribute {
    /// The attribute type as a dotted OID (`2.5.4.3` for CN).
    oid: String,
    value: Value,
}

/// An attribute's value: text, or (from a certificate) a value of a type that is
/// not a string, which no configured name matches.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Value {
    Text(String),
    Binary(Vec<u8>),
}

/// One attribute as a certificate holds it: its type as a dotted OID (`2.5.4.3`),
/// and its value as text, or `Err(bytes)` for a value that is not a string.
pub type CertificateAttribute = (String, Result<String, Vec<u8>>);

impl DistinguishedName {
    /// A name of `rdns` (in the certificate's order), each a list of attributes. For
    /// names read from certificates ([`crate::tls::certificate_subject`]).
    pub fn from_rdns(rdns: Vec<Vec<CertificateAttribute>>) -> Self {
        let rdns = rdns
            .into_iter()
            .map(|rdn| {
                rdn.into_iter()
                    .map(|(oid, value)| Attribute {
                        oid,
                        value: value.map_or_else(Value::Binary, Value::Text),
                    })
                    .collect()
            })
            .collect();
        Self::sorted(rdns)
    }

    /// A name of `rdns`, each RDN's attributes sorted.
    fn sorted(mut rdns: Vec<Vec<Attribute>>) -> Self {
        for rdn in &mut rdns {
            rdn.sort();
        }
        DistinguishedName { rdns }
    }

    /// Whether the name has no RDN at all (a certificate with an empty subject).
    pub fn is_empty(&self) -> bool {
        self.rdns.iter().all(Vec::is_empty)
    }

    /// Whether a value of the name is not text (shown as `#hex`): such a name matches
    /// no configured subject.
    pub fn has_binary_value(&self) -> bool {
        self.rdns
            .iter()
            .flatten()
            .any(|a| matches!(a.value, Value::Binary(_)))
    }
}

impl PartialEq for DistinguishedName {
    fn eq(&self, other: &Self) -> bool {
        self.rdns == other.rdns || self.rdns.iter().eq(other.rdns.iter().rev())
    }
}

impl Eq for DistinguishedName {}

impl fmt::Display for DistinguishedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, rdn) in self.rdns.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            for (j, attribute) in rdn.iter().enumerate() {
                if j > 0 {
                    f.write_str("+")?;
                }
                let name = ATTRIBUTE_TYPES
                    .iter()
                    .find(|(oid, _, _)| *oid == attribute.oid)
                    .map_or(attribute.oid.as_str(), |(_, name, _)| name);
                write!(f, "{name}=")?;
                match &attribute.value {
                    Value::Text(text) => write_escaped(f, text)?,
                    Value::Binary(bytes) => {
                        f.write_str("#")?;
                        for b in bytes {
                            write!(f, "{b:02x}")?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Writes `value` with RFC 4514's escapes: `\` before `" + , ; < > \`, a leading
/// `#` or space and a trailing space; control characters as `\XX`.
fn write_escaped(f: &mut fmt::Formatter<'_>, value: &str) -> fmt::Result {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => write!(f, "\\{c}")?,
            '#' if i == 0 => f.write_str("\\#")?,
            ' ' if i == 0 || i == last => f.write_str("\\ ")?,
            c if c.is_control() => {
                let mut buffer = [0u8; 4];
                for b in c.encode_utf8(&mut buffer).bytes() {
                    write!(f, "\\{b:02X}")?;
                }
            }
            c => write!(f, "{c}")?,
        }
    }
    Ok(())
}

/// Why RFC 4514 text is not a distinguished name Ebb can compare; the text says what
/// and where (an unknown attribute type, an OID no certificate can hold, a bad escape,
/// an empty value, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SubjectError(String);

impl std::str::FromStr for DistinguishedName {
    type Err = SubjectError;

    /// Reads RFC 4514 text: RDNs separated by `,`, attributes of one RDN by `+`,
    /// each `TYPE=value` with TYPE a name (`CN`, `O`, `OU`, `C`, `L`, `ST`, `STREET`,
    /// `DC`, `UID`, `emailAddress`, `serialNumber`, ...; case ignored) or a dotted
    /// OID. In values, `\` escapes one of `, + " \ < > ; # =` or a space, or gives a
    /// byte as two hex digits (`\2C`); spaces around separators are ignored.
    ///
    /// Errors (saying where): an empty name, a part without `=`, an unknown type, an
    /// empty value, an unescaped `" ; < >`, a `\` that escapes nothing, a
    /// hex-encoded (`#...`) value, bytes that are not UTF-8.
    fn from_str(text: &str) -> Result<Self, SubjectError> {
        if text.trim().is_empty() {
            return Err(SubjectError(
                "an empty distinguished name (write e.g. CN=orders,O=Example)".into(),
            ));
        }
        let mut chars = text.chars().peekable();
        let mut rdns = Vec::new();
        let mut rdn = Vec::new();
        loop {
            let mut kind = String::new();
            while let Some(&c) = chars.peek() {
                if matches!(c, '=' | ',' | '+') {
                    break;
                }
                kind.push(c);
                chars.next();
            }
            let kind = kind.trim().to_string();
            if kind.is_empty() && chars.peek().is_none() {
                return Err(SubjectError(
                    "the name ends with `,` or `+`: an attribute is missing after it".into(),
                ));
            }
            if chars.next() != Some('=') {
                return Err(SubjectError(format!(
                    "`{kind}` is not TYPE=value (write e.g. CN=orders,O=Example)"
                )));
            }
            let oid = attribute_type(&kind)?;
            let (value, separator) = parse_value(&kind, &mut chars)?;
            rdn.push(Attribute {
                oid,
                value: Value::Text(value),
            });
            match separator {
                Some('+') => {}
                Some(_) => rdns.push(std::mem::take(&mut rdn)),
                None => {
                    rdns.push(rdn);
                    break;
                }
            }
        }
        Ok(Self::sorted(rdns))
    }
}

/// The OID of attribute type `name` (a name from [`ATTRIBUTE_TYPES`], any case, or
/// a dotted OID, optionally written `OID.1.2.3`).
fn attribute_type(name: &str) -> Result<String, SubjectError> {
    if name.is_empty() {
        return Err(SubjectError(
            "an attribute has no type before its `=`".into(),
        ));
    }
    let bare = name
        .strip_prefix("OID.")
        .or_else(|| name.strip_prefix("oid."))
        .unwrap_or(name);
    let dotted = bare.split('.').count() > 1
        && bare
            .split('.')
            .all(|arc| !arc.is_empty() && arc.bytes().all(|b| b.is_ascii_digit()));
    if dotted {
        return object_identifier(bare);
    }
    ATTRIBUTE_TYPES
        .iter()
        .find(|(_, known, aliases)| {
            known.eq_ignore_ascii_case(name) || aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
        })
        .map(|(oid, _, _)| (*oid).to_string())
        .ok_or_else(|| {
            let known: Vec<&str> = ATTRIBUTE_TYPES.iter().map(|(_, n, _)| *n).collect();
            SubjectError(format!(
                "`{name}` is not an attribute type: use one of {} or a dotted OID",
                known.join(", ")
            ))
        })
}

/// `dotted` (digits and dots) as a certificate's OID is written, or why no
/// certificate's can be: an arc with a leading zero (`2.5.4.03`), a first arc other
/// than 0, 1 or 2, a second arc of 40 or more under 0 or 1, an arc over 64 bits.
fn object_identifier(dotted: &str) -> Result<String, SubjectError> {
    let mut arcs = Vec::new();
    for arc in dotted.split('.') {
        if arc.len() > 1 && arc.starts_with('0') {
            return Err(SubjectError(format!(
                "OID `{dotted}`: the arc `{arc}` has a leading zero"
            )));
        }
        let value: u64 = arc.parse().map_err(|_| {
            SubjectError(format!("OID `{dotted}`: the arc `{arc}` is over 64 bits"))
        })?;
        arcs.push(value);
    }
    match arcs[..] {
        [first, ..] if first > 2 => Err(SubjectError(format!(
            "OID `{dotted}`: the first arc must be 0, 1 or 2"
        ))),
        [first, second, ..] if first < 2 && second >= 40 => Err(SubjectError(format!(
            "OID `{dotted}`: under arc {first}, the second arc must be below 40"
        ))),
        _ => Ok(dotted.to_string()),
    }
}

/// Reads one attribute's value after its `=`, up to an unescaped `,` or `+` (the
/// separator returned) or the end (`None`).
fn parse_value(
    kind: &str,
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
) -> Result<(String, Option<char>), SubjectError> {
    while chars.peek() == Some(&' ') {
        chars.next();
    }
    if chars.peek() == Some(&'#') {
        return Err(SubjectError(format!(
            "the value of {kind} starts with `#` (a hex-encoded value, not supported): write the text, or `\\#` for a leading #"
        )));
    }
    let mut bytes = Vec::new();
    // The length without trailing unescaped spaces.
    let mut kept = 0;
    let separator = loop {
        let Some(c) = chars.next() else { break None };
        match c {
            ',' | '+' => break Some(c),
            '\\' => {
                let Some(e) = chars.next() else {
                    return Err(SubjectError(format!("the value of {kind} ends with a lone `\\`")));
                };
                if let Some(high) = e.to_digit(16) {
                    let low = chars.next().and_then(|l| l.to_digit(16)).ok_or_else(|| {
                        SubjectError(format!("in the value of {kind}, `\\{e}` is not followed by a second hex digit"))
                    })?;
                    bytes.push((high * 16 + low) as u8);
                } else if matches!(e, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '#' | '=' | ' ') {
                    bytes.push(e as u8);
                } else {
                    return Err(SubjectError(format!(
                        "in the value of {kind}, `\\{e}` is not an escape: escape one of , + \" \\ < > ; # = or a space, or write a byte as two hex digits"
                    )));
                }
                kept = bytes.len();
            }
            '"' | ';' | '<' | '>' => {
                return Err(SubjectError(format!(
                    "in the value of {kind}, `{c}` must be escaped as `\\{c}` (and `,` separates RDNs, not `;`)"
                )))
            }
            c => {
                let mut buffer = [0u8; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
                if c != ' ' {
                    kept = bytes.len();
                }
            }
        }
    };
    bytes.truncate(kept);
    if bytes.is_empty() {
        return Err(SubjectError(format!("{kind} has an empty value")));
    }
    let value = String::from_utf8(bytes).map_err(|_| {
        SubjectError(format!(
            "the value of {kind} is not UTF-8 (check its hex escapes)"
        ))
    })?;
    Ok((value, separator))
}

impl<'de> serde::Deserialize<'de> for DistinguishedName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dn(text: &str) -> DistinguishedName {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn cert(rdns: &[&[(&str, &str)]]) -> DistinguishedName {
        DistinguishedName::from_rdns(
            rdns.iter()
                .map(|rdn| {
                    rdn.iter()
                        .map(|(oid, v)| (oid.to_string(), Ok(v.to_string())))
                        .collect()
                })
                .collect(),
        )
    }

    const CN: &str = "2.5.4.3";
    const O: &str = "2.5.4.10";

    #[test]
    fn values_holding_separators_are_one_value() {
        let config = dn("CN=orders-service,O=Example");
        assert_eq!(
            config,
            cert(&[&[(CN, "orders-service")], &[(O, "Example")]])
        );
        // A single CN that holds `, O=Example` or `+O=Example` is not two attributes.
        assert_ne!(config, cert(&[&[(CN, "orders-service, O=Example")]]));
        assert_ne!(config, cert(&[&[(CN, "orders-service,O=Example")]]));
        assert_ne!(config, cert(&[&[(CN, "orders-service+O=Example")]]));
        // A multi-valued RDN is one RDN, not two.
        assert_ne!(config, cert(&[&[(CN, "orders-service"), (O, "Example")]]));
        assert_eq!(
            dn("CN=orders-service+O=Example"),
            cert(&[&[(O, "Example"), (CN, "orders-service")]])
        );
        // An escaped comma is part of its value, and such a subject can match.
        assert_eq!(
            dn("CN=orders\\, Inc.,O=Example"),
            cert(&[&[(CN, "orders, Inc.")], &[(O, "Example")]])
        );
        assert_eq!(dn("CN=a\\2Cb"), cert(&[&[(CN, "a,b")]]));
    }

    #[test]
    fn types_by_oid_values_exactly_rdns_in_order_or_reversed() {
        let certificate = cert(&[
            &[("2.5.4.6", "DE")],
            &[(O, "Example")],
            &[(CN, "orders")],
            &[("1.2.840.113549.1.9.1", "ops@example.com")],
        ]);
        // In the certificate's order (as OpenSSL writes it) or reversed (RFC 4514).
        for text in [
            "emailAddress=ops@example.com,CN=orders,O=Example,C=DE",
            "c = DE , o=Example, cn=orders, E=ops@example.com",
            "1.2.840.113549.1.9.1=ops@example.com,2.5.4.3=orders,OID.2.5.4.10=Example,countryName=DE",
        ] {
            assert_eq!(dn(text), certificate, "{text}");
        }
        // Any other order is another name: a hierarchy is an order.
        assert_ne!(
            dn("CN=orders,O=Example,C=DE,E=ops@example.com"),
            certificate
        );
        let hierarchy = cert(&[
            &[("2.5.4.11", "prod")],
            &[("2.5.4.11", "payments")],
            &[(CN, "svc")],
        ]);
        assert_eq!(dn("CN=svc,OU=payments,OU=prod"), hierarchy);
        assert_ne!(dn("CN=svc,OU=prod,OU=payments"), hierarchy);
        // Values are exact: case, and spaces the certificate holds, count.
        assert_ne!(
            dn("CN=Orders,O=Example,C=DE,E=ops@example.com"),
            certificate
        );
        assert_ne!(cert(&[&[(CN, " orders")]]), dn("CN=orders"));
        assert_eq!(cert(&[&[(CN, " orders ")]]), dn("CN=\\ orders\\ "));
        // A missing or extra attribute is another name.
        assert_ne!(dn("CN=orders,O=Example,C=DE"), certificate);
        // A value that is not text matches no configured name.
        let binary = DistinguishedName::from_rdns(vec![vec![(CN.into(), Err(vec![0x6f]))]]);
        assert_ne!(binary, dn("CN=o"));
        assert_eq!(binary.to_string(), "CN=#6f");
    }

    #[test]
    fn text_round_trips_with_escapes() {
        let certificate = cert(&[
            &[(CN, "orders-service, O=Example")],
            &[(O, "#1 \"A+B\" <x>;\\")],
            &[("1.2.3.4", " padded ")],
        ]);
        let text = certificate.to_string();
        assert_eq!(
            text,
            "CN=orders-service\\, O=Example,O=\\#1 \\\"A\\+B\\\" \\<x\\>\\;\\\\,1.2.3.4=\\ padded\\ "
        );
        assert_eq!(dn(&text), certificate);
    }

    #[test]
    fn names_that_could_never_match_are_refused() {
        for (text, says) in [
            ("", "empty distinguished name"),
            ("   ", "empty distinguished name"),
            ("orders", "not TYPE=value"),
            ("/CN=a/O=b", "not an attribute type"),
            ("CN=", "CN has an empty value"),
            ("CN=a,O=", "O has an empty value"),
            ("CN=a,", "ends with `,` or `+`"),
            ("CN=a+", "ends with `,` or `+`"),
            ("CN=a\\", "lone `\\`"),
            ("CN=a;O=b", "must be escaped"),
            ("CN=\"quoted\"", "must be escaped"),
            ("CN=a\\q", "not an escape"),
            ("CN=a\\4", "second hex digit"),
            ("CN=\\FF", "not UTF-8"),
            ("CN=#04026f6b", "hex-encoded"),
            ("FOO=bar", "not an attribute type"),
            ("=bar", "no type"),
            ("1.=x", "not an attribute type"),
            ("2.5.4.03=x", "leading zero"),
            ("3.1=x", "first arc must be 0, 1 or 2"),
            ("0.99=x", "second arc must be below 40"),
            ("1.2.3.99999999999999999999999=x", "over 64 bits"),
        ] {
            let error = text.parse::<DistinguishedName>().unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }
}
