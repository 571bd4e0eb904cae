//! Upper (and lower) bounds of every numeric job parameter and submission setting, enforced when a
//! job file is read — by `kiln run`, `kiln submit` and the HTTP API alike — so that a typo or a
//! hostile request (`steps = 9.2e18`, `init_random_points = 1e12`) is refused at once with the
//! field and the limit, instead of holding a GPU for years or exhausting a worker's memory.
//!
//! The bounds are generous: each is far above what any published recipe uses (3DGS trains 30 k
//! steps to a few million splats), and each says why it is where it is. The table in
//! `docs/job-file.md` (section "Limits") is [`markdown_table`]; a test keeps the two equal and
//! another checks that every numeric field a job file can hold has a bound here.

use std::path::Path;

use serde_json::Value;

use crate::spec::JobSpec;
use crate::{Error, Result};

/// One bound: a job-file field (`table.key`; for lists, every element and the list's length).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub field: &'static str,
    pub min: f64,
    pub max: f64,
    /// For list fields, the most elements; 0 for scalars.
    pub max_len: usize,
    pub why: &'static str,
}

const fn scalar(field: &'static str, min: f64, max: f64, why: &'static str) -> Limit {
    Limit {
        field,
        min,
        max,
        max_len: 0,
        why,
    }
}

const fn list(field: &'static str, min: f64, max: f64, max_len: usize, why: &'static str) -> Limit {
    Limit {
        field,
        min,
        max,
        max_len,
        why,
    }
}

const STEPS: f64 = 1_000_000.0;
const STEPS_WHY: &str = "33× the 30 k steps of the 3DGS paper";

/// Every numeric job-file parameter's bound.
pub const LIMITS: &[Limit] = &[
    scalar(
        "reconstruct.sequential_overlap",
        1.0,
        1000.0,
        "frames matched around each video frame",
    ),
    scalar(
        "reconstruct.max_image_size",
        64.0,
        16384.0,
        "pixels on the long side; 16 K covers any camera",
    ),
    scalar(
        "reconstruct.max_num_features",
        64.0,
        65536.0,
        "SIFT features per image; COLMAP's GPU default is 8192",
    ),
    scalar(
        "reconstruct.focal_length_35mm",
        1.0,
        2000.0,
        "mm, 35 mm equivalent (fisheye to 2 m telephoto)",
    ),
    scalar(
        "reconstruct.min_registered_fraction",
        0.0,
        1.0,
        "a fraction",
    ),
    scalar(
        "reconstruct.min_points_per_image",
        0.0,
        1_000_000.0,
        "3D points per registered photo",
    ),
    scalar(
        "reconstruct.max_frames",
        1.0,
        100_000.0,
        "frames taken from a video",
    ),
    scalar(
        "reconstruct.min_frame_interval_s",
        0.0,
        3600.0,
        "seconds between video frames",
    ),
    scalar("ingest.max_side", 16.0, 16384.0, "pixels on the long side"),
    scalar("train.steps", 1.0, STEPS, STEPS_WHY),
    scalar("train.seed", 0.0, u64::MAX as f64, "any 64-bit seed"),
    scalar(
        "train.sh_degree",
        0.0,
        3.0,
        "3DGS uses spherical harmonics up to degree 3",
    ),
    scalar("train.densify_from", 0.0, STEPS, STEPS_WHY),
    scalar("train.densify_until", 0.0, STEPS, STEPS_WHY),
    scalar("train.densify_every", 1.0, STEPS, STEPS_WHY),
    scalar(
        "train.densify_grad_threshold",
        0.0,
        1.0,
        "the paper's 2e-4, 5000× over",
    ),
    scalar("train.opacity_reset_every", 1.0, STEPS, STEPS_WHY),
    scalar("train.sh_increase_every", 0.0, STEPS, STEPS_WHY),
    scalar(
        "train.max_splats",
        1.0,
        50_000_000.0,
        "about 12 GB of parameters and Adam state",
    ),
    scalar(
        "train.init_random_points",
        1.0,
        10_000_000.0,
        "random initial splats",
    ),
    scalar(
        "train.init_min_points",
        0.0,
        10_000_000.0,
        "random points topping up a sparse point set",
    ),
    scalar(
        "train.lambda_dssim",
        0.0,
        1.0,
        "a weight between L1 and D-SSIM",
    ),
    list("train.background", 0.0, 1.0, 3, "linear RGB in 0..1"),
    scalar(
        "train.eval_every",
        0.0,
        10_000.0,
        "every Nth photo held out (0 = none)",
    ),
    scalar("train.init_opacity", 0.0, 1.0, "an opacity"),
    scalar(
        "train.init_scale",
        0.0,
        1000.0,
        "a multiple of the neighbour distance",
    ),
    scalar("train.opacity_reg", 0.0, 1.0, "MCMC uses 0.01"),
    scalar("train.scale_reg", 0.0, 1.0, "MCMC uses 0.01"),
    scalar("train.noise_lr", 0.0, 1e8, "MCMC uses 5e5"),
    scalar(
        "train.mcmc_growth",
        0.0,
        10.0,
        "MCMC grows 5 % per refinement",
    ),
    scalar("train.lr_means_init", 0.0, 1.0, "3DGS uses 1.6e-4"),
    scalar("train.lr_means_final", 0.0, 1.0, "3DGS uses 1.6e-6"),
    scalar("train.lr_log_scales", 0.0, 1.0, "3DGS uses 5e-3"),
    scalar("train.lr_rotations", 0.0, 1.0, "3DGS uses 1e-3"),
    scalar("train.lr_logit_opacities", 0.0, 1.0, "3DGS uses 5e-2"),
    scalar("train.lr_sh_dc", 0.0, 1.0, "3DGS uses 2.5e-3"),
    scalar("train.image_cache_mb", 0.0, 1_048_576.0, "MiB (1 TiB)"),
    scalar("train.log_every", 1.0, STEPS, STEPS_WHY),
    scalar("train.checkpoint_every", 0.0, STEPS, STEPS_WHY),
    list(
        "decimate.ratios",
        0.0,
        1.0,
        16,
        "fractions of the triangles; 16 levels",
    ),
    scalar(
        "decimate.target_error",
        0.0,
        1.0,
        "relative to the mesh extent",
    ),
    scalar(
        "tile.max_splats_per_tile",
        1.0,
        16_777_216.0,
        "16 M splats (about 400 MB per tile)",
    ),
    scalar(
        "tile.max_depth",
        1.0,
        32.0,
        "levels below the root; enough for the leaf budget",
    ),
    scalar("tile.gzip_level", 1.0, 9.0, "gzip's levels, 1 fastest"),
    scalar("tile.sh1_bits", 1.0, 8.0, "SPZ stores at most 8 bits"),
    scalar("tile.sh_rest_bits", 1.0, 8.0, "SPZ stores at most 8 bits"),
    scalar(
        "tile.spz_version",
        2.0,
        3.0,
        "the SPZ versions spz_2 readers decode",
    ),
    scalar("tile.fanout", 2.0, 4.0, "children per tile (2 or 4)"),
    scalar(
        "tile.refine_steps",
        0.0,
        100_000.0,
        "optimisation steps per LOD level",
    ),
    scalar(
        "mesh_tile.max_triangles_per_tile",
        1.0,
        16_777_216.0,
        "16 M triangles",
    ),
    scalar("mesh_tile.root_fraction", 0.0, 1.0, "a fraction"),
    scalar(
        "mesh_tile.max_simplify_error",
        0.0,
        1.0,
        "relative to the mesh extent",
    ),
    scalar(
        "mesh_tile.max_texture_size",
        1.0,
        16_384.0,
        "pixels per image side",
    ),
    list(
        "eval.taus_px",
        0.0,
        10_000.0,
        32,
        "screen-space error in pixels",
    ),
    list("eval.budgets", 1.0, 1e9, 16, "splats"),
    list(
        "eval.orbit_radii",
        0.01,
        100.0,
        16,
        "multiples of the scene radius",
    ),
    scalar("eval.orbit_views", 1.0, 360.0, "cameras per orbit ring"),
    scalar("eval.orbit_size_px", 16.0, 8192.0, "pixels"),
];

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

/// Check every numeric field of `spec` (and the settings `train` does not serialise) against
/// [`LIMITS`].
///
/// # Errors
/// [`Error::Field`] naming the first field out of bounds, its bound and why.
pub fn check_spec(spec: &JobSpec, path: &Path) -> Result<()> {
    let mut doc = serde_json::to_value(spec).unwrap_or(Value::Null);
    // JSON has no NaN or infinity (serde_json writes them as null): find them in the TOML form.
    if let Some((field, x)) = non_finite(spec) {
        return Err(Error::Field {
            path: path.into(),
            field,
            expected: "a finite number".into(),
            found: x.to_string(),
        });
    }
    // Settings that are not part of the stage's cache key are not serialised; bound them too.
    if let Some(train) = doc.get_mut("train").and_then(Value::as_object_mut) {
        for (k, v) in [
            ("image_cache_mb", spec.train.image_cache_mb),
            ("log_every", spec.train.log_every as u64),
            ("checkpoint_every", spec.train.checkpoint_every as u64),
        ] {
            train.insert(k.into(), Value::from(v));
        }
    }
    for (field, value) in numeric_leaves(&doc) {
        let Some(limit) = LIMITS.iter().find(|l| l.field == field) else {
            continue;
        };
        match value {
            Leaf::Number(x) if !(limit.min..=limit.max).contains(&x) => {
                return Err(out_of_bounds(path, limit, format_number(x)));
            }
            Leaf::Length(n) if n > limit.max_len => {
                return Err(Error::Field {
                    path: path.into(),
                    field: field.clone(),
                    expected: format!("at most {} values ({})", limit.max_len, limit.why),
                    found: format!("{n} values"),
                });
            }
            _ => {}
        }
    }
    Ok(())
}

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

fn out_of_bounds(path: &Path, limit: &Limit, found: String) -> Error {
    Error::Field {
        path: path.into(),
        field: limit.field.into(),
        expected: format!(
            "{} ..= {} ({})",
            format_number(limit.min),
            format_number(limit.max),
            limit.why
        ),
        found,
    }
}

/// A clearer error for a number TOML could not store in its field (serde says "invalid value:
/// integer `-5`, expected usize"): the field (`table.key`, found from the error's position in
/// `text`) with its bound from [`LIMITS`] when it has one, else the field with the range of whole
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
    let bound = LIMITS.iter().find(|l| l.field == field);
    let expected = match bound {
        Some(l) => format!(
            "a whole number {} ..= {} ({})",
            format_number(l.min),
            format_number(l.max),
            l.why
        ),
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

/// The first NaN or infinite number among the job file's fields (`table.key`), if any.
fn non_finite(spec: &JobSpec) -> Option<(String, f64)> {
    let doc = toml::Value::try_from(spec).ok()?;
    for (table, body) in doc.as_table()? {
        let Some(fields) = body.as_table() else {
            continue;
        };
        for (key, value) in fields {
            let floats: Vec<f64> = match value {
                toml::Value::Float(x) => vec![*x],
                toml::Value::Array(items) => {
                    items.iter().filter_map(toml::Value::as_float).collect()
                }
                _ => Vec::new(),
            };
            if let Some(x) = floats.into_iter().find(|x| !x.is_finite()) {
                return Some((format!("{table}.{key}"), x));
            }
        }
    }
    None
}

/// A numeric leaf of a job file: a number, or the length of a list of numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Leaf {
    Number(f64),
    Length(usize),
}

/// Every number in `doc` by its `table.key` path (list elements share their list's path), plus
/// each list's length.
fn numeric_leaves(doc: &Value) -> Vec<(String, Leaf)> {
    let mut out = Vec::new();
    let Some(tables) = doc.as_object() else {
        return out;
    };
    for (table, body) in tables {
        let Some(fields) = body.as_object() else {
            continue;
        };
        for (key, value) in fields {
            let field = format!("{table}.{key}");
            match value {
                Value::Number(n) => out.push((field, Leaf::Number(as_f64(n)))),
                Value::Array(items) => {
                    out.push((field.clone(), Leaf::Length(items.len())));
                    for n in items.iter().filter_map(Value::as_number) {
                        out.push((field.clone(), Leaf::Number(as_f64(n))));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

fn as_f64(n: &serde_json::Number) -> f64 {
    n.as_f64().unwrap_or(f64::INFINITY)
}

/// A bound or value without float noise: integers as integers, large values in exponent form.
fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// The table of bounds in `docs/job-file.md` (section "Limits").
pub fn markdown_table() -> String {
    let mut s = String::from("| Field | Bounds | Why |\n|---|---|---|\n");
    for l in LIMITS {
        let len = if l.max_len > 0 {
            format!(", at most {} values", l.max_len)
        } else {
            String::new()
        };
        s += &format!(
            "| `{}` | {} ..= {}{len} | {} |\n",
            l.field,
            format_number(l.min),
            format_number(l.max),
            l.why
        );
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

    fn spec(extra: &str) -> Result<JobSpec> {
        JobSpec::from_toml(
            &format!(
                "name = \"x\"\nkind = \"capture\"\ninput = \"s3://bkt/in\"\noutput = \"s3://bkt/out\"\n{extra}"
            ),
            Path::new("job.toml"),
        )
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
        doc["train"]["image_cache_mb"] = 1.into();
        doc["train"]["log_every"] = 1.into();
        doc["train"]["checkpoint_every"] = 1.into();
        doc["tile"]["fanout"] = 2.into();
        let leaves = numeric_leaves(&doc);
        assert!(leaves.len() > 40, "{leaves:?}");
        for (field, _) in leaves {
            assert!(
                LIMITS.iter().any(|l| l.field == field),
                "`{field}` has no bound in jobs/src/limits.rs"
            );
        }
        // And no bound names a field that does not exist.
        let fields: Vec<String> = numeric_leaves(&doc).into_iter().map(|(f, _)| f).collect();
        for l in LIMITS {
            assert!(
                fields.iter().any(|f| f == l.field),
                "stale bound {}",
                l.field
            );
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
