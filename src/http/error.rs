//! The HTTP server's error answer ([`ApiError`]): a status and a JSON body, what every
//! route of the admin API and the login check return when they refuse. Its own
//! module, below both [`super::api`] and [`super::login`].

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::{Error, ErrorCode};

/// An answer with an error status and a JSON body
/// `{"error": "...", "code": "...", "status": N}`: `code` is the refusal's stable
/// [`ErrorCode`], the same a STOMP client gets in `error-code`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    header: Option<(HeaderName, &'static str)>,
}

impl ApiError {
    /// An error answer with `status` and the text `message`; its code is the one
    /// the status means ([`code_of_status`]) until [`ApiError::with_code`] says
    /// otherwise.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code_of_status(status),
            message: message.into(),
            header: None,
        }
    }

    /// The same answer with the code `code`.
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }

    /// Its code.
    pub fn code(&self) -> ErrorCode {
        self.code
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
        let body = serde_json::json!({
            "error": self.message,
            "code": self.code.as_str(),
            "status": self.status.as_u16(),
        });
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
        Self::new(status, e.to_string()).with_code(e.code())
    }
}

/// The code an error status means when nothing more precise is known: `400` and `422`
/// a value that cannot be used, `401` a refused login, `403` a missing right, `404`
/// not found, `405` a request the route does not take, `408` a stalled request,
/// `409` in use, `413` a limit, `415` an unsupported body, `429` a throttled login,
/// `503` shutting down; anything else `internal`.
pub fn code_of_status(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => ErrorCode::InvalidValue,
        StatusCode::UNAUTHORIZED => ErrorCode::AuthenticationFailed,
        StatusCode::FORBIDDEN => ErrorCode::NotAuthorized,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::InvalidRequest,
        StatusCode::REQUEST_TIMEOUT => ErrorCode::Timeout,
        StatusCode::CONFLICT => ErrorCode::InUse,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::LimitExceeded,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::Unsupported,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::LoginThrottled,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::ShuttingDown,
        StatusCode::INSUFFICIENT_STORAGE => ErrorCode::ResourceLimit,
        _ => ErrorCode::Internal,
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
