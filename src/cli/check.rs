//! `ebb check`: opens a store and reports what it holds: its backend and highest
//! message id, whether a broker holds it now, and per destination asked for, its
//! messages, durable subscriptions and whether any message can expire.
//!
//! Read-only by default: a store that is not there (a mistyped path, a schema that
//! does not exist, tables missing or at an older schema version) is an error that says
//! so, and nothing is created or migrated. `--create` creates and migrates, as `ebb
//! serve` does. It may run beside a broker on the same store (it does not take the
//! broker's lock): it says when one holds it, since the counts then move.

use crate::{redact_url, DestinationKey, StoreOptions};

use super::DEFAULT_STORE;
use crate::config::FileConfig;

/// The `ebb check` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// Store URL: sqlite://PATH, sqlite::memory: or postgres://... [default: the
    /// configuration's `[store] url`, else sqlite://ebb-data/ebb.db]
    #[arg(long, env = "EBB_STORE")]
    pub store: Option<String>,
    /// Configuration file (TOML) of the broker whose store to check: its `[store]`
    /// url, table_prefix and schema (flags override them).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Table prefix, as ActiveMQ's tablePrefix [default: ebb_]
    #[arg(long)]
    pub table_prefix: Option<String>,
    /// PostgreSQL schema to use.
    #[arg(long)]
    pub schema: Option<String>,
    /// Create the store if it is missing (file, folder, schema, tables) and migrate an
    /// older one, as `ebb serve` does. Without it nothing is created or changed.
    #[arg(long)]
    pub create: bool,
    /// Destinations to report on, each naming its kind: queue://orders or /queue/orders
    /// (topic://orders, /topic/orders, ...). A bare name (orders) is refused.
    #[arg(long = "destination")]
    pub destinations: Vec<String>,
}

/// Runs `ebb check`: one line about the store, one if a broker holds it, then one per
/// `--destination`.
///
/// Errors: a `--destination` without its kind (`orders`: a queue and a topic of one
/// name are two destinations, so it does not guess); a bad configuration file; the
/// store is missing or at an older schema version (without `--create`), cannot be
/// opened or migrated; a count fails.
pub async fn execute(args: CheckArgs) -> anyhow::Result<()> {
    let CheckArgs {
        store,
        config,
        table_prefix,
        schema,
        create,
        destinations,
    } = args;
    // Each destination names its kind, as everywhere else (`DestinationKey::parse`):
    // a bare name would be counted as a store key no destination has.
    let destinations = destinations
        .iter()
        .map(|text| {
            DestinationKey::parse(text)
                .map(|key| key.container())
                .map_err(|e| {
                    if text.contains('/') || text.contains(':') {
                        anyhow::anyhow!("--destination {text}: {e}")
                    } else {
                        anyhow::anyhow!(
                            "--destination {text}: {e} (for a queue: /queue/{text} or queue://{text})"
                        )
                    }
                })
        })
        .collect::<anyhow::Result<Vec<String>>>()?;
    let file = match &config {
        Some(path) => FileConfig::load(path).map_err(anyhow::Error::msg)?,
        None => FileConfig::default(),
    };
    let store = store
        .or(file.store.url)
        .unwrap_or_else(|| DEFAULT_STORE.to_string());
    let options = StoreOptions {
        table_prefix: table_prefix
            .or(file.store.table_prefix)
            .unwrap_or_else(|| StoreOptions::default().table_prefix),
        schema: schema.or(file.store.schema),
        create,
        ..StoreOptions::default()
    };
    let report = crate::admin::inspect_store(&store, &options, &destinations).await?;
    println!(
        "store {} ({}) is ready; highest message id {}",
        redact_url(&store),
        report.backend,
        report.last_assigned_id
    );
    if report.locked_by_another {
        println!("a broker holds this store now (its lock is taken): the counts below move");
    }
    for d in report.destinations {
        println!(
            "{}: {} messages, {} durable subscriptions, expiring messages: {}",
            d.destination, d.messages, d.durable_subscriptions, d.expiring,
        );
    }
    Ok(())
}
