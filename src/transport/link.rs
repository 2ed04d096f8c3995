//! One connection's bytes, for any protocol: the socket, the protocol's codec
//! (tokio-util's [`Decoder`] and [`Encoder`]), and read and write buffers that exist
//! only while there is something in them.
//!
//! tokio-util's `Framed` keeps 8 KiB each way for as long as the connection lives,
//! whatever the traffic: 10,000 idle connections held 160 MiB in them (issue 53). A
//! [`Link`] waiting for the client's next frame holds no read buffer: when nothing
//! partial is buffered it reads onto the stack first ([`STACK_READ`] bytes, there
//! only during the poll) and copies what came into a buffer sized to it (with room
//! for the next read when the stack's was filled); a read that finds nothing gives
//! its buffer back. A read that fills what it asked for doubles the next one, up to
//! [`MAX_READ_CHUNK`]; one that uses under a quarter halves it.
//! The write buffer is given back after each write that emptied it, so an idle
//! connection holds neither.
//!
//! At the end of the input the codec's `decode_eof` says whether the bytes left were
//! a frame, as `Framed` does.

use std::future::poll_fn;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_util::codec::{Decoder, Encoder};

/// Bytes a read of a connection with nothing buffered takes onto the stack.
pub const STACK_READ: usize = 2 << 10;

/// The least a read into a buffer asks for, bytes.
pub const MIN_READ_CHUNK: usize = 256;

/// The most a read asks for, bytes.
pub const MAX_READ_CHUNK: usize = 64 << 10;

/// Bytes the first frame of a write reserves (the buffer grows past it as needed).
const WRITE_CHUNK: usize = 4 << 10;

/// One connection's socket `S` and codec `C` (see the module documentation).
pub struct Link<S, C> {
    io: S,
    codec: C,
    read: BytesMut,
    write: BytesMut,
    /// What the next read into the buffer asks for, bytes.
    chunk: usize,
    /// The input ended (a read returned 0).
    eof: bool,
}

impl<S, C> Link<S, C> {
    /// A link over `io` reading and writing with `codec`; no buffer yet.
    pub fn new(io: S, codec: C) -> Self {
        Link {
            io,
            codec,
            read: BytesMut::new(),
            write: BytesMut::new(),
            chunk: MIN_READ_CHUNK,
            eof: false,
        }
    }

    /// The codec (a protocol changes its version or limits after CONNECT).
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// The codec, to change.
    pub fn codec_mut(&mut self) -> &mut C {
        &mut self.codec
    }

    /// The socket (to shut it down, or drain it at the close).
    pub fn io_mut(&mut self) -> &mut S {
        &mut self.io
    }

    /// Bytes read and not yet decoded: an unfinished frame.
    pub fn buffered(&self) -> usize {
        self.read.len()
    }

    /// Bytes encoded and not yet written.
    pub fn queued(&self) -> usize {
        self.write.len()
    }
}

impl<S: AsyncRead + Unpin, C> Link<S, C> {
    /// The next frame; `None` at the end of the input. Cancel-safe: the codec keeps
    /// what it decoded, and a read that did not finish read nothing.
    pub async fn next(&mut self) -> Option<Result<C::Item, C::Error>>
    where
        C: Decoder,
    {
        loop {
            if self.eof {
                return match self.codec.decode_eof(&mut self.read) {
                    Ok(Some(frame)) => Some(Ok(frame)),
                    Ok(None) if self.read.is_empty() => None,
                    Ok(None) => {
                        // What is left is no frame: dropped, as `Framed` drops it.
                        self.read = BytesMut::new();
                        None
                    }
                    Err(e) => {
                        self.read = BytesMut::new();
                        Some(Err(e))
                    }
                };
            }
            match self.codec.decode(&mut self.read) {
                Ok(Some(frame)) => return Some(Ok(frame)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => return Some(Err(e.into())),
            }
        }
    }

    /// Reads what the socket has into the read buffer: the bytes read, 0 at the end
    /// of the input.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.read.is_empty() {
            // Nothing partial: read onto the stack, so a connection that waits for its
            // next frame holds no buffer.
            let mut stack = [MaybeUninit::<u8>::uninit(); STACK_READ];
            let mut buf = ReadBuf::uninit(&mut stack);
            return match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Pending => {
                    self.read = BytesMut::new();
                    Poll::Pending
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = buf.filled().len();
                    if n == STACK_READ {
                        // More is likely waiting: room for the next read too.
                        self.chunk = (self.chunk * 2).min(MAX_READ_CHUNK);
                        self.read.reserve(n + self.chunk);
                    } else {
                        if n < self.chunk / 4 {
                            self.chunk = (self.chunk / 2).max(MIN_READ_CHUNK);
                        }
                        self.read.reserve(n);
                    }
                    self.read.extend_from_slice(buf.filled());
                    Poll::Ready(Ok(n))
                }
            };
        }
        if self.read.capacity() - self.read.len() < self.chunk / 2 {
            self.read.reserve(self.chunk);
        }
        let room = self.read.capacity() - self.read.len();
        let n = std::task::ready!(tokio_util::io::poll_read_buf(
            Pin::new(&mut self.io),
            cx,
            &mut self.read
        ))?;
        if n >= room {
            self.chunk = (self.chunk * 2).min(MAX_READ_CHUNK);
        } else if n < room / 4 {
            self.chunk = (self.chunk / 2).max(MIN_READ_CHUNK);
        }
        Poll::Ready(Ok(n))
    }
}

impl<S: AsyncWrite + Unpin, C> Link<S, C> {
    /// Encodes `frame` after what is queued (nothing is written yet: see
    /// [`Link::write_out`]).
    pub fn feed<I>(&mut self, frame: I) -> Result<(), C::Error>
    where
        C: Encoder<I>,
    {
        if self.write.capacity() == 0 {
            self.write.reserve(WRITE_CHUNK);
        }
        self.codec.encode(frame, &mut self.write)
    }

    /// Writes everything queued and flushes the socket; the write buffer is then given
    /// back. Cancel-safe as to what was written: bytes written leave the buffer as
    /// they go, so a write cut short (by a timeout) and started again sends the rest,
    /// never a byte twice.
    pub async fn write_out(&mut self) -> std::io::Result<()> {
        if !self.write.is_empty() {
            self.io.write_all_buf(&mut self.write).await?;
        }
        self.write = BytesMut::new();
        self.io.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio_util::codec::LinesCodec;

    /// Lines in, lines out, over an in-memory pipe: a frame split over many reads, a
    /// frame larger than the stack's read, and an unfinished line at the end.
    #[tokio::test]
    async fn frames_cross_reads_and_the_end_is_decoded() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut link = Link::new(ours, LinesCodec::new());
        let long = "x".repeat(3 * STACK_READ);
        let sent = format!("a\nb{long}\nc");
        let writer = tokio::spawn(async move {
            theirs.write_all(sent.as_bytes()).await.unwrap();
            theirs.shutdown().await.unwrap();
            theirs
        });
        assert_eq!(link.next().await.unwrap().unwrap(), "a");
        assert_eq!(link.next().await.unwrap().unwrap(), format!("b{long}"));
        // LinesCodec's `decode_eof` answers the unfinished line.
        assert_eq!(link.next().await.unwrap().unwrap(), "c");
        assert!(link.next().await.is_none());
        assert_eq!(link.buffered(), 0);
        drop(writer.await.unwrap());
    }

    /// A link waiting for input holds no read buffer, and one that wrote holds no
    /// write buffer: the capacities are 0.
    #[tokio::test]
    async fn a_waiting_link_holds_no_buffer() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut link = Link::new(ours, LinesCodec::new());
        theirs.write_all(b"one\n").await.unwrap();
        assert_eq!(link.next().await.unwrap().unwrap(), "one");
        // Nothing more comes: the read finds nothing and gives its buffer back.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), link.next())
                .await
                .is_err()
        );
        assert_eq!(link.read.capacity(), 0);
        link.feed("two").unwrap();
        assert!(link.write.capacity() > 0);
        link.write_out().await.unwrap();
        assert_eq!(link.write.capacity(), 0);
        let mut got = [0u8; 4];
        tokio::io::AsyncReadExt::read_exact(&mut theirs, &mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"two\n");
    }

    /// A write cut short (here by a timeout: the peer reads nothing) and started again
    /// sends the rest: every byte once, in order.
    #[tokio::test]
    async fn a_write_cut_short_goes_on_where_it_stopped() {
        let (ours, mut theirs) = tokio::io::duplex(8);
        let mut link = Link::new(ours, LinesCodec::new());
        link.feed("0123456789abcdef").unwrap();
        let cut = tokio::time::timeout(std::time::Duration::from_millis(20), link.write_out());
        assert!(
            cut.await.is_err(),
            "the pipe holds 8 bytes: the write waits"
        );
        assert_eq!(link.queued(), 17 - 8, "the 8 bytes written left the buffer");
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 17];
            tokio::io::AsyncReadExt::read_exact(&mut theirs, &mut got)
                .await
                .unwrap();
            got
        });
        link.write_out().await.unwrap();
        assert_eq!(reader.await.unwrap(), b"0123456789abcdef\n");
    }
}
