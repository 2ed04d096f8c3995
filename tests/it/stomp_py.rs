//! `ebb serve` as a separate process, driven by Python's stomp.py (a real client):
//! the ActiveMQ data loss with SIGKILL, crash safety of receipted sends, ack modes and
//! transactions, request/reply over temporary queues, virtual topics. The scenarios are in `tests/e2e/stomp_scenarios.py`.
//!
//! Needs `EBB_TEST_PYTHON`: a Python with stomp.py (`.ci/run` makes a virtual
//! environment). Without it the tests are built as ignored and `cargo test` says why
//! (`build.rs` sets `cfg(ebb_test_python)` when the variable is set), except under CI,
//! where they run and fail.

use ebb::test_util::*;

static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The Python that runs the scenarios. Panics without `EBB_TEST_PYTHON`: the tests
/// are ignored then, unless under CI (which must run them) or run with `--ignored`.
pub(crate) fn python() -> String {
    match std::env::var("EBB_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ if std::env::var_os("CI").is_some() => {
            panic!("EBB_TEST_PYTHON is not set: CI must run the stomp.py tests")
        }
        _ => {
            panic!("EBB_TEST_PYTHON is not set: the stomp.py scenarios need a Python with stomp.py")
        }
    }
}

async fn scenario(t: &TestStore, name: &str) {
    scenario_with(t, name, "", &[]).await;
}

/// Runs scenario `name` with `extra` appended to the broker's configuration file and
/// `env` in the script's environment.
async fn scenario_with(t: &TestStore, name: &str, extra: &str, env: &[(&str, String)]) {
    run_scenario(t, "stomp_scenarios.py", name, extra, env).await;
}

/// Runs scenario `name` of `tests/e2e/<script>` against `ebb serve` on `t`'s store,
/// with `extra` appended to the broker's configuration file and `env` in the
/// script's environment; the script must print `ok NAME`.
pub(crate) async fn run_scenario(
    t: &TestStore,
    script: &str,
    name: &str,
    extra: &str,
    env: &[(&str, String)],
) {
    let python = python();
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
    let script = format!("{}/tests/e2e/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_ebb"))
        .arg(&path)
        .arg(name)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .await
        .expect("python runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "scenario {name} failed:\n{text}");
    assert!(text.contains(&format!("ok {name}")), "{text}");
    // What the scenario measured ("name: ..."), for `--nocapture`.
    for line in text.lines().filter(|l| l.starts_with(&format!("{name}:"))) {
        println!("{line}");
    }
}

async fn data_loss(t: TestStore) {
    scenario(&t, "data_loss").await;
}

async fn crash_safety(t: TestStore) {
    scenario(&t, "crash_safety").await;
}

/// Receipted NACKs survive SIGKILL: the back-off hold and the failure count are
/// committed before each RECEIPT (see the scenario).
async fn receipted_nack_crash(t: TestStore) {
    let policy = "\n[[policy]]\ndestination = \"queue://>\"\ninitial_redelivery_delay = \"2s\"\n\
                  redelivery_delay = \"2s\"\nmaximum_redeliveries = 2\n";
    scenario_with(&t, "receipted_nack_crash", policy, &[]).await;
}

async fn acks_and_transactions(t: TestStore) {
    scenario(&t, "acks_and_transactions").await;
}

async fn auth(t: TestStore) {
    let hash = ebb::auth::hash_password("pa:ss").unwrap();
    let users = format!("\n[[users]]\nlogin = \"alice\"\npassword_hash = \"{hash}\"\n");
    scenario_with(&t, "auth", &users, &[]).await;
}

/// stomp.py over TLS (`--stomp-ssl`), with certificates made for the run.
async fn tls(t: TestStore) {
    let pki = crate::tls::pki();
    let config = format!(
        "\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        pki.cert.display(),
        pki.key.display()
    );
    let env = [
        ("EBB_TEST_TLS_CA", pki.ca.display().to_string()),
        ("EBB_TEST_TLS_OTHER_CA", pki.other_ca.display().to_string()),
    ];
    scenario_with(&t, "tls", &config, &env).await;
}

/// Client-side failover with stomp.py's host list, between an active broker and a
/// standby (`[ha]`, a short lease so the test waits little).
async fn failover(t: TestStore) {
    let ha = "\n[ha]\nmode = \"shared-store\"\nlease_ms = 1500\nrenew_ms = 250\n";
    scenario_with(&t, "failover", ha, &[]).await;
}

/// Twenty takeovers under load (kill, take over, the dead one back as a standby),
/// clients failing over with a host list: no receipted message lost, none delivered
/// again after its ack was receipted.
async fn failover_cycles(t: TestStore) {
    let ha = "\n[ha]\nmode = \"shared-store\"\nlease_ms = 1500\nrenew_ms = 250\n";
    scenario_with(&t, "failover_cycles", ha, &[]).await;
}

/// SIGKILL during receipted sends to a topic with two durable subscriptions: the
/// one offline resumes at its mark, each receipted message exactly once; the one
/// online fails over and misses nothing.
async fn failover_during_sends(t: TestStore) {
    let ha = "\n[ha]\nmode = \"shared-store\"\nlease_ms = 1500\nrenew_ms = 250\n";
    scenario_with(&t, "failover_during_sends", ha, &[]).await;
}

/// Request/reply over temporary queues (see the scenario); then no row of a
/// temporary queue is left in the store.
async fn request_reply(t: TestStore) {
    scenario(&t, "request_reply").await;
    let store = t.open().await;
    for kind in ["temp-queue", "temp-topic"] {
        let left = store
            .list_containers(&format!("{kind}://"), &format!("{kind}:/0"), 10)
            .await
            .unwrap();
        assert!(
            left.is_empty(),
            "rows of temporary destinations left: {left:?}"
        );
    }
    store.close().await;
}

/// Virtual topic: 3 groups × 2 consumers, 10,000 receipted sends, one group
/// offline for half, then SIGKILL during sends (see the scenario).
async fn virtual_topic(t: TestStore) {
    scenario(&t, "virtual_topic").await;
}

python_scenarios!(
    virtual_topic,
    request_reply,
    data_loss,
    crash_safety,
    receipted_nack_crash,
    acks_and_transactions,
    auth,
    tls,
    failover,
    failover_cycles,
    failover_during_sends
);
