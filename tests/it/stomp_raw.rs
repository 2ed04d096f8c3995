//! STOMP over TCP with raw frames: a server on an ephemeral port, clients that write
//! bytes and read frames. Covers the wire cases STOMP-01, STOMP-03, STOMP-04 and the
//! ActiveMQ data-loss scenario through the wire.

use std::time::Duration;

use ebb::auth::{hash_password, AuthorizationEntry, Security, User};
use ebb::stomp::codec::Limits;
use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;

async fn server(t: &TestStore, limits: Limits) -> Server {
    server_with(t, limits, Security::default()).await
}

async fn server_with(t: &TestStore, limits: Limits, security: Security) -> Server {
    server_full(t, policy(100, 400), limits, security, 30_000).await
}

/// STOMP-01: NUL octets in a body with content-length, a second frame in the same
/// write, an empty body; and the exact bytes after a restart (read back from SQL).
async fn body_bytes_survive_the_wire_and_a_restart(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/B\nid:1\nack:client-individual\nactivemq.subscriptionName:b\nreceipt:s\n\n\0").await;
    receipt(&mut c, "s").await;
    let mut bytes = b"SEND\ndestination:/topic/B\npersistent:true\ncontent-length:7\n\n".to_vec();
    bytes.extend_from_slice(&[0x61, 0, 0x62, 0, 0, 0x63, 0x0a, 0]);
    bytes.extend_from_slice(b"SEND\ndestination:/topic/B\npersistent:true\n\nnext\0");
    bytes.extend_from_slice(
        b"SEND\ndestination:/topic/B\npersistent:true\ncontent-length:0\nreceipt:r\n\n\0",
    );
    c.write(&bytes).await;
    // The receipt of the third SEND and the three messages, in whatever interleaving.
    let mut messages = Vec::new();
    let mut receipts = 0;
    while messages.len() < 3 || receipts < 1 {
        let f = c.frame().await.expect("a frame");
        match f.command {
            Command::Receipt => receipts += 1,
            Command::Message => messages.push(f),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(messages[0].body, vec![0x61, 0, 0x62, 0, 0, 0x63, 0x0a]);
    assert_eq!(messages[0].get("content-length"), Some("7"));
    assert_eq!(messages[1].body, &b"next"[..]);
    assert!(messages[2].body.is_empty());
    drop(c);
    s.stop().await;

    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/B\nid:1\nack:client-individual\nactivemq.subscriptionName:b\n\n\0").await;
    let again = c.frame().await.unwrap();
    assert_eq!(
        again.body,
        vec![0x61, 0, 0x62, 0, 0, 0x63, 0x0a],
        "same bytes from SQL"
    );
    s.stop().await;
}

/// STOMP-03: escaped header values arrive as their logical values and are escaped
/// again on delivery; an undefined escape is an ERROR and the connection closes.
async fn header_escaping_round_trips(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/E\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    c.write(b"SEND\ndestination:/topic/E\nnote:line1\\nline2\\cx\\\\end\nk\\cey:v\nsp: padded \nsp:second\n\nx\0").await;
    let m = c.frame().await.unwrap();
    assert_eq!(m.get("note"), Some("line1\nline2:x\\end"));
    assert_eq!(m.get("k:ey"), Some("v"));
    assert_eq!(
        m.get("sp"),
        Some(" padded "),
        "first wins, spaces kept in 1.2"
    );
    c.write(b"SEND\ndestination:/topic/E\nbad:x\\ty\n\n\0")
        .await;
    let e = c.frame().await.unwrap();
    assert_eq!(e.command, Command::Error);
    assert!(e.get("message").unwrap().contains("escape"), "{e:?}");
    assert!(c.closed().await);
    s.stop().await;
}

/// STOMP-04: frames before CONNECT, a second CONNECT, an empty destination, a frame
/// over the size limit, a header over the limit (ERROR as soon as it is over): each
/// gets an ERROR (with receipt-id when asked) and the connection closes; nothing is
/// enqueued; DISCONNECT's receipt comes after the earlier frame's.
async fn bad_frames_get_an_error_and_close(t: TestStore) {
    let limits = Limits {
        max_frame_bytes: 64 * 1024,
        ..Limits::default()
    };
    let s = server(&t, limits).await;
    // A well-behaved client connected throughout.
    let mut good = Client::connected(s.addr, None).await;
    good.write(b"SUBSCRIBE\ndestination:/topic/X\nid:1\nreceipt:g\n\n\0")
        .await;
    receipt(&mut good, "g").await;

    // (name, bytes, receipt-id of the ERROR, its error-code)
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        (
            "before CONNECT",
            b"SEND\ndestination:/topic/X\n\nx\0".to_vec(),
            None,
            "protocol-violation",
        ),
        (
            "second CONNECT",
            b"CONNECT\naccept-version:1.2\n\n\0".to_vec(),
            None,
            "protocol-violation",
        ),
        (
            "empty destination",
            b"SUBSCRIBE\ndestination:\nid:1\nreceipt:s1\n\n\0".to_vec(),
            Some("s1"),
            "missing-header",
        ),
        (
            "queue pattern",
            b"SEND\ndestination:/queue/X.*\nreceipt:q\n\nx\0".to_vec(),
            Some("q"),
            "invalid-destination",
        ),
        (
            "bad priority",
            b"SEND\ndestination:/topic/X\npriority:12\n\nx\0".to_vec(),
            None,
            "invalid-value",
        ),
        (
            "bad expires",
            b"SEND\ndestination:/topic/X\nexpires:soon\n\nx\0".to_vec(),
            None,
            "invalid-value",
        ),
        (
            "unknown command",
            b"FROB\n\n\0".to_vec(),
            None,
            "malformed-frame",
        ),
        (
            "unknown transaction",
            b"COMMIT\ntransaction:t9\nreceipt:c\n\n\0".to_vec(),
            Some("c"),
            "unknown-transaction",
        ),
        (
            "bad selector",
            b"SUBSCRIBE\ndestination:/queue/X\nid:1\nselector:a = \n\n\0".to_vec(),
            None,
            "invalid-selector",
        ),
        (
            "header not honoured",
            b"SUBSCRIBE\ndestination:/queue/X\nid:1\nbrowser:true\nbrowser-end:false\n\n\0"
                .to_vec(),
            None,
            "unsupported",
        ),
    ];
    for (name, bytes, receipt_id, code) in cases {
        let mut c = if name == "before CONNECT" {
            Client::open(s.addr).await
        } else {
            Client::connected(s.addr, None).await
        };
        c.write(&bytes).await;
        let e = c
            .frame()
            .await
            .unwrap_or_else(|| panic!("{name}: no ERROR"));
        assert_eq!(e.command, Command::Error, "{name}: {e:?}");
        assert!(!e.get("message").unwrap_or_default().is_empty(), "{name}");
        assert_eq!(e.get("receipt-id"), receipt_id, "{name}");
        assert_eq!(e.get("error-code"), Some(code), "{name}: {e:?}");
        assert!(
            c.closed().await,
            "{name}: the connection must close after ERROR"
        );
    }

    // A header section over 64 KiB that never ends: ERROR without waiting for more.
    let mut c = Client::connected(s.addr, None).await;
    let mut big = b"SEND\ndestination:/topic/X\nh:".to_vec();
    big.extend(std::iter::repeat_n(b'a', 100 * 1024));
    c.write(&big).await;
    let e = c.frame().await.expect("ERROR for the oversized header");
    assert!(e.get("message").unwrap().contains("limit"), "{e:?}");
    assert_eq!(e.get("error-code"), Some("limit-exceeded"), "{e:?}");
    assert!(c.closed().await);

    // A frame with a correct content-length over the frame limit.
    let mut c = Client::connected(s.addr, None).await;
    let mut huge = b"SEND\ndestination:/topic/X\ncontent-length:1048576\n\n".to_vec();
    huge.extend(std::iter::repeat_n(b'z', 1024));
    c.write(&huge).await;
    let e = c.frame().await.expect("ERROR for the oversized frame");
    assert!(e.get("message").unwrap().contains("limit"), "{e:?}");
    assert!(c.closed().await);

    // The good client saw none of it.
    assert!(
        good.quiet().await.is_none(),
        "nothing from refused frames was enqueued"
    );

    // f) SEND with receipt, then DISCONNECT with receipt: both, in order, then close.
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SEND\ndestination:/topic/X\nreceipt:r1\n\nkept\0DISCONNECT\nreceipt:d1\n\n\0")
        .await;
    receipt(&mut c, "r1").await;
    receipt(&mut c, "d1").await;
    assert!(c.closed().await);
    let m = good.frame().await.expect("the accepted message");
    assert_eq!(m.body, &b"kept"[..]);
    s.stop().await;
}

/// The ActiveMQ data loss through the wire: durable subscription offline, A (no
/// expiry) then B (expires in 1 s); B expires behind A (counted once, its row deleted,
/// the mark still before A); after a restart, A is delivered and B is not.
async fn expiry_never_acks_a_live_message_over_stomp(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/orders\nid:1\nack:client-individual\nactivemq.subscriptionName:s1\nreceipt:s\n\n\0").await;
    receipt(&mut c, "s").await;
    c.write(b"DISCONNECT\nreceipt:d\n\n\0").await;
    receipt(&mut c, "d").await;
    let mut p = Client::connected(s.addr, None).await;
    let soon = ebb_actors::destination::now_ms() + 1_000;
    p.write(b"SEND\ndestination:/topic/orders\npersistent:true\nreceipt:a\n\nA\0")
        .await;
    receipt(&mut p, "a").await;
    p.write(
        format!(
            "SEND\ndestination:/topic/orders\npersistent:true\nexpires:{soon}\nreceipt:b\n\nB\0"
        )
        .as_bytes(),
    )
    .await;
    receipt(&mut p, "b").await;
    let stats = wait_for(&s.broker, "orders", |s| s.expired >= 1).await;
    assert_eq!(stats.expired, 1);
    wait_rows(&s.broker, "topic://orders", 1).await;
    let a_row = s
        .broker
        .store()
        .browse("topic://orders", 0, 10)
        .await
        .unwrap();
    assert_eq!(a_row[0].expiration, 0, "A stays");
    let sub = s
        .broker
        .store()
        .find_subscription(
            "topic://orders",
            &ebb_store::SubscriptionKey::new("c1", "s1"),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(sub.marks.iter().all(|(_, m)| *m < a_row[0].id), "{sub:?}");
    s.stop().await;

    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, Some("c1")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/orders\nid:1\nack:client-individual\nactivemq.subscriptionName:s1\n\n\0").await;
    let a = c.frame().await.expect("A is delivered");
    assert_eq!(a.body, &b"A"[..]);
    assert_eq!(a.get("persistent"), Some("true"));
    assert!(c.quiet().await.is_none(), "B expired: not delivered");
    let ack = a.get("ack").unwrap().to_string();
    c.write(format!("ACK\nid:{ack}\nreceipt:k\n\n\0").as_bytes())
        .await;
    receipt(&mut c, "k").await;
    s.stop().await;
}

/// Errors found while parsing carry the frame's receipt; frames before CONNECT are
/// small; a transaction is all or nothing; an ack of an already-acked message of this
/// connection changes nothing.
async fn parse_errors_receipts_and_all_or_nothing_commits(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SEND\ndestination:/topic/p\nreceipt:r\ncontent-length:abc\n\nx\0")
        .await;
    let e = c.frame().await.unwrap();
    assert_eq!(e.get("receipt-id"), Some("r"), "{e:?}");
    assert!(c.closed().await);

    let mut c = Client::open(s.addr).await;
    let mut big = b"CONNECT\naccept-version:1.2\nx:".to_vec();
    big.extend(std::iter::repeat_n(b'a', 100 * 1024));
    c.write(&big).await;
    let e = c
        .frame()
        .await
        .expect("ERROR for a large frame before CONNECT");
    assert!(e.get("message").unwrap().contains("limit"), "{e:?}");

    let mut c = Client::connected(s.addr, Some("tx1")).await;
    c.write(b"SUBSCRIBE\ndestination:/topic/p\nid:1\nack:client\nactivemq.subscriptionName:d\nreceipt:s\n\n\0").await;
    receipt(&mut c, "s").await;
    c.write(b"SEND\ndestination:/topic/p\npersistent:true\n\none\0SEND\ndestination:/topic/p\npersistent:true\n\ntwo\0").await;
    let one = c.frame().await.unwrap();
    let two = c.frame().await.unwrap();
    let (a1, a2) = (
        one.get("ack").unwrap().to_string(),
        two.get("ack").unwrap().to_string(),
    );
    // Cumulative ack of two covers one: acking one afterwards is a no-op.
    c.write(format!("ACK\nid:{a2}\nreceipt:k2\n\n\0ACK\nid:{a1}\nreceipt:k1\n\n\0").as_bytes())
        .await;
    receipt(&mut c, "k2").await;
    receipt(&mut c, "k1").await;
    // The same ack twice in one transaction is refused; the transaction's send is
    // rolled back with the connection and never delivered.
    c.write(b"SEND\ndestination:/topic/p\npersistent:true\n\nthree\0")
        .await;
    let three = c.frame().await.unwrap();
    let a3 = three.get("ack").unwrap().to_string();
    let tx = format!(
        "BEGIN\ntransaction:t\n\n\0SEND\ndestination:/topic/p\npersistent:true\ntransaction:t\n\nin-tx\0\
         ACK\nid:{a3}\ntransaction:t\n\n\0ACK\nid:{a3}\ntransaction:t\nreceipt:dup\n\n\0"
    );
    c.write(tx.as_bytes()).await;
    let e = c.frame().await.unwrap();
    assert_eq!(e.get("receipt-id"), Some("dup"), "{e:?}");
    assert!(c.closed().await);
    let mut c = Client::connected(s.addr, Some("tx1")).await;
    c.write(
        b"SUBSCRIBE\ndestination:/topic/p\nid:1\nack:client\nactivemq.subscriptionName:d\n\n\0",
    )
    .await;
    let again = c.frame().await.expect("three, never acked");
    assert_eq!(again.body, &b"three"[..]);
    assert!(
        c.quiet().await.is_none(),
        "the rolled-back send is never delivered"
    );
    s.stop().await;
}

/// A client that stalls in the middle of a frame, or never sends CONNECT, gets an
/// ERROR and is closed once the stall timeout passes; a well-behaved one is untouched.
async fn stalled_clients_are_closed(t: TestStore) {
    let s = server_full(
        &t,
        policy(100, 400),
        Limits::default(),
        Security::default(),
        300,
    )
    .await;
    let mut good = Client::connected(s.addr, None).await;
    let mut mid = Client::connected(s.addr, None).await;
    mid.write(b"SEND\ndestination:/topic/x\ncontent-le").await;
    let e = mid.frame().await.expect("ERROR for the stalled frame");
    assert!(
        e.get("message").unwrap().contains("incomplete frame"),
        "{e:?}"
    );
    assert!(mid.closed().await);
    let mut silent = Client::open(s.addr).await;
    let e = silent.frame().await.expect("ERROR for no CONNECT");
    assert!(e.get("message").unwrap().contains("no CONNECT"), "{e:?}");
    assert!(silent.closed().await);
    good.write(b"SEND\ndestination:/topic/x\nreceipt:g\n\nstill here\0")
        .await;
    receipt(&mut good, "g").await;
    s.stop().await;
}

/// A transactional SEND of a persistent message is stored prepared: invisible to
/// subscribers and browsing until COMMIT; ABORT deletes it; a connection that ends
/// with a transaction open rolls it back.
async fn transactional_sends_are_prepared_until_commit(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut sub = Client::connected(s.addr, Some("c9")).await;
    sub.write(
        b"SUBSCRIBE\ndestination:/topic/tx\nid:1\nactivemq.subscriptionName:d\nreceipt:s\n\n\0",
    )
    .await;
    receipt(&mut sub, "s").await;
    let mut p = Client::connected(s.addr, None).await;
    p.write(b"BEGIN\ntransaction:t1\n\n\0SEND\ndestination:/topic/tx\npersistent:true\ntransaction:t1\nreceipt:r1\n\nin-tx\0").await;
    receipt(&mut p, "r1").await;
    assert_eq!(
        s.broker.store().count_messages("topic://tx").await.unwrap(),
        1,
        "stored prepared"
    );
    assert!(
        s.broker
            .browse("topic://tx", 0, 10)
            .await
            .unwrap()
            .is_empty(),
        "invisible before COMMIT"
    );
    assert!(sub.quiet().await.is_none(), "not delivered before COMMIT");
    p.write(b"COMMIT\ntransaction:t1\nreceipt:c1\n\n\0").await;
    receipt(&mut p, "c1").await;
    let m = sub.frame().await.expect("delivered at COMMIT");
    assert_eq!(m.body, &b"in-tx"[..]);
    assert_eq!(s.broker.browse("topic://tx", 0, 10).await.unwrap().len(), 1);

    p.write(b"BEGIN\ntransaction:t2\n\n\0SEND\ndestination:/topic/tx\npersistent:true\ntransaction:t2\n\naborted\0ABORT\ntransaction:t2\nreceipt:a2\n\n\0").await;
    receipt(&mut p, "a2").await;
    p.write(b"BEGIN\ntransaction:t3\n\n\0SEND\ndestination:/topic/tx\npersistent:true\ntransaction:t3\nreceipt:r3\n\nleft open\0").await;
    receipt(&mut p, "r3").await;
    assert_eq!(
        s.broker.store().count_messages("topic://tx").await.unwrap(),
        2
    );
    p.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut p, "bye").await;
    assert!(p.closed().await);
    for _ in 0..100 {
        if s.broker.store().count_messages("topic://tx").await.unwrap() == 1 {
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.broker.store().count_messages("topic://tx").await.unwrap(),
        1,
        "rolled back at disconnect"
    );
    assert!(
        sub.quiet().await.is_none(),
        "aborted and abandoned sends are never delivered"
    );
    let mut bad = Client::connected(s.addr, None).await;
    bad.write(b"COMMIT\ntransaction:nope\nreceipt:x\n\n\0")
        .await;
    let e = bad.frame().await.unwrap();
    assert!(
        e.get("message").unwrap().contains("invalid transaction id"),
        "{e:?}"
    );
    assert_eq!(e.get("receipt-id"), Some("x"));
    s.stop().await;
}

/// With users configured: CONNECT without or with a wrong login is refused (ERROR,
/// close); the right one (a passcode with a colon, sent raw: CONNECT is not escaped)
/// connects; rights by destination decide SEND, SUBSCRIBE and durable creation.
async fn login_and_rights_are_enforced(t: TestStore) {
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![User {
            login: "alice".into(),
            password_hash: hash_password("pa:ss").unwrap(),
            certificate_subject: None,
            groups: vec!["billing".into()],
        }],
        authorization: vec![AuthorizationEntry {
            destination: "topic://orders.>".into(),
            read: vec!["billing".into()],
            write: vec!["billing".into()],
            admin: vec![],
        }],
    };
    let s = server_with(&t, Limits::default(), security).await;
    for (connect, why) in [
        (
            "CONNECT\naccept-version:1.2\n\n\0",
            "authentication required",
        ),
        (
            "CONNECT\naccept-version:1.2\nlogin:alice\npasscode:wrong\n\n\0",
            "authentication failed",
        ),
        (
            "CONNECT\naccept-version:1.2\nlogin:mallory\npasscode:pa:ss\n\n\0",
            "authentication failed",
        ),
    ] {
        let mut c = Client::open(s.addr).await;
        let asked = std::time::Instant::now();
        c.write(connect.as_bytes()).await;
        let e = c.frame().await.expect("ERROR");
        assert_eq!(e.command, Command::Error);
        assert!(e.get("message").unwrap().starts_with(why), "{e:?}");
        assert_eq!(e.get("error-code"), Some("authentication-failed"), "{e:?}");
        if why == "authentication failed" {
            // A guess costs its connection the delay (a lower bound: it sleeps).
            assert!(asked.elapsed() >= ebb::auth::FAILED_LOGIN_DELAY);
        }
        assert!(c.closed().await);
    }
    let mut c = Client::open(s.addr).await;
    c.write(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:pa:ss\nclient-id:a1\n\n\0")
        .await;
    // (argon2 is slow in a debug build on a busy machine: 30 s for the answer.)
    assert_eq!(c.frame().await.unwrap().command, Command::Connected);
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.eu\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut c, "s").await;
    c.write(b"SEND\ndestination:/topic/orders.eu\nreceipt:w\n\nok\0")
        .await;
    let mut got = Vec::new();
    while got.len() < 2 {
        got.push(c.frame().await.expect("RECEIPT and MESSAGE").command);
    }
    assert!(
        got.contains(&Command::Receipt) && got.contains(&Command::Message),
        "{got:?}"
    );
    // Creating a durable subscription needs admin, which alice lacks here.
    c.write(b"SUBSCRIBE\ndestination:/topic/orders.eu\nid:2\nactivemq.subscriptionName:d\nreceipt:d\n\n\0").await;
    let e = c.frame().await.expect("ERROR");
    assert_eq!(e.get("receipt-id"), Some("d"));
    assert!(
        e.get("message").unwrap().contains("no admin right"),
        "{e:?}"
    );
    assert_eq!(e.get("error-code"), Some("not-authorized"), "{e:?}");
    assert!(c.closed().await);
    let mut c = Client::open(s.addr).await;
    c.write(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:pa:ss\n\n\0")
        .await;
    // (argon2 is slow in a debug build on a busy machine: 30 s for the answer.)
    assert_eq!(c.frame().await.unwrap().command, Command::Connected);
    c.write(b"SEND\ndestination:/topic/payroll\n\nx\0").await;
    let e = c.frame().await.expect("ERROR");
    assert!(
        e.get("message").unwrap().contains("no authorization entry"),
        "{e:?}"
    );
    s.stop().await;
}

on_every_backend!(
    #[actix_rt::test]
    body_bytes_survive_the_wire_and_a_restart,
    header_escaping_round_trips,
    bad_frames_get_an_error_and_close,
    expiry_never_acks_a_live_message_over_stomp,
    login_and_rights_are_enforced,
    transactional_sends_are_prepared_until_commit,
    stalled_clients_are_closed,
    parse_errors_receipts_and_all_or_nothing_commits,
    per_connection_limits_are_errors_naming_the_limit,
    connections_per_address_are_limited,
    unacked_deliveries_per_connection_wait_for_acks,
    stomp_conformance_versions_stray_nuls_and_1_2_acks,
);

/// Conformance (issue 35, from stomp.py's and stomp.js's suites): a CONNECT with no
/// common version gets an ERROR whose `version` header lists the server's (the STOMP
/// 1.2 spec); a stray NUL between frames is skipped, as RabbitMQ and ActiveMQ do; a
/// STOMP 1.2 ACK without `id` is refused with an ERROR.
async fn stomp_conformance_versions_stray_nuls_and_1_2_acks(t: TestStore) {
    let s = server(&t, Limits::default()).await;
    let mut old = Client::open(s.addr).await;
    old.write(b"CONNECT\naccept-version:2.0\nhost:x\n\n\0")
        .await;
    let error = old.frame().await.expect("an ERROR");
    assert_eq!(error.command, Command::Error, "{error:?}");
    assert_eq!(error.get("version"), Some("1.0,1.1,1.2"));
    assert!(old.closed().await);

    let mut c = Client::connected(s.addr, None).await;
    c.write(b"\0SEND\ndestination:/queue/conf\nreceipt:r1\n\none\0\0\0")
        .await;
    let r = c.frame().await.expect("a RECEIPT");
    assert_eq!(
        (r.command, r.get("receipt-id")),
        (Command::Receipt, Some("r1"))
    );
    c.write(b"SUBSCRIBE\ndestination:/queue/conf\nid:1\nack:client-individual\n\n\0")
        .await;
    let m = c.frame().await.expect("the MESSAGE");
    assert_eq!(m.body, &b"one"[..]);
    let message_id = m.get("message-id").unwrap().to_string();
    c.write(format!("ACK\nmessage-id:{message_id}\nsubscription:1\nreceipt:a\n\n\0").as_bytes())
        .await;
    let refused = c.frame().await.expect("an ERROR");
    assert_eq!(refused.command, Command::Error, "{refused:?}");
    assert!(
        refused
            .get("message")
            .unwrap()
            .contains("needs an id header in STOMP 1.2"),
        "{refused:?}"
    );
    assert!(c.closed().await);
    // Not acked: it waits for the next consumer.
    let mut again = Client::connected(s.addr, None).await;
    again
        .write(b"SUBSCRIBE\ndestination:/queue/conf\nid:1\nack:client-individual\n\n\0")
        .await;
    assert_eq!(again.frame().await.expect("one again").body, &b"one"[..]);
    s.stop().await;
}

/// Each limit against hostile or broken clients, set small: the client over it gets
/// an ERROR naming the limit (and its `[stomp]` key) and is closed; another connection
/// goes on working. The defaults are the constants (`MAX_SUBSCRIPTIONS_PER_CONNECTION`,
/// `MAX_CONNECTIONS`, ...).
async fn per_connection_limits_are_errors_naming_the_limit(t: TestStore) {
    use ebb::stomp::connection::{
        ConnectionConfig, SessionLimits, MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS,
        MAX_OPEN_TRANSACTIONS, MAX_SUBSCRIPTIONS_PER_CONNECTION, MAX_TRANSACTION_FRAMES,
    };
    let d = ConnectionConfig::default();
    assert_eq!(
        (d.max_connections, d.max_connections_per_address),
        (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_ADDRESS)
    );
    assert_eq!(
        (
            d.session_limits.max_subscriptions,
            d.session_limits.max_open_transactions,
            d.session_limits.max_transaction_frames
        ),
        (
            MAX_SUBSCRIPTIONS_PER_CONNECTION,
            MAX_OPEN_TRANSACTIONS,
            MAX_TRANSACTION_FRAMES
        )
    );
    let config = ConnectionConfig {
        limits: Limits {
            max_headers: 8,
            max_header_bytes: 256,
            ..Limits::default()
        },
        session_limits: SessionLimits {
            max_subscriptions: 5,
            max_open_transactions: 3,
            max_transaction_frames: 4,
            max_transaction_bytes: 1 << 20,
            max_unacked: 100,
        },
        max_connections: 6,
        max_connections_per_address: 6,
        ..ConnectionConfig::default()
    };
    let s = serve_with(broker(&t, policy(100, 400), 2).await, config).await;
    // The answer to `frames` on a fresh connection: an ERROR whose message is `want`,
    // then the close.
    let refused = |frames: Vec<u8>, want: &'static str| async move {
        let mut c = Client::connected(s.addr, None).await;
        c.write(&frames).await;
        let error = c.frame().await.expect("an ERROR");
        assert_eq!(error.command, Command::Error, "{error:?}");
        assert_eq!(error.get("message"), Some(want), "{error:?}");
        assert!(c.closed().await);
    };
    let repeat = |n: usize, frame: &dyn Fn(usize) -> String| -> Vec<u8> {
        (0..n).flat_map(|i| frame(i).into_bytes()).collect()
    };
    refused(
        repeat(6, &|i| {
            format!("SUBSCRIBE\nid:s{i}\ndestination:/topic/lim.{i}\n\n\0")
        }),
        "more than 5 subscriptions on one connection (max_subscriptions)",
    )
    .await;
    refused(
        repeat(4, &|i| format!("BEGIN\ntransaction:t{i}\n\n\0")),
        "more than 3 open transactions on one connection (max_open_transactions)",
    )
    .await;
    let mut frames = b"BEGIN\ntransaction:big\n\n\0".to_vec();
    frames.extend(repeat(5, &|i| {
        format!("SEND\ndestination:/queue/lim.tx\ntransaction:big\n\n{i}\0")
    }));
    refused(
        frames,
        "transaction `big` holds more than 4 frames before COMMIT (max_transaction_frames)",
    )
    .await;
    let headers: String = (0..9).map(|i| format!("h{i}:v\n")).collect();
    refused(
        format!("SEND\ndestination:/queue/lim\n{headers}\nx\0").into_bytes(),
        "more than 8 headers (max_headers)",
    )
    .await;
    refused(
        format!("SEND\ndestination:/queue/lim\nh:{}\n\nx\0", "v".repeat(300)).into_bytes(),
        "header line longer than the limit of 256 bytes (max_header_size)",
    )
    .await;

    // Six connections at once from 127.0.0.1 (one of them `other`); a seventh is told
    // why and closed before it is read.
    let mut other = Client::connected(s.addr, None).await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(Client::connected(s.addr, None).await);
    }
    let mut over = Client::open(s.addr).await;
    let error = over.frame().await.expect("an ERROR");
    assert_eq!(error.command, Command::Error, "{error:?}");
    assert_eq!(
        error.get("message"),
        Some("the broker serves 6 connections, its most (max_connections)")
    );
    assert!(over.closed().await);
    // A place comes back when a connection ends.
    drop(held.pop());
    let mut again = None;
    for _ in 0..100 {
        let mut c = Client::open(s.addr).await;
        c.write(b"CONNECT\naccept-version:1.2\nhost:x\n\n\0").await;
        match c.frame().await {
            Some(f) if f.command == Command::Connected => {
                again = Some(c);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    assert!(again.is_some(), "a place came back");

    // Everyone else is served.
    other
        .write(b"SUBSCRIBE\nid:1\ndestination:/queue/lim\nreceipt:s\n\n\0")
        .await;
    receipt(&mut other, "s").await;
    other
        .write(b"SEND\ndestination:/queue/lim\npersistent:true\n\nok\0")
        .await;
    let m = other.frame().await.expect("a MESSAGE");
    assert_eq!(&m.body[..], b"ok");
    s.stop().await;
}

/// At `max_unacked` deliveries waiting for an ACK over all of a connection's
/// subscriptions, the broker delivers nothing more to it until an ack comes: no ERROR,
/// the messages wait in their queues.
async fn unacked_deliveries_per_connection_wait_for_acks(t: TestStore) {
    use ebb::stomp::connection::{ConnectionConfig, SessionLimits};
    let config = ConnectionConfig {
        session_limits: SessionLimits {
            max_unacked: 3,
            ..SessionLimits::default()
        },
        ..ConnectionConfig::default()
    };
    let s = serve_with(broker(&t, policy(100, 400), 2).await, config).await;
    let mut producer = Client::connected(s.addr, None).await;
    let mut frames = Vec::new();
    for q in ["a", "b"] {
        for i in 0..5 {
            frames.extend(
                format!("SEND\ndestination:/queue/unacked.{q}\npersistent:true\n\n{q}{i}\0")
                    .into_bytes(),
            );
        }
    }
    frames.extend(b"SEND\ndestination:/queue/unacked.a\npersistent:true\nreceipt:sent\n\nlast\0");
    producer.write(&frames).await;
    receipt(&mut producer, "sent").await;
    let mut c = Client::connected(s.addr, None).await;
    c.write(b"SUBSCRIBE\nid:a\ndestination:/queue/unacked.a\nack:client-individual\n\n\0SUBSCRIBE\nid:b\ndestination:/queue/unacked.b\nack:client\n\n\0")
        .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        let f = c.frame().await.expect("a MESSAGE");
        assert_eq!(f.command, Command::Message, "{f:?}");
        got.push(f);
    }
    assert!(
        c.quiet().await.is_none(),
        "a fourth delivery while three wait for an ACK"
    );
    // The first delivery is its subscription's first: acking it (even cumulatively)
    // acks it alone.
    let ack = got[0].get("ack").unwrap().to_string();
    c.write(format!("ACK\nid:{ack}\nreceipt:acked\n\n\0").as_bytes())
        .await;
    let mut more = messages_until_receipt(&mut c, "acked").await;
    if more.is_empty() {
        more.push(c.frame().await.expect("one more MESSAGE after the ACK"));
    }
    assert_eq!(more.len(), 1);
    assert_eq!(more[0].command, Command::Message, "{:?}", more[0]);
    assert!(c.quiet().await.is_none(), "only one more");
    // Nothing was lost meanwhile: 11 sent, 1 acked, the rest stored.
    let store = s.broker.store();
    let stored = store.count_messages("queue://unacked.a").await.unwrap()
        + store.count_messages("queue://unacked.b").await.unwrap();
    assert_eq!(stored, 10);
    s.stop().await;
}

/// One source address may not take every place: the per-address limit refuses a
/// connection the total would still take.
async fn connections_per_address_are_limited(t: TestStore) {
    use ebb::stomp::connection::ConnectionConfig;
    let config = ConnectionConfig {
        max_connections: 100,
        max_connections_per_address: 2,
        ..ConnectionConfig::default()
    };
    let s = serve_with(broker(&t, policy(100, 400), 2).await, config).await;
    let _a = Client::connected(s.addr, None).await;
    let _b = Client::connected(s.addr, None).await;
    let mut over = Client::open(s.addr).await;
    let error = over.frame().await.expect("an ERROR");
    assert_eq!(
        error.get("message"),
        Some("2 connections from 127.0.0.1 already, the most from one address (max_connections_per_address)"),
        "{error:?}"
    );
    assert_eq!(error.get("error-code"), Some("limit-exceeded"), "{error:?}");
    assert!(over.closed().await);
    s.stop().await;
}
