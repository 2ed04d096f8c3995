//! The STOMP decoder on arbitrary and mutated bytes: it never panics, never holds more
//! than the frame limit before it answers, and encoded frames decode to themselves.

use bytes::BytesMut;
use ebb::stomp::codec::{Incoming, Limits, Outgoing, StompCodec};
use ebb::stomp::frame::{Command, Frame, Version};
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

const LIMITS: Limits = Limits {
    max_frame_bytes: 4096,
    max_headers: 16,
    max_header_bytes: 512,
};

/// Feeds `bytes` in `chunk`-sized reads, as a socket would. Stops at the first error.
fn feed(bytes: &[u8], chunk: usize, version: Version) -> (Vec<Incoming>, bool) {
    let mut codec = StompCodec::new(LIMITS);
    codec.version = version;
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(item)) => out.push(item),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
        // Never more buffered than a frame may be (plus the read that proved it).
        assert!(
            buf.len() <= LIMITS.max_frame_bytes + chunk,
            "buffered {} bytes",
            buf.len()
        );
    }
    (out, false)
}

fn frame_strategy() -> impl Strategy<Value = Frame> {
    let commands = prop::sample::select(vec![
        Command::Send,
        Command::Message,
        Command::Subscribe,
        Command::Error,
    ]);
    let header = ("[a-z:\\\\\n\r ]{1,12}", "[ -~\n\r\\\\:]{0,40}");
    (
        commands,
        prop::collection::vec(header, 0..6),
        prop::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(command, headers, body)| Frame {
            command,
            headers: headers
                .into_iter()
                .filter(|(n, _)| n != "content-length")
                .collect(),
            body: body.into(),
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic_or_grow(bytes in prop::collection::vec(any::<u8>(), 0..6000), chunk in 1usize..700) {
        for version in [Version::V1_0, Version::V1_1, Version::V1_2] {
            feed(&bytes, chunk, version);
        }
    }

    #[test]
    fn encoded_frames_round_trip(frame in frame_strategy(), chunk in 1usize..64) {
        let mut codec = StompCodec::new(LIMITS);
        codec.version = Version::V1_2;
        let mut wire = BytesMut::new();
        codec.encode(Outgoing::Frame(frame.clone()), &mut wire).unwrap();
        let (items, failed) = feed(&wire, chunk, Version::V1_2);
        prop_assert!(!failed);
        prop_assert_eq!(items.len(), 1);
        let Incoming::Frame(back) = &items[0] else { panic!("heart-beat") };
        prop_assert_eq!(back.command, frame.command);
        prop_assert_eq!(&back.body, &frame.body);
        prop_assert_eq!(&back.headers[..frame.headers.len()], &frame.headers[..]);
    }

    #[test]
    fn mutated_frames_never_panic(frame in frame_strategy(), flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut codec = StompCodec::new(LIMITS);
        codec.version = Version::V1_2;
        let mut wire = BytesMut::new();
        codec.encode(Outgoing::Frame(frame), &mut wire).unwrap();
        let mut bytes = wire.to_vec();
        for (at, value) in flips {
            let i = at % bytes.len();
            bytes[i] = value;
        }
        feed(&bytes, 13, Version::V1_2);
    }
}
