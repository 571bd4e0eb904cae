//! The HTTP API end to end: `kiln token create` for two teams, `kiln serve` on a free port over a
//! sandbox SQLite queue, submissions and refusals over HTTP, a `kiln worker` running the job, its
//! event stream to the end, `/metrics`, and `kiln jobs --api`; the refusal of local paths without
//! `--allow-local-paths`; and the viewer pages on a non-loopback address (off, or token-only with
//! `--viewer`).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::{Client, Response};

use super::harness::{Sandbox, dataset, ok, stdout};

/// A `kiln serve` child, killed when dropped (a failed assertion must not leave it running).
pub struct Server {
    child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `kiln serve --addr 127.0.0.1:0 --db DB` and read the bound address from its first line.
fn serve(sb: &Sandbox, db: &str) -> Server {
    serve_with(sb, db, &["--addr", "127.0.0.1:0"])
}

/// Start `kiln serve --db DB EXTRA…` and read the bound address from its first line (a wildcard
/// address is reached through 127.0.0.1).
pub fn serve_with(sb: &Sandbox, db: &str, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--db", db])
        .args(extra)
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "warn")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kiln serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("serving http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .replace("0.0.0.0", "127.0.0.1");
    Server {
        child,
        base: format!("http://{addr}"),
    }
}

pub fn token(sb: &Sandbox, db: &str, team: &str) -> String {
    let o = sb.kiln(&["token", "create", "--team", team, "--db", db]);
    ok(&o);
    let t = stdout(&o).trim().to_string();
    assert!(t.starts_with("kiln_"), "{t}");
    t
}

pub fn json(r: Response) -> (StatusCode, serde_json::Value) {
    let status = r.status();
    let text = r.text().unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: not JSON: {text}"));
    (status, v)
}

fn error_of(v: &serde_json::Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {v}"))
}

#[test]
fn teams_submit_and_follow_their_jobs_over_http_and_see_nothing_of_others() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let art = token(&sb, db, "art");
    let geo = token(&sb, db, "geo");
    // The job reads a local sample file and writes a local folder: a single-user setup.
    let server = serve_with(&sb, db, &["--addr", "127.0.0.1:0", "--allow-local-paths"]);
    let api = format!("{}/api/v1", server.base);
    let http = Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();

    // Team art submits the Avocado mesh job as a TOML body.
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = format!(
        "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/a\"\n",
        gltf.display()
    );
    let (status, body) = json(
        http.post(format!("{api}/jobs"))
            .bearer_auth(&art)
            .header("content-type", "application/toml")
            .body(job.clone())
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["team"], "art");
    assert_eq!(body["state"], "queued");
    let id = body["id"].as_str().unwrap().to_string();

    // Team geo: 404 on the job and on cancelling it, and an empty list.
    let (status, _) = json(
        http.get(format!("{api}/jobs/{id}"))
            .bearer_auth(&geo)
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = json(
        http.post(format!("{api}/jobs/{id}/cancel"))
            .bearer_auth(&geo)
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = json(
        http.get(format!("{api}/jobs"))
            .bearer_auth(&geo)
            .send()
            .unwrap(),
    );
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");

    // No token: 401 with a challenge.
    let r = http.get(format!("{api}/jobs")).send().unwrap();
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    let (status, body) = json(r);
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(error_of(&body).contains("Authorization"), "{body}");

    // A 2 MiB body: 413 naming the 1 MiB limit.
    let (status, body) = json(
        http.post(format!("{api}/jobs"))
            .bearer_auth(&art)
            .header("content-type", "application/toml")
            .body(vec![b'#'; 2 << 20])
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(error_of(&body).contains("1048576 bytes"), "{body}");

    // Malformed TOML: 400 with the parser's line.
    let (status, body) = json(
        http.post(format!("{api}/jobs"))
            .bearer_auth(&art)
            .header("content-type", "text/plain")
            .body("name = \"x\"\nkind = mesh\n")
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("line 2"), "{body}");

    // JSON with a bad field type: 400 naming the field.
    let (status, body) = json(
        http.post(format!("{api}/jobs"))
            .bearer_auth(&art)
            .header("content-type", "application/json")
            .body(serde_json::json!({"job": job, "priority": "high"}).to_string())
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("priority"), "{body}");

    // A worker runs the job; its event stream then holds submitted … succeeded and ends.
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "worker",
            "--drain",
            "--poll",
            "0.2",
            "--db",
            db,
            "--work-dir",
            "w",
        ])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "warn")
        .current_dir(sb.path())
        .output()
        .unwrap();
    ok(&o);
    let r = http
        .get(format!("{api}/jobs/{id}/events"))
        .bearer_auth(&art)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = String::new();
    // read_to_string returns only when the server ends the stream.
    r.take(1 << 20).read_to_string(&mut events).unwrap();
    assert!(events.contains("event: submitted"), "{events}");
    assert!(events.contains("event: succeeded"), "{events}");

    // Resuming after the last event id sends nothing more and ends.
    let last: String = events
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .next_back()
        .unwrap()
        .to_string();
    let rest = http
        .get(format!("{api}/jobs/{id}/events"))
        .bearer_auth(&art)
        .header("last-event-id", last)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(!rest.contains("event:"), "{rest}");

    // The job, its outputs' manifest and its report.
    let (_, detail) = json(
        http.get(format!("{api}/jobs/{id}"))
            .bearer_auth(&art)
            .send()
            .unwrap(),
    );
    assert_eq!(detail["job"]["state"], "succeeded", "{detail}");
    let (status, outputs) = json(
        http.get(format!("{api}/jobs/{id}/outputs"))
            .bearer_auth(&art)
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::OK);
    let files = outputs["manifest"]["files"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f["path"] == "tileset.json"),
        "{outputs}"
    );
    let (status, report) = json(
        http.get(format!("{api}/jobs/{id}/report"))
            .bearer_auth(&art)
            .send()
            .unwrap(),
    );
    assert_eq!(status, StatusCode::OK, "{report}");
    assert!(
        report["totals"]["attempts"].as_u64().unwrap() >= 4,
        "{report}"
    );

    // Metrics, no token needed.
    let metrics = http.get(format!("{}/metrics", server.base)).send().unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    let metrics = metrics.text().unwrap();
    assert!(
        metrics.contains(r#"kiln_queue_depth{kind="jobs",state="queued"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"kiln_jobs{state="succeeded"} 1"#),
        "{metrics}"
    );

    // The CLI over the API lists the job, and shows it with its events.
    let o = sb.kiln(&["jobs", "--api", &server.base, "--token", &art]);
    ok(&o);
    assert!(stdout(&o).contains(&id), "{}", stdout(&o));
    let o = sb.kiln(&["jobs", &id, "--api", &server.base, "--token", &art]);
    ok(&o);
    assert!(stdout(&o).contains("succeeded"), "{}", stdout(&o));
    let o = sb.kiln(&["jobs", &id, "--api", &server.base, "--token", &geo]);
    assert!(!o.status.success());

    // `kiln submit` and `kiln cancel` over the API.
    let file = sb.job("avocado", &job);
    let o = sb.kiln(&[
        "submit",
        file.to_str().unwrap(),
        "--api",
        &server.base,
        "--token",
        &geo,
    ]);
    ok(&o);
    let second = stdout(&o).trim().to_string();
    let o = sb.kiln(&["cancel", &second, "--api", &server.base, "--token", &art]);
    assert!(!o.status.success(), "art cancelled geo's job");
    let o = sb.kiln(&["cancel", &second, "--api", &server.base, "--token", &geo]);
    ok(&o);
    assert_eq!(stdout(&o).trim(), format!("{second}: cancelled"));
}

#[test]
fn the_kubernetes_command_line_of_kiln_serve_parses() {
    // deploy/kubernetes/api.yaml runs `kiln serve --queue=… --listen=0.0.0.0:8080`.
    let sb = Sandbox::new();
    let o = sb.kiln(&["serve", "--queue=x.sqlite", "--listen=not-an-address"]);
    assert!(!o.status.success());
    let err = super::harness::stderr(&o);
    assert!(
        err.contains("not-an-address") && !err.contains("unexpected argument"),
        "{err}"
    );
}

#[test]
fn local_paths_over_the_api_are_refused_without_allow_local_paths() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let art = token(&sb, db, "art");
    let server = serve(&sb, db);
    let http = Client::new();
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    for (input, output, field) in [
        (
            gltf.display().to_string(),
            "s3://bucket/out".to_string(),
            "`input`",
        ),
        (
            "s3://bucket/a.glb".to_string(),
            "out/a".to_string(),
            "`output`",
        ),
        (
            "file:///etc/passwd".to_string(),
            "s3://bucket/out".to_string(),
            "`input`",
        ),
    ] {
        let job = format!(
            "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"{output}\"\n"
        );
        let (status, body) = json(
            http.post(format!("{}/api/v1/jobs", server.base))
                .bearer_auth(&art)
                .header("content-type", "application/toml")
                .body(job)
                .send()
                .unwrap(),
        );
        assert_eq!(status, StatusCode::BAD_REQUEST, "{input} {output}: {body}");
        let e = error_of(&body);
        assert!(
            e.contains(field)
                && e.contains("s3://")
                && e.contains("dataset://NAME") == (field == "`input`")
                && e.contains("--allow-local-paths"),
            "{e}"
        );
    }
    let (_, list) = json(
        http.get(format!("{}/api/v1/jobs", server.base))
            .bearer_auth(&art)
            .send()
            .unwrap(),
    );
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");
}

#[test]
fn dataset_urls_over_the_api_stay_inside_their_dataset_and_are_stored_as_urls() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let art = token(&sb, db, "art");
    let server = serve(&sb, db);
    let http = Client::new();
    let submit = |input: &str| {
        json(
            http.post(format!("{}/api/v1/jobs", server.base))
                .bearer_auth(&art)
                .header("content-type", "application/toml")
                .body(format!(
                    "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{input}\"\noutput = \"s3://bucket/out\"\n"
                ))
                .send()
                .unwrap(),
        )
    };
    // The forms that read a worker's own files (an absolute sub-path replaced the dataset folder).
    for bad in [
        "dataset://mesh-khronos-gltf-samples//etc/passwd",
        "dataset://mesh-khronos-gltf-samples/../../../../etc/passwd",
        "dataset://mesh-khronos-gltf-samples/Avocado/./../../x",
        "dataset:///etc/passwd",
        "dataset://mesh-khronos-gltf-samples/no-such-model.glb",
    ] {
        let (status, body) = submit(bad);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        let e = error_of(&body);
        assert!(e.contains("input") && e.contains(bad), "{bad}: {e}");
        assert!(
            !e.contains("/shared/datasets"),
            "the server's layout leaked: {e}"
        );
    }
    // Out-of-bound numbers: 400 naming the field and its bound, nothing queued.
    let good = "dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf";
    for (body, field, bound) in [
        (
            serde_json::json!({"job": format!("name = \"a\"\nkind = \"mesh\"\ninput = \"{good}\"\noutput = \"s3://bucket/o\"\n[mesh_tile]\nmax_triangles_per_tile = 9200000000000000000\n")}),
            "mesh_tile.max_triangles_per_tile",
            "16777216",
        ),
        (
            serde_json::json!({"job": format!("name = \"a\"\nkind = \"mesh\"\ninput = \"{good}\"\noutput = \"s3://bucket/o\"\n"), "priority": i64::MAX}),
            "priority",
            "1000",
        ),
        (
            serde_json::json!({"job": format!("name = \"a\"\nkind = \"mesh\"\ninput = \"{good}\"\noutput = \"s3://bucket/o\"\n"), "max_attempts": 1_000_000_000_000_000_000_i64}),
            "max_attempts",
            "20",
        ),
    ] {
        let (status, answer) = json(
            http.post(format!("{}/api/v1/jobs", server.base))
                .bearer_auth(&art)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .unwrap(),
        );
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {answer}");
        let e = error_of(&answer);
        assert!(e.contains(field) && e.contains(bound), "{field}: {e}");
    }
    // A good one is stored as the URL, never as this server's path.
    let (status, body) = submit(good);
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["input"], good, "{body}");
    let (_, list) = json(
        http.get(format!("{}/api/v1/jobs", server.base))
            .bearer_auth(&art)
            .send()
            .unwrap(),
    );
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
}

#[test]
fn the_viewer_on_a_network_address_is_off_or_needs_a_token() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let art = token(&sb, db, "art");
    let http = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // Without --viewer: no viewer page, the API still answers.
    let server = serve_with(&sb, db, &["--addr", "0.0.0.0:0"]);
    let r = http.get(format!("{}/", server.base)).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().unwrap().contains("--viewer"));
    let r = http
        .get(format!("{}/api/v1/jobs", server.base))
        .bearer_auth(&art)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    drop(server);

    // `--viewer open` on a network address is refused at start.
    let o = sb.kiln(&[
        "serve",
        "--db",
        db,
        "--addr",
        "0.0.0.0:0",
        "--viewer",
        "open",
    ]);
    assert!(!o.status.success());
    assert!(super::harness::stderr(&o).contains("--viewer"));

    // With --viewer: sign-in needed; a token opens the list, by header or by the /login cookie.
    let server = serve_with(&sb, db, &["--addr", "0.0.0.0:0", "--viewer"]);
    let r = http.get(format!("{}/", server.base)).send().unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login");
    let r = http
        .get(format!("{}/jobs/x/files/tileset.json", server.base))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = http
        .get(format!("{}/", server.base))
        .bearer_auth(&art)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().unwrap().contains("team <code>art</code>"));
    let r = http
        .post(format!("{}/login", server.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={art}"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    let r = http
        .get(format!("{}/", server.base))
        .header("cookie", cookie.split(';').next().unwrap())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A mesh job file under team `art`'s S3 prefixes of [`ART_TENANTS`] (planning it reads nothing).
fn s3_mesh_job(n: usize) -> String {
    format!(
        "name = \"m{n}\"\nkind = \"mesh\"\ninput = \"s3://media/art/in/m{n}.glb\"\noutput = \"s3://media/art/published/m{n}\"\n"
    )
}

const ART_TENANTS: &str = "[team.art]\ninputs = [\"s3://media/art\"]\noutputs = [\"s3://media/art/published\"]\nmax_active_jobs = 3\n";

/// The database strings to run a test on: a sandbox SQLite file, and a fresh PostgreSQL database
/// when the test server is there.
fn databases(sb: &Sandbox) -> Vec<String> {
    let sqlite = sb.path().join("queue.sqlite").to_str().unwrap().to_string();
    std::iter::once(sqlite)
        .chain(super::queue::fresh_postgres())
        .collect()
}

#[test]
fn issue_41_queue_limits_and_budgets_hold_under_concurrent_and_interleaved_submissions() {
    // Over HTTP against the real server: 20 concurrent submissions against max_active_jobs = 3
    // queue exactly 3 (8 did), and submissions with and without budget_usd interleave (on
    // PostgreSQL the second budget was a 500).
    let sb = Sandbox::new();
    let tenants = sb.path().join("tenants.toml");
    std::fs::write(&tenants, ART_TENANTS).unwrap();
    for db in databases(&sb) {
        let art = token(&sb, &db, "art");
        let geo = token(&sb, &db, "geo");
        let server = serve_with(
            &sb,
            &db,
            &[
                "--addr",
                "127.0.0.1:0",
                "--tenants",
                tenants.to_str().unwrap(),
            ],
        );
        let api = format!("{}/api/v1", server.base);
        let statuses: Vec<StatusCode> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|n| {
                    let (api, art) = (&api, &art);
                    s.spawn(move || {
                        Client::new()
                            .post(format!("{api}/jobs"))
                            .bearer_auth(art)
                            .header("content-type", "application/toml")
                            .body(s3_mesh_job(n))
                            .send()
                            .unwrap()
                            .status()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let created = statuses
            .iter()
            .filter(|s| **s == StatusCode::CREATED)
            .count();
        assert_eq!(created, 3, "{db}: {statuses:?}");
        assert!(
            statuses
                .iter()
                .all(|s| matches!(*s, StatusCode::CREATED | StatusCode::TOO_MANY_REQUESTS)),
            "{db}: {statuses:?}"
        );
        drop(server);
        // Without a tenants file (no quota): budgets and no budgets, one after the other.
        let server = serve_with(&sb, &db, &["--addr", "127.0.0.1:0"]);
        let api = format!("{}/api/v1", server.base);
        let http = Client::new();
        for n in 0..6 {
            let mut body = serde_json::json!({
                "job": s3_mesh_job(n).replace("media/art", "media/geo"),
            });
            if n % 2 == 1 {
                body["budget_usd"] = serde_json::json!(1.5);
            }
            let (status, v) = json(
                http.post(format!("{api}/jobs"))
                    .bearer_auth(&geo)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .unwrap(),
            );
            assert_eq!(status, StatusCode::CREATED, "{db} #{n}: {v}");
        }
        // Malformed ids are 404, and a huge body's error quotes little of it.
        for path in ["/jobs/x%00", "/jobs/x%00/outputs", "/jobs/%FF"] {
            let (status, v) = json(
                http.get(format!("{api}{path}"))
                    .bearer_auth(&geo)
                    .send()
                    .unwrap(),
            );
            assert_eq!(status, StatusCode::NOT_FOUND, "{db} {path}: {v}");
        }
        let huge = format!("name = \"{}\n", "x".repeat(900_000));
        let res = http
            .post(format!("{api}/jobs"))
            .bearer_auth(&geo)
            .header("content-type", "application/toml")
            .body(huge)
            .send()
            .unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        let reply = res.text().unwrap();
        assert!(reply.len() < 4096, "{db}: a {} byte reply", reply.len());
    }
}
