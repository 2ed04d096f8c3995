//! A browser STOMP client over WebSocket: @stomp/stompjs (on Node, with the `ws`
//! package) subscribes at `ws://.../stomp` of `ebb serve`, and receives, in order,
//! what stomp.py sends to the same queue over TCP (`tests/e2e/stompjs_subscriber.cjs`);
//! and it makes requests with `reply-to` its own temporary queue, which a stomp.py
//! worker over TCP answers (`tests/e2e/stompjs_requester.cjs`).
//!
//! Needs `EBB_TEST_NODE_MODULES` (a `node_modules` folder with `@stomp/stompjs` and
//! `ws`: `.ci/run` installs them with npm) and `EBB_TEST_PYTHON` (stomp.py); without
//! them the test is ignored, saying so, and under CI it fails.

use std::time::Duration;

use tokio::io::AsyncBufReadExt;

fn env(var: &str, what: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("{var} is not set: {what}"))
}

/// The lines a child prints on its standard output.
type Lines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Starts `command` with its standard output piped (killed when dropped), and its
/// lines.
fn spawn_reading(
    mut command: tokio::process::Command,
    what: &str,
) -> (tokio::process::Child, Lines) {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

/// The next line of `out` within 30 s (`None` at its end); panics naming what was
/// waited for otherwise.
async fn line_within(out: &mut Lines, waiting_for: &str) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .unwrap_or_else(|_| panic!("no {waiting_for} within 30 s"))
        .unwrap()
}

/// node running `tests/e2e/<script>` with `args`, its modules from `modules`.
fn node(script: &str, args: &[String], modules: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(format!("{}/tests/e2e/{script}", env!("CARGO_MANIFEST_DIR")))
        .args(args)
        .env("NODE_PATH", modules);
    command
}

/// `ebb serve` on a fresh SQLite store with STOMP and HTTP on free ports; killed when
/// dropped.
struct Serve {
    _store: tempfile::TempDir,
    child: tokio::process::Child,
    /// `HOST:PORT` of STOMP over TCP.
    stomp: String,
    /// `HOST:PORT` of HTTP (STOMP over WebSocket at `/stomp`).
    http: String,
}

async fn serve() -> Serve {
    let store = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebb"));
    command
        .args([
            "serve",
            "--stomp",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--store",
        ])
        .arg(format!("sqlite://{}/ebb.db", store.path().display()))
        .stderr(std::process::Stdio::null());
    let (serve, mut lines) = spawn_reading(command, "ebb serve");
    let (mut stomp, mut http) = (None, None);
    while stomp.is_none() || http.is_none() {
        let line = line_within(&mut lines, "addresses from ebb serve")
            .await
            .expect("ebb serve ended early");
        if let Some(rest) = line.split("STOMP on ").nth(1) {
            stomp = Some(rest.split(',').next().unwrap().to_string());
        }
        if let Some(rest) = line.split("HTTP on http://").nth(1) {
            http = Some(rest.split(' ').next().unwrap().to_string());
        }
    }
    let (stomp, http) = (stomp.unwrap(), http.unwrap());
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Serve {
        _store: store,
        child: serve,
        stomp,
        http,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(not(ebb_test_node), not(ebb_test_python)),
    ignore = "set EBB_TEST_NODE_MODULES (with @stomp/stompjs and ws) and EBB_TEST_PYTHON (with stomp.py) to run the stomp.js test"
)]
async fn stompjs_over_websocket_receives_what_stomp_py_sends_over_tcp() {
    let modules = env(
        "EBB_TEST_NODE_MODULES",
        "a node_modules folder with @stomp/stompjs and ws",
    );
    let python = env("EBB_TEST_PYTHON", "a Python with stomp.py");
    let Serve {
        mut child,
        stomp,
        http,
        ..
    } = serve().await;
    let args = [
        format!("ws://{http}/stomp"),
        "/queue/browser.in".into(),
        "3".into(),
    ];
    let (mut node, mut out) =
        spawn_reading(node("stompjs_subscriber.cjs", &args, &modules), "node");
    let first = line_within(&mut out, "SUBSCRIBE by stomp.js").await;
    assert_eq!(first.as_deref(), Some("subscribed"));

    let (host, port) = stomp.rsplit_once(':').unwrap();
    let send = format!(
        "import stomp\n\
         c = stomp.Connection12([('{host}', {port})], heartbeats=(0, 0))\n\
         c.connect(wait=True)\n\
         for body in ['one', 'two', 'three']:\n    c.send('/queue/browser.in', body, headers={{'persistent': 'true'}})\n\
         c.disconnect(receipt='bye')\n"
    );
    let sent = tokio::process::Command::new(&python)
        .args(["-c", &send])
        .output()
        .await
        .expect("python runs");
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );

    let bodies = line_within(&mut out, "messages at stomp.js")
        .await
        .expect("stomp.js prints what it received");
    let bodies: Vec<String> = serde_json::from_str(&bodies).unwrap();
    assert_eq!(bodies, ["one", "two", "three"]);
    let status = tokio::time::timeout(Duration::from_secs(30), node.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "stomp.js exited with {status}");
    child.start_kill().unwrap();
}

/// Request/reply across transports (issue 33): stomp.js over WebSocket sends 50
/// requests with `reply-to:/temp-queue/replies`; a stomp.py worker over TCP answers
/// each at its `reply-to` as it came; stomp.js gets every reply, each once, each the
/// answer to its own request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    any(not(ebb_test_node), not(ebb_test_python)),
    ignore = "set EBB_TEST_NODE_MODULES (with @stomp/stompjs and ws) and EBB_TEST_PYTHON (with stomp.py) to run the stomp.js test"
)]
async fn stompjs_request_reply_through_a_temporary_queue() {
    const COUNT: usize = 50;
    let modules = env(
        "EBB_TEST_NODE_MODULES",
        "a node_modules folder with @stomp/stompjs and ws",
    );
    let python = env("EBB_TEST_PYTHON", "a Python with stomp.py");
    let Serve {
        mut child,
        stomp,
        http,
        ..
    } = serve().await;
    let (host, port) = stomp.rsplit_once(':').unwrap();
    let worker = format!(
        "import stomp, sys, threading\n\
         ready, done, answered = threading.Event(), threading.Event(), [0]\n\
         class W(stomp.ConnectionListener):\n\
         \x20   def on_receipt(self, f):\n\
         \x20       ready.set()\n\
         \x20   def on_message(self, f):\n\
         \x20       c.send(f.headers['reply-to'], 're:' + f.body, headers={{'correlation-id': f.headers['correlation-id']}})\n\
         \x20       answered[0] += 1\n\
         \x20       if answered[0] == {COUNT}:\n\
         \x20           done.set()\n\
         c = stomp.Connection12([('{host}', {port})], heartbeats=(0, 0))\n\
         c.set_listener('', W())\n\
         c.connect(wait=True)\n\
         c.subscribe('/queue/rr.ws', id='w', ack='auto', headers={{'receipt': 'w'}})\n\
         ready.wait(30) or sys.exit(2)\n\
         print('ready', flush=True)\n\
         done.wait(30) or sys.exit(3)\n\
         c.disconnect()\n"
    );
    let mut command = tokio::process::Command::new(&python);
    command.args(["-c", &worker]);
    let (mut worker, mut worker_out) = spawn_reading(command, "python");
    let ready = line_within(&mut worker_out, "SUBSCRIBE by the worker").await;
    assert_eq!(ready.as_deref(), Some("ready"));

    let args = [
        format!("ws://{http}/stomp"),
        "/queue/rr.ws".into(),
        COUNT.to_string(),
    ];
    let (mut node, mut out) = spawn_reading(node("stompjs_requester.cjs", &args, &modules), "node");
    let first = line_within(&mut out, "SUBSCRIBE by stomp.js").await;
    assert_eq!(first.as_deref(), Some("subscribed"));
    let replies = line_within(&mut out, "replies at stomp.js")
        .await
        .expect("stomp.js prints its replies");
    let mut replies: Vec<(String, String)> = serde_json::from_str(&replies).unwrap();
    replies.sort();
    let mut expected: Vec<(String, String)> = (0..COUNT)
        .map(|i| (format!("c{i}"), format!("re:q{i}")))
        .collect();
    expected.sort();
    assert_eq!(
        replies, expected,
        "each reply once, the answer to its own request"
    );
    for process in [&mut node, &mut worker] {
        let status = tokio::time::timeout(Duration::from_secs(30), process.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "exited with {status}");
    }
    child.start_kill().unwrap();
}
