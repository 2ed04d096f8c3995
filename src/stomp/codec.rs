//! The STOMP wire codec: bytes ⇄ [`Frame`]s, incremental and bounded.
//!
//! Decoding checks, then parses: with too few bytes it answers `Ok(None)` and keeps
//! them; every limit is enforced before more is buffered: a header section or a frame
//! larger than [`Limits`] allow is an error as soon as the bytes seen prove it (not
//! when the frame ends), so a peer cannot make a connection hold more than the limit.
//! A body ends where `content-length` says (NUL octets allowed inside), or at the first
//! NUL without it; the octet after a `content-length` body must be NUL. Lone EOLs
//! between frames are heart-beats.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::escape::{escape, unescape};
use super::frame::{Command, Frame, Version};
use crate::ErrorCode;

/// Bounds on what a peer may send; a frame over one is a protocol error whose text
/// names the limit and the `[stomp]` key that sets it (`max_frame_size`,
/// `max_headers`, `max_header_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame, headers and body, in bytes (default 10 MiB).
    pub max_frame_bytes: usize,
    /// Most header lines in a frame (default 1,000).
    pub max_headers: usize,
    /// Longest header line in bytes (default 64 KiB).
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 10 * 1024 * 1024,
            max_headers: 1_000,
            max_header_bytes: 64 * 1024,
        }
    }
}

/// What the decoder yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A whole frame.
    Frame(Frame),
    /// A lone EOL between frames (a heart-beat).
    Heartbeat,
}

/// A protocol error: the text goes into the ERROR frame's `message` header, its code
/// into `error-code` ([`ErrorCode::MalformedFrame`], or [`ErrorCode::LimitExceeded`]
/// for a frame over a size limit), and the connection is then closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub struct ProtocolError {
    /// What kind of error it is.
    pub code: ErrorCode,
    /// What was wrong.
    pub text: String,
    /// The bad frame's `receipt` header, when the decoder got far enough to read it
    /// (it goes into the ERROR's `receipt-id`).
    pub receipt: Option<String>,
}

impl ProtocolError {
    /// A malformed frame: `text` says how.
    pub fn malformed(text: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::MalformedFrame,
            text: text.into(),
            receipt: None,
        }
    }

    /// A frame over a size limit: `text` names the setting.
    pub fn limit(text: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::LimitExceeded,
            text: text.into(),
            receipt: None,
        }
    }
}

impl From<std::io::Error> for ProtocolError {
    fn from(e: std::io::Error) -> Self {
        ProtocolError::malformed(format!("connection error: {e}"))
    }
}

/// The codec of one connection; its version changes after CONNECT.
#[derive(Debug, Clone)]
pub struct StompCodec {
    /// The protocol version of the connection (1.0 until CONNECT negotiates one): escaping follows it.
    pub version: Version,
    /// Frame size and header limits.
    pub limits: Limits,
}

impl StompCodec {
    /// A codec for a new connection (STOMP 1.0 until CONNECT) with `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            version: Version::V1_0,
            limits,
        }
    }
}

fn limit_err<T>(text: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError::limit(text))
}

fn err<T>(text: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError::malformed(text))
}

/// True for a byte that may start or continue a command line (`SEND`, `CONNECT`...).
fn command_byte(b: u8) -> bool {
    b.is_ascii_uppercase() || b == b'\r'
}

impl Decoder for StompCodec {
    type Item = Incoming;
    type Error = ProtocolError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, ProtocolError> {
        // Heart-beats: a lone LF or CRLF before a frame. A stray NUL between frames
        // (a client that ends a frame twice) is skipped as RabbitMQ and ActiveMQ do,
        // and counts as a sign of life like a heart-beat.
        if matches!(buf.first(), Some(&b'\n') | Some(&0)) {
            buf.advance(1);
            return Ok(Some(Incoming::Heartbeat));
        }
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            return Ok(Some(Incoming::Heartbeat));
        }
        if buf.first() == Some(&b'\r') && buf.len() == 1 {
            return Ok(None);
        }
        let limits = self.limits;
        // Bytes that cannot begin a command are refused at once, not buffered.
        let first_line = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
        if let Some(bad) = buf[..first_line].iter().find(|&&b| !command_byte(b)) {
            return err(format!(
                "not a STOMP frame: byte 0x{bad:02x} in the command line"
            ));
        }
        // The header section ends at the first empty line.
        let mut lines: Vec<&[u8]> = Vec::new();
        let mut pos = 0;
        let header_end = loop {
            let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
                let pending = buf.len() - pos;
                if pending > limits.max_header_bytes {
                    return limit_err(format!(
                        "header line longer than the limit of {} bytes (max_header_size)",
                        limits.max_header_bytes
                    ));
                }
                if buf.len() > limits.max_frame_bytes {
                    return limit_err(format!(
                        "frame larger than the limit of {} bytes (max_frame_size)",
                        limits.max_frame_bytes
                    ));
                }
                return Ok(None);
            };
            let mut line = &buf[pos..pos + nl];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            if line.len() > limits.max_header_bytes {
                return limit_err(format!(
                    "header line longer than the limit of {} bytes (max_header_size)",
                    limits.max_header_bytes
                ));
            }
            pos += nl + 1;
            if line.is_empty() {
                break pos;
            }
            lines.push(line);
            if lines.len() > limits.max_headers + 1 {
                return limit_err(format!(
                    "more than {} headers (max_headers)",
                    limits.max_headers
                ));
            }
            if pos > limits.max_frame_bytes {
                return limit_err(format!(
                    "frame larger than the limit of {} bytes (max_frame_size)",
                    limits.max_frame_bytes
                ));
            }
        };
        let Some((command_line, header_lines)) = lines.split_first() else {
            return err("empty frame");
        };
        let command_text = std::str::from_utf8(command_line)
            .map_err(|_| ProtocolError::malformed("command is not UTF-8"))?;
        let Some(command) = Command::parse(command_text) else {
            return err(format!(
                "unknown command `{}`",
                command_text.chars().take(32).collect::<String>()
            ));
        };
        // From here on, errors carry the frame's receipt so the ERROR can name it.
        let receipt = header_lines
            .iter()
            .find_map(|l| l.strip_prefix(b"receipt:"))
            .map(|v| String::from_utf8_lossy(v).into_owned());
        let with_receipt = |e: ProtocolError| ProtocolError {
            receipt: receipt.clone(),
            ..e
        };
        let header_lines: Vec<Vec<u8>> = header_lines.iter().map(|l| l.to_vec()).collect();
        self.parse_rest(buf, command, &header_lines, header_end)
            .map_err(with_receipt)
    }
}

impl StompCodec {
    /// Headers and body of a frame whose header section is complete.
    fn parse_rest(
        &self,
        buf: &mut BytesMut,
        command: Command,
        header_lines: &[Vec<u8>],
        header_end: usize,
    ) -> Result<Option<Incoming>, ProtocolError> {
        let limits = self.limits;
        let mut headers = Vec::with_capacity(header_lines.len());
        for line in header_lines {
            if line.contains(&0) {
                return err("a header contains a NUL octet");
            }
            let text = std::str::from_utf8(line)
                .map_err(|_| ProtocolError::malformed("header is not UTF-8"))?;
            let Some((name, value)) = text.split_once(':') else {
                let shown: String = text.chars().take(64).collect();
                return err(format!("header line without a colon: `{shown}`"));
            };
            // CONNECT and CONNECTED are never escaped; 1.0 values are trimmed instead.
            let header = if command.escapes_headers() {
                let unescaped = |t| {
                    unescape(t, self.version).map_err(|e| ProtocolError::malformed(e.to_string()))
                };
                (unescaped(name)?, unescaped(value)?)
            } else {
                (name.to_string(), value.to_string())
            };
            headers.push(header);
        }
        let content_length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| ProtocolError::malformed(format!("invalid content-length `{v}`")))
            })
            .transpose()?;
        let (body_end, next) = match content_length {
            Some(len) => {
                let total = header_end.checked_add(len).and_then(|t| t.checked_add(1));
                let Some(total) = total.filter(|t| *t <= limits.max_frame_bytes) else {
                    return limit_err(format!(
                        "content-length {len} makes the frame larger than the limit of {} bytes",
                        limits.max_frame_bytes
                    ));
                };
                if buf.len() < total {
                    buf.reserve(total - buf.len());
                    return Ok(None);
                }
                if buf[header_end + len] != 0 {
                    return err("the octet after content-length bytes of body is not NUL");
                }
                (header_end + len, header_end + len + 1)
            }
            None => match buf[header_end..].iter().position(|&b| b == 0) {
                // A whole frame in one read is held to the limit as one that trickles
                // in is (its NUL may come in the same read as bytes far past it).
                Some(nul) if header_end + nul + 1 > limits.max_frame_bytes => {
                    return limit_err(format!(
                        "frame larger than the limit of {} bytes (max_frame_size)",
                        limits.max_frame_bytes
                    ));
                }
                Some(nul) => (header_end + nul, header_end + nul + 1),
                None if buf.len() > limits.max_frame_bytes => {
                    return limit_err(format!(
                        "frame larger than the limit of {} bytes (max_frame_size)",
                        limits.max_frame_bytes
                    ));
                }
                None => return Ok(None),
            },
        };
        // A buffer of its own (not a slice of the read buffer, which a message held
        // for long would keep alive whole): the one copy a body gets on its way in.
        let body = bytes::Bytes::copy_from_slice(&buf[header_end..body_end]);
        buf.advance(next);
        Ok(Some(Incoming::Frame(Frame {
            command,
            headers,
            body,
        })))
    }
}

/// What the encoder writes.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A frame.
    Frame(Frame),
    /// A heart-beat: one EOL.
    Heartbeat,
}

impl Encoder<Outgoing> for StompCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: Outgoing, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let frame = match item {
            Outgoing::Heartbeat => {
                dst.put_u8(b'\n');
                return Ok(());
            }
            Outgoing::Frame(frame) => frame,
        };
        dst.reserve(frame.body.len() + 64 + frame.headers.len() * 32);
        dst.put_slice(frame.command.as_str().as_bytes());
        dst.put_u8(b'\n');
        let mut has_length = false;
        for (name, value) in &frame.headers {
            has_length |= name == "content-length";
            // A NUL would end the frame early: it never goes out in a header.
            let mut value = value.replace('\0', "\u{fffd}");
            if frame.command == Command::Error && self.version == Version::V1_0 {
                // Before CONNECT is answered the codec speaks 1.0 (no escapes) while
                // the client may read 1.2, where a backslash begins an escape: an
                // ERROR's header text goes out with `/` instead (its body keeps it).
                value = value.replace('\\', "/");
            }
            let (name, value) = (&name.replace('\0', "\u{fffd}"), &value);
            if frame.command.escapes_headers() {
                dst.put_slice(escape(name, self.version).as_bytes());
                dst.put_u8(b':');
                dst.put_slice(escape(value, self.version).as_bytes());
            } else {
                dst.put_slice(name.as_bytes());
                dst.put_u8(b':');
                dst.put_slice(value.as_bytes());
            }
            dst.put_u8(b'\n');
        }
        if !has_length && (!frame.body.is_empty() || frame.command == Command::Message) {
            dst.put_slice(format!("content-length:{}\n", frame.body.len()).as_bytes());
        }
        dst.put_u8(b'\n');
        dst.put_slice(&frame.body);
        dst.put_u8(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(codec: &mut StompCodec, bytes: &[u8]) -> Result<Vec<Incoming>, ProtocolError> {
        let mut buf = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(item) = codec.decode(&mut buf)? {
            out.push(item);
        }
        Ok(out)
    }

    fn v12() -> StompCodec {
        let mut c = StompCodec::new(Limits::default());
        c.version = Version::V1_2;
        c
    }

    fn frame(item: &Incoming) -> &Frame {
        match item {
            Incoming::Frame(f) => f,
            Incoming::Heartbeat => panic!("heart-beat"),
        }
    }

    /// STOMP-01: NULs inside a content-length body; the next frame in the same read.
    #[test]
    fn a_whole_frame_in_one_read_is_held_to_the_frame_limit() {
        let limits = Limits {
            max_frame_bytes: 1024,
            ..Limits::default()
        };
        let mut frame = b"SEND\ndestination:/queue/q\n\n".to_vec();
        frame.extend(std::iter::repeat_n(b'x', 4000));
        frame.push(0);
        let e = decode_all(&mut StompCodec::new(limits), &frame).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded, "{e:?}");
        assert!(e.text.contains("max_frame_size"), "{e:?}");
        let mut small = b"SEND\ndestination:/queue/q\n\n".to_vec();
        small.extend(std::iter::repeat_n(b'x', 900));
        small.push(0);
        assert_eq!(
            decode_all(&mut StompCodec::new(limits), &small)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn content_length_governs_where_the_body_ends() {
        let mut bytes = b"SEND\ndestination:/queue/B\ncontent-length:7\n\n".to_vec();
        bytes.extend_from_slice(&[0x61, 0, 0x62, 0, 0, 0x63, 0x0a, 0]);
        bytes.extend_from_slice(b"SEND\ndestination:/queue/B\n\nnext\0");
        bytes.extend_from_slice(b"SEND\ndestination:/queue/B\ncontent-length:0\n\n\0");
        let got = decode_all(&mut v12(), &bytes).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(frame(&got[0]).body, vec![0x61, 0, 0x62, 0, 0, 0x63, 0x0a]);
        assert_eq!(frame(&got[1]).body, &b"next"[..]);
        assert!(frame(&got[2]).body.is_empty());
    }

    #[test]
    fn wrong_content_length_and_negative_length_are_errors() {
        let bad = b"SEND\ndestination:/q\ncontent-length:3\n\nabcdef\0";
        assert!(decode_all(&mut v12(), bad)
            .unwrap_err()
            .text
            .contains("not NUL"));
        let neg = b"SEND\ndestination:/q\ncontent-length:-1\n\n\0";
        assert!(decode_all(&mut v12(), neg)
            .unwrap_err()
            .text
            .contains("content-length"));
    }

    #[test]
    fn split_reads_give_none_until_the_frame_is_whole() {
        let whole = b"SEND\r\ndestination:/q\r\n\r\nhello\0\n";
        let mut codec = v12();
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for &b in whole.iter() {
            buf.put_u8(b);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                frames.push(item);
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(frame(&frames[0]).get("destination"), Some("/q"));
        assert_eq!(frames[1], Incoming::Heartbeat);
    }

    /// STOMP-03: escapes decoded in 1.2, repeated header first wins, bad escape fails,
    /// CONNECT not unescaped.
    #[test]
    fn header_escaping_follows_the_version() {
        let bytes = b"SEND\ndestination:/queue/E\nnote:line1\\nline2\\cx\\\\end\nk\\cey:v\nsp: padded \nsp:second\n\n\0";
        let got = decode_all(&mut v12(), bytes).unwrap();
        let f = frame(&got[0]);
        assert_eq!(f.get("note"), Some("line1\nline2:x\\end"));
        assert_eq!(f.get("k:ey"), Some("v"));
        assert_eq!(f.get("sp"), Some(" padded "));
        let bad = b"SEND\ndestination:/q\nbad:x\\ty\n\n\0";
        assert!(decode_all(&mut v12(), bad).is_err());
        let connect = b"CONNECT\naccept-version:1.2\npasscode:pa:ss\n\n\0";
        let got = decode_all(&mut v12(), connect).unwrap();
        assert_eq!(frame(&got[0]).get("passcode"), Some("pa:ss"));
        let mut v10 = StompCodec::new(Limits::default());
        let got = decode_all(&mut v10, b"SEND\ndestination: /q \n\n\0").unwrap();
        assert_eq!(frame(&got[0]).get("destination"), Some("/q"));
    }

    /// STOMP-04 a: a header section over the limit fails as soon as it is over.
    #[test]
    fn oversized_header_fails_before_the_frame_ends() {
        let limits = Limits {
            max_frame_bytes: 64 * 1024,
            max_headers: 1_000,
            max_header_bytes: 64 * 1024,
        };
        let mut codec = StompCodec::new(limits);
        let mut buf = BytesMut::from(&b"SEND\ndestination:/queue/X\nh:"[..]);
        buf.extend_from_slice(&vec![b'a'; 64 * 1024]);
        assert!(codec.decode(&mut buf).unwrap_err().text.contains("limit"));
        let mut codec = StompCodec::new(limits);
        let mut big = b"SEND\ndestination:/q\ncontent-length:1048576\n\n".to_vec();
        big.extend_from_slice(b"x");
        assert!(codec
            .decode(&mut BytesMut::from(&big[..]))
            .unwrap_err()
            .text
            .contains("limit"));
    }

    #[test]
    fn hostile_lengths_nuls_and_garbage_are_errors_with_the_receipt() {
        let huge = b"SEND\ndestination:/a\nreceipt:r\ncontent-length:18446744073709551552\n\nx\0";
        let e = decode_all(&mut v12(), huge).unwrap_err();
        assert!(e.text.contains("limit"), "{e:?}");
        assert_eq!(e.receipt.as_deref(), Some("r"));
        let nul = b"SEND\ndestination:/a\nx:a\0MESSAGE\nreceipt:r\n\nreal\0";
        assert!(decode_all(&mut v12(), nul).is_err());
        let bad_escape = b"SEND\ndestination:/a\nx:a\\qb\nreceipt:r2\n\n\0";
        assert_eq!(
            decode_all(&mut v12(), bad_escape)
                .unwrap_err()
                .receipt
                .as_deref(),
            Some("r2")
        );
        let strays = b"\0\0SEND\ndestination:/a\n\nx\0\0";
        let frames = decode_all(&mut v12(), strays).expect("stray NULs are skipped");
        assert_eq!(
            frames
                .iter()
                .filter(|f| matches!(f, Incoming::Frame(_)))
                .count(),
            1,
            "one frame between stray NULs"
        );
        let garbage = b"\x01\x02\x03";
        assert!(decode_all(&mut v12(), garbage)
            .unwrap_err()
            .text
            .contains("not a STOMP frame"));
        let lower = b"send";
        assert!(
            decode_all(&mut v12(), lower).is_err(),
            "refused before a newline arrives"
        );
    }

    #[test]
    fn messages_always_say_their_length_and_never_carry_nul_headers() {
        let mut codec = v12();
        let mut buf = BytesMut::new();
        let f = Frame::new(Command::Message).header("x", "a\0b");
        codec.encode(Outgoing::Frame(f), &mut buf).unwrap();
        let back = decode_all(&mut codec, &buf).unwrap();
        assert_eq!(frame(&back[0]).get("content-length"), Some("0"));
        assert_eq!(frame(&back[0]).get("x"), Some("a\u{fffd}b"));
    }

    #[test]
    fn unknown_commands_and_bad_lines_are_errors() {
        assert!(decode_all(&mut v12(), b"HELLO\n\n\0")
            .unwrap_err()
            .text
            .contains("unknown command"));
        assert!(decode_all(&mut v12(), b"SEND\nnocolon\n\n\0")
            .unwrap_err()
            .text
            .contains("colon"));
    }

    #[test]
    fn encoded_frames_decode_to_the_same_frame() {
        let original = Frame::new(Command::Message)
            .header("destination", "/topic/a:b")
            .header("note", "x\ny\\z\r")
            .body(vec![0, 1, 2, 0]);
        let mut codec = v12();
        let mut buf = BytesMut::new();
        codec
            .encode(Outgoing::Frame(original.clone()), &mut buf)
            .unwrap();
        let decoded = decode_all(&mut codec, &buf).unwrap();
        let f = frame(&decoded[0]);
        assert_eq!(f.command, original.command);
        assert_eq!(&f.headers[..2], &original.headers[..]);
        assert_eq!(f.get("content-length"), Some("4"));
        assert_eq!(f.body, original.body);
    }
}
