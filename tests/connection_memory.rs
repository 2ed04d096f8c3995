//! What an idle connection costs, counted in bytes (issue 53): the process's heap (a
//! counting allocator, this binary's own) before and after [`CONNECTIONS`] clients
//! connect and go quiet, per protocol. It is everything the broker holds for each:
//! the connection's task (its future: the session and the socket loop), the
//! runtime's registration of its socket, its entry in the registry operators list,
//! its client id's claim, its buffers. The clients are plain blocking sockets on a
//! thread of their own, with fixed bytes on the stack, so they allocate nothing
//! while counted. The kernel's socket buffers are not on the heap: `cargo bench
//! --bench mqtt` and `--bench wire` (`idle`) measure the resident memory of whole
//! processes beside Mosquitto and RabbitMQ.
//!
//! Debug builds' futures are larger than release builds' (locals are not
//! overlapped), so the bounds here are a debug build's, with room: a per-connection
//! copy of something (a buffer kept while idle, a configuration cloned, a channel
//! per connection) fails them. The release figures are in the README's Figures.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use ebb::test_util::mqtt::mqtt_server;
use ebb::test_util::*;

/// Counts the bytes allocated and not yet freed by the whole test process.
#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

/// The two protocols' tests run one after the other: the count is the process's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Idle connections opened per protocol.
const CONNECTIONS: usize = 400;

/// The most heap an idle MQTT connection (with a client id, clean session, no
/// subscription) may hold, bytes, in a debug build (release: see the README).
/// Measured 2,589 on 2026-12-08 (2,656 before the registry entry kept its text only
/// when listed), 4,344 when its task held its future twice (the listener awaited it
/// in a block of its own).
const MQTT_BOUND: usize = 3_072;

/// The same for an idle STOMP connection (CONNECT without a client id). Measured
/// 2,972 on 2026-12-08 (3,084 before the registry entry kept its text only when
/// listed), 9,900 when its task still held the connection twice (an
/// `async fn` taking it by value) and kept room for held frames, frames to write
/// and frames in flight while idle (and more before it read through
/// `transport::link` instead of tokio-util's `Framed`, 8 KiB each way).
const STOMP_BOUND: usize = 3_584;

/// A 3.1.1 CONNECT, clean session, keep-alive 60 s, client id `m` and 5 digits.
fn mqtt_connect(i: usize) -> [u8; 20] {
    let mut p = *b"\x10\x12\x00\x04MQTT\x04\x02\x00\x3c\x00\x06m00000";
    let id = format!("{i:05}");
    p[15..20].copy_from_slice(id.as_bytes());
    p
}

const STOMP_CONNECT: &[u8] = b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\0";

/// Opens `n` connections to `addr`, each sending `connect(i)` and reading its answer
/// up to `answered` bytes or a NUL; answers the sockets, open. Blocking, on a thread
/// of its own (its only heap is the vector, made before the count starts).
fn open(
    addr: SocketAddr,
    n: usize,
    connect: impl Fn(usize) -> Vec<u8> + Send + 'static,
    mut sockets: Vec<TcpStream>,
) -> std::thread::JoinHandle<Vec<TcpStream>> {
    std::thread::spawn(move || {
        for i in 0..n {
            let mut s = TcpStream::connect(addr).expect("connects");
            s.write_all(&connect(i)).expect("CONNECT written");
            let mut answer = [0u8; 512];
            let mut got = 0;
            // MQTT: a CONNACK is 4 bytes; STOMP: CONNECTED ends with a NUL.
            while got < 4 || (answer[0] != 0x20 && !answer[..got].contains(&0)) {
                let read = s.read(&mut answer[got..]).expect("answer read");
                assert!(read > 0, "connection {i} closed before its answer");
                got += read;
            }
            assert!(
                answer[0] == 0x20 && answer[3] == 0 || answer.starts_with(b"CONNECTED"),
                "connection {i} refused: {:?}",
                String::from_utf8_lossy(&answer[..got])
            );
            sockets.push(s);
        }
        sockets
    })
}

/// The sockets of [`open`] once its thread is done; the runtime, which serves them,
/// goes on meanwhile.
async fn finished(opening: std::thread::JoinHandle<Vec<TcpStream>>) -> Vec<TcpStream> {
    while !opening.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    opening.join().expect("every connection was answered")
}

/// Raises this process's soft limit of open files to its hard limit: each connection
/// is two descriptors here.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// The heap `CONNECTIONS` idle connections of `protocol` add, per connection, once
/// each was answered and the registry lists it connected.
async fn per_connection(
    server: &ebb::test_util::mqtt::MqttServer,
    addr: SocketAddr,
    protocol: &str,
    connect: fn(usize) -> Vec<u8>,
) -> usize {
    let connected = |want: usize| {
        let list = server.connections.list(None, CONNECTIONS * 2);
        let n = list
            .iter()
            .filter(|c| c.protocol == protocol && c.connected)
            .count();
        (n == want).then_some(())
    };
    // One connection first, closed: what is made once (the runtime's slabs, the
    // registry's table) is there before the count.
    let warm = finished(open(addr, 1, connect, Vec::with_capacity(1))).await;
    poll_until("the warm-up connection", || async { connected(1) }).await;
    drop(warm);
    poll_until("the warm-up connection ends", || async {
        server.connections.is_empty().then_some(())
    })
    .await;
    let sockets = Vec::with_capacity(CONNECTIONS);
    let before = heap::live_bytes();
    let sockets = finished(open(addr, CONNECTIONS, connect, sockets)).await;
    poll_until("every connection is listed connected", || async {
        connected(CONNECTIONS)
    })
    .await;
    // A moment for each connection's last turn to end.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let after = heap::live_bytes();
    let per = after.saturating_sub(before) / CONNECTIONS;
    println!(
        "{CONNECTIONS} idle {protocol} connections: {} bytes of heap, {per} bytes each",
        after.saturating_sub(before)
    );
    drop(sockets);
    poll_until("every connection ends", || async {
        server.connections.is_empty().then_some(())
    })
    .await;
    per
}

/// An idle MQTT connection (clean session, a client id, keep-alive 60 s) holds at
/// most [`MQTT_BOUND`] bytes of heap.
async fn an_idle_mqtt_connection_is_small(t: TestStore) {
    let _serial = SERIAL.lock().await;
    raise_open_files();
    let server = mqtt_server(&t, Default::default()).await;
    let per = per_connection(&server, server.mqtt, "MQTT", |i| mqtt_connect(i).to_vec()).await;
    assert!(
        per <= MQTT_BOUND,
        "{per} bytes of heap per idle MQTT connection (at most {MQTT_BOUND})"
    );
    server.stop().await;
}

/// An idle STOMP connection (STOMP 1.2, no client id, no heart-beats) holds at most
/// [`STOMP_BOUND`] bytes of heap: no buffer is kept while it waits.
async fn an_idle_stomp_connection_is_small(t: TestStore) {
    let _serial = SERIAL.lock().await;
    raise_open_files();
    let server = mqtt_server(&t, Default::default()).await;
    let per = per_connection(&server, server.stomp, "STOMP", |_| STOMP_CONNECT.to_vec()).await;
    assert!(
        per <= STOMP_BOUND,
        "{per} bytes of heap per idle STOMP connection (at most {STOMP_BOUND})"
    );
    server.stop().await;
}

#[actix_rt::test]
async fn an_idle_mqtt_connection_is_small_sqlite() {
    an_idle_mqtt_connection_is_small(TestStore::sqlite()).await;
}

#[actix_rt::test]
async fn an_idle_stomp_connection_is_small_sqlite() {
    an_idle_stomp_connection_is_small(TestStore::sqlite()).await;
}
