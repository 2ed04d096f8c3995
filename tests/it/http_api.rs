//! The HTTP server (`ebb::http`): `/healthz` and `/readyz` say what they check; the
//! admin API lists destinations and durable subscriptions with real counters, browses
//! in bounded pages without changing a counter or a row, sends, and removes a
//! subscription; with users it wants a login, and changes want the admin group;
//! bad input gets a 4xx with a JSON error, never a 500. STOMP over WebSocket carries
//! the same sessions as TCP. On both backends.

use std::time::Duration;

use ebb::auth::{hash_password, Security, User};
use ebb::http::{HttpOptions, HttpServer};
use ebb::stomp::connection::ConnectionConfig;
use ebb::test_util::stomp::{receipt, serve_with, Client};
use ebb::test_util::*;
use ebb::{Message, SubscribeOptions};
use futures::StreamExt;
use serde_json::{json, Value};

/// One HTTP call's answer: status and JSON body (`Value::Null` when empty).
struct Answer {
    status: u16,
    json: Value,
    www_authenticate: Option<String>,
}

/// `method url` with `body` (JSON text) and Basic credentials `login:password`,
/// off the event loop (ureq blocks).
async fn call(method: &str, url: String, body: Option<&str>, login: Option<&str>) -> Answer {
    call_with(method, url, body, login, &[]).await
}

/// [`call`] with more request headers.
async fn call_with(
    method: &str,
    url: String,
    body: Option<&str>,
    login: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let (method, body, login) = (
        method.to_string(),
        body.map(str::to_string),
        login.map(str::to_string),
    );
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut request = ureq::request(&method, &url).timeout(Duration::from_secs(30));
        for (name, value) in &headers {
            request = request.set(name, value);
        }
        if let Some(login) = login {
            use base64::Engine;
            let encoded = base64::engine::general_purpose::STANDARD.encode(login);
            request = request.set("Authorization", &format!("Basic {encoded}"));
        }
        let result = match body {
            Some(body) => request
                .set("Content-Type", "application/json")
                .send_string(&body),
            None => request.call(),
        };
        let response = match result {
            Ok(response) => response,
            Err(ureq::Error::Status(_, response)) => response,
            Err(e) => panic!("{method} {url}: {e}"),
        };
        let status = response.status();
        let www_authenticate = response.header("WWW-Authenticate").map(str::to_string);
        let text = response.into_string().unwrap();
        let json = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
        };
        Answer {
            status,
            json,
            www_authenticate,
        }
    })
    .await
    .unwrap()
}

/// A broker on `t` with an HTTP server in front of it (and `options` for it).
async fn http_server(
    t: &TestStore,
    adjust: impl FnOnce(&mut HttpOptions),
) -> (ebb::Broker, HttpServer, String) {
    let b = broker(t, policy(3_600_000, 400), 2).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    adjust(&mut options);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    (b, server, base)
}

/// A configured user with `password` (hashed as the configuration holds it) in
/// `groups`.
fn user(login: &str, password: &str, groups: &[&str]) -> User {
    User {
        login: login.into(),
        password_hash: hash_password(password).unwrap(),
        certificate_subject: None,
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

/// `/healthz` is always alive; `/readyz` is ready with the broker running, the
/// listeners up and the store answering, and says which check fails otherwise.
async fn health_and_readiness_say_what_they_check(t: TestStore) {
    let readiness = ebb::http::Readiness::default();
    let flag = readiness.clone();
    let (b, server, base) = http_server(&t, |o| o.readiness = flag).await;
    let alive = call("GET", format!("{base}/healthz"), None, None).await;
    assert_eq!(
        (alive.status, &alive.json["status"]),
        (200, &Value::from("alive"))
    );

    let down = call("GET", format!("{base}/readyz"), None, None).await;
    assert_eq!(down.status, 503, "{}", down.json);
    assert_eq!(down.json["checks"]["listeners"], "down");
    assert_eq!(down.json["checks"]["store"], "ok");

    readiness.set_listening(true);
    let ready = call("GET", format!("{base}/readyz"), None, None).await;
    assert_eq!(ready.status, 200, "{}", ready.json);
    assert_eq!(ready.json["status"], "ready");
    assert_eq!(ready.json["checks"]["broker"], "running");
    assert_eq!(ready.json["checks"]["lock"], "held");

    b.shutdown().await.unwrap();
    let stopped = call("GET", format!("{base}/readyz"), None, None).await;
    assert_eq!(stopped.status, 503);
    assert_eq!(stopped.json["checks"]["broker"], "shut down");
    let alive = call("GET", format!("{base}/healthz"), None, None).await;
    assert_eq!(alive.status, 200, "the process is still up");
    server.stop().await;
}

/// The database goes away (PostgreSQL through a proxy that cuts every connection):
/// `/readyz` answers 503 naming the store within its timeout, `/healthz` stays 200;
/// once the database is back, `/readyz` is ready again.
#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run this PostgreSQL test"
)]
async fn readiness_reports_a_lost_database() {
    use ebb_store::proxy::DatabaseProxy;
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let config = ebb::BrokerConfig {
        store: ebb_store::StoreOptions {
            acquire_timeout_ms: 1_000,
            ..t.options.clone()
        },
        ..Default::default()
    };
    let b = ebb::Broker::start(proxy.url(), config).await.unwrap();
    let server = HttpServer::start(HttpOptions::new("127.0.0.1:0".parse().unwrap()), b.clone())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    assert_eq!(
        call("GET", format!("{base}/readyz"), None, None)
            .await
            .status,
        200
    );
    proxy.cut();
    let lost = call("GET", format!("{base}/readyz"), None, None).await;
    assert_eq!(lost.status, 503, "{}", lost.json);
    assert_eq!(lost.json["checks"]["listeners"], "up");
    assert_ne!(lost.json["checks"]["store"], "ok", "{}", lost.json);
    assert_eq!(
        call("GET", format!("{base}/healthz"), None, None)
            .await
            .status,
        200
    );
    proxy.restore();
    let mut back = call("GET", format!("{base}/readyz"), None, None).await;
    for _ in 0..100 {
        if back.status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        back = call("GET", format!("{base}/readyz"), None, None).await;
    }
    assert_eq!(back.status, 200, "{}", back.json);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// The counters and rows a browse must not change: the queue's stats as the API
/// shows them and the rows the store holds.
async fn untouched(b: &ebb::Broker, base: &str, queue: &str) -> (Value, u64) {
    let view = call("GET", format!("{base}/api/v1/queues/{queue}"), None, None).await;
    assert_eq!(view.status, 200, "{}", view.json);
    let rows = b
        .store()
        .count_messages(&format!("queue://{queue}"))
        .await
        .unwrap();
    (view.json, rows)
}

/// Five messages in a queue, three pending for an offline durable subscription: the
/// listing shows both destinations with their sizes; pages of two walk the queue by
/// cursor, with headers and previews, bodies on request; the subscription shows its
/// mark and its three messages; nothing a browse does changes a counter or a row.
async fn the_api_lists_and_browses_without_changing_anything(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    for i in 0..5 {
        let body = format!("job {i} {}", "x".repeat(300));
        b.send(
            "queue://api.jobs",
            Message::new(body).header("n", i.to_string()),
        )
        .await
        .unwrap();
    }
    drop(
        b.subscribe(
            "topic://api.news",
            SubscribeOptions::durable("ops", "audit"),
        )
        .await
        .unwrap(),
    );
    for i in 0..3 {
        b.send("topic://api.news", Message::new(format!("news {i}")))
            .await
            .unwrap();
    }

    let list = call("GET", format!("{base}/api/v1/destinations"), None, None).await;
    assert_eq!(list.status, 200, "{}", list.json);
    let find = |key: &str| {
        list.json["destinations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["destination"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("{key} not listed: {}", list.json))
    };
    assert_eq!(find("queue://api.jobs")["queue_size"], 5);
    assert_eq!(find("queue://api.jobs")["enqueued_total"], 5);
    assert_eq!(find("topic://api.news")["queue_size"], 3);
    assert_eq!(find("topic://api.news")["running"], true);
    assert_eq!(list.json["next"], Value::Null);

    let before = untouched(&b, &base, "api.jobs").await;
    let mut seen = Vec::new();
    let mut after = "0".to_string();
    let mut pages = 0;
    loop {
        let page = call(
            "GET",
            format!("{base}/api/v1/queues/api.jobs/messages?limit=2&after={after}"),
            None,
            None,
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.json);
        pages += 1;
        let messages = page.json["messages"].as_array().unwrap().clone();
        assert!(messages.len() <= 2);
        for m in &messages {
            assert_eq!(m["body_bytes"], 306);
            let preview = m["body_preview"].as_str().unwrap();
            assert_eq!(preview.len(), ebb::http::api::BODY_PREVIEW_BYTES);
            assert!(m.get("body").is_none(), "no whole body without body=full");
            seen.push(m["headers"][0][1].as_str().unwrap().to_string());
        }
        match page.json["next"].as_str() {
            Some(next) => after = next.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, ["0", "1", "2", "3", "4"]);
    assert_eq!(pages, 3, "2 + 2 + 1");
    let full = call(
        "GET",
        format!("{base}/api/v1/queues/api.jobs/messages?limit=1&body=full"),
        None,
        None,
    )
    .await;
    let body = full.json["messages"][0]["body"].as_str().unwrap();
    assert!(body.starts_with("job 0 ") && body.len() == 306, "{body}");

    let subs = call(
        "GET",
        format!("{base}/api/v1/topics/api.news/subscriptions"),
        None,
        None,
    )
    .await;
    assert_eq!(subs.status, 200, "{}", subs.json);
    let sub = &subs.json["subscriptions"][0];
    assert_eq!(
        (&sub["client_id"], &sub["name"]),
        (&Value::from("ops"), &Value::from("audit"))
    );
    assert_eq!(sub["online"], false);
    let pending = call(
        "GET",
        format!("{base}/api/v1/topics/api.news/subscriptions/ops/audit/messages?body=full"),
        None,
        None,
    )
    .await;
    let bodies: Vec<&str> = pending.json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["news 0", "news 1", "news 2"]);
    let first_id = pending.json["messages"][0]["store_id"].as_i64().unwrap();
    // A new subscription starts at the highest id then: just below its first message.
    assert_eq!(sub["last_acked_id"].as_i64().unwrap(), first_id - 1);

    assert_eq!(untouched(&b, &base, "api.jobs").await, before);
    // And a consumer still gets all five, in order.
    let mut sub = b
        .subscribe("queue://api.jobs", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for i in 0..5 {
        let m = next(&mut sub).await;
        assert_eq!(m.header("n"), Some(i.to_string().as_str()));
        sub.ack(&m).await.unwrap();
    }
    drop(sub);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// After a restart nothing runs: the listing still shows every destination the
/// store holds (queues with messages, a topic with only a durable subscription),
/// `running: false`, each exactly once across pages of two; looking at one starts it.
async fn listing_pages_cover_stored_destinations_once(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    for q in ["a", "b", "c", "d", "e"] {
        b.send(format!("queue://list.{q}"), Message::new("x"))
            .await
            .unwrap();
    }
    for topic in ["list.t1", "list.t2", "list.t3"] {
        drop(
            b.subscribe(
                format!("topic://{topic}"),
                SubscribeOptions::durable("c", topic),
            )
            .await
            .unwrap(),
        );
    }
    b.send("topic://list.t2", Message::new("kept for c"))
        .await
        .unwrap();
    b.shutdown().await.unwrap();

    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let server = HttpServer::start(HttpOptions::new("127.0.0.1:0".parse().unwrap()), b.clone())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let mut seen = Vec::new();
    let mut query = String::new();
    for _ in 0..20 {
        let page = call(
            "GET",
            format!("{base}/api/v1/destinations?limit=2{query}"),
            None,
            None,
        )
        .await;
        assert_eq!(page.status, 200, "{}", page.json);
        let destinations = page.json["destinations"].as_array().unwrap();
        assert!(destinations.len() <= 2);
        for d in destinations {
            assert_eq!(d["running"], false, "{d}");
            seen.push((
                d["destination"].as_str().unwrap().to_string(),
                d["queue_size"].as_u64().unwrap(),
            ));
        }
        match page.json["next"].as_str() {
            Some(next) => query = format!("&after={next}"),
            None => break,
        }
    }
    let expected: Vec<(String, u64)> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|q| (format!("queue://list.{q}"), 1))
        .chain([
            ("topic://list.t1".to_string(), 0),
            ("topic://list.t2".into(), 1),
            ("topic://list.t3".into(), 0),
        ])
        .collect();
    assert_eq!(seen, expected);
    let one = call("GET", format!("{base}/api/v1/topics/list.t3"), None, None).await;
    assert_eq!(
        (one.status, &one.json["running"]),
        (200, &Value::from(true)),
        "{}",
        one.json
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A message sent through the API reaches a consumer with its headers and priority;
/// a durable subscription is removed only while offline (409 while online), and a
/// second removal is a 404.
async fn the_api_sends_and_removes_subscriptions(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    let mut consumer = b
        .subscribe("queue://api.in", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let sent = call(
        "POST",
        format!("{base}/api/v1/queues/api.in/messages"),
        Some(r#"{"body": "hello", "headers": {"kind": "greeting"}, "priority": 7}"#),
        None,
    )
    .await;
    assert_eq!(sent.status, 201, "{}", sent.json);
    assert!(
        sent.json["store_id"].as_i64().is_some(),
        "persistent by default"
    );
    let m = next(&mut consumer).await;
    assert_eq!(body(&m), "hello");
    assert_eq!(m.header("kind"), Some("greeting"));
    assert_eq!(m.priority(), 7);
    assert_eq!(m.message_id(), sent.json["message_id"].as_str().unwrap());
    consumer.ack(&m).await.unwrap();

    let binary = call(
        "POST",
        format!("{base}/api/v1/queues/api.in/messages"),
        Some(r#"{"body_base64": "AP8=", "persistent": false}"#),
        None,
    )
    .await;
    assert_eq!(binary.status, 201, "{}", binary.json);
    let m = next(&mut consumer).await;
    assert_eq!(m.body(), [0u8, 255]);
    assert!(!m.persistent());
    // STOMP's limits on a SEND's headers hold here too; a list repeats a name.
    let many = (0..1001)
        .map(|i| format!(r#"["h{i}", "v"]"#))
        .collect::<Vec<_>>()
        .join(",");
    let url = format!("{base}/api/v1/queues/api.in/messages");
    let body = format!(r#"{{"body": "x", "headers": [{many}]}}"#);
    let refused = call("POST", url.clone(), Some(&body), None).await;
    assert_eq!(refused.status, 400, "{}", refused.json);
    assert!(refused.json["error"]
        .as_str()
        .unwrap()
        .contains("max_headers"));
    let body = format!(
        r#"{{"body": "x", "headers": {{"long": "{}"}}}}"#,
        "v".repeat(70_000)
    );
    let refused = call("POST", url.clone(), Some(&body), None).await;
    assert_eq!(refused.status, 400, "{}", refused.json);
    assert!(refused.json["error"]
        .as_str()
        .unwrap()
        .contains("max_header_size"));
    let repeated = r#"{"body": "twice", "headers": [["tag", "a"], ["tag", "b"]]}"#;
    assert_eq!(call("POST", url, Some(repeated), None).await.status, 201);
    let m = next(&mut consumer).await;
    let tags: Vec<&str> = m
        .headers()
        .iter()
        .filter(|(n, _)| n == "tag")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(tags, ["a", "b"]);
    drop(consumer);

    let online = b
        .subscribe("topic://api.t", SubscribeOptions::durable("c1", "s1"))
        .await
        .unwrap();
    let url = format!("{base}/api/v1/topics/api.t/subscriptions/c1/s1");
    let subs = call(
        "GET",
        format!("{base}/api/v1/topics/api.t/subscriptions"),
        None,
        None,
    )
    .await;
    assert_eq!(
        subs.json["subscriptions"][0]["online"], true,
        "{}",
        subs.json
    );
    let busy = call("DELETE", url.clone(), None, None).await;
    assert_eq!(busy.status, 409, "{}", busy.json);
    drop(online);
    // The detach reaches the topic on its own time.
    let mut removed = call("DELETE", url.clone(), None, None).await;
    for _ in 0..100 {
        if removed.status != 409 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        removed = call("DELETE", url.clone(), None, None).await;
    }
    assert_eq!(removed.status, 204, "{}", removed.json);
    assert!(!b
        .durable_subscription_exists("topic://api.t", "c1", "s1")
        .await
        .unwrap());
    let again = call("DELETE", url, None, None).await;
    assert_eq!(again.status, 404, "{}", again.json);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Every kind of bad input gets its 4xx and a JSON error that says what is wrong;
/// nothing is sent or changed by a refused call.
async fn bad_input_gets_a_4xx_with_a_json_error(t: TestStore) {
    let (b, server, base) = http_server(&t, |o| o.max_body_bytes = 1024).await;
    b.send("queue://api.bad", Message::new("kept"))
        .await
        .unwrap();
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "GET",
            "/api/v1/queues/api.nothing".into(),
            None,
            404,
            "unknown destination",
        ),
        (
            "GET",
            "/api/v1/queues/api.nothing/messages".into(),
            None,
            404,
            "unknown destination",
        ),
        (
            "GET",
            "/api/v1/topics/api.nothing/subscriptions/c/s/messages".into(),
            None,
            404,
            "no durable subscription",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?after=-3".into(),
            None,
            400,
            "bad cursor",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?after=abc".into(),
            None,
            400,
            "bad cursor",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?limit=0".into(),
            None,
            400,
            "limit 0",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?limit=5000".into(),
            None,
            400,
            "limit 5000",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?body=all".into(),
            None,
            400,
            "body=all",
        ),
        (
            "GET",
            "/api/v1/queues/api.bad/messages?colour=red".into(),
            None,
            400,
            "bad query",
        ),
        (
            "GET",
            "/api/v1/destinations?after=nowhere".into(),
            None,
            400,
            "bad cursor",
        ),
        (
            "GET",
            "/api/v1/topics/api.x/subscriptions?after_client=x".into(),
            None,
            400,
            "give both",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x"} trailing"#.into()),
            400,
            "trailing characters",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"a": "1", "a": "2"}}"#.into()),
            422,
            "given twice",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"na\nme": "v"}}"#.into()),
            400,
            "line break",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"": "v"}}"#.into()),
            400,
            "empty",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"k": "a\u0000b"}}"#.into()),
            400,
            "NUL",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"browser": "end"}}"#.into()),
            400,
            "header `browser`",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/move".into(),
            Some(r#"{"all": true, "to": "/topic/t"}"#.into()),
            400,
            "is a topic",
        ),
        ("GET", "/api/v1/nothing".into(), None, 404, "no route"),
        ("PUT", "/api/v1/broker".into(), None, 405, "not a method"),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some("{not json".into()),
            400,
            "bad JSON",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"bodyy": "x"}"#.into()),
            422,
            "unknown field",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "body_base64": "eA=="}"#.into()),
            400,
            "not both",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body_base64": "%%%"}"#.into()),
            400,
            "base64",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "priority": 12}"#.into()),
            400,
            "priority",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"AMQ_SCHEDULED_DELAY": "60000"}}"#.into()),
            400,
            "scheduled delivery",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "ttl_ms": 0}"#.into()),
            400,
            "ttl_ms",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(r#"{"body": "x", "headers": {"destination": "/queue/other"}}"#.into()),
            400,
            "header `destination`",
        ),
        (
            "POST",
            "/api/v1/queues/api.bad/messages".into(),
            Some(format!(r#"{{"body": "{}"}}"#, "x".repeat(2000))),
            413,
            "cannot read the body",
        ),
        (
            "POST",
            "/api/v1/queues/orders.%3E/messages".into(),
            Some(r#"{"body": "x"}"#.into()),
            400,
            "invalid queue name `orders.>`",
        ),
        (
            "GET",
            "/api/v1/topics/orders.*".into(),
            None,
            400,
            "wildcards",
        ),
    ];
    for (method, path, body, status, says) in cases {
        let answer = call(method, format!("{base}{path}"), body.as_deref(), None).await;
        assert_eq!(answer.status, status, "{method} {path}: {}", answer.json);
        let error = answer.json["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: {}", answer.json));
        assert!(
            error.contains(says),
            "{method} {path}: `{error}` does not say `{says}`"
        );
        assert_eq!(answer.json["status"], status);
        // The stable code (`ErrorCode`), the one a STOMP ERROR carries too.
        let code = match (status, says) {
            (400, "is a topic") => "invalid-request",
            (400, "scheduled delivery") => "unsupported",
            (400, "invalid queue name `orders.>`" | "wildcards") => "invalid-destination",
            (400 | 422, _) => "invalid-value",
            (404, _) => "not-found",
            (405, _) => "invalid-request",
            (413, _) => "limit-exceeded",
            other => panic!("no code expected for {other:?}"),
        };
        assert_eq!(
            answer.json["code"], code,
            "{method} {path}: {}",
            answer.json
        );
    }
    let page = call(
        "GET",
        format!("{base}/api/v1/queues/api.bad/messages?body=full"),
        None,
        None,
    )
    .await;
    let bodies: Vec<&str> = page.json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["kept"], "no refused send was stored");
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A body that trickles in (issue 35: 1 byte every 2 s with `Content-Length:
/// 1000000` held a connection slot forever) gets `408` once `body_read_timeout` has
/// passed since its head, and the connection closes; a whole body is served.
async fn a_body_that_trickles_in_gets_408(t: TestStore) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (b, server, base) = http_server(&t, |o| {
        o.body_read_timeout = Duration::from_millis(500);
    })
    .await;
    let mut slow = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    slow.write_all(
        b"POST /api/v1/queues/api.slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n\
          Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{",
    )
    .await
    .unwrap();
    // Trickle a byte now and then until the server answers (it closes after).
    let mut answer = Vec::new();
    let read = tokio::time::timeout(ebb::test_util::PATIENCE, async {
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                n = slow.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                },
                _ = tokio::time::sleep(Duration::from_millis(100)) => {
                    if slow.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection was never closed");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within"), "{answer}");
    assert_eq!(
        b.store().count_messages("queue://api.slow").await.unwrap(),
        0
    );
    let sent = call(
        "POST",
        format!("{base}/api/v1/queues/api.slow/messages"),
        Some(r#"{"body": "whole"}"#),
        None,
    )
    .await;
    assert_eq!(sent.status, 201, "{}", sent.json);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Health probes are answered while slow bodies hold every connection slot: with
/// `max_connections` POSTs that announce 1,000 bytes and send one (held far longer
/// than the test runs), ten `/healthz` and ten `/readyz` each answer `200` on the
/// connections kept for health probes, another route there gets `503` naming the
/// cap; once the slow clients go, the API answers again.
async fn health_probes_are_answered_while_slow_bodies_hold_every_slot(t: TestStore) {
    use tokio::io::AsyncWriteExt;
    const MOST: usize = 8;
    let (b, server, base) = http_server(&t, |o| {
        o.max_connections = MOST;
        o.max_connections_per_address = MOST;
        o.body_read_timeout = Duration::from_secs(3_600);
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..MOST {
        let mut c = tokio::net::TcpStream::connect(server.local_addr())
            .await
            .unwrap();
        c.write_all(
            b"POST /api/v1/queues/api.flood/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
        )
        .await
        .unwrap();
        slow.push(c);
    }
    // The server accepts in the kernel's order: the slow ones hold every slot before
    // the probes are looked at.
    let mut answered = (0, 0);
    for _ in 0..10 {
        let alive = call("GET", format!("{base}/healthz"), None, None).await;
        assert_eq!(alive.status, 200, "{}", alive.json);
        assert_eq!(alive.json["status"], "alive");
        answered.0 += 1;
        let ready = call("GET", format!("{base}/readyz"), None, None).await;
        assert_eq!(ready.status, 200, "{}", ready.json);
        assert_eq!(ready.json["status"], "ready");
        answered.1 += 1;
    }
    assert_eq!(answered, (10, 10));
    let full = call("GET", format!("{base}/api/v1/broker"), None, None).await;
    assert_eq!(full.status, 503, "{}", full.json);
    assert!(
        full.json["error"]
            .as_str()
            .unwrap()
            .contains("max_connections"),
        "{}",
        full.json
    );
    assert_eq!(
        b.store().count_messages("queue://api.flood").await.unwrap(),
        0
    );
    // The slow clients go: their slots are free again.
    drop(slow);
    let deadline = std::time::Instant::now() + ebb::test_util::PATIENCE;
    loop {
        let broker = call("GET", format!("{base}/api/v1/broker"), None, None).await;
        if broker.status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slots were never given back: {}",
            broker.json
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// DNS rebinding (issue 35): a page of `attacker.example` whose name resolves to this
/// server sends `Host: attacker.example`; without users it would otherwise read
/// bodies, purge queues and open STOMP WebSockets. Every route refuses a name that
/// is not an IP address, `localhost`, this machine's or in `allowed_hosts`.
async fn requests_for_other_host_names_are_refused(t: TestStore) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (b, server, base) = http_server(&t, |o| {
        o.stomp = Some(ConnectionConfig::default());
        o.allowed_hosts = vec![".corp.example".into()];
    })
    .await;
    b.send(
        "queue://api.rebind",
        Message::new("secret body").persistent(true),
    )
    .await
    .unwrap();
    let messages = format!("{base}/api/v1/queues/api.rebind/messages?body=full");
    let rebound = [
        ("Host", "attacker.example"),
        ("Origin", "http://attacker.example"),
    ];
    let read = call_with("GET", messages.clone(), None, None, &rebound).await;
    assert_eq!(read.status, 403, "{}", read.json);
    assert!(
        read.json["error"]
            .as_str()
            .unwrap()
            .contains("allowed_hosts"),
        "{}",
        read.json
    );
    assert!(!read.json.to_string().contains("secret body"));
    let purge = call_with(
        "POST",
        format!("{base}/api/v1/queues/api.rebind/purge"),
        Some("{}"),
        None,
        &rebound,
    )
    .await;
    assert_eq!(purge.status, 403, "{}", purge.json);
    assert_eq!(
        b.store()
            .count_messages("queue://api.rebind")
            .await
            .unwrap(),
        1,
        "nothing purged"
    );
    // The WebSocket upgrade too.
    let mut socket = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    socket
        .write_all(
            b"GET /stomp HTTP/1.1\r\nHost: attacker.example\r\nOrigin: http://attacker.example\r\n\
              Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n",
        )
        .await
        .unwrap();
    let mut head = vec![0u8; 12];
    tokio::time::timeout(ebb::test_util::PATIENCE, socket.read_exact(&mut head))
        .await
        .expect("an answer to the upgrade")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 403", "{}", String::from_utf8_lossy(&head));
    // The server's own names are served: its address, localhost, a listed domain.
    let port = server.local_addr().port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "broker.corp.example".into(),
    ] {
        let ok = call_with(
            "GET",
            messages.clone(),
            None,
            None,
            &[("Host", host.as_str())],
        )
        .await;
        assert_eq!(ok.status, 200, "{host}: {}", ok.json);
        assert_eq!(ok.json["messages"][0]["body"], "secret body");
    }
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Reads need the right the STOMP operation they mirror needs (issue 35): a user who
/// may not SUBSCRIBE to `queue://api.secret` gets `403` for its counters, its
/// messages and a topic's subscriptions and backlog, does not see it listed, and may
/// not list connections (logins, client ids); the admin group sees everything.
async fn reads_need_the_stomp_read_right(t: TestStore) {
    let entry = |destination: &str, read: &[&str]| ebb::auth::AuthorizationEntry {
        destination: destination.into(),
        read: read.iter().map(|g| g.to_string()).collect(),
        write: vec!["admin".into()],
        admin: vec!["admin".into()],
    };
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![
            user("viewer", "look", &["ops"]),
            user("root", "s3cret", &["admin"]),
        ],
        authorization: vec![
            entry("queue://api.public", &["ops", "admin"]),
            entry("queue://>", &["admin"]),
            entry("topic://>", &["admin"]),
        ],
    };
    let (b, server, base) = http_server(&t, |o| o.security = std::sync::Arc::new(security)).await;
    b.send("queue://api.public", Message::new("open"))
        .await
        .unwrap();
    b.send("queue://api.secret", Message::new("payroll"))
        .await
        .unwrap();
    drop(
        b.subscribe(
            "topic://api.board",
            ebb::SubscribeOptions::durable("hr", "minutes"),
        )
        .await
        .unwrap(),
    );
    b.send(
        "topic://api.board",
        Message::new("minutes").persistent(true),
    )
    .await
    .unwrap();
    let api = format!("{base}/api/v1");
    let secret = [
        format!("{api}/queues/api.secret"),
        format!("{api}/queues/api.secret/messages?body=full"),
        format!("{api}/topics/api.board"),
        format!("{api}/topics/api.board/subscriptions"),
        format!("{api}/topics/api.board/subscriptions/hr/minutes/messages?body=full"),
        format!("{api}/connections"),
        format!("{api}/queues/api.secret/history"),
        format!("{api}/topics/api.board/history?window=1h"),
    ];
    for url in &secret {
        let refused = call("GET", url.clone(), None, Some("viewer:look")).await;
        assert_eq!(refused.status, 403, "{url}: {}", refused.json);
        assert!(
            !refused.json.to_string().contains("payroll")
                && !refused.json.to_string().contains("minutes\""),
            "{url}: {}",
            refused.json
        );
        let admin = call("GET", url.clone(), None, Some("root:s3cret")).await;
        assert_eq!(admin.status, 200, "{url}: {}", admin.json);
    }
    let public = call(
        "GET",
        format!("{api}/queues/api.public/messages?body=full"),
        None,
        Some("viewer:look"),
    )
    .await;
    assert_eq!(public.status, 200, "{}", public.json);
    assert_eq!(public.json["messages"][0]["body"], "open");
    let listed = |answer: &Answer| -> Vec<String> {
        answer.json["destinations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["destination"].as_str().unwrap().to_string())
            .collect()
    };
    let seen = call(
        "GET",
        format!("{api}/destinations"),
        None,
        Some("viewer:look"),
    )
    .await;
    assert_eq!(listed(&seen), vec!["queue://api.public".to_string()]);
    // The sorted table (the sampler's reading, up to a step old) shows the viewer
    // what it may read, once the admin's shows all three.
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let table = call(
            "GET",
            format!("{api}/broker/destinations"),
            None,
            Some("root:s3cret"),
        )
        .await;
        if table.json["matched"] == 3 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", table.json);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let table = call(
        "GET",
        format!("{api}/broker/destinations?sort=name"),
        None,
        Some("viewer:look"),
    )
    .await;
    assert_eq!(table.status, 200, "{}", table.json);
    let rows: Vec<&str> = table.json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["destination"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["queue://api.public"], "{}", table.json);
    let all = call(
        "GET",
        format!("{api}/destinations"),
        None,
        Some("root:s3cret"),
    )
    .await;
    assert_eq!(
        listed(&all),
        vec![
            "queue://api.public",
            "queue://api.secret",
            "topic://api.board"
        ]
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// With users: no credentials or a wrong password is a 401 asking for Basic; a
/// user outside the admin group may read but not change (403); an admin may send.
/// `/healthz`, `/readyz` and `/metrics` need no login.
async fn users_need_a_login_and_changes_the_admin_group(t: TestStore) {
    let security = Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![
            user("viewer", "look", &["ops"]),
            user("root", "s3cret", &["admin"]),
        ],
        authorization: vec![],
    };
    let (b, server, base) = http_server(&t, |o| o.security = std::sync::Arc::new(security)).await;
    b.send("queue://api.auth", Message::new("x")).await.unwrap();
    let url = format!("{base}/api/v1/queues/api.auth");
    let send = format!("{base}/api/v1/queues/api.auth/messages");

    let anonymous = call("GET", url.clone(), None, None).await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.json);
    assert!(anonymous.www_authenticate.unwrap().starts_with("Basic"));
    let wrong = call("GET", url.clone(), None, Some("viewer:nope")).await;
    assert_eq!(wrong.status, 401, "{}", wrong.json);
    let read = call("GET", url.clone(), None, Some("viewer:look")).await;
    assert_eq!(
        (read.status, &read.json["queue_size"]),
        (200, &Value::from(1))
    );
    let refused = call(
        "POST",
        send.clone(),
        Some(r#"{"body": "y"}"#),
        Some("viewer:look"),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.json);
    assert!(refused.json["error"]
        .as_str()
        .unwrap()
        .contains("group `admin`"));
    let sent = call("POST", send, Some(r#"{"body": "y"}"#), Some("root:s3cret")).await;
    assert_eq!(sent.status, 201, "{}", sent.json);
    let read = call("GET", url, None, Some("viewer:look")).await;
    assert_eq!(
        read.json["queue_size"], 2,
        "one sent by the admin, none by the viewer"
    );
    for open in ["/healthz", "/readyz"] {
        let answer = call("GET", format!("{base}{open}"), None, None).await;
        assert_eq!(answer.status, 200, "{open}: {}", answer.json);
    }
    let metrics = tokio::task::spawn_blocking(move || {
        let response = ureq::get(&format!("{base}/metrics")).call().unwrap();
        (response.status(), response.into_string().unwrap())
    })
    .await
    .unwrap();
    assert_eq!(metrics.0, 200);
    assert!(
        metrics.1.contains("ebb_memory_usage_bytes"),
        "{}",
        metrics.1
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// The scheduler's backlog counts every destination's scheduled messages, so it is
/// the admin group's, as the other broker-wide reads (connections): a user outside
/// it gets `403` at `GET /api/v1/scheduler` and `null` for `scheduler` in `GET
/// /api/v1/broker`; an admin gets the count.
async fn the_scheduler_backlog_is_for_the_admin_group(t: TestStore) {
    let security = Security {
        login_guard: Default::default(),
        users: vec![
            user("viewer", "look", &["ops"]),
            user("root", "s3cret", &["admin"]),
        ],
        authorization: vec![],
        temp_destination_authorization_entry: None,
    };
    let (b, server, base) = http_server(&t, |o| o.security = std::sync::Arc::new(security)).await;
    let due = ebb::now_ms() + 3_600_000;
    b.send(
        "queue://api.secret.later",
        Message::new("in an hour").deliver_at(due),
    )
    .await
    .unwrap();
    let scheduler = format!("{base}/api/v1/scheduler");
    let refused = call("GET", scheduler.clone(), None, Some("viewer:look")).await;
    assert_eq!(refused.status, 403, "{}", refused.json);
    assert!(
        refused.json["error"]
            .as_str()
            .unwrap()
            .contains("group `admin`"),
        "{}",
        refused.json
    );
    assert!(refused.json.get("scheduled").is_none(), "{}", refused.json);
    let broker = call(
        "GET",
        format!("{base}/api/v1/broker"),
        None,
        Some("viewer:look"),
    )
    .await;
    assert_eq!(broker.status, 200, "{}", broker.json);
    assert!(broker.json["scheduler"].is_null(), "{}", broker.json);

    let allowed = call("GET", scheduler, None, Some("root:s3cret")).await;
    assert_eq!(allowed.status, 200, "{}", allowed.json);
    assert_eq!(allowed.json["scheduled"], 1, "{}", allowed.json);
    assert_eq!(allowed.json["next_due_ms"], due, "{}", allowed.json);
    let broker = call(
        "GET",
        format!("{base}/api/v1/broker"),
        None,
        Some("root:s3cret"),
    )
    .await;
    assert_eq!(broker.json["scheduler"]["scheduled"], 1, "{}", broker.json);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A purge deletes what waits (stored and non-persistent) and leaves what a consumer
/// holds; the consumer's acks then delete the rest, and nothing more is delivered.
async fn purge_deletes_what_waits_and_leaves_what_a_consumer_holds(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    let queue = "queue://api.purge";
    let mut consumer = b
        .subscribe(
            queue,
            SubscribeOptions::non_durable()
                .prefetch(2)
                .ack(ebb::AckMode::Client),
        )
        .await
        .unwrap();
    for i in 0..10 {
        b.send(queue, Message::new(format!("p{i}"))).await.unwrap();
    }
    for i in 0..2 {
        b.send(queue, Message::new(format!("n{i}")).persistent(false))
            .await
            .unwrap();
    }
    let held = [next(&mut consumer).await, next(&mut consumer).await];
    let purged = call(
        "POST",
        format!("{base}/api/v1/queues/api.purge/purge"),
        Some("{}"),
        None,
    )
    .await;
    assert_eq!(purged.status, 200, "{}", purged.json);
    assert_eq!(
        purged.json["taken"], 10,
        "8 stored + 2 non-persistent: {}",
        purged.json
    );
    assert_eq!(purged.json["in_flight"], 2, "{}", purged.json);
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 2);
    for m in &held {
        consumer.ack(m).await.unwrap();
    }
    wait_rows(&b, queue, 0).await;
    assert!(
        quiet(&mut consumer).await.is_none(),
        "a purged message was delivered"
    );
    let unknown = call(
        "POST",
        format!("{base}/api/v1/queues/api.never/purge"),
        Some("{}"),
        None,
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.json);
    drop(consumer);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// `DELETE /api/v1/queues/NAME` and `/topics/NAME`: `409` with the reason while a
/// consumer is attached (nothing deleted), then `200` with what went; the destination
/// is then unknown (`404`), as is one that never existed.
async fn destinations_are_deleted_when_nobody_uses_them(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    let queue = "queue://api.del";
    for i in 0..3 {
        b.send(queue, Message::new(format!("d{i}"))).await.unwrap();
    }
    let consumer = b
        .subscribe(
            queue,
            SubscribeOptions::non_durable()
                .prefetch(1)
                .ack(ebb::AckMode::Client),
        )
        .await
        .unwrap();
    let url = format!("{base}/api/v1/queues/api.del");
    let refused = call("DELETE", url.clone(), None, None).await;
    assert_eq!(refused.status, 409, "{}", refused.json);
    assert!(
        refused.json["error"]
            .as_str()
            .unwrap()
            .contains("consumers"),
        "{}",
        refused.json
    );
    assert_eq!(b.store().count_messages(queue).await.unwrap(), 3);
    drop(consumer);
    let deleted = loop {
        let answer = call("DELETE", url.clone(), None, None).await;
        if answer.status != 409 {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(deleted.status, 200, "{}", deleted.json);
    assert_eq!(deleted.json["deleted"]["messages"], 3, "{}", deleted.json);
    assert_eq!(deleted.json["deleted"]["subscriptions"], 0);
    assert_eq!(call("GET", url.clone(), None, None).await.status, 404);
    assert_eq!(call("DELETE", url.clone(), None, None).await.status, 404);

    let topic = "topic://api.delt";
    drop(
        b.subscribe(topic, SubscribeOptions::durable("api-del", "s"))
            .await
            .unwrap(),
    );
    for i in 0..2 {
        b.send(topic, Message::new(format!("t{i}"))).await.unwrap();
    }
    let deleted = call(
        "DELETE",
        format!("{base}/api/v1/topics/api.delt"),
        None,
        None,
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.json);
    assert_eq!(deleted.json["deleted"]["messages"], 2, "{}", deleted.json);
    assert_eq!(deleted.json["deleted"]["subscriptions"], 1);
    assert_eq!(b.store().count_subscriptions(topic).await.unwrap(), 0);
    let subscriptions = call(
        "GET",
        format!("{base}/api/v1/topics/api.delt/subscriptions"),
        None,
        None,
    )
    .await;
    assert_eq!(subscriptions.status, 404, "{}", subscriptions.json);
    let never = call(
        "DELETE",
        format!("{base}/api/v1/topics/api.never"),
        None,
        None,
    )
    .await;
    assert_eq!(never.status, 404, "{}", never.json);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A poison message whose dead-letter queue cannot be named (its queue's name is so
/// long that `DLQ.` + it is over the limit) stays in its queue, delivered again, and
/// a purge takes it: it does not vanish from view until a restart.
async fn a_message_the_dlq_cannot_take_stays_in_its_queue(t: TestStore) {
    let poison_policy = ebb::Policy {
        maximum_redeliveries: 0,
        ..ebb::Policy::default()
    };
    let b = broker_with(&t, vec![("queue://>", poison_policy)], Default::default()).await;
    let server = HttpServer::start(HttpOptions::new("127.0.0.1:0".parse().unwrap()), b.clone())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr());
    let name = format!("p{}", "x".repeat(198));
    let queue = format!("queue://{name}");
    b.send(queue.as_str(), Message::new("poison"))
        .await
        .unwrap();
    let mut consumer = b
        .subscribe(
            queue.as_str(),
            SubscribeOptions::non_durable().ack(ebb::AckMode::Client),
        )
        .await
        .unwrap();
    let first = next(&mut consumer).await;
    consumer.nack(&first).await.unwrap();
    let again = next(&mut consumer).await;
    assert_eq!(body(&again), "poison");
    drop(consumer);
    let mut purged = call(
        "POST",
        format!("{base}/api/v1/queues/{name}/purge"),
        Some("{}"),
        None,
    )
    .await;
    for _ in 0..100 {
        if purged.json["taken"] == 1 {
            break;
        }
        // The dropped consumer's delivery comes back on the queue's own time.
        tokio::time::sleep(Duration::from_millis(50)).await;
        purged = call(
            "POST",
            format!("{base}/api/v1/queues/{name}/purge"),
            Some("{}"),
            None,
        )
        .await;
    }
    assert_eq!(purged.json["taken"], 1, "{}", purged.json);
    assert_eq!(b.store().count_messages(&queue).await.unwrap(), 0);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Dead letters (as the queue writes them: `originalDestination`, the cause) move
/// back by id, then all the rest; each arrives once in its original queue without
/// the dead-letter headers; the DLQ ends empty; ids not in it are counted `gone`;
/// `to` moves elsewhere.
async fn dead_letters_move_back_exactly_once(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    let dlq = "queue://DLQ.api.jobs";
    let mut ids = Vec::new();
    for i in 0..5 {
        let letter = Message::new(format!("job {i}"))
            .header("originalDestination", "/queue/api.jobs")
            .header("dlqDeliveryFailureCause", "delivery failed 7 times")
            .header("n", i.to_string());
        ids.push(b.send(dlq, letter).await.unwrap().store_id.unwrap());
    }
    let url = format!("{base}/api/v1/queues/DLQ.api.jobs/move");
    let by_id = call(
        "POST",
        url.clone(),
        Some(&format!(r#"{{"ids": [{}, {}, 999999]}}"#, ids[1], ids[3])),
        None,
    )
    .await;
    assert_eq!(by_id.status, 200, "{}", by_id.json);
    assert_eq!(
        (&by_id.json["taken"], &by_id.json["gone"]),
        (&Value::from(2), &Value::from(1))
    );
    let mut jobs = b
        .subscribe("queue://api.jobs", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = next(&mut jobs).await;
        assert_eq!(m.header("originalDestination"), None);
        assert_eq!(m.header("dlqDeliveryFailureCause"), None);
        got.push(m.header("n").unwrap().to_string());
        jobs.ack(&m).await.unwrap();
    }
    assert_eq!(got, ["1", "3"]);
    assert_eq!(b.store().count_messages(dlq).await.unwrap(), 3);

    let elsewhere = call(
        "POST",
        url.clone(),
        Some(&format!(r#"{{"ids": [{}], "to": "api.parking"}}"#, ids[0])),
        None,
    )
    .await;
    assert_eq!(elsewhere.json["taken"], 1, "{}", elsewhere.json);
    assert_eq!(
        b.store()
            .count_messages("queue://api.parking")
            .await
            .unwrap(),
        1
    );

    let rest = call("POST", url.clone(), Some(r#"{"all": true}"#), None).await;
    assert_eq!(rest.status, 200, "{}", rest.json);
    assert_eq!(
        (&rest.json["taken"], &rest.json["next"]),
        (&Value::from(2), &Value::Null)
    );
    for _ in 0..2 {
        let m = next(&mut jobs).await;
        got.push(m.header("n").unwrap().to_string());
        jobs.ack(&m).await.unwrap();
    }
    assert_eq!(got, ["1", "3", "2", "4"]);
    assert!(quiet(&mut jobs).await.is_none(), "each moved once");
    assert_eq!(b.store().count_messages(dlq).await.unwrap(), 0);
    for (body, says) in [
        (r#"{}"#, "say which messages"),
        (r#"{"ids": [1], "all": true}"#, "not both"),
        (r#"{"ids": []}"#, "0 ids"),
        (
            r#"{"all": true, "to": "DLQ.api.jobs"}"#,
            "the queue the messages are in",
        ),
    ] {
        let refused = call("POST", url.clone(), Some(body), None).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.json);
        assert!(
            refused.json["error"].as_str().unwrap().contains(says),
            "{body}: {}",
            refused.json
        );
    }
    drop(jobs);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Every message of a queue, in id order: `(store id, message id)`, read in
/// bounded pages.
async fn stored(b: &ebb::Broker, queue: &str) -> Vec<(i64, String)> {
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page = b.browse(queue, after, 1000).await.unwrap();
        let Some(last) = page.last() else { return all };
        after = last.store_id;
        all.extend(page.into_iter().map(|m| (m.store_id, m.message_id)));
    }
}

/// `ebb serve` is SIGKILLed while it moves 3,000 dead letters back: after a restart
/// every message is in exactly one of the two queues (none in both, none in
/// neither), and a second retry moves the rest.
async fn a_retry_killed_midway_loses_and_doubles_nothing(t: TestStore) {
    const N: usize = 3_000;
    let dlq = "queue://DLQ.kill.jobs";
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let letters = (0..N).map(|i| {
        Message::new(format!("job {i}")).header("originalDestination", "/queue/kill.jobs")
    });
    for sent in b.send_all(dlq, letters).await {
        sent.unwrap();
    }
    let before: Vec<String> = stored(&b, dlq)
        .await
        .into_iter()
        .map(|(_, id)| id)
        .collect();
    assert_eq!(before.len(), N);
    b.shutdown().await.unwrap();

    let serve = |t: &TestStore| {
        let mut args = vec![
            "serve".to_string(),
            "--store".into(),
            t.url.clone(),
            "--stomp".into(),
            "127.0.0.1:0".into(),
            "--http".into(),
            "127.0.0.1:0".into(),
        ];
        if let Some(schema) = &t.options.schema {
            let config = std::env::temp_dir().join(format!("ebb-kill-{schema}.toml"));
            std::fs::write(&config, format!("[store]\nschema = \"{schema}\"\n")).unwrap();
            args.extend(["--config".into(), config.display().to_string()]);
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("ebb serve starts");
        let stdout = child.stdout.take().unwrap();
        async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            let addr = loop {
                let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                    .await
                    .expect("ebb serve prints its HTTP address")
                    .unwrap()
                    .expect("ebb serve ended early");
                if let Some(rest) = line.split("HTTP on http://").nth(1) {
                    break rest.split(' ').next().unwrap().to_string();
                }
            };
            (child, format!("http://{addr}"))
        }
    };
    let (mut child, base) = serve(&t).await;
    let url = format!("{base}/api/v1/queues/DLQ.kill.jobs/move");
    // The call ends with the process (its answer is lost): only the rows count.
    let retry = tokio::spawn(async move {
        let _ = tokio::task::spawn_blocking(move || {
            ureq::post(&url)
                .set("Content-Type", "application/json")
                .send_string(r#"{"all": true}"#)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
    });
    // Kill it once some messages have moved.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let view = call("GET", format!("{base}/api/v1/queues/kill.jobs"), None, None).await;
        if view.status == 200 && view.json["queue_size"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no message moved: {}",
            view.json
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    retry.abort();

    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let left = stored(&b, dlq).await;
    let moved = stored(&b, "queue://kill.jobs").await;
    assert!(
        !moved.is_empty() && !left.is_empty(),
        "killed midway: {} moved, {} left",
        moved.len(),
        left.len()
    );
    let mut all: Vec<String> = left
        .iter()
        .chain(&moved)
        .map(|(_, id)| id.clone())
        .collect();
    all.sort();
    let mut expected = before.clone();
    expected.sort();
    assert_eq!(all, expected, "every message in exactly one queue");
    let rest = b
        .move_messages(dlq, None, ebb::admin::Selection::All { after: 0 }, 10_000)
        .await
        .unwrap();
    assert_eq!(rest.taken as usize, left.len());
    assert_eq!(stored(&b, "queue://kill.jobs").await.len(), N);
    assert!(stored(&b, dlq).await.is_empty());
    b.shutdown().await.unwrap();
}

/// The admin API lists the STOMP connections open now, with their client id and
/// subscriptions, and closes one: its client gets an ERROR saying an operator
/// closed it and the socket ends; the other connection goes on.
async fn operators_list_and_close_connections(t: TestStore) {
    use ebb::stomp::frame::{Command, Frame};
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let config = ConnectionConfig::default();
    let tcp = serve_with(b.clone(), config.clone()).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.connections = config.connections.clone();
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let base = format!("http://{}", server.local_addr());

    let mut billing = Client::connected(tcp.addr, Some("billing")).await;
    billing
        .send(
            Frame::new(Command::Subscribe)
                .header("destination", "/queue/conn.jobs")
                .header("id", "0")
                .header("receipt", "s"),
        )
        .await
        .unwrap();
    receipt(&mut billing, "s").await;
    let mut other = Client::connected(tcp.addr, None).await;
    other
        .send(
            Frame::new(Command::Send)
                .header("destination", "/queue/conn.jobs")
                .header("receipt", "r")
                .body("x"),
        )
        .await
        .unwrap();
    let list = call("GET", format!("{base}/api/v1/connections"), None, None).await;
    assert_eq!(list.status, 200, "{}", list.json);
    let open = list.json["connections"].as_array().unwrap();
    assert_eq!(open.len(), 2, "{}", list.json);
    let billing_entry = open
        .iter()
        .find(|c| c["client_id"] == "billing")
        .unwrap_or_else(|| panic!("no billing: {}", list.json));
    assert_eq!(billing_entry["subscriptions"], 1);
    assert_eq!(billing_entry["transport"], "tcp");
    assert_eq!(billing_entry["connected"], true);
    let session = billing_entry["session"].as_str().unwrap().to_string();

    let closed = call(
        "DELETE",
        format!("{base}/api/v1/connections/{session}"),
        None,
        None,
    )
    .await;
    assert_eq!(closed.status, 204, "{}", closed.json);
    // Billing may get the message first (it was sent to its queue): then the ERROR.
    let mut error = None;
    while let Some(frame) = billing.frame().await {
        if frame.command == Command::Error {
            error = Some(frame);
            break;
        }
    }
    let error = error.expect("an ERROR before the close");
    assert!(
        error
            .get("message")
            .unwrap()
            .contains("closed by an operator"),
        "{error:?}"
    );
    assert!(billing.closed().await);
    receipt(&mut other, "r").await;
    let mut left = call("GET", format!("{base}/api/v1/connections"), None, None).await;
    for _ in 0..100 {
        if left.json["connections"].as_array().unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = call("GET", format!("{base}/api/v1/connections"), None, None).await;
    }
    assert_eq!(
        left.json["connections"].as_array().unwrap().len(),
        1,
        "{}",
        left.json
    );
    let again = call(
        "DELETE",
        format!("{base}/api/v1/connections/{session}"),
        None,
        None,
    )
    .await;
    assert_eq!(again.status, 404, "{}", again.json);
    drop((billing, other));
    server.stop().await;
    tcp.stop().await;
}

/// What a page of another site could make the operator's browser send is refused: a
/// change from another `Origin` (403), a POST that is not JSON, as an HTML form
/// sends (415), and, without users, a WebSocket from another origin (403), unless
/// that origin is allowed; the same calls from this server's own pages, or from
/// clients that send no `Origin`, work.
async fn pages_of_other_sites_cannot_change_anything(t: TestStore) {
    let (b, server, base) = http_server(&t, |o| {
        o.allowed_origins = vec!["https://app.example".into()];
        o.stomp = Some(ConnectionConfig::default());
    })
    .await;
    b.send("queue://api.csrf", Message::new("kept"))
        .await
        .unwrap();
    let host = base.trim_start_matches("http://").to_string();
    let purge = format!("{base}/api/v1/queues/api.csrf/purge");
    let evil = [("Origin", "http://evil.example")];
    let refused = call_with("POST", purge.clone(), Some("{}"), None, &evil).await;
    assert_eq!(refused.status, 403, "{}", refused.json);
    assert!(refused.json["error"]
        .as_str()
        .unwrap()
        .contains("cross-origin"));
    let form = call_with(
        "POST",
        purge.clone(),
        None,
        None,
        &[("Content-Type", "application/x-www-form-urlencoded")],
    )
    .await;
    assert_eq!(form.status, 415, "{}", form.json);
    let delete = call_with(
        "DELETE",
        format!("{base}/api/v1/connections/ebb-1"),
        None,
        None,
        &evil,
    )
    .await;
    assert_eq!(delete.status, 403, "{}", delete.json);
    assert_eq!(
        b.store().count_messages("queue://api.csrf").await.unwrap(),
        1
    );
    // Reading is not a change: another site's page may not read the answer anyway.
    let read = call_with(
        "GET",
        format!("{base}/api/v1/queues/api.csrf"),
        None,
        None,
        &evil,
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.json);

    let own = format!("http://{host}");
    let allowed = call_with(
        "POST",
        purge.clone(),
        Some("{}"),
        None,
        &[("Origin", own.as_str())],
    )
    .await;
    assert_eq!(
        (allowed.status, &allowed.json["taken"]),
        (200, &Value::from(1)),
        "{}",
        allowed.json
    );
    let listed = call_with(
        "POST",
        purge,
        Some("{}"),
        None,
        &[("Origin", "https://app.example")],
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.json);

    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let ws = |origin: &str| {
        let mut request = format!("ws://{host}/stomp").into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
        request
            .headers_mut()
            .insert("Origin", origin.parse().unwrap());
        tokio_tungstenite::connect_async(request)
    };
    match ws("http://evil.example").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403)
        }
        other => panic!("a WebSocket from another origin was not refused: {other:?}"),
    }
    assert!(ws("https://app.example").await.is_ok(), "an allowed origin");
    assert!(ws(&own).await.is_ok(), "this server's own pages");
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// The HTTP server's own defences: an address's connections are capped (one more
/// is served for health probes only: another route gets 503 naming the cap, and
/// the connection ends after it) and an idle connection is closed after the header-read
/// timeout, after which the address is served again; a login is checked before a
/// body is read (a wrong password with a 10 MB body announced and none sent is
/// answered at once); an address with too many refused logins gets 429 without a
/// check, while others go on.
async fn the_http_server_bounds_connections_and_logins(t: TestStore) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let security = Security {
        // Five refusals are counted however slow the machine (each is a password
        // hash).
        login_guard: std::sync::Arc::new(ebb::login_guard::LoginGuard::new(
            Duration::from_secs(600),
            ebb::login_guard::MAX_FAILED_LOGINS,
        )),
        temp_destination_authorization_entry: None,
        users: vec![User {
            login: "ops".into(),
            password_hash: hash_password("right").unwrap(),
            certificate_subject: None,
            groups: vec!["admin".into()],
        }],
        authorization: vec![],
    };
    let (b, server, base) = http_server(&t, |o| {
        o.security = std::sync::Arc::new(security);
        o.max_connections_per_address = 2;
    })
    .await;
    let addr = server.local_addr();
    let idle_a = tokio::net::TcpStream::connect(addr).await.unwrap();
    let idle_b = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server accepts in the kernel's order, one at a time: the two idle ones hold
    // their slots before the third is looked at.
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /api/v1/broker HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(
        ebb::http::HEADER_READ_TIMEOUT / 2,
        third.read_to_end(&mut got),
    )
    .await;
    let got = String::from_utf8_lossy(&got);
    assert!(
        matches!(read, Ok(Ok(_))) && got.starts_with("HTTP/1.1 503"),
        "a third connection from one address gets 503 and ends: {read:?} {got}"
    );
    assert!(got.contains("max_connections_per_address"), "{got}");
    // The idle ones are closed by the header-read timeout; then the address is served.
    for mut idle in [idle_a, idle_b] {
        let mut sink = Vec::new();
        let closed = tokio::time::timeout(
            ebb::http::HEADER_READ_TIMEOUT * 3,
            idle.read_to_end(&mut sink),
        )
        .await;
        assert!(closed.is_ok(), "an idle connection was never closed");
    }
    let alive = call("GET", format!("{base}/healthz"), None, None).await;
    assert_eq!(alive.status, 200);

    // A wrong password is answered before the body it announces is read.
    let mut big = tokio::net::TcpStream::connect(addr).await.unwrap();
    use base64::Engine;
    let wrong = base64::engine::general_purpose::STANDARD.encode("ops:wrong");
    big.write_all(
        format!(
            "POST /api/v1/queues/api.big/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic {wrong}\r\n\
             Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 64];
    let n = tokio::time::timeout(ebb::test_util::PATIENCE, big.read(&mut head))
        .await
        .expect("answered without its body")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    drop(big);

    // Four more refusals make five from this address: then 429, with no check.
    for _ in 0..4 {
        let refused = call(
            "GET",
            format!("{base}/api/v1/broker"),
            None,
            Some("ops:wrong"),
        )
        .await;
        assert_eq!(refused.status, 401, "{}", refused.json);
    }
    let locked = call(
        "GET",
        format!("{base}/api/v1/broker"),
        None,
        Some("ops:wrong"),
    )
    .await;
    assert_eq!(locked.status, 429, "{}", locked.json);
    assert!(locked.json["error"].as_str().unwrap().contains("try again"));
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A WebSocket STOMP client (`v12.stomp`) subscribes at `/stomp`; what a TCP client
/// sends reaches it; its receipts and ERRORs work as over TCP; the connection limits
/// count both transports.
async fn stomp_over_websocket_carries_the_same_sessions(t: TestStore) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message as Ws;

    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let config = ConnectionConfig {
        max_connections_per_address: 2,
        ..ConnectionConfig::default()
    };
    let tcp = serve_with(b.clone(), config.clone()).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.stomp = Some(config);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let url = format!("ws://{}/stomp", server.local_addr());

    let open = || async {
        let mut request = url.clone().into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "v12.stomp".parse().unwrap());
        let (ws, response) = tokio_tungstenite::connect_async(request).await.unwrap();
        assert_eq!(
            response.headers().get("sec-websocket-protocol").unwrap(),
            "v12.stomp"
        );
        ws
    };
    // Reads WebSocket messages until `text` appears in what arrived; returns all of it.
    async fn read_until(
        ws: &mut (impl futures::Stream<Item = Result<Ws, tokio_tungstenite::tungstenite::Error>>
                  + Unpin),
        text: &str,
    ) -> String {
        let mut got = String::new();
        while !got.contains(text) {
            let next = tokio::time::timeout(ebb::test_util::PATIENCE, ws.next())
                .await
                .unwrap_or_else(|_| panic!("no `{text}` within 10 s; got {got:?}"));
            match next {
                Some(Ok(Ws::Text(t))) => got.push_str(&t),
                Some(Ok(Ws::Binary(bytes))) => got.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Ok(_)) => {}
                other => panic!("the WebSocket ended: {other:?}; got {got:?}"),
            }
        }
        got
    }
    let mut ws = open().await;
    ws.send(Ws::Text(
        "CONNECT\naccept-version:1.2\nhost:ebb\n\n\0".into(),
    ))
    .await
    .unwrap();
    assert!(read_until(&mut ws, "\0").await.starts_with("CONNECTED\n"));
    // A SUBSCRIBE split over two WebSocket messages: the codec reads a stream.
    ws.send(Ws::Text(
        "SUBSCRIBE\ndestination:/queue/ws.in\nid:0\n".into(),
    ))
    .await
    .unwrap();
    ws.send(Ws::Text("receipt:r1\n\n\0".into())).await.unwrap();
    assert!(read_until(&mut ws, "receipt-id:r1")
        .await
        .contains("RECEIPT"));

    let mut sender = Client::connected(tcp.addr, None).await;
    sender
        .send(
            ebb::stomp::frame::Frame::new(ebb::stomp::frame::Command::Send)
                .header("destination", "/queue/ws.in")
                .header("persistent", "true")
                .body("over tcp, out over ws"),
        )
        .await
        .unwrap();
    let delivered = read_until(&mut ws, "over tcp, out over ws").await;
    assert!(delivered.starts_with("MESSAGE\n"), "{delivered}");
    assert!(
        delivered.contains("destination:/queue/ws.in"),
        "{delivered}"
    );

    // A bad frame gets its ERROR over the WebSocket, as over TCP.
    ws.send(Ws::Text("SEND\ndestination:nowhere\n\nx\0".into()))
        .await
        .unwrap();
    let error = read_until(&mut ws, "\0").await;
    assert!(error.starts_with("ERROR\n"), "{error}");

    // The server closes after its ERROR: the client reads the Close (and answers it).
    let closed = tokio::time::timeout(ebb::test_util::PATIENCE, async {
        while let Some(Ok(message)) = ws.next().await {
            if message.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the WebSocket was not closed after its ERROR"
    );
    drop(ws);
    // Two connections from 127.0.0.1 are the most: the TCP sender and a new WebSocket,
    // once the server has let go of the first one (closed by its ERROR): until then a
    // new one is refused, so try again until one is served.
    let second = ebb::test_util::poll_until("a second WebSocket is served", || async {
        let mut ws = open().await;
        ws.send(Ws::Text(
            "CONNECT\naccept-version:1.2\nhost:ebb\n\n\0".into(),
        ))
        .await
        .ok()?;
        let answer = read_until(&mut ws, "\0").await;
        if answer.starts_with("CONNECTED") {
            return Some(ws);
        }
        assert!(answer.contains("max_connections_per_address"), "{answer}");
        None
    })
    .await;
    let mut third = open().await;
    let refused = read_until(&mut third, "\0").await;
    assert!(
        refused.starts_with("ERROR") && refused.contains("max_connections_per_address"),
        "{refused}"
    );
    drop((second, third, sender));
    server.stop().await;
    tcp.stop().await;
}

/// Hardening issue, point 7: before its session answers, a STOMP WebSocket reads at
/// most `PRE_CONNECT_BUDGET` (132 KiB) from its socket, as TCP reads one 64 KiB frame
/// before CONNECT. A 4 MiB message sent before CONNECT is never read whole (it was:
/// buffered, then refused as a frame over the pre-CONNECT limit): reading stops at the
/// budget and the client gets an ERROR naming it. A client that pipelines a 1 MiB
/// SEND right behind its CONNECT only waits for the answer.
async fn a_websocket_reads_little_before_connect(t: TestStore) {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message as Ws;

    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let config = ConnectionConfig {
        stall_timeout_ms: 1_500,
        ..ConnectionConfig::default()
    };
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.stomp = Some(config);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let url = format!("ws://{}/stomp", server.local_addr());
    // Everything the server writes until it closes, as text.
    async fn all_of(
        mut ws: impl futures::Stream<Item = Result<Ws, tokio_tungstenite::tungstenite::Error>> + Unpin,
        until: &str,
    ) -> String {
        let mut got = String::new();
        while !got.contains(until) {
            match tokio::time::timeout(ebb::test_util::PATIENCE, ws.next()).await {
                Ok(Some(Ok(Ws::Text(t)))) => got.push_str(&t),
                Ok(Some(Ok(Ws::Binary(b)))) => got.push_str(&String::from_utf8_lossy(&b)),
                Ok(Some(Ok(_))) => {}
                other => panic!("ended before `{until}`: {other:?}; got {got:?}"),
            }
        }
        got
    }

    let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    let (mut to_server, from_server) = ws.split();
    let mut big = b"SEND\ndestination:/queue/ws.big\n\n".to_vec();
    big.resize(4 << 20, b'A');
    big.push(0);
    let sending = tokio::spawn(async move {
        let _ = to_server.send(Ws::Binary(big)).await;
        to_server
    });
    let answer = all_of(from_server, "\0").await;
    assert!(
        answer
            .contains("a WebSocket message before CONNECT does not fit in the pre-CONNECT limit of 135168 bytes"),
        "{answer}"
    );
    sending.abort();

    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    ws.send(Ws::Text(
        "CONNECT\naccept-version:1.2\nhost:ebb\n\n\0".into(),
    ))
    .await
    .unwrap();
    let mut send = b"SEND\ndestination:/queue/ws.big\npersistent:true\nreceipt:big\n\n".to_vec();
    send.resize(send.len() + (1 << 20), b'B');
    send.push(0);
    ws.send(Ws::Binary(send)).await.unwrap();
    let answers = all_of(&mut ws, "receipt-id:big").await;
    assert!(answers.starts_with("CONNECTED\n"), "{answers}");
    assert_eq!(b.store().count_messages("queue://ws.big").await.unwrap(), 1);
    server.stop().await;
}

/// Refused logins count per client address across protocols (hardening issue, point
/// 8: STOMP had no per-address back-off, and parallel HTTP logins got past the
/// 5-in-10-s lockout). 12 STOMP CONNECTs with a wrong passcode at once from one
/// address: exactly 5 passcodes are checked (the others wait for those, then are
/// refused without a check); then the HTTP API refuses that address with 429, and the
/// counts are in the guard and in `/metrics`.
async fn refused_logins_are_throttled_per_address_across_protocols(t: TestStore) {
    let security = std::sync::Arc::new(Security {
        login_guard: Default::default(),
        temp_destination_authorization_entry: None,
        users: vec![User {
            login: "ops".into(),
            password_hash: hash_password("right").unwrap(),
            certificate_subject: None,
            groups: vec!["admin".into()],
        }],
        authorization: vec![],
    });
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let config = ConnectionConfig {
        security: std::sync::Arc::clone(&security),
        ..ConnectionConfig::default()
    };
    let tcp = serve_with(b.clone(), config).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.security = std::sync::Arc::clone(&security);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let base = format!("http://{}", server.local_addr());

    let guesses: Vec<_> = (0..12)
        .map(|i| {
            let addr = tcp.addr;
            actix_rt::spawn(async move {
                let mut c = Client::open(addr).await;
                c.write(
                    format!("CONNECT\naccept-version:1.2\nlogin:ops\npasscode:guess{i}\n\n\0")
                        .as_bytes(),
                )
                .await;
                let answer = c.frame().await.expect("an ERROR");
                assert_eq!(answer.command, ebb::stomp::frame::Command::Error);
                answer.get("message").unwrap_or_default().to_string()
            })
        })
        .collect();
    let mut checked = 0;
    let mut throttled = 0;
    for guess in guesses {
        let message = guess.await.unwrap();
        if message.contains("wrong passcode") {
            checked += 1;
        } else {
            assert!(message.contains("too many refused logins"), "{message}");
            throttled += 1;
        }
    }
    assert_eq!((checked, throttled), (5, 7));
    assert_eq!(security.login_guard.failures_total(), 5);
    assert_eq!(security.login_guard.throttled_total(), 7);

    // The same address over HTTP: refused without a check, whatever the credentials.
    for credentials in ["ops:wrong", "ops:right"] {
        let locked = call(
            "GET",
            format!("{base}/api/v1/broker"),
            None,
            Some(credentials),
        )
        .await;
        assert_eq!(locked.status, 429, "{credentials}: {}", locked.json);
        assert!(locked.json["error"].as_str().unwrap().contains("try again"));
    }
    assert_eq!(security.login_guard.throttled_total(), 9);
    let metrics = tokio::task::spawn_blocking(move || {
        ureq::get(&format!("{base}/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    })
    .await
    .unwrap();
    for line in [
        "ebb_login_failures_total{protocol=\"stomp\"}",
        "ebb_logins_throttled_total{protocol=\"http\"}",
    ] {
        assert!(metrics.contains(line), "{line} not in /metrics");
    }
    server.stop().await;
    tcp.stop().await;
}

/// Scheduled messages through the admin API: listed in due order, in pages whose
/// `next` goes on after the last, with their destination and due time; one cancelled
/// is never delivered, the others are; a wrong id is `404`.
async fn scheduled_messages_are_listed_and_cancelled(t: TestStore) {
    let (b, server, base) = http_server(&t, |_| {}).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let due = now + 1_500;
    for (i, offset) in [30, 10, 20].into_iter().enumerate() {
        b.send(
            "queue://api.later",
            Message::new(format!("m{i}")).deliver_at(due + offset),
        )
        .await
        .unwrap();
    }
    let first = call(
        "GET",
        format!("{base}/api/v1/scheduled?limit=2"),
        None,
        None,
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.json);
    let page = first.json["messages"].as_array().unwrap().clone();
    assert_eq!(page.len(), 2, "{}", first.json);
    assert_eq!(page[0]["due_ms"], due + 10);
    assert_eq!(page[1]["due_ms"], due + 20);
    assert_eq!(page[0]["destination"], "queue://api.later");
    let next = first.json["next"].as_str().unwrap().to_string();
    let rest = call(
        "GET",
        format!("{base}/api/v1/scheduled?after={}", urlencode(&next)),
        None,
        None,
    )
    .await;
    let rest_page = rest.json["messages"].as_array().unwrap().clone();
    assert_eq!(rest_page.len(), 1, "{}", rest.json);
    // A page after a cursor also says whether another follows.
    let middle = call(
        "GET",
        format!(
            "{base}/api/v1/scheduled?limit=1&after={}",
            urlencode(page[0]["id"].as_str().unwrap())
        ),
        None,
        None,
    )
    .await;
    assert_eq!(
        middle.json["messages"][0]["due_ms"],
        due + 20,
        "{}",
        middle.json
    );
    assert_eq!(middle.json["next"], page[1]["id"], "{}", middle.json);
    assert_eq!(rest_page[0]["due_ms"], due + 30);
    assert!(rest.json["next"].is_null());

    // The backlog; and cancelling all of one destination leaves the others'.
    for i in 0..2 {
        b.send(
            "queue://api.other",
            Message::new(format!("o{i}")).deliver_at(due),
        )
        .await
        .unwrap();
    }
    let backlog = call("GET", format!("{base}/api/v1/scheduler"), None, None).await;
    assert_eq!(backlog.status, 200, "{}", backlog.json);
    assert_eq!(backlog.json["scheduled"], 5, "{}", backlog.json);
    assert_eq!(backlog.json["next_due_ms"], due, "{}", backlog.json);
    assert_eq!(backlog.json["scheduled_at_least"], false);
    let all = call(
        "DELETE",
        format!("{base}/api/v1/scheduled?destination=queue://api.other"),
        None,
        None,
    )
    .await;
    assert_eq!(all.status, 200, "{}", all.json);
    assert_eq!(all.json["cancelled"], 2, "{}", all.json);
    let backlog = call("GET", format!("{base}/api/v1/scheduler"), None, None).await;
    assert_eq!(backlog.json["scheduled"], 3, "{}", backlog.json);
    assert_eq!(backlog.json["next_due_ms"], due + 10, "{}", backlog.json);
    let bad = call(
        "DELETE",
        format!("{base}/api/v1/scheduled?destination=nowhere"),
        None,
        None,
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.json);

    // Cancel the one due second (body m2).
    let id = page[1]["id"].as_str().unwrap().to_string();
    let cancelled = call(
        "DELETE",
        format!("{base}/api/v1/scheduled/{}", urlencode(&id)),
        None,
        None,
    )
    .await;
    assert_eq!(cancelled.status, 204, "{}", cancelled.json);
    let again = call(
        "DELETE",
        format!("{base}/api/v1/scheduled/{}", urlencode(&id)),
        None,
        None,
    )
    .await;
    assert_eq!(again.status, 404, "{}", again.json);
    assert_eq!(again.json["code"], "not-found");
    let mut sub = b
        .subscribe("queue://api.later", SubscribeOptions::non_durable())
        .await
        .unwrap();
    let got: Vec<String> = take(&mut sub, 2).await.iter().map(body).collect();
    assert_eq!(got, ["m1", "m0"]);
    assert!(quiet(&mut sub).await.is_none(), "the cancelled one came");
    let empty = call("GET", format!("{base}/api/v1/scheduled"), None, None).await;
    assert_eq!(empty.json["messages"].as_array().unwrap().len(), 0);
    // A queue that holds only a scheduled message exists (it is listed), shows it in
    // no queue size, and deleting it cancels what is scheduled for it.
    b.send(
        "queue://api.only-scheduled",
        Message::new("later").deliver_at(due + 60_000),
    )
    .await
    .unwrap();
    let only = call(
        "GET",
        format!("{base}/api/v1/queues/api.only-scheduled"),
        None,
        None,
    )
    .await;
    assert_eq!(only.status, 200, "{}", only.json);
    assert_eq!(only.json["queue_size"], 0, "{}", only.json);
    let deleted = call(
        "DELETE",
        format!("{base}/api/v1/queues/api.only-scheduled"),
        None,
        None,
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.json);
    assert_eq!(deleted.json["deleted"]["scheduled"], 1, "{}", deleted.json);
    assert_eq!(b.schedule_backlog().await.unwrap().scheduled, 0);

    // /metrics counts them (the recorder is the process's: other tests add to it).
    let url = format!("{base}/metrics");
    let text =
        tokio::task::spawn_blocking(move || ureq::get(&url).call().unwrap().into_string().unwrap())
            .await
            .unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    };
    assert!(value("ebb_scheduled_released_total") >= 2.0, "{text}");
    assert!(text.contains("ebb_scheduled_messages "), "{text}");
    assert!(
        text.contains("ebb_scheduled_next_due_timestamp_seconds "),
        "{text}"
    );
    assert!(
        value("ebb_scheduled_lateness_seconds_count") >= 2.0,
        "{text}"
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// The history behind the console's charts (issue 36), at a step of 200 ms: a
/// queue's depth rises while messages wait and falls when a consumer takes them,
/// with the rates of both; the broker's series sums its destinations; the sorted
/// table shows the deepest first; bad windows are `400`, an unknown destination
/// `404`.
async fn history_follows_rates_and_depth(t: TestStore) {
    let (b, server, base) = http_server(&t, |o| {
        o.history_step = Duration::from_millis(200);
    })
    .await;
    let api = format!("{base}/api/v1");
    // The last value of `field` in a history answer.
    let last = |json: &Value, field: &str| json[field].as_array().and_then(|a| a.last().cloned());
    let wait_depth = |url: String, depth: u64| async move {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let answer = call("GET", url.clone(), None, None).await;
            assert_eq!(answer.status, 200, "{}", answer.json);
            if last(&answer.json, "depth") == Some(json!(depth)) {
                return answer.json;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "depth never reached {depth}: {}",
                answer.json
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    for i in 0..40 {
        b.send("queue://api.chart", Message::new(format!("m{i}")))
            .await
            .unwrap();
    }
    b.send("queue://api.small", Message::new("one"))
        .await
        .unwrap();
    // 30 s: within the 180 fine points of 200 ms.
    let queue = format!("{api}/queues/api.chart/history?window=30s");
    let risen = wait_depth(queue.clone(), 40).await;
    let enqueued: f64 = risen["enqueued_per_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(enqueued > 0.0, "no enqueue rate: {risen}");
    assert_eq!(risen["tracked"], true);
    assert_eq!(risen["step_ms"], 200);
    let points = risen["t_ms"].as_array().unwrap().len();
    for column in [
        "depth",
        "enqueued_per_s",
        "dequeued_per_s",
        "in_flight",
        "consumers",
    ] {
        assert_eq!(risen[column].as_array().unwrap().len(), points, "{column}");
    }
    let deepest = call(
        "GET",
        format!("{api}/broker/destinations?sort=depth&order=desc&limit=1"),
        None,
        None,
    )
    .await;
    assert_eq!(deepest.json["matched"], 2, "{}", deepest.json);
    assert_eq!(deepest.json["rows"][0]["destination"], "queue://api.chart");
    assert_eq!(deepest.json["rows"][0]["depth"], 40);
    assert!(
        !deepest.json["rows"][0]["sparkline"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{}",
        deepest.json
    );
    let filtered = call(
        "GET",
        format!("{api}/broker/destinations?filter=SMALL"),
        None,
        None,
    )
    .await;
    assert_eq!(filtered.json["rows"][0]["destination"], "queue://api.small");
    assert_eq!(filtered.json["matched"], 1);

    let mut consumer = b
        .subscribe("queue://api.chart", SubscribeOptions::non_durable())
        .await
        .unwrap();
    for _ in 0..40 {
        let m = next(&mut consumer).await;
        consumer.ack(&m).await.unwrap();
    }
    let fallen = wait_depth(queue.clone(), 0).await;
    let depths: Vec<u64> = fallen["depth"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    let top = depths.iter().position(|d| *d == 40).expect("40 deep once");
    assert!(depths[top..].contains(&0), "{depths:?}");
    let dequeued = fallen["dequeued_per_s"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_f64().unwrap() > 0.0);
    assert!(dequeued, "no dequeue rate: {fallen}");
    assert!(
        fallen["consumers"].as_array().unwrap().contains(&json!(1)),
        "{fallen}"
    );

    let broker = call(
        "GET",
        format!("{api}/broker/history?window=30s"),
        None,
        None,
    )
    .await;
    assert_eq!(broker.status, 200, "{}", broker.json);
    let depths = broker.json["depth"].as_array().unwrap();
    assert!(
        depths.contains(&json!(41)),
        "both queues summed: {}",
        broker.json
    );
    assert!(broker.json["memory"]["series"].as_u64().unwrap() >= 1);
    assert!(broker.json["memory"]["series_bytes"].as_u64().unwrap() > 0);

    for bad in ["0s", "7d", "fifteen", "25h", "-1m"] {
        let refused = call(
            "GET",
            format!("{api}/broker/history?window={bad}"),
            None,
            None,
        )
        .await;
        assert_eq!(refused.status, 400, "{bad}: {}", refused.json);
        assert!(
            refused.json["error"]
                .as_str()
                .unwrap()
                .contains("bad window"),
            "{}",
            refused.json
        );
    }
    let unknown = call("GET", format!("{api}/queues/api.never/history"), None, None).await;
    assert_eq!(unknown.status, 404, "{}", unknown.json);
    let bad_sort = call(
        "GET",
        format!("{api}/broker/destinations?sort=size"),
        None,
        None,
    )
    .await;
    assert_eq!(bad_sort.status, 400, "{}", bad_sort.json);
    drop(consumer);
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// The history's memory on a broker of 10,000 queues, 100 of them sent to (issue
/// 36): the bytes the broker counts (`memory` of `GET /api/v1/broker/history`) are
/// the 100 active queues' series, young so holding only their few points, and one
/// reading per running queue: the 9,900 idle ones have no series. (SQLite only: what is counted is memory,
/// the same on either store; the cost of a reading of 10,000 destinations is
/// measured by `cargo bench --bench history`.)
#[actix_rt::test]
async fn history_keeps_series_only_for_active_destinations() {
    let t = TestStore::sqlite();
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let name = |i: usize| format!("queue://h.{i:05}");
    futures::stream::iter(0..10_000)
        .map(|i| {
            let b = b.clone();
            async move { b.send(name(i).as_str(), Message::new("x")).await.unwrap() }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.history_step = Duration::from_millis(500);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let api = format!("http://{}/api/v1", server.local_addr());
    let points = || async {
        let h = call(
            "GET",
            format!("{api}/broker/history?window=60s"),
            None,
            None,
        )
        .await;
        assert_eq!(h.status, 200, "{}", h.json);
        h.json
    };
    // Three rounds: 100 queues (every 100th) sent to, then a new reading.
    for round in 0..3 {
        for i in (0..10_000).step_by(100) {
            b.send(name(i).as_str(), Message::new(format!("r{round}")))
                .await
                .unwrap();
        }
        let before = points().await["t_ms"].as_array().unwrap().len();
        let deadline = std::time::Instant::now() + PATIENCE * 4;
        while points().await["t_ms"].as_array().unwrap().len() <= before {
            assert!(std::time::Instant::now() < deadline, "no new reading");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let memory = points().await["memory"].clone();
    let n = |field: &str| memory[field].as_u64().unwrap() as usize;
    let key_bytes = name(0).len();
    assert_eq!(n("series"), 100, "{memory}");
    // Young series hold their few points, not the day's worth they may grow to: a
    // full fine ring and up to 8 coarse points (the first 4 min at these 500 ms
    // steps) stay under half of it.
    assert!(
        n("series_bytes") < 100 * (ebb::history::SERIES_BYTES / 2 + key_bytes),
        "{memory}"
    );
    assert_eq!(n("readings"), 10_000, "{memory}");
    // Each reading, its name in an `Arc` (two counts before it), and a place in the
    // set of the 100 that moved (a pointer and a control byte each).
    let readings = 10_000 * (ebb::history::READING_BYTES + key_bytes + 16);
    assert!(
        (readings..readings + 256 * 17).contains(&n("reading_bytes")),
        "{memory}"
    );
    assert!(n("broker_bytes") > 0, "{memory}");
    assert!(
        n("broker_bytes") < ebb::history::BROKER_SERIES_BYTES,
        "{memory}"
    );
    let sent_to = call(
        "GET",
        format!("{api}/broker/destinations?sort=depth&order=desc&limit=100"),
        None,
        None,
    )
    .await;
    let rows = sent_to.json["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["depth"] == 4 && !r["sparkline"].as_array().unwrap().is_empty()),
        "the 100 queues sent to, each 4 deep, with a sparkline: {}",
        sent_to.json
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// `%`-encodes what a path or query value cannot hold as it is.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

on_every_backend!(
    #[actix_rt::test]
    history_follows_rates_and_depth,
    scheduled_messages_are_listed_and_cancelled,
    health_and_readiness_say_what_they_check,
    refused_logins_are_throttled_per_address_across_protocols,
    a_websocket_reads_little_before_connect,
    the_api_lists_and_browses_without_changing_anything,
    listing_pages_cover_stored_destinations_once,
    the_api_sends_and_removes_subscriptions,
    bad_input_gets_a_4xx_with_a_json_error,
    users_need_a_login_and_changes_the_admin_group,
    the_scheduler_backlog_is_for_the_admin_group,
    reads_need_the_stomp_read_right,
    requests_for_other_host_names_are_refused,
    a_body_that_trickles_in_gets_408,
    health_probes_are_answered_while_slow_bodies_hold_every_slot,
    stomp_over_websocket_carries_the_same_sessions,
    purge_deletes_what_waits_and_leaves_what_a_consumer_holds,
    destinations_are_deleted_when_nobody_uses_them,
    dead_letters_move_back_exactly_once,
    a_message_the_dlq_cannot_take_stays_in_its_queue,
    a_retry_killed_midway_loses_and_doubles_nothing,
    operators_list_and_close_connections,
    pages_of_other_sites_cannot_change_anything,
    the_http_server_bounds_connections_and_logins,
);
