//! A commit whose answer is lost (PostgreSQL's connection breaks after the server got
//! the `COMMIT`): the store finds the batch's rows and answers it as committed, so a
//! stored message is never reported refused. A commit the server refused stays an
//! error, and nothing of it is stored. Through the TCP proxy, on PostgreSQL (SQLite
//! commits on the broker's own machine: its answer cannot be lost).

use ebb_store::proxy::DatabaseProxy;
use ebb_store::test_util::{message, TestStore};
use ebb_store::WriteOp;

async fn opened_through(
    t: &TestStore,
    proxy: &DatabaseProxy,
) -> std::sync::Arc<dyn ebb_store::MessageStore> {
    ebb_store::open(proxy.url(), &t.options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_commit_whose_answer_is_lost_is_settled_by_its_rows() {
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let store = opened_through(&t, &proxy).await;
    proxy.lose_next_commit_answer();
    let ops = vec![
        WriteOp::Add(message("queue://doubt", "a", 0)),
        WriteOp::Add(message("queue://doubt", "b", 0)),
    ];
    let outcomes = store.write(ops).await.expect("answered as committed");
    assert_eq!(outcomes.len(), 2);
    assert_eq!(store.stats().snapshot().in_doubt_commits, 1);
    assert_eq!(store.count_messages("queue://doubt").await.unwrap(), 2);
    // The next write goes through as usual.
    store
        .write(vec![WriteOp::Add(message("queue://doubt", "c", 0))])
        .await
        .unwrap();
    assert_eq!(store.count_messages("queue://doubt").await.unwrap(), 3);
    assert_eq!(store.stats().snapshot().in_doubt_commits, 1);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn a_commit_the_server_refused_stays_an_error() {
    use sqlx::Connection;
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let store = opened_through(&t, &proxy).await;
    // A deferred constraint trigger: the server refuses the transaction at COMMIT.
    let schema = t.options.schema.as_deref().unwrap();
    let mut conn = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
         CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON \"{schema}\".ebb_msgs \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse()"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let e = store
        .write(vec![WriteOp::Add(message("queue://doubt", "a", 0))])
        .await
        .expect_err("refused at commit");
    assert!(e.to_string().contains("commit"), "{e}");
    assert_eq!(store.stats().snapshot().in_doubt_commits, 0);
    assert_eq!(store.count_messages("queue://doubt").await.unwrap(), 0);
    store.close().await;
}

/// A batch without new ids (queue acks: deletes) proves its commit by the commit mark:
/// answered as committed, so the ack is not taken back and the message is not
/// delivered again. A batch after it (a new token) settles the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn an_ack_whose_commit_answer_is_lost_is_settled_by_the_commit_mark() {
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let store = opened_through(&t, &proxy).await;
    let added = store
        .write(vec![
            WriteOp::Add(message("queue://doubt", "a", 0)),
            WriteOp::Add(message("queue://doubt", "b", 0)),
            WriteOp::Add(message("queue://doubt", "c", 0)),
        ])
        .await
        .unwrap();
    let ids: Vec<i64> = added
        .into_iter()
        .map(|o| match o {
            ebb_store::WriteOutcome::Added(id) => id,
            other => panic!("{other:?}"),
        })
        .collect();
    for (round, id) in ids[..2].iter().enumerate() {
        proxy.lose_next_commit_answer();
        let outcomes = store
            .write(vec![WriteOp::Remove {
                container: "queue://doubt".into(),
                ids: vec![*id],
            }])
            .await
            .expect("answered as committed");
        assert_eq!(outcomes, vec![ebb_store::WriteOutcome::Deleted(1)]);
        assert_eq!(store.stats().snapshot().in_doubt_commits, round as u64 + 1);
    }
    assert_eq!(store.count_messages("queue://doubt").await.unwrap(), 1);
    store.close().await;
}

/// An ack batch the server refused at COMMIT is not settled by an older token: it
/// stays an error, and the message stays stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn an_ack_the_server_refused_stays_an_error() {
    use sqlx::Connection;
    let t = TestStore::postgres();
    let proxy = DatabaseProxy::start(&t.url).await.unwrap();
    let store = opened_through(&t, &proxy).await;
    let added = store
        .write(vec![WriteOp::Add(message("queue://doubt", "a", 0))])
        .await
        .unwrap();
    let ebb_store::WriteOutcome::Added(id) = added[0] else {
        panic!("{added:?}")
    };
    // One ack-only batch commits, so the mark holds a token of this store already.
    store
        .write(vec![WriteOp::Remove {
            container: "queue://doubt".into(),
            ids: vec![id + 1000],
        }])
        .await
        .unwrap();
    let schema = t.options.schema.as_deref().unwrap();
    let mut conn = sqlx::PgConnection::connect(&t.url).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
         CREATE CONSTRAINT TRIGGER refuse AFTER DELETE ON \"{schema}\".ebb_msgs \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse()"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let e = store
        .write(vec![WriteOp::Remove {
            container: "queue://doubt".into(),
            ids: vec![id],
        }])
        .await
        .expect_err("refused at commit");
    assert!(e.to_string().contains("commit"), "{e}");
    assert_eq!(store.stats().snapshot().in_doubt_commits, 0);
    assert_eq!(store.count_messages("queue://doubt").await.unwrap(), 1);
    store.close().await;
}
