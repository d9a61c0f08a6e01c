//! What every request passes before a handler sees it:
//!
//! 1. its `Host` must be one the server answers to (`--allowed-hosts`): a web page that
//!    rebinds its own DNS name to this machine's address cannot read answers (403);
//! 2. with `--api-key`, `Authorization: Bearer KEY` on every route (401), `/health` and
//!    `/metrics` aside unless `--protect-metrics`;
//! 3. a POST body must be `Content-Type: application/json` (415): a browser sends a
//!    cross-site `text/plain` or form POST without asking, never a JSON one;
//! 4. a POST body is read here, at most `--max-body-bytes` (413) within `--body-timeout`
//!    (408, and the connection closes), before any parsing or tokenizing.
//!
//! Refusals are OpenAI-style JSON errors, counted in the metrics like the handlers' own.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::metrics::Outcome;
use crate::Shared;

/// An API key; its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<hidden>)")
    }
}

impl std::str::FromStr for ApiKey {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ApiKey(s.to_string()))
    }
}

/// The `Host` names the server answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hosts {
    Any,
    /// Lowercase names without port (IPv6 addresses without brackets).
    Only(Vec<String>),
}

impl Hosts {
    /// From `--allowed-hosts` (`*` allows any); none given: the loopback names and the bound
    /// address when bound to a loopback address, any host otherwise (the server was bound to a
    /// public address to be reached under names it cannot know).
    pub fn resolve(given: &[String], bound: IpAddr, host: &str) -> Hosts {
        if given.iter().any(|h| h.trim() == "*") {
            return Hosts::Any;
        }
        if !given.is_empty() {
            return Hosts::Only(given.iter().map(|h| host_name(h)).collect());
        }
        if !bound.is_loopback() {
            return Hosts::Any;
        }
        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"].iter().map(|s| s.to_string()).collect();
        for n in [host_name(host), bound.to_string()] {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        Hosts::Only(names)
    }

    fn allows(&self, name: &str) -> bool {
        match self {
            Hosts::Any => true,
            Hosts::Only(names) => names.iter().any(|n| *n == name),
        }
    }
}

/// A `Host` value's name: without port or IPv6 brackets, lowercase, without a final dot.
pub fn host_name(value: &str) -> String {
    let v = value.trim();
    let name = if let Some(rest) = v.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if v.parse::<Ipv6Addr>().is_ok() {
        v
    } else {
        match v.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => v,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// What the checks need, fixed at start.
pub struct Policy {
    pub hosts: Hosts,
    pub api_key: Option<ApiKey>,
    pub protect_metrics: bool,
    pub max_body_bytes: usize,
    pub body_timeout: Duration,
}

/// The middlewares' state.
pub(crate) type Guard = State<(Arc<Shared>, Arc<Policy>)>;

/// The outer middleware: the `Host` check (before CORS answers any preflight).
pub(crate) async fn host(State((s, p)): Guard, req: Request, next: Next) -> Response {
    match check_host(&p, &req) {
        Ok(()) => next.run(req).await,
        Err(e) => refuse(&s, e),
    }
}

/// The inner middleware: key, content type, body (see the module's notes).
pub(crate) async fn request(State((s, p)): Guard, req: Request, next: Next) -> Response {
    match admit(&p, req).await {
        Ok(req) => next.run(req).await,
        Err(e) => refuse(&s, e),
    }
}

/// Answer a refusal, and count it.
fn refuse(s: &Shared, e: ApiError) -> Response {
    if let Ok(mut m) = s.metrics.lock() {
        m.count(Outcome::of_status(e.status.as_u16()));
    }
    let close = matches!(e.status, StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE);
    let mut r = e.into_response();
    if r.status() == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    if close {
        // The rest of the body is not read (it may never come): the connection ends here.
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn admit(p: &Policy, req: Request) -> Result<Request, ApiError> {
    let open = matches!(req.uri().path(), "/health" | "/metrics") && !p.protect_metrics;
    if let (Some(key), false) = (&p.api_key, open) {
        check_key(key, req.headers())?;
    }
    if req.method() != Method::POST {
        return Ok(req);
    }
    check_json(req.headers())?;
    read_body(p, req).await
}

fn check_host(p: &Policy, req: &Request) -> Result<(), ApiError> {
    let not_allowed = |name: &str| {
        ApiError::with_status(
            StatusCode::FORBIDDEN,
            format!("Host `{name}` is not one this server answers to; start it with --allowed-hosts {name} to allow it"),
        )
    };
    // An absolute-form target (`POST http://name/...`) names the host too.
    if let Some(a) = req.uri().authority() {
        let name = host_name(a.as_str());
        if !p.hosts.allows(&name) {
            return Err(not_allowed(&name));
        }
    }
    match req.headers().get(header::HOST) {
        Some(v) => {
            let name = host_name(v.to_str().map_err(|_| ApiError::with_status(StatusCode::BAD_REQUEST, "the Host header is not ASCII"))?);
            if p.hosts.allows(&name) {
                Ok(())
            } else {
                Err(not_allowed(&name))
            }
        }
        // HTTP/1.0 clients may leave it out (no browser does); HTTP/1.1 requires it.
        None if req.version() <= Version::HTTP_10 || req.uri().authority().is_some() => Ok(()),
        None => Err(ApiError::with_status(StatusCode::BAD_REQUEST, "an HTTP/1.1 request needs a Host header")),
    }
}

fn check_key(key: &ApiKey, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().split_once(' '));
    let ok = match given {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => bool::from(token.trim().as_bytes().ct_eq(key.0.as_bytes())),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let message = if headers.contains_key(header::AUTHORIZATION) {
        "invalid API key in the Authorization header"
    } else {
        "this server needs an API key: send `Authorization: Bearer KEY`"
    };
    Err(ApiError { code: Some("invalid_api_key"), ..ApiError::with_status(StatusCode::UNAUTHORIZED, message) })
}

fn check_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("(not ASCII)"));
    let essence = ct.map(|c| c.split(';').next().unwrap_or_default().trim());
    match essence {
        Some(e) if e.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::with_status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("the request body must be JSON with `Content-Type: application/json` (got {})", ct.map_or("none".into(), |c| format!("`{c}`"))),
        )),
    }
}

/// Read the whole body within the size and time limits; the request with the body in memory.
async fn read_body(p: &Policy, req: Request) -> Result<Request, ApiError> {
    let too_large =
        || ApiError::with_status(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body exceeds {} bytes (--max-body-bytes)", p.max_body_bytes));
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > p.max_body_bytes as u64) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(p.body_timeout, Limited::new(body, p.max_body_bytes).collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => return Err(ApiError::body(format!("reading the request body: {e}"))),
        Err(_) => {
            return Err(ApiError::with_status(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {} s (--body-timeout)", p.body_timeout.as_secs_f64()),
            ))
        }
    };
    Ok(Request::from_parts(parts, Body::from(bytes)))
}
