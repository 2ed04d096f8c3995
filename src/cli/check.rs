//! `ebb check`: opens a store (creating and migrating it if needed) and reports what
//! it holds: its backend and highest message id, and per destination asked for, its
//! messages, durable subscriptions and whether any message can expire.

use ebb_store::{redact_url, StoreOptions};

use super::DEFAULT_STORE;

/// The `ebb check` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// Store URL: sqlite://PATH, sqlite::memory: or postgres://...
    #[arg(long, default_value = DEFAULT_STORE, env = "EBB_STORE")]
    pub store: String,
    /// Table prefix, as ActiveMQ's tablePrefix.
    #[arg(long, default_value = "ebb_")]
    pub table_prefix: String,
    /// PostgreSQL schema to create and use.
    #[arg(long)]
    pub schema: Option<String>,
    /// Destinations to report on (store keys such as topic://orders).
    #[arg(long = "destination")]
    pub destinations: Vec<String>,
}

/// Runs `ebb check`: one line about the store, then one per `--destination`.
///
/// Errors: the store cannot be opened or migrated, or a count fails.
pub async fn execute(args: CheckArgs) -> anyhow::Result<()> {
    let CheckArgs {
        store,
        table_prefix,
        schema,
        destinations,
    } = args;
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
