//! The docs a newcomer finds their way in stay true: `README.md` and every chapter of
//! the book (`docs/*.md`, listed in `docs/SUMMARY.md`).
//!
//! - Every relative Markdown link (`[x](path)`, `[x](path#anchor)`, images too) names
//!   a file that exists, relative to the file that holds the link; an `#anchor` into
//!   a Markdown file (or the file itself) names one of its headings by its
//!   GitHub-style slug (lower case, punctuation dropped, spaces as `-`, `-1`, `-2`
//!   for repeated headings).
//! - `docs/SUMMARY.md` lists every chapter of `docs/`, and every entry exists.
//! - Every command shown parses. In fenced blocks tagged `sh`, `bash` or `shell`
//!   every line is a command; in `console`, `text` and untagged blocks, the lines
//!   that start with `$ `. A command is read as a shell would split it (quotes,
//!   `\` continuations), after its leading `$ ` and `NAME=value` assignments, up to
//!   the first unquoted `|`, `&&`, `&`, `;`, `>`, `<` or `#` (a comment). `ebb ...`,
//!   `target/release/ebb ...` and `cargo run [--release] -- ...` are parsed by the
//!   binary's own definition (`ebb::cli::Cli`, clap); a parse error fails the test
//!   with the file, the line and clap's message. Every `cargo` line's
//!   `--bench NAME`, `--test NAME` and `--example NAME` must name a bench of
//!   `Cargo.toml`, a test (`tests/NAME.rs` or `tests/NAME/main.rs`) or an example
//!   (`examples/NAME.rs`).
//! - Placeholders: a command with a word that is exactly `...` or `<WORD>` is a
//!   template, not a command, and is skipped (a `...` inside a value, as in
//!   `--store postgres://...`, is only a value and parses).
//! - A chapter with a Rust code block (` ```rust `, not `ignore`) is run as a doc
//!   test: `src/lib.rs` includes it (`include_str!("../docs/...")`), as it includes
//!   the README.
//!
//! `the_checks_see_what_is_broken` feeds a broken sample through the same functions,
//! so a check that stopped seeing anything would fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace's top folder.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `docs/*.md`, as (path from the top, text), sorted.
fn doc_files() -> Vec<(PathBuf, String)> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    chapters.sort();
    files.extend(chapters);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(root().join(&p))
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, text)
        })
        .collect()
}

/// One fenced code block: its tag (`sh`, `console`, `""` untagged, ...) and its lines
/// with their line numbers (1-based).
struct Block {
    tag: String,
    lines: Vec<(usize, String)>,
}

/// The lines outside fenced code blocks (with their numbers), and the blocks.
fn split_blocks(text: &str) -> (Vec<(usize, &str)>, Vec<Block>) {
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(rest) = trimmed.strip_prefix("```") {
                    let fence = "```".to_string();
                    let tag = rest.trim().to_string();
                    open = Some((
                        fence,
                        Block {
                            tag,
                            lines: Vec::new(),
                        },
                    ));
                } else {
                    prose.push((n, line));
                }
            }
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence {
                    blocks.push(open.take().unwrap().1);
                } else {
                    block.lines.push((n, line.to_string()));
                }
            }
        }
    }
    if let Some((_, block)) = open {
        blocks.push(block);
    }
    (prose, blocks)
}

/// `line` without its inline code spans (`` `...` ``): a `](` inside code is no link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the Markdown links (and images) on the prose lines of `text`, with
/// their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let (prose, _) = split_blocks(text);
    let mut found = Vec::new();
    for (n, line) in prose {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let mut depth = 0;
            let mut end = None;
            for (i, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = Some(i);
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let Some(end) = end else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            found.push((n, target.trim_matches(['<', '>']).to_string()));
            rest = &after[end..];
        }
    }
    found
}

/// GitHub's anchor for a heading's text: lower case, inline code marks and
/// punctuation dropped (letters, digits, `-`, `_` and spaces kept), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `text`'s headings (outside code blocks), repeated ones numbered as
/// GitHub does (`name`, `name-1`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split_blocks(text);
    let mut seen = BTreeSet::new();
    for (_, line) in prose {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut k = 0;
            while seen.contains(&anchor) {
                k += 1;
                anchor = format!("{base}-{k}");
            }
            seen.insert(anchor);
        }
    }
    seen
}

/// What is wrong with the relative links of `text`, the file at `path` (from the
/// workspace's top): `path:line: ...` each.
fn broken_links(path: &Path, text: &str) -> Vec<String> {
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut broken = Vec::new();
    for (n, target) in links(text) {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('/')
        {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (target.as_str(), None),
        };
        let at = format!("{}:{n}", path.display());
        let linked = if file.is_empty() {
            path.to_path_buf()
        } else {
            dir.join(file)
        };
        let on_disk = root().join(&linked);
        if !file.is_empty() && !on_disk.exists() {
            broken.push(format!(
                "{at}: link to {target}: {} does not exist",
                linked.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor {
            if linked.extension().is_some_and(|e| e == "md") {
                let heads = if file.is_empty() {
                    anchors(text)
                } else {
                    anchors(&std::fs::read_to_string(&on_disk).unwrap())
                };
                if !heads.contains(anchor) {
                    broken.push(format!(
                        "{at}: link to {target}: {} has no heading #{anchor} (it has: {})",
                        linked.display(),
                        heads.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
    }
    broken
}

/// What is wrong between `docs/SUMMARY.md` (`summary`) and the chapters of `docs/`
/// (`chapters`, file names): chapters it does not list.
fn unlisted_chapters(summary: &str, chapters: &[String]) -> Vec<String> {
    let listed: BTreeSet<String> = links(summary)
        .into_iter()
        .map(|(_, t)| t.split('#').next().unwrap_or_default().to_string())
        .collect();
    chapters
        .iter()
        .filter(|c| c.as_str() != "SUMMARY.md" && !listed.contains(c.as_str()))
        .map(|c| format!("docs/SUMMARY.md: docs/{c} is a chapter it does not list"))
        .collect()
}

/// A command line split into words as a shell would (quotes, backslashes), up to the
/// first unquoted `|`, `&&`, `&`, `;`, `>`, `<` or a `#` that starts a word.
/// `Err` for an unbalanced quote.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("unbalanced '".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err("unbalanced \"".into()),
                        },
                        Some(c) => word.push(c),
                        None => return Err("unbalanced \"".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '|' | '&' | ';' | '>' | '<' => break,
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The commands of a block: (line number, text), with `\` continuations joined.
fn commands(block: &Block) -> Vec<(usize, String)> {
    let every_line = matches!(block.tag.as_str(), "sh" | "bash" | "shell");
    let prompted = matches!(block.tag.as_str(), "" | "console" | "text");
    if !every_line && !prompted {
        return Vec::new();
    }
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continuing = false;
    for (n, line) in &block.lines {
        let line = line.trim();
        if continuing {
            let last = out.last_mut().unwrap();
            last.1.push(' ');
            last.1.push_str(line.trim_end_matches('\\'));
            continuing = line.ends_with('\\');
            continue;
        }
        let command = if every_line {
            Some(line)
        } else {
            line.strip_prefix("$ ")
        };
        if let Some(command) = command {
            out.push((*n, command.trim_end_matches('\\').to_string()));
            continuing = command.ends_with('\\');
        }
    }
    out
}

/// A template, not a command: a word that is exactly `...`, or a `<WORD>` (letters,
/// digits, `_`, `-`).
fn is_template(command: &str) -> bool {
    command.split_whitespace().any(|w| {
        w == "..."
            || w.strip_prefix('<')
                .and_then(|w| w.strip_suffix('>'))
                .is_some_and(|w| {
                    !w.is_empty()
                        && w.chars()
                            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
                })
    })
}

/// What is wrong with one command line: `None` when it parses (or is no command of
/// Ebb's, or a template).
fn bad_command(command: &str, parse: &dyn Fn(&[String]) -> Result<(), String>) -> Option<String> {
    if is_template(command) {
        return None;
    }
    let words = match shell_words(command) {
        Ok(words) => words,
        Err(e) => return Some(e),
    };
    let words: Vec<String> = words
        .into_iter()
        .skip_while(|w| {
            w.split_once('=').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
        })
        .collect();
    let program = words.first()?;
    let is_ebb = program == "ebb"
        || program.ends_with("target/release/ebb")
        || program.ends_with("target/debug/ebb");
    if is_ebb {
        return parse(&words[1..]).err();
    }
    if program != "cargo" {
        return None;
    }
    let mut problems = Vec::new();
    let before_dashes: Vec<&String> = words.iter().take_while(|w| *w != "--").collect();
    for (flag, exists) in [
        ("--bench", bench_exists as fn(&str) -> bool),
        ("--test", test_exists),
        ("--example", example_exists),
    ] {
        for pair in before_dashes.windows(2) {
            if pair[0] == flag && !exists(pair[1]) {
                problems.push(format!("{flag} {}: no such target", pair[1]));
            }
        }
    }
    let runs_ebb = words.get(1).is_some_and(|w| w == "run")
        && !before_dashes
            .iter()
            .any(|w| *w == "--example" || *w == "--bin" || *w == "-p" || *w == "--package");
    if runs_ebb {
        if let Some(dashes) = words.iter().position(|w| w == "--") {
            if let Err(e) = parse(&words[dashes + 1..]) {
                problems.push(e);
            }
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn bench_exists(name: &str) -> bool {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    manifest.contains(&format!("[[bench]]\nname = \"{name}\""))
}

fn test_exists(name: &str) -> bool {
    let tests = root().join("tests");
    tests.join(format!("{name}.rs")).exists() || tests.join(name).join("main.rs").exists()
}

fn example_exists(name: &str) -> bool {
    root().join("examples").join(format!("{name}.rs")).exists()
}

/// The `ebb` binary's own parse of `args` (without the program name): its clap
/// definition, `ebb::cli::Cli`. `--help` and `--version` count as parsed.
#[cfg(feature = "cli")]
fn parse_ebb(args: &[String]) -> Result<(), String> {
    use clap::Parser;
    let argv = std::iter::once("ebb".to_string()).chain(args.iter().cloned());
    match ebb::cli::Cli::try_parse_from(argv) {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(format!(
            "`ebb {}`: {}",
            args.join(" "),
            e.to_string().lines().next().unwrap_or_default()
        )),
    }
}

/// What is wrong with the commands shown in `text`, the file at `path`.
fn bad_commands(
    path: &Path,
    text: &str,
    parse: &dyn Fn(&[String]) -> Result<(), String>,
) -> Vec<String> {
    let (_, blocks) = split_blocks(text);
    let mut bad = Vec::new();
    for block in &blocks {
        for (n, command) in commands(block) {
            if let Some(problem) = bad_command(&command, parse) {
                bad.push(format!("{}:{n}: {command}\n    {problem}", path.display()));
            }
        }
    }
    bad
}

/// A file with a Rust block that rustdoc would compile, not included as a doc test.
fn untested_rust(path: &Path, text: &str, lib_rs: &str) -> Option<String> {
    let (_, blocks) = split_blocks(text);
    let compiled = blocks.iter().any(|b| {
        let tags: Vec<&str> = b.tag.split(',').map(str::trim).collect();
        tags.first() == Some(&"rust") && !tags.contains(&"ignore")
    });
    let included = lib_rs.contains(&format!("include_str!(\"../{}\")", path.display()));
    (compiled && !included).then(|| {
        format!(
            "{}: a Rust code block that no doc test runs: include the file in src/lib.rs \
             (#[doc = include_str!(\"../{}\")] on a #[cfg(doctest)] item) or tag it rust,ignore",
            path.display(),
            path.display()
        )
    })
}

#[test]
fn every_relative_link_resolves() {
    let broken: Vec<String> = doc_files()
        .iter()
        .flat_map(|(path, text)| broken_links(path, text))
        .collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_summary_lists_every_chapter() {
    let summary = std::fs::read_to_string(root().join("docs/SUMMARY.md")).unwrap();
    let chapters: Vec<String> = doc_files()
        .iter()
        .filter_map(|(p, _)| p.strip_prefix("docs").ok())
        .map(|p| p.display().to_string())
        .collect();
    let mut problems = unlisted_chapters(&summary, &chapters);
    problems.extend(broken_links(Path::new("docs/SUMMARY.md"), &summary));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let book = std::fs::read_to_string(root().join("docs/book.toml")).unwrap();
    assert!(
        book.contains("title = \"Ebb\"") && book.contains("src = \".\""),
        "{book}"
    );
}

#[cfg(feature = "cli")]
#[test]
fn every_command_shown_parses() {
    let bad: Vec<String> = doc_files()
        .iter()
        .flat_map(|(path, text)| bad_commands(path, text, &parse_ebb))
        .collect();
    assert!(
        bad.is_empty(),
        "commands that do not parse:\n{}",
        bad.join("\n")
    );
}

/// Every `toml` block is a configuration `ebb serve --config` accepts: it parses with
/// `FileConfig::parse`, so no key shown is misspelt, retired or of the wrong type
/// (the blocks' commented keys are not read).
#[test]
fn every_configuration_shown_parses() {
    let mut bad = Vec::new();
    for (path, text) in doc_files() {
        let (_, blocks) = split_blocks(&text);
        for block in blocks.iter().filter(|b| b.tag == "toml") {
            let toml: String = block.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
            if let Err(e) = ebb::config::FileConfig::parse(&toml) {
                let line = block.lines.first().map_or(0, |(n, _)| *n);
                bad.push(format!("{}:{line}: {e}", path.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "configurations that do not parse:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_rust_example_is_a_doc_test() {
    let lib_rs = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let untested: Vec<String> = doc_files()
        .iter()
        .filter_map(|(path, text)| untested_rust(path, text, &lib_rs))
        .collect();
    assert!(untested.is_empty(), "{}", untested.join("\n"));
}

/// The checks above, fed a broken sample: each fault is reported, and the sound lines
/// beside them are not.
#[test]
fn the_checks_see_what_is_broken() {
    let sample = "\
# A sample

## The `ebb` command, twice

[sound](getting-started.md) [sound anchor](getting-started.md#the-ebb-command)
[here](#the-ebb-command-twice) [image](console-overview.png) [web](https://example.com)
[gone](no-such-chapter.md) and [bad anchor](getting-started.md#no-such-heading)
`[not a link](nowhere.md)` in code, and [self](#nope)

```sh
cargo run --release -- serve --http 127.0.0.1:9404
EBB_BENCH_POSTGRES_URL=postgres://... cargo bench --bench store -- group_commit
ebb serve --metrics 127.0.0.1:9404 &
ebb serve --no-such-flag
cargo bench --bench no_such_bench
cargo test --test it docs
```

```console
$ ebb check --destination /queue/orders | head  # a comment
$ ebb frobnicate
not a command: ebb frobnicate
$ ebb frobnicate <FILE>
```

```rust
fn main() {}
```
";
    let path = Path::new("docs/sample.md");
    let links = broken_links(path, sample);
    assert_eq!(links.len(), 3, "{links:#?}");
    assert!(
        links[0].starts_with("docs/sample.md:7: link to no-such-chapter.md"),
        "{links:#?}"
    );
    assert!(
        links[1].contains("#no-such-heading") && links[1].contains("the-ebb-command"),
        "{links:#?}"
    );
    assert!(
        links[2].starts_with("docs/sample.md:8: link to #nope"),
        "{links:#?}"
    );

    let unlisted = unlisted_chapters(
        "- [Getting started](getting-started.md)\n",
        &[
            "getting-started.md".into(),
            "sample.md".into(),
            "SUMMARY.md".into(),
        ],
    );
    assert_eq!(
        unlisted,
        ["docs/SUMMARY.md: docs/sample.md is a chapter it does not list"]
    );

    assert_eq!(
        shell_words(r#"A=b ebb soak --restart-postgres "pg_ctlcluster 15 main restart" | x"#)
            .unwrap(),
        [
            "A=b",
            "ebb",
            "soak",
            "--restart-postgres",
            "pg_ctlcluster 15 main restart"
        ]
    );
    assert_eq!(
        shell_words("ebb serve # topic://orders.>").unwrap(),
        ["ebb", "serve"]
    );

    // A stand-in for clap: only `serve` and `check` exist, `serve` has no
    // `--no-such-flag`.
    let parse = |args: &[String]| -> Result<(), String> {
        match args.first().map(String::as_str) {
            Some("serve") if args.iter().any(|a| a == "--no-such-flag") => {
                Err("unexpected argument '--no-such-flag'".into())
            }
            Some("serve" | "check") => Ok(()),
            other => Err(format!("unrecognized subcommand {other:?}")),
        }
    };
    let bad = bad_commands(path, sample, &parse);
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(
        bad[0].starts_with("docs/sample.md:14: ebb serve --no-such-flag"),
        "{bad:#?}"
    );
    assert!(
        bad[1].starts_with("docs/sample.md:15: cargo bench --bench no_such_bench"),
        "{bad:#?}"
    );
    assert!(
        bad[1].contains("--bench no_such_bench: no such target"),
        "{bad:#?}"
    );
    assert!(
        bad[2].starts_with("docs/sample.md:21: ebb frobnicate"),
        "{bad:#?}"
    );

    #[cfg(feature = "cli")]
    {
        let bad = bad_commands(path, sample, &parse_ebb);
        assert_eq!(bad.len(), 3, "{bad:#?}");
        assert!(bad[0].contains("--no-such-flag"), "{bad:#?}");
    }

    assert!(untested_rust(path, sample, "").is_some());
    assert!(untested_rust(path, "```rust,ignore\nfn f() {}\n```\n", "").is_none());
}
