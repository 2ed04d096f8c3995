// The PostgreSQL test variants run when EBB_TEST_POSTGRES_URL is set, the stomp.py
// tests when EBB_TEST_PYTHON is (both always under CI), the disk-full tests as root
// (they mount a tmpfs; always under CI).
include!("build/test_services.rs");

fn main() {
    test_service("EBB_TEST_POSTGRES_URL", "ebb_test_postgres", "PostgreSQL");
    test_service("EBB_TEST_PYTHON", "ebb_test_python", "stomp.py");
    test_root("ebb_test_root");
}
