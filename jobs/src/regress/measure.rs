//! The metrics of one finished job, by name, from its stage summaries (the same figures the ledger
//! records):
//!
//! | metric | from | unit |
//! |---|---|---|
//! | `psnr_db`, `ssim` | train: held-out mean on 8-bit images | dB, 1 |
//! | `splats` | train (capture) or ingest (splats job) | count |
//! | `steps_per_s` | train loop | steps/s (info) |
//! | `lod<i>.triangles`, `lod<i>.error_m` | decimate, level i (0 = full) | count, metres |
//! | `tiles`, `tile_levels`, `tile_bytes` | tile: tiles, depth, GLB bytes | count, count, bytes |
//! | `publish_loss_db` | eval: full splats − full-detail tiles against the photos (captures) | dB |
//! | `tau<τ>.psnr_db`, `tau<τ>.ssim` | eval: the τ cut against the photos (captures) | dB, 1 |
//! | `tau<τ>.psnr_vs_full_db`, `tau<τ>.ssim_vs_full` | eval: the τ cut against the full splats | dB, 1 |
//! | `tau<τ>.splats`, `tau<τ>.bytes` | eval: splats shown, bytes fetched by the τ cut | count, bytes |
//! | `tiles_root.psnr_db`, `tiles_leaves.psnr_db` | mesh jobs' output: the tileset's root level and its leaves decoded from the tile GLBs, rendered and scored against `lods/lod_0.glb` ([`measure_delivered_mesh`]) | dB |
//! | `wall_s` | all stages that ran | seconds (info) |

use std::collections::BTreeMap;
use std::path::Path;

use kiln_pipeline::run::StageOutcome;
use kiln_pipeline::stages::summary::{IngestSummary, StageSummary};

/// Metric name → value for a job's stage outcomes. Summary fields that are absent are simply not
/// measured (a baselined metric then shows as missing).
#[must_use]
pub fn measure(stages: &[StageOutcome]) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut put = |name: &str, v: Option<f64>| {
        if let Some(v) = v {
            m.insert(name.to_string(), v);
        }
    };
    let mut wall = 0.0;
    for st in stages {
        wall += st.usage.wall_s;
        let Some(summary) = StageSummary::of(st) else {
            continue;
        };
        match summary {
            StageSummary::Train(t) => {
                put("psnr_db", Some(t.psnr_db));
                put("ssim", Some(t.ssim));
                put("splats", Some(t.splats as f64));
                put("steps_per_s", Some(t.steps_per_s));
            }
            StageSummary::Reconstruct(r) => {
                put("registered_fraction", Some(r.registered_fraction));
                put(
                    "mean_reprojection_error_px",
                    Some(r.mean_reprojection_error_px),
                );
                put("points", Some(r.points as f64));
            }
            StageSummary::Ingest(IngestSummary::Splats(s)) => put("splats", Some(s.splats as f64)),
            StageSummary::Ingest(_) | StageSummary::Publish(_) => {}
            StageSummary::Decimate(d) => {
                for (i, lod) in d.lods.iter().enumerate() {
                    put(&format!("lod{i}.triangles"), Some(lod.triangles as f64));
                    put(&format!("lod{i}.error_m"), Some(lod.error_m));
                }
            }
            StageSummary::Tile(t) => {
                put("tiles", Some(t.tiles() as f64));
                put("tile_levels", Some(f64::from(t.levels())));
                put("tile_bytes", Some(t.content_bytes() as f64));
            }
            StageSummary::Eval(e) => {
                put("publish_loss_db", e.publish_loss_db);
                for (name, cut) in &e.cuts {
                    if !BASELINED_TAUS.contains(&name.as_str()) {
                        continue;
                    }
                    put(&format!("{name}.psnr_db"), cut.psnr_db);
                    put(&format!("{name}.psnr_vs_full_db"), cut.psnr_vs_full_db);
                    put(&format!("{name}.splats"), Some(cut.splats));
                    put(&format!("{name}.bytes"), Some(cut.bytes));
                }
            }
        }
    }
    put("wall_s", Some(wall));
    m
}

/// For a mesh job's output (`tileset.json` and `lods/lod_0.glb`): `tiles_root.psnr_db` and
/// `tiles_leaves.psnr_db`, the PSNR of the tileset's root level and of its leaves, as a client
/// draws them from the tile GLBs, against the source (`lod_0`), from the job page's 3/4 view
/// ([`crate::job_page::mesh_view::delivered_levels`]). A dropped material or texture, a mesh
/// lying on its side or a lost part lowers them. Nothing for other jobs; an unreadable tile
/// leaves its metric out (reported as missing against a baseline).
#[must_use]
pub fn measure_delivered_mesh(output_dir: &Path) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let (tileset, lod0) = (
        output_dir.join("tileset.json"),
        output_dir.join("lods").join("lod_0.glb"),
    );
    if !(tileset.is_file() && lod0.is_file()) {
        return m;
    }
    let Ok(levels) = crate::job_page::mesh_view::delivered_levels(
        &tileset,
        &lod0,
        crate::job_page::mesh_view::DELIVERED_RENDER_PX,
    ) else {
        return m;
    };
    let last = levels.len().saturating_sub(1);
    for (name, level) in [
        ("tiles_root.psnr_db", levels.first()),
        ("tiles_leaves.psnr_db", levels.get(last)),
    ] {
        if let Some(db) = level.and_then(|l| l.as_ref().ok()).and_then(|l| l.psnr_db) {
            // Identical renders have no finite PSNR; a fixed value stands for them.
            m.insert(
                name.to_string(),
                db.min(crate::job_page::mesh_view::IDENTICAL_PSNR_DB),
            );
        }
    }
    m
}

/// Per-cut fields of the eval stage's summary that are metrics.
const EVAL_CUT_FIELDS: [&str; 6] = [
    "psnr_db",
    "ssim",
    "psnr_vs_full_db",
    "ssim_vs_full",
    "splats",
    "bytes",
];

/// The τ cuts measured for baselines: full detail, CesiumJS's default, and two coarse ones (the
/// eval stage scores more; these four show a regression anywhere along the curve).
const BASELINED_TAUS: [&str; 4] = ["tau0", "tau16", "tau64", "tau120"];

/// Whether `name` is a metric [`measure`] can produce (used to reject typos in baselines files).
#[must_use]
pub fn is_known_metric(name: &str) -> bool {
    const PLAIN: [&str; 11] = [
        "publish_loss_db",
        "tiles_root.psnr_db",
        "tiles_leaves.psnr_db",
        "psnr_db",
        "ssim",
        "splats",
        "steps_per_s",
        "tiles",
        "tile_levels",
        "tile_bytes",
        "wall_s",
    ];
    if PLAIN.contains(&name) {
        return true;
    }
    if let Some((tau, field)) = name.strip_prefix("tau").and_then(|r| r.split_once('.')) {
        return tau.parse::<f64>().is_ok_and(|t| t >= 0.0) && EVAL_CUT_FIELDS.contains(&field);
    }
    name.strip_prefix("lod")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(level, field)| {
            !level.is_empty()
                && level.bytes().all(|b| b.is_ascii_digit())
                && matches!(field, "triangles" | "error_m")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_pipeline::dag::StageKind;

    #[test]
    fn known_metric_names() {
        for ok in [
            "psnr_db",
            "tiles",
            "lod0.triangles",
            "lod12.error_m",
            "publish_loss_db",
            "tau16.psnr_db",
            "tau120.bytes",
        ] {
            assert!(super::is_known_metric(ok), "{ok}");
        }
        for bad in [
            "tile",
            "lod.triangles",
            "lodx.error_m",
            "lod1.tris",
            "PSNR",
            "tau.psnr_db",
            "tau16.psnr",
        ] {
            assert!(!super::is_known_metric(bad), "{bad}");
        }
    }

    /// Ledger rows recorded by Kiln before its summaries were typed (the pipeline crate's
    /// fixture), as outcomes of `job`.
    fn recorded(job: &str) -> Vec<StageOutcome> {
        let doc: serde_json::Value = serde_json::from_str(include_str!(
            "../../../pipeline/tests/fixtures/ledger_summaries_a4f2db7.json"
        ))
        .unwrap();
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["job"] == job)
            .map(|r| StageOutcome {
                kind: StageKind::builtin(r["stage"].as_str().unwrap()).unwrap(),
                key: String::new(),
                cache_hit: false,
                usage: kiln_pipeline::meter::StageUsage {
                    wall_s: 1.0,
                    ..Default::default()
                },
                summary: r["summary"].clone(),
                recipe: None,
            })
            .collect()
    }

    #[test]
    fn mesh_job_gives_per_lod_counts_errors_and_tiles() {
        let m = measure(&recorded("avocado")[..4]);
        assert_eq!(m["lod0.triangles"], 682.0);
        assert_eq!(m["lod1.triangles"], 341.0);
        assert_eq!(m["lod1.error_m"], 0.0006545995383398148);
        assert_eq!(m["tiles"], 4.0);
        assert_eq!(m["tile_levels"], 4.0);
        assert_eq!(m["tile_bytes"], 10_319_974.0);
        assert_eq!(m["wall_s"], 4.0);
        assert!(!m.contains_key("psnr_db") && !m.contains_key("splats"));
    }

    #[test]
    fn capture_job_gives_quality_splat_count_and_cuts() {
        let m = measure(&recorded("fox"));
        assert_eq!(m["psnr_db"], 29.619881409464817);
        assert_eq!(m["splats"], 56184.0);
        assert_eq!(m["tiles"], 2.0);
        assert!(m["publish_loss_db"] > 0.0 && m["publish_loss_db"] < 0.2);
        for tau in ["tau0", "tau16", "tau64", "tau120"] {
            for field in ["psnr_db", "psnr_vs_full_db", "splats", "bytes"] {
                assert!(m.contains_key(&format!("{tau}.{field}")), "{tau}.{field}");
            }
        }
        assert!(!m.contains_key("tau1.psnr_db"), "only the baselined cuts");
    }

    #[test]
    fn splats_job_counts_the_ingested_splats() {
        let m = measure(&recorded("biker"));
        assert_eq!(m["splats"], 152_746.0);
        assert!(!m.contains_key("psnr_db"));
        assert!(m.contains_key("tau16.psnr_vs_full_db"));
    }
}
