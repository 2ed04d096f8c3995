// The PostgreSQL test variants run when EBB_TEST_POSTGRES_URL is set (or CI is).
include!("../build/test_services.rs");

fn main() {
    test_service("EBB_TEST_POSTGRES_URL", "ebb_test_postgres", "PostgreSQL");
}
