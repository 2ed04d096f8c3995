//! The HTTP server's error answer ([`ApiError`]): a status and a JSON body, what every
//! route of the admin API and the login check return when they refuse. Its own
//! module, below both [`super::api`] and [`super::login`].

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::Error;

/// An answer with an error status and a JSON body `{"error": "...", "status": N}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    header: Option<(HeaderName, &'static str)>,
}

impl ApiError {
    /// An error answer with `status` and the text `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            header: None,
        }
    }

    /// The same answer with one more header (`WWW-Authenticate` on a `401`).
    pub fn with_header(mut self, name: HeaderName, value: &'static str) -> Self {
        self.header = Some((name, value));
        self
    }

    /// A `400` with the text `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message, "status": self.status.as_u16() });
        let mut response = (self.status, Json(body)).into_response();
        if let Some((name, value)) = self.header {
            response
                .headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        response
    }
}

impl From<Error> for ApiError {
    /// The caller's mistakes are 4xx; a store that cannot be reached, or a broker
    /// shutting down, is `503`.
    fn from(e: Error) -> Self {
        let status = match &e {
            Error::InvalidDestination { .. }
            | Error::InvalidPriority(_)
            | Error::InvalidSubscription => StatusCode::BAD_REQUEST,
            Error::ResourceLimit { .. } => StatusCode::INSUFFICIENT_STORAGE,
            Error::DurableInUse(_) | Error::InUse(_) => StatusCode::CONFLICT,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self::new(status, e.to_string())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        Self::bad_request(format!("bad query: {}", e.body_text()))
    }
}

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        Self::bad_request(format!("bad path: {}", e.body_text()))
    }
}
