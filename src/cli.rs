//! The `ebb` command line. `main` only parses arguments and calls [`run`].

use clap::{Parser, Subcommand};
use ebb_store::{redact_url, StoreOptions};

/// The store `ebb` opens when none is given: a SQLite file, created if missing.
pub const DEFAULT_STORE: &str = "sqlite://ebb-data/ebb.db";

/// Ebb, a message-broker core.
#[derive(Debug, Parser)]
#[command(name = "ebb", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open the store (creating and migrating it if needed) and report what it holds.
    Check {
        /// Store URL: sqlite://PATH, sqlite::memory: or postgres://...
        #[arg(long, default_value = DEFAULT_STORE, env = "EBB_STORE")]
        store: String,
        /// Table prefix, as ActiveMQ's tablePrefix.
        #[arg(long, default_value = "ebb_")]
        table_prefix: String,
        /// PostgreSQL schema to create and use.
        #[arg(long)]
        schema: Option<String>,
        /// Destinations to report on (store keys such as topic://orders).
        #[arg(long = "destination")]
        destinations: Vec<String>,
    },
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Check {
            store,
            table_prefix,
            schema,
            destinations,
        } => {
            let options = StoreOptions {
                table_prefix,
                schema,
                ..StoreOptions::default()
            };
            let opened = ebb_store::open(&store, &options).await?;
            println!(
                "store {} ({:?}) is ready; highest message id {}",
                redact_url(&store),
                opened.backend(),
                opened.last_assigned_id()
            );
            for destination in destinations {
                println!(
                    "{destination}: {} messages, {} durable subscriptions, expiring messages: {}",
                    opened.count_messages(&destination).await?,
                    opened.count_subscriptions(&destination).await?,
                    opened.has_expiring(&destination).await?,
                );
            }
            opened.close().await;
            Ok(())
        }
    }
}
