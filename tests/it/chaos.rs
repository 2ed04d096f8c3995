//! `ebb chaos` end to end, short: five faults against an `ebb serve` child on SQLite
//! (SIGKILL, a silent consumer) and on PostgreSQL (also database connections cut by a
//! proxy and ended by the server), with the reconciliation asserted: nothing receipted
//! lost, no acked message back, every poison message dead-lettered, no partial frame
//! or half a transaction delivered, and every consume-transform-produce transaction
//! all or nothing (no input consumed twice or never, no output lost). How long each fault left the broker unavailable is
//! reported, not asserted (beyond "it recovered").

use ebb::cli::chaos::{run_chaos, ChaosOptions};
use ebb::test_util::*;

async fn five_faults_lose_nothing(t: TestStore) {
    let options = ChaosOptions {
        store: Some(t.url.clone()),
        cycles: 5,
        cycle_ms: 1500,
        rate: 100,
        json: true,
        ebb: Some(env!("CARGO_BIN_EXE_ebb").into()),
        // Restarting the server would end the other tests' connections.
        restart_postgres: None,
        faults: Vec::new(),
    };
    let report = run_chaos(&options).await.unwrap();
    assert_eq!(report.failures(), Vec::<String>::new(), "{report:#?}");
    assert_eq!(report.lost, 0);
    assert!(report.receipted > 500, "{report:#?}");
    assert!(report.transactions_committed > 50, "{report:#?}");
    // Consume-transform-produce in one COMMIT: none consumed twice, none lost.
    assert!(report.transforms_committed > 50, "{report:#?}");
    assert_eq!(
        (report.untransformed, report.transformed_twice),
        (0, 0),
        "{report:#?}"
    );
    assert!(
        report.dead_lettered > 0,
        "poison messages reached the DLQ: {report:#?}"
    );
    assert!(report.partial_frames > 0, "{report:#?}");
    // Every receipted message was delivered, or had a TTL.
    assert!(
        report.delivered + report.expired >= report.receipted,
        "{report:#?}"
    );
    let kinds: Vec<&str> = report.faults.iter().map(|f| f.kind).collect();
    let expected: &[&str] = if t.url.starts_with("postgres") {
        &["kill", "stalled-consumer", "db-cut", "db-terminate"]
    } else {
        &["kill", "stalled-consumer"]
    };
    assert_eq!(kinds, expected);
    assert_eq!(report.faults.iter().map(|f| f.count).sum::<u32>(), 5);
    assert!(report.clean_stop);
}

on_every_backend!(five_faults_lose_nothing);
