//! `kiln serve`: a small web server over the job ledger. It lists the jobs, shows each job's
//! output tileset in CesiumJS beside the job's HTML report, and serves the job's output files.
//!
//! Routes ([`router`]):
//! - `GET /` — the jobs in the ledger the caller may see, newest first;
//! - `GET /jobs/{id}` — the viewer page (see [`pages`] for the `window.kilnViewer` contract);
//! - `GET /jobs/{id}/files/{*path}` — a file of the job's local output folder;
//! - `GET /cesium/{*path}` — the vendored CesiumJS build (`node_modules/cesium/Build/Cesium`);
//! - `GET /login`, `POST /login`, `POST /logout` — sign-in for [`ViewerAccess::Token`] only.
//!
//! Who may see them depends on the listen address and `--viewer` ([`access`]): on loopback the
//! pages are open and show every job, as they always were; on any other address they are off
//! unless `--viewer` is given, and then every route needs a team token (Bearer header, or the
//! `HttpOnly` cookie `/login` sets) and shows only that team's jobs.
//!
//! Only local outputs are served (absolute paths, `file://` URLs, and relative paths resolved
//! against the server's working directory); remote outputs (`s3://…`) get a note instead. CesiumJS
//! is never fetched from a CDN: without `--cesium`/`$KILN_CESIUM_DIR` the page says how to install
//! it.

pub mod access;
pub mod files;
pub mod output;
pub mod pages;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Path as UrlPath, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};

pub use access::{Scope, ViewerAccess};

use crate::ledger::Ledger;
use crate::queue::Queue;
use files::{html_error, serve_under};
use output::{OutputLocation, resolve_output};
use pages::{CesiumState, JobPageInput, escape_html};

/// Errors that stop `kiln serve` from starting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The address cannot be bound (in use, not local, no permission).
    #[error(
        "cannot listen on {addr}: {source}; pick another with --addr HOST:PORT (port 0 = any free port)"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("serving on {addr} failed: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// `--viewer open` on an address other machines can reach.
    #[error(
        "refusing to serve the viewer without authentication on {addr}, which is not a loopback \
         address: use --viewer (team tokens) or listen on 127.0.0.1"
    )]
    OpenViewerOnNetwork {
        /// The listen address.
        addr: SocketAddr,
    },
    /// The working directory (used to resolve relative outputs) cannot be read.
    #[error(
        "cannot read the current directory (relative job outputs resolve against it): {source}"
    )]
    CurrentDir {
        #[source]
        source: std::io::Error,
    },
}

/// Where the CesiumJS build is, resolved once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CesiumDir {
    /// A folder holding `Cesium.js`, `Widgets/`, `Workers/`, `Assets/`, `ThirdParty/`.
    Found(PathBuf),
    /// Not configured.
    NotConfigured,
    /// Configured, but `Cesium.js` is not there.
    Missing(PathBuf),
}

impl CesiumDir {
    /// Resolve `--cesium DIR` / `$KILN_CESIUM_DIR` (the caller passes whichever was given).
    ///
    /// Accepts the build folder itself (`node_modules/cesium/Build/Cesium`) and, as a
    /// convenience, the package folder (`node_modules/cesium`) or the folder holding
    /// `node_modules`. Reads only file metadata; never fails.
    pub fn resolve(dir: Option<&Path>) -> CesiumDir {
        let Some(dir) = dir else {
            return CesiumDir::NotConfigured;
        };
        for candidate in [
            dir.to_path_buf(),
            dir.join("Build/Cesium"),
            dir.join("node_modules/cesium/Build/Cesium"),
        ] {
            if candidate.join("Cesium.js").is_file() {
                return CesiumDir::Found(candidate);
            }
        }
        CesiumDir::Missing(dir.to_path_buf())
    }

    fn state(&self) -> CesiumState {
        match self {
            CesiumDir::Found(_) => CesiumState::Available,
            CesiumDir::NotConfigured => CesiumState::NotConfigured,
            CesiumDir::Missing(d) => CesiumState::Missing {
                dir: d.display().to_string(),
            },
        }
    }
}

/// What the server needs: an open ledger, the CesiumJS folder, the directory relative job
/// outputs resolve against, and who may see the pages.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The job ledger.
    pub ledger: Ledger,
    /// CesiumJS, resolved by [`CesiumDir::resolve`].
    pub cesium: CesiumDir,
    /// Base for relative `output` values in the ledger (normally the current directory).
    pub relative_base: PathBuf,
    /// Who may see the pages and files, from [`ViewerAccess::resolve`].
    pub access: ViewerAccess,
}

type AppState = Arc<ServeConfig>;

/// The router with every viewer route of `kiln serve` for `config.access` (with
/// [`ViewerAccess::Off`], only a fallback that says the viewer is off). Call it directly in tests
/// (`tower::ServiceExt::oneshot`).
pub fn router(config: ServeConfig) -> Router {
    let access = config.access;
    let state: AppState = Arc::new(config);
    if access == ViewerAccess::Off {
        return Router::new().fallback(access::viewer_off).with_state(state);
    }
    let mut app = Router::new()
        .route("/", get(index))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/files/{*path}", get(job_file))
        .route("/cesium/{*path}", get(cesium_file))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::require_viewer,
        ))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }));
    if access == ViewerAccess::Token {
        app = app
            .route("/login", get(access::login_form).post(access::login))
            .route("/logout", post(access::logout));
    }
    app.fallback(not_found).with_state(state)
}

/// Bind `addr` and serve until Ctrl-C. `on_listening` is called once with the bound address (the
/// real port when `addr` has port 0) before the first request is accepted.
///
/// # Errors
/// [`Error::Bind`] when the address cannot be bound; [`Error::Serve`] when serving fails.
pub async fn serve(
    addr: SocketAddr,
    config: ServeConfig,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })?;
    on_listening(bound);
    axum::serve(listener, router(config))
        .with_graceful_shutdown(async {
            // If the signal handler cannot be installed, serve until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await
        .map_err(|source| Error::Serve {
            addr: bound,
            source,
        })
}

/// How pages name the ledger: its path on an open (loopback) viewer; nothing about the server's
/// storage to token holders on a network.
fn ledger_shown(state: &ServeConfig) -> &str {
    match state.access {
        ViewerAccess::Open => state.ledger.path(),
        ViewerAccess::Token | ViewerAccess::Off => "(the server's ledger)",
    }
}

fn ledger_error(state: &ServeConfig, e: &crate::Error) -> Response {
    tracing::error!(error = %e, "viewer: ledger read failed");
    let detail = match state.access {
        ViewerAccess::Open => e.to_string(),
        ViewerAccess::Token | ViewerAccess::Off => "see the server's log".to_string(),
    };
    html_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "ledger error",
        &format!(
            "Cannot read the ledger <code>{}</code>: {}",
            escape_html(ledger_shown(state)),
            escape_html(&detail)
        ),
    )
}

/// Look up a job the request's `scope` may see; a 404 page for an unknown id and for another
/// team's job alike, 500 for a database failure.
async fn find_job(
    state: &ServeConfig,
    scope: &Scope,
    id: &str,
) -> Result<crate::ledger::JobRow, Response> {
    let not_found = || {
        html_error(
            StatusCode::NOT_FOUND,
            "no such job",
            &format!(
                "Job <code>{}</code> is not in the ledger <code>{}</code>. \
                 The <a href=\"/\">job list</a> shows the recorded jobs.",
                escape_html(&crate::api::error::quoted(id)),
                escape_html(ledger_shown(state))
            ),
        )
    };
    // No job id holds a control character, and PostgreSQL cannot compare text with a NUL byte
    // (`/jobs/x%00` would be a 500 quoting the database).
    if id.chars().any(char::is_control) {
        return Err(not_found());
    }
    if let Scope::Team(team) = scope {
        match Queue::with_db(state.ledger.db().clone())
            .job(id, Some(team))
            .await
        {
            Ok(_) => {}
            Err(crate::Error::NotInQueue { .. }) => return Err(not_found()),
            Err(e) => return Err(ledger_error(state, &e)),
        }
    }
    match state.ledger.job(id).await {
        Ok(j) => Ok(j),
        Err(crate::Error::NoSuchJob { .. }) => Err(not_found()),
        Err(e) => Err(ledger_error(state, &e)),
    }
}

/// The ledger's jobs that `scope` may see, newest first. A team sees the jobs it queued (by id);
/// jobs with no queue row (`kiln run`, team `local`) only [`Scope::All`] sees.
async fn visible_jobs(
    state: &ServeConfig,
    scope: &Scope,
) -> crate::Result<Vec<crate::ledger::JobRow>> {
    let jobs = state.ledger.jobs().await?;
    let Scope::Team(team) = scope else {
        return Ok(jobs);
    };
    let queued: std::collections::HashSet<String> = Queue::with_db(state.ledger.db().clone())
        .jobs(Some(team), None, i64::MAX)
        .await?
        .into_iter()
        .map(|j| j.id)
        .collect();
    Ok(jobs
        .into_iter()
        .filter(|j| queued.contains(&j.id))
        .collect())
}

async fn index(State(state): State<AppState>, Extension(scope): Extension<Scope>) -> Response {
    match visible_jobs(&state, &scope).await {
        Ok(jobs) => {
            let rows: Vec<_> = jobs
                .into_iter()
                .map(|j| {
                    let loc = resolve_output(&j.output, &state.relative_base);
                    (j, loc)
                })
                .collect();
            let team = match &scope {
                Scope::All => None,
                Scope::Team(t) => Some(t.as_str()),
            };
            Html(pages::index_page(&rows, ledger_shown(&state), team)).into_response()
        }
        Err(e) => ledger_error(&state, &e),
    }
}

async fn job(
    State(state): State<AppState>,
    Extension(scope): Extension<Scope>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    let job = match find_job(&state, &scope, &id).await {
        Ok(j) => j,
        Err(r) => return r,
    };
    let loc = resolve_output(&job.output, &state.relative_base);
    let is_file = |p: std::path::PathBuf| async move {
        tokio::fs::metadata(p).await.is_ok_and(|m| m.is_file())
    };
    let (has_tileset, has_report, has_cameras) = match &loc {
        OutputLocation::Local { dir, .. } => (
            is_file(dir.join("tileset.json")).await,
            is_file(dir.join("report/index.html")).await,
            is_file(dir.join(kiln_pipeline::stages::eval::CAMERAS_JSON)).await,
        ),
        _ => (false, false, false),
    };
    let cesium = state.cesium.state();
    let html = pages::job_page(&JobPageInput {
        job: &job,
        output: &loc,
        has_tileset,
        has_report,
        has_cameras,
        cesium: &cesium,
    });
    Html(html).into_response()
}

async fn job_file(
    State(state): State<AppState>,
    Extension(scope): Extension<Scope>,
    UrlPath((id, path)): UrlPath<(String, String)>,
    req: Request,
) -> Response {
    let job = match find_job(&state, &scope, &id).await {
        Ok(j) => j,
        Err(r) => return r,
    };
    match resolve_output(&job.output, &state.relative_base) {
        OutputLocation::Local { dir, .. } => {
            let what = format!("the output of job `{id}` ({})", dir.display());
            serve_under(&dir, &path, &what, req).await
        }
        OutputLocation::Remote { url } => html_error(
            StatusCode::NOT_FOUND,
            "remote output",
            &format!(
                "Job <code>{}</code> wrote its output to <code>{}</code>, which is remote; \
                 kiln serve serves local outputs only. Copy it to a local folder to view it.",
                escape_html(&id),
                escape_html(&url)
            ),
        ),
        OutputLocation::Unsupported { recorded, reason } => html_error(
            StatusCode::NOT_FOUND,
            "output cannot be served",
            &format!(
                "Job <code>{}</code> has output <code>{}</code>: {}.",
                escape_html(&id),
                escape_html(&recorded),
                escape_html(reason)
            ),
        ),
    }
}

async fn cesium_file(
    State(state): State<AppState>,
    UrlPath(path): UrlPath<String>,
    req: Request,
) -> Response {
    match &state.cesium {
        CesiumDir::Found(dir) => serve_under(dir, &path, "the CesiumJS build", req).await,
        other => html_error(
            StatusCode::NOT_FOUND,
            "CesiumJS not installed",
            &pages::cesium_install_html(&other.state()),
        ),
    }
}

async fn not_found(req: Request) -> Response {
    let mut r = html_error(
        StatusCode::NOT_FOUND,
        "not found",
        &format!(
            "Nothing at <code>{}</code>. Pages: <a href=\"/\">/</a> (jobs), \
             <code>/jobs/ID</code> (viewer), <code>/jobs/ID/files/PATH</code> (output files).",
            escape_html(req.uri().path())
        ),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use axum::http::Request as HttpRequest;
    use tower::ServiceExt;

    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        config: ServeConfig,
    }

    /// A ledger with a local job (`local-1`, output with tileset/GLB/PNG/SVG/report), a relative
    /// job, a remote job, and a fake CesiumJS build.
    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let out = root.join("out/avo");
        std::fs::create_dir_all(out.join("tiles")).unwrap();
        std::fs::create_dir_all(out.join("report")).unwrap();
        std::fs::write(out.join("tileset.json"), br#"{"asset":{"version":"1.1"}}"#).unwrap();
        std::fs::write(out.join("tiles/0.glb"), b"glTF....").unwrap();
        std::fs::write(out.join("report/index.html"), b"<html></html>").unwrap();
        std::fs::write(out.join("report/a.png"), b"\x89PNG").unwrap();
        std::fs::write(out.join("report/loss.svg"), b"<svg/>").unwrap();
        std::fs::write(root.join("secret.txt"), b"secret").unwrap();
        let cesium = root.join("cesium");
        std::fs::create_dir_all(cesium.join("Widgets")).unwrap();
        std::fs::write(cesium.join("Cesium.js"), b"var Cesium={};").unwrap();
        std::fs::write(cesium.join("Widgets/widgets.css"), b"body{}").unwrap();

        let ledger = Ledger::open(&root.join("ledger.sqlite")).await.unwrap();
        let abs = out.display().to_string();
        ledger
            .start_job("local-1", "avo", "mesh", "in", &abs, "{}")
            .await
            .unwrap();
        ledger
            .start_job("rel-1", "avo", "mesh", "in", "out/avo", "{}")
            .await
            .unwrap();
        ledger
            .start_job("url-1", "avo", "mesh", "in", &format!("file://{abs}"), "{}")
            .await
            .unwrap();
        ledger
            .start_job("s3-1", "avo", "mesh", "in", "s3://bucket/avo", "{}")
            .await
            .unwrap();
        let config = ServeConfig {
            ledger,
            cesium: CesiumDir::resolve(Some(&cesium)),
            relative_base: root.clone(),
            access: ViewerAccess::Open,
        };
        Fixture {
            _dir: dir,
            root,
            config,
        }
    }

    async fn get(config: &ServeConfig, uri: &str) -> (StatusCode, String, String) {
        send(config, HttpRequest::get(uri).body(Body::empty()).unwrap()).await
    }

    async fn send(config: &ServeConfig, req: HttpRequest<Body>) -> (StatusCode, String, String) {
        let resp = router(config.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let ctype = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, ctype, String::from_utf8_lossy(&body).into_owned())
    }

    use axum::body::Body;

    #[tokio::test]
    async fn index_lists_every_job_with_a_link() {
        let f = fixture().await;
        let (s, ct, body) = get(&f.config, "/").await;
        assert_eq!(s, StatusCode::OK);
        assert!(ct.starts_with("text/html"), "{ct}");
        for id in ["local-1", "rel-1", "url-1", "s3-1"] {
            assert!(
                body.contains(&format!("href=\"/jobs/{id}\"")),
                "{id}: {body}"
            );
        }
        assert!(body.contains("remote: kiln serve shows local outputs only"));
    }

    #[tokio::test]
    async fn job_page_embeds_viewer_and_report_for_local_outputs() {
        let f = fixture().await;
        for id in ["local-1", "rel-1", "url-1"] {
            let (s, _, body) = get(&f.config, &format!("/jobs/{id}")).await;
            assert_eq!(s, StatusCode::OK);
            assert!(body.contains("/cesium/Cesium.js"), "{id}: {body}");
            assert!(
                body.contains(&format!("src=\"/jobs/{id}/files/report/index.html\"")),
                "{id}"
            );
        }
    }

    #[tokio::test]
    async fn job_page_for_s3_output_says_remote() {
        let f = fixture().await;
        let (s, _, body) = get(&f.config, "/jobs/s3-1").await;
        assert_eq!(s, StatusCode::OK);
        assert!(body.contains("output is remote"), "{body}");
        let (s, _, body) = get(&f.config, "/jobs/s3-1/files/tileset.json").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("remote"), "{body}");
    }

    #[tokio::test]
    async fn unknown_job_is_404_naming_the_ledger() {
        let f = fixture().await;
        let (s, _, body) = get(&f.config, "/jobs/nope").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(
            body.contains("nope") && body.contains("ledger.sqlite"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn output_files_have_their_content_types() {
        let f = fixture().await;
        for (path, want) in [
            ("tileset.json", "application/json"),
            ("tiles/0.glb", "model/gltf-binary"),
            ("report/index.html", "text/html"),
            ("report/a.png", "image/png"),
            ("report/loss.svg", "image/svg+xml"),
        ] {
            let (s, ct, _) = get(&f.config, &format!("/jobs/local-1/files/{path}")).await;
            assert_eq!(s, StatusCode::OK, "{path}");
            assert!(ct.starts_with(want), "{path}: {ct}");
        }
    }

    #[tokio::test]
    async fn missing_output_file_is_404_with_the_path() {
        let f = fixture().await;
        let (s, ct, body) = get(&f.config, "/jobs/local-1/files/tiles/9.glb").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(ct.starts_with("text/html"));
        assert!(body.contains("tiles/9.glb"), "{body}");
        let (s, _, body) = get(&f.config, "/jobs/local-1/files/tiles").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("folder"), "{body}");
    }

    #[tokio::test]
    async fn parent_dir_paths_cannot_leave_the_output() {
        let f = fixture().await;
        // Encoded `..` and `/` reach the handler decoded; both must be refused.
        for uri in [
            "/jobs/local-1/files/%2E%2E/%2E%2E/secret.txt",
            "/jobs/local-1/files/tiles/%2E%2E/%2E%2E/%2E%2E/secret.txt",
            "/jobs/local-1/files/%2Fetc%2Fpasswd",
            "/jobs/local-1/files/..%5C..%5Csecret.txt",
        ] {
            let (s, _, body) = get(&f.config, uri).await;
            assert!(
                s == StatusCode::BAD_REQUEST || s == StatusCode::NOT_FOUND,
                "{uri}: {s}"
            );
            assert!(
                !body.contains("secret\n") && body != "secret",
                "{uri} leaked"
            );
        }
        assert!(f.root.join("secret.txt").exists());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlinks_out_of_the_output_are_not_followed() {
        let f = fixture().await;
        std::os::unix::fs::symlink(f.root.join("secret.txt"), f.root.join("out/avo/link.txt"))
            .unwrap();
        let (s, _, body) = get(&f.config, "/jobs/local-1/files/link.txt").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(
            !body.contains("secret") || body.contains("outside"),
            "{body}"
        );
    }

    #[tokio::test]
    async fn cesium_build_is_served_when_configured() {
        let f = fixture().await;
        let (s, ct, body) = get(&f.config, "/cesium/Cesium.js").await;
        assert_eq!(s, StatusCode::OK);
        assert!(ct.contains("javascript"), "{ct}");
        assert_eq!(body, "var Cesium={};");
        let (s, ct, _) = get(&f.config, "/cesium/Widgets/widgets.css").await;
        assert_eq!(s, StatusCode::OK);
        assert!(ct.starts_with("text/css"), "{ct}");
    }

    #[tokio::test]
    async fn without_cesium_the_page_and_route_say_how_to_install_it() {
        let f = fixture().await;
        let config = ServeConfig {
            cesium: CesiumDir::resolve(None),
            ..f.config.clone()
        };
        let (s, _, body) = get(&config, "/cesium/Cesium.js").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("npm i cesium@1.145.0"), "{body}");
        let (_, _, body) = get(&config, "/jobs/local-1").await;
        assert!(body.contains("npm i cesium@1.145.0"), "{body}");
        assert!(!body.contains("src=\"/cesium/Cesium.js\""));
        let missing = CesiumDir::resolve(Some(&f.root.join("nope")));
        assert!(matches!(missing, CesiumDir::Missing(_)));
    }

    #[test]
    fn cesium_dir_accepts_package_and_project_folders() {
        let d = tempfile::tempdir().unwrap();
        let build = d.path().join("node_modules/cesium/Build/Cesium");
        std::fs::create_dir_all(&build).unwrap();
        std::fs::write(build.join("Cesium.js"), b"").unwrap();
        for given in [
            build.clone(),
            d.path().join("node_modules/cesium"),
            d.path().to_path_buf(),
        ] {
            assert_eq!(
                CesiumDir::resolve(Some(&given)),
                CesiumDir::Found(build.clone())
            );
        }
    }

    #[tokio::test]
    async fn unknown_routes_are_404_with_a_hint() {
        let f = fixture().await;
        let (s, _, body) = get(&f.config, "/nothing/here").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("/jobs/ID"), "{body}");
    }

    #[tokio::test]
    async fn serve_binds_port_zero_and_reports_the_real_port() {
        let f = fixture().await;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let config = f.config.clone();
        let task = tokio::spawn(async move {
            serve("127.0.0.1:0".parse().unwrap(), config, move |a| {
                let _ = tx.send(a);
            })
            .await
        });
        let addr = rx.await.unwrap();
        assert_ne!(addr.port(), 0);
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("local-1"));
        task.abort();
    }

    /// The fixture in token mode: `local-1` and `rel-1` queued by team `art`, `s3-1` by team
    /// `geo`, `url-1` recorded by `kiln run` (no team); a token for each team and one for a team
    /// literally named `local`.
    async fn token_fixture() -> (Fixture, String, String, String) {
        let mut f = fixture().await;
        f.config.access = ViewerAccess::Token;
        let db = f.config.ledger.db().clone();
        let queue = Queue::with_db(db.clone());
        for (id, team) in [("local-1", "art"), ("rel-1", "art"), ("s3-1", "geo")] {
            queue
                .submit(&crate::queue::NewJob {
                    id: id.into(),
                    team: team.into(),
                    name: "avo".into(),
                    kind: "mesh".into(),
                    input: "in".into(),
                    output: "out".into(),
                    spec: String::new(),
                    priority: 0,
                    max_attempts: 3,
                    budget_usd: None,
                    stages: vec![("ingest".into(), false)],
                })
                .await
                .unwrap();
        }
        let art = crate::api::token::create(&db, "art", None)
            .await
            .unwrap()
            .token;
        let geo = crate::api::token::create(&db, "geo", None)
            .await
            .unwrap()
            .token;
        let local = crate::api::token::create(&db, "local", None)
            .await
            .unwrap()
            .token;
        (f, art, geo, local)
    }

    fn with_token(uri: &str, token: &str) -> HttpRequest<Body> {
        HttpRequest::get(uri)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap()
    }

    #[tokio::test]
    async fn token_viewer_refuses_every_page_and_file_without_a_valid_token() {
        let (f, art, ..) = token_fixture().await;
        let resp = router(f.config.clone())
            .oneshot(HttpRequest::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        assert_eq!(resp.headers()[header::LOCATION], "/login");
        for uri in [
            "/jobs/local-1",
            "/jobs/local-1/files/tileset.json",
            "/jobs/local-1/files/report/index.html",
            "/cesium/Cesium.js",
        ] {
            let (s, _, body) = get(&f.config, uri).await;
            assert_eq!(s, StatusCode::UNAUTHORIZED, "{uri}");
            assert!(
                body.contains("/login") && !body.contains("1.1"),
                "{uri}: {body}"
            );
        }
        let fake = format!("kiln_{}", "0".repeat(64));
        let (s, ..) = send(&f.config, with_token("/jobs/local-1", &fake)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        crate::api::token::revoke(f.config.ledger.db(), &crate::api::token::hash(&art)[..10])
            .await
            .unwrap();
        let (s, ..) = send(&f.config, with_token("/jobs/local-1", &art)).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn token_viewer_shows_only_the_teams_jobs_and_never_teamless_ones() {
        let (f, art, geo, local) = token_fixture().await;
        let (s, _, body) = send(&f.config, with_token("/", &art)).await;
        assert_eq!(s, StatusCode::OK);
        assert!(
            body.contains("/jobs/local-1") && body.contains("/jobs/rel-1"),
            "{body}"
        );
        assert!(
            !body.contains("/jobs/s3-1") && !body.contains("/jobs/url-1"),
            "{body}"
        );
        assert!(
            !body.contains("ledger.sqlite"),
            "the ledger path leaks: {body}"
        );
        let (s, _, body) = send(
            &f.config,
            with_token("/jobs/local-1/files/tileset.json", &art),
        )
        .await;
        assert_eq!(
            (s, body.as_str()),
            (StatusCode::OK, r#"{"asset":{"version":"1.1"}}"#)
        );
        // Another team's job, and a team-less `kiln run` job, answer like a missing one.
        let (_, _, missing) = send(&f.config, with_token("/jobs/nope", &geo)).await;
        for (uri, token) in [
            ("/jobs/local-1", &geo),
            ("/jobs/local-1/files/tileset.json", &geo),
            ("/jobs/url-1", &art),
            ("/jobs/url-1", &local),
            ("/jobs/url-1/files/tileset.json", &local),
        ] {
            let (s, _, body) = send(&f.config, with_token(uri, token)).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{uri}");
            let id = uri.split('/').nth(2).unwrap();
            if !uri.contains("/files/") {
                assert_eq!(body.replace(id, "X"), missing.replace("nope", "X"), "{uri}");
            }
        }
        let (_, _, body) = send(&f.config, with_token("/", &local)).await;
        assert!(!body.contains("/jobs/url-1"), "{body}");
    }

    #[tokio::test]
    async fn login_sets_an_httponly_cookie_that_opens_the_pages() {
        let (f, art, ..) = token_fixture().await;
        let (s, _, body) = get(&f.config, "/login").await;
        assert_eq!(s, StatusCode::OK);
        assert!(body.contains("method=\"post\""), "{body}");
        let login = |form: String, proto: Option<&str>| {
            let mut r = HttpRequest::post("/login")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
            if let Some(p) = proto {
                r = r.header("x-forwarded-proto", p);
            }
            r.body(Body::from(form)).unwrap()
        };
        let resp = router(f.config.clone())
            .oneshot(login("token=kiln_nope".into(), None))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(resp.headers().get(header::SET_COOKIE).is_none());
        let resp = router(f.config.clone())
            .oneshot(login(format!("token={art}"), Some("https")))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SEE_OTHER);
        let cookie = resp.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_string();
        for attr in [
            "HttpOnly",
            "SameSite=Lax",
            "Path=/",
            "Secure",
            "Max-Age=28800",
        ] {
            assert!(cookie.contains(attr), "{attr}: {cookie}");
        }
        let pair = cookie.split(';').next().unwrap().to_string();
        let req = HttpRequest::get("/jobs/local-1/files/report/index.html")
            .header(header::COOKIE, format!("other=1; {pair}"))
            .body(Body::empty())
            .unwrap();
        let resp = router(f.config.clone()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "private, no-cache");
        let resp = router(f.config.clone())
            .oneshot(login(format!("token={art}"), None))
            .await
            .unwrap();
        let cookie = resp.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(!cookie.contains("Secure"), "{cookie}");
        let resp = router(f.config.clone())
            .oneshot(HttpRequest::post("/logout").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert!(
            resp.headers()[header::SET_COOKIE]
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }

    #[tokio::test]
    async fn an_off_viewer_serves_no_page_or_file() {
        let f = fixture().await;
        let config = ServeConfig {
            access: ViewerAccess::Off,
            ..f.config.clone()
        };
        for uri in [
            "/",
            "/jobs/local-1",
            "/jobs/local-1/files/tileset.json",
            "/cesium/Cesium.js",
            "/login",
        ] {
            let (s, _, body) = get(&config, uri).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{uri}");
            assert!(
                body.contains("--viewer") && !body.contains("local-1"),
                "{uri}: {body}"
            );
        }
    }

    #[tokio::test]
    async fn the_open_viewer_has_no_login_route() {
        let f = fixture().await;
        let (s, ..) = get(&f.config, "/login").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}
