//! A small STOMP 1.2 client over TCP (or any byte stream, [`StompClient::over`]: the
//! tests run it over WebSocket too), built on the same codec as the server: what
//! `ebb soak --stomp`, the benchmarks (Ebb and RabbitMQ alike) and the STOMP tests use
//! to drive a broker. It speaks frames, or raw bytes for protocol tests, nothing more:
//! the caller decides what to send and waits for what it needs.
//!
//! A connection is two halves, a [`StompReader`] and a [`StompWriter`];
//! [`StompClient::halves`] lends both at once, so one task can pipeline SENDs while it
//! reads their receipts. Frames queued with `feed` go out together on `flush` (one
//! write for a batch, as the server writes a turn's frames).

use std::fmt::Display;
use std::time::Duration;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_util::codec::{Decoder, Encoder, FramedRead, FramedWrite};

use crate::stomp::codec::{Incoming, Limits, Outgoing, StompCodec};
use crate::stomp::frame::{Command, Frame, Version};

/// Why a client call failed. The texts are what `ebb soak --stomp` prints.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TCP connection could not be made.
    #[error("cannot connect to a STOMP broker at {addr}: {source}")]
    Connect {
        /// The address it tried.
        addr: String,
        /// Why the connection failed.
        source: std::io::Error,
    },
    /// The broker answered CONNECT with something other than CONNECTED (`answer` is
    /// [`describe`] of it), or closed.
    #[error("{addr} refused the connection: {answer}")]
    Refused {
        /// The broker's address.
        addr: String,
        /// What it answered instead.
        answer: String,
    },
    /// An ERROR frame came where a receipt was awaited ([`describe`] of it).
    #[error("{0}")]
    ErrorFrame(String),
    /// The broker sent bytes that are not a STOMP frame (the codec's reason).
    #[error("bad frame from the broker: {0}")]
    BadFrame(String),
    /// The broker closed the connection.
    #[error("the broker closed the connection")]
    Closed,
    /// Reading or writing the socket failed (a reset, mostly).
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
}

/// The server's codec with the client's error type, so a socket error ([`ClientError::Io`])
/// is told apart from bad bytes ([`ClientError::BadFrame`]).
struct ClientCodec(StompCodec);

impl ClientCodec {
    fn new() -> Self {
        let mut codec = StompCodec::new(Limits::default());
        codec.version = Version::V1_2;
        Self(codec)
    }
}

impl Decoder for ClientCodec {
    type Item = Incoming;
    type Error = ClientError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, ClientError> {
        self.0
            .decode(buf)
            .map_err(|e| ClientError::BadFrame(e.text))
    }
}

impl Encoder<Outgoing> for ClientCodec {
    type Error = ClientError;

    fn encode(&mut self, item: Outgoing, dst: &mut BytesMut) -> Result<(), ClientError> {
        // Encoding a frame cannot fail; only the socket can.
        self.0
            .encode(item, dst)
            .map_err(|e| ClientError::BadFrame(e.text))
    }
}

/// The bytes a connection reads.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The bytes a connection writes.
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// The reading half of a connection.
pub struct StompReader {
    frames: FramedRead<ReadHalf, ClientCodec>,
}

impl StompReader {
    /// The next frame from the broker (heart-beats skipped), ERROR frames included.
    /// Errors: [`ClientError::Closed`], [`ClientError::BadFrame`], [`ClientError::Io`].
    pub async fn next(&mut self) -> Result<Frame, ClientError> {
        loop {
            match self.frames.next().await {
                Some(Ok(Incoming::Frame(frame))) => return Ok(frame),
                Some(Ok(Incoming::Heartbeat)) => continue,
                Some(Err(e)) => return Err(e),
                None => return Err(ClientError::Closed),
            }
        }
    }

    /// [`Self::next`], or `Ok(None)` when no frame arrives within `limit`. Nothing is
    /// lost when the limit passes: bytes of a partial frame stay buffered.
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Frame>, ClientError> {
        match tokio::time::timeout(limit, self.next()).await {
            Ok(frame) => frame.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The next frame or heart-beat within `limit`: `Ok(Some(Some(frame)))`, a
    /// heart-beat (an EOL) `Ok(Some(None))`, nothing in time `Ok(None)`. For tests of
    /// the broker's heart-beats. Errors as [`Self::next`].
    pub async fn next_any_within(
        &mut self,
        limit: Duration,
    ) -> Result<Option<Option<Frame>>, ClientError> {
        match tokio::time::timeout(limit, self.frames.next()).await {
            Ok(Some(Ok(Incoming::Frame(frame)))) => Ok(Some(Some(frame))),
            Ok(Some(Ok(Incoming::Heartbeat))) => Ok(Some(None)),
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => Err(ClientError::Closed),
            Err(_) => Ok(None),
        }
    }
}

/// The writing half of a connection.
pub struct StompWriter {
    frames: FramedWrite<WriteHalf, ClientCodec>,
}

impl StompWriter {
    /// Queues a frame and writes everything queued.
    pub async fn send(&mut self, frame: Frame) -> Result<(), ClientError> {
        self.frames.send(Outgoing::Frame(frame)).await
    }

    /// Queues a frame without writing it yet (see [`Self::flush`]).
    pub async fn feed(&mut self, frame: Frame) -> Result<(), ClientError> {
        self.frames.feed(Outgoing::Frame(frame)).await
    }

    /// Writes what [`Self::feed`] queued.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        self.frames.flush().await
    }

    /// Writes what is queued, then `bytes` exactly as given: for tests of what the
    /// broker does with malformed, split or pipelined input.
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.flush().await?;
        self.frames.get_mut().write_all(bytes).await?;
        Ok(())
    }
}

/// One STOMP connection (see the module documentation).
pub struct StompClient {
    /// The address as the caller gave it, for error texts.
    addr: String,
    reader: StompReader,
    writer: StompWriter,
}

impl StompClient {
    /// Opens a TCP connection to `addr` (`host:port` or a socket address) with
    /// TCP_NODELAY set, and sends nothing: the caller logs in ([`Self::handshake`]) or
    /// writes its own bytes. Errors: [`ClientError::Connect`].
    pub async fn open(addr: impl ToSocketAddrs + Display) -> Result<Self, ClientError> {
        let name = addr.to_string();
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| ClientError::Connect {
                addr: name.clone(),
                source,
            })?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        Ok(Self::halves_of(name, Box::new(read), Box::new(write)))
    }

    /// A connection over `stream`, any byte stream to a STOMP server (a WebSocket
    /// adapted to bytes, a TLS stream), named `name` in error texts; nothing sent.
    pub fn over(
        name: impl Into<String>,
        stream: impl AsyncRead + AsyncWrite + Send + 'static,
    ) -> Self {
        let (read, write) = tokio::io::split(stream);
        Self::halves_of(name.into(), Box::new(read), Box::new(write))
    }

    fn halves_of(addr: String, read: ReadHalf, write: WriteHalf) -> Self {
        Self {
            addr,
            reader: StompReader {
                frames: FramedRead::new(read, ClientCodec::new()),
            },
            writer: StompWriter {
                frames: FramedWrite::new(write, ClientCodec::new()),
            },
        }
    }

    /// Connects to `addr` and logs in: CONNECT with `accept-version:1.2`, `host:ebb`,
    /// `client-id` if given, and `login`/`passcode` if given; no heart-beats.
    ///
    /// Errors: [`ClientError::Connect`], [`ClientError::Refused`] when the broker
    /// answers with an ERROR (its `message` is in the error), [`ClientError::Closed`].
    pub async fn connect(
        addr: impl ToSocketAddrs + Display,
        client_id: Option<&str>,
        login: Option<(&str, &str)>,
    ) -> Result<Self, ClientError> {
        let mut client = Self::open(addr).await?;
        let mut connect = Frame::new(Command::Connect)
            .header("accept-version", "1.2")
            .header("host", "ebb");
        if let Some(id) = client_id {
            connect = connect.header("client-id", id);
        }
        if let Some((user, pass)) = login {
            connect = connect.header("login", user).header("passcode", pass);
        }
        client.handshake(connect).await?;
        Ok(client)
    }

    /// Sends `connect` (a CONNECT or STOMP frame the caller built, for other brokers'
    /// headers) and returns the broker's CONNECTED frame. Errors:
    /// [`ClientError::Refused`] for any other answer, [`ClientError::Closed`].
    pub async fn handshake(&mut self, connect: Frame) -> Result<Frame, ClientError> {
        self.send(connect).await?;
        let answer = self.next().await?;
        if answer.command != Command::Connected {
            return Err(ClientError::Refused {
                addr: self.addr.clone(),
                answer: describe(&answer),
            });
        }
        Ok(answer)
    }

    /// Both halves at once, to write and read concurrently (a producer that pipelines
    /// SENDs while their receipts come back).
    pub fn halves(&mut self) -> (&mut StompReader, &mut StompWriter) {
        (&mut self.reader, &mut self.writer)
    }

    /// [`StompWriter::send`].
    pub async fn send(&mut self, frame: Frame) -> Result<(), ClientError> {
        self.writer.send(frame).await
    }

    /// [`StompWriter::feed`].
    pub async fn feed(&mut self, frame: Frame) -> Result<(), ClientError> {
        self.writer.feed(frame).await
    }

    /// [`StompWriter::flush`].
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        self.writer.flush().await
    }

    /// [`StompWriter::send_raw`].
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.writer.send_raw(bytes).await
    }

    /// [`StompReader::next`].
    pub async fn next(&mut self) -> Result<Frame, ClientError> {
        self.reader.next().await
    }

    /// [`StompReader::next_within`].
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<Frame>, ClientError> {
        self.reader.next_within(limit).await
    }

    /// [`StompReader::next_any_within`].
    pub async fn next_any_within(
        &mut self,
        limit: Duration,
    ) -> Result<Option<Option<Frame>>, ClientError> {
        self.reader.next_any_within(limit).await
    }

    /// Waits for the RECEIPT with `receipt-id:<id>`, handing every other frame that
    /// comes first to `other`. Errors: an ERROR frame ([`ClientError::ErrorFrame`]),
    /// or the connection ends.
    pub async fn receipt(
        &mut self,
        id: &str,
        mut other: impl FnMut(Frame),
    ) -> Result<(), ClientError> {
        loop {
            let frame = self.next().await?;
            match frame.command {
                Command::Receipt if frame.get("receipt-id") == Some(id) => return Ok(()),
                Command::Error => return Err(ClientError::ErrorFrame(describe(&frame))),
                _ => other(frame),
            }
        }
    }

    /// Sends `frame` with `receipt:<id>` and waits for that RECEIPT (frames of other
    /// kinds that arrive meanwhile are dropped). Errors: as [`Self::receipt`].
    pub async fn request(&mut self, frame: Frame, id: &str) -> Result<(), ClientError> {
        self.send(frame.header("receipt", id)).await?;
        self.receipt(id, |_| {}).await
    }

    /// DISCONNECT with a receipt, so that everything sent before is processed.
    pub async fn disconnect(self) -> Result<(), ClientError> {
        self.disconnect_with(|_| {}).await
    }

    /// [`Self::disconnect`], handing the frames that arrive before the receipt to
    /// `other` (a consumer counts late MESSAGEs).
    pub async fn disconnect_with(mut self, other: impl FnMut(Frame)) -> Result<(), ClientError> {
        self.send(Frame::new(Command::Disconnect).header("receipt", "bye"))
            .await?;
        self.receipt("bye", other).await
    }

    /// True when the broker closes the connection (or resets it) within `limit`;
    /// frames before the close are dropped. Errors: bad bytes from the broker.
    pub async fn closes_within(&mut self, limit: Duration) -> Result<bool, ClientError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.next()).await {
                Err(_) => return Ok(false),
                Ok(Ok(_)) => continue,
                Ok(Err(ClientError::Closed | ClientError::Io(_))) => return Ok(true),
                Ok(Err(e)) => return Err(e),
            }
        }
    }
}

/// An ERROR frame's `message` (or its command when it has none).
pub fn describe(frame: &Frame) -> String {
    match frame.get("message") {
        Some(m) => format!("{} {m}", frame.command.as_str()),
        None => frame.command.as_str().to_string(),
    }
}
