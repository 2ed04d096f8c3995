//! STOMP (`src/stomp/`) is a client of the embedding API: no file there names the
//! store crate (`ebb_store`) or the actor crate (`ebb_actors`), directly or through
//! this crate's re-exports of them (`crate::store`, `crate::actors`), and every
//! `crate::` path there starts at a module or item a protocol may use
//! ([`STOMP_ROOTS`]):
//!
//! - `broker`: the embedding API (`Broker`, `Message`, `Subscription`, ...);
//! - `auth`, `login_guard`: users and rights, refused logins; `error`, `Error`,
//!   `ErrorCode`: the API's error and its stable codes;
//! - `DestinationKey`, `DestinationKind`, `DestinationPattern`: the crate's re-exports
//!   of the destination key and of a wildcard destination (value types the API takes,
//!   not a way into the actors);
//! - `tls`: the certificate and its acceptor (rustls);
//! - `transport`: the listener, caps and registry every protocol shares;
//! - `stomp` itself.
//!
//! The transport (`src/transport/`) is shared by every protocol, so it names none,
//! nor the broker: only `auth` (a certificate's subject), `tls` and itself
//! ([`TRANSPORT_ROOTS`]). MQTT (`src/mqtt/`) is a folder of its own held to
//! STOMP's rule ([`protocol_roots`]), and so is any protocol after it.
//!
//! Comments count too: an intra-doc link is a dependency of the docs.
//!
//! The facade is closed: only its files ([`FACADE`]: `lib.rs`, `broker/`, `admin.rs`,
//! `stats.rs`, `error.rs`, `runtime.rs`, and the test harness) name the store or actor
//! crates; every other file of `src/` (the HTTP server, the CLI, metrics, the
//! configuration, users and rights, the protocols) uses what the facade owns or
//! re-exports.
//!
//! Only the kind table says which kind a destination is: outside it
//! (`actors/src/kinds/`, the key's parsing in `actors/src/destination/key.rs`, and
//! the registry's choice of actor in `actors/src/broker.rs`), no code of `src/` or
//! `actors/src/` names a kind (`DestinationKind::QUEUE`), tests a prefix
//! (`starts_with("/queue/")`) or matches on one: it asks the kind what it can do
//! ([`CAPABILITY_RULE`]).
//!
//! No crate has an import cycle: in `src/`, `actors/src/` and `store/src/`, the files
//! that name each other through `crate::` or `super::` paths in code (not comments)
//! form no circle, a module's own folder (`mod.rs`, `lib.rs` and what it declares)
//! counting as one place with each of its files.

use std::path::{Path, PathBuf};

/// Roots a `crate::` path in STOMP may start with.
const STOMP_ROOTS: &[&str] = &[
    "broker",
    "auth",
    "login_guard",
    "stomp",
    "error",
    "Error",
    "ErrorCode",
    "DestinationKey",
    "DestinationKind",
    "DestinationPattern",
    "tls",
    "transport",
];

/// Roots a `crate::` path in the transport may start with: no protocol, no broker.
const TRANSPORT_ROOTS: &[&str] = &["auth", "tls", "transport"];

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

/// Every place in `text` that breaks the rule (a lower crate named, or a `crate::`
/// path from a root not `allowed`), as `line: what`.
fn violations(text: &str, allowed: &[&str]) -> Vec<String> {
    let line_of = |at: usize| text[..at].lines().count().max(1);
    let mut found = names_lower_crates(text);
    for (at, _) in text.match_indices("crate::") {
        if text[..at].chars().next_back().is_some_and(is_ident) {
            continue; // e.g. `ebb_crate::`
        }
        for root in roots(&text[at + "crate::".len()..]) {
            if !allowed.contains(&root.as_str()) {
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

/// Every `.rs` file under `src/<folder>`, sorted, with the rule's violations.
fn broken_in(folder: &str, allowed: &[&str], expected: &[&str]) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder);
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    files.sort();
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in expected {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in src/{folder}: {names:?}"
        );
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for v in violations(&text, allowed) {
            broken.push(format!("{}:{v}", file.display()));
        }
    }
    broken
}

#[test]
fn stomp_uses_only_the_broker_api() {
    let broken = broken_in(
        "stomp",
        STOMP_ROOTS,
        &["command.rs", "connection.rs", "session.rs", "codec.rs"],
    );
    assert!(
        broken.is_empty(),
        "STOMP reaches past the Broker API (add what it needs to src/broker/):\n{}",
        broken.join("\n")
    );
}

/// Roots a `crate::` path in another protocol's folder may start with: STOMP's,
/// with the protocol's own folder for `stomp`.
fn protocol_roots(folder: &'static str) -> Vec<&'static str> {
    STOMP_ROOTS
        .iter()
        .map(|root| if *root == "stomp" { folder } else { *root })
        .collect()
}

#[test]
fn mqtt_uses_only_the_broker_api() {
    let broken = broken_in(
        "mqtt",
        &protocol_roots("mqtt"),
        &["mod.rs", "session.rs", "topic.rs", "wire.rs"],
    );
    assert!(
        broken.is_empty(),
        "MQTT reaches past the Broker API (add what it needs to src/broker/):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_transport_names_no_protocol() {
    let broken = broken_in(
        "transport",
        TRANSPORT_ROOTS,
        &["listener.rs", "caps.rs", "connections.rs", "client_ids.rs"],
    );
    assert!(
        broken.is_empty(),
        "the transport is shared by every protocol; it may name none, nor the broker:\n{}",
        broken.join("\n")
    );
}

/// Files of `src/` that may name the store and actor crates: the facade, and the test
/// harness (which builds stores for the tests).
const FACADE: &[&str] = &[
    "lib.rs",
    "broker/",
    "admin.rs",
    "stats.rs",
    "error.rs",
    "runtime.rs",
    "test_util/",
];

/// Where `text` names the store or actor crates, as `line: what`.
fn names_lower_crates(text: &str) -> Vec<String> {
    let line_of = |at: usize| text[..at].lines().count().max(1);
    let mut found = Vec::new();
    for name in FORBIDDEN {
        for (at, _) in text.match_indices(name) {
            let before = text[..at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            if before.is_some_and(is_ident) || after.is_some_and(is_ident) {
                continue; // part of a longer name (`ebb_store_usage_bytes`)
            }
            found.push(format!("{}: names `{name}`", line_of(at)));
        }
    }
    found
}

#[test]
fn only_the_facade_names_the_store_and_the_actors() {
    let mut edges = 0;
    let mut broken = Vec::new();
    for (path, text) in sources(&["src"]) {
        let relative = path.strip_prefix("src/").unwrap_or(&path);
        if FACADE
            .iter()
            .any(|f| relative == *f || (f.ends_with('/') && relative.starts_with(f)))
        {
            continue;
        }
        edges += 1;
        for v in names_lower_crates(&text) {
            broken.push(format!("src/{relative}:{v}"));
        }
    }
    assert!(
        edges >= 30,
        "only {edges} files outside the facade: is src/ read?"
    );
    assert!(
        broken.is_empty(),
        "a file outside the facade reaches the store or the actors (re-export what it needs from src/lib.rs):\n{}",
        broken.join("\n")
    );
}

/// The files (or folders, ending in `/`) that may name a kind: the table, the key's
/// parsing, the registry.
const KIND_TABLE: &[&str] = &[
    "actors/src/kinds/",
    "actors/src/destination/key.rs",
    "actors/src/broker.rs",
];

/// Ways of asking which kind a destination is, instead of what it can do.
const KIND_CHECKS: &[&str] = &[
    "DestinationKind::QUEUE",
    "DestinationKind::TOPIC",
    "KindActor::",
    "is_queue()",
    "is_topic()",
    "starts_with(\"queue://\")",
    "starts_with(\"topic://\")",
    "starts_with(\"/queue/\")",
    "starts_with(\"/topic/\")",
    "strip_prefix(\"queue://\")",
    "strip_prefix(\"topic://\")",
    "strip_prefix(\"/queue/\")",
    "strip_prefix(\"/topic/\")",
];

/// What [`KIND_CHECKS`] finds in `text`'s code before its first `#[cfg(test)]` (a
/// test may name the kinds it tests), comments left out, as `line: check`.
fn kind_checks(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let line = line.split("//").next().unwrap_or_default();
        for check in KIND_CHECKS {
            if line.contains(check) {
                found.push(format!("{}: {check}", n + 1));
            }
        }
    }
    found
}

/// The rule [`kind_checks`] enforces, as its failure says it.
const CAPABILITY_RULE: &str = "ask the kind what it can do (`key.capabilities().browse`, \
    `DestinationKind::all()`), as the kind table (actors/src/kinds/) declares it";

/// Every Rust file under `folders` of the workspace, sorted: (its path from the
/// workspace's top, its text).
fn sources(folders: &[&str]) -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for folder in folders {
        rust_files(&root.join(folder), &mut files);
    }
    files.sort();
    files
        .iter()
        .map(|file| {
            let relative = file
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (relative, std::fs::read_to_string(file).unwrap())
        })
        .collect()
}

#[test]
fn only_the_kind_table_says_which_kind_a_destination_is() {
    let mut broken = Vec::new();
    let mut read = 0;
    for (relative, text) in sources(&["src", "actors/src"]) {
        if KIND_TABLE.iter().any(|t| relative.starts_with(t)) {
            continue;
        }
        read += 1;
        for v in kind_checks(&text) {
            broken.push(format!("{relative}:{v}"));
        }
    }
    assert!(
        read >= 60,
        "only {read} files read: are src/ and actors/src/ there?"
    );
    assert!(
        broken.is_empty(),
        "code outside the kind table asks which kind a destination is; {CAPABILITY_RULE}:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_kind_check_sees_a_kind_check() {
    let text = "fn f(k: &DestinationKey) -> bool {\n    // is_queue() in a comment is fine\n    k.kind() == DestinationKind::QUEUE\n}\n#[cfg(test)]\nmod tests { const K: DestinationKind = DestinationKind::TOPIC; }\n";
    assert_eq!(
        kind_checks(text),
        vec!["3: DestinationKind::QUEUE".to_string()]
    );
    assert_eq!(
        kind_checks("if name.starts_with(\"/topic/\") {}"),
        vec!["1: starts_with(\"/topic/\")".to_string()]
    );
}

/// The module a file is (`["transport", "caps"]` for `transport/caps.rs`, `[]` for
/// `lib.rs`, `["http"]` for `http/mod.rs`).
fn module_of(relative: &str) -> Vec<String> {
    let trimmed = relative.trim_end_matches(".rs");
    let mut parts: Vec<String> = trimmed.split('/').map(String::from).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Code without comments and without a trailing `#[cfg(test)] mod tests` (whose
/// `super::` is the file itself).
fn code_of(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `code` (of module `me`) names through `crate::` and `super::` paths,
/// each as the path of segments after its root, resolved against `me`.
fn named_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (root, base) in [
        ("crate::", Vec::new()),
        ("super::", me[..me.len().saturating_sub(1)].to_vec()),
    ] {
        for (at, _) in code.match_indices(root) {
            if code[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let rest = &code[at + root.len()..];
            let mut segments = Vec::new();
            for first in roots(rest) {
                // Follow `a::b::c` after the first segment (or the group's item).
                let tail = rest
                    .trim_start_matches('{')
                    .trim_start()
                    .strip_prefix(first.as_str())
                    .unwrap_or("");
                let mut path = base.clone();
                path.push(first.clone());
                let mut more = tail;
                while let Some(next) = more.strip_prefix("::") {
                    let seg: String = next.chars().take_while(|c| is_ident(*c)).collect();
                    if seg.is_empty() {
                        break;
                    }
                    more = &next[seg.len()..];
                    path.push(seg);
                }
                segments.push(path);
            }
            out.extend(segments);
        }
    }
    out
}

/// The import cycles among the files of the crate whose sources are in `dir`.
fn cycles_in(dir: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let modules: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|f| {
            let relative = f.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            (module_of(&relative), std::fs::read_to_string(f).unwrap())
        })
        .collect();
    let index_of = |path: &[String]| -> Option<usize> {
        // The longest module that is a prefix of the path.
        (1..=path.len())
            .rev()
            .find_map(|n| modules.iter().position(|(m, _)| m.as_slice() == &path[..n]))
    };
    let mut edges = vec![std::collections::BTreeSet::new(); modules.len()];
    for (i, (me, text)) in modules.iter().enumerate() {
        for path in named_paths(&code_of(text), me) {
            let Some(j) = index_of(&path) else { continue };
            let (a, b) = (&modules[i].0, &modules[j].0);
            // A module and its own folder's files are one place.
            if i == j || a.starts_with(b) || b.starts_with(a) {
                continue;
            }
            edges[i].insert(j);
        }
    }
    // Strongly connected components with more than one file (Tarjan).
    struct Walk<'a> {
        edges: &'a [std::collections::BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk<'_>, v: usize) {
        w.index[v] = Some(w.next);
        w.low[v] = w.next;
        w.next += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.edges[v].clone().iter() {
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(iu) if w.on_stack[u] => w.low[v] = w.low[v].min(iu),
                _ => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                component.push(u);
                if u == v {
                    break;
                }
            }
            if component.len() > 1 {
                w.found.push(component);
            }
        }
    }
    let n = modules.len();
    let mut walk = Walk {
        edges: &edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            visit(&mut walk, v);
        }
    }
    walk.found
        .into_iter()
        .map(|c| c.into_iter().map(|i| modules[i].0.join("::")).collect())
        .collect()
}

#[test]
fn no_crate_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["src", "actors/src", "store/src"] {
        let cycles = cycles_in(&root.join(dir));
        assert!(cycles.is_empty(), "{dir}: import cycles among {cycles:?}");
    }
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let dir = std::env::temp_dir().join(format!("ebb-layering-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("x")).unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod a;\npub mod x;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::x::b::B;\npub struct A;\n").unwrap();
    std::fs::write(dir.join("x/mod.rs"), "pub mod b;\n").unwrap();
    std::fs::write(
        dir.join("x/b.rs"),
        "pub struct B(super::super::a::A);\nuse crate::{a::A as _};\n",
    )
    .unwrap();
    let cycles = cycles_in(&dir);
    std::fs::write(
        dir.join("x/b.rs"),
        "pub struct B;\n// crate::a::A in a comment\n",
    )
    .unwrap();
    let none = cycles_in(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(none, Vec::<Vec<String>>::new());
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
        assert!(
            !violations(bad, STOMP_ROOTS).is_empty(),
            "not caught: {bad}"
        );
    }
    // The transport names no protocol and not the broker.
    for bad in [
        "use crate::stomp::connection::Stomp;",
        "use crate::broker::Broker;",
        "/// As [`crate::stomp::session`] does.",
    ] {
        assert!(
            !violations(bad, TRANSPORT_ROOTS).is_empty(),
            "not caught: {bad}"
        );
    }
    for good in [
        "use crate::broker::{Broker, Message};",
        "use crate::{DestinationKey, DestinationKind};",
        "use crate::{auth::{Right, Security}, stomp::frame::Frame};",
        "pub type W = Result<(), crate::Error>;",
        "let my_ebb_store_count = 1;",
    ] {
        assert_eq!(
            violations(good, STOMP_ROOTS),
            Vec::<String>::new(),
            "{good}"
        );
    }
}
