//! People-facing summaries of a regression run: Markdown (for CI logs and PR comments) and one
//! HTML page linking each scene's job report.

use std::fmt::Write as _;

use super::SceneResult;
use super::compare::{Check, Status, format_value};
use crate::job_page::escape_html as esc;

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Regression => "REGRESSION",
        Status::Missing => "MISSING",
        Status::Info => "info",
        Status::New => "new",
    }
}

/// `n` and `noun`, with an `s` unless n = 1.
fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn cells(c: &Check) -> [String; 4] {
    let baseline = match (c.baseline, c.allowed) {
        (Some(b), Some(a)) => format!("{} ± {}", format_value(b), format_value(a)),
        _ => "—".into(),
    };
    let value = c.value.map_or_else(|| "—".into(), format_value);
    let better = match c.better {
        "higher" => "↑",
        "lower" => "↓",
        _ => "=",
    };
    [baseline, value, better.into(), status_word(c.status).into()]
}

/// Markdown: a verdict line, then per scene a table of metric | baseline ± tolerance | value |
/// better | status, and any run error.
#[must_use]
pub fn markdown(scenes: &[SceneResult], mode: &str) -> String {
    let failures: usize = scenes.iter().map(SceneResult::failure_count).sum();
    let mut md = String::new();
    let verdict = if failures == 0 {
        "passed".to_string()
    } else {
        format!("FAILED ({})", plural(failures, "failing check"))
    };
    let _ = writeln!(md, "# kiln regress ({mode}): {verdict}\n");
    for s in scenes {
        let _ = writeln!(
            md,
            "## {} — {} ({:.1} s)\n",
            s.name,
            if s.failure_count() == 0 {
                "pass"
            } else {
                "FAIL"
            },
            s.wall_s
        );
        if let Some(e) = &s.error {
            // One line: a multi-line error would break the Markdown paragraph.
            let one_line = e.split_whitespace().collect::<Vec<_>>().join(" ");
            let _ = writeln!(md, "Run failed: `{}`\n", one_line.replace('`', "'"));
        }
        if s.checks.is_empty() {
            continue;
        }
        md.push_str("| metric | baseline | value | better | status |\n|---|---|---|---|---|\n");
        for c in &s.checks {
            let [b, v, better, st] = cells(c);
            let _ = writeln!(md, "| {} | {b} | {v} | {better} | {st} |", c.metric);
        }
        md.push('\n');
    }
    md
}

/// One self-contained HTML page: the verdict, per scene the checks table (failures in red) and a
/// link to the scene's job report (`scenes/<name>/output/report/index.html`, relative to the
/// page) when `has_report(name)` says it exists.
#[must_use]
pub fn html(scenes: &[SceneResult], mode: &str, has_report: &dyn Fn(&str) -> bool) -> String {
    let failures: usize = scenes.iter().map(SceneResult::failure_count).sum();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kiln regress</title>\
         <style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:70em}}\
         table{{border-collapse:collapse;margin:0.5em 0 1.5em}}td,th{{border:1px solid #ccc;\
         padding:3px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
         .fail{{background:#fdd;font-weight:bold}}.pass{{color:#070}}.info,.new{{color:#666}}\
         </style></head><body><h1>kiln regress ({}): {}</h1>\
         <p><a href=\"summary.md\">summary.md</a> · <a href=\"junit.xml\">junit.xml</a> · \
         <a href=\"results.json\">results.json</a></p>",
        esc(mode),
        if failures == 0 {
            "passed".to_string()
        } else {
            format!("FAILED — {}", plural(failures, "failing check"))
        }
    );
    for s in scenes {
        let _ = write!(
            h,
            "<h2 id=\"{0}\">{0} <small>({1:.1} s)</small></h2>",
            esc(&s.name),
            s.wall_s
        );
        if has_report(&s.name) {
            let _ = write!(
                h,
                "<p><a href=\"scenes/{0}/output/report/index.html\">job report for {0}</a></p>",
                esc(&s.name)
            );
        }
        if let Some(e) = &s.error {
            let _ = write!(h, "<p class=\"fail\">Run failed: {}</p>", esc(e));
        }
        if s.checks.is_empty() {
            continue;
        }
        h.push_str(
            "<table><tr><th>metric</th><th>baseline ± tolerance</th><th>value</th>\
             <th>better</th><th>status</th></tr>",
        );
        for c in &s.checks {
            let [b, v, better, st] = cells(c);
            let class = if c.status.is_failure() {
                "fail"
            } else {
                match c.status {
                    Status::Pass => "pass",
                    Status::Info => "info",
                    _ => "new",
                }
            };
            let _ = write!(
                h,
                "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.metric),
                esc(&b),
                esc(&v),
                better,
                st
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenes() -> Vec<SceneResult> {
        vec![SceneResult {
            name: "avocado".into(),
            wall_s: 3.0,
            checks: vec![
                Check {
                    scene: "avocado".into(),
                    metric: "lod1.triangles".into(),
                    status: Status::Regression,
                    baseline: Some(341.0),
                    allowed: Some(6.82),
                    value: Some(170.0),
                    better: "equal",
                },
                Check {
                    scene: "avocado".into(),
                    metric: "wall_s".into(),
                    status: Status::Info,
                    baseline: Some(3.0),
                    allowed: Some(0.0),
                    value: Some(2.5),
                    better: "equal",
                },
            ],
            ..SceneResult::default()
        }]
    }

    #[test]
    fn markdown_has_verdict_and_one_row_per_check() {
        let md = markdown(&scenes(), "quick");
        assert!(md.starts_with("# kiln regress (quick): FAILED (1 failing check)"));
        assert!(md.contains("| lod1.triangles | 341 ± 6.8200 | 170 | = | REGRESSION |"));
        assert!(md.contains("| wall_s | 3 ± 0 | 2.5000 | = | info |"));
    }

    #[test]
    fn html_marks_failures_escapes_and_links_reports() {
        let mut s = scenes();
        s[0].error = Some("<bad> & worse".into());
        let h = html(&s, "quick", &|_| true);
        assert!(h.contains("class=\"fail\"><td>lod1.triangles"));
        assert!(h.contains("&lt;bad&gt; &amp; worse"));
        assert!(h.contains("scenes/avocado/output/report/index.html"));
        assert!(!html(&s, "quick", &|_| false).contains("report/index.html"));
    }
}
