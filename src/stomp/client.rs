//! A small STOMP 1.2 client over TCP, built on the same codec as the server: what
//! `ebb soak --stomp` (and the benchmarks) use to drive a running broker. It speaks
//! frames, nothing more: the caller decides what to send and waits for what it needs.

use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use crate::stomp::codec::{Incoming, Limits, Outgoing, StompCodec};
use crate::stomp::frame::{Command, Frame, Version};

/// One STOMP connection (see the module documentation).
pub struct StompClient {
    framed: Framed<TcpStream, StompCodec>,
}

impl StompClient {
    /// Connects to `addr` (`host:port`) and logs in: CONNECT with `accept-version:1.2`,
    /// `client-id` if given, and `login`/`passcode` if given; no heart-beats.
    ///
    /// Errors: the connection fails, or the broker answers with an ERROR (its
    /// `message` is in the error) or closes.
    pub async fn connect(
        addr: &str,
        client_id: Option<&str>,
        login: Option<(&str, &str)>,
    ) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to a STOMP broker at {addr}: {e}"))?;
        stream.set_nodelay(true)?;
        let mut codec = StompCodec::new(Limits::default());
        codec.version = Version::V1_2;
        let mut client = Self {
            framed: Framed::new(stream, codec),
        };
        let mut connect = Frame::new(Command::Connect)
            .header("accept-version", "1.2")
            .header("host", "ebb");
        if let Some(id) = client_id {
            connect = connect.header("client-id", id);
        }
        if let Some((user, pass)) = login {
            connect = connect.header("login", user).header("passcode", pass);
        }
        client.send(connect).await?;
        let answer = client.next().await?;
        if answer.command != Command::Connected {
            anyhow::bail!("{addr} refused the connection: {}", describe(&answer));
        }
        Ok(client)
    }

    /// Queues a frame and writes everything queued.
    pub async fn send(&mut self, frame: Frame) -> anyhow::Result<()> {
        self.framed.send(Outgoing::Frame(frame)).await?;
        Ok(())
    }

    /// Queues a frame without writing it yet (see [`Self::flush`]).
    pub async fn feed(&mut self, frame: Frame) -> anyhow::Result<()> {
        self.framed.feed(Outgoing::Frame(frame)).await?;
        Ok(())
    }

    /// Writes what [`Self::feed`] queued.
    pub async fn flush(&mut self) -> anyhow::Result<()> {
        self.framed.flush().await?;
        Ok(())
    }

    /// The next frame from the broker (heart-beats skipped). Errors: the connection
    /// closed or sent bytes that are not a frame.
    pub async fn next(&mut self) -> anyhow::Result<Frame> {
        loop {
            match self.framed.next().await {
                Some(Ok(Incoming::Frame(frame))) => return Ok(frame),
                Some(Ok(Incoming::Heartbeat)) => continue,
                Some(Err(e)) => anyhow::bail!("bad frame from the broker: {}", e.0),
                None => anyhow::bail!("the broker closed the connection"),
            }
        }
    }

    /// Sends `frame` with `receipt:<id>` and waits for that RECEIPT (frames of other
    /// kinds that arrive meanwhile are dropped). Errors: an ERROR frame, or the close.
    pub async fn request(&mut self, frame: Frame, id: &str) -> anyhow::Result<()> {
        self.send(frame.header("receipt", id)).await?;
        loop {
            let answer = self.next().await?;
            match answer.command {
                Command::Receipt if answer.get("receipt-id") == Some(id) => return Ok(()),
                Command::Error => anyhow::bail!("{}", describe(&answer)),
                _ => continue,
            }
        }
    }

    /// DISCONNECT with a receipt, so that everything sent before is processed.
    pub async fn disconnect(mut self) -> anyhow::Result<()> {
        self.request(Frame::new(Command::Disconnect), "bye").await
    }
}

/// An ERROR frame's `message` (or its command when it has none).
pub fn describe(frame: &Frame) -> String {
    match frame.get("message") {
        Some(m) => format!("{} {m}", frame.command.as_str()),
        None => frame.command.as_str().to_string(),
    }
}
