//! OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with an HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before trying again (429, 503).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    /// 400 about `param` (the field's name as the client wrote it).
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()),
            code: None,
            retry_after: None,
        }
    }
    /// 400 about the whole body (not JSON, not an object).
    pub fn body(message: impl Into<String>) -> Self {
        ApiError { param: None, ..Self::invalid("", message) }
    }
    /// 404 for a `model` this server does not serve (OpenAI's `model_not_found`).
    pub fn model_not_found(name: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist; this server serves `{served}`."),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
            retry_after: None,
        }
    }
    /// 404 for a path with no route.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::NOT_FOUND, message: message.into(), kind: "not_found_error", param: None, code: None, retry_after: None }
    }
    /// 429: the queue is full.
    pub fn queue_full(max_queue: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!("the server is at capacity ({max_queue} requests already wait for a slot); retry later"),
            kind: "rate_limit_error",
            param: None,
            code: Some("queue_full"),
            retry_after: Some(1),
        }
    }
    /// 503: loading, draining, or the engine is gone.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "service_unavailable",
            param: None,
            code: None,
            retry_after: Some(1),
        }
    }
    /// 500: the engine failed while running the request.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }
    /// Any status with a message (body-extraction rejections: 413, 415, ...).
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = if status.is_client_error() { "invalid_request_error" } else { "server_error" };
        ApiError { status, message: message.into(), kind, param: None, code: None, retry_after: None }
    }

    /// The JSON body.
    pub fn json(&self) -> serde_json::Value {
        let b = Body { error: Detail { message: &self.message, kind: self.kind, param: self.param.as_deref(), code: self.code } };
        serde_json::to_value(b).unwrap_or(serde_json::Value::Null)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.json())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
