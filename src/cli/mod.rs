//! The `ebb` command line: the operator tools, one file per command. `main` only
//! parses arguments ([`Cli`]) and calls [`main`].
//!
//! | command | file | what it does |
//! |---|---|---|
//! | `ebb serve` | [`serve`] | the broker and its STOMP listener (and `/metrics`), until a signal |
//! | `ebb stat` | [`stat`] | reads a running broker's metrics endpoint and prints a table |
//! | `ebb soak` | [`soak`] | the ActiveMQ expiry out-of-memory workload, with memory figures and a chart |
//! | `ebb passwd` | [`passwd`] | an argon2 hash for `password_hash` in the configuration |
//! | `ebb check` | [`check`] | reads a store (read-only unless `--create`) and reports what it holds |
//! | `ebb chaos` | [`chaos`] | a mixed STOMP workload with faults (SIGKILL, cut database), reconciled |
//!
//! All of this is behind the `cli` cargo feature (on by default), with the crates only
//! the tools need: clap, anyhow, tracing-subscriber, indicatif and plotters (soak),
//! ureq (stat), serde_json, and the Prometheus endpoint (the `prometheus` feature). An
//! embedder who writes `ebb = { default-features = false }` compiles none of them.
//! The library never imports from here.

pub mod chaos;
pub mod check;
pub mod passwd;
pub mod serve;
pub mod soak;
pub mod stat;

use clap::{Parser, Subcommand};

/// The store `ebb` opens when none is given: a SQLite file, created if missing.
pub const DEFAULT_STORE: &str = "sqlite://ebb-data/ebb.db";

/// The STOMP address `ebb serve` listens on when none is given (ActiveMQ's port).
pub const DEFAULT_STOMP: &str = "127.0.0.1:61613";

/// The address `ebb stat` reads when none is given (the endpoint itself is off unless
/// asked for).
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9404";

/// Ebb, a message-broker core.
#[derive(Debug, Parser)]
#[command(name = "ebb", version, about)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; each one's arguments are defined in its own file.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker: STOMP over TCP on a store (SQLite by default, created if missing).
    Serve(serve::ServeArgs),
    /// Print a running broker's usage and destinations, read from its metrics
    /// endpoint (`ebb serve --metrics ADDR`).
    Stat(stat::StatArgs),
    /// Build the ActiveMQ expiry out-of-memory workload (a large backlog for an offline
    /// durable subscriber) on an in-process broker, and report memory and rows.
    Soak(soak::SoakOptions),
    /// Read a password (prompted without echo on a terminal, else one line of standard
    /// input) and print its argon2 hash, for `password_hash` in `[[users]]`.
    Passwd,
    /// Report what a store holds, read-only (`--create` creates and migrates it), and
    /// whether a broker holds it now.
    Check(check::CheckArgs),
    /// Run `ebb serve` under a mixed STOMP workload while faults are injected (SIGKILL,
    /// database connections cut, a silent consumer, clients vanishing mid-frame),
    /// then reconcile every message; exits non-zero on any loss.
    Chaos(chaos::ChaosOptions),
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::execute(args).await,
        Command::Stat(args) => stat::execute(&args).await,
        Command::Soak(options) => soak::execute(&options).await,
        Command::Passwd => passwd::execute(),
        Command::Check(args) => check::execute(args).await,
        Command::Chaos(options) => chaos::execute(&options).await,
    }
}

/// The whole `ebb` process after its arguments are parsed: logging to stderr (level
/// from `RUST_LOG`, `info` by default; colours on a terminal), then [`run`] on an
/// actix system. An error is printed as `ebb: why` (with its causes) and exits 1.
pub fn main(cli: Cli) -> std::process::ExitCode {
    use std::io::IsTerminal;

    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match actix_rt::System::new().block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ebb: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The library builds without the `cli` feature only if no file outside
    /// `src/cli/` (and the binary's `main.rs`) names it.
    #[test]
    fn the_library_never_imports_the_tools() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        files.retain(|f| !f.starts_with(src.join("cli")) && *f != src.join("main.rs"));
        assert!(files.contains(&src.join("stats.rs")), "{files:?}");
        let mut offenders = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                let names_cli = code.contains("crate::cli") || code.contains("ebb::cli");
                if names_cli && !code.starts_with("//") {
                    offenders.push(format!("{}:{}: {code}", file.display(), n + 1));
                }
            }
        }
        assert!(offenders.is_empty(), "{offenders:#?}");
    }
}
