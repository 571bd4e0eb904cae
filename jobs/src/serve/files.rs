//! Static files of `kiln serve`: a job's published output (`/jobs/{id}/files/{*path}`) and the
//! vendored CesiumJS build (`/cesium/{*path}`).
//!
//! Both go through [`serve_under`]: the request path is checked by
//! [`super::output::safe_relative_path`], resolved with symlinks inside the root (so a link cannot
//! lead out of it), and then handed to tower-http's `ServeFile`, which sets the content type from
//! the extension (`.json`, `.glb` → `model/gltf-binary`, `.png`, `.svg`, `.html`, `.js`, `.wasm`)
//! and handles `Range`, `HEAD` and conditional requests.

use std::path::Path;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use tower_http::services::ServeFile;

use super::output::safe_relative_path;
use super::pages::{code_path, escape_html, message_page};

/// An HTML error response.
pub fn html_error(status: StatusCode, title: &str, message_html: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        message_page(title, message_html),
    )
        .into_response()
}

/// Serve `requested` (a decoded, `/`-separated path from the URL) from inside `root`.
///
/// - `what`: names the root in messages ("the output of job X", "the CesiumJS build").
///
/// Responses: the file (200/206/304 from `ServeFile`); 400 for an unsafe path; 404 naming the file
/// when it does not exist, is a folder, or resolves outside `root`. Never panics.
pub async fn serve_under(root: &Path, requested: &str, what: &str, req: Request) -> Response {
    let rel = match safe_relative_path(requested) {
        Ok(rel) => rel,
        Err(why) => {
            return html_error(
                StatusCode::BAD_REQUEST,
                "bad file path",
                &format!(
                    "<code>{}</code> is not a file path inside {}: {why}.",
                    escape_html(requested),
                    escape_html(what)
                ),
            );
        }
    };
    let not_found = |detail: &str| {
        html_error(
            StatusCode::NOT_FOUND,
            "file not found",
            &format!(
                "{} has no file <code>{}</code>{detail}.",
                escape_html(what),
                escape_html(requested),
            ),
        )
    };
    // Canonicalise both so a symlink inside the root cannot serve a file outside it.
    let Ok(root_real) = tokio::fs::canonicalize(root).await else {
        return not_found(&format!(" (the folder {} does not exist)", code_path(root)));
    };
    let candidate = root_real.join(&rel);
    let Ok(real) = tokio::fs::canonicalize(&candidate).await else {
        return not_found(&format!(" (looked for {})", code_path(&candidate)));
    };
    if !real.starts_with(&root_real) {
        return not_found(" (it resolves outside the served folder)");
    }
    match tokio::fs::metadata(&real).await {
        Ok(m) if m.is_file() => {}
        Ok(_) => return not_found(" (that is a folder, not a file)"),
        Err(_) => return not_found(&format!(" (looked for {})", code_path(&candidate))),
    }
    match ServeFile::new(&real).oneshot(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => html_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "read error",
            &format!(
                "cannot read {}: {}",
                code_path(&real),
                escape_html(&e.to_string())
            ),
        ),
    }
}
