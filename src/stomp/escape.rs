//! Header value escaping per STOMP version.
//!
//! 1.0: no escaping (values are trimmed when read). 1.1: `\n`, `\c` (colon) and `\\`.
//! 1.2: those and `\r`. Any other escape is an error in 1.1 and 1.2. CONNECT and
//! CONNECTED frames are never escaped (STOMP 1.2 "Value Encoding").

use super::frame::Version;

/// Escapes a header name or value for the wire.
pub fn escape(value: &str, version: Version) -> String {
    if version == Version::V1_0 {
        // 1.0 has no escapes; a newline would break the frame, so it becomes a space.
        return value.replace(['\n', '\r'], " ");
    }
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            ':' => out.push_str("\\c"),
            '\r' if version == Version::V1_2 => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

/// A header value's escape that STOMP does not define.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EscapeError {
    /// `\` followed by a character STOMP gives no meaning (`\t`; `\r` in 1.1).
    #[error("undefined escape sequence `\\{0}` in a header")]
    Undefined(char),
    /// `\` at the end of a header.
    #[error("a header ends with a lone backslash")]
    LoneBackslash,
}

/// Reverses [`escape`]. Errors name the bad escape.
pub fn unescape(raw: &str, version: Version) -> Result<String, EscapeError> {
    if version == Version::V1_0 {
        return Ok(raw.trim().to_string());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('c') => out.push(':'),
            Some('r') if version == Version::V1_2 => out.push('\r'),
            Some(other) => return Err(EscapeError::Undefined(other)),
            None => return Err(EscapeError::LoneBackslash),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stomp_1_2_round_trip() {
        let value = "line1\nline2:x\\end\rz";
        let wire = escape(value, Version::V1_2);
        assert_eq!(wire, "line1\\nline2\\cx\\\\end\\rz");
        assert_eq!(unescape(&wire, Version::V1_2).unwrap(), value);
    }

    #[test]
    fn undefined_escapes_are_errors() {
        assert!(unescape("x\\ty", Version::V1_2)
            .unwrap_err()
            .to_string()
            .contains("\\t"));
        assert!(unescape("x\\r", Version::V1_1).is_err(), "\\r is 1.2 only");
        assert!(unescape("x\\", Version::V1_2).is_err());
    }

    #[test]
    fn stomp_1_0_trims_and_does_not_unescape() {
        assert_eq!(unescape("  a\\cb ", Version::V1_0).unwrap(), "a\\cb");
        assert_eq!(unescape(" padded ", Version::V1_2).unwrap(), " padded ");
    }
}
