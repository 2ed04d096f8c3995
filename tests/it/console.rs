//! The web console in a real browser: headless Chromium, driven over the Chrome
//! DevTools Protocol (a WebSocket: `tokio-tungstenite`, no driver to install), loads
//! `/console` from an HTTP server in front of a broker holding messages in a queue,
//! a dead-letter queue and a durable subscription's backlog. The test reads the DOM
//! (the destination rows and their sizes, the messages, the subscription, the
//! connection), clicks "Retry all" on the DLQ and checks the store (every dead letter
//! back in its queue, once), and checks that no page is wider than the window at
//! 1280×800 and at a phone's 390×844. A screenshot of each page is written under
//! `target/console/` for a person to look at.
//!
//! Chromium comes from `EBB_TEST_CHROMIUM` (`.ci/run` installs Debian's `chromium`
//! and sets it); without it the test is ignored, saying so, and under CI it fails.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;
use tokio_tungstenite::tungstenite::Message as Ws;

use ebb::http::{HttpOptions, HttpServer};
use ebb::stomp::connection::ConnectionConfig;
use ebb::test_util::stomp::{serve_with, Client};
use ebb::test_util::*;
use ebb::{Message, SubscribeOptions};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless Chromium and one page of it, over the DevTools Protocol.
struct Browser {
    _child: tokio::process::Child,
    socket: Socket,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium (`EBB_TEST_CHROMIUM`) and opens a page of `width`×`height`.
    async fn start(width: u32, height: u32) -> Self {
        let path = std::env::var("EBB_TEST_CHROMIUM")
            .ok()
            .filter(|p| !p.is_empty())
            .expect(
                "EBB_TEST_CHROMIUM names the Chromium binary (.ci/run installs Debian's chromium)",
            );
        let profile = tempfile::tempdir().unwrap();
        let mut child = tokio::process::Command::new(&path)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.path().display()),
                &format!("--window-size={width},{height}"),
                "about:blank",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start Chromium at {path}: {e}"));
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let find = async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    return url.trim().to_string();
                }
            }
            panic!("Chromium ended without a DevTools address");
        };
        let url = tokio::time::timeout(Duration::from_secs(60), find)
            .await
            .expect("Chromium says where DevTools listens within 60 s");
        // Keep draining its standard error.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .unwrap();
        let mut browser = Self {
            _child: child,
            socket,
            session: String::new(),
            next_id: 1,
            _profile: profile,
        };
        let target = browser
            .call("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({ "targetId": target["targetId"], "flatten": true }),
            )
            .await;
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser.call("Page.enable", json!({})).await;
        browser.resize(width, height, false).await;
        browser
    }

    /// One DevTools command (on the page once attached); its result. Events are
    /// skipped; an error answer is a panic.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut command = json!({ "id": id, "method": method, "params": params });
        if !self.session.is_empty() {
            command["sessionId"] = json!(self.session);
        }
        self.socket
            .send(Ws::Text(command.to_string()))
            .await
            .unwrap();
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 30 s"))
                .expect("DevTools socket open")
                .unwrap();
            let Ws::Text(text) = message else { continue };
            let answer: Value = serde_json::from_str(&text).unwrap();
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Sets the page's size (`mobile`: a phone's viewport).
    async fn resize(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        )
        .await;
    }

    /// The value of `expression` in the page (awaiting a promise).
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
            )
            .await;
        assert!(
            result.get("exceptionDetails").is_none(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Waits until `condition` (a JavaScript expression) is true in the page.
    async fn wait_for(&mut self, condition: &str) {
        let deadline = std::time::Instant::now() + ebb::test_util::PATIENCE;
        loop {
            if self.eval(&format!("Boolean({condition})")).await == json!(true) {
                return;
            }
            let body = self
                .eval("document.body ? document.body.innerText : ''")
                .await;
            assert!(
                std::time::Instant::now() < deadline,
                "`{condition}` never held; the page says: {body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Goes to `url` and waits until the console has drawn it.
    async fn open(&mut self, url: &str, drawn: &str) {
        self.eval("document.body && delete document.body.dataset.ready")
            .await;
        self.call("Page.navigate", json!({ "url": url })).await;
        self.wait_for(&format!(
            "document.body && document.body.dataset.ready === 'true' && {drawn}"
        ))
        .await;
    }

    /// Writes a PNG of the page to `target/console/NAME.png`.
    async fn screenshot(&mut self, name: &str) {
        let shot = self
            .call("Page.captureScreenshot", json!({ "format": "png" }))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// No page wider than the window: tables scroll inside their frames.
    async fn fits_the_window(&mut self, page: &str) {
        let widths = self
            .eval("[document.documentElement.scrollWidth, window.innerWidth]")
            .await;
        assert!(
            widths[0].as_u64() <= widths[1].as_u64(),
            "{page} is wider than the window: {widths}"
        );
    }
}

/// The console's pages, their DOM and a retry of a dead-letter queue, in Chromium.
async fn the_console_shows_destinations_and_retries_a_dlq(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    for i in 0..3 {
        b.send(
            "queue://console.jobs",
            Message::new(format!("{{\"job\": {i}}}")).header("region", "eu"),
        )
        .await
        .unwrap();
    }
    for i in 0..4 {
        let letter = Message::new(format!("failed job {i}"))
            .header("originalDestination", "/queue/console.jobs")
            .header("dlqDeliveryFailureCause", "delivery failed 7 times");
        b.send("queue://DLQ.console.jobs", letter).await.unwrap();
    }
    drop(
        b.subscribe(
            "topic://console.news",
            SubscribeOptions::durable("reporting", "daily"),
        )
        .await
        .unwrap(),
    );
    // Two names of one client, one holding a `/` (issue 35: Remove on `eu/invoices`
    // removed `eu`, its backlog with it).
    for name in ["eu", "eu/invoices"] {
        drop(
            b.subscribe(
                "topic://console.news",
                SubscribeOptions::durable("billing", name),
            )
            .await
            .unwrap(),
        );
    }
    b.send("topic://console.news", Message::new("headline"))
        .await
        .unwrap();
    let config = ConnectionConfig::default();
    let tcp = serve_with(b.clone(), config.clone()).await;
    let _client = Client::connected(tcp.addr, Some("console-viewer")).await;
    let mut options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    options.connections = config.connections.clone();
    options.stomp = Some(config);
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let base = format!("http://{}/console", server.local_addr());

    let mut page = Browser::start(1280, 800).await;
    page.open(
        &base,
        "document.querySelector('#destinations tbody tr[data-destination]')",
    )
    .await;
    let size = |key: &str| {
        format!("document.querySelector('tr[data-destination=\"{key}\"] [data-field=queue_size]').textContent")
    };
    assert_eq!(page.eval(&size("queue://console.jobs")).await, json!("3"));
    assert_eq!(
        page.eval(&size("queue://DLQ.console.jobs")).await,
        json!("4")
    );
    assert_eq!(page.eval(&size("topic://console.news")).await, json!("1"));
    let cards = page
        .eval("document.querySelector('.cards').innerText")
        .await;
    assert!(cards.as_str().unwrap().contains("of 64.0 MiB"), "{cards}");
    page.fits_the_window("the overview").await;
    page.screenshot("overview").await;

    page.open(
        &format!("{base}#/queue/console.jobs"),
        "document.querySelectorAll('#messages tr[data-id]').length === 3",
    )
    .await;
    let first = page
        .eval("document.querySelector('#messages tbody tr').innerText")
        .await;
    assert!(
        first.as_str().unwrap().contains("{\"job\": 0}")
            && first.as_str().unwrap().contains("region: eu"),
        "{first}"
    );
    page.fits_the_window("a queue").await;
    page.screenshot("queue").await;

    // A kind the console knows only from the kind table: a last-value queue's page
    // lists what waits, the newest value per key.
    for value in ["101.5", "102.25"] {
        let price = Message::new(format!("IBM {value}")).header("_AMQ_LVQ_NAME", "IBM");
        b.send("lvq://console.prices", price).await.unwrap();
    }
    page.open(
        &format!("{base}#/lvq/console.prices"),
        "document.querySelectorAll('#messages tr[data-id]').length === 1",
    )
    .await;
    let only = page
        .eval("document.querySelector('#messages tbody tr').innerText")
        .await;
    assert!(only.as_str().unwrap().contains("IBM 102.25"), "{only}");
    assert_eq!(
        page.eval("document.querySelector('h1').innerText").await,
        json!("lvq console.prices")
    );

    page.open(
        &format!("{base}#/queue/DLQ.console.jobs"),
        "document.querySelectorAll('#messages tr[data-id]').length === 4",
    )
    .await;
    page.screenshot("dlq").await;
    page.eval("window.confirm = () => true; document.getElementById('retry-all').click(); true")
        .await;
    page.wait_for("document.getElementById('notice') && document.getElementById('notice').textContent.includes('4 moved')")
        .await;
    page.wait_for("document.querySelector('#messages .empty')")
        .await;
    assert_eq!(
        b.store()
            .count_messages("queue://DLQ.console.jobs")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        b.store()
            .count_messages("queue://console.jobs")
            .await
            .unwrap(),
        7
    );
    // The empty dead-letter queue is deleted from its page: back on the overview,
    // it is gone from the table.
    page.eval(
        "window.confirm = () => true; document.getElementById('delete-destination').click(); true",
    )
    .await;
    page.wait_for("document.getElementById('notice') && document.getElementById('notice').textContent.includes('Deleted queue DLQ.console.jobs')")
        .await;
    page.wait_for("document.querySelector('#destinations tr[data-destination=\"queue://console.jobs\"]') && !document.querySelector('#destinations tr[data-destination=\"queue://DLQ.console.jobs\"]')")
        .await;

    page.open(
        &format!("{base}#/topic/console.news"),
        "document.querySelector('#subscriptions tbody tr td')",
    )
    .await;
    let subscription = page
        .eval("[...document.querySelectorAll('#subscriptions tbody tr')].map(r => r.innerText).find(t => t.includes('reporting'))")
        .await;
    let subscription = subscription.as_str().unwrap();
    assert!(
        subscription.contains("reporting")
            && subscription.contains("daily")
            && subscription.contains("offline"),
        "{subscription}"
    );
    page.screenshot("topic").await;
    page.eval("window.confirm = () => true; document.querySelector('[data-remove][data-sub=\"eu/invoices\"]').click(); true")
        .await;
    page.wait_for("document.getElementById('notice') && document.getElementById('notice').textContent.includes('Removed billing/eu/invoices')")
        .await;
    let exists = |name: &'static str| {
        let b = b.clone();
        async move {
            b.durable_subscription_exists("topic://console.news", "billing", name)
                .await
                .unwrap()
        }
    };
    assert!(!exists("eu/invoices").await, "the one clicked is removed");
    assert!(exists("eu").await, "the other name of the client stays");

    page.open(
        &format!("{base}#/connections"),
        "document.querySelector('#connections tr[data-session]')",
    )
    .await;
    let connection = page
        .eval("document.querySelector('#connections tr[data-session]').innerText")
        .await;
    assert!(
        connection.as_str().unwrap().contains("console-viewer"),
        "{connection}"
    );
    page.screenshot("connections").await;

    // The scheduler: the overview's card counts what waits; the Scheduled page lists
    // it with its destination and cancels it.
    let due = ebb::now_ms() + 3_600_000;
    b.send(
        "queue://console.later",
        ebb::Message::new("in an hour").deliver_at(due),
    )
    .await
    .unwrap();
    page.open(&base, "document.querySelector('#scheduler .value')")
        .await;
    assert_eq!(
        page.eval("document.querySelector('#scheduler .value').innerText")
            .await,
        json!("1")
    );
    page.open(
        &format!("{base}#/scheduled"),
        "document.querySelector('#scheduled tr[data-id]')",
    )
    .await;
    let row = page
        .eval("document.querySelector('#scheduled tr[data-id]').innerText")
        .await;
    assert!(
        row.as_str().unwrap().contains("queue://console.later"),
        "{row}"
    );
    // A cron job is listed with its expression.
    b.send(
        "queue://console.cron",
        ebb::Message::new("yearly").cron(ebb::CronSchedule::parse("0 0 1 1 *").unwrap()),
    )
    .await
    .unwrap();
    page.open(
        &format!("{base}#/scheduled"),
        "document.querySelectorAll('#scheduled tr[data-id]').length == 2",
    )
    .await;
    let rows = page
        .eval("document.querySelector('#scheduled tbody').innerText")
        .await;
    assert!(rows.as_str().unwrap().contains("cron 0 0 1 1 *"), "{rows}");
    page.screenshot("scheduled").await;
    assert_eq!(
        b.cancel_scheduled_to("queue://console.cron").await.unwrap(),
        1
    );
    page.open(
        &format!("{base}#/scheduled"),
        "document.querySelectorAll('#scheduled tr[data-id]').length == 1",
    )
    .await;
    page.eval("window.confirm = () => true; document.querySelector('[data-cancel]').click(); true")
        .await;
    page.wait_for("document.querySelector('#scheduled .empty')")
        .await;
    assert_eq!(b.schedule_backlog().await.unwrap().scheduled, 0);

    // A hash that is not a page, not even URL-encoded, says so.
    page.open(
        &format!("{base}#/queue/pct%x"),
        "document.querySelector('.notice.error')",
    )
    .await;
    let said = page
        .eval("document.querySelector('.notice.error').textContent")
        .await;
    assert!(said.as_str().unwrap().contains("No such page"), "{said}");

    // A phone's width: the same pages, nothing wider than the screen.
    page.resize(390, 844, true).await;
    page.open(
        &base,
        "document.querySelector('#destinations tbody tr[data-destination]')",
    )
    .await;
    page.fits_the_window("the overview on a phone").await;
    page.screenshot("overview-phone").await;
    page.open(
        &format!("{base}#/queue/console.jobs"),
        "document.querySelectorAll('#messages tr[data-id]').length === 7",
    )
    .await;
    page.fits_the_window("a queue on a phone").await;
    page.screenshot("queue-phone").await;

    drop(page);
    server.stop().await;
    tcp.stop().await;
}

/// The console's charts (issue 36) in Chromium: a producer sends 20 messages a
/// second for 30 s to a queue nobody consumes; the overview's rate chart draws
/// that rate and its depth chart a growing backlog; the queue's own page draws its
/// depth rising, then falling to 0 once a consumer drains it; the table's sparkline
/// draws it too. The values are read from what each chart drew (uPlot's data, at
/// `window.ebbCharts`), not from a picture; the charts are also written to
/// `target/console/charts-*.png` for a person.
async fn the_console_charts_a_steady_producer(t: TestStore) {
    let b = broker(&t, policy(3_600_000, 400), 2).await;
    let options = HttpOptions::new("127.0.0.1:0".parse().unwrap());
    let step_s = options.history_step.as_secs_f64();
    let server = HttpServer::start(options, b.clone()).await.unwrap();
    let base = format!("http://{}/console", server.local_addr());
    let queue = "queue://chart.load";
    let producer = {
        let b = b.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            for i in 0..600 {
                tick.tick().await;
                b.send(queue, Message::new(format!("load {i}")))
                    .await
                    .unwrap();
            }
        })
    };
    let mut page = Browser::start(1280, 900).await;
    page.open(
        &base,
        "window.ebbCharts && window.ebbCharts['overview-rates']",
    )
    .await;
    // Three whole steps of the producer's rate (20/s; a step's count depends on
    // where the step boundaries fall, so within a band).
    let steady =
        "window.ebbCharts['overview-rates'].data[1].filter(r => r >= 14 && r <= 27).length >= 3";
    page.wait_for(steady).await;
    let depths = page
        .eval("window.ebbCharts['overview-depth'].data[1]")
        .await;
    let depths: Vec<u64> = depths
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    assert!(
        depths.windows(2).any(|w| w[1] > w[0]) && *depths.last().unwrap() >= 40,
        "the backlog grows: {depths:?}"
    );
    let x = page
        .eval("window.ebbCharts['overview-rates'].data[0]")
        .await;
    let x: Vec<f64> = x
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        x.windows(2)
            .all(|w| (w[1] - w[0] - step_s).abs() < step_s / 2.0),
        "one point a step: {x:?}"
    );
    page.wait_for(
        "(document.querySelector('tr[data-destination=\"queue://chart.load\"] svg.spark')?.dataset.points ?? 0) >= 2",
    )
    .await;
    page.screenshot("charts-overview").await;

    page.open(
        &format!("{base}#/queue/chart.load"),
        "window.ebbCharts['destination-depth'] && window.ebbCharts['destination-depth'].root.isConnected",
    )
    .await;
    // Its depth rises while the producer runs...
    page.wait_for("(d => d.length >= 2 && d[d.length - 1] > d[0])(window.ebbCharts['destination-depth'].data[1])")
        .await;
    producer.await.unwrap();
    page.wait_for("(d => d[d.length - 1] === 600)(window.ebbCharts['destination-depth'].data[1])")
        .await;
    // ...and falls to 0 when a consumer drains the queue.
    let mut consumer = b
        .subscribe(queue, SubscribeOptions::non_durable().prefetch(100))
        .await
        .unwrap();
    for _ in 0..600 {
        let m = next(&mut consumer).await;
        consumer.ack(&m).await.unwrap();
    }
    page.wait_for("(d => d[d.length - 1] === 0)(window.ebbCharts['destination-depth'].data[1])")
        .await;
    let drawn = page
        .eval("window.ebbCharts['destination-depth'].data[1]")
        .await;
    let drawn: Vec<u64> = drawn
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    let top = drawn.iter().position(|d| *d == 600).unwrap();
    assert!(
        drawn[..top].windows(2).all(|w| w[1] >= w[0]) && drawn[top..].contains(&0),
        "rises to 600, then falls to 0: {drawn:?}"
    );
    let out = page
        .eval("Math.max(...window.ebbCharts['destination-rates'].data[3])")
        .await;
    assert!(out.as_f64().unwrap() > 0.0, "the dequeue rate shows: {out}");
    let consumers = page
        .eval("Math.max(...window.ebbCharts['destination-consumers'].data[1])")
        .await;
    assert_eq!(consumers, json!(1));
    page.screenshot("charts-queue").await;
    page.fits_the_window("a queue with charts").await;
    drop((page, consumer));
    server.stop().await;
    b.shutdown().await.unwrap();
}

mod the_console_charts_in_chromium {
    #[actix_rt::test]
    #[cfg_attr(
        not(ebb_test_chromium),
        ignore = "set EBB_TEST_CHROMIUM=/usr/bin/chromium (Debian's chromium package) to run the browser test"
    )]
    async fn sqlite() {
        super::the_console_charts_a_steady_producer(ebb::test_util::TestStore::sqlite()).await;
    }

    #[actix_rt::test]
    #[cfg_attr(
        any(not(ebb_test_chromium), not(ebb_test_postgres)),
        ignore = "set EBB_TEST_CHROMIUM=/usr/bin/chromium and EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the browser test on PostgreSQL"
    )]
    async fn postgres() {
        super::the_console_charts_a_steady_producer(ebb::test_util::TestStore::postgres()).await;
    }
}

mod the_console_in_chromium {
    #[actix_rt::test]
    #[cfg_attr(
        not(ebb_test_chromium),
        ignore = "set EBB_TEST_CHROMIUM=/usr/bin/chromium (Debian's chromium package) to run the browser test"
    )]
    async fn sqlite() {
        super::the_console_shows_destinations_and_retries_a_dlq(ebb::test_util::TestStore::sqlite()).await;
    }

    #[actix_rt::test]
    #[cfg_attr(
        any(not(ebb_test_chromium), not(ebb_test_postgres)),
        ignore = "set EBB_TEST_CHROMIUM=/usr/bin/chromium and EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the browser test on PostgreSQL"
    )]
    async fn postgres() {
        super::the_console_shows_destinations_and_retries_a_dlq(
            ebb::test_util::TestStore::postgres(),
        )
        .await;
    }
}
