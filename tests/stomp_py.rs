//! `ebb serve` as a separate process, driven by Python's stomp.py (a real client):
//! the ActiveMQ data loss with SIGKILL, crash safety of receipted sends, ack modes and
//! transactions. The scenarios are in `tests/e2e/stomp_scenarios.py`.
//!
//! Needs `EBB_TEST_PYTHON`: a Python with stomp.py (`.ci/run` makes a virtual
//! environment). Without it the tests say so and pass, except under CI, where they fail.

mod common;

use common::*;

static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn python() -> Option<String> {
    match std::env::var("EBB_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("EBB_TEST_PYTHON is not set: CI must run the stomp.py tests")
        }
        _ => {
            eprintln!("EBB_TEST_PYTHON not set: stomp.py scenarios not run");
            None
        }
    }
}

async fn scenario(t: TestStore, name: &str) {
    scenario_with(t, name, "").await;
}

/// Runs scenario `name` with `extra` appended to the broker's configuration file.
async fn scenario_with(t: TestStore, name: &str, extra: &str) {
    let Some(python) = python() else { return };
    // Each run its own folder (config and log), so parallel tests never meet.
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("ebb-e2e-{}-{name}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = t
        .options
        .schema
        .as_ref()
        .map(|s| format!("schema = \"{s}\"\n"))
        .unwrap_or_default();
    let config = format!(
        "[store]\nurl = \"{}\"\n{schema}\n[[policy]]\ndestination = \"topic://>\"\nexpire_messages_period = 200\n{extra}",
        t.url
    );
    let path = dir.join("ebb.toml");
    std::fs::write(&path, config).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/stomp_scenarios.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_ebb"))
        .arg(&path)
        .arg(name)
        .output()
        .await
        .expect("python runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "scenario {name} failed:\n{text}");
    assert!(text.contains(&format!("ok {name}")), "{text}");
}

async fn data_loss(t: TestStore) {
    scenario(t, "data_loss").await;
}

async fn crash_safety(t: TestStore) {
    scenario(t, "crash_safety").await;
}

async fn acks_and_transactions(t: TestStore) {
    scenario(t, "acks_and_transactions").await;
}

async fn auth(t: TestStore) {
    let hash = ebb::auth::hash_password("pa:ss").unwrap();
    let users = format!("\n[[users]]\nlogin = \"alice\"\npassword_hash = \"{hash}\"\n");
    scenario_with(t, "auth", &users).await;
}

on_every_backend!(data_loss, crash_safety, acks_and_transactions, auth);
