//! Which storage each team may read and write: `kiln serve --tenants FILE`.
//!
//! Rows in the queue are scoped to the token's team, but the workers read inputs and write outputs
//! with the server's credentials, so without this file any team could name any location those
//! credentials reach — another team's inputs, or another team's published output prefix. With it,
//! a submission whose input is not under one of its team's `inputs` prefixes, or whose output is
//! not under one of its `outputs` prefixes, is refused with 403 naming the field and the allowed
//! prefixes; a team the file does not list may submit nothing.
//!
//! ```toml
//! [team.art]
//! inputs = ["s3://media/art/", "dataset://"]   # "dataset://" = every built-in sample
//! outputs = ["s3://media/art/published/"]
//!
//! [team.geo]
//! inputs = ["s3://media/geo/captures/"]
//! outputs = ["s3://media/geo/tiles/"]
//! priority = [-10, 10]        # optional: the priorities this team may ask for
//! max_active_jobs = 50        # optional: queued + running jobs at once (429 beyond)
//! max_job_file_bytes = 8192   # optional: below the server-wide 64 KiB
//! require_budget = true       # optional: every submission must give budget_usd (400 without)
//! max_estimate_usd = 25.0     # optional: refuse jobs whose estimate is higher (403)
//! ```
//!
//! `max_estimate_usd` is compared with `kiln plan`'s estimate of the job on the reference GPU
//! ([`crate::estimate::REFERENCE_GPU_SKU`]) at on-demand prices of the built-in catalog, learnt
//! from the server's ledger like `kiln plan`'s. It is a rough model (jobs/src/estimate.rs): a
//! guard against a job that is clearly too big for the team, not a bill; `budget_usd` is what
//! stops a running job.
//!
//! Prefixes match whole path components (`s3://media/art` does not admit `s3://media/artwork`).
//! Locations are compared after parsing ([`kiln_pipeline::location::Location`]), so `..`, `//` and
//! case tricks are refused before they are compared. Local paths (with `--allow-local-paths`)
//! are compared the same way, by components.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use kiln_pipeline::location::Location;
use serde::Deserialize;

use super::ApiError;

/// The parsed tenants file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tenants {
    teams: BTreeMap<String, TeamStorage>,
}

/// One team's allowed prefixes and limits, parsed.
#[derive(Debug, Clone, PartialEq)]
struct TeamStorage {
    inputs: Vec<Prefix>,
    outputs: Vec<Prefix>,
    priority: Option<[i64; 2]>,
    max_active_jobs: Option<i64>,
    max_job_file_bytes: Option<usize>,
    require_budget: bool,
    max_estimate_usd: Option<f64>,
}

/// An allowed prefix: a location, or every built-in dataset.
#[derive(Debug, Clone, PartialEq)]
enum Prefix {
    AnyDataset,
    At(Location, String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsToml {
    team: BTreeMap<String, TeamToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamToml {
    #[serde(default)]
    inputs: Vec<String>,
    #[serde(default)]
    outputs: Vec<String>,
    priority: Option<[i64; 2]>,
    max_active_jobs: Option<i64>,
    max_job_file_bytes: Option<usize>,
    #[serde(default)]
    require_budget: bool,
    max_estimate_usd: Option<f64>,
}

impl Tenants {
    /// Read and check a tenants file.
    ///
    /// # Errors
    /// A message naming the file, the team and the prefix that cannot be used.
    pub fn from_file(path: &Path) -> Result<Tenants, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse a tenants file's text.
    ///
    /// # Errors
    /// A message naming the team and the prefix that cannot be used.
    pub fn from_toml(text: &str) -> Result<Tenants, String> {
        let doc: TenantsToml = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut teams = BTreeMap::new();
        for (team, t) in doc.team {
            let parse = |list: &[String], field: &str| -> Result<Vec<Prefix>, String> {
                list.iter()
                    .map(|p| parse_prefix(p).map_err(|e| format!("team.{team}.{field}: {e}")))
                    .collect()
            };
            let storage = TeamStorage {
                inputs: parse(&t.inputs, "inputs")?,
                outputs: parse(&t.outputs, "outputs")?,
                priority: t.priority,
                max_active_jobs: t.max_active_jobs,
                max_job_file_bytes: t.max_job_file_bytes,
                require_budget: t.require_budget,
                max_estimate_usd: t.max_estimate_usd,
            };
            if let Some(cap) = storage.max_estimate_usd
                && !(cap >= 0.0 && cap.is_finite())
            {
                return Err(format!(
                    "team.{team}.max_estimate_usd: expected a non-negative number of US dollars, found {cap}"
                ));
            }
            if let Some([lo, hi]) = storage.priority
                && lo > hi
            {
                return Err(format!(
                    "team.{team}.priority: [{lo}, {hi}] is empty; write [low, high]"
                ));
            }
            if storage.outputs.contains(&Prefix::AnyDataset) {
                return Err(format!(
                    "team.{team}.outputs: built-in samples are read-only; name an s3:// prefix"
                ));
            }
            teams.insert(team, storage);
        }
        Ok(Tenants { teams })
    }

    /// Check `team`'s submission: `input` under one of its `inputs`, `output` under one of its
    /// `outputs`. `base` makes relative local paths absolute (the server's directory).
    ///
    /// # Errors
    /// [`ApiError::Forbidden`] naming the field and the team's allowed prefixes.
    pub fn check(
        &self,
        team: &str,
        input: &str,
        output: &str,
        base: &Path,
    ) -> Result<(), ApiError> {
        let Some(storage) = self.teams.get(team) else {
            return Err(ApiError::Forbidden {
                what: "job file",
                message: format!(
                    "team `{team}` has no storage in this server's tenants file; ask the \
                     operator to add [team.{team}] with its inputs and outputs prefixes"
                ),
            });
        };
        for (field, value, allowed) in [
            ("input", input, &storage.inputs),
            ("output", output, &storage.outputs),
        ] {
            let inside = Location::parse(value)
                .ok()
                .map(|l| absolute(l, base))
                .is_some_and(|l| allowed.iter().any(|p| within(&l, p)));
            if !inside {
                let list: Vec<String> = allowed
                    .iter()
                    .map(|p| match p {
                        Prefix::AnyDataset => "dataset://".to_string(),
                        Prefix::At(_, shown) => shown.clone(),
                    })
                    .collect();
                return Err(ApiError::Forbidden {
                    what: if field == "input" {
                        "job file field `input`"
                    } else {
                        "job file field `output`"
                    },
                    message: format!(
                        "`{}` is outside what team `{team}` may {}: {}",
                        super::error::quoted(value),
                        if field == "input" { "read" } else { "write" },
                        if list.is_empty() {
                            "nothing".to_string()
                        } else {
                            list.join(", ")
                        }
                    ),
                });
            }
        }
        Ok(())
    }
}

/// A submission's settings that a team's limits apply to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Asked {
    pub priority: i64,
    pub job_file_bytes: usize,
    /// The submission's `budget_usd`.
    pub budget_usd: Option<f64>,
}

impl Tenants {
    /// `team`'s limit on its queued and running jobs, for [`crate::queue::Queue::submit_within`]
    /// (which counts and inserts atomically); `None`: no limit.
    pub fn max_active_jobs(&self, team: &str) -> Option<i64> {
        self.teams.get(team).and_then(|t| t.max_active_jobs)
    }

    /// `team`'s cap on a job's estimated cost, USD; `None`: no cap (the caller then need not
    /// estimate).
    pub fn max_estimate_usd(&self, team: &str) -> Option<f64> {
        self.teams.get(team).and_then(|t| t.max_estimate_usd)
    }

    /// Check a job's estimate (USD on the reference GPU, on demand) against `team`'s
    /// `max_estimate_usd`.
    ///
    /// # Errors
    /// [`ApiError::Forbidden`] naming `max_estimate_usd`, the estimate and the cap.
    pub fn check_estimate(&self, team: &str, estimate_usd: f64) -> Result<(), ApiError> {
        match self.max_estimate_usd(team) {
            Some(cap) if estimate_usd > cap => Err(ApiError::Forbidden {
                what: "job file",
                message: format!(
                    "its estimated cost ${estimate_usd:.4} (kiln plan, reference GPU {}, on \
                     demand) is over team `{team}`'s max_estimate_usd of ${cap:.4}; make the job \
                     smaller (fewer train steps, a smaller input) or ask the operator to raise it",
                    crate::estimate::REFERENCE_GPU_SKU
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Check `team`'s priority range, job-file size and required budget. (The active-job quota
    /// is checked as the job is inserted: [`Tenants::max_active_jobs`].)
    ///
    /// # Errors
    /// [`ApiError::Forbidden`] for a priority outside the team's range or a job file over its
    /// size; [`ApiError::BadRequest`] naming `budget_usd` when the team must give one.
    pub fn check_limits(&self, team: &str, asked: Asked) -> Result<(), ApiError> {
        let Some(t) = self.teams.get(team) else {
            return Ok(());
        };
        if let Some([lo, hi]) = t.priority
            && !(lo..=hi).contains(&asked.priority)
        {
            return Err(ApiError::Forbidden {
                what: "priority",
                message: format!(
                    "{} is outside team `{team}`'s range {lo} ..= {hi}",
                    asked.priority
                ),
            });
        }
        if let Some(max) = t.max_job_file_bytes
            && asked.job_file_bytes > max
        {
            return Err(ApiError::Forbidden {
                what: "job file",
                message: format!(
                    "{} bytes is over team `{team}`'s limit of {max} bytes",
                    asked.job_file_bytes
                ),
            });
        }
        if t.require_budget && asked.budget_usd.is_none() {
            return Err(ApiError::BadRequest {
                what: "field `budget_usd`",
                message: format!(
                    "team `{team}` must give a spending cap (require_budget in the server's \
                     tenants file); submit JSON {{\"job\": \"<toml>\", \"budget_usd\": 5.0}} \
                     or `kiln submit --budget-usd 5.0`"
                ),
            });
        }
        Ok(())
    }
}

fn parse_prefix(text: &str) -> Result<Prefix, String> {
    if text == "dataset://" {
        return Ok(Prefix::AnyDataset);
    }
    let loc = Location::parse(text).map_err(|e| e.to_string())?;
    match &loc {
        Location::Memory(_) => Err(format!("`{text}`: memory:// cannot be shared with workers")),
        Location::Local(p) if !p.is_absolute() || has_parent_dir(p) => Err(format!(
            "`{text}`: local prefixes must be absolute paths without `..`"
        )),
        _ => Ok(Prefix::At(loc, text.to_string())),
    }
}

fn has_parent_dir(p: &Path) -> bool {
    p.components().any(|c| c == Component::ParentDir)
}

fn absolute(loc: Location, base: &Path) -> Location {
    match loc {
        Location::Local(p) => Location::Local(base.join(p)),
        other => other,
    }
}

/// Whether `loc` lies under `prefix`, by whole components.
fn within(loc: &Location, prefix: &Prefix) -> bool {
    let components = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect()
    };
    let starts = |a: Vec<String>, b: Vec<String>| a.len() >= b.len() && a[..b.len()] == b[..];
    match (loc, prefix) {
        (Location::Dataset(_), Prefix::AnyDataset) => true,
        (_, Prefix::AnyDataset) => false,
        (
            Location::S3 { bucket, key },
            Prefix::At(
                Location::S3 {
                    bucket: pb,
                    key: pk,
                },
                _,
            ),
        ) => bucket == pb && starts(components(key), components(pk)),
        (Location::Dataset(d), Prefix::At(Location::Dataset(pd), _)) => {
            d.name == pd.name && starts(components(&d.sub), components(&pd.sub))
        }
        (Location::Local(p), Prefix::At(Location::Local(pp), _)) => {
            !has_parent_dir(p) && PathBuf::from(p).starts_with(pp)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    const FILE: &str = r#"
        [team.art]
        inputs = ["s3://media/art/", "dataset://"]
        outputs = ["s3://media/art/published"]
        [team.geo]
        inputs = ["s3://media/geo/captures", "dataset://capture-fox-instantngp"]
        outputs = ["s3://media/geo/tiles/", "/srv/geo/out"]
    "#;

    fn check(team: &str, input: &str, output: &str) -> Result<(), ApiError> {
        Tenants::from_toml(FILE)
            .unwrap()
            .check(team, input, output, Path::new("/srv/kiln"))
    }

    #[test]
    fn each_team_reads_and_writes_only_under_its_prefixes() {
        check(
            "art",
            "s3://media/art/in/fox",
            "s3://media/art/published/fox",
        )
        .unwrap();
        check(
            "art",
            "dataset://mesh-khronos-gltf-samples/Avocado",
            "s3://media/art/published",
        )
        .unwrap();
        check(
            "geo",
            "dataset://capture-fox-instantngp/images",
            "/srv/geo/out/fox",
        )
        .unwrap();
        for (team, input, output, field) in [
            // Team geo reading art's input, writing into art's published prefix.
            (
                "geo",
                "s3://media/art/in/fox",
                "s3://media/geo/tiles/x",
                "`input`",
            ),
            (
                "geo",
                "s3://media/geo/captures/a",
                "s3://media/art/published/x",
                "`output`",
            ),
            // Whole components only; other buckets; other datasets.
            (
                "art",
                "s3://media/artwork/x",
                "s3://media/art/published/x",
                "`input`",
            ),
            (
                "art",
                "s3://other/art/x",
                "s3://media/art/published/x",
                "`input`",
            ),
            (
                "geo",
                "dataset://splat-playcanvas",
                "s3://media/geo/tiles/x",
                "`input`",
            ),
            // Climbing out of an allowed local prefix.
            (
                "geo",
                "s3://media/geo/captures/a",
                "/srv/geo/out/../../etc",
                "`output`",
            ),
            ("geo", "s3://media/geo/captures/a", "out/fox", "`output`"),
        ] {
            let e = check(team, input, output).unwrap_err();
            assert_eq!(e.status(), StatusCode::FORBIDDEN, "{input} {output}");
            let m = e.to_string();
            assert!(m.contains(field) && m.contains(team), "{m}");
        }
        let e = check("nobody", "s3://media/art/in", "s3://media/art/published").unwrap_err();
        assert!(e.to_string().contains("[team.nobody]"), "{e}");
    }

    #[test]
    fn team_limits_bound_priority_file_size_and_budget() {
        let t = Tenants::from_toml(
            "[team.art]\ninputs = [\"dataset://\"]\noutputs = [\"s3://m/art\"]\n\
             priority = [-5, 5]\nmax_active_jobs = 2\nmax_job_file_bytes = 100\n\
             require_budget = true\nmax_estimate_usd = 1.5\n",
        )
        .unwrap();
        let asked = Asked {
            priority: 0,
            job_file_bytes: 50,
            budget_usd: Some(1.0),
        };
        t.check_limits("art", asked).unwrap();
        for (a, status, says) in [
            (
                Asked {
                    priority: 6,
                    ..asked
                },
                StatusCode::FORBIDDEN,
                "-5 ..= 5",
            ),
            (
                Asked {
                    priority: i64::MIN,
                    ..asked
                },
                StatusCode::FORBIDDEN,
                "-5 ..= 5",
            ),
            (
                Asked {
                    job_file_bytes: 101,
                    ..asked
                },
                StatusCode::FORBIDDEN,
                "100 bytes",
            ),
            (
                Asked {
                    budget_usd: None,
                    ..asked
                },
                StatusCode::BAD_REQUEST,
                "budget_usd",
            ),
        ] {
            let e = t.check_limits("art", a).unwrap_err();
            assert_eq!(e.status(), status, "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        assert_eq!(t.max_active_jobs("art"), Some(2));
        assert_eq!(t.max_active_jobs("geo"), None);
        t.check_estimate("art", 1.5).unwrap();
        let e = t.check_estimate("art", 1.5001).unwrap_err();
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert!(e.to_string().contains("max_estimate_usd"), "{e}");
        t.check_estimate("geo", 1e9).unwrap();
        let e = Tenants::from_toml("[team.a]\npriority = [5, -5]\n").unwrap_err();
        assert!(e.contains("empty"), "{e}");
        let e = Tenants::from_toml("[team.a]\nmax_estimate_usd = -1.0\n").unwrap_err();
        assert!(e.contains("team.a.max_estimate_usd"), "{e}");
    }

    #[test]
    fn unusable_prefixes_are_refused_when_the_file_is_read() {
        for (file, says) in [
            ("[team.a]\noutputs = [\"dataset://\"]\n", "read-only"),
            ("[team.a]\ninputs = [\"S3://b/x\"]\n", "team.a.inputs"),
            ("[team.a]\noutputs = [\"relative/out\"]\n", "absolute"),
            ("[team.a]\noutputs = [\"memory://x\"]\n", "memory"),
            ("[team.a]\nbuckets = []\n", "unknown field"),
        ] {
            let e = Tenants::from_toml(file).unwrap_err();
            assert!(e.contains(says), "{file}: {e}");
        }
    }
}
