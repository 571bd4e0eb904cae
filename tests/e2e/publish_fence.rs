//! Issue 41 item 3: publish is fenced by the store. A stale attempt's request held in the network
//! (a proxy between its worker and SeaweedFS) reaches the store only after a later attempt
//! committed the output: the store refuses it, the committed manifest and files are unchanged,
//! and the stale attempt is recorded `rejected`. On PostgreSQL when `.ci/run` provides it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::harness::{Sandbox, dataset, ok, stderr, stdout};
use super::queue::{
    create_bucket, finish, free_port_block, fresh_postgres, job_json, s3_env, s3_server, start_s3,
    wait_for,
};

/// A TCP proxy in front of the S3 server that holds the first write to `manifest.json` (the
/// request that, before the fix, deleted the manifest; now the attempt's conditional claim)
/// until released, as a network stall would. The held request is delivered whole, after the
/// client itself gave up on it.
struct HoldingProxy {
    port: u16,
    held: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
    /// The status line the store answered to the held request.
    answer: Arc<Mutex<Option<String>>>,
}

impl HoldingProxy {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = HoldingProxy {
            port,
            held: Arc::default(),
            release: Arc::default(),
            answer: Arc::default(),
        };
        let (held, release, answer) = (
            proxy.held.clone(),
            proxy.release.clone(),
            proxy.answer.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let this_held = Arc::new(AtomicBool::new(false));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (h, r, hc) = (held.clone(), release.clone(), this_held.clone());
                std::thread::spawn(move || pump_requests(client, server, &h, &r, &hc));
                let a = answer.clone();
                std::thread::spawn(move || pump_answers(s2, c2, &this_held, &a));
            }
        });
        proxy
    }
}

/// Whether `chunk` starts a request that writes or deletes `manifest.json`.
fn writes_manifest(chunk: &[u8]) -> bool {
    let line = chunk.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    ["PUT ", "DELETE ", "POST "]
        .iter()
        .any(|m| line.starts_with(m))
        && line.contains("manifest.json")
}

fn pump_requests(
    mut client: TcpStream,
    mut server: TcpStream,
    held: &AtomicBool,
    release: &AtomicBool,
    this_held: &AtomicBool,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut pending = buf[..n].to_vec();
        if writes_manifest(&pending) && !held.swap(true, Ordering::SeqCst) {
            this_held.store(true, Ordering::SeqCst);
            // Take the whole request from the client (it does not wait for an answer to send
            // its body), then sit on it until released.
            client
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            while !release.load(Ordering::SeqCst) {
                match client.read(&mut buf) {
                    Ok(0) => std::thread::sleep(Duration::from_millis(100)),
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(_) => {}
                }
            }
            let _ = server.write_all(&pending);
            // Keep the connection to the store open until it has answered.
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        if server.write_all(&pending).is_err() {
            return;
        }
    }
}

fn pump_answers(
    mut server: TcpStream,
    mut client: TcpStream,
    this_held: &AtomicBool,
    answer: &Mutex<Option<String>>,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match server.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if this_held.load(Ordering::SeqCst) {
            let line = buf[..n].split(|&b| b == b'\r').next().unwrap_or_default();
            *answer.lock().unwrap() = Some(String::from_utf8_lossy(line).into_owned());
        }
        // The client may have given up on the held request: its answer goes nowhere.
        let _ = client.write_all(&buf[..n]);
    }
}

/// Every process below `pid` (children, grandchildren), from /proc.
fn descendants(pid: u32) -> Vec<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .flat_map(|c: u32| std::iter::once(c).chain(descendants(c)))
        .collect()
}

pub fn signal_all(root: u32, signal: i32) {
    for pid in std::iter::once(root).chain(descendants(root)) {
        // SAFETY: signals processes this test started.
        unsafe {
            libc::kill(pid as i32, signal);
        }
    }
}

fn s3_worker(sb: &Sandbox, db: &str, work: &str, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["worker", "--db", db, "--work-dir", work])
        .args(["--poll", "0.2", "--lease-ttl", "3", "--retry-base", "0.5"])
        .args(extra)
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .envs(s3_env(port))
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The committed output as the store holds it: `manifest.json` and every file it lists.
fn snapshot(port: u16, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let get = |rel: &str| {
        let o = Command::new("curl")
            .args(["-sf", &format!("http://127.0.0.1:{port}/{prefix}/{rel}")])
            .output()
            .unwrap();
        assert!(o.status.success(), "GET {prefix}/{rel}");
        o.stdout
    };
    let manifest = get("manifest.json");
    let doc: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let mut out = vec![("manifest.json".to_string(), manifest)];
    for f in doc["files"].as_array().unwrap() {
        let rel = f["path"].as_str().unwrap();
        out.push((rel.to_string(), get(rel)));
    }
    out
}

#[test]
fn a_stale_publish_request_held_past_a_later_commit_is_refused_by_the_store() {
    let Some(bin) = s3_server() else { return };
    let port = free_port_block();
    let sb = Sandbox::new();
    let mut s3 = start_s3(&bin, port, &sb.path().join("s3-data"));
    create_bucket(port, "kiln-out");
    let proxy = HoldingProxy::start(port);
    let sqlite = sb.path().join("queue.sqlite");
    let db = fresh_postgres().unwrap_or_else(|| sqlite.to_str().unwrap().to_string());
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    let job = sb.job(
        "avocado",
        &format!(
            "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\n\
             output = \"s3://kiln-out/out/a\"\n",
            gltf.display()
        ),
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", &db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    // Worker A reaches the store through the proxy, which holds its publish's first write to
    // manifest.json; then A stops altogether (a paused VM), and its lease runs out.
    let a = s3_worker(&sb, &db, "wa", proxy.port, &[]);
    wait_for(
        "A's manifest write to be held",
        Duration::from_secs(240),
        || proxy.held.load(Ordering::SeqCst),
    );
    signal_all(a.id(), libc::SIGSTOP);
    // Worker B retakes publish after the lease expires and commits.
    let b = s3_worker(&sb, &db, "wb", port, &["--drain"]);
    let out_b = finish(b);
    let doc = job_json(&sb, &db, &id);
    assert_eq!(
        doc["job"]["state"],
        "succeeded",
        "{doc:#}\n{}",
        stderr(&out_b)
    );
    let committed = snapshot(port, "kiln-out/out/a");
    let manifest: serde_json::Value = serde_json::from_slice(&committed[0].1).unwrap();
    assert!(manifest["publishing"].is_null(), "{manifest:#}");
    // Now A's held request reaches the store, and A runs again.
    proxy.release.store(true, Ordering::SeqCst);
    wait_for(
        "the store to answer the held request",
        Duration::from_secs(30),
        || proxy.answer.lock().unwrap().is_some(),
    );
    let answer = proxy.answer.lock().unwrap().clone().unwrap();
    assert!(
        answer.contains(" 412 "),
        "the held write went through: {answer}"
    );
    signal_all(a.id(), libc::SIGCONT);
    wait_for(
        "A's attempt to be recorded rejected",
        Duration::from_secs(60),
        || {
            job_json(&sb, &db, &id)["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["kind"] == "rejected"))
        },
    );
    // SAFETY: signals our own child process.
    unsafe {
        libc::kill(a.id() as i32, libc::SIGTERM);
    }
    let out_a = finish(a);
    assert_eq!(
        snapshot(port, "kiln-out/out/a"),
        committed,
        "the committed output changed"
    );
    // A's log tells what happened to it, and claims nothing false.
    let log = stderr(&out_a);
    assert!(
        (log.contains("lease lost") || log.contains("fenced"))
            && !log.contains("nothing committed was changed"),
        "{log}"
    );
    s3.kill().unwrap();
    s3.wait().unwrap();
}
