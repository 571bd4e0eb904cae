//! The cost table of a job page: every stage attempt from the ledger (state, device, wall / CPU /
//! GPU seconds, bytes read and written) with totals and GPU-hours, and each stage's summary.

use crate::report::JobReport;

use super::escape_html;

/// The ledger rows of `report` as an HTML `<table>` with a total row, the GPU-hours
/// (GPU-seconds / 3600) and each attempt's stage summary (JSON) in a collapsed `<details>`.
/// Every ledger string is HTML-escaped.
pub fn cost_table_html(report: &JobReport) -> String {
    let mut out = String::from(
        "<table class=\"cost\">\n<tr><th>stage</th><th class=\"n\">try</th><th>state</th>\
         <th>device</th><th class=\"n\">wall s</th><th class=\"n\">CPU s</th>\
         <th class=\"n\">GPU s</th><th class=\"n\">bytes in</th><th class=\"n\">bytes out</th></tr>\n",
    );
    for s in &report.stages {
        let class = if s.state == "failed" {
            " class=\"err\""
        } else {
            ""
        };
        out.push_str(&format!(
            "<tr{class}><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.1}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
            escape_html(&s.stage),
            s.attempt,
            escape_html(&s.state),
            escape_html(&s.device),
            s.wall_s,
            s.cpu_s,
            s.gpu_s,
            group_digits(s.bytes_read),
            group_digits(s.bytes_written),
        ));
    }
    let t = &report.totals;
    out.push_str(&format!(
        "<tr class=\"total\"><td>total</td><td class=\"n\">{}</td><td>{}</td><td></td>\
         <td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.1}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n</table>\n",
        t.attempts,
        if t.failed_attempts > 0 {
            format!("{} failed", t.failed_attempts)
        } else {
            String::new()
        },
        t.wall_s,
        t.cpu_s,
        t.gpu_s,
        group_digits(t.bytes_read),
        group_digits(t.bytes_written),
    ));
    out.push_str(&format!("<p>GPU-hours <b>{:.4}</b></p>\n", t.gpu_hours));
    for s in &report.stages {
        if let Some(sum) = &s.summary {
            let text = serde_json::to_string_pretty(sum).unwrap_or_else(|_| sum.to_string());
            out.push_str(&format!(
                "<details><summary>{} (try {}) summary</summary><pre>{}</pre></details>\n",
                escape_html(&s.stage),
                s.attempt,
                escape_html(&text)
            ));
        }
        if let Some(e) = &s.error {
            out.push_str(&format!(
                "<p class=\"err\">{} (try {}): {}</p>\n",
                escape_html(&s.stage),
                s.attempt,
                escape_html(e)
            ));
        }
    }
    out
}

/// `n` with thin spaces between groups of three digits (`25 350 186`), for byte counts.
pub fn group_digits(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{JobRow, StageRow};

    fn row(stage: &str, state: &str, gpu_s: f64) -> StageRow {
        StageRow {
            stage: stage.into(),
            attempt: 1,
            state: state.into(),
            device: "cuda:0".into(),
            wall_s: 2.0,
            cpu_s: 1.5,
            gpu_s,
            bytes_read: 1_234_567,
            bytes_written: 10,
            summary: None,
            error: (state == "failed").then(|| "boom <here>".into()),
            ..Default::default()
        }
    }

    #[test]
    fn cost_table_has_a_row_per_attempt_totals_and_gpu_hours() {
        let stages = vec![
            row("train", "failed", 1800.0),
            row("train", "succeeded", 5400.0),
        ];
        let r = JobReport {
            job: JobRow {
                id: "j".into(),
                name: "n".into(),
                kind: "capture".into(),
                input: "i".into(),
                output: "o".into(),
                state: "succeeded".into(),
                created_at: "t".into(),
                finished_at: None,
                error: None,
            },
            totals: crate::report::totals(&stages),
            stages,
        };
        let html = cost_table_html(&r);
        assert_eq!(html.matches("<tr").count(), 4, "header, 2 attempts, total");
        assert!(html.contains("GPU-hours <b>2.0000</b>"));
        assert!(html.contains("1 failed"));
        assert!(html.contains("2\u{2009}469\u{2009}134"), "total bytes in");
        assert!(html.contains("boom &lt;here&gt;"));
    }

    #[test]
    fn digits_are_grouped_in_threes() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1\u{2009}000");
        assert_eq!(group_digits(-25350186), "-25\u{2009}350\u{2009}186");
    }
}
