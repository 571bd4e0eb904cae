//! Router-level tests of the API on a temporary SQLite queue: authentication, team isolation,
//! error statuses and bodies, and that every documented route is routed.

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

use super::*;
use crate::db::Db;
use crate::queue::NewJob;

struct Fixture {
    _dir: tempfile::TempDir,
    app: Router,
    queue: Queue,
    art: String,
    geo: String,
}

async fn fixture(max_body_bytes: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("q.sqlite")).await.unwrap();
    let art = token::create(&db, "art", None).await.unwrap().token;
    let geo = token::create(&db, "geo", Some("second team"))
        .await
        .unwrap()
        .token;
    let queue = Queue::with_db(db.clone());
    let app = router(ApiConfig {
        queue: queue.clone(),
        ledger: Ledger::with_db(db),
        max_body_bytes,
        relative_base: dir.path().to_path_buf(),
    });
    Fixture {
        _dir: dir,
        app,
        queue,
        art,
        geo,
    }
}

fn new_job(id: &str, team: &str) -> NewJob {
    NewJob {
        id: id.into(),
        team: team.into(),
        name: "n".into(),
        kind: "mesh".into(),
        input: "/in".into(),
        output: "/nonexistent/out".into(),
        spec: String::new(),
        priority: 0,
        max_attempts: 3,
        budget_usd: None,
        stages: vec![("ingest".into(), false)],
    }
}

async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(c) = content_type {
        req = req.header(header::CONTENT_TYPE, c);
    }
    let res = app
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, headers, json)
}

#[tokio::test]
async fn requests_without_a_valid_token_are_401_with_www_authenticate() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    let revoked = f.art.clone();
    let fake = format!("kiln_{}", "0".repeat(64));
    for token in [None, Some("nonsense"), Some(fake.as_str())] {
        let (status, headers, body) =
            call(&f.app, "GET", "/api/v1/jobs", token, None, vec![]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
        assert!(body["error"].is_string(), "{body}");
    }
    token::revoke(f.queue.db(), &token::hash(&revoked)[..10])
        .await
        .unwrap();
    let (status, ..) = call(&f.app, "GET", "/api/v1/jobs", Some(&revoked), None, vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn another_teams_job_is_404_like_a_missing_one() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j-art", "art")).await.unwrap();
    let (status, _, body) = call(
        &f.app,
        "GET",
        "/api/v1/jobs/j-art",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["job"]["team"], "art");
    assert_eq!(body["stages"][0]["stage"], "ingest");
    for uri in [
        "/api/v1/jobs/j-art",
        "/api/v1/jobs/j-art/outputs",
        "/api/v1/jobs/j-art/report",
        "/api/v1/jobs/j-art/events",
    ] {
        let (status, _, other) = call(&f.app, "GET", uri, Some(&f.geo), None, vec![]).await;
        let (_, _, missing) = call(
            &f.app,
            "GET",
            &uri.replace("j-art", "j-none"),
            Some(&f.geo),
            None,
            vec![],
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(
            other["error"].as_str().unwrap().replace("j-art", "X"),
            missing["error"].as_str().unwrap().replace("j-none", "X"),
            "{uri}"
        );
    }
    let (status, ..) = call(
        &f.app,
        "POST",
        "/api/v1/jobs/j-art/cancel",
        Some(&f.geo),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(f.queue.job("j-art", None).await.unwrap().state, "queued");
    let (_, _, list) = call(&f.app, "GET", "/api/v1/jobs", Some(&f.geo), None, vec![]).await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0);
    let (_, _, list) = call(
        &f.app,
        "GET",
        "/api/v1/jobs?state=queued&limit=5",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn cancel_of_an_own_queued_job_cancels_it() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs/j1/cancel",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "cancelled");
    assert_eq!(body["state"], "cancelled");
}

#[tokio::test]
async fn a_job_with_no_stage_run_has_no_report_yet() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    let (status, _, body) = call(
        &f.app,
        "GET",
        "/api/v1/jobs/j1/report",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["error"].as_str().unwrap().contains("no stage has run"),
        "{body}"
    );
}

#[tokio::test]
async fn outputs_say_why_there_is_no_manifest() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    let (status, _, body) = call(
        &f.app,
        "GET",
        "/api/v1/jobs/j1/outputs",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["location"], "local");
    assert!(body["manifest"].is_null());
    assert!(
        body["note"].as_str().unwrap().contains("manifest.json"),
        "{body}"
    );
}

#[tokio::test]
async fn the_event_stream_of_a_finished_job_sends_its_events_and_ends() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    f.queue.cancel("j1", None).await.unwrap();
    let (status, headers, body) = call(
        &f.app,
        "GET",
        "/api/v1/jobs/j1/events",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = body.as_str().unwrap();
    assert!(
        text.contains("event: submitted") && text.contains("event: cancelled"),
        "{text}"
    );
}

#[tokio::test]
async fn submission_errors_are_json_with_the_right_status() {
    let f = fixture(64).await;
    let toml = Some("application/toml");
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        toml,
        b"name = \n".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("line 1"), "{body}");
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        toml,
        vec![b'#'; 65],
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        body["error"].as_str().unwrap().contains("64 bytes"),
        "{body}"
    );
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        Some("image/png"),
        vec![1],
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        Some("application/json"),
        br#"{"job": "x", "max_attempts": "3"}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("max_attempts"),
        "{body}"
    );
    let (status, _, body) = call(
        &f.app,
        "GET",
        "/api/v1/jobs?limit=lots",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _, body) =
        call(&f.app, "GET", "/api/v1/nowhere", Some(&f.art), None, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body["error"].is_string());
}

#[tokio::test]
async fn every_documented_route_is_routed() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    f.queue.cancel("j1", None).await.unwrap();
    for (method, path) in openapi::ROUTES {
        let uri = path.replace("{id}", "j1");
        let (_, _, body) = call(
            &f.app,
            &method.to_uppercase(),
            &uri,
            Some(&f.art),
            Some("application/json"),
            b"{}".to_vec(),
        )
        .await;
        let err = body["error"].as_str().unwrap_or_default();
        assert!(!err.starts_with("no route"), "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn metrics_and_healthz_need_no_token() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    f.queue.submit(&new_job("j1", "art")).await.unwrap();
    let (status, headers, body) = call(&f.app, "GET", "/metrics", None, None, vec![]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = body.as_str().unwrap();
    assert!(
        text.contains(r#"kiln_queue_depth{kind="jobs",state="queued"} 1"#),
        "{text}"
    );
    assert!(text.contains("kiln_gpu_seconds_total 0"), "{text}");
    let (status, ..) = call(&f.app, "GET", "/healthz", None, None, vec![]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, doc) = call(
        &f.app,
        "GET",
        "/api/v1/openapi.json",
        Some(&f.art),
        None,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["paths"]["/api/v1/jobs"].is_object());
}
