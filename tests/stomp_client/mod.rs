//! A raw STOMP test client and an in-process server on an ephemeral port, shared by
//! the STOMP test files.
#![allow(dead_code)]

use std::time::Duration;

use bytes::BytesMut;
use ebb::auth::Security;
use ebb::stomp::codec::{Incoming, Limits, StompCodec};
use ebb::stomp::frame::{Command, Frame, Version};
use ebb::transport::connection::ConnectionConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Decoder;

use crate::common::{broker, TestStore};

pub struct Server {
    pub addr: std::net::SocketAddr,
    pub broker: ebb::Broker,
    stop: tokio::sync::watch::Sender<bool>,
}

/// A server with `policy` for every topic.
pub async fn server(t: &TestStore, policy: ebb::Policy) -> Server {
    server_full(t, policy, Limits::default(), Security::default(), 30_000).await
}

pub async fn server_full(
    t: &TestStore,
    policy: ebb::Policy,
    limits: Limits,
    security: Security,
    stall_ms: u64,
) -> Server {
    let broker = broker(t, policy, 2).await;
    serve(broker, limits, security, stall_ms).await
}

/// A STOMP server on an ephemeral port for a broker built by the test.
pub async fn serve(
    broker: ebb::Broker,
    limits: Limits,
    security: Security,
    stall_ms: u64,
) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let config = ConnectionConfig {
        limits,
        security: std::sync::Arc::new(security),
        stall_timeout_ms: stall_ms,
        ..ConnectionConfig::default()
    };
    actix_rt::spawn(ebb::transport::listener::run(
        listener,
        broker.clone(),
        config,
        stop_rx,
    ));
    Server { addr, broker, stop }
}

impl Server {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.broker.shutdown().await.unwrap();
    }
}

/// A client speaking raw bytes, reading frames with the server's own codec.
pub struct Client {
    stream: TcpStream,
    codec: StompCodec,
    buf: BytesMut,
}

impl Client {
    pub async fn open(addr: std::net::SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut codec = StompCodec::new(Limits::default());
        codec.version = Version::V1_2;
        Self {
            stream,
            codec,
            buf: BytesMut::new(),
        }
    }

    pub async fn connected(addr: std::net::SocketAddr, client_id: Option<&str>) -> Self {
        let mut c = Self::open(addr).await;
        let id = client_id
            .map(|id| format!("client-id:{id}\n"))
            .unwrap_or_default();
        c.write(format!("CONNECT\naccept-version:1.2\nhost:x\n{id}\n\0").as_bytes())
            .await;
        let f = c.frame().await.expect("CONNECTED");
        assert_eq!(f.command, Command::Connected, "{f:?}");
        c
    }

    pub async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next frame (heart-beats skipped), or `None` if the server closed or
    /// nothing came within 3 s.
    pub async fn frame(&mut self) -> Option<Frame> {
        self.frame_within(3_000).await
    }

    pub async fn frame_within(&mut self, ms: u64) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            match self.codec.decode(&mut self.buf) {
                Ok(Some(Incoming::Frame(f))) => return Some(f),
                Ok(Some(Incoming::Heartbeat)) => continue,
                Ok(None) => {}
                Err(e) => panic!("server sent bad bytes: {e}"),
            }
            let mut chunk = [0u8; 8192];
            let read = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await;
            match read {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// True when the server closed the connection (reads end) within 3 s.
    pub async fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        loop {
            match tokio::time::timeout(Duration::from_secs(3), self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}

pub async fn receipt(c: &mut Client, id: &str) {
    let f = c
        .frame()
        .await
        .unwrap_or_else(|| panic!("no RECEIPT {id} within 3 s"));
    assert_eq!(f.command, Command::Receipt, "{f:?}");
    assert_eq!(f.get("receipt-id"), Some(id));
}
