//! The stored body format: one format byte, then the [`Payload`] in postcard.
//!
//! The format byte lets a later version change the encoding and still read old rows.
//! Decoding never panics: an unknown format byte or truncated bytes is an error.

use crate::model::Payload;

/// Format byte of the current encoding (postcard of [`Payload`]).
pub const FORMAT_POSTCARD_V1: u8 = 1;

/// Encodes a payload for the `msg` column.
pub fn encode(payload: &Payload) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.body.len() + 32);
    out.push(FORMAT_POSTCARD_V1);
    // Serializing into a Vec only fails on an allocation failure, which aborts anyway.
    postcard::to_io(payload, &mut out).expect("postcard encoding into a Vec");
    out
}

/// Why a `msg` column cannot be decoded ([`crate::StoreError::Corrupt`] carries it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No bytes at all.
    #[error("empty")]
    Empty,
    /// A format byte this build does not know.
    #[error("unknown format byte {0}")]
    UnknownFormat(u8),
    /// The postcard payload does not decode (its words).
    #[error("{0}")]
    Postcard(String),
    /// Bytes after the payload.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Decodes a `msg` column. The error says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<Payload, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Empty),
        Some((&FORMAT_POSTCARD_V1, rest)) => {
            let (payload, tail) = postcard::take_from_bytes::<Payload>(rest)
                .map_err(|e| DecodeError::Postcard(e.to_string()))?;
            if tail.is_empty() {
                Ok(payload)
            } else {
                Err(DecodeError::Trailing(tail.len()))
            }
        }
        Some((other, _)) => Err(DecodeError::UnknownFormat(*other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_nul_bytes_and_header_order() {
        let p = Payload {
            timestamp_ms: 1_700_000_000_000,
            headers: vec![
                ("k:ey".into(), "line1\nline2".into()),
                ("k:ey".into(), "2".into()),
            ],
            body: vec![0x61, 0, 0x62, 0, 0, 0x63, 0x0a].into(),
        };
        assert_eq!(decode(&encode(&p)).unwrap(), p);
    }

    /// Rows written while the body was a `Vec<u8>` (before it became a shared
    /// `Bytes`) read back the same, and new rows are byte for byte what they were: both
    /// are a length, then the raw bytes, in postcard.
    #[test]
    fn the_body_as_bytes_keeps_the_stored_format() {
        #[derive(serde::Serialize)]
        struct VecPayload {
            timestamp_ms: i64,
            headers: Vec<(String, String)>,
            body: Vec<u8>,
        }
        let body = vec![0u8, 1, 2, 0xff, 0, 7];
        let old = VecPayload {
            timestamp_ms: 42,
            headers: vec![("a".into(), "b".into())],
            body: body.clone(),
        };
        let mut stored = vec![FORMAT_POSTCARD_V1];
        postcard::to_io(&old, &mut stored).unwrap();
        let new = Payload {
            timestamp_ms: 42,
            headers: vec![("a".into(), "b".into())],
            body: body.clone().into(),
        };
        assert_eq!(encode(&new), stored);
        assert_eq!(decode(&stored).unwrap(), new);
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        assert_eq!(decode(&[]).unwrap_err().to_string(), "empty");
        assert_eq!(
            decode(&[9, 1, 2]).unwrap_err().to_string(),
            "unknown format byte 9"
        );
        let mut ok = encode(&Payload::default());
        ok.push(0);
        assert_eq!(decode(&ok).unwrap_err().to_string(), "1 trailing bytes");
        assert!(decode(&[FORMAT_POSTCARD_V1, 0xff]).is_err());
    }
}
