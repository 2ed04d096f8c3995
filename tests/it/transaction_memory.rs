//! An open transaction never waits for space its own COMMIT would free, and never
//! makes another producer wait (hardening issue, point 4: with `[usage] memory =
//! "1mb"`, BEGIN, 30 SENDs of 100 KiB and COMMIT got no answer in 20 s, and another
//! connection's SEND to another queue was not served either). What open transactions
//! hold is charged to their own budget (`[usage] transactions`, half of `memory` by
//! default), apart from memory; a transactional SEND beyond it gets an ERROR naming
//! the limit at once. Each check counts bytes, rows and frames, never time.

use ebb::stomp::codec::Limits;
use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{Message, Policy, UsageConfig};

const KIB: usize = 1 << 10;
const MEMORY: u64 = 1 << 20;

async fn limited(t: &TestStore) -> Server {
    let quiet = Policy {
        expire_messages_period: 0,
        ..Policy::default()
    };
    let usage = UsageConfig {
        memory: MEMORY,
        ..UsageConfig::default()
    };
    let broker = broker_with(t, vec![("queue://>", quiet)], usage).await;
    serve(broker, Limits::default(), Default::default(), 30_000).await
}

fn send_frame(destination: &str, body_bytes: usize, extra: &str) -> Vec<u8> {
    let mut frame =
        format!("SEND\ndestination:{destination}\npersistent:true\n{extra}\n").into_bytes();
    frame.extend(std::iter::repeat_n(b'x', body_bytes));
    frame.push(0);
    frame
}

/// Sends 1 KiB to `/queue/other` from `c` and waits for its RECEIPT.
async fn other_producer_is_served(c: &mut Client, n: usize) {
    let id = format!("other-{n}");
    c.write(&send_frame("/queue/other", KIB, &format!("receipt:{id}\n")))
        .await;
    receipt(c, &id).await;
}

/// The case: 30 × 100 KiB in one transaction against a 1 MiB memory limit.
/// The SEND that would take the transactions past their 512 KiB budget gets an ERROR
/// naming it (and, as any refused SEND, ends the connection, which rolls the
/// transaction back); another connection is served before, during and after; nothing
/// of the transaction is stored and its bytes are given back.
async fn a_transaction_over_its_budget_is_refused_and_blocks_nobody(t: TestStore) {
    let s = limited(&t).await;
    assert_eq!(s.broker.usage().transactions_limit, MEMORY / 2);
    let mut other = Client::connected(s.addr, None).await;
    other_producer_is_served(&mut other, 0).await;

    let mut c = Client::connected(s.addr, None).await;
    c.write(b"BEGIN\ntransaction:big\n\n\0").await;
    let mut error: Option<Frame> = None;
    for i in 0..30 {
        c.write(&send_frame(
            "/queue/big",
            100 * KIB,
            &format!("transaction:big\nreceipt:s{i}\n"),
        ))
        .await;
        let f = c.frame().await.expect("a RECEIPT or an ERROR");
        if f.command == Command::Error {
            error = Some(f);
            break;
        }
        assert_eq!(f.command, Command::Receipt, "{f:?}");
        other_producer_is_served(&mut other, i + 1).await;
    }
    let error = error.expect("the transaction is refused at its budget");
    let text = error.get("message").unwrap_or_default().to_string();
    assert!(text.contains("transactions usage limit reached"), "{text}");
    assert_eq!(
        error.get("receipt-id"),
        Some("s5"),
        "the 6th SEND: {error:?}"
    );
    assert!(c.closed().await, "a refused SEND ends its connection");

    other_producer_is_served(&mut other, 99).await;
    wait_rows(&s.broker, "queue://big", 0).await;
    poll_until("the transaction's bytes given back", || async {
        let usage = s.broker.usage();
        (usage.transactions_bytes == 0).then_some(())
    })
    .await;
    let usage = s.broker.usage();
    assert_eq!(usage.blocked_producers, 0, "{usage:?}");
    s.stop().await;
}

/// With memory full of non-persistent messages nobody consumes (their producers would
/// wait now), a transaction within its budget still sends and COMMITs: it never waits
/// for memory. At COMMIT its bytes move to its destination.
async fn a_transaction_never_waits_for_memory(t: TestStore) {
    let s = limited(&t).await;
    let b = &s.broker;
    let mut filled = 0;
    while b.usage().memory_bytes < MEMORY {
        b.start_send_with(
            "queue://np",
            Message::new(vec![b'n'; 64 * KIB]).persistent(false),
            ebb::SendOptions::checked(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
        filled += 1;
    }
    assert_eq!(
        b.check_space("queue://other", false).unwrap(),
        ebb::Space::Wait,
        "memory is full: a producer would wait"
    );

    let mut c = Client::connected(s.addr, None).await;
    c.write(b"BEGIN\ntransaction:small\n\n\0").await;
    for i in 0..4 {
        c.write(&send_frame(
            "/queue/tx",
            100 * KIB,
            &format!("transaction:small\nreceipt:s{i}\n"),
        ))
        .await;
        receipt(&mut c, &format!("s{i}")).await;
    }
    assert!(b.usage().transactions_bytes >= 400 * KIB as u64);
    c.write(b"COMMIT\ntransaction:small\nreceipt:c\n\n\0").await;
    receipt(&mut c, "c").await;
    assert_eq!(b.store().count_messages("queue://tx").await.unwrap(), 4);
    assert_eq!(b.usage().transactions_bytes, 0, "moved at COMMIT");

    // Everything is delivered, the non-persistent ones too.
    c.write(b"SUBSCRIBE\nid:1\ndestination:/queue/tx\nack:auto\n\n\0")
        .await;
    for _ in 0..4 {
        let f = c.frame().await.expect("a MESSAGE");
        assert_eq!(f.command, Command::Message, "{f:?}");
        assert_eq!(f.body.len(), 100 * KIB);
    }
    c.write(b"SUBSCRIBE\nid:2\ndestination:/queue/np\nack:auto\n\n\0")
        .await;
    for _ in 0..filled {
        let f = c.frame().await.expect("a MESSAGE");
        assert_eq!(f.command, Command::Message, "{f:?}");
    }
    s.stop().await;
}

/// A transactional send never waits, and the store's limit holds for it too: with
/// `[usage] store` at 1 byte, the transaction's first persistent send is stored
/// (prepared), and the next is refused at once, naming `store`.
async fn a_transaction_meets_the_store_limit_with_a_refusal(t: TestStore) {
    let usage = UsageConfig {
        store: 1,
        ..UsageConfig::default()
    };
    let b = broker_with(&t, vec![], usage).await;
    let mut tx = b.transaction("store-limit");
    tx.send("queue://full", Message::new("first").persistent(true))
        .await
        .unwrap();
    let refused = tx
        .send("queue://full", Message::new("second").persistent(true))
        .await
        .expect_err("refused at the store's limit");
    assert!(
        matches!(&refused, ebb::Error::ResourceLimit { usage, waited_ms: None, .. } if usage == "store"),
        "{refused}"
    );
    tx.rollback().await.unwrap();
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    a_transaction_meets_the_store_limit_with_a_refusal,
    a_transaction_over_its_budget_is_refused_and_blocks_nobody,
    a_transaction_never_waits_for_memory,
);
