//! A store that refuses writes: SQLite on a full filesystem (a 4 MiB tmpfs the test
//! mounts, filled by a ballast file), PostgreSQL refusing every insert with
//! `disk_full` (SQLSTATE 53100, from a trigger). Either way a persistent SEND gets an
//! ERROR carrying its receipt-id, non-persistent traffic goes on, nothing receipted is
//! lost, and once space returns (the ballast deleted, the trigger dropped) the broker
//! takes persistent messages again by itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ebb::stomp::frame::{Command, Frame};
use ebb::test_util::stomp::*;
use ebb::test_util::*;

const QUEUE: &str = "/queue/full";

/// A persistent SEND of `body` with `receipt:<body>`; its answer.
async fn send(c: &mut Client, body: &str) -> Frame {
    let frame = format!("SEND\ndestination:{QUEUE}\npersistent:true\nreceipt:{body}\n\n{body}\0");
    c.write(frame.as_bytes()).await;
    c.frame()
        .await
        .unwrap_or_else(|| panic!("no answer to SEND {body}"))
}

/// The scenario, with `refuse` making the store refuse writes and `room` undoing it.
async fn refused_then_recovered<R, M>(t: &TestStore, refuse: R, room: M)
where
    R: std::future::Future<Output = ()>,
    M: std::future::Future<Output = ()>,
{
    let s = server(t, policy(0, 400)).await;
    let mut producer = Client::connected(s.addr, None).await;
    let mut receipted: Vec<String> = Vec::new();
    for n in 0..20 {
        let answer = send(&mut producer, &format!("before-{n}")).await;
        assert_eq!(answer.command, Command::Receipt, "{answer:?}");
        receipted.push(format!("before-{n}"));
    }
    let mut live = Client::connected(s.addr, None).await;
    live.write(b"SUBSCRIBE\nid:0\ndestination:/topic/live\nreceipt:sub\n\n\0")
        .await;
    receipt(&mut live, "sub").await;

    refuse.await;
    // Sends go on until the store is out of room (SQLite may still have free pages);
    // the first refusal names its SEND.
    let mut refusal = None;
    for n in 0..2_000 {
        let body = format!("during-{n}-{}", "x".repeat(2048));
        let answer = send(&mut producer, &body).await;
        match answer.command {
            Command::Receipt => receipted.push(body),
            Command::Error => {
                refusal = Some((answer, body));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let (error, body) = refusal.expect("an ERROR once the store is full");
    assert_eq!(error.get("receipt-id"), Some(body.as_str()), "{error:?}");
    let text = error.get("message").unwrap_or_default().to_string()
        + &String::from_utf8_lossy(&error.body);
    assert!(text.contains("full"), "the ERROR says why: {error:?}");
    assert!(producer.closed().await, "an ERROR closes its connection");

    // Non-persistent traffic goes on meanwhile, and other connections are served.
    let mut other = Client::connected(s.addr, None).await;
    other
        .write(b"SEND\ndestination:/topic/live\nreceipt:np\n\nstill here\0")
        .await;
    receipt(&mut other, "np").await;
    let message = live.frame().await.expect("the non-persistent message");
    assert_eq!(
        (message.command, &message.body[..]),
        (Command::Message, &b"still here"[..])
    );

    room.await;
    // The broker recovers by itself: the next persistent SEND is stored.
    let mut producer = Client::connected(s.addr, None).await;
    let answer = send(&mut producer, "after").await;
    assert_eq!(answer.command, Command::Receipt, "{answer:?}");
    receipted.push("after".into());

    // Every receipted message is there, once; the refused one is not.
    let mut consumer = Client::connected(s.addr, None).await;
    consumer
        .write(format!("SUBSCRIBE\nid:1\ndestination:{QUEUE}\nack:auto\n\n\0").as_bytes())
        .await;
    let mut got = Vec::new();
    while got.len() < receipted.len() {
        let f = consumer
            .frame()
            .await
            .unwrap_or_else(|| panic!("{} of {} delivered", got.len(), receipted.len()));
        assert_eq!(f.command, Command::Message, "{f:?}");
        got.push(String::from_utf8_lossy(&f.body).to_string());
    }
    assert_eq!(got, receipted);
    assert!(
        consumer.quiet().await.is_none(),
        "nothing beyond the receipted messages (the refused one was not stored)"
    );
    s.stop().await;
}

/// A tmpfs of `mib` MiB at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, mib: u32) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs at {} failed ({status}): the disk-full test needs root",
            dir.display()
        );
        Self(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Writes zeros to `path` until the filesystem is full.
fn fill(path: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 << 10];
    while file.write_all(&block).is_ok() {}
    // The last partial block may have gone in; what is left is less than a block.
    let _ = file.sync_all();
}

#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_root),
    ignore = "mounts a 4 MiB tmpfs for a full disk: run as root (CI always runs it)"
)]
async fn sqlite_on_a_full_disk() {
    let dir = std::env::temp_dir().join(format!("ebb-full-{}", std::process::id()));
    let _mount = Tmpfs::mount(&dir, 4);
    let t = TestStore::sqlite_in(&dir);
    let ballast = dir.join("ballast");
    let fill_it = {
        let ballast = ballast.clone();
        async move { fill(&ballast) }
    };
    let free_it = async move {
        std::fs::remove_file(&ballast).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    refused_then_recovered(&t, fill_it, free_it).await;
}

/// The store's tables in the test's schema refuse inserts as a full disk does.
async fn trigger(t: &TestStore, on: bool) {
    use sqlx::Connection;
    let schema = t.options.schema.as_deref().expect("a schema");
    let mut conn = sqlx::PgConnection::connect(&t.url).await.unwrap();
    let sql = if on {
        format!(
            "CREATE FUNCTION \"{schema}\".refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'could not extend file: No space left on device (disk full)' \
             USING ERRCODE = 'disk_full'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON \"{schema}\".ebb_msgs \
             FOR EACH ROW EXECUTE FUNCTION \"{schema}\".refuse()"
        )
    } else {
        format!("DROP TRIGGER refuse ON \"{schema}\".ebb_msgs")
    };
    sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
}

#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_postgres),
    ignore = "set EBB_TEST_POSTGRES_URL=postgres://USER@HOST:PORT/DB to run the PostgreSQL variant"
)]
async fn postgres_refusing_writes() {
    let t = TestStore::postgres();
    refused_then_recovered(&t, trigger(&t, true), trigger(&t, false)).await;
}

/// The store itself on a full disk, again and again, with messages of every size, so
/// that the refusal comes at an INSERT sometimes and at the COMMIT other times: after
/// each refusal, and the space back, the next write is stored and nothing committed
/// before is missing. (A COMMIT that SQLite refused once left its pooled connection
/// counting a transaction open, and every later write on it failed with "non-zero
/// transaction depth": the store now closes a connection whose write failed.)
#[actix_rt::test]
#[cfg_attr(
    not(ebb_test_root),
    ignore = "mounts a 4 MiB tmpfs for a full disk: run as root (CI always runs it)"
)]
async fn sqlite_recovers_after_every_kind_of_refusal() {
    use ebb_store::test_util::message;
    use ebb_store::MessageStoreExt;
    let dir = std::env::temp_dir().join(format!("ebb-full-store-{}", std::process::id()));
    let _mount = Tmpfs::mount(&dir, 4);
    let t = TestStore::sqlite_in(&dir);
    let store = t.open().await;
    let ballast = dir.join("ballast");
    let mut committed = 0u64;
    let mut refusals = 0;
    for cycle in 0..8usize {
        fill(&ballast);
        // Bodies from 100 bytes to 24 KiB, batches of 1 to 8.
        let size = 100 + cycle * 3_000;
        let batch = 1 + cycle % 8;
        let mut refused = false;
        for _ in 0..500 {
            let messages = (0..batch)
                .map(|_| message("queue://full", &"x".repeat(size), 0))
                .collect();
            match store.add_messages(messages).await {
                Ok(ids) => committed += ids.len() as u64,
                Err(e) => {
                    assert!(e.to_string().contains("full"), "cycle {cycle}: {e}");
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "cycle {cycle}: the disk never filled");
        refusals += 1;
        std::fs::remove_file(&ballast).unwrap();
        // Space is back: the next write is stored, on whatever pooled connection.
        for _ in 0..4 {
            let ids = store
                .add_messages(vec![message("queue://full", "after", 0)])
                .await
                .unwrap_or_else(|e| {
                    panic!("cycle {cycle}: a write after the space came back failed: {e}")
                });
            committed += ids.len() as u64;
        }
        assert_eq!(
            store.count_messages("queue://full").await.unwrap(),
            committed
        );
        // Make room for the next cycle's ballast.
        let rows = store.browse("queue://full", 0, 1000).await.unwrap();
        let ids: Vec<i64> = rows.iter().map(|m| m.id).collect();
        store
            .write(vec![ebb_store::WriteOp::Remove {
                container: "queue://full".into(),
                ids: ids.clone(),
            }])
            .await
            .unwrap();
        committed -= ids.len() as u64;
    }
    assert_eq!(refusals, 8);
    store.close().await;
}
