//! The STOMP transport is a client of the embedding API: no file under `src/transport`
//! names the store crate (`ebb_store`) or the actor crate (`ebb_actors`), directly or
//! through this crate's re-exports of them (`crate::store`, `crate::actors`), and every
//! `crate::` path there starts at a module or item the transport may use:
//!
//! - `broker`: the embedding API (`Broker`, `Message`, `Subscription`, ...);
//! - `auth`: users and rights; `stomp`: the wire codec; `error`, `Error`: the API's error;
//! - `DestinationKey`, `DestinationKind`, `DestinationPattern`: the crate's re-exports
//!   of the destination key and of a wildcard destination (value types the API takes,
//!   not a way into the actors);
//! - `tls`: the certificate and its acceptor (rustls), for STOMP over TLS;
//! - `transport` itself.
//!
//! Comments count too: an intra-doc link is a dependency of the docs. A new transport
//! (STOMP over WebSocket, MQTT) under `src/transport` is held to the same rule.

use std::path::{Path, PathBuf};

/// Roots a `crate::` path in the transport may start with.
const ALLOWED_ROOTS: &[&str] = &[
    "broker",
    "auth",
    "stomp",
    "error",
    "Error",
    "DestinationKey",
    "DestinationKind",
    "DestinationPattern",
    "tls",
    "transport",
];

/// Names that reach the store or the actors, however spelled.
const FORBIDDEN: &[&str] = &[
    "ebb_store",
    "ebb_actors",
    "crate::store",
    "crate::actors",
    "ebb::store",
    "ebb::actors",
];

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every place in `text` that breaks the rule, as `line: what`.
fn violations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let line_of = |at: usize| text[..at].lines().count().max(1);
    for name in FORBIDDEN {
        for (at, _) in text.match_indices(name) {
            let before = text[..at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
                continue; // part of a longer name
            }
            found.push(format!("{}: names `{name}`", line_of(at)));
        }
    }
    for (at, _) in text.match_indices("crate::") {
        if text[..at].chars().next_back().is_some_and(is_ident) {
            continue; // e.g. `ebb_crate::`
        }
        for root in roots(&text[at + "crate::".len()..]) {
            if !ALLOWED_ROOTS.contains(&root.as_str()) {
                found.push(format!("{}: uses `crate::{root}`", line_of(at)));
            }
        }
    }
    found
}

/// The first segments of the path(s) after `crate::`: `broker::Broker` gives
/// `broker`, `{DestinationKey, auth::Right}` gives both roots.
fn roots(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut item = String::new();
        let mut items = Vec::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut item));
                    continue;
                }
                _ => {}
            }
            if depth == 0 || c != '{' {
                item.push(c);
            }
        }
        items.push(item);
        return items
            .iter()
            .map(|i| i.trim().chars().take_while(|c| is_ident(*c)).collect())
            .filter(|r: &String| !r.is_empty() && r != "self")
            .collect();
    }
    vec![rest.chars().take_while(|c| is_ident(*c)).collect()]
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_transport_uses_only_the_broker_api() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/transport");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in ["command.rs", "connection.rs", "session.rs", "listener.rs"] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for v in violations(&text) {
            broken.push(format!("{}:{v}", file.display()));
        }
    }
    assert!(
        broken.is_empty(),
        "the transport reaches past the Broker API (add what it needs to src/broker.rs):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_sees_each_way_past_the_api() {
    for bad in [
        "use ebb_store::SubscriptionKey;",
        "let k = ::ebb_actors::destination::DestinationKey::topic(\"t\");",
        "use crate::store::StoredMessage;",
        "use crate::actors::messages::Ack;",
        "use crate::{broker::Broker, stats};",
        "use crate::{\n    auth::Right,\n    QueueStats,\n};",
        "/// See [`crate::soak`].",
    ] {
        assert!(!violations(bad).is_empty(), "not caught: {bad}");
    }
    for good in [
        "use crate::broker::{Broker, Message};",
        "use crate::{DestinationKey, DestinationKind};",
        "use crate::{auth::{Right, Security}, stomp::frame::Frame};",
        "pub type W = Result<(), crate::Error>;",
        "let my_ebb_store_count = 1;",
    ] {
        assert_eq!(violations(good), Vec::<String>::new(), "{good}");
    }
}
