//! Router-level tests of the API: authentication, team isolation, error statuses and bodies, the
//! local-path policy, and that every documented route is routed. Most run on a temporary SQLite
//! database; the ones marked "every backend" also run on PostgreSQL when `KILN_TEST_POSTGRES_URL`
//! names a server (under `CI=true` its absence fails them instead of skipping), because the
//! token table, `/metrics` (its CAST) and the job routes' queries must work on both.

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

/// A temporary SQLite database, and a fresh PostgreSQL database when `KILN_TEST_POSTGRES_URL`
/// is set. The folder guard keeps the SQLite file alive.
async fn backends() -> Vec<(Db, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = vec![(
        Db::open_sqlite(&dir.path().join("q.sqlite")).await.unwrap(),
        dir,
    )];
    match std::env::var("KILN_TEST_POSTGRES_URL") {
        Ok(url) => out.push((fresh_postgres(&url).await, tempfile::tempdir().unwrap())),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI is set but KILN_TEST_POSTGRES_URL is not: .ci/run starts PostgreSQL")
        }
        Err(_) => eprintln!("KILN_TEST_POSTGRES_URL unset: API tests run on SQLite only"),
    }
    out
}

use crate::queue::tests::fresh_postgres_db as fresh_postgres;

async fn fixture_on(
    db: Db,
    dir: tempfile::TempDir,
    max_body_bytes: usize,
    local_paths: LocalPaths,
    tenants: Option<Tenants>,
) -> Fixture {
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
        local_paths,
        tenants,
    });
    Fixture {
        _dir: dir,
        app,
        queue,
        art,
        geo,
    }
}

/// One fixture per backend ([`backends`]).
async fn fixtures(local_paths: LocalPaths) -> Vec<Fixture> {
    let mut out = Vec::new();
    for (db, dir) in backends().await {
        out.push(fixture_on(db, dir, DEFAULT_MAX_BODY_BYTES, local_paths, None).await);
    }
    out
}

/// A fixture on SQLite only.
async fn fixture(max_body_bytes: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("q.sqlite")).await.unwrap();
    fixture_on(db, dir, max_body_bytes, LocalPaths::Refuse, None).await
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
    // Every backend.
    for f in fixtures(LocalPaths::Refuse).await {
        requests_without_a_valid_token_are_401_on(f).await;
    }
}

async fn requests_without_a_valid_token_are_401_on(f: Fixture) {
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
    // Every backend: `/metrics` sums with a CAST that each database must accept.
    for f in fixtures(LocalPaths::Refuse).await {
        metrics_and_healthz_need_no_token_on(f).await;
    }
}

async fn metrics_and_healthz_need_no_token_on(f: Fixture) {
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

/// A mesh job whose input and output are object-store URLs (mesh jobs list no input to plan).
const REMOTE_MESH_JOB: &str = "name = \"avocado\"\nkind = \"mesh\"\ninput = \"s3://bucket/avocado.glb\"\noutput = \"s3://bucket/out/avocado\"\n";

#[tokio::test]
async fn a_submitted_job_can_be_read_listed_and_cancelled() {
    // Every backend.
    for f in fixtures(LocalPaths::Refuse).await {
        let (status, headers, body) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some("application/toml"),
            REMOTE_MESH_JOB.as_bytes().to_vec(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(
            (&body["team"], &body["state"]),
            (&"art".into(), &"queued".into())
        );
        let id = body["id"].as_str().unwrap().to_string();
        assert_eq!(headers[header::LOCATION], format!("/api/v1/jobs/{id}"));
        let uri = format!("/api/v1/jobs/{id}");
        let (status, _, got) = call(&f.app, "GET", &uri, Some(&f.art), None, vec![]).await;
        assert_eq!(status, StatusCode::OK, "{got}");
        assert_eq!(got["job"]["output"], "s3://bucket/out/avocado");
        assert!(!got["stages"].as_array().unwrap().is_empty(), "{got}");
        let (_, _, list) = call(&f.app, "GET", "/api/v1/jobs", Some(&f.art), None, vec![]).await;
        assert_eq!(list["jobs"][0]["id"], id.as_str());
        let (status, ..) = call(&f.app, "GET", &uri, Some(&f.geo), None, vec![]).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _, cancelled) = call(
            &f.app,
            "POST",
            &format!("{uri}/cancel"),
            Some(&f.art),
            None,
            vec![],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{cancelled}");
        assert_eq!(cancelled["state"], "cancelled");
        let (_, _, got) = call(&f.app, "GET", &uri, Some(&f.art), None, vec![]).await;
        assert_eq!(got["job"]["state"], "cancelled");
    }
}

#[tokio::test]
async fn tokens_can_be_created_listed_and_revoked() {
    // Every backend: the `api_tokens` table of migration 0003.
    for (db, _dir) in backends().await {
        let a = token::create(&db, "art", Some("ci")).await.unwrap();
        let b = token::create(&db, "geo", None).await.unwrap();
        let listed = token::list(&db).await.unwrap();
        assert_eq!(listed.len(), 2);
        let a_row = listed.iter().find(|t| t.token_hash == a.hash).unwrap();
        assert_eq!(
            (a_row.team.as_str(), a_row.label.as_deref()),
            ("art", Some("ci"))
        );
        assert_eq!(a_row.revoked_at, None);
        assert_eq!(
            token::team_for(&db, &b.hash).await.unwrap().as_deref(),
            Some("geo")
        );
        let revoked = token::revoke(&db, &a.hash[..12]).await.unwrap();
        assert!(revoked.revoked_at.is_some());
        assert_eq!(token::team_for(&db, &a.hash).await.unwrap(), None);
        let listed = token::list(&db).await.unwrap();
        assert!(
            listed
                .iter()
                .any(|t| t.token_hash == a.hash && t.revoked_at.is_some())
        );
        assert!(matches!(
            token::revoke(&db, &a.hash[..12]).await,
            Err(token::TokenError::NoMatch { .. })
        ));
    }
}

#[tokio::test]
async fn metrics_count_usage_from_the_ledger() {
    // Every backend: SUM over `stage_attempts` and the CAST around it.
    for f in fixtures(LocalPaths::Refuse).await {
        let cfg = ApiConfig {
            queue: f.queue.clone(),
            ledger: Ledger::with_db(f.queue.db().clone()),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            relative_base: std::env::temp_dir(),
            local_paths: LocalPaths::Refuse,
            tenants: None,
        };
        let s = metrics::snapshot(&cfg).await.unwrap();
        assert_eq!((s.gpu_s, s.cpu_s, s.workers_alive), (0.0, 0.0, 0));
        f.queue.submit(&new_job("j1", "art")).await.unwrap();
        let s = metrics::snapshot(&cfg).await.unwrap();
        assert_eq!(s.jobs_by_state, vec![("queued".to_string(), 1)]);
        assert!(metrics::render(&s).contains(r#"kiln_jobs{state="queued"} 1"#));
    }
}

#[tokio::test]
async fn local_input_and_output_paths_are_refused_with_400_naming_the_fix() {
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    for (input, output, field) in [
        ("/etc/passwd", "s3://b/o", "`input`"),
        ("file:///etc/passwd", "s3://b/o", "`input`"),
        ("s3://b/i.glb", "/var/lib/kiln/out", "`output`"),
        ("s3://b/i.glb", "out/relative", "`output`"),
        ("s3://b/i.glb", "file:///tmp/out", "`output`"),
    ] {
        let job =
            format!("name = \"a\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"{output}\"\n");
        let (status, _, body) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some("application/toml"),
            job.into_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{input} {output}: {body}");
        let e = body["error"].as_str().unwrap();
        assert!(
            e.contains(field) && e.contains("s3://") && e.contains("--allow-local-paths"),
            "{e}"
        );
    }
    // The JSON `output` option replaces the job file's output, and is checked too.
    let body = serde_json::json!({"job": REMOTE_MESH_JOB, "output": "/tmp/x"}).to_string();
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        Some("application/json"),
        body.into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(f.queue.jobs(None, None, 10).await.unwrap().len(), 0);
}

#[tokio::test]
async fn allow_local_paths_accepts_a_local_output() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open_sqlite(&dir.path().join("q.sqlite")).await.unwrap();
    let f = fixture_on(db, dir, DEFAULT_MAX_BODY_BYTES, LocalPaths::Allow, None).await;
    let body = serde_json::json!({"job": REMOTE_MESH_JOB, "output": "out/a"}).to_string();
    let (status, _, body) = call(
        &f.app,
        "POST",
        "/api/v1/jobs",
        Some(&f.art),
        Some("application/json"),
        body.into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        body["output"].as_str().unwrap().ends_with("out/a"),
        "{body}"
    );
}

#[tokio::test]
async fn with_a_tenants_file_a_team_cannot_read_or_write_another_team_s_prefixes() {
    // Every backend.
    let tenants = Tenants::from_toml(
        "[team.art]\ninputs = [\"s3://media/art\", \"dataset://\"]\noutputs = [\"s3://media/art/published\"]\nmax_active_jobs = 1\n\
         [team.geo]\ninputs = [\"s3://media/geo\"]\noutputs = [\"s3://media/geo/tiles\"]\n",
    )
    .unwrap();
    for (db, dir) in backends().await {
        let f = fixture_on(
            db,
            dir,
            DEFAULT_MAX_BODY_BYTES,
            LocalPaths::Refuse,
            Some(tenants.clone()),
        )
        .await;
        let job = |input: &str, output: &str| {
            format!("name = \"a\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"{output}\"\n")
                .into_bytes()
        };
        let avocado = "dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf";
        // Team geo: art's input, art's published output, a sample it was not given.
        for (input, output, field) in [
            ("s3://media/art/in/fox", "s3://media/geo/tiles/x", "`input`"),
            (
                "s3://media/geo/in",
                "s3://media/art/published/fox",
                "`output`",
            ),
            (avocado, "s3://media/geo/tiles/x", "`input`"),
        ] {
            let (status, _, body) = call(
                &f.app,
                "POST",
                "/api/v1/jobs",
                Some(&f.geo),
                Some("application/toml"),
                job(input, output),
            )
            .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{input} {output}: {body}");
            let e = body["error"].as_str().unwrap();
            assert!(
                e.contains(field) && e.contains("team `geo`") && e.contains("s3://media/geo"),
                "{e}"
            );
        }
        // The `output` option cannot get around it either.
        let body = serde_json::json!({"job": String::from_utf8(job("s3://media/geo/in", "s3://media/geo/tiles/x")).unwrap(), "output": "s3://media/art/published/fox"});
        let (status, _, answer) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.geo),
            Some("application/json"),
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
        // Team art inside its own prefixes: queued.
        let (status, _, body) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some("application/toml"),
            job(avocado, "s3://media/art/published/avocado"),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(f.queue.jobs(None, None, 100).await.unwrap().len(), 1);
        // Its quota of one active job is used: the next gets 429 until that one ends.
        let (status, _, body) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some("application/toml"),
            job(avocado, "s3://media/art/published/again"),
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("1 queued or running"),
            "{body}"
        );
    }
}

async fn call_with_key(
    app: &Router,
    token: &str,
    key: &str,
    body: serde_json::Value,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let req = Request::builder()
        .method("POST")
        .uri("/api/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn a_retried_submit_with_the_same_idempotency_key_queues_one_job() {
    // Every backend; with budget_usd, which once gave a random 500 on PostgreSQL.
    for f in fixtures(LocalPaths::Refuse).await {
        let job = "name = \"a\"\nkind = \"mesh\"\n\
                   input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
                   output = \"s3://bucket/out\"\n";
        let body = serde_json::json!({"job": job, "budget_usd": 2.5, "priority": 3});
        let (s1, h1, j1) = call_with_key(&f.app, &f.art, "run-42", body.clone()).await;
        assert_eq!(s1, StatusCode::CREATED, "{j1}");
        assert_eq!(j1["budget_usd"], 2.5, "{j1}");
        assert!(h1.get("idempotent-replayed").is_none());
        for _ in 0..3 {
            let (s, h, j) = call_with_key(&f.app, &f.art, "run-42", body.clone()).await;
            assert_eq!(s, StatusCode::OK, "{j}");
            assert_eq!(j["id"], j1["id"]);
            assert_eq!(h["idempotent-replayed"], "true");
        }
        assert_eq!(f.queue.jobs(Some("art"), None, 100).await.unwrap().len(), 1);
        // The same key for a different request is refused, naming the first job.
        for other in [
            serde_json::json!({"job": job, "budget_usd": 2.5, "priority": 4}),
            serde_json::json!({"job": job, "budget_usd": 500000.0, "priority": 3}),
            serde_json::json!({"job": job, "priority": 3}),
        ] {
            let (s, _, j) = call_with_key(&f.app, &f.art, "run-42", other).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{j}");
        }
        let other = serde_json::json!({"job": job, "budget_usd": 2.5, "priority": 4});
        let (s, _, j) = call_with_key(&f.app, &f.art, "run-42", other).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{j}");
        assert!(
            j["error"]
                .as_str()
                .unwrap()
                .contains(j1["id"].as_str().unwrap()),
            "{j}"
        );
        // Keys belong to a team: geo's "run-42" is its own job.
        let (s, _, j) = call_with_key(&f.app, &f.geo, "run-42", body.clone()).await;
        assert_eq!(s, StatusCode::CREATED, "{j}");
        assert_ne!(j["id"], j1["id"]);
        // Malformed keys: 400 naming the header.
        let (s, _, j) = call_with_key(&f.app, &f.art, &"k".repeat(300), body.clone()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(
            j["error"].as_str().unwrap().contains("Idempotency-Key"),
            "{j}"
        );
    }
}

/// A tenants file giving team `art` the S3 prefixes of [`s3_mesh_job`] plus `extra` lines.
fn art_tenants(extra: &str) -> Tenants {
    Tenants::from_toml(&format!(
        "[team.art]\ninputs = [\"s3://media/art\"]\noutputs = [\"s3://media/art/published\"]\n{extra}"
    ))
    .unwrap()
}

/// A mesh job file reading and writing under team `art`'s S3 prefixes (planning it reads nothing).
fn s3_mesh_job(n: usize) -> String {
    format!(
        "name = \"m{n}\"\nkind = \"mesh\"\ninput = \"s3://media/art/in/m{n}.glb\"\noutput = \"s3://media/art/published/m{n}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_submissions_against_max_active_jobs_3_queue_exactly_3() {
    // Every backend. Issue 41: the quota was counted, then the job inserted, so concurrent
    // submissions all saw room (8 of 20 accepted against a limit of 3).
    for (db, dir) in backends().await {
        let backend = db.backend();
        let f = fixture_on(
            db,
            dir,
            DEFAULT_MAX_BODY_BYTES,
            LocalPaths::Refuse,
            Some(art_tenants("max_active_jobs = 3\n")),
        )
        .await;
        let submits = (0..20).map(|n| {
            let (app, token) = (f.app.clone(), f.art.clone());
            tokio::spawn(async move {
                call(
                    &app,
                    "POST",
                    "/api/v1/jobs",
                    Some(&token),
                    Some("application/toml"),
                    s3_mesh_job(n).into_bytes(),
                )
                .await
            })
        });
        let answers = futures::future::join_all(submits).await;
        let mut created = 0;
        for answer in answers {
            let (status, _, body) = answer.unwrap();
            match status {
                StatusCode::CREATED => created += 1,
                StatusCode::TOO_MANY_REQUESTS => assert!(
                    body["error"]
                        .as_str()
                        .unwrap()
                        .contains("max_active_jobs = 3"),
                    "{body}"
                ),
                other => panic!("{backend:?}: {other}: {body}"),
            }
        }
        assert_eq!(created, 3, "{backend:?}");
        assert_eq!(f.queue.active_jobs("art").await.unwrap(), 3, "{backend:?}");
    }
}

#[tokio::test]
async fn submissions_with_and_without_a_budget_interleave_on_one_connection() {
    // Every backend. Issue 41: on PostgreSQL a NULL budget was bound as `float4`, the connection
    // kept that parameter type, and the next budget (8 bytes) failed with a 500 ("incorrect binary
    // data format in bind parameter 10").
    for f in fixtures(LocalPaths::Refuse).await {
        let backend = f.queue.db().backend();
        for n in 0..6 {
            let mut body = serde_json::json!({ "job": s3_mesh_job(n) });
            if n % 2 == 1 {
                body["budget_usd"] = serde_json::json!(0.1 * n as f64);
            }
            let (status, _, answer) = call(
                &f.app,
                "POST",
                "/api/v1/jobs",
                Some(&f.art),
                Some("application/json"),
                body.to_string().into_bytes(),
            )
            .await;
            assert_eq!(status, StatusCode::CREATED, "{backend:?} #{n}: {answer}");
            let stored = answer["budget_usd"].as_f64();
            assert_eq!(
                stored,
                (n % 2 == 1).then_some(0.1 * n as f64),
                "{backend:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_tenants_file_can_require_a_budget_and_cap_the_estimate() {
    // SQLite: the rule is the API's, not the database's.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in/m.glb");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    std::fs::write(&input, vec![7u8; 1 << 20]).unwrap();
    let job = format!(
        "name = \"m\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"{}\"\n",
        input.display(),
        dir.path().join("out/m").display()
    );
    let tenants = |cap: &str| {
        Tenants::from_toml(&format!(
            "[team.art]\ninputs = [\"{0}\"]\noutputs = [\"{0}\"]\nrequire_budget = true\n\
             max_estimate_usd = {cap}\n",
            dir.path().display()
        ))
        .unwrap()
    };
    for (cap, budget, status, says) in [
        ("1000.0", None, StatusCode::BAD_REQUEST, "budget_usd"),
        ("0.0", Some(5.0), StatusCode::FORBIDDEN, "max_estimate_usd"),
        ("1000.0", Some(5.0), StatusCode::CREATED, ""),
    ] {
        let db = Db::open_sqlite(&dir.path().join(format!("q{cap}{budget:?}.sqlite")))
            .await
            .unwrap();
        let sub_dir = tempfile::tempdir_in(dir.path()).unwrap();
        let f = fixture_on(
            db,
            sub_dir,
            DEFAULT_MAX_BODY_BYTES,
            LocalPaths::Allow,
            Some(tenants(cap)),
        )
        .await;
        let mut body = serde_json::json!({ "job": job });
        if let Some(b) = budget {
            body["budget_usd"] = serde_json::json!(b);
        }
        let (got, _, answer) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some("application/json"),
            body.to_string().into_bytes(),
        )
        .await;
        assert_eq!(got, status, "cap {cap}, budget {budget:?}: {answer}");
        if !says.is_empty() {
            assert!(answer["error"].as_str().unwrap().contains(says), "{answer}");
        }
    }
}

/// The longest run of `c` in `text`.
fn longest_run(text: &str, c: char) -> usize {
    text.split(|x| x != c).map(str::len).max().unwrap_or(0)
}

#[tokio::test]
async fn error_replies_quote_at_most_200_characters_of_the_request() {
    // SQLite: the replies are built before any query. Issue 41: a 900 kB body made a 1.8 MB reply.
    let f = fixture(DEFAULT_MAX_BODY_BYTES).await;
    let long = "x".repeat(900_000);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        // An unterminated TOML string: the parser quotes the line.
        ("application/toml", format!("name = \"{long}\n").into_bytes()),
        // A bad field value and an unknown field.
        (
            "application/toml",
            format!("name = \"a\"\nkind = \"{long}\"\n").into_bytes(),
        ),
        (
            "application/json",
            format!("{{\"job\": \"name = 'a'\", \"{long}\": 1}}").into_bytes(),
        ),
        (
            "application/json",
            serde_json::json!({ "job": format!("name = \"a\"\nkind = \"mesh\"\ninput = \"s3://b/{long}\"\noutput = \"s3://b/o\"\n") })
                .to_string()
                .into_bytes(),
        ),
    ];
    for (content_type, body) in bodies {
        let (status, _, answer) = call(
            &f.app,
            "POST",
            "/api/v1/jobs",
            Some(&f.art),
            Some(content_type),
            body,
        )
        .await;
        assert!(status.is_client_error(), "{status}");
        let text = answer.to_string();
        assert!(
            longest_run(&text, 'x') <= 200,
            "{status}: {} bytes",
            text.len()
        );
        assert!(text.len() < 4096, "{status}: {} bytes", text.len());
    }
    let long_id = "x".repeat(10_000);
    for uri in [
        format!("/api/v1/jobs/{long_id}"),
        format!("/api/v1/{long_id}"),
        format!("/api/v1/jobs?state={long_id}"),
    ] {
        let (status, _, answer) = call(&f.app, "GET", &uri, Some(&f.art), None, vec![]).await;
        assert!(status.is_client_error(), "{status}");
        let text = answer.to_string();
        assert!(
            longest_run(&text, 'x') <= 200,
            "{status}: {} bytes",
            text.len()
        );
    }
}

#[tokio::test]
async fn malformed_job_ids_are_404_without_database_text() {
    // Every backend. Issue 41: `/jobs/<id>%00` was a 500 quoting PostgreSQL.
    for f in fixtures(LocalPaths::Refuse).await {
        let backend = f.queue.db().backend();
        f.queue.submit(&new_job("j1", "art")).await.unwrap();
        for uri in [
            "/api/v1/jobs/j1%00",
            "/api/v1/jobs/%00",
            "/api/v1/jobs/j1%00x/outputs",
            "/api/v1/jobs/j1%00/report",
            "/api/v1/jobs/j1%00/events",
            "/api/v1/jobs/%FF%FE",
            "/api/v1/jobs/j1%0A",
        ] {
            let (status, _, answer) = call(&f.app, "GET", uri, Some(&f.art), None, vec![]).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{backend:?} {uri}: {answer}");
            let e = answer["error"].as_str().unwrap_or_default().to_lowercase();
            assert!(
                !e.contains("ledger") && !e.contains("encoding") && !e.contains("sql"),
                "{e}"
            );
        }
        let (status, _, answer) = call(
            &f.app,
            "POST",
            "/api/v1/jobs/j1%00/cancel",
            Some(&f.art),
            None,
            vec![],
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{backend:?}: {answer}");
    }
}

#[tokio::test]
async fn the_job_record_lists_what_its_finished_stages_warned_about() {
    // Every backend: the warnings come from the ledger's stage summaries (issue 44 rule 5).
    for f in fixtures(LocalPaths::Refuse).await {
        f.queue.submit(&new_job("j1", "art")).await.unwrap();
        let ledger = Ledger::with_db(f.queue.db().clone());
        ledger
            .ensure_job("j1", "n", "mesh", "/in", "/out", "")
            .await
            .unwrap();
        let usage = kiln_pipeline::meter::StageUsage::default();
        let missing = "2 texture file(s) missing beside s3://art/in/a.gltf: t.png";
        for (state, summary) in [
            // A failed attempt's summary is not the job's: only finished ones count.
            (
                "failed",
                serde_json::json!({"warnings": ["from a failed attempt"]}),
            ),
            (
                "succeeded",
                serde_json::json!({"triangles": 2, "warnings": [missing]}),
            ),
        ] {
            let a = ledger.start_stage("j1", "ingest", "cpu").await.unwrap();
            ledger
                .finish_stage(a, state, Some("k"), &usage, Some(&summary), None)
                .await
                .unwrap();
        }
        let (status, _, got) =
            call(&f.app, "GET", "/api/v1/jobs/j1", Some(&f.art), None, vec![]).await;
        assert_eq!(status, StatusCode::OK, "{got}");
        assert_eq!(
            got["warnings"],
            serde_json::json!([{"stage": "ingest", "message": missing}])
        );
    }
}
