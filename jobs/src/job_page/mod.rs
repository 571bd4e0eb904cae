//! One self-contained HTML page per job: the pictures people look at before the numbers.
//!
//! [`write_job_page`] reads a job's published local output folder and the job's ledger report and
//! writes `index.html`, with every image embedded as a base64 `data:` URI so the file can be
//! mailed or archived on its own. What the page shows depends on what the folder holds:
//! - captures (`metrics.json`, `eval/*.png`): a summary, loss / held-out PSNR / splat-count charts
//!   ([`curves`]) and one ground truth / render / error heat-map triptych per held-out view
//!   ([`triptych`]);
//! - meshes (`lods/*.glb`): a shaded render of every LOD with its triangle count and simplification
//!   error ([`mesh_view`]);
//! - splat deliveries (`fidelity/fidelity.json`, the eval stage): "What the viewer will see" —
//!   scores of every cut a 3D Tiles client shows, per level counts, the PSNR-versus-bytes plot and
//!   one photo | full splats | cut strip per view;
//! - tiles (`tileset.json`): a top-down map of every tile's bounding volume and per-level counts
//!   and bytes ([`tile_map`]);
//! - always: the cost table from the ledger ([`cost`]).
//!
//! A section whose files are missing is left out; a section whose files are unreadable is
//! replaced by a visible note naming the file and the problem (also returned in
//! [`JobPage::notes`]), so one bad file never hides the rest of the report.

pub mod cost;
pub mod curves;
pub mod mesh_view;
pub mod metrics;
pub mod tile_map;
pub mod triptych;

use std::path::{Path, PathBuf};

use base64::Engine as _;

use kiln_pipeline::stages::eval::{EvalReport, FIDELITY_JSON};

use crate::costing::Pricing;
use crate::report::JobReport;
use crate::{Error, Result};

/// Errors while reading one output file or drawing one picture; the page builder turns them into
/// notes on the page, and [`write_job_page`] converts the fatal ones into [`crate::Error::Io`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PageError {
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file was read but a field or its shape is wrong.
    #[error("{path}: `{field}`: expected {expected}, found {found}")]
    Invalid {
        path: PathBuf,
        field: String,
        expected: String,
        found: String,
    },
    /// An image cannot be decoded or encoded.
    #[error("{path}: image: {source}")]
    Image {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },
    /// A glTF/GLB file or one of its buffers cannot be read.
    #[error("{path}: glTF: {source}; check it with the Khronos glTF validator")]
    Gltf {
        path: PathBuf,
        #[source]
        source: gltf::Error,
    },
    /// plotters failed to draw a chart (into memory, so this is a bug, not bad input).
    #[error("chart `{title}`: {source}")]
    Chart {
        title: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl PageError {
    /// Path of the file the error is about (the chart title for [`PageError::Chart`]).
    fn path(&self) -> PathBuf {
        match self {
            PageError::Io { path, .. }
            | PageError::Invalid { path, .. }
            | PageError::Image { path, .. }
            | PageError::Gltf { path, .. } => path.clone(),
            PageError::Chart { title, .. } => PathBuf::from(title),
        }
    }
}

impl From<PageError> for Error {
    fn from(e: PageError) -> Self {
        Error::Io {
            path: e.path(),
            source: std::io::Error::other(e),
        }
    }
}

/// What [`write_job_page`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The page: `dest_dir/index.html`.
    pub index: PathBuf,
    /// Number of embedded images (`<img>` elements, all `data:` URIs).
    pub images: usize,
    /// Sections skipped or replaced by a note, each naming the file and the reason.
    pub notes: Vec<String>,
}

/// The page's HTML and what went into it (see [`render_job_page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedPage {
    /// The complete, self-contained HTML document.
    pub html: String,
    /// Number of embedded images.
    pub images: usize,
    /// Notes shown on the page: skipped sections and unreadable files.
    pub notes: Vec<String>,
}

/// Write the job's report page to `dest_dir/index.html` (created if missing), atomically: it is
/// written under a temporary name and renamed, so a reader never sees half a page.
///
/// - `report`: the job's ledger report ([`crate::report::job_report`]);
/// - `output_dir`: the job's published local output folder (`JobRow::output` resolved to a local
///   path);
/// - `dest_dir`: folder for the page; images are embedded, so `index.html` is the only file.
///
/// Unreadable files inside `output_dir` do not fail the call: they become notes on the page and
/// in [`JobPage::notes`].
///
/// The cost section is priced with the built-in catalog at on-demand prices; use
/// [`write_job_page_priced`] to price it as `kiln report --prices … --pricing …` does.
///
/// # Errors
/// [`crate::Error::Io`] when `output_dir` is not a folder, or `index.html` cannot be written.
pub fn write_job_page(report: &JobReport, output_dir: &Path, dest_dir: &Path) -> Result<JobPage> {
    let catalog = crate::prices::PriceCatalog::default_catalog();
    write_job_page_priced(report, &default_pricing(&catalog), output_dir, dest_dir)
}

/// On-demand prices from `catalog`, unknown GPUs at its dearest SKU (as `kiln report` without
/// `--sku`).
fn default_pricing(catalog: &crate::prices::PriceCatalog) -> Pricing<'_> {
    Pricing {
        catalog,
        tier: crate::prices::Tier::OnDemand,
        fallback_sku: None,
    }
}

/// [`write_job_page`] with the cost section priced by `pricing` (the same [`Pricing`] `kiln
/// report` prints its table with).
///
/// # Errors
/// As [`write_job_page`].
pub fn write_job_page_priced(
    report: &JobReport,
    pricing: &Pricing,
    output_dir: &Path,
    dest_dir: &Path,
) -> Result<JobPage> {
    if !output_dir.is_dir() {
        return Err(Error::Io {
            path: output_dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the job's output folder does not exist (was it moved, or is it remote?)",
            ),
        });
    }
    let page = render_job_page_priced(report, pricing, output_dir);
    let index = dest_dir.join("index.html");
    kiln_formats::atomic_write::write_atomic(&index, page.html.as_bytes()).map_err(|e| {
        Error::Io {
            path: index.clone(),
            source: std::io::Error::other(e),
        }
    })?;
    Ok(JobPage {
        index,
        images: page.images,
        notes: page.notes,
    })
}

/// Build the page's HTML from `report` and the files in `output_dir` (see [`write_job_page`]);
/// writes nothing. Never fails: missing or unreadable files become notes.
/// The cost section is priced as in [`write_job_page`].
pub fn render_job_page(report: &JobReport, output_dir: &Path) -> RenderedPage {
    let catalog = crate::prices::PriceCatalog::default_catalog();
    render_job_page_priced(report, &default_pricing(&catalog), output_dir)
}

/// [`render_job_page`] with the cost section priced by `pricing`.
pub fn render_job_page_priced(
    report: &JobReport,
    pricing: &Pricing,
    output_dir: &Path,
) -> RenderedPage {
    let mut page = PageBuilder::default();
    let job = &report.job;
    page.body.push_str(&format!(
        "<h1>{} <small>{}</small></h1>\n<table class=\"kv\">\n",
        escape_html(&job.name),
        escape_html(&job.id)
    ));
    for (k, v) in [
        ("kind", job.kind.as_str()),
        ("state", job.state.as_str()),
        ("input", job.input.as_str()),
        ("output", job.output.as_str()),
        ("created", job.created_at.as_str()),
        ("finished", job.finished_at.as_deref().unwrap_or("—")),
    ] {
        page.body.push_str(&format!(
            "<tr><th>{k}</th><td>{}</td></tr>\n",
            escape_html(v)
        ));
    }
    if Path::new(&job.output) != output_dir {
        page.body.push_str(&format!(
            "<tr><th>read from</th><td>{}</td></tr>\n",
            escape_html(&output_dir.display().to_string())
        ));
    }
    if let Some(e) = &job.error {
        page.body.push_str(&format!(
            "<tr><th>error</th><td class=\"err\">{}</td></tr>\n",
            escape_html(e)
        ));
    }
    page.body.push_str("</table>\n");
    warnings_section(&mut page, &report.warnings);

    let metrics_path = output_dir.join("metrics.json");
    if metrics_path.is_file() {
        captures_section(&mut page, output_dir, &metrics_path);
    }
    if output_dir.join("lods").is_dir() {
        meshes_section(&mut page, report, output_dir);
    }
    let fidelity_path = output_dir.join("fidelity").join(FIDELITY_JSON);
    if fidelity_path.is_file() {
        delivery_section(&mut page, &fidelity_path);
    }
    let tileset_path = output_dir.join("tileset.json");
    if tileset_path.is_file() {
        tiles_section(&mut page, &tileset_path);
    }
    page.section("Cost");
    page.body.push_str(&cost::cost_table_html(report, pricing));

    if !page.notes.is_empty() {
        page.section("Notes");
        page.body.push_str("<ul class=\"notes\">\n");
        for n in &page.notes {
            page.body
                .push_str(&format!("<li>{}</li>\n", escape_html(n)));
        }
        page.body.push_str("</ul>\n");
    }
    RenderedPage {
        html: format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <title>kiln job {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{}</body>\n</html>\n",
            escape_html(&job.id),
            page.body
        ),
        images: page.images,
        notes: page.notes,
    }
}

/// The page's stylesheet: readable on screen and in print, pixel-exact upscaling of the small
/// evaluation images.
const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}\
h1 small{font-size:55%;color:#666;font-weight:normal}\
h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;text-align:left;border-bottom:1px solid #eee}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tr.total td{font-weight:bold;border-top:2px solid #999}\
.err{color:#a00}.warn{color:#8a5a00}.grid{display:flex;flex-wrap:wrap;gap:1em}\
figure{margin:0;border:1px solid #ddd;padding:.4em;background:#fafafa}\
figcaption{font-size:85%;color:#333;margin-top:.3em}\
img.px{image-rendering:pixelated}ul.notes li{color:#844}pre{font-size:80%;white-space:pre-wrap}";

/// Accumulates the page body, the image count and the notes.
#[derive(Default)]
struct PageBuilder {
    body: String,
    images: usize,
    notes: Vec<String>,
}

impl PageBuilder {
    fn section(&mut self, title: &str) {
        self.body
            .push_str(&format!("<h2>{}</h2>\n", escape_html(title)));
    }

    /// Append an `<img>` with `bytes` embedded as a `data:` URI. `css_width_px`, when given,
    /// upscales small images on screen.
    fn image(&mut self, mime: &str, bytes: &[u8], alt: &str, css_width_px: Option<u32>) {
        self.images += 1;
        let style = css_width_px
            .map(|w| format!(" class=\"px\" style=\"width:{w}px\""))
            .unwrap_or_default();
        self.body.push_str(&format!(
            "<img src=\"{}\" alt=\"{}\"{style}>",
            data_uri(mime, bytes),
            escape_html(alt)
        ));
    }

    /// Record a note and show it where the missing picture would have been.
    fn note(&mut self, text: String) {
        self.body
            .push_str(&format!("<p class=\"err\">{}</p>\n", escape_html(&text)));
        self.notes.push(text);
    }
}

/// What the stages warned about, at the top: a job that succeeded with a missing texture or a
/// skipped camera says so before its pictures.
fn warnings_section(page: &mut PageBuilder, warnings: &[kiln_pipeline::warnings::StageWarning]) {
    if warnings.is_empty() {
        return;
    }
    page.section(&format!("Warnings ({})", warnings.len()));
    page.body.push_str("<table class=\"warnings\">\n");
    for w in warnings {
        page.body.push_str(&format!(
            "<tr><th>{}</th><td class=\"warn\">{}</td></tr>\n",
            escape_html(&w.stage),
            escape_html(&w.message)
        ));
    }
    page.body.push_str("</table>\n");
}

fn captures_section(page: &mut PageBuilder, output_dir: &Path, metrics_path: &Path) {
    page.section("Training");
    let m = match metrics::CaptureMetrics::read(metrics_path) {
        Ok(m) => m,
        Err(e) => {
            page.note(format!("training metrics skipped: {e}"));
            return;
        }
    };
    page.body.push_str(&format!(
        "<p>held-out PSNR <b>{}</b> dB, SSIM <b>{}</b>; {} splats after {} steps; \
         {} s wall, {} steps/s; peak RSS {} MiB.</p>\n",
        fmt_opt(m.psnr_db, 2),
        fmt_opt(m.ssim, 4),
        m.splats.map_or("?".into(), |n| n.to_string()),
        m.steps.map_or("?".into(), |n| n.to_string()),
        fmt_opt(m.wall_s, 1),
        fmt_opt(m.steps_per_s, 2),
        fmt_opt(m.peak_rss_bytes.map(|b| b as f64 / 1048576.0), 0),
    ));
    page.body.push_str("<div class=\"grid\">\n");
    let charts = [
        (
            curves::ChartSpec {
                title: "training loss",
                x_label: "step",
                y_label: "loss (L1 + 0.2·D-SSIM)",
                y_scale: curves::YScale::Log10,
            },
            Some(metrics::finite_points(&m.loss_curve)),
            "loss_curve",
        ),
        (
            curves::ChartSpec {
                title: "held-out PSNR",
                x_label: "step",
                y_label: "PSNR (dB)",
                y_scale: curves::YScale::Linear,
            },
            m.psnr_curve.as_deref().map(metrics::finite_points),
            "psnr_curve",
        ),
        (
            curves::ChartSpec {
                title: "splat count",
                x_label: "step",
                y_label: "splats",
                y_scale: curves::YScale::Linear,
            },
            m.splat_count_curve.as_deref().map(metrics::finite_points),
            "splat_count_curve",
        ),
    ];
    for (spec, points, field) in charts {
        let Some(points) = points.filter(|p| !p.is_empty()) else {
            page.note(format!(
                "{}: no `{field}` recorded (metrics.json from an older trainer); chart `{}` skipped",
                metrics_path.display(),
                spec.title
            ));
            continue;
        };
        match curves::line_chart_svg(&spec, &points) {
            Ok(svg) => {
                page.body.push_str("<figure>");
                page.image("image/svg+xml", svg.as_bytes(), spec.title, None);
                page.body.push_str("</figure>\n");
            }
            Err(e) => page.note(format!("chart skipped: {e}")),
        }
    }
    page.body.push_str("</div>\n");

    page.section("Held-out views");
    page.body.push_str(&format!(
        "<p>Each row: ground truth | render | per-pixel mean absolute error over RGB, \
         0 → ≥ {} through viridis:</p>\n",
        triptych::ERROR_SCALE_MAX
    ));
    match triptych::colorbar_png() {
        Ok(png) => page.image("image/png", &png, "error colour scale", Some(256)),
        Err(e) => page.note(format!("colour bar skipped: {e}")),
    }
    let eval_dir = output_dir.join("eval");
    let pngs = match list_files(&eval_dir, "png") {
        Ok(p) => p,
        Err(e) => {
            page.note(format!("held-out views skipped: {e}"));
            return;
        }
    };
    if pngs.is_empty() {
        page.note(format!("{}: no held-out view PNGs", eval_dir.display()));
    }
    page.body.push_str("<div class=\"grid\">\n");
    for png in pngs {
        let stem = png
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let view = m.view_for_stem(&stem);
        match triptych::triptych_png(&png) {
            Ok(t) => {
                page.body.push_str("<figure>");
                let panel_w = t.width / 3;
                // Small eval images are upscaled on screen (pixelated) to ~240 px per panel.
                let scale = (240 / panel_w.max(1)).clamp(1, 4);
                page.image(
                    "image/png",
                    &t.png,
                    &format!("{stem}: ground truth, render, error"),
                    Some(t.width * scale),
                );
                let name = view.map_or(stem.as_str(), |v| v.name.as_str());
                page.body.push_str(&format!(
                    "<figcaption>{} — PSNR {} dB, SSIM {}, mean |error| {:.4}</figcaption></figure>\n",
                    escape_html(name),
                    fmt_opt(view.and_then(|v| v.psnr_db), 2),
                    fmt_opt(view.and_then(|v| v.ssim), 4),
                    t.mean_abs_error
                ));
            }
            Err(e) => page.note(format!("view skipped: {e}")),
        }
    }
    page.body.push_str("</div>\n");
}

/// "What the viewer will see": the eval stage's scores of the delivered tileset (every cut a
/// client shows), the PSNR-versus-bytes plot and one strip per view.
fn delivery_section(page: &mut PageBuilder, fidelity_path: &Path) {
    page.section("What the viewer will see");
    let r = match EvalReport::read(fidelity_path) {
        Ok(r) => r,
        Err(e) => {
            page.note(format!("delivery scores skipped: {e}"));
            return;
        }
    };
    let photos = r.views.iter().any(|v| v.kind == "held-out");
    let loss = match r.publish_loss_db {
        Some(l) => format!(
            " Publish loss (full splats − full-detail tiles, against the photos): <b>{l:.2} dB</b>. \
             A coarser cut can score slightly higher against the photos than the full tiles: \
             parents refined against the training photos sometimes generalise better to held-out \
             views than the leaves they replace."
        ),
        None => String::new(),
    };
    page.body.push_str(&format!(
        "<p>The published tileset rendered by Kiln's rasterizer from {} {} the way a 3D Tiles \
         client shows it: at each maximum screen-space error τ (pixels; CesiumJS refines a tile \
         while its geometricError × focal / distance exceeds τ, default 16) and under splat \
         budgets. PSNR/SSIM {}; bytes are the tile content a client downloads for the view \
         (shown tiles and their ancestors).{loss}</p>\n",
        r.views.len(),
        if photos {
            "held-out photos"
        } else {
            "orbit cameras (no photos)"
        },
        if photos {
            "against the photos, and against the full trained splats' render"
        } else {
            "against the full splats' render (there are no photos to compare with)"
        },
    ));
    let photo_cols = if photos {
        "<th class=\"n\">PSNR dB</th><th class=\"n\">SSIM</th>"
    } else {
        ""
    };
    page.body.push_str(&format!(
        "<table><tr><th>cut</th><th class=\"n\">splats</th><th class=\"n\">MB fetched</th>\
         {photo_cols}<th class=\"n\">vs full dB</th><th class=\"n\">vs full SSIM</th></tr>\n",
    ));
    if let (Some(p), Some(s)) = (r.reference_psnr_db, r.reference_ssim) {
        page.body.push_str(&format!(
            "<tr><td>full splats</td><td></td><td></td><td class=\"n\">{p:.2}</td>\
             <td class=\"n\">{s:.3}</td><td></td><td></td></tr>\n"
        ));
    }
    for c in &r.cuts {
        let photo_cells = if photos {
            format!(
                "<td class=\"n\">{}</td><td class=\"n\">{}</td>",
                fmt_opt(c.mean.psnr_db, 2),
                fmt_opt(c.mean.ssim, 3)
            )
        } else {
            String::new()
        };
        page.body.push_str(&format!(
            "<tr><td>{}</td><td class=\"n\">{:.0}</td><td class=\"n\">{:.3}</td>{photo_cells}\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
            escape_html(&c.label),
            c.mean.splats,
            c.mean.bytes / 1e6,
            fmt_opt(c.mean.psnr_vs_full_db, 2),
            fmt_opt(c.mean.ssim_vs_full, 3),
        ));
    }
    page.body.push_str("</table>\n");
    if !r.levels.is_empty() {
        page.body.push_str(
            "<table><tr><th>depth</th><th class=\"n\">tiles</th><th class=\"n\">splats</th>\
             <th class=\"n\">MB</th><th class=\"n\">max geometricError</th></tr>\n",
        );
        for l in &r.levels {
            page.body.push_str(&format!(
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{:.3}</td><td class=\"n\">{}</td></tr>\n",
                l.depth,
                l.tiles,
                l.splats,
                l.bytes as f64 / 1e6,
                fmt_metres(l.max_geometric_error_m)
            ));
        }
        page.body.push_str("</table>\n");
    }
    let dir = fidelity_path.parent().unwrap_or(Path::new("."));
    match std::fs::read(dir.join("psnr_bytes.svg")) {
        Ok(svg) => {
            page.body.push_str("<figure>");
            page.image("image/svg+xml", &svg, "PSNR against bytes fetched", None);
            page.body.push_str("<figcaption>Mean PSNR against mean bytes fetched, one point per τ.</figcaption></figure>\n");
        }
        Err(e) => page.note(format!("{}: {e}", dir.join("psnr_bytes.svg").display())),
    }
    page.body.push_str(&format!(
        "<p>Each strip, left to right: {}.</p>\n<div class=\"grid\">\n",
        escape_html(&r.strip_columns.join(" | "))
    ));
    for v in &r.views {
        let png = dir.join("strips").join(format!(
            "{}.png",
            kiln_pipeline::stages::train::eval::file_stem(&v.name)
        ));
        match std::fs::read(&png) {
            Ok(bytes) => {
                page.body.push_str("<figure>");
                let columns = r.strip_columns.len().max(1) as u32;
                // Small views are upscaled on screen to about 160 px per column.
                let scale = (160 / v.width.max(1)).clamp(1, 4);
                page.image(
                    "image/png",
                    &bytes,
                    &format!("{}: {}", v.name, r.strip_columns.join(", ")),
                    Some(columns * v.width * scale),
                );
                page.body.push_str(&format!(
                    "<figcaption>{}</figcaption></figure>\n",
                    escape_html(&v.name)
                ));
            }
            Err(e) => page.note(format!("{}: {e}", png.display())),
        }
    }
    page.body.push_str("</div>\n");
}

fn meshes_section(page: &mut PageBuilder, report: &JobReport, output_dir: &Path) {
    page.section("Levels of detail");
    let lods = match mesh_view::list_lods(output_dir, report) {
        Ok(l) => l,
        Err(e) => {
            page.note(format!("LOD renders skipped: {e}"));
            return;
        }
    };
    if lods.is_empty() {
        page.note(format!(
            "{}: no LOD GLBs to render",
            output_dir.join("lods").display()
        ));
        return;
    }
    let meshes: Vec<_> = lods
        .iter()
        .map(|l| mesh_view::read_surface(&l.path))
        .collect();
    // One framing for all LODs (the union of their bounds), so they can be compared in place.
    let bounds = meshes
        .iter()
        .filter_map(|m| m.as_ref().ok())
        .filter_map(|m| mesh_view::bounds(&m.tris))
        .reduce(|a, b| {
            (
                std::array::from_fn(|i| a.0[i].min(b.0[i])),
                std::array::from_fn(|i| a.1[i].max(b.1[i])),
            )
        });
    page.body.push_str(
        "<p>Base colour (texture × factor; other maps are not drawn), flat Lambert shading, \
         orthographic, 3/4 view (azimuth 45°, elevation 30°, glTF Y up), same framing for every \
         level; PSNR against the first level over the pixels either covers.</p>\n\
         <div class=\"grid\">\n",
    );
    // The first LOD's render, which the others' PSNR is taken against.
    let mut first: Option<image::RgbImage> = None;
    for (lod, mesh) in lods.iter().zip(meshes) {
        let surface = match mesh {
            Ok(s) => s,
            Err(e) => {
                page.note(format!("LOD render skipped: {e}"));
                continue;
            }
        };
        let Some((lo, hi)) = bounds else { break };
        let view = mesh_view::OrthoView::three_quarter(lo, hi, 320, 320);
        let img = mesh_view::render_painted(&surface, &view);
        let psnr = match &first {
            Some(reference) => format!(
                ", PSNR {}",
                fmt_psnr(mesh_view::psnr_covered(&img, reference))
            ),
            None => String::new(),
        };
        match encode_png(&img, &lod.path) {
            Ok(png) => {
                page.body.push_str("<figure>");
                page.image("image/png", &png, &lod.file, None);
                page.body.push_str(&format!(
                    "<figcaption>{}: {} triangles{}{}{}</figcaption></figure>\n",
                    escape_html(&lod.file),
                    surface.tris.len(),
                    lod.ratio.map_or(String::new(), |r| format!(", ratio {r}")),
                    lod.error_m.map_or(String::new(), |e| format!(
                        ", simplification error {}",
                        fmt_metres(e)
                    )),
                    psnr,
                ));
            }
            Err(e) => page.note(format!("LOD render skipped: {e}")),
        }
        first.get_or_insert(img);
    }
    page.body.push_str("</div>\n");
    let tileset_path = output_dir.join("tileset.json");
    if tileset_path.is_file() {
        delivered_mesh_section(page, &tileset_path, &lods[0]);
    }
}

/// What a 3D Tiles client loads: each level of the tileset (the tiles at that depth and the
/// leaves above it) decoded from the tile GLBs and rendered as the LODs are, with its PSNR
/// against the first LOD (the source) over the pixels either covers
/// ([`mesh_view::delivered_levels`]).
fn delivered_mesh_section(
    page: &mut PageBuilder,
    tileset_path: &Path,
    reference: &mesh_view::LodEntry,
) {
    page.section("What the viewer loads");
    let levels = match mesh_view::delivered_levels(tileset_path, &reference.path, 320) {
        Ok(l) => l,
        Err(e) => {
            page.note(format!("tile renders skipped: {e}"));
            return;
        }
    };
    page.body.push_str(&format!(
        "<p>Each level of the tileset as a client draws it (the tiles at that depth and the \
         leaves above it): the tile GLBs decoded (<code>EXT_meshopt_compression</code>, \
         <code>KHR_mesh_quantization</code>, their own textures), painted as the levels of \
         detail above and framed on {name}. PSNR against {name} over the pixels either \
         covers. The leaves should match it (about 40 dB or more: only the tiles' position \
         lattice and texture encoding differ); a coarser level scores about what the level of \
         detail with its triangle count scores above (flat shading makes every facet count, \
         so 15–20 dB is usual for a root of a few hundred triangles). A lost material, texture \
         or part shows as a leaves score far below that.</p>\n<div class=\"grid\">\n",
        name = escape_html(&reference.file)
    ));
    let last = levels.len().saturating_sub(1);
    for level in levels {
        let level = match level {
            Ok(l) => l,
            Err(e) => {
                page.note(format!("tile render skipped: {e}"));
                continue;
            }
        };
        let psnr = fmt_psnr(level.psnr_db);
        let label = match level.depth {
            0 => "root".to_string(),
            d if d == last => format!("leaves (depth {d})"),
            d => format!("depth {d}"),
        };
        match encode_png(&level.image, tileset_path) {
            Ok(png) => {
                page.body.push_str("<figure>");
                page.image("image/png", &png, &label, None);
                page.body.push_str(&format!(
                    "<figcaption>{}: {} tiles, {} triangles, PSNR {}</figcaption></figure>\n",
                    escape_html(&label),
                    level.tiles,
                    level.triangles,
                    psnr
                ));
            }
            Err(e) => page.note(format!("tile render skipped: {e}")),
        }
    }
    page.body.push_str("</div>\n");
}

fn tiles_section(page: &mut PageBuilder, tileset_path: &Path) {
    page.section("Tiles");
    match tile_map::read_tileset(tileset_path) {
        Ok(map) => {
            page.body.push_str(&format!(
                "<p>Top-down view (x right, y up, {}) of every tile's bounding volume, coloured \
                 by depth (root dark).</p>\n<figure>",
                map.frame.describe()
            ));
            let svg = tile_map::tile_map_svg(&map);
            page.image("image/svg+xml", svg.as_bytes(), "tile map", None);
            page.body.push_str("</figure>\n");
            page.body.push_str(&tile_map::level_table_html(&map));
            for n in map.notes {
                page.note(n);
            }
        }
        Err(e) => page.note(format!("tile map skipped: {e}")),
    }
}

/// Files in `dir` whose extension is `ext` (case-insensitive), sorted by name.
fn list_files(dir: &Path, ext: &str) -> Result<Vec<PathBuf>, PageError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let io = |source| PageError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let p = entry.map_err(io)?.path();
        if p.is_file()
            && p.extension()
                .is_some_and(|e| e.to_string_lossy().eq_ignore_ascii_case(ext))
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// PNG-encode `img`; `about` names the file the picture was made from, for the error.
fn encode_png(img: &image::RgbImage, about: &Path) -> Result<Vec<u8>, PageError> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .map_err(|source| PageError::Image {
            path: about.to_path_buf(),
            source,
        })?;
    Ok(out.into_inner())
}

/// `data:<mime>;base64,<bytes>` (RFC 2397), for embedding an image in the page.
pub fn data_uri(mime: &str, bytes: &[u8]) -> String {
    format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// Escape `&`, `<`, `>`, `"` and `'` so `text` is inert in HTML text and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `v` with `decimals` decimals, or `?` when absent or not finite.
fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "?".into(),
    }
}

/// A PSNR for a caption: `None` (nothing drawn in either) and infinite (identical) in words.
fn fmt_psnr(db: Option<f64>) -> String {
    match db {
        None => "— (nothing drawn)".to_string(),
        Some(db) if db.is_finite() => format!("{db:.1} dB"),
        Some(_) => "∞ (identical)".to_string(),
    }
}

/// A length in metres with a readable unit (m, mm or µm), e.g. `0.36 mm`.
fn fmt_metres(m: f64) -> String {
    let a = m.abs();
    if a == 0.0 {
        "0 m".into()
    } else if a >= 1.0 {
        format!("{m:.3} m")
    } else if a >= 1e-3 {
        format!("{:.3} mm", m * 1e3)
    } else {
        format!("{:.2} µm", m * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{JobRow, StageRow};

    fn report(name: &str, output: &str) -> JobReport {
        let stages = vec![StageRow {
            stage: "train".into(),
            attempt: 1,
            state: "succeeded".into(),
            device: "cpu".into(),
            wall_s: 12.5,
            cpu_s: 20.0,
            gpu_s: 0.0,
            bytes_read: 1000,
            bytes_written: 2000,
            summary: Some(serde_json::json!({"note": "<b>bold</b>"})),
            error: None,
            ..Default::default()
        }];
        JobReport {
            job: JobRow {
                id: "job-1".into(),
                name: name.into(),
                kind: "capture".into(),
                input: "in".into(),
                output: output.into(),
                state: "succeeded".into(),
                created_at: "2026-11-30T00:00:00Z".into(),
                finished_at: None,
                error: None,
            },
            totals: crate::report::totals(&stages),
            gpu_by_stage: crate::report::gpu_by_stage(&stages),
            warnings: crate::report::warnings(&stages),
            stages,
        }
    }

    /// A capture-like output folder: two eval PNGs, metrics.json (with a hostile view name) and a
    /// two-tile tileset.
    fn capture_output(dir: &Path) {
        std::fs::create_dir_all(dir.join("eval")).unwrap();
        for (i, stem) in ["a_b_c_", "v2"].iter().enumerate() {
            let img = image::RgbImage::from_fn(8, 4, |x, _| image::Rgb([x as u8 * 30, i as u8, 0]));
            img.save(dir.join("eval").join(format!("{stem}.png")))
                .unwrap();
        }
        let metrics = serde_json::json!({
            "psnr_db": 20.0, "ssim": 0.9, "splats": 10, "steps": 30, "wall_s": 1.0,
            "steps_per_s": 30.0,
            "views": [{"name": "a<b>c\"", "psnr_db": 19.0, "ssim": 0.8},
                      {"name": "v2", "psnr_db": 21.0, "ssim": 0.95}],
            "loss_curve": [[10, 0.5], [20, 0.3], [30, 0.2]],
            "psnr_curve": [[10, 12.0], [30, 20.0]],
            "splat_count_curve": [[10, 5], [20, 8], [30, 10]],
        });
        std::fs::write(dir.join("metrics.json"), metrics.to_string()).unwrap();
        let tileset = serde_json::json!({
            "asset": {"version": "1.1"}, "geometricError": 1.0,
            "root": {"boundingVolume": {"box": [0,0,0, 1,0,0, 0,1,0, 0,0,1]}, "geometricError": 0.5,
                     "children": [{"boundingVolume": {"box": [0.5,0,0, 0.5,0,0, 0,1,0, 0,0,1]},
                                   "geometricError": 0.0}]}
        });
        std::fs::write(dir.join("tileset.json"), tileset.to_string()).unwrap();
    }

    #[test]
    fn page_embeds_every_image_and_escapes_names() {
        let dir = tempfile::tempdir().unwrap();
        capture_output(dir.path());
        let r = report(
            "<script>alert(1)</script>",
            &dir.path().display().to_string(),
        );
        let page = render_job_page(&r, dir.path());
        // 3 charts + colour bar + 2 triptychs + tile map.
        assert_eq!(page.images, 7, "notes: {:?}", page.notes);
        assert_eq!(page.html.matches("<img ").count(), 7);
        assert_eq!(page.html.matches("src=\"data:image/").count(), 7);
        assert_eq!(page.html.matches("src=").count(), 7, "no external images");
        assert!(!page.html.contains("<script>"));
        assert!(page.html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.html.contains("a&lt;b&gt;c&quot;"), "view name escaped");
        assert!(
            page.html.contains("&lt;b&gt;bold&lt;/b&gt;"),
            "summary escaped"
        );
        assert!(page.notes.is_empty(), "{:?}", page.notes);
    }

    #[test]
    fn old_metrics_without_curves_render_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        capture_output(dir.path());
        let p = dir.path().join("metrics.json");
        let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        let obj = m.as_object_mut().unwrap();
        obj.remove("psnr_curve");
        obj.remove("splat_count_curve");
        std::fs::write(&p, m.to_string()).unwrap();
        let page = render_job_page(&report("fox", "out"), dir.path());
        assert_eq!(
            page.images, 5,
            "loss chart, colour bar, 2 triptychs, tile map"
        );
        assert_eq!(page.notes.len(), 2, "{:?}", page.notes);
        assert!(page.notes[0].contains("psnr_curve"));
    }

    #[test]
    fn unreadable_files_become_notes_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        capture_output(dir.path());
        std::fs::write(dir.path().join("eval/v2.png"), b"not a png").unwrap();
        std::fs::write(dir.path().join("tileset.json"), b"{").unwrap();
        let page = render_job_page(&report("fox", "out"), dir.path());
        assert_eq!(page.notes.len(), 2, "{:?}", page.notes);
        assert!(page.notes.iter().any(|n| n.contains("v2.png")));
        assert!(page.notes.iter().any(|n| n.contains("tileset.json")));
    }

    #[test]
    fn write_job_page_writes_index_html_and_rejects_a_missing_output_folder() {
        let dir = tempfile::tempdir().unwrap();
        capture_output(dir.path());
        let dest = dir.path().join("page");
        let r = report("fox", "out");
        let page = write_job_page(&r, dir.path(), &dest).unwrap();
        assert_eq!(page.index, dest.join("index.html"));
        let html = std::fs::read_to_string(&page.index).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
        let err = write_job_page(&r, &dir.path().join("nope"), &dest).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn escape_html_neutralises_markup() {
        assert_eq!(
            escape_html("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn metres_are_shown_in_a_readable_unit() {
        assert_eq!(fmt_metres(0.0), "0 m");
        assert_eq!(fmt_metres(0.0015), "1.500 mm");
        assert_eq!(fmt_metres(0.00036), "360.00 µm");
    }
}
