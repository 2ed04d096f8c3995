//! The last-value queue (`lvq://NAME`, STOMP `/lvq/NAME`; Artemis's last-value queue,
//! keyed by `_AMQ_LVQ_NAME`): the kind the kind table was built to take as one file
//! and one line. Per key only the newest message waits, in the store (also across a
//! restart, also behind a backlog the cursor pages) and in memory; a replaced message
//! a consumer holds is not redelivered; messages without the key are kept as on a
//! queue; transactions replace at COMMIT; selectors, expiry, browsing, the admin API
//! and STOMP work on it as on a queue. On both backends.

use std::time::Duration;

use ebb::admin::Selection;
use ebb::stomp::codec::Limits;
use ebb::stomp::frame::Command;
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{AckMode, Broker, Message, Policy, SubscribeOptions, UsageConfig};

const KEY: &str = "_AMQ_LVQ_NAME";
const Q: &str = "lvq://prices";

fn quiet_policy() -> Policy {
    Policy {
        expire_messages_period: 0,
        ..Policy::default()
    }
}

async fn lvq_broker(t: &TestStore, policy: Policy) -> Broker {
    broker_with(t, vec![("lvq://>", policy)], UsageConfig::default()).await
}

/// A price for `key` (persistent unless `persistent` is false).
fn price(key: &str, body: &str, persistent: bool) -> Message {
    Message::new(body.to_string())
        .header(KEY, key)
        .persistent(persistent)
}

/// The bodies stored for `Q`, in store order.
async fn stored(b: &Broker) -> Vec<String> {
    b.browse(Q, 0, 1_000)
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

/// Per key the newest message waits, whether the older one was stored or not, and a
/// message without the key is kept; a consumer gets exactly what waits, in order; the
/// stored rows and the counters say the same.
async fn only_the_newest_message_per_key_waits(t: TestStore) {
    let b = lvq_broker(&t, quiet_policy()).await;
    // Nobody consumes: the queue caches nothing, so the persistent values wait in the
    // store (an older one is deleted there by the newer one's transaction, not
    // counted as `replaced`) and only the non-persistent ones wait in memory.
    b.send(Q, Message::new("no key").persistent(true))
        .await
        .unwrap();
    for m in [
        price("IBM", "ibm 1", true),
        price("AAPL", "aapl 1", true),
        price("IBM", "ibm 2", false),
        price("IBM", "ibm 3", true),
        price("AAPL", "aapl 2", false),
    ] {
        b.send(Q, m).await.unwrap();
    }
    // AAPL's stored value is deleted by the non-persistent one's own write.
    poll_until("aapl 1 deleted from the store", || async {
        (stored(&b).await == ["no key", "ibm 3"]).then_some(())
    })
    .await;
    let stats = b.queue_stats(Q).await.unwrap();
    assert_eq!(stats.counters.enqueued, 6, "{stats:?}");
    assert_eq!(stats.replaced, 1, "ibm 2, replaced in memory: {stats:?}");
    assert_eq!(stats.pending_in_memory, 1, "aapl 2: {stats:?}");
    assert!(!stats.cursor_live, "{stats:?}");

    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 3).await.iter().map(body).collect();
    assert_eq!(got, ["no key", "ibm 3", "aapl 2"]);
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    wait_rows(&b, Q, 0).await;
    b.shutdown().await.unwrap();
}

/// 40 keys × 5 values with a cache of 8 messages (the cursor pages the store): after a
/// restart a consumer gets one message per key, the last value of each, in the order
/// they were sent; nothing older is left in the store.
async fn a_paged_backlog_keeps_the_last_values_across_a_restart(t: TestStore) {
    let small = Policy {
        max_page_size: 4,
        ..quiet_policy()
    };
    let b = lvq_broker(&t, small.clone()).await;
    for round in 0..5 {
        for key in 0..40 {
            b.send(
                Q,
                price(&format!("k{key}"), &format!("k{key} v{round}"), true),
            )
            .await
            .unwrap();
        }
    }
    assert_eq!(b.store().count_messages(Q).await.unwrap(), 40);
    b.shutdown().await.unwrap();

    let b = lvq_broker(&t, small).await;
    assert_eq!(b.store().count_messages(Q).await.unwrap(), 40);
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable().prefetch(3))
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 40).await.iter().map(body).collect();
    let expected: Vec<String> = (0..40).map(|k| format!("k{k} v4")).collect();
    assert_eq!(got, expected);
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    b.shutdown().await.unwrap();
}

/// A value a consumer holds stays with it; when it comes back (NACK) after a newer
/// value arrived, it is dropped, not redelivered: the consumer gets the newer one.
/// Without a newer value it is redelivered as on a queue.
async fn a_replaced_message_in_flight_is_not_redelivered(t: TestStore) {
    let b = lvq_broker(&t, quiet_policy()).await;
    let client = || {
        SubscribeOptions::non_durable()
            .ack(AckMode::Client)
            .prefetch(1)
    };
    b.send(Q, price("IBM", "ibm 1", true)).await.unwrap();
    let mut sub = b.subscribe(Q, client()).await.unwrap();
    let first = next(&mut sub).await;
    assert_eq!(body(&first), "ibm 1");
    b.send(Q, price("IBM", "ibm 2", true)).await.unwrap();
    b.send(Q, price("MSFT", "msft 1", true)).await.unwrap();
    sub.nack(&first).await.unwrap();
    let second = next(&mut sub).await;
    assert_eq!(body(&second), "ibm 2");
    assert!(!second.redelivered());
    // msft 1 comes back after a NACK with nothing newer: redelivered.
    sub.ack(&second).await.unwrap();
    let msft = next(&mut sub).await;
    assert_eq!(body(&msft), "msft 1");
    sub.nack(&msft).await.unwrap();
    let again = next(&mut sub).await;
    assert_eq!(body(&again), "msft 1");
    assert!(again.redelivered());
    sub.ack(&again).await.unwrap();
    let stats = wait_for_queue(&b, Q, |s| s.in_flight == 0).await;
    assert_eq!(stats.replaced, 1, "{stats:?}");
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    wait_rows(&b, Q, 0).await;
    b.shutdown().await.unwrap();
}

/// A last-value queue with a redelivery back-off of 1 s (long enough for the test's
/// next send to come first on a busy machine).
fn backoff_policy() -> Policy {
    Policy {
        initial_redelivery_delay: 1_000,
        redelivery_delay: 1_000,
        ..quiet_policy()
    }
}

/// Takes `key`'s value from `Q` with a consumer of its own, NACKs it (answered once
/// its back-off hold is committed) and closes the consumer.
async fn nack_one(b: &Broker, expected: &str) {
    let client = SubscribeOptions::non_durable()
        .ack(AckMode::Client)
        .prefetch(1);
    let mut sub = b.subscribe(Q, client).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), expected);
    sub.nack(&m).await.unwrap();
    drop(sub);
}

/// The messages of `Q` held back in their rows (the back-off) and not yet due.
async fn held_back(b: &Broker) -> Vec<ebb_store::HeldMessage> {
    let now = ebb::now_ms();
    let mut page = b
        .store()
        .read_held(Q, (i64::MIN, i64::MIN), i64::MAX, 100)
        .await
        .unwrap()
        .messages;
    page.retain(|h| h.due > now);
    page
}

/// Waits until nothing is held back for `Q`, then past the back-off's due time (a
/// wait, not a measure): whatever was held has come back by then, or is gone.
async fn past_the_back_off(b: &Broker) {
    poll_until("nothing held back", || async {
        held_back(b).await.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
}

/// A value held back by the redelivery back-off arrived before any value sent while
/// it waits: it never comes back to replace that newer one (the data loss:
/// the held copy was released as the newest and deleted the receipted newer value).
/// The newer value waits, or was consumed: either way the held one is gone, also
/// across a restart while it waits, and non-persistent values alike.
async fn a_held_back_value_never_replaces_a_newer_one(t: TestStore) {
    // Persistent, the newer value waiting: only it is stored and delivered.
    let b = lvq_broker(&t, backoff_policy()).await;
    b.send(Q, price("EURUSD", "v1", true)).await.unwrap();
    nack_one(&b, "v1").await;
    assert_eq!(held_back(&b).await.len(), 1);
    b.send(Q, price("EURUSD", "v2", true)).await.unwrap();
    past_the_back_off(&b).await;
    assert_eq!(stored(&b).await, ["v2"]);
    let mut sub = b.subscribe(Q, client_ack()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!((body(&m).as_str(), m.redelivered()), ("v2", false));
    sub.ack(&m).await.unwrap();
    assert!(
        quiet(&mut sub).await.is_none(),
        "the held-back v1 came back"
    );
    drop(sub);

    // Persistent, the newer value consumed before the held one is due: the held one
    // does not come back after it.
    b.send(Q, price("GBPUSD", "g1", true)).await.unwrap();
    nack_one(&b, "g1").await;
    let mut sub = b.subscribe(Q, client_ack()).await.unwrap();
    b.send(Q, price("GBPUSD", "g2", true)).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "g2");
    sub.ack(&m).await.unwrap();
    past_the_back_off(&b).await;
    assert!(
        quiet(&mut sub).await.is_none(),
        "the held-back g1 came back"
    );
    drop(sub);
    wait_rows(&b, Q, 0).await;

    // Across a restart while it waits.
    b.send(Q, price("USDJPY", "y1", true)).await.unwrap();
    nack_one(&b, "y1").await;
    b.shutdown().await.unwrap();
    let b = lvq_broker(&t, backoff_policy()).await;
    b.send(Q, price("USDJPY", "y2", true)).await.unwrap();
    past_the_back_off(&b).await;
    assert_eq!(stored(&b).await, ["y2"]);
    let mut sub = b.subscribe(Q, client_ack()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "y2");
    sub.ack(&m).await.unwrap();
    assert!(
        quiet(&mut sub).await.is_none(),
        "the held-back y1 came back"
    );
    drop(sub);
    wait_rows(&b, Q, 0).await;

    // Non-persistent: the held-back value waits in memory and is dropped, counted
    // as replaced.
    b.send(Q, price("AUDUSD", "a1", false)).await.unwrap();
    nack_one(&b, "a1").await;
    b.send(Q, price("AUDUSD", "a2", false)).await.unwrap();
    let mut sub = b.subscribe(Q, client_ack()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "a2");
    sub.ack(&m).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let back = quiet(&mut sub).await;
    assert!(
        back.is_none(),
        "the held-back a1 came back: {:?}",
        back.map(|m| body(&m))
    );
    let stats = wait_for_queue(&b, Q, |s| s.in_flight == 0).await;
    assert_eq!(stats.replaced, 1, "{stats:?}");
    drop(sub);
    b.shutdown().await.unwrap();
}

/// The dead-letter queue of `Q`.
const DLQ: &str = "queue://DLQ.prices";

/// A last-value queue whose first failed delivery goes to the dead-letter queue.
fn dead_letter_policy() -> Policy {
    Policy {
        maximum_redeliveries: 0,
        ..quiet_policy()
    }
}

/// The bodies stored for `container`, in store order.
async fn stored_in(b: &Broker, container: &str) -> Vec<String> {
    b.browse(container, 0, 1_000)
        .await
        .unwrap()
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect()
}

/// Takes `Q`'s next value with a consumer of its own and NACKs it: with
/// [`dead_letter_policy`] it is in the dead-letter queue when the NACK is answered.
async fn dead_letter_one(b: &Broker, expected: &str) {
    nack_one(b, expected).await;
    assert_eq!(stored(b).await, Vec::<String>::new());
    assert_eq!(stored_in(b, DLQ).await, [expected]);
}

/// Every message of the dead-letter queue back to its `originalDestination` (the
/// admin API's `move` without `to`).
async fn retry_all(b: &Broker) -> ebb::admin::TakeReport {
    b.move_messages(DLQ, None, Selection::All { after: 0 }, 10)
        .await
        .unwrap()
}

/// A value dead-lettered before a newer one with its key arrived, moved back from the
/// dead-letter queue afterwards, is dropped there (superseded) instead of replacing
/// the newer one: the move compares with what arrived meanwhile, by arrival at the
/// broker, in the store transaction of the move; the report says why it did not move.
async fn a_value_moved_back_after_a_newer_one_arrived_is_superseded(t: TestStore) {
    let b = lvq_broker(&t, dead_letter_policy()).await;
    b.send(Q, price("EURUSD", "v1", true)).await.unwrap();
    dead_letter_one(&b, "v1").await;
    b.send(Q, price("EURUSD", "v2", true)).await.unwrap();
    let report = retry_all(&b).await;
    assert_eq!(stored(&b).await, ["v2"], "v1 replaced the newer v2");
    assert_eq!(
        (report.superseded, report.taken, report.failed, report.gone),
        (1, 0, 0, 0),
        "{report:?}"
    );
    assert_eq!(stored_in(&b, DLQ).await, Vec::<String>::new());
    let mut sub = b.subscribe(Q, client_ack()).await.unwrap();
    let m = next(&mut sub).await;
    assert_eq!(body(&m), "v2");
    sub.ack(&m).await.unwrap();
    assert!(quiet(&mut sub).await.is_none(), "v1 came back");
    let stats = wait_for_queue(&b, Q, |s| s.in_flight == 0).await;
    assert_eq!(stats.replaced, 1, "v1, superseded: {stats:?}");
    drop(sub);
    wait_rows(&b, Q, 0).await;
    b.shutdown().await.unwrap();
}

/// A value moved back with nothing newer of its key waiting is the queue's value.
/// Its arrival goes with it through every move: dead-lettered again, it is older than
/// a value sent to another queue after its first arrival and moved in later, so it
/// does not replace that one.
async fn a_value_moved_back_with_nothing_newer_is_the_last_value(t: TestStore) {
    let b = lvq_broker(&t, dead_letter_policy()).await;
    b.send(Q, price("EURUSD", "v1", true)).await.unwrap();
    dead_letter_one(&b, "v1").await;
    // Sent after v1 arrived, to an ordinary queue.
    b.send("queue://plain", price("EURUSD", "w", true))
        .await
        .unwrap();
    let report = retry_all(&b).await;
    assert_eq!(
        (report.taken, report.superseded, report.failed),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(stored(&b).await, ["v1"]);

    // A second round trip: v1 keeps its first arrival, so `w`, moved in from the
    // ordinary queue, is newer.
    dead_letter_one(&b, "v1").await;
    let to = ebb::DestinationKey::parse(Q).unwrap();
    let moved = b
        .move_messages("queue://plain", Some(to), Selection::All { after: 0 }, 10)
        .await
        .unwrap();
    assert_eq!(moved.taken, 1, "{moved:?}");
    assert_eq!(stored(&b).await, ["w"]);
    let report = retry_all(&b).await;
    assert_eq!(stored(&b).await, ["w"], "v1 replaced the newer w");
    assert_eq!(
        (report.taken, report.superseded, report.failed),
        (0, 1, 0),
        "{report:?}"
    );
    assert_eq!(stored_in(&b, DLQ).await, Vec::<String>::new());
    b.shutdown().await.unwrap();
}

fn client_ack() -> SubscribeOptions {
    SubscribeOptions::non_durable().ack(AckMode::Client)
}

/// Expiry and selectors work as on a queue: an expired last value is removed by
/// housekeeping; a consumer with a selector on the key gets only its key's value.
async fn expiry_and_selectors_work_as_on_a_queue(t: TestStore) {
    let b = lvq_broker(&t, policy(50, 100)).await;
    b.send(Q, price("OLD", "old", true).ttl(Duration::from_millis(1)))
        .await
        .unwrap();
    b.send(Q, price("IBM", "ibm 1", true)).await.unwrap();
    b.send(Q, price("AAPL", "aapl 1", true)).await.unwrap();
    b.send(Q, price("IBM", "ibm 2", true)).await.unwrap();
    wait_for_queue(&b, Q, |s| s.counters.expired == 1).await;
    assert_eq!(stored(&b).await, ["aapl 1", "ibm 2"]);
    let selector = ebb::Selector::parse(&format!("{KEY} = 'IBM'")).unwrap();
    let mut sub = b
        .subscribe(Q, SubscribeOptions::non_durable().selector(selector))
        .await
        .unwrap();
    assert_eq!(body(&next(&mut sub).await), "ibm 2");
    assert!(quiet(&mut sub).await.is_none());
    drop(sub);
    wait_rows(&b, Q, 1).await;
    assert_eq!(stored(&b).await, ["aapl 1"]);
    b.shutdown().await.unwrap();
}

/// Over STOMP: `/lvq/NAME` is the kind's prefix; a SEND in a transaction replaces only
/// when it commits (an aborted one never); the MESSAGE names its destination
/// `/lvq/prices` and carries the key header.
async fn stomp_sends_replace_at_commit(t: TestStore) {
    let b = lvq_broker(&t, quiet_policy()).await;
    let s = serve(b, Limits::default(), Default::default(), 30_000).await;
    let mut c = Client::connected(s.addr, None).await;
    let send = |body: &str, extra: &str| {
        format!("SEND\ndestination:/lvq/prices\npersistent:true\n{KEY}:IBM\n{extra}\n{body}\0")
    };
    c.write(send("ibm 1", "receipt:s1\n").as_bytes()).await;
    receipt(&mut c, "s1").await;
    c.write(b"BEGIN\ntransaction:t1\n\n\0").await;
    c.write(send("ibm 2", "transaction:t1\nreceipt:s2\n").as_bytes())
        .await;
    receipt(&mut c, "s2").await;
    assert_eq!(stored(&s.broker).await, ["ibm 1"], "not before COMMIT");
    c.write(b"COMMIT\ntransaction:t1\nreceipt:c1\n\n\0").await;
    receipt(&mut c, "c1").await;
    assert_eq!(stored(&s.broker).await, ["ibm 2"]);
    c.write(b"BEGIN\ntransaction:t2\n\n\0").await;
    c.write(send("ibm x", "transaction:t2\n").as_bytes()).await;
    c.write(b"ABORT\ntransaction:t2\nreceipt:a2\n\n\0").await;
    receipt(&mut c, "a2").await;
    assert_eq!(
        stored(&s.broker).await,
        ["ibm 2"],
        "an aborted send replaces nothing"
    );

    c.write(b"SUBSCRIBE\nid:1\ndestination:/lvq/prices\nack:auto\n\n\0")
        .await;
    let m = c.frame().await.expect("a MESSAGE");
    assert_eq!(m.command, Command::Message, "{m:?}");
    assert_eq!(m.get("destination"), Some("/lvq/prices"));
    assert_eq!(m.get(KEY), Some("IBM"));
    assert_eq!(&m.body[..], b"ibm 2");
    assert!(c.quiet().await.is_none());
    s.stop().await;
}

/// The admin API knows the kind from the table: `GET /api/v1/kinds` lists it with its
/// capabilities, `/api/v1/lvqs/NAME/messages` browses it; an operator's move into it
/// replaces by key.
async fn the_admin_api_serves_the_kind(t: TestStore) {
    let b = lvq_broker(&t, quiet_policy()).await;
    let options = ebb::http::HttpOptions::new("127.0.0.1:0".parse().unwrap());
    let server = ebb::http::HttpServer::start(options, b.clone())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    b.send(Q, price("IBM", "ibm 1", true)).await.unwrap();
    b.send(Q, price("IBM", "ibm 2", true)).await.unwrap();
    b.send("queue://plain", price("IBM", "ibm moved", true))
        .await
        .unwrap();

    let kinds = get(format!("{base}/api/v1/kinds")).await;
    let lvq = kinds
        .as_array()
        .unwrap_or_else(|| panic!("{kinds}"))
        .iter()
        .find(|k| k["name"] == "lvq")
        .cloned()
        .unwrap_or_else(|| panic!("lvq not listed: {kinds}"));
    assert_eq!(lvq["plural"], "lvqs");
    assert_eq!(lvq["stomp_prefix"], "/lvq/");
    assert_eq!(lvq["capabilities"]["last_value_header"], KEY);
    assert_eq!(lvq["capabilities"]["move_target"], true);

    let page = get(format!("{base}/api/v1/lvqs/prices/messages?body=full")).await;
    let bodies: Vec<&str> = page["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["ibm 2"]);
    let listed = get(format!("{base}/api/v1/destinations")).await;
    let entry = listed["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["destination"] == Q)
        .cloned()
        .unwrap_or_else(|| panic!("{Q} not listed: {listed}"));
    assert_eq!(entry["queue_size"], 1, "{entry}");

    // A message moved in replaces by its key as a sent one does.
    let to = ebb::DestinationKey::parse(Q).unwrap();
    let moved = b
        .move_messages("queue://plain", Some(to), Selection::All { after: 0 }, 10)
        .await
        .unwrap();
    assert_eq!(moved.taken, 1, "{moved:?}");
    assert_eq!(stored(&b).await, ["ibm moved"]);
    assert_eq!(b.store().count_messages("queue://plain").await.unwrap(), 0);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// `GET url` as JSON (off the event loop: ureq blocks); panics on a status other than
/// 200.
async fn get(url: String) -> serde_json::Value {
    tokio::task::spawn_blocking(move || {
        let response = ureq::get(&url)
            .timeout(Duration::from_secs(30))
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        serde_json::from_str(&response.into_string().unwrap()).unwrap()
    })
    .await
    .unwrap()
}

on_every_backend!(
    #[actix_rt::test]
    only_the_newest_message_per_key_waits,
    a_paged_backlog_keeps_the_last_values_across_a_restart,
    a_replaced_message_in_flight_is_not_redelivered,
    a_held_back_value_never_replaces_a_newer_one,
    a_value_moved_back_after_a_newer_one_arrived_is_superseded,
    a_value_moved_back_with_nothing_newer_is_the_last_value,
    expiry_and_selectors_work_as_on_a_queue,
    stomp_sends_replace_at_commit,
    the_admin_api_serves_the_kind,
);
