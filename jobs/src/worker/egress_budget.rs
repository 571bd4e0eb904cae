//! The egress side of a job's budget: before a worker starts a job's `publish` stage, it projects
//! what sending the output to its place will cost (egress over the catalog's route plus the
//! published copy's storage, see [`crate::costing`]) and refuses to start when that would take
//! the job past its `budget_usd`, the same way it refuses a stage once the budget is spent.
//!
//! Projection: `publish` uploads the files of the stages it copies (`train` or `decimate`,
//! `tile`, `eval`, and `reconstruct`'s `sparse/`, `logs/` and `reconstruct.json`), less hidden
//! files. Their sizes are read from each stage's entry in the shared stage cache
//! (`CACHE[/teams/<team>]/<stage>/<key>/.kiln-cache.json`, written by
//! `kiln_pipeline::stage_cache`), which is exact for an untouched entry; the list is not vouched
//! for, but it only sizes a projection, and `publish` copies the stage outputs the cache ledger
//! vouched for. When an entry cannot be read, the stage's bytes written in the ledger are used instead:
//! an upper bound (it counts the work-folder copy and the cache upload).

use std::path::Path;

use kiln_pipeline::storage;

use super::WorkerConfig;
use crate::ledger::StageRow;
use crate::queue::Claimed;

/// The stages whose outputs `publish` copies.
const PUBLISHED_STAGES: [&str; 5] = ["reconstruct", "train", "decimate", "tile", "eval"];

/// The stage cache's per-entry file list (`kiln_pipeline::stage_cache`'s `.kiln-cache.json`).
const CONTENTS: &str = ".kiln-cache.json";

#[derive(serde::Deserialize)]
struct EntryFile {
    path: String,
    bytes: u64,
}

/// Why `publish` must not start: the message naming the budget, the projected egress and the
/// route; `None` when it fits, or when the output is at the workers' place (no egress).
///
/// `rows` are the job's ledger rows so far and `spent` what they cost ([`crate::costing::Pricing::job_total`]).
pub(super) async fn refusal(
    cfg: &WorkerConfig,
    c: &Claimed,
    rows: &[StageRow],
    spent: f64,
    budget: f64,
) -> Option<String> {
    let place = cfg.catalog.output_place(&c.job.output)?;
    let route = place.route.as_ref()?;
    let placement = cfg.catalog.placement.as_ref()?;
    let bytes = projected_publish_bytes(cfg, c, rows).await;
    let egress = bytes as f64 / 1e9 * route.gb_usd;
    let storage = cfg
        .catalog
        .storage_usd_for_days(&place.storage_class, bytes, placement.published_days)
        .unwrap_or(0.0);
    (spent + egress + storage > budget).then(|| {
        format!(
            "budget: not starting `publish`: sending about {bytes} bytes ({:.3} GB) to `{}` would \
             cost ${egress:.6} of egress over {} and ${storage:.6} of storage ({} days of {}), \
             and the job has already cost ${spent:.6} of its ${budget:.6} budget (price catalog \
             {}); raise --budget-usd or publish to the workers' region",
            bytes as f64 / 1e9,
            c.job.output,
            route.describe(),
            placement.published_days,
            place.storage_class,
            cfg.catalog.version,
        )
    })
}

/// Bytes `publish` will upload (module docs).
async fn projected_publish_bytes(cfg: &WorkerConfig, c: &Claimed, rows: &[StageRow]) -> u64 {
    let mut total = 0;
    for s in c
        .stages
        .iter()
        .filter(|s| s.state == "succeeded" && PUBLISHED_STAGES.contains(&s.stage.as_str()))
    {
        let scratch = cfg.work_root.join(&c.job.id).join("publish.budget");
        let from_cache = match &s.stage_key {
            Some(key) => {
                let cache = cfg.cache_url_for(&c.job.team);
                cached_entry_bytes(&cache, &s.stage, key, &scratch).await
            }
            None => None,
        };
        let _ = std::fs::remove_dir_all(&scratch);
        total += from_cache.unwrap_or_else(|| {
            rows.iter()
                .filter(|r| r.stage == s.stage && r.state == "succeeded")
                .map(crate::costing::stored_bytes)
                .max()
                .unwrap_or(0)
        });
    }
    total
}

/// The published bytes of stage `stage`'s cache entry `key`, from its file list (fetched into
/// folder `scratch`); `None` when the entry cannot be read.
async fn cached_entry_bytes(cache: &str, stage: &str, key: &str, scratch: &Path) -> Option<u64> {
    let url = format!("{}/{stage}/{key}/{CONTENTS}", cache.trim_end_matches('/'));
    let fetched = storage::fetch(&url, scratch, false).await.ok()?;
    let text = std::fs::read(&fetched.local).ok()?;
    let files: Vec<EntryFile> = serde_json::from_slice(&text).ok()?;
    Some(
        files
            .iter()
            .filter(|f| is_published(stage, &f.path))
            .map(|f| f.bytes)
            .sum(),
    )
}

/// Whether `publish` copies file `path` (`/`-separated, relative to the stage's output) of
/// `stage`: no hidden component; of `reconstruct` only `sparse/`, `logs/` and `reconstruct.json`.
fn is_published(stage: &str, path: &str) -> bool {
    if path.split('/').any(|part| part.starts_with('.')) {
        return false;
    }
    stage != "reconstruct"
        || path.starts_with("sparse/")
        || path.starts_with("logs/")
        || path == kiln_pipeline::stages::reconstruct::REPORT_JSON
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_files_and_reconstruct_work_files_are_not_published() {
        assert!(is_published("tile", "tiles/0.glb"));
        assert!(!is_published("tile", ".kiln-stage.json"));
        assert!(!is_published("train", "ckpt/.tmp/x"));
        assert!(is_published("reconstruct", "sparse/0/cameras.bin"));
        assert!(is_published("reconstruct", "reconstruct.json"));
        assert!(!is_published("reconstruct", "images/0001.jpg"));
    }
}
