//! Temporary destinations (issue 33; JMS temporary queues and topics, STOMP
//! `/temp-queue/NAME` and `/temp-topic/NAME`): only the connection that made one
//! consumes from it, anyone connected sends to it while it exists, a send to one whose
//! connection has ended is refused, and it goes with its connection: no rows, no
//! actor left, also after a restart. Request/reply: a `reply-to` naming one is
//! rewritten to its broker-wide name, which the worker sends to as it is. Both
//! backends; embedding API and STOMP.
//!
//! Rights (hardening issue, point 2): a temporary destination's name holds 128 random
//! bits, so one's own reply queue tells nothing of another's; with
//! `[temp_destination_authorization_entry]`, its `admin`, `write` and `read` decide who
//! makes one, sends to another's and browses another's, over STOMP and the admin API
//! alike; without it a reply between two users still works.
//!
//! Bounds (hardening issue, point 4): temporary destinations alive at once are
//! bounded per connection (1,000), per user (`max_temporary_destinations_per_user`)
//! and in the whole broker (`max_temporary_destinations`); one more is refused with
//! `limit-exceeded` naming the setting, and accepted again once one ends.

use std::sync::Arc;
use std::time::Duration;

use ebb::auth::{
    hash_password, AuthorizationEntry, Security, TempDestinationAuthorizationEntry, User,
};
use ebb::stomp::codec::Limits;
use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;
use ebb::{
    next_connection_id, DestinationKey, DestinationKind, Error, ErrorCode, Message,
    SubscribeOptions, TemporaryLimit, UsageConfig, MAX_TEMPORARIES_PER_CONNECTION,
};

/// Every test user's passcode.
const PASSCODE: &str = "pass";

/// Users with [`PASSCODE`] in groups (one hash for all: argon2 is slow on purpose),
/// `requests` queue rights for group `apps` (read) and `workers` (write), and `temp`
/// as the temporary destinations' entry.
fn security(
    users: &[(&str, &[&str])],
    temp: Option<TempDestinationAuthorizationEntry>,
) -> Security {
    let hash = hash_password(PASSCODE).unwrap();
    Security {
        login_guard: Default::default(),
        users: users
            .iter()
            .map(|(login, groups)| User {
                login: login.to_string(),
                password_hash: hash.clone(),
                certificate_subject: None,
                groups: groups.iter().map(|g| g.to_string()).collect(),
            })
            .collect(),
        authorization: vec![AuthorizationEntry {
            destination: "queue://requests".into(),
            read: vec!["workers".into()],
            write: vec!["apps".into()],
            admin: vec![],
        }],
        temp_destination_authorization_entry: temp,
    }
}

/// A STOMP connection logged in as `login` ([`PASSCODE`]).
async fn logged_in(addr: std::net::SocketAddr, login: &str) -> Client {
    let mut c = Client::open(addr).await;
    let connect = Frame::new(Command::Connect)
        .header("accept-version", "1.2")
        .header("host", "ebb")
        .header("login", login)
        .header("passcode", PASSCODE);
    if let Err(e) = c.0.handshake(connect).await {
        panic!("CONNECT as {login}: {e}");
    }
    c
}

/// Asserts that the next frame is an ERROR with `code`; returns its `message`.
async fn refused(c: &mut Client, code: &str) -> String {
    let f = c.frame().await.expect("an ERROR");
    assert_eq!(f.command, Command::Error, "{f:?}");
    assert_eq!(f.get("error-code"), Some(code), "{f:?}");
    f.get("message").unwrap_or_default().to_string()
}

/// The parts of a temporary destination's name (STOMP form or not) around its
/// connection number: `(up to the broker's tag, the number, the rest)`, as an
/// attacker reads them from her own (`ebb-<tag>-<number>...`).
fn around_connection(name: &str) -> (String, u64, String) {
    let name = name.trim_start_matches("/remote-temp-queue/");
    let tag_end = name["ebb-".len()..].find('-').unwrap() + "ebb-".len() + 1;
    let digits = name[tag_end..].find(|c: char| !c.is_ascii_digit()).unwrap();
    let number = name[tag_end..tag_end + digits].parse().unwrap();
    (
        name[..tag_end].to_string(),
        number,
        name[tag_end + digits..].to_string(),
    )
}

/// Whether `key` has an actor running or rows stored.
async fn exists(b: &ebb::Broker, key: &DestinationKey) -> bool {
    b.destination_exists(key).await.unwrap()
}

/// The temporary queues the broker lists (running, or with rows), at most 500.
async fn temporary_queues(b: &ebb::Broker) -> Vec<DestinationKey> {
    b.list_destinations(Some("temp-queue://"), 500)
        .await
        .unwrap()
        .destinations
        .into_iter()
        .filter(|d| d.stats.destination.starts_with("temp-queue://"))
        .map(|d| DestinationKey::from_container(&d.stats.destination).unwrap())
        .collect()
}

async fn only_its_connection_consumes_and_it_goes_when_dropped(t: TestStore) {
    let b = broker(&t, policy(0, 100), 2).await;
    let replies = b.temporary_queue().unwrap();
    let key = replies.key().clone();
    assert!(key.container().starts_with("temp-queue://ebb-"), "{key}");
    assert!(key.stomp().starts_with("/remote-temp-queue/ebb-"), "{key}");
    // Another connection, or none, may not consume from it.
    for options in [
        SubscribeOptions::non_durable().connection(next_connection_id()),
        SubscribeOptions::non_durable(),
    ] {
        match b.subscribe(&key, options).await {
            Err(Error::InvalidDestination { reason, .. }) => {
                assert!(reason.contains("only by the connection"), "{reason}")
            }
            other => panic!("a foreign consumer was let in: {:?}", other.map(|_| ())),
        }
    }
    // Nor a wildcard over temporary queues.
    assert!(matches!(
        b.subscribe("temp-queue://>", SubscribeOptions::non_durable())
            .await
            .map(|_| ()),
        Err(Error::InvalidDestination { .. })
    ));
    // Anyone may send to it; its owner receives.
    let mut sub = replies.subscribe().await.unwrap();
    b.send(key.stomp().as_str(), Message::new("stored"))
        .await
        .unwrap();
    b.send(&key, Message::new("in memory").persistent(false))
        .await
        .unwrap();
    let mut got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
    got.sort();
    assert_eq!(got, ["in memory", "stored"]);
    // One more, left unconsumed in the store, then the owner goes.
    b.send(&key, Message::new("left")).await.unwrap();
    wait_rows(&b, &key.container(), 1).await;
    drop(sub);
    drop(replies);
    // A send is refused at once, and nothing is stored for it.
    match b.send(&key, Message::new("too late")).await {
        Err(Error::InvalidDestination { reason, .. }) => {
            assert!(reason.contains("has ended"), "{reason}")
        }
        other => panic!("a send to a deleted temporary queue: {other:?}"),
    }
    poll_until("the temporary queue deleted", || async {
        (!exists(&b, &key).await).then_some(())
    })
    .await;
    assert_eq!(b.store().count_messages(&key.container()).await.unwrap(), 0);
    b.shutdown().await.unwrap();
}

async fn a_request_gets_its_reply_through_a_temporary_queue(t: TestStore) {
    let b = broker(&t, policy(0, 100), 2).await;
    let mut work = b
        .subscribe("queue://work", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let worker = b.clone();
    let serving = tokio::spawn(async move {
        for _ in 0..3 {
            let request = next(&mut work).await;
            let to = request.header("reply-to").expect("reply-to").to_string();
            worker
                .send(to.as_str(), Message::new(format!("re: {}", body(&request))))
                .await
                .unwrap();
        }
    });
    for i in 0..3 {
        let reply = b
            .request(
                "queue://work",
                Message::new(format!("q{i}")),
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        assert_eq!(body(&reply), format!("re: q{i}"));
    }
    serving.await.unwrap();
    // No reply: a timeout, and its queue goes too.
    let started = std::time::Instant::now();
    match b
        .request(
            "queue://nobody",
            Message::new("?"),
            Duration::from_millis(200),
        )
        .await
    {
        Err(Error::Timeout(200)) => {}
        other => panic!("{:?}", other.map(|r| body(&r))),
    }
    assert!(started.elapsed() >= Duration::from_millis(200));
    b.shutdown().await.unwrap();
}

async fn what_a_crash_leaves_is_deleted_at_start(t: TestStore) {
    let b = broker(&t, policy(0, 100), 2).await;
    let replies = b.temporary_queue().unwrap();
    let key = replies.key().clone();
    for i in 0..3 {
        b.send(&key, Message::new(format!("m{i}"))).await.unwrap();
    }
    wait_rows(&b, &key.container(), 3).await;
    // As a crash: the handle never runs its drop, the broker stops.
    std::mem::forget(replies);
    b.shutdown().await.unwrap();
    drop(b);
    let b = broker(&t, policy(0, 100), 2).await;
    assert_eq!(b.store().count_messages(&key.container()).await.unwrap(), 0);
    assert!(!exists(&b, &key).await);
    assert!(b.send(&key, Message::new("after")).await.is_err());
    b.shutdown().await.unwrap();
}

/// STOMP: a requester's `/temp-queue/replies` in SUBSCRIBE and `reply-to`; the
/// worker gets the broker-wide name and SENDs to it as it is; the worker may not
/// subscribe to it; after the requester disconnects, a SEND to it is an ERROR and no
/// row or actor is left.
async fn stomp_request_reply_with_a_temporary_queue(t: TestStore) {
    let s = server(&t, policy(0, 100)).await;
    let mut requester = Client::connected(s.addr, None).await;
    requester
        .write(b"SUBSCRIBE\ndestination:/temp-queue/replies\nid:r\nreceipt:sub\n\n\0")
        .await;
    receipt(&mut requester, "sub").await;
    let mut worker = Client::connected(s.addr, None).await;
    worker
        .write(b"SUBSCRIBE\ndestination:/queue/requests\nid:w\nreceipt:sub\n\n\0")
        .await;
    receipt(&mut worker, "sub").await;
    requester
        .write(b"SEND\ndestination:/queue/requests\nreply-to:/temp-queue/replies\npersistent:true\nreceipt:q\n\nquestion\0")
        .await;
    receipt(&mut requester, "q").await;
    let request = worker.next_is("question").await;
    let reply_to = request.get("reply-to").expect("reply-to").to_string();
    assert!(
        reply_to.starts_with("/remote-temp-queue/ebb-") && reply_to.ends_with(".replies"),
        "{reply_to}"
    );
    worker
        .write(format!("SEND\ndestination:{reply_to}\nreceipt:a\n\nanswer\0").as_bytes())
        .await;
    receipt(&mut worker, "a").await;
    requester.next_is("answer").await;

    // The worker may not consume the requester's replies.
    worker
        .write(
            format!("SUBSCRIBE\ndestination:{reply_to}\nid:steal\nreceipt:steal\n\n\0").as_bytes(),
        )
        .await;
    let refused = worker.frame().await.expect("an ERROR");
    assert_eq!(refused.command, Command::Error, "{refused:?}");
    assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    assert!(
        refused
            .get("message")
            .is_some_and(|m| m.contains("only by the connection")),
        "{refused:?}"
    );

    // A persistent reply left unread (the requester no longer consumes), then the
    // requester goes.
    requester
        .write(b"UNSUBSCRIBE\nid:r\nreceipt:unsub\n\n\0")
        .await;
    receipt(&mut requester, "unsub").await;
    let key = DestinationKey::from_stomp(&reply_to).unwrap();
    let mut worker = Client::connected(s.addr, None).await;
    worker
        .write(
            format!("SEND\ndestination:{reply_to}\npersistent:true\nreceipt:late\n\nunread\0")
                .as_bytes(),
        )
        .await;
    receipt(&mut worker, "late").await;
    wait_rows(&s.broker, &key.container(), 1).await;
    requester.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut requester, "bye").await;
    drop(requester);
    poll_until("the requester's temporary queue deleted", || async {
        (!exists(&s.broker, &key).await).then_some(())
    })
    .await;
    assert_eq!(
        s.broker
            .store()
            .count_messages(&key.container())
            .await
            .unwrap(),
        0
    );
    worker
        .write(format!("SEND\ndestination:{reply_to}\nreceipt:gone\n\nlost?\0").as_bytes())
        .await;
    let refused = worker.frame().await.expect("an ERROR");
    assert_eq!(refused.command, Command::Error, "{refused:?}");
    assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    assert_eq!(refused.get("receipt-id"), Some("gone"));
    s.stop().await;
}

/// Each connection's `/temp-queue/x` is its own: two connections using the same
/// name get two queues, and a temporary topic reaches its owner's subscription.
async fn stomp_temporary_names_are_per_connection(t: TestStore) {
    let s = server(&t, policy(0, 100)).await;
    let mut a = Client::connected(s.addr, None).await;
    let mut b = Client::connected(s.addr, None).await;
    for c in [&mut a, &mut b] {
        c.write(b"SUBSCRIBE\ndestination:/temp-queue/x\nid:1\nreceipt:s1\n\n\0")
            .await;
        receipt(c, "s1").await;
        c.write(b"SUBSCRIBE\ndestination:/temp-topic/t\nid:2\nreceipt:s2\n\n\0")
            .await;
        receipt(c, "s2").await;
    }
    a.write(b"SEND\ndestination:/temp-queue/x\nreceipt:r\n\nfor a\0")
        .await;
    receipt(&mut a, "r").await;
    let got = a.next_is("for a").await;
    assert!(got
        .get("destination")
        .is_some_and(|d| d.starts_with("/remote-temp-queue/")));
    assert!(
        b.quiet().await.is_none(),
        "b's /temp-queue/x is another queue"
    );
    b.write(b"SEND\ndestination:/temp-topic/t\nreceipt:r\n\nfor b\0")
        .await;
    receipt(&mut b, "r").await;
    b.next_is("for b").await;
    assert!(a.quiet().await.is_none());
    s.stop().await;
}

/// What another connection tries on a requester's temporary queue: browsing it, or
/// browsing a name nobody made, is refused like a SUBSCRIBE (and starts nothing).
async fn stomp_browsing_is_its_connections_alone(t: TestStore) {
    let s = server(&t, policy(0, 100)).await;
    let mut owner = Client::connected(s.addr, None).await;
    owner
        .write(b"SEND\ndestination:/temp-queue/secret\npersistent:true\nreceipt:r\n\nsecret\0")
        .await;
    receipt(&mut owner, "r").await;
    let key = temporary_queues(&s.broker).await.remove(0);
    let ghost = "/remote-temp-queue/ghost";
    for destination in [key.stomp(), ghost.to_string()] {
        let mut other = Client::connected(s.addr, None).await;
        other
            .write(
                format!(
                    "SUBSCRIBE\ndestination:{destination}\nid:b\nbrowser:true\nreceipt:b\n\n\0"
                )
                .as_bytes(),
            )
            .await;
        let refused = other.frame().await.expect("an ERROR");
        assert_eq!(
            refused.command,
            Command::Error,
            "{destination}: {refused:?}"
        );
        assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    }
    let ghost_key = DestinationKey::from_stomp(ghost).unwrap();
    assert!(
        !exists(&s.broker, &ghost_key).await,
        "a browse started a made-up queue"
    );
    // Its owner may browse it.
    owner
        .write(
            format!(
                "SUBSCRIBE\ndestination:{}\nid:b\nbrowser:true\n\n\0",
                key.stomp()
            )
            .as_bytes(),
        )
        .await;
    owner.next_is("secret").await;
    s.stop().await;
}

/// A connection with 200 temporary queues, each with a consumer that acks, ends
/// abruptly: none of them stays running (a late ack or credit starts none again).
async fn stomp_none_runs_after_its_connection_ends(t: TestStore) {
    let s = server(&t, policy(0, 100)).await;
    let mut owner = Client::connected(s.addr, None).await;
    for i in 0..200 {
        owner
            .write(
                format!(
                    "SUBSCRIBE\ndestination:/temp-queue/q{i}\nid:{i}\nack:client-individual\n\n\0"
                )
                .as_bytes(),
            )
            .await;
        owner
            .write(
                format!("SEND\ndestination:/temp-queue/q{i}\npersistent:true\n\nm{i}\0").as_bytes(),
            )
            .await;
    }
    owner
        .write(b"SEND\ndestination:/queue/sync\nreceipt:sync\n\n.\0")
        .await;
    let frames = messages_until_receipt(&mut owner, "sync").await;
    // Ack what came, and leave at once.
    for f in &frames {
        let ack = f.get("ack").unwrap();
        owner.write(format!("ACK\nid:{ack}\n\n\0").as_bytes()).await;
    }
    drop(owner);
    let running_temporaries = || async { temporary_queues(&s.broker).await.len() };
    poll_until("every temporary queue deleted", || async {
        (running_temporaries().await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(running_temporaries().await, 0, "one was started again");
    s.stop().await;
}

/// A transaction that sent to a temporary queue whose connection then ended cannot
/// commit: the COMMIT is an ERROR, nothing of it is delivered or stored, and the
/// queue is deleted once the transaction is gone.
async fn stomp_a_transaction_to_an_ended_temporary_queue_is_refused(t: TestStore) {
    let s = server(&t, policy(0, 100)).await;
    let mut owner = Client::connected(s.addr, None).await;
    owner
        .write(b"SUBSCRIBE\ndestination:/temp-queue/tx\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut owner, "s").await;
    let key = temporary_queues(&s.broker).await.remove(0);
    let mut sender = Client::connected(s.addr, None).await;
    sender.write(b"BEGIN\ntransaction:t1\n\n\0").await;
    sender
        .write(
            format!(
                "SEND\ndestination:{}\ntransaction:t1\npersistent:true\nreceipt:p\n\nin tx\0",
                key.stomp()
            )
            .as_bytes(),
        )
        .await;
    receipt(&mut sender, "p").await;
    owner.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut owner, "bye").await;
    drop(owner);
    sender
        .write(b"COMMIT\ntransaction:t1\nreceipt:c\n\n\0")
        .await;
    let refused = sender.frame().await.expect("an ERROR");
    assert_eq!(refused.command, Command::Error, "{refused:?}");
    assert_eq!(refused.get("error-code"), Some("invalid-destination"));
    poll_until("the temporary queue deleted", || async {
        (!exists(&s.broker, &key).await).then_some(())
    })
    .await;
    assert_eq!(
        s.broker
            .store()
            .count_messages(&key.container())
            .await
            .unwrap(),
        0
    );
    s.stop().await;
}

/// The attack of the hardening issue (point 2): a user with no grants reads the
/// broker's tag and her own connection number from her own reply queue's name, and
/// sends to the name another connection's `/temp-queue/replies` would have. Even with
/// the victim's connection number known (and its neighbours tried), every guess is
/// refused as no such destination and the victim receives nothing; the part of each
/// name after the connection number is 25 random base-36 digits, never the same.
async fn stomp_a_reply_queue_cannot_be_guessed_from_ones_own(t: TestStore) {
    let security = security(&[("alice", &["apps"]), ("mallory", &[])], None);
    let s = server_full(&t, policy(0, 100), Limits::default(), security, 30_000).await;
    let mut alice = logged_in(s.addr, "alice").await;
    alice
        .write(b"SUBSCRIBE\ndestination:/temp-queue/replies\nid:r\nreceipt:s\n\n\0")
        .await;
    receipt(&mut alice, "s").await;
    let mut mallory = logged_in(s.addr, "mallory").await;
    mallory
        .write(b"SUBSCRIBE\ndestination:/temp-queue/replies\nid:r\nreceipt:s\n\n\0")
        .await;
    receipt(&mut mallory, "s").await;
    mallory
        .write(b"SEND\ndestination:/temp-queue/replies\n\nmine\0")
        .await;
    let own = mallory.next_is("mine").await;
    let own = own.get("destination").unwrap().to_string();
    let (tag, number, rest) = around_connection(&own);
    // What only the broker knows: the victim's connection number.
    let victims: Vec<DestinationKey> = temporary_queues(&s.broker)
        .await
        .into_iter()
        .filter(|k| k.stomp() != own)
        .collect();
    assert_eq!(victims.len(), 1, "{victims:?}");
    let victim = victims[0].stomp();
    let (victim_tag, victim_number, victim_rest) = around_connection(&victim);
    assert_eq!(victim_tag, tag);
    assert_ne!(victim_number, number);
    for guess_number in victim_number.saturating_sub(3)..=victim_number + 3 {
        if guess_number == number {
            continue;
        }
        let guess = format!("/remote-temp-queue/{tag}{guess_number}{rest}");
        let mut forger = logged_in(s.addr, "mallory").await;
        forger
            .write(format!("SEND\ndestination:{guess}\nreceipt:f\n\nforged\0").as_bytes())
            .await;
        let why = refused(&mut forger, "invalid-destination").await;
        assert!(
            why.contains("no such temporary destination"),
            "{guess}: {why}"
        );
    }
    for (rest, other) in [(&rest, &victim_rest), (&victim_rest, &rest)] {
        let random = rest
            .strip_prefix('-')
            .and_then(|r| r.strip_suffix(".replies"))
            .unwrap_or_else(|| panic!("no unguessable part in {rest} (of {own} or {victim})"));
        assert_eq!(random.len(), 25, "{random}");
        assert!(
            random
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
            "{random}"
        );
        assert!(!other.contains(random), "{own} and {victim} share {random}");
    }
    // Nothing forged came before the victim's own marker.
    alice
        .write(b"SEND\ndestination:/temp-queue/replies\nreceipt:m\n\nmarker\0")
        .await;
    receipt(&mut alice, "m").await;
    alice.next_is("marker").await;
    s.stop().await;
}

/// Without `[temp_destination_authorization_entry]`, request/reply between users
/// works as before: bob, with no right named for temporary destinations, answers
/// alice's request at its `reply-to`; he may not browse or consume her queue.
async fn stomp_a_reply_between_users_needs_no_grant_by_default(t: TestStore) {
    let security = security(&[("alice", &["apps"]), ("bob", &["workers"])], None);
    let s = server_full(&t, policy(0, 100), Limits::default(), security, 30_000).await;
    let mut alice = logged_in(s.addr, "alice").await;
    alice
        .write(b"SUBSCRIBE\ndestination:/temp-queue/replies\nid:r\nreceipt:s\n\n\0")
        .await;
    receipt(&mut alice, "s").await;
    let mut bob = logged_in(s.addr, "bob").await;
    bob.write(b"SUBSCRIBE\ndestination:/queue/requests\nid:w\nreceipt:s\n\n\0")
        .await;
    receipt(&mut bob, "s").await;
    alice
        .write(b"SEND\ndestination:/queue/requests\nreply-to:/temp-queue/replies\nreceipt:q\n\nquestion\0")
        .await;
    receipt(&mut alice, "q").await;
    let request = bob.next_is("question").await;
    let reply_to = request.get("reply-to").unwrap().to_string();
    bob.write(format!("SEND\ndestination:{reply_to}\nreceipt:a\n\nanswer\0").as_bytes())
        .await;
    receipt(&mut bob, "a").await;
    alice.next_is("answer").await;
    for browser in ["true", "false"] {
        let mut other = logged_in(s.addr, "bob").await;
        other
            .write(
                format!("SUBSCRIBE\ndestination:{reply_to}\nid:x\nbrowser:{browser}\n\n\0")
                    .as_bytes(),
            )
            .await;
        let why = refused(&mut other, "invalid-destination").await;
        assert!(why.contains("only by the connection that made it"), "{why}");
    }
    s.stop().await;
}

/// `[temp_destination_authorization_entry]` as ActiveMQ's
/// `tempDestinationAuthorizationEntry`: `admin` makes one (mallory may not), `write`
/// sends to another connection's (bob, a worker, may; carol may not, though she may
/// send to her own), `read` browses another connection's (dave may; consuming it stays
/// its connection's).
async fn stomp_the_temporary_entry_decides_who_makes_sends_and_browses(t: TestStore) {
    let entry = TempDestinationAuthorizationEntry {
        read: vec!["ops".into()],
        write: vec!["workers".into()],
        admin: vec!["apps".into()],
    };
    let security = security(
        &[
            ("alice", &["apps"]),
            ("bob", &["workers"]),
            ("carol", &["apps"]),
            ("dave", &["ops"]),
            ("mallory", &[]),
        ],
        Some(entry),
    );
    let s = server_full(&t, policy(0, 100), Limits::default(), security, 30_000).await;
    let mut mallory = logged_in(s.addr, "mallory").await;
    mallory
        .write(b"SUBSCRIBE\ndestination:/temp-queue/mine\nid:r\nreceipt:s\n\n\0")
        .await;
    let why = refused(&mut mallory, "not-authorized").await;
    assert!(
        why.contains("mallory has no admin right on temporary destinations"),
        "{why}"
    );
    assert!(temporary_queues(&s.broker).await.is_empty());

    let mut alice = logged_in(s.addr, "alice").await;
    alice
        .write(b"SEND\ndestination:/temp-queue/replies\npersistent:true\nreceipt:own\n\nown\0")
        .await;
    receipt(&mut alice, "own").await;
    let reply_to = temporary_queues(&s.broker).await.remove(0).stomp();
    let mut bob = logged_in(s.addr, "bob").await;
    bob.write(
        format!("SEND\ndestination:{reply_to}\npersistent:true\nreceipt:a\n\nanswer\0").as_bytes(),
    )
    .await;
    receipt(&mut bob, "a").await;
    let mut carol = logged_in(s.addr, "carol").await;
    carol
        .write(format!("SEND\ndestination:{reply_to}\nreceipt:f\n\nforged\0").as_bytes())
        .await;
    let why = refused(&mut carol, "not-authorized").await;
    assert!(
        why.contains("carol has no write right on another connection's temporary destinations"),
        "{why}"
    );
    let mut carol = logged_in(s.addr, "carol").await;
    carol
        .write(b"SEND\ndestination:/temp-queue/hers\nreceipt:own\n\nown\0")
        .await;
    receipt(&mut carol, "own").await;

    let mut dave = logged_in(s.addr, "dave").await;
    dave.write(format!("SUBSCRIBE\ndestination:{reply_to}\nid:b\nbrowser:true\n\n\0").as_bytes())
        .await;
    dave.next_is("own").await;
    dave.next_is("answer").await;
    let end = dave.frame().await.expect("the browse's end");
    assert_eq!(end.get("browser"), Some("end"), "{end:?}");
    dave.write(format!("SUBSCRIBE\ndestination:{reply_to}\nid:c\n\n\0").as_bytes())
        .await;
    let why = refused(&mut dave, "invalid-destination").await;
    assert!(why.contains("consumed only by the connection"), "{why}");
    let mut carol = logged_in(s.addr, "carol").await;
    carol
        .write(format!("SUBSCRIBE\ndestination:{reply_to}\nid:b\nbrowser:true\n\n\0").as_bytes())
        .await;
    refused(&mut carol, "invalid-destination").await;

    // Its owner still takes both: nothing forged among them.
    alice
        .write(b"SUBSCRIBE\ndestination:/temp-queue/replies\nid:r\n\n\0")
        .await;
    alice.next_is("own").await;
    alice.next_is("answer").await;
    assert!(alice.quiet().await.is_none());
    s.stop().await;
}

/// The admin API (and the console, which reads it) shows another connection's
/// temporary queue to the admin group and to the `read` of
/// `[temp_destination_authorization_entry]`, and to nobody else: the rights of a STOMP
/// browse.
#[cfg(feature = "http")]
async fn the_admin_api_reads_temporary_queues_with_the_browse_right(t: TestStore) {
    let entry = TempDestinationAuthorizationEntry {
        read: vec!["ops".into()],
        write: vec![],
        admin: vec!["*".into()],
    };
    let security = security(
        &[
            ("alice", &["apps"]),
            ("dave", &["ops"]),
            ("carol", &["apps"]),
            ("root", &["admin"]),
        ],
        Some(entry),
    );
    let b = broker(&t, policy(0, 100), 2).await;
    let mut options = ebb::http::HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.security = Arc::new(security.clone());
    let http = ebb::http::HttpServer::start(options, b.clone())
        .await
        .unwrap();
    let base = format!("http://{}/api/v1", http.local_addr());
    let s = serve(b.clone(), Limits::default(), security, 30_000).await;
    let mut alice = logged_in(s.addr, "alice").await;
    alice
        .write(b"SEND\ndestination:/temp-queue/replies\npersistent:true\nreceipt:r\n\nsecret\0")
        .await;
    receipt(&mut alice, "r").await;
    let key = temporary_queues(&b).await.remove(0);
    let messages = format!("{base}/temp-queues/{}/messages", key.name());
    let get = |url: String, login: &'static str| async move {
        tokio::task::spawn_blocking(move || {
            use base64::Engine;
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("{login}:{PASSCODE}"));
            match ureq::get(&url)
                .set("Authorization", &format!("Basic {basic}"))
                .call()
            {
                Ok(r) => (r.status(), r.into_string().unwrap()),
                Err(ureq::Error::Status(status, r)) => (status, r.into_string().unwrap()),
                Err(e) => panic!("{url}: {e}"),
            }
        })
        .await
        .unwrap()
    };
    for login in ["dave", "root"] {
        let (status, body) = get(messages.clone(), login).await;
        assert_eq!(status, 200, "{login}: {body}");
        assert!(body.contains("secret"), "{login}: {body}");
        let (_, list) = get(format!("{base}/destinations"), login).await;
        assert!(list.contains(key.name()), "{login}: {list}");
    }
    let (status, body) = get(messages, "carol").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("carol has no read right on another connection's temporary destinations"),
        "{body}"
    );
    let (_, list) = get(format!("{base}/destinations"), "carol").await;
    assert!(!list.contains(key.name()), "{list}");
    http.stop().await;
    s.stop().await;
}

/// `max_temporary_destinations` bounds the broker's temporary destinations alive at
/// once, over the embedding API and STOMP together: up to it they are made, the next
/// is refused (`TooManyTemporaryDestinations`, `limit-exceeded` over STOMP) while a
/// name a connection has already is still its own, and once one ends (a handle
/// dropped, a connection ended) a new one is accepted.
async fn the_broker_bounds_its_temporary_destinations(t: TestStore) {
    let usage = UsageConfig {
        max_temporary_destinations: 4,
        ..UsageConfig::default()
    };
    let b = broker_with(&t, vec![], usage).await;
    let s = serve(b.clone(), Limits::default(), Security::default(), 30_000).await;
    let mut held: Vec<_> = (0..3).map(|_| b.temporary_queue().unwrap()).collect();
    let mut owner = Client::connected(s.addr, None).await;
    owner
        .write(b"SUBSCRIBE\ndestination:/temp-queue/mine\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut owner, "s").await;
    assert_eq!(b.temporary_destinations(), 4);

    match b.temporary_queue() {
        Err(e @ Error::TooManyTemporaryDestinations { .. }) => {
            assert_eq!(e.code(), ErrorCode::LimitExceeded);
            assert!(
                matches!(
                    e,
                    Error::TooManyTemporaryDestinations {
                        limit: TemporaryLimit::Broker,
                        max: 4
                    }
                ),
                "{e:?}"
            );
            assert_eq!(e.to_string(), "too many temporary destinations: the broker has 4 alive, the most the broker may have (max_temporary_destinations) (one must end first)");
        }
        other => panic!("a fifth: {:?}", other.map(|q| q.key().clone())),
    }
    let mut other = Client::connected(s.addr, None).await;
    other
        .write(b"SEND\ndestination:/temp-queue/x\nreceipt:r\n\nx\0")
        .await;
    let why = refused(&mut other, "limit-exceeded").await;
    assert!(
        why.contains("the broker has 4 alive") && why.contains("max_temporary_destinations"),
        "{why}"
    );
    owner
        .write(b"SEND\ndestination:/temp-queue/mine\nreceipt:again\n\nstill mine\0")
        .await;
    receipt(&mut owner, "again").await;
    owner.next_is("still mine").await;
    assert_eq!(b.temporary_destinations(), 4);

    // One ends: one more is accepted, and no more than that.
    held.pop();
    assert_eq!(b.temporary_destinations(), 3);
    let mut other = Client::connected(s.addr, None).await;
    other
        .write(b"SUBSCRIBE\ndestination:/temp-queue/x\nid:1\nreceipt:s\n\n\0")
        .await;
    receipt(&mut other, "s").await;
    assert!(b.temporary_queue().is_err());
    // A connection's end ends its own.
    owner.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut owner, "bye").await;
    drop(owner);
    poll_until("the connection's temporary queue ended", || async {
        (b.temporary_destinations() == 3).then_some(())
    })
    .await;
    held.push(b.temporary_queue().unwrap());
    assert_eq!(b.temporary_destinations(), 4);
    drop(held);
    s.stop().await;
}

/// `max_temporary_destinations_per_user` bounds one user's temporary destinations
/// over all its connections: alice makes three over two connections, a fourth (on a
/// third connection) is refused naming her and the setting, bob is not held back,
/// and when her second connection ends she may make one again.
async fn stomp_a_user_has_at_most_its_share_of_temporary_destinations(t: TestStore) {
    let usage = UsageConfig {
        max_temporary_destinations_per_user: 3,
        ..UsageConfig::default()
    };
    let b = broker_with(&t, vec![], usage).await;
    let users = security(&[("alice", &["apps"]), ("bob", &["workers"])], None);
    let s = serve(b.clone(), Limits::default(), users, 30_000).await;
    let make = |name: &'static str| {
        format!("SEND\ndestination:/temp-queue/{name}\nreceipt:{name}\n\n{name}\0")
    };
    let mut first = logged_in(s.addr, "alice").await;
    for name in ["a", "b"] {
        first.write(make(name).as_bytes()).await;
        receipt(&mut first, name).await;
    }
    let mut second = logged_in(s.addr, "alice").await;
    second.write(make("c").as_bytes()).await;
    receipt(&mut second, "c").await;
    assert_eq!(b.temporary_destinations(), 3);
    let mut third = logged_in(s.addr, "alice").await;
    third.write(make("d").as_bytes()).await;
    let why = refused(&mut third, "limit-exceeded").await;
    assert_eq!(why, "too many temporary destinations: user `alice` has 3 alive, the most one user may have (max_temporary_destinations_per_user) (one must end first)");
    let mut bob = logged_in(s.addr, "bob").await;
    bob.write(make("d").as_bytes()).await;
    receipt(&mut bob, "d").await;
    assert_eq!(b.temporary_destinations(), 4);

    second.write(b"DISCONNECT\nreceipt:bye\n\n\0").await;
    receipt(&mut second, "bye").await;
    drop(second);
    poll_until(
        "alice's second connection's temporary queue ended",
        || async { (b.temporary_destinations() == 3).then_some(()) },
    )
    .await;
    let mut fourth = logged_in(s.addr, "alice").await;
    fourth.write(make("d").as_bytes()).await;
    receipt(&mut fourth, "d").await;
    fourth.write(make("e").as_bytes()).await;
    refused(&mut fourth, "limit-exceeded").await;
    s.stop().await;
}

/// One connection has at most `MAX_TEMPORARIES_PER_CONNECTION` alive: the next is
/// refused with `TooManyTemporaryDestinations` (`limit-exceeded`), a name it has
/// already is still its own, and another connection is not held back.
async fn a_connection_has_at_most_its_share_of_temporary_destinations(t: TestStore) {
    let b = broker(&t, policy(0, 100), 2).await;
    let connection = next_connection_id();
    let queue = DestinationKind::TEMP_QUEUE;
    for i in 0..MAX_TEMPORARIES_PER_CONNECTION {
        b.temporary(connection, queue, &format!("q{i}")).unwrap();
    }
    b.temporary(connection, queue, "q0").unwrap();
    match b.temporary(connection, queue, "one-more") {
        Err(e @ Error::TooManyTemporaryDestinations { .. }) => {
            assert_eq!(e.code(), ErrorCode::LimitExceeded);
            assert!(
                matches!(
                    e,
                    Error::TooManyTemporaryDestinations {
                        limit: TemporaryLimit::Connection,
                        max: 1_000
                    }
                ),
                "{e:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    b.temporary(next_connection_id(), queue, "q0").unwrap();
    assert_eq!(
        b.temporary_destinations(),
        MAX_TEMPORARIES_PER_CONNECTION + 1
    );
    b.shutdown().await.unwrap();
}

#[cfg(feature = "http")]
on_every_backend!(
    #[actix_rt::test]
    the_admin_api_reads_temporary_queues_with_the_browse_right
);

on_every_backend!(
    #[actix_rt::test]
    only_its_connection_consumes_and_it_goes_when_dropped,
    a_request_gets_its_reply_through_a_temporary_queue,
    what_a_crash_leaves_is_deleted_at_start,
    stomp_request_reply_with_a_temporary_queue,
    stomp_temporary_names_are_per_connection,
    stomp_browsing_is_its_connections_alone,
    stomp_none_runs_after_its_connection_ends,
    stomp_a_transaction_to_an_ended_temporary_queue_is_refused,
    stomp_a_reply_queue_cannot_be_guessed_from_ones_own,
    stomp_a_reply_between_users_needs_no_grant_by_default,
    stomp_the_temporary_entry_decides_who_makes_sends_and_browses,
    the_broker_bounds_its_temporary_destinations,
    stomp_a_user_has_at_most_its_share_of_temporary_destinations,
    a_connection_has_at_most_its_share_of_temporary_destinations,
);
