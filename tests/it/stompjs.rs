//! A browser STOMP client over WebSocket: @stomp/stompjs (on Node, with the `ws`
//! package) subscribes at `ws://.../stomp` of `ebb serve`, and receives, in order,
//! what stomp.py sends to the same queue over TCP. The script is
//! `tests/e2e/stompjs_subscriber.cjs`.
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
    let store = tempfile::tempdir().unwrap();
    let mut serve = tokio::process::Command::new(env!("CARGO_BIN_EXE_ebb"))
        .args([
            "serve",
            "--stomp",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--store",
        ])
        .arg(format!("sqlite://{}/ebb.db", store.path().display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("ebb serve starts");
    let mut lines = tokio::io::BufReader::new(serve.stdout.take().unwrap()).lines();
    let (mut stomp, mut http) = (None, None);
    while stomp.is_none() || http.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("ebb serve prints its addresses")
            .unwrap()
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

    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/e2e/stompjs_subscriber.cjs"
    );
    let mut node = tokio::process::Command::new("node")
        .arg(script)
        .arg(format!("ws://{http}/stomp"))
        .arg("/queue/browser.in")
        .arg("3")
        .env("NODE_PATH", &modules)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut out = tokio::io::BufReader::new(node.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .expect("stomp.js subscribes within 30 s")
        .unwrap();
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

    let bodies = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .expect("stomp.js receives within 30 s")
        .unwrap()
        .expect("stomp.js prints what it received");
    let bodies: Vec<String> = serde_json::from_str(&bodies).unwrap();
    assert_eq!(bodies, ["one", "two", "three"]);
    let status = tokio::time::timeout(Duration::from_secs(30), node.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "stomp.js exited with {status}");
    serve.start_kill().unwrap();
}
