//! Bounds of every numeric job parameter and submission setting, enforced when a job file is read
//! — by `kiln run`, `kiln submit` and the HTTP API alike — so that a typo or a hostile request
//! (`steps = 9.2e18`, `init_random_points = 1e12`) is refused at once with the field and the limit,
//! instead of holding a GPU for years or exhausting a worker's memory.
//!
//! Each stage's parameter type declares the bounds of its own table
//! ([`kiln_pipeline::bounds::Bounded`]) and its `validate()` checks them, which reading a job file
//! runs for every table. This module only collects those tables ([`TABLES`]): to name a field's
//! bound when TOML cannot even store the value in its field ([`integer_error`]), and for the table
//! in `docs/job-file.md` (section "Limits"), which is [`markdown_table`]; a test keeps the two
//! equal and another checks that every numeric field a job file can hold has a bound. The bounds
//! of the submission settings beside the job file and of its size are here.

use std::path::Path;

use kiln_pipeline::bounds::{Bound, Bounded, format_number};
use kiln_pipeline::stages::{
    decimate::DecimateParams, eval::EvalParams, ingest::IngestParams,
    reconstruct::ReconstructParams, tile::mesh::MeshTileParams, tile::splat::SplatTileParams,
    train::TrainParams,
};

use crate::{Error, Result};

/// Every job-file table (`train`, `mesh_tile`, …) with its parameter type's bounds, in the
/// job file's order.
pub const TABLES: &[(&str, &[Bound])] = &[
    (ReconstructParams::TABLE, ReconstructParams::BOUNDS),
    (IngestParams::TABLE, IngestParams::BOUNDS),
    (TrainParams::TABLE, TrainParams::BOUNDS),
    (DecimateParams::TABLE, DecimateParams::BOUNDS),
    (SplatTileParams::TABLE, SplatTileParams::BOUNDS),
    (MeshTileParams::TABLE, MeshTileParams::BOUNDS),
    (EvalParams::TABLE, EvalParams::BOUNDS),
];

/// The bound of the job-file field `table.key`, if it has one.
pub fn bound(field: &str) -> Option<&'static Bound> {
    let (table, key) = field.split_once('.')?;
    TABLES
        .iter()
        .filter(|(t, _)| *t == table)
        .flat_map(|(_, bounds)| bounds.iter())
        .find(|b| b.key == key)
}

/// The largest job file accepted, in bytes (the real ones are under 2 KiB).
pub const MAX_JOB_FILE_BYTES: usize = 64 * 1024;

/// Submission settings beside the job file: (name, min, max, why).
pub const SUBMIT_LIMITS: &[(&str, f64, f64, &str)] = &[
    (
        "priority",
        -1000.0,
        1000.0,
        "queue order; the range is shared by all teams",
    ),
    (
        "max_attempts",
        1.0,
        20.0,
        "attempts per stage before dead-lettering",
    ),
    ("budget_usd", 0.0, 1_000_000.0, "USD per job"),
];

/// Check the job file's size and the submission settings against [`MAX_JOB_FILE_BYTES`] and
/// [`SUBMIT_LIMITS`].
///
/// # Errors
/// [`Error::Field`] naming the setting and its bound.
pub fn check_submission(
    text: &str,
    path: &Path,
    priority: i64,
    max_attempts: i64,
    budget_usd: Option<f64>,
) -> Result<()> {
    if text.len() > MAX_JOB_FILE_BYTES {
        return Err(Error::Field {
            path: path.into(),
            field: "(the job file)".into(),
            expected: format!("at most {MAX_JOB_FILE_BYTES} bytes"),
            found: format!("{} bytes", text.len()),
        });
    }
    for (name, value) in [
        ("priority", Some(priority as f64)),
        ("max_attempts", Some(max_attempts as f64)),
        ("budget_usd", budget_usd),
    ] {
        let Some(value) = value else { continue };
        let (_, min, max, why) = SUBMIT_LIMITS
            .iter()
            .find(|(n, ..)| *n == name)
            .copied()
            .expect("every submission setting has a limit");
        if !(value.is_finite() && (min..=max).contains(&value)) {
            return Err(Error::Field {
                path: path.into(),
                field: name.into(),
                expected: format!("{} ..= {} ({why})", format_number(min), format_number(max)),
                found: format_number(value),
            });
        }
    }
    Ok(())
}

/// A clearer error for a number TOML could not store in its field (serde says "invalid value:
/// integer `-5`, expected usize"): the field (`table.key`, found from the error's position in
/// `text`) with its bound ([`bound`]) when it has one, else the field with the range of whole
/// numbers it takes. `None` when the error is something else or its field cannot be found.
pub(crate) fn integer_error(text: &str, err: &toml::de::Error, path: &Path) -> Option<Error> {
    let message = err.message();
    let (what, integer_type) = message.split_once(", expected ")?;
    let range = match integer_type.trim() {
        "u8" => "0 ..= 255",
        "u16" => "0 ..= 65535",
        "u32" => "0 ..= 4294967295",
        "u64" | "usize" => "≥ 0",
        "i32" | "i64" | "isize" => "any",
        _ => return None,
    };
    // "invalid value: integer `-5`" (out of the type's range) or "invalid type: floating point
    // `2.5`" / "invalid type: string \"2\"" (not a whole number at all).
    let found = match what.split('`').nth(1) {
        Some(v) => v.to_string(),
        None => what.trim_start_matches("invalid type: ").to_string(),
    };
    let field = field_at(text, err.span()?.start)?;
    let expected = match bound(&field) {
        Some(b) => format!("a whole number {}", b.expected()),
        None if range == "any" => "a whole number".into(),
        None => format!("a whole number {range}"),
    };
    Some(Error::Field {
        path: path.into(),
        field,
        expected,
        found,
    })
}

/// The `table.key` whose value covers byte `at` of the TOML `text` (top-level keys alone).
fn field_at(text: &str, at: usize) -> Option<String> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let covers = |item: &toml_edit::Item| item.span().is_some_and(|s| s.contains(&at));
    for (key, item) in doc.as_table().iter() {
        match item.as_table_like() {
            Some(table) => {
                for (inner, value) in table.iter() {
                    if covers(value) {
                        return Some(format!("{key}.{inner}"));
                    }
                }
            }
            None if covers(item) => return Some(key.to_string()),
            None => {}
        }
    }
    None
}

/// The table of bounds in `docs/job-file.md` (section "Limits").
pub fn markdown_table() -> String {
    let mut s = String::from("| Field | Bounds | Why |\n|---|---|---|\n");
    for (table, bounds) in TABLES {
        for b in *bounds {
            let len = if b.max_len > 0 {
                format!(", at most {} values", b.max_len)
            } else {
                String::new()
            };
            s += &format!("| `{table}.{}` | {}{len} | {} |\n", b.key, b.range(), b.why);
        }
    }
    for (name, min, max, why) in SUBMIT_LIMITS {
        s += &format!(
            "| `{name}` (submission) | {} ..= {} | {why} |\n",
            format_number(*min),
            format_number(*max)
        );
    }
    s += &format!(
        "| job file size (submission) | ≤ {MAX_JOB_FILE_BYTES} bytes | real ones are under 2 KiB |\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::JobSpec;

    fn spec(extra: &str) -> Result<JobSpec> {
        JobSpec::from_toml(
            &format!(
                "name = \"x\"\nkind = \"capture\"\ninput = \"s3://bkt/in\"\noutput = \"s3://bkt/out\"\n{extra}"
            ),
            Path::new("job.toml"),
        )
    }

    /// Every `table.key` of `doc` that holds a number or a list of numbers.
    fn numeric_fields(doc: &serde_json::Value) -> Vec<String> {
        let mut out = Vec::new();
        for (table, body) in doc.as_object().into_iter().flatten() {
            for (key, value) in body.as_object().into_iter().flatten() {
                let numeric = match value {
                    serde_json::Value::Number(_) => true,
                    serde_json::Value::Array(items) => items.iter().any(|v| v.is_number()),
                    _ => false,
                };
                if numeric {
                    out.push(format!("{table}.{key}"));
                }
            }
        }
        out
    }

    #[test]
    fn every_numeric_field_a_job_file_can_hold_has_a_bound() {
        // Every table at its defaults, plus the list and optional fields set.
        let s = spec(
            "[reconstruct]\nmax_num_features = 1024\nfocal_length_35mm = 26.0\n\
             [train]\nrandom_background = true\n",
        )
        .unwrap();
        let mut doc = serde_json::to_value(&s).unwrap();
        // With the settings `train` keeps out of its cache key (not serialised).
        doc["train"] = s.train.bounded_values();
        doc["tile"]["fanout"] = 2.into();
        let fields = numeric_fields(&doc);
        assert!(fields.len() > 40, "{fields:?}");
        for field in &fields {
            assert!(
                bound(field).is_some(),
                "`{field}` has no bound (its parameter type's `impl Bounded`)"
            );
        }
        // And no bound names a field that does not exist.
        for (table, bounds) in TABLES {
            for b in *bounds {
                let field = format!("{table}.{}", b.key);
                assert!(fields.contains(&field), "stale bound {field}");
            }
        }
    }

    #[test]
    fn the_defaults_and_the_shipped_job_files_are_within_bounds() {
        spec("").unwrap();
        let jobs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/jobs");
        for entry in std::fs::read_dir(&jobs).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "toml") {
                JobSpec::from_file(&entry.path()).unwrap();
            }
        }
    }

    #[test]
    fn out_of_bound_values_are_refused_naming_the_field_and_the_limit() {
        for (toml, field, limit) in [
            (
                "[train]\nsteps = 9200000000000000000\n",
                "train.steps",
                "1000000",
            ),
            (
                "[train]\ninit_random_points = 1000000000000\n",
                "train.init_random_points",
                "10000000",
            ),
            (
                "[train]\nmax_splats = 100000000\n",
                "train.max_splats",
                "50000000",
            ),
            (
                "[train]\nimage_cache_mb = 10000000\n",
                "train.image_cache_mb",
                "1048576",
            ),
            (
                "[tile]\nrefine_steps = 1000000\n",
                "tile.refine_steps",
                "100000",
            ),
            ("[ingest]\nmax_side = 100000\n", "ingest.max_side", "16384"),
            ("[eval]\norbit_views = 100000\n", "eval.orbit_views", "360"),
        ] {
            let e = spec(toml).unwrap_err().to_string();
            assert!(
                e.contains(field) && e.contains(limit) && e.contains("job.toml"),
                "{e}"
            );
        }
        for (toml, field) in [
            (
                "[train]\ndensify_grad_threshold = nan\n",
                "train.densify_grad_threshold",
            ),
            ("[train]\nlr_sh_dc = inf\n", "train.lr_sh_dc"),
            ("[eval]\ntaus_px = [1.0, -inf]\n", "eval.taus_px"),
        ] {
            let e = spec(toml).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("finite"), "{e}");
        }
        let e = spec("[train]\nbackground = [0.0, 0.0, 0.0, 0.5]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("background") && e.contains("3 values"), "{e}");
        let many = format!("[eval]\ntaus_px = [{}]\n", vec!["1.0"; 100].join(", "));
        let e = spec(&many).unwrap_err().to_string();
        assert!(
            e.contains("eval.taus_px") && e.contains("at most 32"),
            "{e}"
        );
    }

    #[test]
    fn submission_settings_are_bounded() {
        let p = Path::new("request body");
        check_submission("x", p, 0, 3, Some(10.0)).unwrap();
        for (priority, attempts, budget, field) in [
            (i64::MAX, 3, None, "priority"),
            (i64::MIN, 3, None, "priority"),
            (0, 1_000_000_000_000_000_000, None, "max_attempts"),
            (0, 0, None, "max_attempts"),
            (0, 3, Some(f64::NAN), "budget_usd"),
            (0, 3, Some(-1.0), "budget_usd"),
        ] {
            let e = check_submission("x", p, priority, attempts, budget).unwrap_err();
            assert!(e.to_string().contains(field), "{e}");
        }
        let big = "#".repeat(MAX_JOB_FILE_BYTES + 1);
        let e = check_submission(&big, p, 0, 3, None).unwrap_err();
        assert!(e.to_string().contains("65536 bytes"), "{e}");
    }

    #[test]
    fn the_job_file_docs_list_every_bound() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/job-file.md");
        let page = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            page.contains(&markdown_table()),
            "the table of bounds in docs/job-file.md (section \"Limits\") differs; replace it \
             with jobs::limits::markdown_table():\n{}",
            markdown_table()
        );
    }

    #[test]
    fn a_number_its_field_cannot_hold_names_the_field_and_its_bound() {
        let err = spec("[mesh_tile]\nmax_triangles_per_tile = -5\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "field `mesh_tile.max_triangles_per_tile`: expected a whole number 1 ..= 16777216"
            ) && err.contains("found -5"),
            "{err}"
        );
        let err = spec("[tile]\nfanout = 300\n").unwrap_err().to_string();
        assert!(
            err.contains("field `tile.fanout`: expected a whole number 2 ..= 4"),
            "{err}"
        );
        // Not a whole number at all: said so, even inside the range.
        let err = spec("[tile]\nmax_depth = 2.5\n").unwrap_err().to_string();
        assert!(
            err.contains("`tile.max_depth`: expected a whole number 1 ..= 32")
                && err.contains("found 2.5"),
            "{err}"
        );
        let err = spec("[tile]\nfanout = \"2\"\n").unwrap_err().to_string();
        assert!(
            err.contains("`tile.fanout`") && err.contains("found string"),
            "{err}"
        );
        // A field without a bound still says what it takes, not a Rust type.
        let err = spec("[train]\nseed = -1\n").unwrap_err().to_string();
        assert!(!err.contains("u64") && err.contains("train.seed"), "{err}");
    }
}
