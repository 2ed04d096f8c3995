//! The lease lock of a PostgreSQL store ([`crate::LeaseOptions`]): taking it,
//! renewing it on a connection of its own, checking it in every write, releasing it.
//!
//! Time is measured two ways, on purpose. Whether a lease has expired is decided by
//! the database's clock only (`clock_timestamp()` in every statement), so brokers on
//! machines whose clocks disagree still agree on who holds it. How long this broker
//! may go on without a renewal is measured by its own monotonic clock from the moment
//! it *sent* the last renewal that succeeded: the database computed that lease's end
//! later than that, so the lease lasts at least `lease_ms` from then, whatever the
//! clocks say. The store reports the lease lost one `renew_ms` before that point.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{LeaseOptions, LeaseState, StoreError};

/// The statements of the lease, on table `{schema}.{prefix}lock` (one row, `broker`).
#[derive(Debug, Clone)]
pub(crate) struct LeaseSql {
    /// Takes the lease if nobody holds an unexpired one: `$1` holder, `$2` lease ms;
    /// returns a row when taken.
    acquire: String,
    /// Renews it if this holder still has it unexpired: `$1`, `$2`; a row when renewed.
    renew: String,
    /// Gives it up (it ends now): `$1` holder.
    release: String,
    /// Who holds it and for how many ms more (negative: expired).
    holder: String,
    /// The check at the start of every write: a row (share-locked until the write
    /// commits) while `$1` holds it unexpired.
    guard: String,
}

impl LeaseSql {
    /// The statements for the lease table of prefix `p`, in `schema` when given.
    pub(crate) fn new(schema: Option<&str>, p: &str) -> Self {
        let table = match schema {
            Some(schema) => format!("\"{schema}\".{p}lock"),
            None => format!("{p}lock"),
        };
        let lasting = "clock_timestamp() + CAST($2 AS DOUBLE PRECISION) * INTERVAL '1 millisecond'";
        Self {
            acquire: format!(
                "INSERT INTO {table} AS l (name, holder, acquired_at, expires_at) \
                 VALUES ('broker', $1, clock_timestamp(), {lasting}) \
                 ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
                 acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at <= clock_timestamp() RETURNING l.holder"
            ),
            renew: format!(
                "UPDATE {table} SET expires_at = {lasting} \
                 WHERE name = 'broker' AND holder = $1 AND expires_at > clock_timestamp() \
                 RETURNING holder"
            ),
            release: format!(
                "UPDATE {table} SET expires_at = clock_timestamp() \
                 WHERE name = 'broker' AND holder = $1"
            ),
            holder: format!(
                "SELECT holder, CAST(EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000 \
                 AS BIGINT) FROM {table} WHERE name = 'broker'"
            ),
            guard: format!(
                "SELECT 1 FROM {table} WHERE name = 'broker' AND holder = $1 \
                 AND expires_at > clock_timestamp() FOR SHARE"
            ),
        }
    }
}

/// A store's lease settings and, once taken, the lease.
pub(crate) struct LeaseSlot {
    /// Set by the PostgreSQL backend when the store was opened with a lease.
    config: Option<(LeaseOptions, LeaseSql, PgConnectOptions)>,
    held: OnceLock<Arc<Lease>>,
    /// Without a lease, on PostgreSQL: the advisory lock's state, `Lost` once a write
    /// found a broker with a lease active (see [`LeaseSlot::advisory_lost`]).
    advisory: watch::Sender<LeaseState>,
    /// Whether the advisory lock was taken (then [`LeaseSlot::state`] watches it).
    advisory_held: std::sync::atomic::AtomicBool,
    /// A standby's listener for releases ([`RELEASED`]), made at its first wait.
    listener: tokio::sync::Mutex<Option<sqlx::postgres::PgListener>>,
}

/// The channel a broker announces the release of its lease on (`NOTIFY`), with the
/// store's advisory key (schema and prefix) as payload.
const RELEASED: &str = "ebb_lock_released";

impl Default for LeaseSlot {
    fn default() -> Self {
        Self {
            config: None,
            held: OnceLock::new(),
            advisory: watch::channel(LeaseState::Held).0,
            advisory_held: Default::default(),
            listener: Default::default(),
        }
    }
}

impl LeaseSlot {
    /// A slot for a store that holds itself by `options`.
    pub(crate) fn configured(
        options: LeaseOptions,
        sql: LeaseSql,
        connect: PgConnectOptions,
    ) -> Self {
        Self {
            config: Some((options, sql, connect)),
            ..Self::default()
        }
    }

    /// The state [`crate::MessageStore::lease_state`] answers: the lease's, or the
    /// advisory lock's once taken.
    pub(crate) fn state(&self) -> Option<watch::Receiver<LeaseState>> {
        match self.held.get() {
            Some(lease) => Some(lease.state()),
            None if self
                .advisory_held
                .load(std::sync::atomic::Ordering::Acquire) =>
            {
                Some(self.advisory.subscribe())
            }
            None => None,
        }
    }

    /// Waits until a broker announces the release of the lease of store `key`, or
    /// `within` passes. Without a lease, or when the listener cannot be had (then a
    /// plain wait), it waits `within`.
    pub(crate) async fn wait_released(&self, pool: &sqlx::PgPool, key: &str, within: Duration) {
        if self.config.is_none() {
            tokio::time::sleep(within).await;
            return;
        }
        let deadline = Instant::now() + within;
        let mut slot = self.listener.lock().await;
        if slot.is_none() {
            match sqlx::postgres::PgListener::connect_with(pool).await {
                Ok(mut listener) => match listener.listen(RELEASED).await {
                    Ok(()) => *slot = Some(listener),
                    Err(e) => tracing::debug!(error = %e, "cannot listen for lease releases"),
                },
                Err(e) => tracing::debug!(error = %e, "cannot listen for lease releases"),
            }
        }
        let Some(listener) = slot.as_mut() else {
            tokio::time::sleep_until(deadline).await;
            return;
        };
        loop {
            match tokio::time::timeout_at(deadline, listener.recv()).await {
                Ok(Ok(note)) if note.payload() == key => return,
                Ok(Ok(_)) => continue,
                Ok(Err(_)) => {
                    // The listener's connection broke: a new one next time.
                    *slot = None;
                    tokio::time::sleep_until(deadline).await;
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Drops a standby's listener (at close, on the runtime: dropping it later, out
    /// of a runtime, would panic).
    pub(crate) async fn drop_listener(&self) {
        drop(self.listener.lock().await.take());
    }

    /// The advisory lock was taken.
    pub(crate) fn advisory_taken(&self) {
        self.advisory_held
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// A write found a broker with a lease active while this one holds (held) the
    /// advisory lock: its lock's session ended and a standby took over. Answers the
    /// error for the write.
    pub(crate) fn advisory_lost(&self) -> StoreError {
        let why = "a broker with a lease is active on the store: this broker's advisory \
                   lock ended (its connection was lost) and a standby took over"
            .to_string();
        let changed = self.advisory.send_if_modified(|state| {
            let held = *state == LeaseState::Held;
            if held {
                *state = LeaseState::Lost(why.clone());
            }
            held
        });
        if changed {
            tracing::error!(reason = %why, "store lock lost: this broker must stop serving");
        }
        StoreError::LeaseLost(why)
    }

    /// Whether the store is to be held by a lease.
    pub(crate) fn enabled(&self) -> bool {
        self.config.is_some()
    }

    /// The lease, once taken.
    pub(crate) fn held(&self) -> Option<&Arc<Lease>> {
        self.held.get()
    }

    /// Whether another broker holds an unexpired lease now (`ebb check`); false when
    /// the store is not held by a lease. Errors: the database's.
    pub(crate) async fn held_by_other(&self) -> crate::Result<bool> {
        let Some((options, sql, connect)) = &self.config else {
            return Ok(false);
        };
        let db = |e| crate::error::db("read the lease")(e);
        let mut conn = connect.connect().await.map_err(&db)?;
        let row: Option<(String, i64)> = sqlx::query_as(&sql.holder)
            .fetch_optional(&mut conn)
            .await
            .map_err(&db)?;
        let _ = conn.close().await;
        Ok(row.is_some_and(|(holder, left)| left > 0 && holder != options.holder))
    }

    /// Tries to take the lease, inside a transaction that also takes the advisory
    /// lock's key `advisory_key` (so a broker without a lease cannot start meanwhile):
    /// `Ok(None)` when taken (or held already), `Ok(Some(why))` when another broker
    /// holds it. Errors: the database's.
    pub(crate) async fn try_take(&self, advisory_key: &str) -> crate::Result<Option<String>> {
        if self.held.get().is_some() {
            return Ok(None);
        }
        let Some((options, sql, connect)) = &self.config else {
            return Ok(None);
        };
        let db = |e| crate::error::db("take the lease")(e);
        // The lease lasts `lease_ms` from a moment after this one.
        let sent = Instant::now();
        let mut conn = connect.connect().await.map_err(&db)?;
        let mut tx = conn.begin().await.map_err(&db)?;
        let free: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))")
            .bind(advisory_key)
            .fetch_one(&mut *tx)
            .await
            .map_err(&db)?;
        if !free {
            return Ok(Some(format!(
                "a broker without a lease holds the advisory lock {advisory_key}"
            )));
        }
        // A write of the active broker holds the row (share-locked) while it runs; a
        // paused one holds it until the server ends its session
        // (`idle_in_transaction_session_timeout`): ask again later, do not wait.
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(format!("{}ms", options.renew_ms))
            .execute(&mut *tx)
            .await
            .map_err(&db)?;
        let taken: Option<String> = match sqlx::query_scalar(&sql.acquire)
            .bind(&options.holder)
            .bind(options.lease_ms as i64)
            .fetch_optional(&mut *tx)
            .await
        {
            Ok(taken) => taken,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => {
                return Ok(Some(
                    "the lease row is locked by a write of the active broker".to_string(),
                ))
            }
            Err(e) => return Err(db(e)),
        };
        if taken.is_none() {
            let (holder, left): (String, i64) = sqlx::query_as(&sql.holder)
                .fetch_one(&mut *tx)
                .await
                .map_err(&db)?;
            return Ok(Some(format!(
                "its lease is held by {holder} for {} ms more",
                left.max(0)
            )));
        }
        tx.commit().await.map_err(&db)?;
        // A standby's listener is of no use now; dropped here, on the runtime (its
        // connection goes back to the pool through a task).
        drop(self.listener.lock().await.take());
        let (state, _) = watch::channel(LeaseState::Held);
        let lease = Arc::new(Lease {
            options: options.clone(),
            key: advisory_key.to_string(),
            sql: sql.clone(),
            connect: connect.clone(),
            state,
            renewal: Mutex::new(None),
            renewed: Mutex::default(),
            epoch: sent,
            fence_ms: std::sync::atomic::AtomicU64::new(0),
        });
        lease.fence_at(
            sent + Duration::from_millis(options.lease_ms.saturating_sub(options.renew_ms)),
        );
        let renewal = tokio::spawn(renew(Arc::clone(&lease), conn, sent));
        *lease.renewal.lock().unwrap_or_else(|e| e.into_inner()) = Some(renewal);
        tracing::info!(holder = %options.holder, lease_ms = options.lease_ms,
            renew_ms = options.renew_ms, "store lease taken: this broker is active");
        let _ = self.held.set(lease);
        Ok(None)
    }
}

/// A lease this store holds (or held: see [`Lease::lost`]).
pub(crate) struct Lease {
    options: LeaseOptions,
    /// The store's advisory key (schema and prefix), announced at release.
    key: String,
    sql: LeaseSql,
    connect: PgConnectOptions,
    state: watch::Sender<LeaseState>,
    /// The renewal task.
    renewal: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Renewals so far, and their round trips.
    renewed: Mutex<crate::LeaseRenewals>,
    /// When the lease was first sent for: what `fence_ms` counts from.
    epoch: Instant,
    /// When this broker must stop serving unless a renewal succeeds first, ms after
    /// `epoch` on the monotonic clock (0: lost). Read by [`Lease::current`] on every
    /// request, so that a broker that was paused past it (SIGSTOP, a VM frozen)
    /// serves nothing before its renewal task has even run.
    fence_ms: std::sync::atomic::AtomicU64,
}

impl Lease {
    /// Its state, for the broker to watch.
    pub(crate) fn state(&self) -> watch::Receiver<LeaseState> {
        self.state.subscribe()
    }

    /// Its renewals so far.
    pub(crate) fn renewals(&self) -> crate::LeaseRenewals {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why it was lost, if it was.
    pub(crate) fn lost(&self) -> Option<String> {
        match &*self.state.borrow() {
            LeaseState::Held => None,
            LeaseState::Lost(why) => Some(why.clone()),
        }
    }

    /// Whether this broker may still serve: the lease is not lost and its fence (one
    /// `renew_ms` before the last lease sent could end) has not passed on the
    /// monotonic clock, whether or not the renewal task has run since.
    pub(crate) fn current(&self) -> bool {
        let fence = self.fence_ms.load(std::sync::atomic::Ordering::Acquire);
        (self.epoch.elapsed().as_millis() as u64) < fence
    }

    /// The renewal task moved the fence to `at`.
    fn fence_at(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.epoch).as_millis() as u64;
        self.fence_ms
            .store(ms, std::sync::atomic::Ordering::Release);
    }

    /// Marks it lost for `why` (once: the first reason stays).
    fn lose(&self, why: String) {
        self.fence_ms.store(0, std::sync::atomic::Ordering::Release);
        let changed = self.state.send_if_modified(|state| match state {
            LeaseState::Held => {
                *state = LeaseState::Lost(why.clone());
                true
            }
            LeaseState::Lost(_) => false,
        });
        if changed {
            tracing::error!(holder = %self.options.holder, reason = %why,
                "store lease lost: this broker must stop serving");
        }
    }

    /// The check at the start of a write transaction `tx`: the write goes on only
    /// while this store holds the lease unexpired by the database's clock, and the
    /// row stays share-locked until the transaction ends, so a standby's takeover
    /// waits for it and no write of this broker commits after one.
    /// Errors: [`StoreError::LeaseLost`]; the database's.
    pub(crate) async fn guard(&self, tx: &mut PgConnection) -> crate::Result<()> {
        if let Some(why) = self.lost() {
            return Err(StoreError::LeaseLost(why));
        }
        let held: Option<i32> = sqlx::query_scalar(&self.sql.guard)
            .bind(&self.options.holder)
            .fetch_optional(&mut *tx)
            .await
            .map_err(crate::error::db("check the lease"))?;
        if held.is_none() {
            let why = "the lease expired or another broker took it".to_string();
            self.lose(why.clone());
            return Err(StoreError::LeaseLost(why));
        }
        Ok(())
    }

    /// Stops renewing and, unless it was lost, gives the lease up so that a standby
    /// takes over at once (a graceful shutdown).
    pub(crate) async fn release(&self) {
        let renewal = self
            .renewal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(renewal) = renewal {
            renewal.abort();
            let _ = renewal.await;
        }
        if self.lost().is_some() {
            return;
        }
        let released = async {
            let mut conn = self.connect.connect().await?;
            sqlx::query(&self.sql.release)
                .bind(&self.options.holder)
                .execute(&mut conn)
                .await?;
            // Standbys take over at once instead of at their next attempt.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(RELEASED)
                .bind(&self.key)
                .execute(&mut conn)
                .await?;
            conn.close().await
        }
        .await;
        // Never Held again: a write after close is refused.
        self.state
            .send_replace(LeaseState::Lost("released by this broker".into()));
        match released {
            Ok(()) => tracing::info!(holder = %self.options.holder, "store lease released"),
            Err(e) => tracing::warn!(holder = %self.options.holder, error = %e,
                "could not release the store lease; a standby takes over when it expires"),
        }
    }
}

/// Renews `lease` every `renew_ms` on `conn` (a new connection after one fails),
/// from the first lease sent at `sent`. Marks it lost when a renewal finds another
/// holder or an expired lease, or when none succeeded by one `renew_ms` before the
/// last lease sent could end; then it ends (it is also aborted by a release).
async fn renew(lease: Arc<Lease>, conn: PgConnection, sent: Instant) {
    let every = Duration::from_millis(lease.options.renew_ms);
    let lasts = Duration::from_millis(lease.options.lease_ms);
    let mut conn = Some(conn);
    // Fence one renewal period before the lease could end.
    let mut fence = sent + lasts - every;
    let mut next = sent + every;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        let late = || {
            format!(
                "no renewal succeeded within {} ms (lease {} ms, renewed every {} ms)",
                (lasts - every).as_millis(),
                lasts.as_millis(),
                every.as_millis()
            )
        };
        if sent >= fence {
            lease.lose(late());
            return;
        }
        let attempt = renew_once(&lease, &mut conn);
        match tokio::time::timeout(fence - sent, attempt).await {
            Ok(Ok(true)) => {
                fence = sent + lasts - every;
                lease.fence_at(fence);
                next = sent + every;
                let took = sent.elapsed().as_micros() as u64;
                let mut renewed = lease.renewed.lock().unwrap_or_else(|e| e.into_inner());
                renewed.count += 1;
                renewed.last_us = took;
                renewed.max_us = renewed.max_us.max(took);
            }
            Ok(Ok(false)) => {
                lease.lose("a renewal found the lease expired or held by another broker".into());
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "store lease renewal failed; trying again");
                conn = None;
                next = Instant::now() + every / 4;
            }
            Err(_) => {
                lease.lose(late());
                return;
            }
        }
    }
}

/// One renewal on `conn` (connected first if `None`): whether it renewed.
async fn renew_once(lease: &Lease, conn: &mut Option<PgConnection>) -> Result<bool, sqlx::Error> {
    if conn.is_none() {
        *conn = Some(lease.connect.connect().await?);
    }
    let Some(c) = conn.as_mut() else {
        unreachable!("connected above")
    };
    let renewed: Option<String> = sqlx::query_scalar(&lease.sql.renew)
        .bind(&lease.options.holder)
        .bind(lease.options.lease_ms as i64)
        .fetch_optional(c)
        .await?;
    Ok(renewed.is_some())
}

/// On the advisory lock's path, once the lock is taken: whether an unexpired lease
/// names another broker (a broker with `[ha]` is active), read on `conn`; the text
/// names it. A schema without the lease table (not migrated yet) has none.
///
/// The row is read `FOR UPDATE`: every write of a broker holds it share-locked until
/// it ends, so this waits for the writes of a broker that just died (its lock's
/// session ended before a `COMMIT` it had sent was done). The ids read after this
/// (`reseed`) then count every row it committed; without the wait, the next broker
/// could hand out an id such a late commit took (a duplicate key, found by
/// `ebb chaos`). At most 10 s (`lock_timeout`), then an error.
pub(crate) async fn held_by_other(
    conn: &mut PgConnection,
    prefix: &str,
) -> crate::Result<Option<String>> {
    let sql = LeaseSql::new(None, prefix);
    let db = |e| crate::error::db("read the lease")(e);
    let mut tx = conn.begin().await.map_err(db)?;
    sqlx::query("SELECT set_config('lock_timeout', '10s', true)")
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    let read = sqlx::query_as::<_, (String, i64)>(&format!("{} FOR UPDATE", sql.holder))
        .fetch_optional(&mut *tx)
        .await;
    let found = match read {
        Ok(Some((holder, left))) if left > 0 => {
            Some(format!("its lease is held by {holder} for {left} ms more"))
        }
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
        Err(e) => return Err(db(e)),
    };
    tx.commit().await.map_err(db)?;
    Ok(found)
}
