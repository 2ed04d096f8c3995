//! The metrics endpoint reports what the broker really holds: a scrape of
//! `/metrics` shows the enqueued count, the queue size (stored rows) before and after
//! expiry and cleanup, the expired count, and the `ebb_expiry_page_rows` histogram
//! with one observation per expiry page; `ebb stat` prints the same numbers, and says
//! plainly when nothing listens. `ebb serve` takes the address from `--metrics` or
//! from `[metrics] listen`, the flag first.
//!
//! The Prometheus recorder is global to the process: every endpoint in this file
//! renders the one recorder ([`ebb::metrics::install_recorder`] installs it once), so
//! each test uses topic names of its own and reads only its own series.

use std::time::Duration;

use crate::run_ebb;
use ebb::cli::stat::{from_samples, parse, Sample};
use ebb::http::{HttpOptions, HttpServer};
use ebb::test_util::*;
use ebb::{Message, SubscribeOptions};

/// Scrapes `addr` until `done` holds for the samples (30 s limit, as `wait_for`).
async fn scrape_until(addr: &str, done: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = ebb::cli::stat::fetch(addr)
            .await
            .expect("the endpoint answers");
        let samples = parse(&text).expect("valid Prometheus text");
        if done(&samples) {
            return samples;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "condition never held; last scrape:\n{text}"
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of `name{destination="key"}`, if the scrape has it.
fn value(samples: &[Sample], name: &str, key: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && s.label("destination") == Some(key))
        .map(|s| s.value)
}

/// A topic with an offline durable subscription: 3 messages that expire, then 5 that
/// do not. The scrape shows 8 enqueued and 8 stored; after housekeeping, 3 expired in
/// one page of 3 rows (histogram count 1, sum 3), and after cleanup 5 stored.
async fn a_scrape_shows_real_values(t: TestStore) {
    let topic = format!(
        "metrics.{}",
        if t.options.schema.is_some() {
            "pg"
        } else {
            "sqlite"
        }
    );
    let key = format!("topic://{topic}");
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let server = HttpServer::start(HttpOptions::new("127.0.0.1:0".parse().unwrap()), b.clone())
        .await
        .expect("the endpoint starts");
    let addr = server.local_addr().to_string();

    drop(
        b.subscribe(&key, SubscribeOptions::durable("ops", "audit"))
            .await
            .unwrap(),
    );
    // Expired by the time the (hour-long) housekeeping period is cut short below.
    let short_ttl = Duration::from_millis(1_000);
    for i in 0..3 {
        let m = Message::new(format!("short {i}")).ttl(short_ttl);
        assert!(b.send(&key, m).await.unwrap().store_id.is_some());
    }
    let expired_at = tokio::time::Instant::now() + short_ttl;
    for i in 0..5 {
        b.send(&key, Message::new(format!("live {i}")))
            .await
            .unwrap();
    }
    let samples = scrape_until(&addr, |s| {
        value(s, "ebb_destination_queue_size", &key) == Some(8.0)
    })
    .await;
    assert_eq!(
        value(&samples, "ebb_destination_enqueued_total", &key),
        Some(8.0)
    );
    assert_eq!(
        value(&samples, "ebb_destination_consumers", &key),
        Some(0.0)
    );
    assert_eq!(
        value(&samples, "ebb_destination_expired_total", &key),
        Some(0.0)
    );
    assert!(samples.iter().any(|s| s.name == "ebb_memory_usage_ratio"));
    assert!(samples.iter().any(|s| s.name == "ebb_producers_blocked"));

    // The short ones expire (a wait for the clock, not for another task); one
    // housekeeping run acks them in one short page.
    tokio::time::sleep_until(expired_at + Duration::from_millis(50)).await;
    b.run_housekeeping(&key).await.unwrap();
    let stats = wait_for(&b, &topic, |s| s.expired == 3 && s.expiry_pages >= 1).await;
    assert_eq!(stats.expiry_pages, 1, "3 rows fit one page of 400");
    let samples = scrape_until(&addr, |s| {
        value(s, "ebb_destination_expired_total", &key) == Some(3.0)
            && value(s, "ebb_expiry_pages_total", &key) == Some(1.0)
    })
    .await;
    assert_eq!(
        value(&samples, "ebb_destination_max_expiry_page_rows", &key),
        Some(3.0)
    );
    // The histogram is the broker's (other tests of this process add their pages):
    // at least this page, with at least its 3 rows, in a bucket above 1 row.
    let broker_wide = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == name && s.label("le").is_none())
            .map(|s| s.value)
    };
    assert!(broker_wide("ebb_expiry_page_rows_count") >= Some(1.0));
    assert!(broker_wide("ebb_expiry_page_rows_sum") >= Some(3.0));
    assert!(
        samples.iter().all(
            |s| !s.name.starts_with("ebb_expiry_page_rows") || s.label("destination").is_none()
        ),
        "the histogram has no destination label"
    );

    // The next run deletes the acked rows: 5 left in the store.
    b.run_housekeeping(&key).await.unwrap();
    wait_for(&b, &topic, |s| s.cleaned_up == 3).await;
    scrape_until(&addr, |s| {
        value(s, "ebb_destination_queue_size", &key) == Some(5.0)
    })
    .await;

    // `ebb stat` (the binary) reads the same numbers.
    let (ok, out, err) = run_ebb(&["stat", "--metrics", &addr]).await;
    assert!(ok, "ebb stat failed: {err}");
    assert!(out.contains("blocked producers  0"), "{out}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no row for {key}:\n{out}"))
        .split_whitespace()
        .collect();
    // destination, queue size, in flight, consumers, producers, enqueued, dequeued,
    // expired, DLQ
    assert_eq!(row, [key.as_str(), "5", "0", "0", "0", "8", "0", "3", "0"]);
    let parsed =
        from_samples(&parse(&ebb::cli::stat::fetch(&addr).await.unwrap()).unwrap()).unwrap();
    assert!(parsed.destinations.iter().any(|d| d.destination == key));

    // `ebb stat --watch` redraws with rates while a producer sends (until it ends).
    // A name of this backend's own: the two runs share the process's recorder.
    let watched = format!("queue://stat.watch.{topic}");
    let sending = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = {
        let (b, sending, watched) = (b.clone(), sending.clone(), watched.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while sending.load(std::sync::atomic::Ordering::Relaxed) {
                b.send(watched.as_str(), Message::new(format!("w{i}")))
                    .await
                    .unwrap();
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let (ok, out, err) = run_ebb(&[
        "stat",
        "--metrics",
        &addr,
        "--watch",
        "--interval",
        "2",
        "--frames",
        "5",
        // Other tests' brokers in this process write the same recorder.
        "--filter",
        &watched["queue://".len()..],
    ])
    .await;
    sending.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(ok, "ebb stat --watch failed: {err}");
    let frames: Vec<&str> = out.split("memory   ").skip(1).collect();
    assert_eq!(frames.len(), 5, "{out}");
    assert!(frames[0].contains("rates    from the next frame"), "{out}");
    let rates: Vec<f64> = frames[1..]
        .iter()
        .filter_map(|f| f.lines().find(|l| l.starts_with(&format!("{watched} "))))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert!(
        rates.iter().any(|r| *r > 0.0),
        "an enqueue rate shows: {out}"
    );
    producer.await.unwrap();

    // Once the endpoint stops, `ebb stat` says what to do.
    server.stop().await;
    let e = ebb::cli::stat::fetch(&addr).await.unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "no broker metrics at {addr}: start ebb serve with --metrics {addr}"
        )),
        "{e}"
    );
    let (ok, _, err) = run_ebb(&["stat", "--metrics", &addr]).await;
    assert!(!ok);
    assert!(err.contains("no broker metrics at"), "{err}");
    b.shutdown().await.unwrap();
}

/// `Broker::stats` lists running destinations in store-key order with their counts,
/// and does not start topics that were never used.
async fn stats_lists_running_destinations(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    assert!(b.stats().await.unwrap().destinations.is_empty());
    drop(
        b.subscribe("topic://zeta", SubscribeOptions::durable("c", "s"))
            .await
            .unwrap(),
    );
    b.send("topic://zeta", Message::new("1")).await.unwrap();
    b.send("topic://alpha", Message::new("1")).await.unwrap();
    let stats = b.stats().await.unwrap();
    let keys: Vec<&str> = stats
        .destinations
        .iter()
        .map(|d| d.destination.as_str())
        .collect();
    assert_eq!(keys, ["topic://alpha", "topic://zeta"]);
    assert_eq!(stats.destinations_total, 2);
    let zeta = &stats.destinations[1];
    assert_eq!((zeta.queue_size, zeta.enqueued_total), (1, 1));
    let alpha = &stats.destinations[0];
    assert_eq!(
        (alpha.queue_size, alpha.enqueued_total),
        (0, 1),
        "no durable subscription: nothing stored"
    );
    // The default limits; one small message stored (for zeta's subscription), nothing
    // held in memory once it was delivered nowhere.
    let u = stats.usage;
    assert_eq!(
        (u.memory_limit_bytes, u.store_limit_bytes),
        (64 << 20, 100 << 30)
    );
    assert_eq!((u.memory_bytes, u.blocked_producers), (0, 0));
    assert_eq!(u.store_bytes, b.store().stored_bytes());
    assert!(u.store_bytes > 0);
    b.shutdown().await.unwrap();
}

/// The sum of `name` over the samples whose label `label` is `value`.
fn labelled(samples: &[Sample], name: &str, label: &str, value: &str) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && s.label(label) == Some(value))
        .map(|s| s.value)
        .sum()
}

/// Routed sends and advisories are counted: two composite sends of three
/// destinations, one virtual topic send to two groups, one advisory. (The recorder is
/// the process's: other tests add to the same counters, so the test waits for at
/// least its own increments.)
async fn routed_sends_and_advisories_are_counted(t: TestStore) {
    let b = broker(&t, policy(0, 400), 2).await;
    let server = HttpServer::start(HttpOptions::new("127.0.0.1:0".parse().unwrap()), b.clone())
        .await
        .expect("the endpoint starts");
    let addr = server.local_addr().to_string();
    let before = parse(&ebb::cli::stat::fetch(&addr).await.unwrap()).unwrap();
    let count =
        |s: &[Sample], name: &str, label: &str, value: &str| labelled(s, name, label, value);
    let mut watch = b
        .subscribe(
            "topic://ActiveMQ.Advisory.Consumer.Queue.Consumer.M.VirtualTopic.Metrics",
            SubscribeOptions::non_durable(),
        )
        .await
        .unwrap();
    let keys = ebb::DestinationKey::parse_composite("/queue/m.a,/queue/m.b,/topic/m.c").unwrap();
    for _ in 0..2 {
        b.send_to_each(&keys, Message::new("x")).await.unwrap();
    }
    // Group M reads the topic's rows (stored once: no copy); group N, a last-value
    // queue, gets a copy.
    for g in ["queue://Consumer.M", "lvq://Consumer.N"] {
        drop(
            b.subscribe(
                format!("{g}.VirtualTopic.Metrics").as_str(),
                SubscribeOptions::non_durable(),
            )
            .await
            .unwrap(),
        );
    }
    b.send("topic://VirtualTopic.Metrics", Message::new("y"))
        .await
        .unwrap();
    take(&mut watch, 1).await;
    let routed = "ebb_routed_sends_total";
    let copies = "ebb_routed_copies_total";
    scrape_until(&addr, |s| {
        count(s, routed, "route", "composite") >= count(&before, routed, "route", "composite") + 2.0
            && count(s, copies, "route", "composite")
                >= count(&before, copies, "route", "composite") + 6.0
            && count(s, routed, "route", "virtual_topic")
                >= count(&before, routed, "route", "virtual_topic") + 1.0
            && count(s, copies, "route", "virtual_topic")
                >= count(&before, copies, "route", "virtual_topic") + 2.0
            && count(s, "ebb_advisories_total", "event", "consumer_added")
                >= count(&before, "ebb_advisories_total", "event", "consumer_added") + 1.0
    })
    .await;
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// Connections are counted by protocol and transport: an MQTT connection adds to
/// `ebb_connections_opened_total{protocol="MQTT"}` and is in `ebb_connections` while
/// it is open. (The recorder is the process's: other tests' connections count too,
/// so the test waits for at least its own.)
async fn connections_are_counted_by_protocol(t: TestStore) {
    let s = ebb::test_util::mqtt::mqtt_server(&t, Default::default()).await;
    let server = HttpServer::start(
        HttpOptions::new("127.0.0.1:0".parse().unwrap()),
        s.broker.clone(),
    )
    .await
    .expect("the endpoint starts");
    let addr = server.local_addr().to_string();
    let before = parse(&ebb::cli::stat::fetch(&addr).await.unwrap()).unwrap();
    let opened = "ebb_connections_opened_total";
    let mqtt = |s: &[Sample], name: &str| {
        s.iter()
            .filter(|x| {
                x.name == name
                    && x.label("protocol") == Some("MQTT")
                    && x.label("transport") == Some("tcp")
            })
            .map(|x| x.value)
            .sum::<f64>()
    };
    let (client, _) = ebb::test_util::mqtt::MqttClient::v3(s.mqtt, "metrics-mqtt", true).await;
    scrape_until(&addr, |now| {
        mqtt(now, opened) >= mqtt(&before, opened) + 1.0 && mqtt(now, "ebb_connections") >= 1.0
    })
    .await;
    drop(client);
    server.stop().await;
    s.stop().await;
}

/// Every running destination counts, however many there are: `Broker::stats` pages
/// through the registry (here 2 keys at a time) and lists all five, their totals
/// included; `/metrics` lists at most `max_destination_series` of them (here 2, in key
/// order) and says how many it left out; and a deleted destination's series are gone
/// from the next refresh on (they used to stay for the life of the process).
async fn every_destination_counts_and_an_ended_one_leaves_metrics(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let backend = if t.options.schema.is_some() {
        "pg"
    } else {
        "sqlite"
    };
    let names: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| format!("queue://series.{backend}.{n}"))
        .collect();
    for (i, name) in names.iter().enumerate() {
        for j in 0..=i {
            b.send(name.as_str(), Message::new(format!("{j}")))
                .await
                .unwrap();
        }
    }
    let hot = format!("topic://series.{backend}.hot");
    drop(
        b.subscribe(&hot, SubscribeOptions::durable("c", "s"))
            .await
            .unwrap(),
    );
    b.send(hot.as_str(), Message::new("h")).await.unwrap();

    let stats = b.stats().await.unwrap();
    let keys: Vec<&str> = stats
        .destinations
        .iter()
        .map(|d| d.destination.as_str())
        .collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.push(&hot);
    assert_eq!(keys, expected, "every destination, in key order");
    assert_eq!(stats.destinations_total, 5);
    assert_eq!(
        stats.totals.queue_size,
        1 + 2 + 3 + 4 + 1,
        "the totals count every destination"
    );
    assert_eq!(b.stats().await.unwrap().destinations, stats.destinations);

    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.max_destination_series = 2;
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let addr = server.local_addr().to_string();
    let listed = |samples: &[Sample]| -> Vec<String> {
        samples
            .iter()
            .filter(|s| s.name == "ebb_destination_queue_size")
            .filter_map(|s| s.label("destination").map(str::to_string))
            .collect()
    };
    let omitted = |samples: &[Sample]| {
        samples
            .iter()
            .find(|s| s.name == "ebb_destination_series_omitted")
            .map(|s| s.value)
    };
    let samples = scrape_until(&addr, |s| omitted(s).is_some()).await;
    assert_eq!(listed(&samples), &names[..2]);
    assert_eq!(omitted(&samples), Some(3.0));
    assert_eq!(
        value(&samples, "ebb_destination_queue_size", &names[1]),
        Some(2.0)
    );

    // Deleting the first queue: the next refresh lists the next one in its place.
    b.delete_destination(names[0].as_str()).await.unwrap();
    let samples = scrape_until(&addr, |s| omitted(s) == Some(2.0)).await;
    assert_eq!(listed(&samples), &names[1..3]);
    assert!(
        samples
            .iter()
            .all(|s| s.label("destination") != Some(names[0].as_str())),
        "no series of the deleted queue is left"
    );
    server.stop().await;
    b.shutdown().await.unwrap();
}

/// A reading of an idle broker runs no store statement: each destination's committed
/// rows are counted once and kept until a write changes them, so the next reading
/// counts only the destination that was sent to, and still reports every depth right.
async fn an_idle_reading_counts_nothing_again(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    for i in 0..20 {
        for j in 0..2 {
            b.send(
                format!("queue://idle.{i:02}").as_str(),
                Message::new(format!("{j}")),
            )
            .await
            .unwrap();
        }
    }
    let counted = || b.store().stats().snapshot().committed_counts;
    let first = b.stats().await.unwrap();
    assert_eq!(first.totals.queue_size, 40);
    let before = counted();
    let second = b.stats().await.unwrap();
    assert_eq!(counted(), before, "an idle reading counts nothing");
    assert_eq!(second.destinations, first.destinations);

    b.send("queue://idle.07", Message::new("3")).await.unwrap();
    let third = b.stats().await.unwrap();
    assert_eq!(
        counted(),
        before + 1,
        "only the queue sent to is counted again"
    );
    let sent = third
        .destinations
        .iter()
        .find(|d| d.destination == "queue://idle.07")
        .unwrap();
    assert_eq!(sent.queue_size, 3);
    assert_eq!(third.totals.queue_size, 41);
    b.shutdown().await.unwrap();
}

on_every_backend!(
    #[actix_rt::test]
    an_idle_reading_counts_nothing_again,
    every_destination_counts_and_an_ended_one_leaves_metrics,
    connections_are_counted_by_protocol,
    a_scrape_shows_real_values,
    stats_lists_running_destinations,
    routed_sends_and_advisories_are_counted,
);

/// Reads `ebb serve`'s standard error until the HTTP server's line, and returns the
/// address in it.
async fn metrics_address(stderr: tokio::process::ChildStderr) -> String {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let find = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split("HTTP on http://").nth(1) {
                return rest.split(' ').next().unwrap().to_string();
            }
        }
        panic!("ebb serve ended without an HTTP line");
    };
    let addr = actix_rt::time::timeout(Duration::from_secs(30), find)
        .await
        .expect("ebb serve logs where metrics are served");
    // Keep reading, so the broker never writes to a closed or full pipe.
    actix_rt::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    addr
}

/// `ebb serve` as a process: `[listeners.http] listen` (with `[listeners.stomp]`), or
/// the older `[metrics] listen` or `[http] listen`, in the file is used, `--metrics` or `--http` overrides it, and a bad address is refused naming
/// where it came from.
#[actix_rt::test]
async fn serve_takes_the_address_from_the_flag_or_the_file() {
    let t = TestStore::sqlite();
    let dir = std::env::temp_dir().join(format!("ebb-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = |section: &str, listen: &str| {
        // The listeners' own sections, or the older keys.
        let stomp = if section.starts_with("listeners.") {
            "listeners.stomp"
        } else {
            "stomp"
        };
        let path = dir.join(format!(
            "ebb-{section}-{}.toml",
            listen.replace([':', '.'], "_")
        ));
        std::fs::write(
            &path,
            format!(
                "[store]\nurl = \"{}\"\n\n[{stomp}]\nlisten = \"127.0.0.1:0\"\n\n[{section}]\nlisten = \"{listen}\"\n",
                t.url
            ),
        )
        .unwrap();
        path.display().to_string()
    };

    for (section, file_listen, flag) in [
        ("metrics", "127.0.0.1:0", None),
        ("http", "127.0.0.1:0", None),
        ("listeners.http", "127.0.0.1:0", None),
        ("metrics", "no-port-here", Some("--metrics")),
        ("http", "no-port-here", Some("--http")),
    ] {
        let path = config(section, file_listen);
        let mut args = vec!["serve", "--config", &path];
        if let Some(flag) = flag {
            args.extend([flag, "127.0.0.1:0"]);
        }
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
            .args(&args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ebb serve starts");
        let addr = metrics_address(child.stderr.take().unwrap()).await;
        let (ok, out, err) = run_ebb(&["stat", "--metrics", &addr]).await;
        assert!(ok, "{err}");
        assert!(out.contains("no destination in use"), "{out}");
        // SIGTERM: the graceful shutdown, which stops the endpoint first.
        let pid = child.id().unwrap().to_string();
        let killed = tokio::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .unwrap();
        assert!(killed.success());
        let status = actix_rt::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .expect("ebb serve stops")
            .unwrap();
        assert!(status.success(), "{status}");
    }

    for section in ["metrics", "http", "listeners.http"] {
        let path = config(section, "no-port-here");
        let (ok, _, err) = run_ebb(&["serve", "--config", &path]).await;
        assert!(!ok);
        assert!(
            err.contains(&format!(
                "invalid HTTP address `no-port-here` (from [{section}] listen in"
            )),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
