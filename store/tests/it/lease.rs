//! The lease lock on PostgreSQL (`StoreOptions::lease`, high availability): one store
//! holds it and renews it; another waits until it is released or has expired by the
//! database's clock; a holder cut off from the database reports it lost before a
//! standby can take over, and then commits nothing, even once it reaches the database
//! again; a lease and the advisory lock exclude each other. Through the TCP proxy.

use std::sync::Arc;
use std::time::Duration;

use ebb_store::proxy::DatabaseProxy;
use ebb_store::test_util::{message, TestStore};
use ebb_store::{LeaseOptions, LeaseState, LockAttempt, MessageStore, StoreError, WriteOp};
use tokio::time::Instant;

/// Short, so the tests wait little: fenced 250 ms before the lease could end.
const LEASE_MS: u64 = 1_500;
const RENEW_MS: u64 = 250;

async fn leased(t: &TestStore, url: &str) -> Arc<dyn MessageStore> {
    let mut options = t.options.clone();
    options.lease = Some(LeaseOptions::new(LEASE_MS, RENEW_MS).unwrap());
    ebb_store::open(url, &options).await.unwrap()
}

fn held_by(attempt: LockAttempt) -> String {
    match attempt {
        LockAttempt::Held(by) => by,
        LockAttempt::Acquired => panic!("acquired a lease another store holds"),
    }
}

async fn add(store: &dyn MessageStore, body: &str) -> Result<(), StoreError> {
    store
        .write(vec![WriteOp::Add(message("queue://ha", body, 0))])
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_standby_takes_over_only_after_the_holder_fenced_itself() {
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let active = leased(&t, proxy.url()).await;
    assert_eq!(active.try_lock().await.unwrap(), LockAttempt::Acquired);
    let mut state = active.lease_state().expect("a lease is held");
    let standby = leased(&t, &t.url).await;
    let by = held_by(standby.try_lock().await.unwrap());
    assert!(by.contains("its lease is held by"), "{by}");
    assert!(
        matches!(
            add(&*standby, "from the standby").await,
            Err(StoreError::LeaseLost(_))
        ),
        "a standby wrote"
    );
    // Renewals keep it for several lease periods.
    add(&*active, "before").await.unwrap();
    tokio::time::sleep(Duration::from_millis(LEASE_MS * 2)).await;
    held_by(standby.try_lock().await.unwrap());
    assert_eq!(*state.borrow(), LeaseState::Held);
    add(&*active, "still active").await.unwrap();

    // Cut off from the database, the holder stops renewing.
    proxy.cut();
    let standby_took = {
        let standby = Arc::clone(&standby);
        tokio::spawn(async move {
            loop {
                if standby.try_lock().await.unwrap() == LockAttempt::Acquired {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    state.changed().await.unwrap();
    let fenced = Instant::now();
    let why = match &*state.borrow() {
        LeaseState::Lost(why) => why.clone(),
        LeaseState::Held => panic!("changed to held"),
    };
    assert!(why.contains("no renewal succeeded"), "{why}");
    let took = standby_took.await.unwrap();
    assert!(
        fenced < took,
        "the standby took over {:?} before the holder fenced itself",
        fenced - took
    );
    add(&*standby, "after takeover").await.unwrap();

    // Back on the network, the old holder commits nothing.
    proxy.restore();
    match add(&*active, "late").await {
        Err(StoreError::LeaseLost(_)) => {}
        other => panic!("the fenced store wrote: {other:?}"),
    }
    assert_eq!(standby.count_messages("queue://ha").await.unwrap(), 3);
    active.close().await;
    standby.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_released_lease_is_taken_at_once() {
    let t = TestStore::postgres();
    let active = leased(&t, &t.url).await;
    assert_eq!(active.try_lock().await.unwrap(), LockAttempt::Acquired);
    let standby = leased(&t, &t.url).await;
    held_by(standby.try_lock().await.unwrap());
    let mut state = active.lease_state().unwrap();
    active.close().await;
    // Released, not expired: the next attempt takes it.
    assert_eq!(standby.try_lock().await.unwrap(), LockAttempt::Acquired);
    assert!(matches!(&*state.borrow_and_update(), LeaseState::Lost(_)));
    add(&*standby, "new active").await.unwrap();
    standby.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_lease_and_the_advisory_lock_exclude_each_other() {
    let t = TestStore::postgres();
    let plain = t.open().await;
    plain.lock_exclusive().await.unwrap();
    let ha = leased(&t, &t.url).await;
    let by = held_by(ha.try_lock().await.unwrap());
    assert!(by.contains("advisory lock"), "{by}");
    plain.close().await;
    assert_eq!(ha.try_lock().await.unwrap(), LockAttempt::Acquired);
    let second = t.open().await;
    match second.lock_exclusive().await {
        Err(StoreError::Locked(by)) => assert!(by.contains("its lease is held by"), "{by}"),
        other => panic!("a broker without a lease took a leased store: {other:?}"),
    }
    assert!(second.locked_by_another().await.unwrap());
    second.close().await;
    ha.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_broker_without_a_lease_stops_writing_once_a_standby_took_over() {
    use sqlx::Connection;
    let t = TestStore::postgres();
    let plain = t.open().await;
    plain.lock_exclusive().await.unwrap();
    let mut state = plain.lease_state().expect("the advisory lock is watched");
    add(&*plain, "before").await.unwrap();
    // Its lock's session ends (a lost connection, a restart of the server's backend).
    let mut admin = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let key = format!("ebb:{}:ebb_", t.options.schema.as_deref().unwrap());
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' \
         AND granted AND objid::bigint = (hashtext($1)::bigint & 4294967295)",
    )
    .bind(&key)
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "no advisory lock session to end");
    let ha = leased(&t, &t.url).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while ha.try_lock().await.unwrap() != LockAttempt::Acquired {
        assert!(Instant::now() < deadline, "the standby never took over");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match add(&*plain, "after").await {
        Err(StoreError::LeaseLost(why)) => assert!(why.contains("standby took over"), "{why}"),
        other => panic!("the broker without a lease wrote after the takeover: {other:?}"),
    }
    assert!(matches!(&*state.borrow_and_update(), LeaseState::Lost(_)));
    add(&*ha, "new active").await.unwrap();
    assert_eq!(ha.count_messages("queue://ha").await.unwrap(), 2);
    plain.close().await;
    ha.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_write_stuck_in_its_transaction_does_not_block_a_takeover() {
    use sqlx::Connection;
    let t = TestStore::postgres();
    let standby = leased(&t, &t.url).await;
    // A paused broker's write: the lease row share-locked, the transaction idle, on a
    // session the server ends after 1 s idle (a leased store's pool sets the lease).
    let schema = t.options.schema.as_deref().unwrap();
    let mut paused = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::raw_sql(&format!(
        "SET idle_in_transaction_session_timeout = 1000; BEGIN; \
         SELECT 1 FROM \"{schema}\".ebb_lock WHERE name = 'broker' FOR SHARE"
    ))
    .execute(&mut paused)
    .await
    .unwrap();
    let by = held_by(standby.try_lock().await.unwrap());
    assert!(by.contains("locked by a write"), "{by}");
    // The limit only keeps a broken build from hanging.
    let deadline = Instant::now() + Duration::from_secs(20);
    while standby.try_lock().await.unwrap() != LockAttempt::Acquired {
        assert!(
            Instant::now() < deadline,
            "the takeover waited for the paused write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    add(&*standby, "taken").await.unwrap();
    standby.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn the_next_broker_waits_for_a_dead_brokers_last_commit() {
    use sqlx::Connection;
    let t = TestStore::postgres();
    let first = t.open().await;
    first.lock_exclusive().await.unwrap();
    add(&*first, "first").await.unwrap();
    let late_id = first.last_assigned_id() + 1;
    // The dead broker's last write: begun (the lock row share-locked, as each write
    // does), its row inserted, its COMMIT not done yet when its lock's session ended.
    let schema = t.options.schema.clone().unwrap();
    let mut late = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN; SELECT 1 FROM \"{schema}\".ebb_lock WHERE name = 'broker' FOR SHARE; \
         INSERT INTO \"{schema}\".ebb_msgs (id, container, msgid, msg) \
         VALUES ({late_id}, 'queue://ha', 'late', '\\x00')"
    ))
    .execute(&mut late)
    .await
    .unwrap();
    first.close().await;
    // The next broker takes the lock only once that write has ended, and counts it.
    let next = t.open().await;
    let commit = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sqlx::raw_sql("COMMIT").execute(&mut late).await.unwrap();
    };
    let (_, locked) = tokio::join!(commit, next.lock_exclusive());
    locked.unwrap();
    assert!(
        next.last_assigned_id() >= late_id,
        "the next broker's ids start below the late commit's {late_id}"
    );
    add(&*next, "next").await.unwrap();
    assert_eq!(next.count_messages("queue://ha").await.unwrap(), 3);
    next.close().await;
}
