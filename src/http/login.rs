//! HTTP Basic logins for the admin API, checked against the configured users (the
//! same users and argon2 hashes as STOMP's CONNECT, [`crate::auth`]).
//!
//! argon2 is slow on purpose (tens of ms a check), and a console polls every few
//! seconds, so a login that succeeded is remembered for [`LOGIN_TTL`]: the exact
//! `Authorization` value maps to the principal, at most [`MAX_REMEMBERED`] of them
//! (the oldest forgotten first). A changed password therefore takes effect for
//! remembered logins at the next restart (users come from the configuration file,
//! which is read once). Checks run off the event loop, at most one per core at once
//! ([`crate::auth::login_checks`]); a refused one waits
//! [`crate::auth::FAILED_LOGIN_DELAY`] before its `401`. Refused logins count against
//! the client's address in the broker's [`crate::login_guard::LoginGuard`], shared
//! with STOMP: an address that used them up gets `429` at once, with no check, until
//! its window passes, and parallel attempts wait for the checks before them, so a
//! flood of wrong passwords from one address cannot keep the checks busy for
//! everyone.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use parking_lot::Mutex;

use super::error::ApiError;
use super::AppState;
use crate::auth::Principal;

/// How long a login that succeeded is remembered.
pub const LOGIN_TTL: Duration = Duration::from_secs(300);

/// Most logins remembered at once.
pub const MAX_REMEMBERED: usize = 256;

/// Logins that succeeded lately: `Authorization` value → (principal, when checked).
#[derive(Default)]
pub(crate) struct LoginCache(Mutex<HashMap<String, (Principal, Instant)>>);

impl LoginCache {
    fn get(&self, credentials: &str) -> Option<Principal> {
        let cache = self.0.lock();
        let (principal, at) = cache.get(credentials)?;
        (at.elapsed() < LOGIN_TTL).then(|| principal.clone())
    }

    fn put(&self, credentials: String, principal: Principal) {
        let mut cache = self.0.lock();
        cache.retain(|_, (_, at)| at.elapsed() < LOGIN_TTL);
        if cache.len() >= MAX_REMEMBERED {
            if let Some(oldest) = cache
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            {
                cache.remove(&oldest);
            }
        }
        cache.insert(credentials, (principal, Instant::now()));
    }
}

/// A `401` that asks for Basic credentials.
fn unauthorized(why: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, why).with_header(
        axum::http::header::WWW_AUTHENTICATE,
        "Basic realm=\"ebb\", charset=\"UTF-8\"",
    )
}

/// `login:password` from an `Authorization: Basic ...` value, or what is wrong with
/// it (the `401`'s text).
fn basic(value: &str) -> Result<(String, String), &'static str> {
    let encoded = value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
        .map(|(_, encoded)| encoded)
        .ok_or("the Authorization header must be Basic credentials")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| "the Basic credentials are not valid base64")?;
    let text = String::from_utf8(decoded).map_err(|_| "the Basic credentials are not UTF-8")?;
    let (login, password) = text
        .split_once(':')
        .ok_or("the Basic credentials must be login:password")?;
    Ok((login.to_string(), password.to_string()))
}

/// Who calls (from `peer`, when known): `Ok(None)` when no users are configured
/// (everyone may call), the principal of valid Basic credentials, a `401`, or a `429`
/// for an address with too many refused logins.
pub(crate) async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
) -> Result<Option<Principal>, ApiError> {
    let security = &state.options.security;
    if !security.requires_login() {
        return Ok(None);
    }
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Err(unauthorized(
            "authentication required: send HTTP Basic credentials of a configured user",
        ));
    };
    let value = value
        .to_str()
        .map_err(|_| unauthorized("the Authorization header is not text"))?
        .to_string();
    if let Some(principal) = state.logins.get(&value) {
        return Ok(Some(principal));
    }
    let guard = std::sync::Arc::clone(&security.login_guard);
    let check = guard.admit(peer, "http").await.map_err(|throttled| {
        tracing::info!(peer = ?peer, "refused HTTP login: {throttled}");
        ApiError::new(StatusCode::TOO_MANY_REQUESTS, throttled.to_string())
    })?;
    let (login, password) = basic(&value).map_err(unauthorized)?;
    let checked = {
        let _permit = crate::auth::login_checks()
            .acquire()
            .await
            .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
        let security = std::sync::Arc::clone(security);
        tokio::task::spawn_blocking(move || security.authenticate(Some(&login), Some(&password)))
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("login check failed: {e}"),
                )
                .with_code(crate::ErrorCode::Internal)
            })?
    };
    match checked {
        Ok(Some(principal)) => {
            check.accepted();
            state.logins.put(value, principal.clone());
            Ok(Some(principal))
        }
        Ok(None) => Ok(None),
        Err(why) => {
            check.refused();
            tracing::info!(peer = ?peer, %why, "refused HTTP login");
            tokio::time::sleep(crate::auth::FAILED_LOGIN_DELAY).await;
            Err(unauthorized(why.to_string()))
        }
    }
}

/// Who calls, who must be allowed to change things: without users anyone is, with
/// users only members of the admin group (`403` for the others).
pub(crate) async fn admin(
    state: &AppState,
    headers: &HeaderMap,
    peer: Option<std::net::IpAddr>,
) -> Result<(), ApiError> {
    match caller(state, headers, peer).await? {
        None => Ok(()),
        Some(principal) if principal.groups.contains(&state.options.admin_group) => Ok(()),
        Some(principal) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "user {} may read but not change: changes need a user in group `{}`",
                principal.login, state.options.admin_group
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_decoded_or_refused_with_a_reason() {
        // "ops:s3cr:et" — a password may hold a colon.
        assert_eq!(
            basic("Basic b3BzOnMzY3I6ZXQ="),
            Ok(("ops".to_string(), "s3cr:et".to_string()))
        );
        assert!(basic("Bearer abc").unwrap_err().contains("Basic"));
        assert_eq!(
            basic("BASIC b3BzOnMzY3I6ZXQ="),
            Ok(("ops".to_string(), "s3cr:et".to_string())),
            "the scheme's case does not matter"
        );
        assert!(basic("Basic !!!").unwrap_err().contains("base64"));
        // "nocolon"
        assert!(basic("Basic bm9jb2xvbg==")
            .unwrap_err()
            .contains("login:password"));
    }

    #[test]
    fn the_cache_forgets_the_oldest_beyond_its_bound() {
        let cache = LoginCache::default();
        let who = |n: usize| Principal {
            login: format!("u{n}"),
            groups: vec![],
        };
        for n in 0..MAX_REMEMBERED + 10 {
            cache.put(format!("k{n}"), who(n));
        }
        assert_eq!(cache.0.lock().len(), MAX_REMEMBERED);
        assert_eq!(cache.get("k0"), None);
        assert_eq!(
            cache.get(&format!("k{}", MAX_REMEMBERED + 9)),
            Some(who(MAX_REMEMBERED + 9))
        );
    }
}
