//! Who may see the viewer pages and the output files of `kiln serve`.
//!
//! The viewer was built for looking at one's own jobs on one's own machine, and lists and serves
//! every job in the ledger. That is only safe where nobody else can connect, so the access mode
//! follows the listen address ([`ViewerAccess::resolve`]):
//!
//! - loopback (`127.0.0.1`, `::1`), by default: [`ViewerAccess::Open`] — no authentication, every
//!   job, including those `kiln run` recorded without a team (shown as team `local`);
//! - any other address, by default: [`ViewerAccess::Off`] — the viewer routes are not served at
//!   all (every viewer path answers 404 saying how to turn them on), the API is unaffected;
//! - `--viewer` (= `--viewer token`), any address: [`ViewerAccess::Token`] — every viewer route
//!   needs a team token from `kiln token create`, and shows only that team's queued jobs (never
//!   the team-less `kiln run` jobs, which stay visible on loopback only). Scripts send
//!   `Authorization: Bearer kiln_…`; browsers sign in once at `/login` (a form that POSTs the
//!   token, so it never appears in a URL, a proxy log or the browser history) and get it back as
//!   an `HttpOnly; SameSite=Lax` cookie ([`COOKIE_NAME`], [`COOKIE_MAX_AGE_S`]; `Secure` when
//!   the request came through a TLS proxy that sets `X-Forwarded-Proto: https`). A token is
//!   checked against the database on every request, so `kiln token revoke` takes effect at once.
//!   Another team's job answers 404 exactly like a missing one.
//! - `--viewer open` is refused on a non-loopback address.
//!
//! The cookie is accepted by the viewer routes only, never by `/api/v1` (which takes the header
//! only), so a page cannot make a browser act on the API with its cookie.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::files::html_error;
use super::pages::{escape_html, message_page};
use super::{AppState, Error};
use crate::api::token;

/// Name of the viewer's session cookie (it holds the team token itself; `HttpOnly`).
pub const COOKIE_NAME: &str = "kiln_viewer";

/// Lifetime of the viewer cookie, seconds: one working day (8 h), so a browser left signed in on
/// a shared machine does not stay so for long; revoking the token ends it sooner.
pub const COOKIE_MAX_AGE_S: u64 = 8 * 3600;

/// Largest `/login` form body, bytes (a token is 69 bytes; the rest is headroom).
const LOGIN_BODY_LIMIT_BYTES: usize = 4096;

/// Who may see the viewer pages and the output files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewerAccess {
    /// No authentication; every job in the ledger. Only allowed on a loopback address.
    Open,
    /// A team token (Bearer header or the `/login` cookie); only that team's jobs.
    Token,
    /// The viewer routes are not served.
    Off,
}

impl ViewerAccess {
    /// The access mode for a server listening on `listen`, given what the user asked for
    /// (`None` = `--viewer` not given): `None` is [`ViewerAccess::Open`] on a loopback address
    /// and [`ViewerAccess::Off`] elsewhere; an explicit mode is kept.
    ///
    /// # Errors
    /// [`Error::OpenViewerOnNetwork`] for [`ViewerAccess::Open`] on a non-loopback address.
    pub fn resolve(
        listen: SocketAddr,
        requested: Option<ViewerAccess>,
    ) -> Result<ViewerAccess, Error> {
        let loopback = listen.ip().to_canonical().is_loopback();
        match (requested, loopback) {
            (None, true) => Ok(ViewerAccess::Open),
            (None, false) => Ok(ViewerAccess::Off),
            (Some(ViewerAccess::Open), false) => Err(Error::OpenViewerOnNetwork { addr: listen }),
            (Some(mode), _) => Ok(mode),
        }
    }
}

/// Which jobs a viewer request may see (a request extension set by [`require_viewer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every job ([`ViewerAccess::Open`]).
    All,
    /// Only the queued jobs of this team ([`ViewerAccess::Token`]).
    Team(String),
}

/// The token a request presents to the viewer: `Authorization: Bearer …` first, then the
/// [`COOKIE_NAME`] cookie. `None` when neither is there.
fn presented_token(headers: &HeaderMap) -> Option<String> {
    if let Some(v) = headers.get(header::AUTHORIZATION)
        && let Ok(v) = v.to_str()
        && let Ok(t) = crate::api::auth::bearer(v)
    {
        return Some(t.to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.trim().to_string())
}

/// The active team of `presented`, or `None` (malformed, unknown or revoked).
async fn team_of(state: &AppState, presented: &str) -> Result<Option<String>, Response> {
    let Ok(hash) = token::parse(presented) else {
        return Ok(None);
    };
    token::team_for(state.ledger.db(), &hash)
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "viewer token check failed");
            html_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server error",
                "The token could not be checked (database error); try again.",
            )
        })
}

/// Middleware of every viewer route but `/login`: sets the request's [`Scope`], or answers 401
/// (a browser asking for `/` is sent to `/login` instead). In [`ViewerAccess::Token`] mode the
/// answers are marked `Cache-Control: private, no-cache` so shared caches never keep them.
pub(crate) async fn require_viewer(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    match state.access {
        ViewerAccess::Open => {
            req.extensions_mut().insert(Scope::All);
            return next.run(req).await;
        }
        // The Off router has no routes behind this middleware; answer as its fallback does.
        ViewerAccess::Off => return viewer_off().await,
        ViewerAccess::Token => {}
    }
    let team = match presented_token(req.headers()) {
        Some(t) => match team_of(&state, &t).await {
            Ok(team) => team,
            Err(r) => return r,
        },
        None => None,
    };
    let Some(team) = team else {
        if req.method() == Method::GET && req.uri().path() == "/" {
            return Redirect::to("/login").into_response();
        }
        let mut r = html_error(
            StatusCode::UNAUTHORIZED,
            "sign in",
            "This page needs a team token: <a href=\"/login\">sign in</a> with one from \
             <code>kiln token create</code>, or send <code>Authorization: Bearer kiln_…</code>.",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    };
    req.extensions_mut().insert(Scope::Team(team));
    let mut res = next.run(req).await;
    res.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    res.headers_mut().insert(
        header::VARY,
        HeaderValue::from_static("Cookie, Authorization"),
    );
    res
}

fn login_page(status: StatusCode, problem: Option<&str>) -> Response {
    let problem = problem
        .map(|p| format!("<p><strong>{}</strong></p>", escape_html(p)))
        .unwrap_or_default();
    let form = format!(
        "{problem}<form method=\"post\" action=\"/login\">\
         <p>Paste a team token from <code>kiln token create --team NAME</code>. The viewer then \
         shows only that team's jobs.</p>\
         <input type=\"password\" name=\"token\" size=\"72\" autocomplete=\"off\" \
         placeholder=\"kiln_…\" autofocus> <button type=\"submit\">Sign in</button></form>"
    );
    let mut r = (status, Html(message_page("sign in", &form))).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `GET /login`: the sign-in form.
pub(crate) async fn login_form() -> Response {
    login_page(StatusCode::OK, None)
}

/// The `token` field of an `application/x-www-form-urlencoded` body (`+` is a space, `%XX` a byte).
fn form_token(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let raw = text
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")?
        .1;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8(out).ok()?.trim().to_string())
}

/// `POST /login` (form field `token`): on a valid token, set the [`COOKIE_NAME`] cookie and send
/// the browser to `/`; otherwise 401 with the form again.
pub(crate) async fn login(State(state): State<AppState>, req: Request) -> Response {
    let secure = req
        .headers()
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"));
    let Ok(body) = axum::body::to_bytes(req.into_body(), LOGIN_BODY_LIMIT_BYTES).await else {
        return login_page(StatusCode::BAD_REQUEST, Some("The form is too large."));
    };
    let Some(presented) = form_token(&body).filter(|t| !t.is_empty()) else {
        return login_page(StatusCode::BAD_REQUEST, Some("No token was given."));
    };
    let team = match team_of(&state, &presented).await {
        Ok(Some(team)) => team,
        Ok(None) => {
            return login_page(
                StatusCode::UNAUTHORIZED,
                Some("That token is malformed, unknown or revoked."),
            );
        }
        Err(r) => return r,
    };
    tracing::info!(%team, "viewer sign-in");
    // `presented` passed `token::parse`: `kiln_` and hex digits only, safe in a cookie value.
    let cookie = format!(
        "{COOKIE_NAME}={presented}; Path=/; HttpOnly; SameSite=Lax; Max-Age={COOKIE_MAX_AGE_S}{}",
        if secure { "; Secure" } else { "" }
    );
    let mut r = Redirect::to("/").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /logout`: clear the cookie and go back to the sign-in form.
pub(crate) async fn logout() -> Response {
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("kiln_viewer=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"),
    );
    r
}

/// Every path of a server whose viewer is [`ViewerAccess::Off`] (outside `/api/v1`, `/metrics`
/// and `/healthz`): 404 saying why and how to turn the viewer on.
pub(crate) async fn viewer_off() -> Response {
    let mut r = html_error(
        StatusCode::NOT_FOUND,
        "viewer off",
        "The viewer pages are off: this server listens on a non-loopback address. Restart \
         <code>kiln serve</code> with <code>--viewer</code> to serve them to holders of a team \
         token (see <code>kiln serve --help</code>). The API is at <code>/api/v1</code>.",
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_defaults_to_open_and_other_addresses_to_off() {
        for a in ["127.0.0.1:8080", "[::1]:8080", "[::ffff:127.0.0.1]:80"] {
            assert_eq!(
                ViewerAccess::resolve(addr(a), None).unwrap(),
                ViewerAccess::Open,
                "{a}"
            );
        }
        for a in ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:80"] {
            assert_eq!(
                ViewerAccess::resolve(addr(a), None).unwrap(),
                ViewerAccess::Off,
                "{a}"
            );
        }
    }

    #[test]
    fn an_open_viewer_is_refused_on_a_network_address() {
        let e = ViewerAccess::resolve(addr("0.0.0.0:8080"), Some(ViewerAccess::Open)).unwrap_err();
        assert!(e.to_string().contains("--viewer"), "{e}");
        assert_eq!(
            ViewerAccess::resolve(addr("0.0.0.0:8080"), Some(ViewerAccess::Token)).unwrap(),
            ViewerAccess::Token
        );
        assert_eq!(
            ViewerAccess::resolve(addr("127.0.0.1:1"), Some(ViewerAccess::Token)).unwrap(),
            ViewerAccess::Token
        );
    }

    #[test]
    fn the_header_wins_over_the_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; kiln_viewer=kiln_c"),
        );
        assert_eq!(presented_token(&h).as_deref(), Some("kiln_c"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer kiln_h"),
        );
        assert_eq!(presented_token(&h).as_deref(), Some("kiln_h"));
    }

    #[test]
    fn form_token_decodes_the_field() {
        assert_eq!(form_token(b"token=kiln_ab").as_deref(), Some("kiln_ab"));
        assert_eq!(
            form_token(b"x=1&token=%20kiln_ab+").as_deref(),
            Some("kiln_ab")
        );
        assert_eq!(form_token(b"token=%zz"), None);
        assert_eq!(form_token(b"nothing=1"), None);
    }
}
