//! JUnit XML of a regression run: one test suite per scene, one test case per metric (classname =
//! scene), so CI systems show which metric of which scene regressed.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::SceneResult;
use super::compare::Status;

/// The JUnit XML text for `scenes`.
///
/// A scene that failed to run is one `error` test case named `run` with the error message; a
/// regressed or missing metric is a `failure` with [`super::compare::Check::describe`] as its
/// message; informational and new metrics pass (their values in the description).
#[must_use]
pub fn junit_xml(scenes: &[SceneResult]) -> String {
    let mut report = Report::new("kiln-regress");
    for s in scenes {
        let mut suite = TestSuite::new(s.name.as_str());
        suite.set_time(Duration::from_secs_f64(s.wall_s.max(0.0)));
        if let Some(err) = &s.error {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message(err.as_str());
            let mut case = TestCase::new("run", status);
            case.set_classname(s.name.as_str());
            suite.add_test_case(case);
        }
        for c in &s.checks {
            let status = if c.status.is_failure() {
                let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
                st.set_message(c.describe());
                st.set_type(match c.status {
                    Status::Missing => "missing",
                    _ => "regression",
                });
                st
            } else {
                let mut st = TestCaseStatus::success();
                st.set_description(c.describe());
                st
            };
            let mut case = TestCase::new(c.metric.as_str(), status);
            case.set_classname(s.name.as_str());
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- JUnit serialisation failed: {e} -->"))
}

#[cfg(test)]
mod tests {
    use super::super::compare::Check;
    use super::*;

    #[test]
    fn failures_and_errors_are_marked_with_scene_and_metric() {
        let scenes = vec![
            SceneResult {
                name: "fox".into(),
                checks: vec![Check {
                    scene: "fox".into(),
                    metric: "psnr_db".into(),
                    status: Status::Regression,
                    baseline: Some(21.0),
                    allowed: Some(0.5),
                    value: Some(18.0),
                    better: "higher",
                }],
                ..SceneResult::default()
            },
            SceneResult {
                name: "maryrose".into(),
                error: Some("poses_bounds.npy: bad shape".into()),
                ..SceneResult::default()
            },
        ];
        let xml = junit_xml(&scenes);
        assert!(xml.contains("<testsuite name=\"fox\""), "{xml}");
        assert!(xml.contains("name=\"psnr_db\"") && xml.contains("classname=\"fox\""));
        assert!(xml.contains("<failure") && xml.contains("now 18"));
        assert!(xml.contains("<error") && xml.contains("bad shape"));
        assert!(xml.contains("failures=\"1\"") && xml.contains("errors=\"1\""));
    }
}
