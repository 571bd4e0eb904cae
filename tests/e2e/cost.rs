//! Storage and egress in `kiln report` and in job budgets: a mesh job published to a bucket in
//! another region (a test route in a test price catalog; the "bucket" is a folder named by a
//! `[[destination]]` rule, as a bucket mounted on the workers would be).

use std::path::Path;
use std::process::{Command, Stdio};

use super::harness::{Sandbox, dataset, job_id, ok, stdout};

/// USD per GB of the test route: high, so that the Avocado's few MB of egress are visible.
const TEST_ROUTE_GB_USD: f64 = 1000.0;
/// S3 Standard, USD per GB-month, as in the built-in catalog.
const S3_GB_MONTH_USD: f64 = 0.023;

/// The built-in catalog plus a destination rule placing `bucket` in `test:eu-north`, a route to
/// it at [`TEST_ROUTE_GB_USD`], and published outputs kept 60 days (stage cache: 30).
fn test_catalog(sb: &Sandbox, bucket: &Path) -> std::path::PathBuf {
    let text = include_str!("../../jobs/src/prices/default.toml")
        .replace("published_days = 30.0", "published_days = 60.0");
    let text = format!(
        "{text}\n[[destination]]\nurl_prefix = \"{}/\"\nplace = \"test:eu-north\"\n\n\
         [egress.test-eu-north]\nprovider = \"test\"\nfrom = \"aws:us-east-1\"\n\
         to = \"test:eu-north\"\nbasis = \"a test route\"\nanchor = \"tests/e2e/cost.rs\"\n\
         confidence = \"?\"\ngb_usd = {TEST_ROUTE_GB_USD}\n",
        bucket.display()
    );
    let path = sb.path().join("prices-eu.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn avocado_job(sb: &Sandbox, output: &Path) -> std::path::PathBuf {
    let gltf = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF/Avocado.gltf");
    sb.job(
        "avocado",
        &format!(
            "name = \"avocado\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"{}\"\n",
            gltf.display(),
            output.display()
        ),
    )
}

/// Storage and egress USD of a job's ledger rows by the documented rule (jobs/src/costing.rs):
/// every successful attempt's output stored once (stage outputs 30 days, the published copy 60 days)
/// at S3 Standard, every publish attempt's bytes sent over the test route.
fn expected_storage_and_egress(stages: &[serde_json::Value]) -> (f64, f64, i64) {
    let (mut storage, mut egress, mut sent) = (0.0, 0.0, 0);
    for s in stages {
        let bytes = s["bytes_written"].as_i64().unwrap();
        let publish = s["stage"] == "publish";
        // One copy of a stage's output: the size its summary records, where it does.
        let stored = s["summary"]["stored_bytes"].as_i64().unwrap_or(bytes);
        if s["state"] == "succeeded" {
            let days = if publish { 60.0 } else { 30.0 };
            storage += stored as f64 / 1e9 * days / 30.0 * S3_GB_MONTH_USD;
        }
        if publish {
            egress += bytes as f64 / 1e9 * TEST_ROUTE_GB_USD;
            sent += bytes;
        }
    }
    (storage, egress, sent)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-6)
}

#[test]
fn a_job_published_to_another_region_shows_storage_and_egress_usd_in_table_csv_and_json() {
    let sb = Sandbox::new();
    let bucket = sb.path().join("eu-bucket");
    let job = avocado_job(&sb, &bucket.join("avocado"));
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let id = job_id(&o);
    let prices = test_catalog(&sb, &bucket);
    let prices = prices.to_str().unwrap();

    let o = sb.kiln(&["report", &id, "--json", "--prices", prices]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let (storage, egress, sent) = expected_storage_and_egress(doc["stages"].as_array().unwrap());
    assert!(
        sent > 100_000,
        "the Avocado tileset is more than 100 kB: {doc:#}"
    );
    let cost = &doc["cost"];
    eprintln!(
        "avocado: {sent} bytes published; storage ${storage:.9}, egress ${egress:.6} at ${TEST_ROUTE_GB_USD}/GB"
    );
    assert!(
        close(cost["storage_usd"].as_f64().unwrap(), storage),
        "{cost:#}"
    );
    assert!(
        close(cost["egress_usd"].as_f64().unwrap(), egress),
        "{cost:#}"
    );
    assert_eq!(cost["egress_bytes"].as_i64().unwrap(), sent, "{cost:#}");
    let usd = cost["usd"].as_f64().unwrap();
    let parts = ["gpu_usd", "cpu_usd", "storage_usd", "egress_usd"]
        .iter()
        .map(|k| cost[*k].as_f64().unwrap())
        .sum::<f64>();
    assert!(close(usd, parts), "the total holds every part: {cost:#}");
    assert_eq!(cost["output_place"]["place"], "test:eu-north", "{cost:#}");
    assert_eq!(cost["output_place"]["route"]["name"], "test-eu-north");

    let o = sb.kiln(&["report", &id, "--csv", "--prices", prices]);
    ok(&o);
    let csv = stdout(&o);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    // The job's own line (per-stage lines may come before it).
    let row: Vec<&str> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|r| r[0] == id)
        .unwrap_or_else(|| panic!("no line for job {id}: {csv}"));
    let col = |name: &str| -> f64 {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column: {csv}"));
        row[i].parse().unwrap()
    };
    assert!(close(col("storage_usd"), storage), "{csv}");
    assert!(close(col("egress_usd"), egress), "{csv}");
    assert!(close(col("usd"), usd), "{csv}");

    let o = sb.kiln(&["report", &id, "--prices", prices]);
    ok(&o);
    let table = stdout(&o);
    assert!(
        table.contains("storage USD") && table.contains("egress USD"),
        "{table}"
    );
    let total = table
        .lines()
        .filter(|l| l.starts_with("total "))
        .find(|l| l.split_whitespace().count() == 6)
        .unwrap_or_else(|| panic!("no cost total line: {table}"));
    let f: Vec<f64> = total
        .split_whitespace()
        .skip(2)
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        (f[1] - storage).abs() < 1e-6 && (f[2] - egress).abs() < 1e-6,
        "{total}"
    );
    assert!(
        table.contains("egress aws:us-east-1 → test:eu-north (egress.test-eu-north, $1000/GB)"),
        "{table}"
    );

    // The period report carries the same columns and totals.
    let o = sb.kiln(&[
        "report",
        "--since",
        "2000-01-01",
        "--prices",
        prices,
        "--json",
    ]);
    ok(&o);
    let period: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(close(
        period["total"]["egress_usd"].as_f64().unwrap(),
        egress
    ));
    assert!(close(
        period["total"]["storage_usd"].as_f64().unwrap(),
        storage
    ));
}

#[test]
fn a_budget_stops_a_job_before_publish_egress_would_cross_it() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let bucket = sb.path().join("eu-bucket");
    let output = bucket.join("avocado");
    let job = avocado_job(&sb, &output);
    let prices = test_catalog(&sb, &bucket);
    // A mesh job's CPU stages cost a fraction of a cent; its egress at $1000/GB is dollars.
    let o = sb.kiln(&[
        "submit",
        job.to_str().unwrap(),
        "--db",
        db,
        "--budget-usd",
        "1",
    ]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    let w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "worker",
            "--db",
            db,
            "--work-dir",
            "w",
            "--drain",
            "--poll",
            "0.2",
        ])
        .args(["--prices", prices.to_str().unwrap()])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    ok(&w);
    let o = sb.kiln(&["jobs", &id, "--json", "--db", db]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["job"]["state"], "failed", "{doc:#}");
    let err = doc["job"]["error"].as_str().unwrap();
    for part in [
        "budget: not starting `publish`",
        "of its $1.000000 budget",
        "aws:us-east-1 → test:eu-north (egress.test-eu-north, $1000/GB)",
        "of egress",
    ] {
        assert!(err.contains(part), "`{part}` not in: {err}");
    }
    // The projected egress is what the published files would have been: dollars, not cents.
    let projected: f64 = err
        .split("would cost $")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no projected egress in: {err}"));
    assert!(projected > 1.0, "{err}");
    eprintln!("budget stop: {err}");
    // Nothing was published, and the stages before publish ran.
    assert!(!output.join("tileset.json").exists());
    let tile_ok = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["stage"] == "tile" && s["state"] == "succeeded");
    assert!(tile_ok, "{doc:#}");
}

#[test]
fn a_queued_job_run_by_a_worker_records_its_estimate_and_is_in_estimate_error() {
    let sb = Sandbox::new();
    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    // A dataset URL: the worker resolves it on its own disk and measures the input there.
    let job = sb.job(
        "avocado",
        "name = \"avocado\"\nkind = \"mesh\"\n\
         input = \"dataset://mesh-khronos-gltf-samples/Avocado/glTF/Avocado.gltf\"\n\
         output = \"out/a\"\n",
    );
    let o = sb.kiln(&["submit", job.to_str().unwrap(), "--db", db]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    let w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "worker",
            "--db",
            db,
            "--work-dir",
            "w",
            "--drain",
            "--poll",
            "0.2",
        ])
        .env("KILN_HOME", sb.path())
        .env("RUST_LOG", "kiln_jobs=info")
        .current_dir(sb.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    ok(&w);
    let o = sb.kiln(&["report", "--estimate-error", "--json", "--db", db]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["jobs_without_estimate"], 0, "{doc:#}");
    let compared: Vec<&serde_json::Value> = doc["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["job_id"] == id.as_str())
        .collect();
    let stages: Vec<&str> = compared
        .iter()
        .map(|c| c["stage"].as_str().unwrap())
        .collect();
    assert!(
        stages.contains(&"ingest") && stages.contains(&"tile"),
        "{doc:#}"
    );
    // The ingest estimate is per input byte: above 0 only if the worker measured the input
    // (the Avocado's .gltf and the buffers and textures it names, 8.3 MB).
    let ingest = compared.iter().find(|c| c["stage"] == "ingest").unwrap();
    assert!(ingest["estimated_usd"].as_f64().unwrap() > 0.0, "{doc:#}");
    assert!(
        doc["compares"]
            .as_str()
            .unwrap()
            .starts_with("compute only"),
        "{doc:#}"
    );
    assert!(doc["stages"][0]["stages"].as_u64().is_some(), "{doc:#}");
    // The text table lists the job's stages with a MAPE, and says what it compares.
    let o = sb.kiln(&["report", "--estimate-error", "--db", db]);
    ok(&o);
    let text = stdout(&o);
    assert!(
        text.contains("1 jobs compared; 0 jobs have no recorded estimate")
            && text.starts_with("stage")
            && text.lines().next().unwrap().contains(" stages ")
            && text.contains("compute only"),
        "{text}"
    );
    eprintln!("{text}");
}

/// Storage USD of each successful non-publish stage in `kiln report --json`, by stage.
fn stage_storage(doc: &serde_json::Value) -> Vec<(String, f64)> {
    let stages = doc["stages"].as_array().unwrap();
    doc["cost"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .zip(stages)
        .filter(|(_, s)| s["state"] == "succeeded" && s["stage"] != "publish")
        .map(|(a, _)| {
            (
                a["stage"].as_str().unwrap().to_string(),
                a["storage_usd"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn stage_storage_is_charged_once_under_run_and_worker_and_the_report_shows_team_and_budget() {
    let sb = Sandbox::new();
    let job = avocado_job(&sb, &sb.path().join("out-run"));
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let run_id = job_id(&o);
    let o = sb.kiln(&["report", &run_id, "--json"]);
    ok(&o);
    let run_doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();

    let db = sb.path().join("queue.sqlite");
    let db = db.to_str().unwrap();
    let job = avocado_job(&sb, &sb.path().join("out-worker"));
    let o = sb.kiln(&[
        "submit",
        job.to_str().unwrap(),
        "--db",
        db,
        "--team",
        "art",
        "--budget-usd",
        "1",
    ]);
    ok(&o);
    let id = stdout(&o).trim().to_string();
    let w = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "worker",
            "--db",
            db,
            "--work-dir",
            "w",
            "--drain",
            "--poll",
            "0.2",
        ])
        .env("KILN_HOME", sb.path())
        .current_dir(sb.path())
        .output()
        .unwrap();
    ok(&w);
    let o = sb.kiln(&["report", &id, "--json", "--db", db]);
    ok(&o);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();

    // The worker wrote each stage twice (work folder and stage-cache upload); storage is charged
    // on the recorded output size alone: bytes × 30/30 month × $0.023/GB-month.
    for s in doc["stages"].as_array().unwrap() {
        if s["state"] != "succeeded" || s["stage"] == "publish" {
            continue;
        }
        let stored = s["summary"]["stored_bytes"].as_i64().unwrap();
        assert!(
            s["bytes_written"].as_i64().unwrap() >= 2 * stored - 4096,
            "the upload is counted in bytes_written: {s:#}"
        );
    }
    let worker = stage_storage(&doc);
    let run = stage_storage(&run_doc);
    eprintln!("stage storage USD: kiln run {run:?}, kiln worker {worker:?}");
    assert_eq!(worker.len(), run.len(), "{worker:?} {run:?}");
    for ((ws, wu), (rs, ru)) in worker.iter().zip(&run) {
        assert_eq!(ws, rs);
        // The same stage outputs, up to the few bytes of their marker files.
        assert!(
            (wu - ru).abs() <= 0.023 * 4096.0 / 1e9,
            "{ws}: {wu} vs {ru}"
        );
    }
    // By hand: Σ stored bytes / 1e9 × 30/30 month × $0.023/GB-month (the built-in catalog).
    let want: f64 = doc["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "succeeded" && s["stage"] != "publish")
        .map(|s| s["summary"]["stored_bytes"].as_i64().unwrap() as f64 / 1e9 * S3_GB_MONTH_USD)
        .sum();
    let got: f64 = worker.iter().map(|(_, u)| u).sum();
    assert!(close(got, want), "{got} vs {want}");

    // Team and budget: JSON, CSV (the job's line, last) and the table.
    assert_eq!(doc["team"], "art", "{doc:#}");
    assert_eq!(doc["cost"]["budget_usd"], 1.0, "{doc:#}");
    assert_eq!(doc["cost"]["over_budget"], false, "{doc:#}");
    let a = &doc["cost"]["attempts"][0];
    assert!(
        a.get("sku").is_some() && a.get("billed_gpu_s").is_some(),
        "{a:#}"
    );
    let o = sb.kiln(&["report", &id, "--csv", "--db", db]);
    ok(&o);
    let text = stdout(&o);
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|x| x == name).unwrap();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    let last = rows.last().unwrap();
    assert_eq!(&last[col("team")], "art", "{text}");
    assert_eq!(&last[col("budget_usd")], "1.0", "{text}");
    assert_eq!(&last[col("over_budget")], "false", "{text}");
    let compute: f64 = last[col("compute_usd")].parse().unwrap();
    let gpu_cpu =
        doc["cost"]["gpu_usd"].as_f64().unwrap() + doc["cost"]["cpu_usd"].as_f64().unwrap();
    assert!(close(compute, gpu_cpu), "{text}");
    let o = sb.kiln(&["report", &id, "--db", db]);
    ok(&o);
    assert!(
        stdout(&o).contains("budget $1.000000: within budget"),
        "{}",
        stdout(&o)
    );
}
