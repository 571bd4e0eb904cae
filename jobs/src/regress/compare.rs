//! Compare measured metrics with their baselines: one [`Check`] per metric.

use std::collections::BTreeMap;

use serde::Serialize;

use super::baselines::{Better, Expectation};

/// The outcome of one metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Within tolerance (or better in the good direction).
    Pass,
    /// Outside tolerance in the bad direction: the run fails.
    Regression,
    /// Baselined but not produced by the run: the run fails.
    Missing,
    /// Informational metric (e.g. wall time): never fails.
    Info,
    /// Produced but not baselined yet (`--update-baselines` adds it): never fails.
    New,
}

impl Status {
    /// Whether this status fails the regression run.
    #[must_use]
    pub fn is_failure(self) -> bool {
        matches!(self, Status::Regression | Status::Missing)
    }
}

/// One metric of one scene, compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub scene: String,
    pub metric: String,
    pub status: Status,
    /// The recorded value, if any.
    pub baseline: Option<f64>,
    /// Allowed deviation (absolute, in the metric's unit), if baselined.
    pub allowed: Option<f64>,
    /// The measured value, if produced.
    pub value: Option<f64>,
    /// `higher`, `lower` or `equal`.
    pub better: &'static str,
}

impl Check {
    /// One line for people: scene, metric, baseline ± tolerance, new value.
    #[must_use]
    pub fn describe(&self) -> String {
        let fmt = |v: Option<f64>| v.map_or_else(|| "—".to_string(), format_value);
        let expect = match (self.baseline, self.allowed) {
            (Some(b), Some(a)) => format!("baseline {} ± {}", format_value(b), format_value(a)),
            _ => "no baseline".into(),
        };
        let direction = match self.better {
            "higher" => " (higher is better)",
            "lower" => " (lower is better)",
            _ => "",
        };
        format!(
            "{} {}: {expect}{direction}, now {}",
            self.scene,
            self.metric,
            fmt(self.value)
        )
    }
}

/// A number as people read it: integers without decimals, others with 4 decimals, and values
/// below 0.01 (errors in metres) in scientific notation.
#[must_use]
pub fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() >= 0.01 {
        format!("{v:.4}")
    } else {
        format!("{v:.4e}")
    }
}

/// Compare one scene's measured metrics with its expectations. Every baselined metric gives one
/// check (Missing when not measured); measured metrics without a baseline are `New`.
#[must_use]
pub fn compare(
    scene: &str,
    expectations: &BTreeMap<String, Expectation>,
    measured: &BTreeMap<String, f64>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for (metric, e) in expectations {
        let value = measured.get(metric).copied();
        let allowed = e.allowed();
        let status = match value {
            None => Status::Missing,
            Some(_) if e.info => Status::Info,
            Some(v) if !v.is_finite() => Status::Regression,
            Some(v) => {
                let ok = match e.better {
                    Better::Higher => v >= e.baseline - allowed,
                    Better::Lower => v <= e.baseline + allowed,
                    Better::Equal => (v - e.baseline).abs() <= allowed,
                };
                if ok { Status::Pass } else { Status::Regression }
            }
        };
        checks.push(Check {
            scene: scene.into(),
            metric: metric.clone(),
            status,
            baseline: Some(e.baseline),
            allowed: Some(allowed),
            value,
            better: match e.better {
                Better::Higher => "higher",
                Better::Lower => "lower",
                Better::Equal => "equal",
            },
        });
    }
    for (metric, &v) in measured {
        if !expectations.contains_key(metric) {
            checks.push(Check {
                scene: scene.into(),
                metric: metric.clone(),
                status: Status::New,
                baseline: None,
                allowed: None,
                value: Some(v),
                better: "equal",
            });
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(baseline: f64, tol: f64, better: Better) -> Expectation {
        Expectation {
            baseline,
            tolerance: Some(tol),
            tolerance_rel: None,
            better,
            info: false,
        }
    }

    fn status(e: Expectation, v: f64) -> Status {
        let ex = BTreeMap::from([("m".to_string(), e)]);
        let me = BTreeMap::from([("m".to_string(), v)]);
        compare("s", &ex, &me)[0].status
    }

    #[test]
    fn higher_is_better_fails_only_on_drops_beyond_tolerance() {
        assert_eq!(status(exp(25.0, 0.5, Better::Higher), 24.6), Status::Pass);
        assert_eq!(status(exp(25.0, 0.5, Better::Higher), 30.0), Status::Pass);
        assert_eq!(
            status(exp(25.0, 0.5, Better::Higher), 24.4),
            Status::Regression
        );
    }

    #[test]
    fn lower_is_better_fails_only_on_rises() {
        assert_eq!(status(exp(0.01, 0.001, Better::Lower), 0.0), Status::Pass);
        assert_eq!(
            status(exp(0.01, 0.001, Better::Lower), 0.0111),
            Status::Regression
        );
    }

    #[test]
    fn equal_fails_both_ways_and_nan_always_fails() {
        assert_eq!(status(exp(341.0, 2.0, Better::Equal), 343.0), Status::Pass);
        assert_eq!(
            status(exp(341.0, 2.0, Better::Equal), 338.0),
            Status::Regression
        );
        assert_eq!(
            status(exp(341.0, 2.0, Better::Equal), f64::NAN),
            Status::Regression
        );
    }

    #[test]
    fn missing_info_and_new_metrics() {
        let mut info = exp(60.0, 0.0, Better::Equal);
        info.info = true;
        let ex = BTreeMap::from([
            ("gone".to_string(), exp(1.0, 0.0, Better::Equal)),
            ("wall_s".to_string(), info),
        ]);
        let me = BTreeMap::from([("wall_s".to_string(), 900.0), ("tiles".to_string(), 3.0)]);
        let checks = compare("fox", &ex, &me);
        let by = |m: &str| checks.iter().find(|c| c.metric == m).unwrap().status;
        assert_eq!(by("gone"), Status::Missing);
        assert_eq!(by("wall_s"), Status::Info);
        assert_eq!(by("tiles"), Status::New);
        assert!(by("gone").is_failure() && !by("wall_s").is_failure());
    }

    #[test]
    fn description_names_scene_metric_baseline_and_value() {
        let ex = BTreeMap::from([("psnr_db".to_string(), exp(21.3, 0.5, Better::Higher))]);
        let me = BTreeMap::from([("psnr_db".to_string(), 18.25)]);
        let d = compare("fox", &ex, &me)[0].describe();
        assert_eq!(
            d,
            "fox psnr_db: baseline 21.3000 ± 0.5000 (higher is better), now 18.2500"
        );
    }
}
