//! `ebb check` as a new user meets it: read-only unless `--create` (a mistyped path
//! or schema is an error that says so, and nothing is created), the store named by a
//! configuration file, and a broker holding the store said aloud.

use crate::run_ebb;
use ebb::test_util::*;

/// The flags that name `t`'s store.
fn store_args(t: &TestStore) -> Vec<String> {
    let mut args = vec!["--store".to_string(), t.url.clone()];
    if let Some(schema) = &t.options.schema {
        args.extend(["--schema".to_string(), schema.clone()]);
    }
    args
}

async fn check_reads_and_never_creates_unless_asked(t: TestStore) {
    // A store that is not there: an error naming what is missing, nothing created.
    let missing = match &t.options.schema {
        Some(_) => vec![
            "--store".to_string(),
            t.url.clone(),
            "--schema".into(),
            "ebb_check_no_such_schema".into(),
        ],
        None => {
            let url = t.url.replace("ebb.db", "typo/ebb.db");
            vec!["--store".to_string(), url]
        }
    };
    let args: Vec<&str> = missing.iter().map(String::as_str).collect();
    let (ok, _, err) = run_ebb(&[&["check"], &args[..]].concat()).await;
    assert!(!ok, "{err}");
    assert!(err.contains("no store at"), "{err}");
    assert!(err.contains("--create"), "{err}");
    if t.options.schema.is_none() {
        let dir = t
            .url
            .trim_start_matches("sqlite://")
            .replace("ebb.db", "typo");
        assert!(!std::path::Path::new(&dir).exists(), "{dir} was created");
    }

    // The store exists once created; then a plain check reads it.
    let own = store_args(&t);
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    let (ok, _, err) = run_ebb(&[&["check"], &own[..]].concat()).await;
    assert!(!ok && err.contains("no store at"), "not created yet: {err}");
    let (ok, out, err) = run_ebb(&[&["check", "--create"], &own[..]].concat()).await;
    assert!(ok, "{err}");
    assert!(out.contains("is ready; highest message id 0"), "{out}");
    let (ok, out, err) =
        run_ebb(&[&["check"], &own[..], &["--destination", "queue://jobs"]].concat()).await;
    assert!(ok, "{err}");
    assert!(out.contains("queue://jobs: 0 messages"), "{out}");
    assert!(!out.contains("a broker holds"), "{out}");

    // A broker on it: said so; the counts are its.
    let broker = broker(&t, policy(0, 400), 1).await;
    broker
        .send("queue://jobs", ebb::Message::new("one").persistent(true))
        .await
        .unwrap();
    let (ok, out, err) =
        run_ebb(&[&["check"], &own[..], &["--destination", "queue://jobs"]].concat()).await;
    assert!(ok, "{err}");
    assert!(out.contains("a broker holds this store now"), "{out}");
    assert!(out.contains("queue://jobs: 1 messages"), "{out}");
    broker.shutdown().await.unwrap();
}

/// `--config` names the store as `ebb serve` reads it.
async fn check_takes_the_store_from_the_configuration(t: TestStore) {
    let dir = std::env::temp_dir().join(format!("ebb-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = t
        .options
        .schema
        .as_ref()
        .map_or(String::new(), |s| format!("schema = \"{s}\"\n"));
    let config = dir.join(format!(
        "{}.toml",
        t.options.schema.as_deref().unwrap_or("sqlite")
    ));
    std::fs::write(&config, format!("[store]\nurl = \"{}\"\n{schema}", t.url)).unwrap();
    let config = config.to_str().unwrap();
    let (ok, out, err) = run_ebb(&["check", "--config", config, "--create"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("store {}", ebb_store::redact_url(&t.url))),
        "{out}"
    );
    let _ = std::fs::remove_file(config);
}

/// `--destination` names its kind, as every name in Ebb does: a bare name is refused
/// before the store is opened, with the accepted forms; `/queue/NAME` and
/// `queue://NAME` report the same queue.
async fn check_refuses_a_destination_without_its_kind(t: TestStore) {
    let own = store_args(&t);
    let own: Vec<&str> = own.iter().map(String::as_str).collect();
    let (ok, _, err) = run_ebb(&[&["check", "--create"], &own[..]].concat()).await;
    assert!(ok, "{err}");

    let (ok, out, err) =
        run_ebb(&[&["check"], &own[..], &["--destination", "orders"]].concat()).await;
    assert!(!ok, "a bare name was accepted: {out}");
    assert!(
        err.contains("--destination orders: invalid destination `orders`"),
        "{err}"
    );
    assert!(err.contains("a destination names its kind"), "{err}");
    assert!(
        err.contains("/queue/orders") && err.contains("queue://orders"),
        "{err}"
    );
    assert!(!out.contains("orders:"), "{out}");

    for form in ["/queue/orders", "queue://orders"] {
        let (ok, out, err) =
            run_ebb(&[&["check"], &own[..], &["--destination", form]].concat()).await;
        assert!(ok, "{form}: {err}");
        assert!(out.contains("queue://orders: 0 messages"), "{form}: {out}");
    }
}

on_every_backend!(
    check_reads_and_never_creates_unless_asked,
    check_takes_the_store_from_the_configuration,
    check_refuses_a_destination_without_its_kind,
);
