//! Database passwords never leave Kiln (issue 41): whatever spelling of a connection string
//! `--db` / `KILN_DB` is given, no 4-character piece of its password appears on stdout, on
//! stderr (logs at debug level included) or in an API reply; and a string that is neither a URL
//! nor a plain path is refused, without creating folders named after it.
//!
//! The URL spellings connect to the test PostgreSQL server (`KILN_TEST_POSTGRES_URL`, trust
//! authentication, so any password is accepted); without one (outside CI) only the refused
//! spellings run.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use reqwest::StatusCode;
use reqwest::blocking::Client;

use super::harness::{Sandbox, ok, stderr, stdout};

/// A password no message has another reason to hold (14 characters).
const SECRET: &str = "Zq7Xw9Kp2Vm4Jd";
/// A password with blanks, a quote and a backslash, as in a libpq keyword/value string.
const SPACED: &str = "Zq7 Xw9'Kp2 Vm4\\Jd";

/// Every 4-character piece of `secret` that `text` holds.
fn leaks(text: &str, secret: &str) -> Vec<String> {
    let chars: Vec<char> = secret.chars().collect();
    chars
        .windows(4)
        .map(|w| w.iter().collect::<String>())
        .filter(|piece| text.contains(piece.as_str()))
        .collect()
}

fn assert_hidden(what: &str, text: &str, secret: &str) {
    let found = leaks(text, secret);
    assert!(
        found.is_empty(),
        "{what} shows {found:?} of the password:\n{text}"
    );
}

/// `kiln ARGS` in the sandbox with debug logs and `db` as `KILN_DB`.
fn kiln(sb: &Sandbox, db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env("KILN_HOME", sb.path())
        .env("KILN_DB", db)
        .env("RUST_LOG", "debug")
        .current_dir(sb.path())
        .output()
        .expect("run kiln")
}

/// Both streams of `o`.
fn streams(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// Strings that are neither a URL Kiln takes nor a plain path: refused, naming the forms to use.
fn refused_spellings() -> Vec<(String, &'static str)> {
    let quoted = SPACED.replace('\\', "\\\\").replace('\'', "\\'");
    vec![
        (
            format!("host=127.0.0.1 port=1 user=kiln password={SECRET} dbname=kiln"),
            SECRET,
        ),
        (
            format!("host=127.0.0.1 password = {SECRET} dbname=kiln"),
            SECRET,
        ),
        (
            format!("host=127.0.0.1 password='{quoted}' dbname=kiln"),
            SPACED,
        ),
        (format!("postgres:kiln:{SECRET}@127.0.0.1:1/kiln"), SECRET),
        (format!("postgres:/kiln:{SECRET}@127.0.0.1:1/kiln"), SECRET),
        (format!("postgresql:kiln:{SECRET}@127.0.0.1"), SECRET),
        (format!("mysql://kiln:{SECRET}@127.0.0.1/kiln"), SECRET),
    ]
}

#[test]
fn database_strings_that_are_not_urls_or_paths_are_refused_with_the_password_hidden() {
    let sb = Sandbox::new();
    for (db, secret) in refused_spellings() {
        for args in [
            vec!["jobs", "--db", db.as_str()],
            vec!["token", "create", "--team", "a", "--db", db.as_str()],
            vec!["serve", "--addr", "127.0.0.1:0", "--db", db.as_str()],
            // From KILN_DB: `--help` must not print its value either.
            vec!["jobs"],
            vec!["jobs", "--help"],
        ] {
            let o = kiln(&sb, &db, &args);
            let text = streams(&o);
            assert_hidden(&format!("kiln {args:?} with {db}"), &text, secret);
            if args != ["jobs", "--help"] {
                assert!(!o.status.success(), "kiln {args:?} with {db}: {text}");
                assert!(text.contains("postgres://"), "{db}: no hint:\n{text}");
            }
        }
    }
    // Nothing was created for them (they used to be taken for SQLite paths).
    let made: Vec<String> = std::fs::read_dir(sb.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        made.iter().all(|n| !n.contains("postgres")
            && !n.contains("host=")
            && !n.contains("mysql")
            && leaks(n, SECRET).is_empty()),
        "{made:?}"
    );
}

#[test]
fn postgres_urls_never_show_their_password_in_output_logs_or_api_replies() {
    let Some(url) = super::queue::fresh_postgres() else {
        return eprintln!("skipped: no KILN_TEST_POSTGRES_URL");
    };
    // postgres://USER@HOST:PORT/DB from the test server's URL.
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (user, host_db) = rest.split_once('@').expect("USER@HOST");
    let (host, db) = host_db.split_once('/').expect("HOST/DB");
    let spellings = [
        format!("postgres://{user}:{SECRET}@{host}/{db}"),
        format!("postgresql://{user}:{SECRET}@{host}/{db}?sslmode=disable"),
        format!("postgres://{host}/{db}?user={user}&password={SECRET}"),
        format!("postgres://{host}/{db}?sslmode=disable&user={user}&password={SECRET}"),
    ];
    let sb = Sandbox::new();
    for db in &spellings {
        for args in [
            vec!["jobs", "--db", db.as_str()],
            vec!["jobs"],
            vec!["jobs", "--help"],
            vec!["jobs", "no-such-job", "--db", db.as_str()],
            vec!["token", "list", "--db", db.as_str()],
        ] {
            let o = kiln(&sb, db, &args);
            assert_hidden(&format!("kiln {args:?} with {db}"), &streams(&o), SECRET);
        }
        api_replies_hide_the_password(&sb, db);
    }
}

/// `kiln serve --db DB` with debug logs: its stdout and stderr, and the replies to good and bad
/// requests, hold none of the password.
fn api_replies_hide_the_password(sb: &Sandbox, db: &str) {
    let o = kiln(
        sb,
        db,
        &["token", "create", "--team", "secrets", "--db", db],
    );
    ok(&o);
    assert_hidden("kiln token create", &streams(&o), SECRET);
    let token = stdout(&o).trim().to_string();
    let log = sb.path().join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["serve", "--addr", "127.0.0.1:0", "--db", db])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "debug")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start kiln serve");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .strip_prefix("serving ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .trim_end_matches('/')
        .to_string();
    let client = Client::new();
    let job =
        "name = \"s\"\nkind = \"mesh\"\ninput = \"s3://b/in/m.glb\"\noutput = \"s3://b/out/s\"\n";
    let mut replies = vec![first.clone()];
    for (method, path, body) in [
        ("GET", "/api/v1/jobs", ""),
        ("GET", "/api/v1/jobs/no-such-job", ""),
        ("GET", "/api/v1/jobs/x%00", ""),
        ("POST", "/api/v1/jobs", job),
        ("POST", "/api/v1/jobs", "name = \"unterminated\n"),
        ("GET", "/", ""),
        ("GET", "/jobs/x%00", ""),
    ] {
        let req = match method {
            "GET" => client.get(format!("{base}{path}")),
            _ => client
                .post(format!("{base}{path}"))
                .header("content-type", "application/toml")
                .body(body.to_string()),
        };
        let res = req.bearer_auth(&token).send().unwrap();
        let status = res.status();
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{method} {path}");
        replies.push(format!(
            "{method} {path} → {status}: {}",
            res.text().unwrap()
        ));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_hidden("API replies", &replies.join("\n"), SECRET);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.is_empty(), "RUST_LOG=debug logged nothing");
    assert_hidden("kiln serve's log", &logged, SECRET);
}
