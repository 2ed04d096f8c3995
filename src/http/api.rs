//! The JSON admin API, version 1, under `/api/v1` ([`crate::admin`] behind it).
//!
//! A destination is named by its kind and plain name in the path: `/queues/jobs`,
//! `/topics/orders.eu` (percent-encode what a path segment cannot hold). Listings
//! are bounded pages with a cursor: `?after=CURSOR&limit=N` (`limit` at most
//! [`crate::admin::MAX_ADMIN_PAGE`] destinations or subscriptions,
//! [`crate::broker::MAX_BROWSE_PAGE`] messages); each answer's `next` is the cursor
//! of the page after it, `null` at the end.
//!
//! | method and route | answer |
//! |---|---|
//! | `GET /api/v1` | this list of routes |
//! | `GET /api/v1/broker` | version, usage and limits (bytes), destinations running |
//! | `GET /api/v1/destinations?after=KEY&limit=N` | destinations (running ones with counters, stored ones too) |
//! | `GET /api/v1/broker/history?window=15m` | the broker's rates (per second: enqueued, delivered, dequeued, expired, dead-lettered), depth, memory, store, connections over the window ([`crate::history::BrokerHistory`]; `window` from one step to 24 h: `90s`, `15m`, `6h`, `24h`; default 15 min) |
//! | `GET /api/v1/queues/NAME/history?window=15m`, `GET /api/v1/topics/NAME/history?...` | one destination's rates, depth, in flight and consumers over the window ([`crate::history::DestinationHistory`]); asking starts its series if it had none (an idle destination has none); `404` for one that does not exist; needs `read` on it |
//! | `GET /api/v1/broker/destinations?sort=depth&order=desc&filter=TEXT&offset=N&limit=N` | the running destinations as last sampled, sorted (`name`, `depth`, `enqueued_rate`, `dequeued_rate`, `consumers`), filtered by a part of their name and paged (`limit` at most [`MAX_TABLE_PAGE`]), each with the last 5 min of its depth when it has a series ([`crate::history::TablePage`]); only those the caller may read |
//! | `GET /api/v1/queues/NAME`, `GET /api/v1/topics/NAME` | one destination's counters; `404` when it is neither running nor stored |
//! | `GET /api/v1/queues/NAME/messages?after=ID&limit=N&body=full` | a page of the queue's stored messages in id order (delivered ones not yet acked included), with headers and a body preview ([`BODY_PREVIEW_BYTES`]), the whole body with `body=full` |
//! | `GET /api/v1/topics/NAME/subscriptions?after_client=ID&after_name=NAME&limit=N` | its durable subscriptions: client id, name, selector, high-water mark, online, in flight |
//! | `GET /api/v1/topics/NAME/subscriptions/CLIENT/SUB/messages?after=ID&limit=N&body=full` | a page of what that subscription has not acked |
//! | `POST /api/v1/queues/NAME/messages`, `POST /api/v1/topics/NAME/messages` | sends one message ([`SendRequest`]); `201` with its ids once it is accepted (stored when persistent) |
//! | `DELETE /api/v1/topics/NAME/subscriptions/CLIENT/SUB` | removes an offline durable subscription: `204`; `404` unknown; `409` while a consumer is attached |
//! | `GET /api/v1/connections?after=SESSION&limit=N` | the STOMP connections open now (TCP and WebSocket): session id, address, transport, since when, login, client id, subscriptions |
//! | `DELETE /api/v1/connections/SESSION` | closes one (the client gets an ERROR saying an operator closed it): `204`, `404` when it is not open |
//! | `POST /api/v1/queues/NAME/purge` | deletes every waiting message ([`crate::Broker::purge_queue`]); answers a [`TakeReport`] |
//! | `POST /api/v1/queues/NAME/move` | moves messages ([`MoveRequest`], [`crate::Broker::move_messages`]): to `to`, or each back to its `originalDestination` (a DLQ retry); answers a [`TakeReport`] |
//!
//! Browsing never changes a counter or a row: it reads the store in one bounded
//! statement a page and acks, expires and delivers nothing.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Extension, Json, Router};
use base64::Engine;
use serde::{Deserialize, Serialize};

pub use super::error::ApiError;
use super::{login, AppState};
use crate::admin::{
    DestinationPage, DestinationView, DurablePage, Selection, TakeReport, MAX_ADMIN_PAGE,
    MAX_MOVE_IDS,
};
use crate::auth::{Principal, Right};
use crate::broker::{BrowsedMessage, MAX_BROWSE_PAGE};
use crate::stomp::command::RESERVED;
use crate::{DestinationKey, DestinationKind, Error, ErrorCode, Message};

/// Bytes of a body a message listing shows without `body=full` (as text, cut at a
/// character boundary).
pub const BODY_PREVIEW_BYTES: usize = 256;

/// Messages one listing shows when no `limit` is given.
pub const DEFAULT_MESSAGE_PAGE: u32 = 50;

/// The API's routes (nested under `/api/v1`), behind the login check. Each kind of
/// the kind table gets its routes under its plural (`/queues/NAME`, `/topics/NAME`),
/// those its capabilities allow ([`kind_routes`]).
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let mut router = Router::new()
        .route("/", get(index))
        .route("/broker", get(broker))
        .route("/broker/history", get(broker_history))
        .route("/broker/destinations", get(destination_table))
        .route("/kinds", get(kinds))
        .route("/destinations", get(destinations))
        .route("/connections", get(connections))
        .route("/connections/:session", delete(close_connection))
        .route("/scheduler", get(scheduler))
        .route("/scheduled", get(scheduled).delete(cancel_scheduled_to))
        .route("/scheduled/:id", delete(cancel_scheduled));
    for kind in DestinationKind::all() {
        router = router.nest(&format!("/{}", kind.spec().plural), kind_routes(kind));
    }
    router
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            super::body_deadline,
        ))
        .route_layer(axum::middleware::from_fn_with_state(state, logged_in))
}

/// The routes of one kind's destinations, relative to its plural: what every kind
/// has (view, delete, send), listing and taking waiting messages where it can be
/// browsed, and durable subscriptions where it keeps them. Handlers read the kind
/// from the request's extensions.
fn kind_routes(kind: DestinationKind) -> Router<AppState> {
    let caps = kind.capabilities();
    let messages = match caps.browse {
        true => get(browse_messages).post(send_to),
        false => axum::routing::post(send_to),
    };
    let mut router = Router::new()
        .route("/:name", get(destination).delete(delete_destination))
        .route("/:name/history", get(destination_history))
        .route("/:name/messages", messages);
    if caps.browse {
        router = router
            .route("/:name/purge", axum::routing::post(purge))
            .route("/:name/move", axum::routing::post(move_messages));
    }
    if caps.durable_subscriptions {
        router = router
            .route("/:name/subscriptions", get(subscriptions))
            .route(
                "/:name/subscriptions/:client_id/:subscription",
                delete(remove_subscription),
            )
            .route(
                "/:name/subscriptions/:client_id/:subscription/messages",
                get(subscription_messages),
            );
    }
    router.layer(axum::Extension(kind))
}

/// Every route, as `GET /api/v1/index` lists it: the fixed ones, then each kind's.
fn route_list() -> Vec<String> {
    let mut routes: Vec<String> = [
        "GET /api/v1/broker",
        "GET /api/v1/broker/history?window=15m",
        "GET /api/v1/broker/destinations?sort=depth&order=desc&filter=TEXT&offset=N&limit=N",
        "GET /api/v1/kinds",
        "GET /api/v1/destinations?after=KEY&limit=N",
        "GET /api/v1/scheduled?after=ID&limit=N",
        "DELETE /api/v1/scheduled/ID",
        "DELETE /api/v1/scheduled?destination=queue://NAME",
        "GET /api/v1/scheduler",
    ]
    .map(String::from)
    .to_vec();
    for kind in DestinationKind::all() {
        let (base, caps) = (
            format!("/api/v1/{}/NAME", kind.spec().plural),
            kind.capabilities(),
        );
        routes.push(format!("GET {base}"));
        routes.push(format!("GET {base}/history?window=15m"));
        routes.push(format!("DELETE {base}"));
        if caps.browse {
            routes.push(format!("GET {base}/messages?after=ID&limit=N&body=full"));
        }
        routes.push(format!("POST {base}/messages"));
        if caps.browse {
            routes.push(format!("POST {base}/purge"));
            routes.push(format!("POST {base}/move"));
        }
        if caps.durable_subscriptions {
            routes.push(format!(
                "GET {base}/subscriptions?after_client=ID&after_name=NAME&limit=N"
            ));
            routes.push(format!(
                "GET {base}/subscriptions/CLIENT/SUB/messages?after=ID&limit=N&body=full"
            ));
            routes.push(format!("DELETE {base}/subscriptions/CLIENT/SUB"));
        }
    }
    routes.push("GET /api/v1/connections?after=SESSION&limit=N".into());
    routes.push("DELETE /api/v1/connections/SESSION".into());
    routes
}

/// Who called, as the login check found it: put in the request's extensions for
/// the handlers that show a destination's data, which need the same right as the
/// STOMP operation they mirror ([`may_read`]).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// The user (none when no users are configured).
    principal: Option<Principal>,
    /// In the admin group, or no users configured: may see and change everything.
    admin: bool,
}

/// Who may call, checked before anything of the request is read (its body above
/// all): a read (GET, HEAD) needs a configured user, a change one in the admin group
/// (see [`login`]); without users everyone may. The caller goes on in the request's
/// extensions ([`Caller`]).
async fn logged_in(
    State(state): State<AppState>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::Method;
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let checked = match *request.method() {
        Method::GET | Method::HEAD => {
            login::caller(&state, request.headers(), peer)
                .await
                .map(|principal| {
                    let admin = principal
                        .as_ref()
                        .is_none_or(|p| p.groups.contains(&state.options.admin_group));
                    Caller { principal, admin }
                })
        }
        _ => login::admin(&state, request.headers(), peer)
            .await
            .map(|()| Caller {
                principal: None,
                admin: true,
            }),
    };
    match checked {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// `403` unless `caller` may read `key`'s messages: the admin group may; anyone
/// else needs the `read` right on it that a STOMP SUBSCRIBE needs
/// (`[[authorization]]`, [`crate::auth::Security::authorize`]), or for a temporary
/// destination the one a STOMP browse of another connection's needs (the `read` of
/// `[temp_destination_authorization_entry]`, nobody's without it).
fn may_read(state: &AppState, caller: &Caller, key: &DestinationKey) -> Result<(), ApiError> {
    if caller.admin {
        return Ok(());
    }
    state
        .options
        .security
        .authorize(caller.principal.as_ref(), Right::Read, key)
        .map_err(|why| ApiError::new(StatusCode::FORBIDDEN, why.to_string()))
}

/// `403` unless `caller` is in the admin group (or no users are configured).
fn must_be_admin(state: &AppState, caller: &Caller, what: &str) -> Result<(), ApiError> {
    match (caller.admin, &caller.principal) {
        (true, _) => Ok(()),
        (false, principal) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "user {} may not {what}: it needs a user in group `{}`",
                principal
                    .as_ref()
                    .map_or("(anonymous)", |p| p.login.as_str()),
                state.options.admin_group
            ),
        )),
    }
}

/// `GET /api/v1`: the routes, for a person exploring with curl.
async fn index() -> Result<Response, ApiError> {
    Ok(Json(serde_json::json!({ "version": 1, "routes": route_list() })).into_response())
}

/// `GET /api/v1/kinds`: the kind table (each kind's name, path segment, STOMP prefix
/// and capabilities), so that a client such as the console shows what each kind can
/// do without knowing the kinds.
async fn kinds() -> Json<Vec<&'static crate::KindSpec>> {
    Json(DestinationKind::all().map(DestinationKind::spec).collect())
}

/// `GET /api/v1/broker`. Its `scheduler` (the broker-wide backlog, as `GET
/// /api/v1/scheduler`) is `null` for a caller outside the admin group.
async fn broker(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, ApiError> {
    let usage = state.broker.usage();
    let (lag, waiting) = state.broker.housekeeping_lag();
    let store = state.broker.ping_store().await;
    let scheduler = match store {
        Ok(()) if caller.admin => state.broker.schedule_backlog().await.ok(),
        _ => None,
    };
    let body = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "shut_down": state.broker.is_shut_down(),
        "usage": {
            "memory_bytes": usage.memory_bytes,
            "memory_limit_bytes": usage.memory_limit,
            "store_bytes": usage.store_bytes,
            "store_limit_bytes": usage.store_limit,
            "temp_bytes": usage.temp_bytes,
            "temp_limit_bytes": usage.temp_limit,
            "blocked_producers": usage.blocked_producers,
            "housekeeping_lag_ms": lag.as_millis() as u64,
            "housekeeping_pages_waiting": waiting,
            "process_resident_bytes": crate::process::resident_bytes(),
            "process_peak_resident_bytes": crate::process::peak_resident_bytes(),
        },
        "store_reachable": store.is_ok(),
        "scheduler": scheduler,
    });
    Ok(Json(body).into_response())
}

/// Most rows one `GET /api/v1/broker/destinations` answers.
pub const MAX_TABLE_PAGE: usize = 500;

/// `?window=15m`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowQuery {
    window: Option<String>,
}

/// A window as people write one: `90s`, `15m`, `6h`, `24h` or plain seconds; from
/// one step of `history` to its longest window; 15 min when absent.
fn window_of(
    history: &crate::history::History,
    window: Option<&str>,
) -> Result<std::time::Duration, ApiError> {
    let Some(text) = window else {
        return Ok(history
            .fine_window()
            .min(std::time::Duration::from_secs(15 * 60)));
    };
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => 0,
    };
    let bad = || {
        ApiError::bad_request(format!(
            "bad window `{text}`: give seconds, minutes or hours, from {} s to 24 h (`90s`, `15m`, `24h`)",
            history.step().as_secs().max(1)
        ))
    };
    let seconds: u64 = digits.parse().map_err(|_| bad())?;
    let window = std::time::Duration::from_secs(seconds.saturating_mul(scale));
    if scale == 0 || window < history.step() || window > history.longest_window() {
        return Err(bad());
    }
    Ok(window)
}

/// `GET /api/v1/broker/history?window=15m`: the broker's series
/// ([`crate::history::History::broker`]).
async fn broker_history(
    State(state): State<AppState>,
    query: Result<Query<WindowQuery>, QueryRejection>,
) -> Result<Json<crate::history::BrokerHistory>, ApiError> {
    let Query(query) = query?;
    let window = window_of(&state.history, query.window.as_deref())?;
    Ok(Json(state.history.broker(window, crate::history::now_ms())))
}

/// `GET /api/v1/{kind}/NAME/history?window=15m`: one destination's series
/// ([`crate::history::History::destination`]); `read` on it needed, `404` when it
/// neither runs nor is stored.
async fn destination_history(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<WindowQuery>, QueryRejection>,
) -> Result<Json<crate::history::DestinationHistory>, ApiError> {
    let Path(name) = name?;
    let Query(query) = query?;
    let key = key_of(kind, &name)?;
    may_read(&state, &caller, &key)?;
    let window = window_of(&state.history, query.window.as_deref())?;
    let container = key.container();
    if !state.history.was_running(&container) && !state.broker.destination_exists(&key).await? {
        return Err(unknown(&key));
    }
    Ok(Json(state.history.destination(
        &container,
        window,
        crate::history::now_ms(),
    )))
}

/// `?sort=depth&order=desc&filter=jobs&offset=0&limit=50`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableQuery {
    sort: Option<crate::history::SortBy>,
    order: Option<String>,
    filter: Option<String>,
    offset: Option<usize>,
    limit: Option<u32>,
}

/// `GET /api/v1/broker/destinations`: the running destinations as last sampled,
/// sorted, filtered and paged ([`crate::history::History::table`]); only those the
/// caller may read.
async fn destination_table(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<TableQuery>, QueryRejection>,
) -> Result<Json<crate::history::TablePage>, ApiError> {
    let Query(query) = query?;
    let descending = match query.order.as_deref() {
        None | Some("asc") => false,
        Some("desc") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "bad order `{other}`: `asc` or `desc`"
            )))
        }
    };
    let limit = page_limit(query.limit, 50, MAX_TABLE_PAGE as u32)? as usize;
    Ok(Json(state.history.table(
        query.filter.as_deref().unwrap_or(""),
        query.sort.unwrap_or(crate::history::SortBy::Name),
        descending,
        query.offset.unwrap_or(0),
        limit,
        |key| {
            DestinationKey::from_container(key)
                .is_ok_and(|key| may_read(&state, &caller, &key).is_ok())
        },
    )))
}

/// `?after=...&limit=N`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/v1/scheduled`: the scheduled messages in due order, a page of at most
/// `limit` (default and most [`crate::broker::SCHEDULER_PAGE`]) after `after` (the
/// `next` of the page before); only those whose destination the caller may read.
async fn scheduled(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<crate::broker::ScheduledPage>, ApiError> {
    let Query(query) = query?;
    let most = crate::broker::SCHEDULER_PAGE;
    let limit = page_limit(query.limit, most, most)?;
    let mut page = state
        .broker
        .scheduled(query.after.as_deref(), limit)
        .await?;
    page.messages.retain(|m| {
        DestinationKey::from_container(&m.destination)
            .is_ok_and(|key| may_read(&state, &caller, &key).is_ok())
    });
    Ok(Json(page))
}

/// `GET /api/v1/scheduler`: the scheduler's backlog ([`crate::ScheduleBacklog`]):
/// how many messages wait (counted up to [`crate::SCHEDULE_COUNT_LIMIT`]), the next
/// due time, how many were released. Broker-wide (every destination's scheduled
/// messages, also those the caller may not read), so only for the admin group
/// (`403` for others), as listing connections.
async fn scheduler(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<crate::ScheduleBacklog>, ApiError> {
    must_be_admin(
        &state,
        &caller,
        "read the scheduler's backlog (it counts every destination's scheduled messages)",
    )?;
    Ok(Json(state.broker.schedule_backlog().await?))
}

/// `?destination=...` (required).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DestinationQuery {
    destination: String,
}

/// `DELETE /api/v1/scheduled?destination=queue://NAME`: cancels every scheduled
/// message of that destination; answers `{"cancelled": N}`.
async fn cancel_scheduled_to(
    State(state): State<AppState>,
    query: Result<Query<DestinationQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query?;
    let cancelled = state
        .broker
        .cancel_scheduled_to(query.destination.as_str())
        .await?;
    tracing::info!(destination = %query.destination, cancelled, "scheduled messages cancelled through the admin API");
    Ok(Json(serde_json::json!({ "cancelled": cancelled })))
}

/// `DELETE /api/v1/scheduled/ID`: cancels a scheduled message (`204`), `404` when
/// none with that id waits.
async fn cancel_scheduled(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(id) = id?;
    if state.broker.cancel_scheduled(&id).await? {
        tracing::info!(%id, "scheduled message cancelled through the admin API");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no scheduled message {id}: it was delivered or cancelled, or never scheduled (GET /api/v1/scheduled lists them)"),
        ))
    }
}

/// `GET /api/v1/destinations`.
async fn destinations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<DestinationPage>, ApiError> {
    let Query(query) = query?;
    let limit = page_limit(query.limit, MAX_ADMIN_PAGE, MAX_ADMIN_PAGE)?;
    if let Some(after) = &query.after {
        DestinationKey::from_container(after).map_err(|e| {
            ApiError::bad_request(format!(
                "bad cursor `{after}`: {e}; pass the `next` of the page before"
            ))
        })?;
    }
    let mut page = state
        .broker
        .list_destinations(query.after.as_deref(), limit)
        .await?;
    // Only what the caller may read; `next` still continues after the whole page.
    page.destinations.retain(|d| {
        DestinationKey::from_container(&d.stats.destination)
            .is_ok_and(|key| may_read(&state, &caller, &key).is_ok())
    });
    Ok(Json(page))
}

/// `limit` checked: 1 to `most`, `default` when absent.
fn page_limit(limit: Option<u32>, default: u32, most: u32) -> Result<u32, ApiError> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=most).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::bad_request(format!(
            "limit {n} is out of range: 1 to {most}"
        ))),
    }
}

/// The destination of `kind` named in the path.
fn key_of(kind: DestinationKind, name: &str) -> Result<DestinationKey, ApiError> {
    DestinationKey::new(kind, name).map_err(|e| {
        ApiError::bad_request(format!("invalid {kind} name `{name}`: {}", e.reason))
            .with_code(ErrorCode::InvalidDestination)
    })
}

/// `404` for a destination that does not exist.
fn unknown(key: &DestinationKey) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("unknown destination {key}: it is not running and the store holds nothing for it"),
    )
}

async fn view(state: &AppState, key: DestinationKey) -> Result<Json<DestinationView>, ApiError> {
    match state.broker.destination_view(&key).await? {
        Some(view) => Ok(Json(view)),
        None => Err(unknown(&key)),
    }
}

/// `GET /api/v1/{kind}/NAME` (`/queues/jobs`, `/topics/orders`).
async fn destination(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<DestinationView>, ApiError> {
    let Path(name) = name?;
    let key = key_of(kind, &name)?;
    may_read(&state, &caller, &key)?;
    view(&state, key).await
}

/// `DELETE /api/v1/{kind}/NAME` (`/queues/jobs`, `/topics/orders`): deletes the
/// destination with its messages (and a topic's durable subscriptions): `200` with
/// `{"deleted": {"messages", "subscriptions"}}`, `404` for a destination that does
/// not exist, `409` while a consumer is attached or a transaction holds messages
/// for it.
async fn delete_destination(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(name) = name?;
    let key = key_of(kind, &name)?;
    if !state.broker.destination_exists(&key).await? {
        return Err(unknown(&key));
    }
    let deleted = state.broker.delete_destination(&key).await?;
    tracing::info!(destination = %key, messages = deleted.messages,
        subscriptions = deleted.subscriptions, scheduled = deleted.scheduled,
        "destination deleted through the admin API");
    let body = serde_json::json!({
        "deleted": {
            "messages": deleted.messages,
            "subscriptions": deleted.subscriptions,
            "scheduled": deleted.scheduled,
        }
    });
    Ok(Json(body).into_response())
}

/// `?after=ID&limit=N&body=full|preview`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesQuery {
    after: Option<String>,
    limit: Option<u32>,
    body: Option<String>,
}

impl MessagesQuery {
    /// `(after id, limit, whole bodies)`, checked.
    fn parts(&self) -> Result<(i64, u32, bool), ApiError> {
        let after = match &self.after {
            None => 0,
            Some(text) => text.parse::<i64>().ok().filter(|id| *id >= 0).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "bad cursor `{text}`: a store id (0 or more); pass the `next` of the page before"
                ))
            })?,
        };
        let limit = page_limit(self.limit, DEFAULT_MESSAGE_PAGE, MAX_BROWSE_PAGE)?;
        let full = match self.body.as_deref() {
            None | Some("preview") => false,
            Some("full") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "body={other}: use body=full for whole bodies, or body=preview"
                )))
            }
        };
        Ok((after, limit, full))
    }
}

/// A message as a listing shows it.
#[derive(Debug, Serialize)]
pub struct MessageView {
    /// Its store id (send order; the cursor of listings).
    pub store_id: i64,
    /// The message id the broker gave it.
    pub message_id: String,
    /// 0..=9.
    pub priority: u8,
    /// Expiration, epoch ms; 0 = never.
    pub expiration: i64,
    /// Failed deliveries so far (a queue message's redelivery count, as stored).
    pub redeliveries: u32,
    /// User headers, in order, as `[name, value]` pairs (a name may repeat).
    pub headers: Vec<(String, String)>,
    /// Body size, bytes.
    pub body_bytes: usize,
    /// The start of the body as text (at most [`BODY_PREVIEW_BYTES`], invalid UTF-8
    /// replaced).
    pub body_preview: String,
    /// With `body=full`: the whole body, when it is UTF-8 text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// With `body=full`: the whole body in base64, when it is not UTF-8 text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

impl MessageView {
    fn of(m: BrowsedMessage, full: bool) -> Self {
        let mut cut = m.body.len().min(BODY_PREVIEW_BYTES);
        let preview = loop {
            match std::str::from_utf8(&m.body[..cut]) {
                Ok(text) => break text.to_string(),
                // A character cut at the end: drop its first bytes.
                Err(e) if e.error_len().is_none() => cut = e.valid_up_to(),
                Err(_) => break String::from_utf8_lossy(&m.body[..cut]).into_owned(),
            }
        };
        let (body, body_base64) = match (full, std::str::from_utf8(&m.body)) {
            (false, _) => (None, None),
            (true, Ok(text)) => (Some(text.to_string()), None),
            (true, Err(_)) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&m.body)),
            ),
        };
        Self {
            store_id: m.store_id,
            message_id: m.message_id,
            priority: m.priority,
            expiration: m.expiration,
            redeliveries: m.redeliveries,
            headers: m.headers,
            body_bytes: m.body.len(),
            body_preview: preview,
            body,
            body_base64,
        }
    }
}

/// A page of messages.
#[derive(Debug, Serialize)]
pub struct MessagePage {
    /// At most the limit asked for, in store-id order.
    pub messages: Vec<MessageView>,
    /// The `after` of the next page (the last store id here), `null` when this page
    /// was not full (nothing more now).
    pub next: Option<String>,
}

fn message_page(rows: Vec<BrowsedMessage>, limit: u32, full: bool) -> MessagePage {
    let next = (rows.len() == limit as usize)
        .then(|| rows.last().map(|m| m.store_id.to_string()))
        .flatten();
    MessagePage {
        messages: rows.into_iter().map(|m| MessageView::of(m, full)).collect(),
        next,
    }
}

/// `GET /api/v1/{kind}/NAME/messages`, for a kind that can be browsed.
async fn browse_messages(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<MessagesQuery>, QueryRejection>,
) -> Result<Json<MessagePage>, ApiError> {
    let Path(name) = name?;
    let Query(query) = query?;
    let (after, limit, full) = query.parts()?;
    let key = key_of(kind, &name)?;
    may_read(&state, &caller, &key)?;
    if !state.broker.destination_exists(&key).await? {
        return Err(unknown(&key));
    }
    let rows = state.broker.browse(&key, after, limit).await?;
    Ok(Json(message_page(rows, limit, full)))
}

/// `?after_client=ID&after_name=NAME&limit=N` for subscriptions (the `next` of the
/// page before, whose fields are these two).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscriptionsQuery {
    after_client: Option<String>,
    after_name: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/v1/{kind}/NAME/subscriptions`, for a kind that keeps durable subscriptions.
async fn subscriptions(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    query: Result<Query<SubscriptionsQuery>, QueryRejection>,
) -> Result<Json<DurablePage>, ApiError> {
    let Path(name) = name?;
    let Query(query) = query?;
    let limit = page_limit(query.limit, MAX_ADMIN_PAGE, MAX_ADMIN_PAGE)?;
    let key = key_of(kind, &name)?;
    may_read(&state, &caller, &key)?;
    let after =
        match (&query.after_client, &query.after_name) {
            (None, None) => None,
            (Some(client), Some(name)) => Some((client.as_str(), name.as_str())),
            _ => return Err(ApiError::bad_request(
                "bad cursor: give both after_client and after_name (the `next` of the page before)",
            )),
        };
    if !state.broker.destination_exists(&key).await? {
        return Err(unknown(&key));
    }
    Ok(Json(state.broker.list_durables(&key, after, limit).await?))
}

/// `GET /api/v1/{kind}/NAME/subscriptions/CLIENT/SUB/messages`.
async fn subscription_messages(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    query: Result<Query<MessagesQuery>, QueryRejection>,
) -> Result<Json<MessagePage>, ApiError> {
    let Path((name, client_id, subscription)) = path?;
    let Query(query) = query?;
    let (after, limit, full) = query.parts()?;
    let key = key_of(kind, &name)?;
    may_read(&state, &caller, &key)?;
    if !state
        .broker
        .durable_subscription_exists(&key, &client_id, &subscription)
        .await?
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{key} has no durable subscription {client_id}/{subscription}"),
        ));
    }
    let rows = state
        .broker
        .browse_subscription(&key, &client_id, &subscription, after, limit)
        .await?;
    Ok(Json(message_page(rows, limit, full)))
}

/// `DELETE /api/v1/{kind}/NAME/subscriptions/CLIENT/SUB`.
async fn remove_subscription(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path((name, client_id, subscription)) = path?;
    let key = key_of(kind, &name)?;
    // Asked of the store first: removing starts the topic, which an unknown
    // subscription must not do.
    let known = state
        .broker
        .durable_subscription_exists(&key, &client_id, &subscription)
        .await?;
    let removed = if !known {
        false
    } else {
        match state
            .broker
            .remove_durable(&key, &client_id, &subscription)
            .await
        {
            Err(Error::DurableInUse(_)) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "durable subscription {client_id}/{subscription} of {key} has a consumer \
                     attached: it can be removed once that consumer is gone"
                    ),
                )
                .with_code(ErrorCode::DurableInUse))
            }
            removed => removed?,
        }
    };
    if removed {
        tracing::info!(destination = %key, %client_id, %subscription, "durable subscription removed through the admin API");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("{key} has no durable subscription {client_id}/{subscription}"),
        ))
    }
}

/// A JSON request body, read whole (within the body limit: `413` beyond it) and
/// parsed strictly: nothing may follow the value (`400`), and a value of the wrong
/// shape is `422`.
pub struct StrictJson<T>(pub T);

#[axum::async_trait]
impl<T, S> axum::extract::FromRequest<S> for StrictJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|e| {
                let why = match e.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => {
                        "it is larger than the server takes ([stomp] max_frame_size)".to_string()
                    }
                    _ => e.body_text(),
                };
                ApiError::new(e.status(), format!("cannot read the body: {why}"))
            })?;
        serde_json::from_slice(&bytes).map(StrictJson).map_err(|e| {
            let status = match e.classify() {
                serde_json::error::Category::Data => StatusCode::UNPROCESSABLE_ENTITY,
                _ => StatusCode::BAD_REQUEST,
            };
            ApiError::new(status, format!("bad JSON body: {e}"))
        })
    }
}

/// User headers in a request: `{"name": "value", ...}` (a name given twice is
/// refused) or `[["name", "value"], ...]` (in order; a name may repeat, as STOMP
/// allows).
#[derive(Debug, Default)]
pub struct Headers(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for Headers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Headers;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of header names to values, or a list of [name, value] pairs")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Headers, A::Error> {
                let mut headers: Vec<(String, String)> = Vec::new();
                while let Some((name, value)) = map.next_entry::<String, String>()? {
                    if headers.iter().any(|(n, _)| *n == name) {
                        return Err(serde::de::Error::custom(format!(
                            "header `{name}` is given twice; to repeat a header use a list of [name, value] pairs"
                        )));
                    }
                    headers.push((name, value));
                }
                Ok(Headers(headers))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Headers, A::Error> {
                let mut headers = Vec::new();
                while let Some(pair) = seq.next_element::<(String, String)>()? {
                    headers.push(pair);
                }
                Ok(Headers(headers))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// Header names the broker sets on what it delivers (beside [`RESERVED`]): a sent
/// message may not carry them, or a consumer would take them for the broker's.
pub const BROKER_HEADERS: &[&str] = &[
    "browser",
    "receipt-id",
    "message",
    "session",
    "server",
    "version",
];

/// Why header `name: value` cannot be sent intact to every STOMP client, if it
/// cannot: an empty name, a name or value with a line break or NUL, a `:` in a name
/// (STOMP 1.0 has no escapes), a line over `max_line` bytes.
fn header_refusal(name: &str, value: &str, max_line: usize) -> Option<String> {
    let breaks = |t: &str| t.contains(['\n', '\r', '\0']);
    if name.is_empty() {
        Some("a header name is empty".into())
    } else if breaks(name) || name.contains(':') {
        Some(format!("header name {name:?} holds a `:`, a line break or NUL, which STOMP cannot carry to every client"))
    } else if breaks(value) {
        Some(format!("the value of header `{name}` holds a line break or NUL, which STOMP cannot carry to every client"))
    } else if name.len() + 1 + value.len() > max_line {
        Some(format!("header `{name}` is longer than {max_line} bytes, the most one header line may take (max_header_size)"))
    } else {
        None
    }
}

/// The body of `POST .../messages`: one message. Exactly one of `body` and
/// `body_base64` (neither: an empty body).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    /// The body as text.
    pub body: Option<String>,
    /// The body as base64, for bytes that are not text.
    pub body_base64: Option<String>,
    /// User headers ([`Headers`]); the names STOMP reserves (`destination`,
    /// `priority`, `expires`, ...: use the fields below) and the broker's own
    /// ([`BROKER_HEADERS`]) are refused, as is a header STOMP cannot carry intact,
    /// and more headers, or a longer header line, than `[stomp] max_headers` and
    /// `max_header_size` allow a SEND.
    #[serde(default)]
    pub headers: Headers,
    /// Stored before it is accepted (default true: an operator's message should not
    /// vanish with a restart).
    pub persistent: Option<bool>,
    /// 0..=9 (default 4).
    pub priority: Option<u8>,
    /// Time to live, ms (default: none, it never expires).
    pub ttl_ms: Option<u64>,
}

/// The answer to a send.
#[derive(Debug, Serialize)]
pub struct SendAnswer {
    /// The message id the broker gave it.
    pub message_id: String,
    /// Its store id when it was stored (`null` for a non-persistent message, or a
    /// persistent one sent to a topic no durable subscription needs it for).
    pub store_id: Option<i64>,
}

async fn send(
    state: &AppState,
    key: Result<DestinationKey, ApiError>,
    request: Result<StrictJson<SendRequest>, ApiError>,
) -> Result<(StatusCode, Json<SendAnswer>), ApiError> {
    let key = key?;
    let StrictJson(request) = request?;
    let body = match (request.body, request.body_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "give either body or body_base64, not both",
            ))
        }
        (Some(text), None) => text.into_bytes(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| ApiError::bad_request(format!("body_base64 is not valid base64: {e}")))?,
        (None, None) => Vec::new(),
    };
    let mut message = Message::new(body).persistent(request.persistent.unwrap_or(true));
    if let Some(priority) = request.priority {
        message = message.priority(priority);
    }
    if let Some(ttl) = request.ttl_ms {
        if ttl == 0 {
            return Err(ApiError::bad_request(
                "ttl_ms must be at least 1; leave it out for a message that never expires",
            ));
        }
        message = message.ttl(std::time::Duration::from_millis(ttl));
    }
    let limits = state
        .options
        .stomp
        .as_ref()
        .map(|c| c.limits)
        .unwrap_or_default();
    if request.headers.0.len() > limits.max_headers {
        return Err(ApiError::bad_request(format!(
            "{} headers: a message takes at most {} (max_headers)",
            request.headers.0.len(),
            limits.max_headers
        )));
    }
    for (name, value) in request.headers.0 {
        if RESERVED.contains(&name.as_str()) || BROKER_HEADERS.contains(&name.as_str()) {
            return Err(ApiError::bad_request(format!(
                "header `{name}` is set by the broker or by a field of this request, not as a header"
            )));
        }
        if let Some(why) = header_refusal(&name, &value, limits.max_header_bytes) {
            return Err(ApiError::bad_request(why));
        }
        if name.starts_with("AMQ_SCHEDULED_") {
            // Honoured over STOMP only for now: refused, never sent at once as if
            // it were a plain header.
            return Err(ApiError::bad_request(format!(
                "header `{name}` (scheduled delivery) is not supported by the admin API: send it over STOMP"
            ))
            .with_code(ErrorCode::Unsupported));
        }
        message = message.header(name, value);
    }
    let receipt = state.broker.send(&key, message).await?;
    Ok((
        StatusCode::CREATED,
        Json(SendAnswer {
            message_id: receipt.message_id,
            store_id: receipt.store_id,
        }),
    ))
}

/// `POST /api/v1/{kind}/NAME/messages` (`/queues/jobs/messages`).
async fn send_to(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    name: Result<Path<String>, PathRejection>,
    request: Result<StrictJson<SendRequest>, ApiError>,
) -> Result<(StatusCode, Json<SendAnswer>), ApiError> {
    let key = name
        .map_err(ApiError::from)
        .and_then(|Path(name)| key_of(kind, &name));
    send(&state, key, request).await
}

/// `404` unless destination `name` of `kind` exists; its key.
async fn existing(
    state: &AppState,
    kind: DestinationKind,
    name: &str,
) -> Result<DestinationKey, ApiError> {
    let key = key_of(kind, name)?;
    if !state.broker.destination_exists(&key).await? {
        return Err(unknown(&key));
    }
    Ok(key)
}

/// `POST /api/v1/{kind}/NAME/purge`, for a kind that can be browsed.
async fn purge(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<TakeReport>, ApiError> {
    let Path(name) = name?;
    let key = existing(&state, kind, &name).await?;
    let report = state.broker.purge_queue(&key).await?;
    tracing::info!(destination = %key, purged = report.taken, in_flight = report.in_flight, "queue purged through the admin API");
    Ok(Json(report))
}

/// The body of `POST /api/v1/queues/NAME/move`: `ids` (at most 1,000) or `all`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    /// The store ids to move (from a message listing).
    pub ids: Option<Vec<i64>>,
    /// Move every waiting message (after `after`, at most `max` looked at).
    #[serde(default)]
    pub all: bool,
    /// With `all`: start after this store id (the `next` of the answer before).
    pub after: Option<i64>,
    /// With `all`: most messages looked at in this call (default and most 10,000).
    pub max: Option<u32>,
    /// The queue (plain name) to move to; without it each message goes back to the
    /// queue its `originalDestination` header names (a dead letter's retry).
    pub to: Option<String>,
}

/// Default and most messages one `move` call with `all` looks at.
pub const MAX_MOVE_ALL: u32 = 10_000;

/// `POST /api/v1/{kind}/NAME/move`, for a kind that can be browsed.
async fn move_messages(
    State(state): State<AppState>,
    Extension(kind): Extension<DestinationKind>,
    name: Result<Path<String>, PathRejection>,
    request: Result<StrictJson<MoveRequest>, ApiError>,
) -> Result<Json<TakeReport>, ApiError> {
    let Path(name) = name?;
    let StrictJson(request) = request?;
    let selection = match (request.ids, request.all) {
        (Some(_), true) => return Err(ApiError::bad_request("give either ids or all, not both")),
        (None, false) => {
            return Err(ApiError::bad_request(
                "say which messages: ids [..] or all: true",
            ))
        }
        (Some(ids), false) if ids.is_empty() || ids.len() > MAX_MOVE_IDS => {
            return Err(ApiError::bad_request(format!(
                "{} ids: give 1 to {MAX_MOVE_IDS}",
                ids.len()
            )))
        }
        (Some(ids), false) => Selection::Ids(ids),
        (None, true) => Selection::All {
            after: request.after.unwrap_or(0).max(0),
        },
    };
    let max = page_limit(request.max, MAX_MOVE_ALL, MAX_MOVE_ALL)?;
    let from = existing(&state, kind, &name).await?;
    // A plain name is of the same kind; `queue://x` and `/queue/x` are taken too,
    // and a kind messages cannot move to refused.
    let to = match &request.to {
        Some(to)
            if to.contains("://")
                || DestinationKind::all().any(|k| to.starts_with(k.spec().stomp_prefix)) =>
        {
            let key = DestinationKey::parse(to).map_err(|e| {
                ApiError::bad_request(format!("invalid `to` {to:?}: {}", e.reason))
                    .with_code(ErrorCode::InvalidDestination)
            })?;
            if !key.capabilities().move_target {
                return Err(ApiError::bad_request(format!(
                    "`to` {key} is a {}: messages move to queues",
                    key.kind()
                ))
                .with_code(ErrorCode::InvalidRequest));
            }
            Some(key)
        }
        Some(to) => Some(key_of(kind, to)?),
        None => None,
    };
    if to.as_ref() == Some(&from) {
        return Err(ApiError::bad_request(format!(
            "{from} is the queue the messages are in"
        )));
    }
    let report = state
        .broker
        .move_messages(&from, to.clone(), selection, max)
        .await?;
    let to_text = to.map_or("each message's originalDestination".to_string(), |k| {
        k.to_string()
    });
    tracing::info!(from = %from, to = %to_text, moved = report.taken, failed = report.failed, "messages moved through the admin API");
    Ok(Json(report))
}

/// A page of connections.
#[derive(Debug, Serialize)]
pub struct ConnectionPage {
    /// At most the limit asked for, in session-id order.
    pub connections: Vec<crate::transport::connections::ConnectionInfo>,
    /// The `after` of the next page, `null` at the end.
    pub next: Option<String>,
}

/// `GET /api/v1/connections`.
async fn connections(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<ConnectionPage>, ApiError> {
    must_be_admin(
        &state,
        &caller,
        "list connections (they show logins and client ids)",
    )?;
    let Query(query) = query?;
    let limit = page_limit(query.limit, MAX_ADMIN_PAGE, MAX_ADMIN_PAGE)? as usize;
    let connections = state
        .options
        .connections
        .list(query.after.as_deref(), limit);
    let next = (connections.len() == limit)
        .then(|| connections.last().map(|c| c.session.clone()))
        .flatten();
    Ok(Json(ConnectionPage { connections, next }))
}

/// `DELETE /api/v1/connections/SESSION`.
async fn close_connection(
    State(state): State<AppState>,
    session: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(session) = session?;
    if state.options.connections.close(&session) {
        tracing::info!(%session, "connection closed through the admin API");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no open connection {session}: GET /api/v1/connections lists them"),
        ))
    }
}
