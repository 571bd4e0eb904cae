//! Job files: a TOML document naming the job kind, the input and output by URL or path, and
//! per-stage parameters. Unknown keys are errors (a typo must not silently fall back to a default).
//!
//! ```toml
//! name = "fox"
//! kind = "capture"                        # or "mesh", "splats"
//! input = "dataset://capture-fox-instantngp"   # s3://bucket/prefix, file:///abs, or a path
//! output = "out/fox"
//! georef = "-1.1088,50.8020,10,0"         # optional: lon, lat, height (m), heading (deg)
//! # [reconstruct] mode / camera_model / min_registered_fraction / max_frames … (captures
//! # without poses: a folder of photos or a video, posed by COLMAP)
//! [ingest]
//! max_side = 270
//! [train]
//! steps = 3000
//! # [tile] max_splats_per_tile / gzip_level (splat tilesets),
//! # [mesh_tile] max_triangles_per_tile (mesh jobs)
//! ```

use std::path::{Path, PathBuf};

use kiln_pipeline::dag::JobKind;
use kiln_pipeline::plan::JobPlan;
use kiln_pipeline::stages::{
    decimate::DecimateParams, eval::EvalParams, ingest::IngestParams,
    reconstruct::ReconstructParams, tile::georef::Georef, tile::mesh::MeshTileParams,
    tile::splat::SplatTileParams, train::TrainParams,
};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A parsed job file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Human name; also names the work directory.
    pub name: String,
    pub kind: JobKind,
    /// Input URL or path (`dataset://NAME[/SUB]` resolves through the dataset manifest).
    pub input: String,
    /// Output URL or path (a folder / prefix); relative paths are from the current directory.
    pub output: String,
    /// Capture jobs: COLMAP structure-from-motion for inputs without camera poses.
    #[serde(default)]
    pub reconstruct: ReconstructParams,
    #[serde(default)]
    pub ingest: IngestParams,
    #[serde(default)]
    pub train: TrainParams,
    #[serde(default)]
    pub decimate: DecimateParams,
    #[serde(default)]
    pub tile: SplatTileParams,
    /// Mesh jobs: HLOD tiler parameters (`max_triangles_per_tile`, `root_fraction`,
    /// `max_simplify_error`).
    #[serde(default)]
    pub mesh_tile: MeshTileParams,
    /// Splat jobs: what the `eval` stage scores (`taus_px`, `budgets`, orbit settings).
    #[serde(default)]
    pub eval: EvalParams,
    /// Georeference of the output tileset, `"lon,lat,height[,heading]"` (degrees, degrees,
    /// metres above the WGS84 ellipsoid, degrees clockwise from north); absent = local metres.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub georef: Option<Georef>,
    /// `true`: a stage that gives warnings (a missing texture, a skipped camera, a clamped value)
    /// fails the job instead of recording them (`kiln_pipeline::warnings`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

impl JobSpec {
    /// Read and validate a job file.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::Spec`] with the TOML parser's line and
    /// column for syntax errors, unknown keys or wrong types; [`Error::Field`] for empty names/URLs
    /// and for parameters out of bounds (each table's `validate()`), naming `table.key`.
    pub fn from_file(path: &Path) -> Result<JobSpec> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parse a job file's text; `path` is used in messages only.
    ///
    /// # Errors
    /// As [`JobSpec::from_file`].
    pub fn from_toml(text: &str, path: &Path) -> Result<JobSpec> {
        let spec: JobSpec = toml::from_str(text).map_err(|e| {
            crate::limits::integer_error(text, &e, path).unwrap_or_else(|| Error::Spec {
                path: path.into(),
                message: e.to_string(),
            })
        })?;
        for (field, value) in [
            ("name", &spec.name),
            ("input", &spec.input),
            ("output", &spec.output),
        ] {
            if value.trim().is_empty() {
                return Err(Error::Field {
                    path: path.into(),
                    field: field.into(),
                    expected: "a non-empty string".into(),
                    found: "\"\"".into(),
                });
            }
        }
        for (field, value) in [("input", &spec.input), ("output", &spec.output)] {
            kiln_pipeline::location::Location::parse(value).map_err(|e| Error::Field {
                path: path.into(),
                field: field.into(),
                expected: "a path, file:///abs/path, s3://BUCKET/PREFIX or dataset://NAME/PATH"
                    .into(),
                found: e.to_string(),
            })?;
        }
        // The name is a folder under $KILN_HOME/work: `..` or `.x` must not be one.
        if !spec.name.starts_with(|c: char| c.is_ascii_alphanumeric())
            || spec.name.len() > 128
            || !spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(Error::Field {
                path: path.into(),
                field: "name".into(),
                expected:
                    "up to 128 letters, digits, '-', '_' or '.', starting with a letter or digit"
                        .into(),
                found: spec.name.clone(),
            });
        }
        let invalid = |e: kiln_pipeline::Error| match e {
            kiln_pipeline::Error::Param {
                stage,
                field,
                expected,
                found,
            } => Error::Field {
                path: path.into(),
                field: format!("{stage}.{field}"),
                expected,
                found,
            },
            other => Error::Spec {
                path: path.into(),
                message: other.to_string(),
            },
        };
        // Each table checks its bounds (`kiln_pipeline::bounds::Bounded`) and its own rules.
        spec.reconstruct.validate().map_err(invalid)?;
        spec.ingest.validate().map_err(invalid)?;
        spec.train.validate().map_err(invalid)?;
        spec.decimate.validate().map_err(invalid)?;
        spec.tile.validate().map_err(invalid)?;
        spec.mesh_tile.validate().map_err(invalid)?;
        spec.eval.validate().map_err(invalid)?;
        // Tables another kind of job uses are allowed (shared `--set` overrides in `kiln regress`)
        // but said, so that a misplaced table is not silently ignored.
        let unused = |table: &str| {
            tracing::warn!(
                file = %path.display(),
                "[{table}] has no effect on a {} job; remove it or change `kind`",
                spec.kind.name()
            );
        };
        if spec.kind != JobKind::Capture && spec.train != TrainParams::default() {
            unused("train");
        }
        if spec.kind != JobKind::Capture && spec.reconstruct != ReconstructParams::default() {
            unused("reconstruct");
        }
        if spec.kind != JobKind::Mesh && spec.decimate != DecimateParams::default() {
            unused("decimate");
        }
        if spec.kind == JobKind::Mesh && spec.tile != SplatTileParams::default() {
            unused("tile");
        }
        if spec.kind != JobKind::Mesh && spec.mesh_tile != MeshTileParams::default() {
            unused("mesh_tile");
        }
        if spec.kind == JobKind::Mesh && spec.eval != EvalParams::default() {
            unused("eval");
        }
        Ok(spec)
    }

    /// Resolve into a runnable plan: `resolve_input` maps `dataset://` URLs (and passes others
    /// through); the work directory is `work_root/<name>`.
    ///
    /// # Errors
    /// Whatever `resolve_input` returns, as [`Error::Field`] on `input`.
    pub fn plan(
        &self,
        job_id: &str,
        work_root: &Path,
        spec_path: &Path,
        resolve_input: &dyn Fn(&str) -> std::result::Result<String, String>,
    ) -> Result<JobPlan> {
        let input = resolve_input(&self.input).map_err(|problem| Error::Field {
            path: spec_path.into(),
            field: "input".into(),
            expected: "a reachable URL, path or dataset://NAME".into(),
            found: format!("{} ({problem})", self.input),
        })?;
        Ok(JobPlan {
            job_id: job_id.into(),
            name: self.name.clone(),
            kind: self.kind,
            input,
            output: self.output.clone(),
            work_dir: work_root.join(&self.name),
            reconstruct: self.reconstruct.clone(),
            ingest: self.ingest.clone(),
            train: self.train.clone(),
            decimate: self.decimate.clone(),
            // Tiles declare the rasterization the splats were trained for.
            tile: SplatTileParams {
                antialiased: self.tile.antialiased
                    || (self.kind == JobKind::Capture && self.train.antialiased),
                ..self.tile
            },
            mesh_tile: self.mesh_tile,
            eval: self.eval.clone(),
            georef: self.georef,
            device: Default::default(),
            stage_cache: None,
            fence: None,
            strict: self.strict,
        })
    }
}

/// Default root of work directories: `$KILN_HOME/work`, else the user's data dir `kiln/work`.
pub fn default_work_root() -> PathBuf {
    kiln_home().join("work")
}

/// `$KILN_HOME`, else `<data dir>/kiln` (e.g. `~/.local/share/kiln`), else `./.kiln`.
pub fn kiln_home() -> PathBuf {
    if let Some(h) = std::env::var_os("KILN_HOME") {
        return PathBuf::from(h);
    }
    dirs::data_dir()
        .map(|d| d.join("kiln"))
        .unwrap_or_else(|| PathBuf::from(".kiln"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_capture_job_parses_with_defaults() {
        let s = JobSpec::from_toml(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"dataset://x\"\noutput = \"out/fox\"\n[ingest]\nmax_side = 270\n",
            Path::new("fox.toml"),
        )
        .unwrap();
        assert_eq!(s.kind, JobKind::Capture);
        assert_eq!(s.ingest.max_side, Some(270));
    }

    #[test]
    fn names_that_are_not_plain_folder_names_are_refused() {
        for name in ["..", ".", ".hidden", "-x", "a/b", &"n".repeat(129)] {
            let e = JobSpec::from_toml(
                &format!("name = \"{name}\"\nkind = \"mesh\"\ninput = \"s3://bkt/i\"\noutput = \"s3://bkt/o\"\n"),
                Path::new("job.toml"),
            )
            .unwrap_err();
            assert!(e.to_string().contains("`name`"), "{name}: {e}");
        }
    }

    #[test]
    fn antialiased_training_marks_the_tiles_antialiased() {
        let plan = |extra: &str| {
            let toml =
                format!("name = \"a\"\nkind = \"capture\"\ninput = \"x\"\noutput = \"y\"\n{extra}");
            JobSpec::from_toml(&toml, Path::new("a.toml"))
                .unwrap()
                .plan(
                    "id",
                    Path::new("/w"),
                    Path::new("a.toml"),
                    &|l| Ok(l.into()),
                )
                .unwrap()
                .tile
                .antialiased
        };
        assert!(plan("[train]\nantialiased = true\n"));
        assert!(!plan("[train]\nantialiased = false\n"));
        assert!(plan("[tile]\nantialiased = true\n"));
    }

    #[test]
    fn unknown_key_is_an_error_naming_the_file_and_key() {
        let err = JobSpec::from_toml(
            "name = \"a\"\nkind = \"mesh\"\ninput = \"x\"\noutput = \"y\"\n[ingest]\nmax_sid = 3\n",
            Path::new("j.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("j.toml") && err.contains("max_sid"), "{err}");
    }

    #[test]
    fn a_misspelt_tile_key_is_an_error() {
        let err = JobSpec::from_toml(
            "name = \"a\"\nkind = \"splats\"\ninput = \"x\"\noutput = \"y\"\n[tile]\nmax_splat_per_tile = 10\n",
            Path::new("job.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("job.toml") && err.contains("max_splat_per_tile"),
            "{err}"
        );
    }

    #[test]
    fn unknown_kind_is_rejected() {
        let err = JobSpec::from_toml(
            "name=\"a\"\nkind=\"video\"\ninput=\"x\"\noutput=\"y\"\n",
            Path::new("j.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("video"), "{err}");
    }

    #[test]
    fn out_of_range_stage_parameters_fail_at_parse_time() {
        let base = "name=\"a\"\nkind=\"mesh\"\ninput=\"x\"\noutput=\"y\"\n";
        for (table, field) in [
            ("[train]\nsteps = 0\n", "train.steps"),
            ("[ingest]\nmax_side = 0\n", "ingest.max_side"),
            ("[decimate]\nratios = [0.5, 1.0]\n", "decimate.ratios[0]"),
            ("[decimate]\nratios = []\n", "decimate.ratios"),
            ("[tile]\ngzip_level = 0\n", "tile.gzip_level"),
            (
                "[mesh_tile]\nmax_triangles_per_tile = 0\n",
                "mesh_tile.max_triangles_per_tile",
            ),
            (
                "[tile]\nmax_splats_per_tile = 0\n",
                "tile.max_splats_per_tile",
            ),
            ("[ingest]\nup_axis = \"up\"\n", "ingest.up_axis"),
            (
                "[reconstruct]\nmin_registered_fraction = 2\n",
                "reconstruct.min_registered_fraction",
            ),
            (
                "[reconstruct]\ncamera_model = \"FISHEYE\"\n",
                "reconstruct.camera_model",
            ),
        ] {
            let err = JobSpec::from_toml(&format!("{base}{table}"), Path::new("j.toml"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("j.toml") && err.contains(field),
                "{table}: {err}"
            );
        }
    }

    #[test]
    fn empty_output_is_rejected() {
        let err = JobSpec::from_toml(
            "name=\"a\"\nkind=\"mesh\"\ninput=\"x\"\noutput=\"\"\n",
            Path::new("j.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("output"), "{err}");
    }
}
