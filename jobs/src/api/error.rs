//! The API's error type and its one mapping to HTTP: every failure is a status plus JSON
//! `{"error": "…"}`, and errors of the library ([`crate::Error`]) are sorted into the client's fault
//! (4xx, with the parser's or checker's message) and the server's (5xx).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A failed API request. Each variant is one status code; the `Display` text is the JSON `error`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No `Authorization: Bearer` header, or a token that is malformed, unknown or revoked → 401
    /// with `WWW-Authenticate: Bearer`.
    #[error("{reason}; send `Authorization: Bearer kiln_…` with a token from `kiln token create`")]
    Unauthorized {
        /// What is wrong with the credentials (never echoes the token).
        reason: &'static str,
    },
    /// No job with this id for the caller's team (missing and other teams' jobs alike) → 404.
    #[error("job `{job_id}` not found; GET /api/v1/jobs lists your team's jobs")]
    JobNotFound {
        /// The id asked for.
        job_id: String,
    },
    /// The job exists but no stage of it has run, so the ledger has no report yet → 404.
    #[error(
        "job `{job_id}` has no report yet: no stage has run; it appears once a worker starts the first stage"
    )]
    NoReport {
        /// The job's id.
        job_id: String,
    },
    /// No such route under `/api/v1` → 404.
    #[error("no route {method} {path}; GET /api/v1/openapi.json lists the routes")]
    NoRoute {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// The request body is larger than the server's limit → 413.
    #[error(
        "request body is larger than the limit of {limit_bytes} bytes (kiln serve --max-body-bytes); job files are normally a few hundred bytes"
    )]
    BodyTooLarge {
        /// The limit, bytes.
        limit_bytes: usize,
    },
    /// The body's `Content-Type` is not one the route reads → 415.
    #[error(
        "unsupported Content-Type `{found}`; send application/toml or text/plain (a job file) or application/json ({{\"job\": \"<toml>\", …}})"
    )]
    UnsupportedMediaType {
        /// The content type received (`(none)` when absent).
        found: String,
    },
    /// The body or a query parameter cannot be parsed, or a field has a bad value → 400.
    #[error("{what}: {message}")]
    BadRequest {
        /// What was being read (`JSON body`, `job file`, `query parameter state`, …).
        what: &'static str,
        /// The parser's or checker's message (it names the field and the line where it can).
        message: String,
    },
    /// The request names storage its team may not use (`kiln serve --tenants`) → 403.
    #[error("{what}: {message}")]
    Forbidden {
        /// What was refused (`job file field `input``, …).
        what: &'static str,
        /// Why, with the team's allowed prefixes.
        message: String,
    },
    /// The team already has as many active jobs as its limit allows → 429.
    #[error("too many jobs: {message}")]
    TooManyJobs {
        /// The team, its count and what to do.
        message: String,
    },
    /// The database or the server failed → 500. Logged; the message names the database.
    #[error("internal error: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::JobNotFound { .. } | ApiError::NoReport { .. } | ApiError::NoRoute { .. } => {
                StatusCode::NOT_FOUND
            }
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::TooManyJobs { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Most characters of one piece of the caller's input (an id, a path, a value, a line of the job
/// file) that an error reply quotes: enough to recognise it, while a 900 kB body cannot make a
/// 1.8 MB reply (or fill the server's log).
pub const MAX_QUOTED_CHARS: usize = 200;

/// Most characters of a whole error reply, whatever it holds: a backstop behind
/// [`MAX_QUOTED_CHARS`] for messages that quote input in ways this module does not know.
const MAX_MESSAGE_CHARS: usize = 2000;

/// `text` cut to [`MAX_QUOTED_CHARS`] characters, saying how many were left out.
pub fn quoted(text: &str) -> String {
    cut(text, MAX_QUOTED_CHARS)
}

/// `text` cut to `max` characters (on a character boundary), saying how many were left out.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!(
            "{}… ({} more characters)",
            &text[..end],
            text[end..].chars().count()
        ),
    }
}

/// Each line of a parser's message cut by [`quoted`]: parsers (TOML, JSON) quote the offending
/// line or key of the input, and their own words fit in a short line.
pub fn quoted_lines(message: &str) -> String {
    message.lines().map(quoted).collect::<Vec<_>>().join("\n")
}

/// `e` and its sources, joined by `: ` (the library's errors keep the parser's detail in sources).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let part = c.to_string();
        if !s.contains(&part) {
            s.push_str(": ");
            s.push_str(&part);
        }
        cur = c.source();
    }
    s
}

impl From<crate::Error> for ApiError {
    /// Job-file, planning and submission errors are the client's (400); a job not in the queue is
    /// 404; a job with no ledger rows has no report (404); the rest is the server's (500).
    fn from(e: crate::Error) -> Self {
        use crate::Error as E;
        match e {
            E::NotInQueue { job_id, .. } => ApiError::JobNotFound {
                job_id: quoted(&job_id),
            },
            E::NoSuchJob { job_id, .. } => ApiError::NoReport {
                job_id: quoted(&job_id),
            },
            E::TooManyJobs { .. } => ApiError::TooManyJobs {
                message: e.to_string(),
            },
            E::Spec { path, message } => ApiError::BadRequest {
                what: "job file",
                message: E::Spec {
                    path,
                    message: quoted_lines(&message),
                }
                .to_string(),
            },
            E::Field {
                path,
                field,
                expected,
                found,
            } => ApiError::BadRequest {
                what: "job file",
                message: E::Field {
                    path,
                    field: quoted(&field),
                    expected,
                    found: quoted(&found),
                }
                .to_string(),
            },
            E::Plan { .. } | E::Submit { .. } => ApiError::BadRequest {
                what: "job file",
                message: quoted_lines(&chain(&e)),
            },
            other => {
                let message = chain(&other);
                tracing::error!(error = %message, "API request failed");
                ApiError::Internal { message }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let mut res = (
            status,
            Json(serde_json::json!({ "error": cut(&self.to_string(), MAX_MESSAGE_CHARS) })),
        )
            .into_response();
        if status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}

/// Fallback of `/api/v1`: a JSON 404 naming the route.
pub(crate) async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute {
        method: quoted(method.as_str()),
        path: quoted(uri.path()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn job_file_errors_are_bad_requests_naming_the_field() {
        let e: ApiError = crate::Error::Field {
            path: PathBuf::from("request body"),
            field: "kind".into(),
            expected: "capture, mesh or splats".into(),
            found: "\"video\"".into(),
        }
        .into();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert!(e.to_string().contains("field `kind`"), "{e}");
    }

    #[test]
    fn a_job_not_in_the_queue_is_404_without_the_database_path() {
        let e: ApiError = crate::Error::NotInQueue {
            job_id: "j1".into(),
            db: "/secret/queue.sqlite".into(),
        }
        .into();
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert!(!e.to_string().contains("secret"), "{e}");
    }

    #[test]
    fn a_job_without_ledger_rows_has_no_report() {
        let e: ApiError = crate::Error::NoSuchJob {
            job_id: "j1".into(),
            path: "x".into(),
        }
        .into();
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert!(e.to_string().contains("no stage has run"), "{e}");
    }

    #[test]
    fn submission_refusals_are_bad_requests() {
        let e: ApiError = crate::Error::Submit {
            message: "max_attempts must be at least 1, found 0".into(),
        }
        .into();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn unauthorized_responses_carry_www_authenticate_bearer() {
        let res = ApiError::Unauthorized {
            reason: "missing Authorization header",
        }
        .into_response();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(res.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
    }

    #[test]
    fn oversized_bodies_name_the_limit() {
        let e = ApiError::BodyTooLarge { limit_bytes: 1024 };
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(e.to_string().contains("1024 bytes"));
    }
}
