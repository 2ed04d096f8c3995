// The migrations are embedded with include_str!; rebuild when they change. The
// PostgreSQL test variants run when EBB_TEST_POSTGRES_URL is set (or CI is).
include!("../build/test_services.rs");

fn main() {
    println!("cargo::rerun-if-changed=migrations");
    test_service("EBB_TEST_POSTGRES_URL", "ebb_test_postgres", "PostgreSQL");
}
