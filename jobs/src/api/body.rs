//! Reading a submission's body: the size limit, the content type, and the two accepted shapes — a
//! job file as is (`application/toml`, `text/plain`), or JSON `{"job": "<toml>", "priority": …}`.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use futures::StreamExt;
use serde::Deserialize;

use super::ApiError;

/// Oversized bodies are read and dropped up to this multiple of the limit before the 413 is sent:
/// a server that answers and closes while the client is still sending makes the client's socket
/// reset, and the client then sees a broken pipe instead of the 413 and its message.
const DRAIN_FACTOR: usize = 16;

/// What a submission asks for besides the team (the team comes from the token).
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The job file (TOML).
    pub job_toml: String,
    /// Higher runs first; default 0.
    pub priority: i64,
    /// Failed or lost attempts per stage before dead-lettering; default 3 (as `kiln submit`).
    pub max_attempts: i64,
    /// Replaces the job file's `output` when given.
    pub output: Option<String>,
    /// Spending cap, US dollars.
    pub budget_usd: Option<f64>,
}

/// The JSON shape of a submission. Unknown fields are refused so typos do not pass silently.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitJson {
    /// The job file, TOML text.
    pub job: String,
    /// Higher runs first (default 0).
    #[serde(default)]
    pub priority: i64,
    /// Failed or lost attempts per stage before the job is dead-lettered (default 3, ≥ 1).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i64,
    /// Replaces the job file's `output` URL or path.
    #[serde(default)]
    pub output: Option<String>,
    /// Spending cap for the whole job, US dollars (≥ 0).
    #[serde(default)]
    pub budget_usd: Option<f64>,
}

fn default_max_attempts() -> i64 {
    3
}

/// The body, at most `limit_bytes` long.
///
/// # Errors
/// [`ApiError::BodyTooLarge`] when it is longer (by `Content-Length` or as read);
/// [`ApiError::BadRequest`] when the connection fails mid-body.
pub async fn read_limited(body: Body, limit_bytes: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = ApiError::BodyTooLarge { limit_bytes };
    let drain_cap = limit_bytes.saturating_mul(DRAIN_FACTOR);
    let mut buf = Vec::new();
    let mut seen = 0usize;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest {
            what: "request body",
            message: super::error::chain(&e),
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen > drain_cap {
            return Err(too_large);
        }
        if seen <= limit_bytes {
            buf.extend_from_slice(&chunk);
        }
    }
    if seen > limit_bytes {
        return Err(too_large);
    }
    Ok(buf)
}

/// `Content-Length` above `drain_cap` of the limit: refuse without reading.
///
/// # Errors
/// [`ApiError::BodyTooLarge`].
pub fn check_declared_length(headers: &HeaderMap, limit_bytes: usize) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit_bytes.saturating_mul(DRAIN_FACTOR) as u64 => {
            Err(ApiError::BodyTooLarge { limit_bytes })
        }
        _ => Ok(()),
    }
}

/// The two body shapes a submission may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// `application/toml`, `text/plain` or `text/x-toml`: the job file as is.
    JobFile,
    /// `application/json`: [`SubmitJson`].
    Json,
}

/// The [`Media`] of a `Content-Type` value (parameters such as `charset` are ignored). Checked
/// before the body is read: a 415 needs no body.
///
/// # Errors
/// [`ApiError::UnsupportedMediaType`] for other or missing content types.
pub fn media(content_type: Option<&str>) -> Result<Media, ApiError> {
    let mime = content_type
        .map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_default();
    match mime.as_str() {
        "application/toml" | "text/plain" | "text/x-toml" => Ok(Media::JobFile),
        "application/json" => Ok(Media::Json),
        _ => Err(ApiError::UnsupportedMediaType {
            found: super::error::quoted(content_type.unwrap_or("(none)")),
        }),
    }
}

/// Parse `bytes` as `media`.
///
/// # Errors
/// [`ApiError::BadRequest`] for non-UTF-8 text, or JSON that does not parse or has a bad or
/// unknown field (the message names the field, line and column). The job file's TOML is checked
/// later, by [`crate::submit::prepare`].
pub fn parse(media: Media, bytes: &[u8]) -> Result<Submission, ApiError> {
    match media {
        Media::JobFile => {
            let job_toml = String::from_utf8(bytes.to_vec()).map_err(|e| ApiError::BadRequest {
                what: "job file",
                message: format!("not UTF-8 text: {e}"),
            })?;
            Ok(Submission {
                job_toml,
                priority: 0,
                max_attempts: default_max_attempts(),
                output: None,
                budget_usd: None,
            })
        }
        Media::Json => {
            let de = &mut serde_json::Deserializer::from_slice(bytes);
            let j: SubmitJson = serde_path_to_error::deserialize(de).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                ApiError::BadRequest {
                    what: "JSON body",
                    message: super::error::quoted_lines(&if path == "." {
                        inner.to_string()
                    } else {
                        format!("field `{}`: {inner}", super::error::quoted(&path))
                    }),
                }
            })?;
            Ok(Submission {
                job_toml: j.job,
                priority: j.priority,
                max_attempts: j.max_attempts,
                output: j.output,
                budget_usd: j.budget_usd,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn toml_bodies_take_the_defaults_of_kiln_submit() {
        let s = parse(
            media(Some("application/toml; charset=utf-8")).unwrap(),
            b"name = \"a\"",
        )
        .unwrap();
        assert_eq!(s.job_toml, "name = \"a\"");
        assert_eq!((s.priority, s.max_attempts), (0, 3));
        assert_eq!(media(Some("text/plain")).unwrap(), Media::JobFile);
    }

    #[test]
    fn json_bodies_carry_the_options() {
        let s = parse(
            Media::Json,
            br#"{"job": "name = 'a'", "priority": 5, "max_attempts": 2, "output": "s3://b/o", "budget_usd": 1.5}"#,
        )
        .unwrap();
        assert_eq!(s.priority, 5);
        assert_eq!(s.max_attempts, 2);
        assert_eq!(s.output.as_deref(), Some("s3://b/o"));
        assert_eq!(s.budget_usd, Some(1.5));
    }

    #[test]
    fn json_with_a_bad_field_type_names_the_field_and_column() {
        let e = parse(Media::Json, br#"{"job": "x", "priority": "high"}"#).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let m = e.to_string();
        assert!(
            m.contains("field `priority`") && m.contains("column"),
            "{m}"
        );
    }

    #[test]
    fn json_with_an_unknown_field_is_refused() {
        let e = parse(Media::Json, br#"{"job": "x", "prio": 1}"#).unwrap_err();
        assert!(e.to_string().contains("prio"), "{e}");
    }

    #[test]
    fn malformed_json_names_the_line() {
        let e = parse(Media::Json, b"{\"job\": \n").unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert!(e.to_string().contains("line 2"), "{e}");
    }

    #[test]
    fn other_or_missing_content_types_are_415() {
        for ct in [Some("application/xml"), Some("multipart/form-data"), None] {
            let e = media(ct).unwrap_err();
            assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}");
        }
    }

    #[test]
    fn non_utf8_job_files_are_bad_requests() {
        let e = parse(Media::JobFile, &[0xff, 0xfe]).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_413_and_at_the_limit_pass() {
        let ok = read_limited(Body::from(vec![b'a'; 10]), 10).await.unwrap();
        assert_eq!(ok.len(), 10);
        let e = read_limited(Body::from(vec![b'a'; 11]), 10)
            .await
            .unwrap_err();
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let e = read_limited(Body::from(vec![b'a'; 1000]), 10)
            .await
            .unwrap_err();
        assert_eq!(e.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
