// The PostgreSQL test variants run when EBB_TEST_POSTGRES_URL is set, the stomp.py
// tests when EBB_TEST_PYTHON is, the browser test when EBB_TEST_CHROMIUM is, the stomp.js test when
// EBB_TEST_NODE_MODULES is, the mosquitto clients' test when EBB_TEST_MOSQUITTO is (all
// always under CI), the disk-full tests as root
// (they mount a tmpfs; always under CI).
include!("build/test_services.rs");

fn main() {
    test_service("EBB_TEST_POSTGRES_URL", "ebb_test_postgres", "PostgreSQL");
    test_service("EBB_TEST_PYTHON", "ebb_test_python", "stomp.py");
    test_service(
        "EBB_TEST_CHROMIUM",
        "ebb_test_chromium",
        "browser (Chromium)",
    );
    test_service("EBB_TEST_NODE_MODULES", "ebb_test_node", "stomp.js (Node)");
    test_service(
        "EBB_TEST_MOSQUITTO",
        "ebb_test_mosquitto",
        "mosquitto_pub and mosquitto_sub",
    );
    test_root("ebb_test_root");
}
