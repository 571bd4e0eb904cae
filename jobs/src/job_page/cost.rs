//! The cost tables of a job page: each stage's bill in USD (compute, storage, egress, total,
//! waste) with its allocated / busy / idle GPU-seconds, priced by the same functions as `kiln
//! report` ([`crate::report::stage_costs`]); then every stage attempt from the ledger (state,
//! device, wall / CPU / GPU seconds, bytes read and written) with totals and GPU-hours, and each
//! stage's summary.

use crate::costing::Pricing;
use crate::report::{JobReport, StageCost, job_cost, measured, stage_costs};

use super::escape_html;

/// The job's bill priced by `pricing` ([`stage_bill_html`]), then the ledger rows of `report` as
/// an HTML `<table>` with a total row, the GPU-hours (GPU-seconds / 3600) and each attempt's stage
/// summary (JSON) in a collapsed `<details>`. Every ledger string is HTML-escaped.
pub fn cost_table_html(report: &JobReport, pricing: &Pricing) -> String {
    let mut out = stage_bill_html(report, pricing);
    out.push_str(
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

/// Per stage and in total: compute USD (GPU or CPU), storage USD, egress USD, USD (their sum)
/// and waste USD (six decimals: a CPU stage costs fractions of a cent), then allocated, busy and
/// idle GPU-seconds (one decimal; `not measured` where NVML did not measure, never 0), and a line
/// naming the price catalog, the pricing mode and where storage and egress were priced.
pub fn stage_bill_html(report: &JobReport, pricing: &Pricing) -> String {
    let mut out = String::from(
        "<table class=\"bill\">\n<tr><th>stage</th><th class=\"n\">tries</th>\
         <th class=\"n\">compute USD</th><th class=\"n\">storage USD</th>\
         <th class=\"n\">egress USD</th><th class=\"n\">USD</th><th class=\"n\">waste USD</th>\
         <th class=\"n\">alloc GPU-s</th><th class=\"n\">busy GPU-s</th>\
         <th class=\"n\">idle GPU-s</th></tr>\n",
    );
    for s in stage_costs(report, pricing) {
        out.push_str(&bill_row("", &s));
    }
    out.push_str(&bill_row(" class=\"total\"", &job_cost(report, pricing)));
    out.push_str("</table>\n");
    let catalog = pricing.catalog;
    let place = catalog.output_place(&report.job.output).map_or_else(
        || "storage and egress not priced (the catalog has no [placement])".to_string(),
        |p| match &p.route {
            Some(r) => format!("output at {}: egress {}", p.place, r.describe()),
            None => format!("output at {}, beside the workers: no egress", p.place),
        },
    );
    out.push_str(&format!(
        "<p>Prices: catalog {} ({}), {}; {}.</p>\n",
        escape_html(&catalog.version),
        escape_html(&catalog.file),
        escape_html(pricing.tier.name()),
        escape_html(&place)
    ));
    out
}

/// One `<tr>` of [`stage_bill_html`].
fn bill_row(class: &str, s: &StageCost) -> String {
    let c = &s.cost;
    format!(
        "<tr{class}><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.6}</td>\
         <td class=\"n\">{:.6}</td><td class=\"n\">{:.6}</td><td class=\"n\">{:.6}</td>\
         <td class=\"n\">{:.6}</td><td class=\"n\">{:.1}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td></tr>\n",
        escape_html(&s.stage),
        s.gpu.attempts,
        c.gpu_usd + c.cpu_usd,
        c.storage_usd,
        c.egress_usd,
        c.usd,
        c.waste_usd,
        s.gpu.allocated_s,
        measured(s.gpu.busy_s),
        measured(s.gpu.idle_s),
    )
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
        let r = report_of(stages);
        let catalog = crate::prices::PriceCatalog::default_catalog();
        let html = cost_table_html(&r, &crate::job_page::default_pricing(&catalog));
        assert_eq!(
            html.matches("<tr").count(),
            4 + 3,
            "bill: header, train, total; attempts: header, 2 attempts, total"
        );
        assert!(html.contains("GPU-hours <b>2.0000</b>"));
        assert!(html.contains("1 failed"));
        assert!(html.contains("2\u{2009}469\u{2009}134"), "total bytes in");
        assert!(html.contains("boom &lt;here&gt;"));
    }

    /// A job published to another region (a `[[destination]]` rule): ingest on the CPU, train on
    /// an H200 (one lost attempt, NVML measured), render on an H200 without NVML, publish.
    fn billed_job() -> (JobReport, crate::prices::PriceCatalog) {
        let toml = format!(
            "{}\n[[destination]]\nurl_prefix = \"s3://tiles-eu/\"\nplace = \"aws:eu-west-1\"\n",
            include_str!("../prices/default.toml")
        );
        let catalog = crate::prices::PriceCatalog::from_toml_str(&toml, "eu.toml").unwrap();
        let gpu = |state: &str, gpu_s: f64, busy: Option<f64>| StageRow {
            device: "cuda:0".into(),
            device_name: Some("NVIDIA H200".into()),
            wall_s: gpu_s,
            gpu_s,
            gpu_busy_s: busy,
            bytes_written: 0,
            error: None,
            ..row("train", state, gpu_s)
        };
        let stages = vec![
            StageRow {
                stage: "ingest".into(),
                device: "cpu".into(),
                cpu_s: 7200.0,
                bytes_written: 1_000_000_000,
                ..row("ingest", "succeeded", 0.0)
            },
            gpu("failed", 360.0, Some(300.0)),
            gpu("succeeded", 1800.0, Some(1500.0)),
            StageRow {
                stage: "render".into(),
                ..gpu("succeeded", 100.0, None)
            },
            StageRow {
                stage: "publish".into(),
                device: "cpu".into(),
                cpu_s: 0.0,
                bytes_written: 1_000_000_000,
                ..row("publish", "succeeded", 0.0)
            },
        ];
        let mut r = report_of(stages);
        r.job.output = "s3://tiles-eu/fox".into();
        (r, catalog)
    }

    fn report_of(stages: Vec<StageRow>) -> JobReport {
        JobReport {
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
            gpu_by_stage: crate::report::gpu_by_stage(&stages),
            warnings: crate::report::warnings(&stages),
            stages,
        }
    }

    /// The cells of the first `<tr>` whose first cell is `first` (the bill table comes first).
    fn cells(html: &str, first: &str) -> Vec<String> {
        let start = html.find(&format!("<td>{first}</td>")).expect(first);
        let row = &html[start..start + html[start..].find("</tr>").unwrap()];
        row.split("<td")
            .skip(1)
            .map(|c| {
                let c = &c[c.find('>').unwrap() + 1..];
                c[..c.find("</td>").unwrap()].to_string()
            })
            .collect()
    }

    #[test]
    fn the_page_bills_each_stage_in_usd_with_busy_and_idle_gpu_seconds() {
        let (r, catalog) = billed_job();
        let p = Pricing {
            catalog: &catalog,
            tier: crate::prices::Tier::OnDemand,
            fallback_sku: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let html = super::super::render_job_page_priced(&r, &p, dir.path()).html;
        // By hand, from default.toml (2026 AWS on-demand): vCPU $0.03825/h, H200 $7.90/GPU-h
        // (per second, 60 s minimum: every attempt here is longer), S3 Standard $0.023/GB-month
        // kept 30 days (stage cache and published), us-east-1 → eu-west-1 egress $0.02/GB.
        // ingest: 2 vCPU-h = $0.0765; 1 GB in the stage cache = $0.023; total $0.0995.
        let cols = [
            "tries", "compute", "storage", "egress", "USD", "waste", "alloc", "busy", "idle",
        ];
        let check = |stage: &str, want: [&str; 9]| {
            let got = cells(&html, stage);
            for (i, w) in want.iter().enumerate() {
                assert_eq!(got[i + 1], *w, "{stage} {}: {got:?}", cols[i]);
            }
        };
        check(
            "ingest",
            [
                "1", "0.076500", "0.023000", "0.000000", "0.099500", "0.000000", "0.0", "0.0",
                "0.0",
            ],
        );
        // train: (360 + 1800) s = 0.6 H200-h = $4.74, the lost 360 s ($0.79) wasted; busy
        // 300 + 1500 = 1800 of 2160 allocated, idle 360.
        check(
            "train",
            [
                "2", "4.740000", "0.000000", "0.000000", "4.740000", "0.790000", "2160.0",
                "1800.0", "360.0",
            ],
        );
        // render: 100 s × $7.90/3600 = $0.219444; no NVML: not measured, never 0.
        check(
            "render",
            [
                "1",
                "0.219444",
                "0.000000",
                "0.000000",
                "0.219444",
                "0.000000",
                "100.0",
                "not measured",
                "not measured",
            ],
        );
        // publish: 1 GB published for a month $0.023 + 1 GB sent to eu-west-1 $0.02.
        check(
            "publish",
            [
                "1", "0.000000", "0.023000", "0.020000", "0.043000", "0.000000", "0.0", "0.0",
                "0.0",
            ],
        );
        // Job: compute 0.0765 + 4.74 + 0.219444 = 5.035944, storage 0.046, egress 0.02,
        // USD 5.101944, waste 0.79; 2260 GPU-s allocated, busy unmeasured (render).
        check(
            "total",
            [
                "5",
                "5.035944",
                "0.046000",
                "0.020000",
                "5.101944",
                "0.790000",
                "2260.0",
                "not measured",
                "not measured",
            ],
        );
        assert!(
            html.contains("egress aws:us-east-1 → aws:eu-west-1"),
            "route named"
        );
    }

    #[test]
    fn digits_are_grouped_in_threes() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1\u{2009}000");
        assert_eq!(group_digits(-25350186), "-25\u{2009}350\u{2009}186");
    }
}
