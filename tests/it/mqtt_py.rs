//! `ebb serve` as a separate process with its MQTT listener, driven by Python's
//! paho-mqtt (a real client, 3.1.1 and 5.0): QoS 0, 1 and 2 round trips and a
//! retained message; a shared subscription's jobs split between its workers; a
//! takeover with the will; a persistent session's backlog across a restart; SIGKILL of the
//! broker during QoS 1 and QoS 2 publishes, after which every acknowledged message
//! reaches the offline persistent session (QoS 2: none twice); a persistent QoS 2
//! publisher that resends its in-flight messages after a SIGKILL gets every one
//! delivered exactly once. The scenarios are in
//! `tests/e2e/mqtt_scenarios.py`.
//!
//! Needs `EBB_TEST_PYTHON` with paho-mqtt (`.ci/run` installs it beside stomp.py);
//! ignored without it, except under CI.

use ebb::test_util::*;

const LISTENER: &str = "\n[listeners.mqtt]\nlisten = \"127.0.0.1:0\"\n";

async fn scenario(t: &TestStore, name: &str) {
    crate::stomp_py::run_scenario(t, "mqtt_scenarios.py", name, LISTENER, &[]).await;
}

async fn mqtt_qos_round_trips(t: TestStore) {
    scenario(&t, "qos_round_trips").await;
}

async fn mqtt_persistent_session(t: TestStore) {
    scenario(&t, "persistent_session").await;
}

async fn mqtt_sigkill_qos1(t: TestStore) {
    scenario(&t, "sigkill_qos1").await;
}

async fn mqtt_sigkill_qos2(t: TestStore) {
    scenario(&t, "sigkill_qos2").await;
}

async fn mqtt_shared_subscription(t: TestStore) {
    scenario(&t, "shared_subscription").await;
}

async fn mqtt_will_and_takeover(t: TestStore) {
    scenario(&t, "will_and_takeover").await;
}

async fn mqtt_sigkill_qos2_resend(t: TestStore) {
    scenario(&t, "sigkill_qos2_resend").await;
}

python_scenarios!(
    mqtt_qos_round_trips,
    mqtt_sigkill_qos2_resend,
    mqtt_shared_subscription,
    mqtt_will_and_takeover,
    mqtt_persistent_session,
    mqtt_sigkill_qos1,
    mqtt_sigkill_qos2
);
