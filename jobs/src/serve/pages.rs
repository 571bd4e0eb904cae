//! The HTML pages of `kiln serve`: the job list and the per-job page (CesiumJS viewer of the job's
//! `tileset.json` beside its HTML report).
//!
//! Pages are plain strings built here, no template engine: there are two, and every value put in
//! them goes through [`escape_html`] or [`script_json`]. CesiumJS comes from `/cesium/` (the
//! vendored npm build), never a CDN; when it is not installed the page says how to install it.
//!
//! The viewer publishes its state as `window.kilnViewer` for the headless browser check
//! (`.ci/browser/check_viewer.mjs`):
//! `{ready, tilesLoaded, failed: [{url, message}], contentKinds: {model|gaussianSplat|…: count},
//! statistics: {…numbers from Cesium3DTilesetStatistics}, frames, error, backgroundColor: [r, g, b],
//! pendingRequests, tilesProcessing, allTilesLoadedEvents, maximumScreenSpaceError}`.
//! `tilesLoaded` is true while everything the current view needs is loaded (it drops back to false
//! while CesiumJS refines to a finer level); `contentKinds` counts tiles loaded by content class.
//! `error` is a string when the viewer cannot start (no CesiumJS, no tileset, remote output, an
//! exception); `ready` turns true once the tileset is added and the camera framed on it.

use std::path::Path;

use crate::ledger::JobRow;

use super::output::OutputLocation;

/// The background of the 3D view, `[r, g, b]` bytes. The browser check counts pixels that differ
/// from it, so it must not be a colour a mesh is likely to be (a dark blue-grey).
pub const VIEWER_BACKGROUND_RGB: [u8; 3] = [24, 28, 40];

/// The npm version of CesiumJS the viewer was checked with (`.ci/browser/package.json` pins it).
pub const CESIUM_VERSION: &str = "1.145.0";

pub use crate::job_page::escape_html;

/// Percent-encode one URL path segment (everything but RFC 3986 unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A JSON value made safe to embed inside a `<script>` element (no `</script>` can close it).
fn script_json(v: &serde_json::Value) -> String {
    v.to_string()
        .replace("</", "<\\/")
        .replace("<!--", "<\\!--")
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{padding:8px 16px;background:#1d2330;color:#eef}
header a{color:#9cf}
header code{background:#323a4c;color:#eef}
h1{font-size:18px;margin:0}
table{border-collapse:collapse;margin:16px}
td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
code{background:#eceef2;padding:1px 4px;border-radius:3px}
.note{margin:16px;padding:12px 16px;background:#fff8e0;border:1px solid #e8d48a;border-radius:4px}
.split{display:flex;height:calc(100vh - 60px)}
.split>section{flex:1 1 50%;min-width:0;display:flex;flex-direction:column}
#viewer{flex:1;position:relative}
#viewer-status{padding:4px 16px;font-size:12px;color:#456;min-height:1.4em}
iframe{flex:1;border:0;border-left:1px solid #ccd;background:#fff}
.state-failed{color:#b00}.state-succeeded{color:#070}.state-running{color:#a60}
";

fn page(title: &str, head_extra: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title>\
         <link rel=\"icon\" href=\"data:,\">\
         <style>{STYLE}</style>{head_extra}</head>\n<body>\n{body}\n</body></html>\n",
        escape_html(title)
    )
}

/// A short, human note about where a job's output is and whether it can be shown.
pub fn output_note(loc: &OutputLocation) -> String {
    match loc {
        OutputLocation::Local { dir, .. } if dir.is_dir() => String::new(),
        OutputLocation::Local { dir, was_relative } => {
            let mut s = format!("folder {} does not exist", dir.display());
            if *was_relative {
                s.push_str(
                    " (relative path resolved against the server's working directory; \
                     start kiln serve where kiln run ran)",
                );
            }
            s
        }
        OutputLocation::Remote { .. } => "remote: kiln serve shows local outputs only".into(),
        OutputLocation::Unsupported { reason, .. } => (*reason).into(),
    }
}

/// The job list (`GET /`), newest first.
///
/// - `jobs`: as [`crate::ledger::Ledger::jobs`] returns them, paired with each output resolved.
/// - `ledger_path`: shown so people know which ledger they are looking at.
/// - `signed_in_team`: the team of a token-mode viewer (shown with a sign-out button); `None` on
///   an open viewer.
pub fn index_page(
    jobs: &[(JobRow, OutputLocation)],
    ledger_path: &str,
    signed_in_team: Option<&str>,
) -> String {
    let who = signed_in_team
        .map(|t| {
            format!(
                " · team <code>{}</code> <form method=\"post\" action=\"/logout\" \
                 style=\"display:inline\"><button type=\"submit\">sign out</button></form>",
                escape_html(t)
            )
        })
        .unwrap_or_default();
    let mut body = format!(
        "<header><h1>Kiln jobs</h1>ledger <code>{}</code>{who}</header>\n",
        escape_html(ledger_path)
    );
    if jobs.is_empty() {
        body.push_str(
            "<div class=\"note\">No jobs in this ledger yet. Run one with \
             <code>kiln run JOB.toml</code> (examples in <code>datasets/jobs/</code>), \
             or point <code>kiln serve --db</code> at another ledger.</div>",
        );
        return page("Kiln jobs", "", &body);
    }
    body.push_str(
        "<table><tr><th>job</th><th>name</th><th>kind</th><th>state</th><th>created</th>\
         <th>output</th></tr>\n",
    );
    for (j, loc) in jobs {
        let note = output_note(loc);
        let note = if note.is_empty() {
            String::new()
        } else {
            format!("<br><small>{}</small>", escape_html(&note))
        };
        body.push_str(&format!(
            "<tr><td><a href=\"/jobs/{}\">{}</a></td><td>{}</td><td>{}</td>\
             <td class=\"state-{}\">{}</td><td>{}</td><td><code>{}</code>{note}</td></tr>\n",
            encode_segment(&j.id),
            escape_html(&j.id),
            escape_html(&j.name),
            escape_html(&j.kind),
            escape_html(&j.state),
            escape_html(&j.state),
            escape_html(&j.created_at),
            escape_html(&j.output),
        ));
    }
    body.push_str("</table>");
    page("Kiln jobs", "", &body)
}

/// Whether the server has a usable CesiumJS build, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CesiumState {
    /// `/cesium/Cesium.js` is served from this folder.
    Available,
    /// Neither `--cesium` nor `$KILN_CESIUM_DIR` was given.
    NotConfigured,
    /// A folder was given but holds no `Cesium.js`.
    Missing {
        /// The folder as given.
        dir: String,
    },
}

/// How to install CesiumJS, as HTML (the same words the CLI help gives).
pub fn cesium_install_html(state: &CesiumState) -> String {
    let why = match state {
        CesiumState::Available => return String::new(),
        CesiumState::NotConfigured => {
            "CesiumJS is not installed for this server (no <code>--cesium DIR</code> and no \
             <code>$KILN_CESIUM_DIR</code>)."
                .to_string()
        }
        CesiumState::Missing { dir } => format!(
            "CesiumJS was configured at <code>{}</code>, but that folder has no \
             <code>Cesium.js</code>.",
            escape_html(dir)
        ),
    };
    format!(
        "{why} Kiln never loads it from a CDN. Install it with \
         <code>npm i cesium@{CESIUM_VERSION}</code>, then restart with \
         <code>KILN_CESIUM_DIR=$PWD/node_modules/cesium/Build/Cesium kiln serve</code> \
         (or <code>kiln serve --cesium node_modules/cesium/Build/Cesium</code>)."
    )
}

/// Everything the job page needs, resolved by the handler (which does the I/O).
#[derive(Debug, Clone)]
pub struct JobPageInput<'a> {
    /// The job as stored.
    pub job: &'a JobRow,
    /// Its output, resolved.
    pub output: &'a OutputLocation,
    /// Whether `<output>/tileset.json` exists (false for non-local outputs).
    pub has_tileset: bool,
    /// Whether `<output>/report/index.html` exists (false for non-local outputs).
    pub has_report: bool,
    /// Whether `<output>/cameras.json` exists (the viewer then opens at its first camera).
    pub has_cameras: bool,
    /// CesiumJS availability.
    pub cesium: &'a CesiumState,
}

/// Why the viewer cannot start for this job, as (plain text for `kilnViewer.error`, HTML note);
/// `None` when it can.
fn viewer_blocker(p: &JobPageInput<'_>) -> Option<(String, String)> {
    match p.output {
        OutputLocation::Remote { url } => {
            let text = format!(
                "This job's output is remote ({url}); kiln serve shows local outputs only. \
                 Copy it to a local folder to view it."
            );
            let html = format!(
                "This job's output is remote (<code>{}</code>); <code>kiln serve</code> shows \
                 local outputs only. Copy it to a local folder (for example \
                 <code>aws s3 sync {} ./out</code>) and open <code>tileset.json</code> there.",
                escape_html(url),
                escape_html(url)
            );
            return Some((text, html));
        }
        OutputLocation::Unsupported { recorded, reason } => {
            let text = format!("This job's output `{recorded}` cannot be served: {reason}.");
            let html = format!(
                "This job's output <code>{}</code> cannot be served: {}.",
                escape_html(recorded),
                escape_html(reason)
            );
            return Some((text, html));
        }
        OutputLocation::Local { dir, was_relative } if !p.has_tileset => {
            let tileset = dir.join("tileset.json");
            let mut text = format!("No tileset at {}", tileset.display());
            let mut html = format!(
                "No tileset at <code>{}</code>",
                escape_html(&tileset.display().to_string())
            );
            let why = match p.job.state.as_str() {
                "running" => " (the job is still running; reload when it has published).",
                "failed" => " (the job failed before publishing; `kiln report` shows the stage).",
                _ => ".",
            };
            text.push_str(why);
            html.push_str(&escape_html(why));
            if *was_relative {
                let extra = " The ledger recorded a relative output path, resolved against this \
                             server's working directory; start kiln serve from the directory \
                             where kiln run ran.";
                text.push_str(extra);
                html.push_str(extra);
            }
            return Some((text, html));
        }
        OutputLocation::Local { .. } => {}
    }
    if *p.cesium != CesiumState::Available {
        let html = cesium_install_html(p.cesium);
        let text = format!(
            "CesiumJS is not available: npm i cesium@{CESIUM_VERSION}, then set \
             KILN_CESIUM_DIR to node_modules/cesium/Build/Cesium and restart kiln serve"
        );
        return Some((text, html));
    }
    None
}

/// The viewer script: creates the CesiumWidget, loads the tileset, opens at the first camera of
/// `cameras.json` when the job has one (else frames the tileset) and keeps `window.kilnViewer` up
/// to date. `KILN_CONFIG` is replaced by a JSON object `{tilesetUrl, camerasUrl, background:
/// [r, g, b]}`.
const VIEWER_JS: &str = r#"
(function () {
  const cfg = KILN_CONFIG;
  const status = window.kilnViewer = {
    ready: false, tilesLoaded: false, failed: [], contentKinds: {}, statistics: null,
    frames: 0, error: null, backgroundColor: cfg.background, tilesetUrl: cfg.tilesetUrl,
    pendingRequests: 0, tilesProcessing: 0, allTilesLoadedEvents: 0
  };
  const line = document.getElementById('viewer-status');
  const say = (msg) => { line.textContent = msg; };
  function fail(msg) {
    status.error = msg;
    say('viewer error: ' + msg);
    console.error('kiln viewer: ' + msg);
  }
  window.addEventListener('error', (e) => { if (!status.error) { status.error = String(e.message); } });
  function kindOf(content) {
    if (!content) { return 'none'; }
    if (Cesium.GaussianSplat3DTileContent && content instanceof Cesium.GaussianSplat3DTileContent) { return 'gaussianSplat'; }
    if (Cesium.Model3DTileContent && content instanceof Cesium.Model3DTileContent) { return 'model'; }
    if (Cesium.Empty3DTileContent && content instanceof Cesium.Empty3DTileContent) { return 'empty'; }
    return 'other';
  }
  function numbers(stats) {
    const out = {};
    for (const k of Object.keys(stats)) {
      if (typeof stats[k] === 'number') { out[k] = stats[k]; }
    }
    return out;
  }
  // Frames over which a finished load is settled (CesiumJS rebuilds its splat snapshot once
  // the selected tiles have been stable for some frames).
  const SETTLE_FRAMES = 60;
  async function start() {
    const bg = cfg.background;
    const widget = new Cesium.CesiumWidget('viewer', {
      baseLayer: false, globe: false, skyBox: false, skyAtmosphere: false,
      contextOptions: { webgl: { preserveDrawingBuffer: true } }
    });
    const scene = widget.scene;
    scene.backgroundColor = Cesium.Color.fromBytes(bg[0], bg[1], bg[2], 255);
    // Frames left in which the camera is nudged after all tiles loaded (see allTilesLoaded).
    let settleFrames = 0;
    let nudge = 0;
    scene.postRender.addEventListener(() => {
      status.frames += 1;
      if (settleFrames > 0) {
        // Forward and back in turn (an even count: the camera ends where it started).
        widget.camera.moveForward(settleFrames % 2 === 0 ? nudge : -nudge);
        settleFrames -= 1;
        if (settleFrames === 0) { status.tilesLoaded = true; }
      }
    });
    // A headlight: by default CesiumJS lights models with the sun at the current clock time, so
    // a mesh viewed at the site's night is drawn almost black.
    const light = new Cesium.DirectionalLight({ direction: new Cesium.Cartesian3(0, 0, -1) });
    scene.light = light;
    scene.preRender.addEventListener(() => {
      Cesium.Cartesian3.clone(widget.camera.directionWC, light.direction);
    });
    window.kilnWidget = widget;
    // `?sse=N` on the page URL lowers the screen-space error to look at finer LODs (default 16,
    // CesiumJS's own default).
    const sse = Number(new URLSearchParams(window.location.search).get('sse')) || 16;
    status.maximumScreenSpaceError = sse;
    const tileset = await Cesium.Cesium3DTileset.fromUrl(cfg.tilesetUrl, { maximumScreenSpaceError: sse });
    tileset.tileFailed.addEventListener((e) => {
      status.failed.push({ url: String(e.url), message: String(e.message) });
      say('tile failed: ' + e.url + ': ' + e.message);
    });
    tileset.tileLoad.addEventListener((tile) => {
      const k = kindOf(tile.content);
      status.contentKinds[k] = (status.contentKinds[k] || 0) + 1;
    });
    // `tilesLoaded` means "everything the current view needs is loaded": it drops back to false
    // while Cesium refines to the next level of detail.
    tileset.loadProgress.addEventListener((pending, processing) => {
      status.pendingRequests = pending;
      status.tilesProcessing = processing;
      if (pending > 0 || processing > 0) { status.tilesLoaded = false; }
    });
    tileset.allTilesLoaded.addEventListener(() => {
      // CesiumJS sorts Gaussian splats by depth when the camera moves, and rebuilds its splat
      // snapshot only once the selected tiles have been stable for some frames: a tile that
      // finishes loading while the camera stands still can be drawn in an order made for another
      // view (a fixed wrong picture in some headless runs, whatever one nudge's timing). Moves
      // far below a pixel over the next frames re-sort after the snapshot is rebuilt; the page
      // reports loaded only then.
      nudge = Math.max(tileset.boundingSphere.radius, 1e-3) * 1e-6;
      settleFrames = SETTLE_FRAMES;
      status.allTilesLoadedEvents += 1;
      status.statistics = numbers(tileset.statistics);
      say('tiles loaded: ' + JSON.stringify(status.contentKinds) + (status.failed.length ? ', ' + status.failed.length + ' failed' : ''));
    });
    scene.primitives.add(tileset);
    const bs = tileset.boundingSphere;
    const range = Math.max(bs.radius, 1e-3) * 2.5;
    // Cesium clamps the near plane to camera.frustum.near (1 m by default), which would clip a
    // centimetre-sized mesh away entirely; scale it to the tileset instead.
    widget.camera.frustum.near = Math.min(1.0, range * 0.01);
    const params = new URLSearchParams(window.location.search);
    // `?view=top` looks straight down with north up (heading 0, pitch -90°, in the local
    // east-north-up frame at the tileset's centre): the browser axis check reads colours from it.
    const top = params.get('view') === 'top';
    // cameras.json (written by the eval stage): open where a held-out photo was taken, exactly
    // (position, direction, up, field of view, the photo's aspect ratio); `?camera=N` picks one.
    const cams = top || !cfg.camerasUrl ? null : await fetch(cfg.camerasUrl)
      .then((r) => (r.ok ? r.json() : null)).catch(() => null);
    const list = cams && Array.isArray(cams.cameras) ? cams.cameras : [];
    status.cameras = list.map((c) => c.name);
    function showCamera(i) {
      const c = list[i];
      const el = document.getElementById('viewer');
      const box = el.parentElement.getBoundingClientRect();
      const avail = Math.max(box.height - 40, 100);
      const scale = Math.min(box.width / c.width, avail / c.height);
      el.style.flex = '0 0 auto';
      el.style.width = Math.floor(c.width * scale) + 'px';
      el.style.height = Math.floor(c.height * scale) + 'px';
      widget.resize();
      const f = widget.camera.frustum;
      // PerspectiveFrustum.fov spans the larger side of the canvas.
      f.fov = c.width > c.height ? c.fovx_rad : c.fovy_rad;
      f.aspectRatio = c.width / c.height;
      f.near = Math.min(f.near, 0.01);
      const v = (a) => new Cesium.Cartesian3(a[0], a[1], a[2]);
      widget.camera.setView({ destination: v(c.position), orientation: { direction: v(c.direction), up: v(c.up) } });
      status.view = 'camera';
      status.camera = { index: i, name: c.name, kind: c.kind, width: c.width, height: c.height };
      const b = document.getElementById('next-view');
      b.hidden = false;
      b.textContent = 'view ' + (i + 1) + '/' + list.length + ' (' + c.name + '): next';
    }
    if (list.length > 0) {
      let i = Math.min(Math.max(Number(params.get('camera')) || 0, 0), list.length - 1);
      showCamera(i);
      document.getElementById('next-view').addEventListener('click', () => {
        i = (i + 1) % list.length;
        showCamera(i);
      });
    } else {
      status.view = top ? 'top' : 'oblique';
      widget.camera.viewBoundingSphere(bs, top
        ? new Cesium.HeadingPitchRange(0.0, -Cesium.Math.PI_OVER_TWO, range)
        : new Cesium.HeadingPitchRange(0.6, -0.5, range));
      widget.camera.lookAtTransform(Cesium.Matrix4.IDENTITY);
    }
    status.ready = true;
    say('tileset added; loading tiles…');
  }
  if (typeof Cesium === 'undefined') {
    fail('Cesium.js did not load from /cesium/Cesium.js');
    return;
  }
  start().catch((e) => fail('cannot show ' + cfg.tilesetUrl + ': ' + (e && e.message ? e.message : e)));
})();
"#;

/// The job page (`GET /jobs/{id}`): the 3D viewer on the left, the report on the right. The page
/// URL may carry `?sse=N` (pixels; default 16) to set the tileset's maximum screen-space error.
pub fn job_page(p: &JobPageInput<'_>) -> String {
    let j = p.job;
    let id_seg = encode_segment(&j.id);
    let files = format!("/jobs/{id_seg}/files");
    let header = format!(
        "<header><h1><a href=\"/\">jobs</a> / {}</h1>{} · {} · <span class=\"state-{}\">{}</span> \
         · output <code>{}</code></header>\n",
        escape_html(&j.id),
        escape_html(&j.name),
        escape_html(&j.kind),
        escape_html(&j.state),
        escape_html(&j.state),
        escape_html(&j.output),
    );
    let blocker = viewer_blocker(p);
    let (viewer_html, head_extra, script) = match &blocker {
        Some((text, html)) => {
            let status = serde_json::json!({
                "ready": false, "tilesLoaded": false, "failed": [], "contentKinds": {},
                "statistics": null, "frames": 0, "error": text,
            });
            (
                format!("<div class=\"note\" id=\"viewer-note\">{html}</div>"),
                String::new(),
                format!(
                    "<script>window.kilnViewer = {};</script>",
                    script_json(&status)
                ),
            )
        }
        None => {
            let cfg = serde_json::json!({
                "tilesetUrl": format!("{files}/tileset.json"),
                "camerasUrl": p.has_cameras.then(|| format!("{files}/cameras.json")),
                "background": VIEWER_BACKGROUND_RGB,
            });
            (
                "<div id=\"viewer\"></div><div id=\"viewer-status\">loading CesiumJS…</div>\
                 <button id=\"next-view\" hidden>next view</button>"
                    .to_string(),
                "<link rel=\"stylesheet\" href=\"/cesium/Widgets/widgets.css\">\
                 <script>window.CESIUM_BASE_URL = '/cesium/';</script>\
                 <script src=\"/cesium/Cesium.js\"></script>"
                    .to_string(),
                format!(
                    "<script>{}</script>",
                    VIEWER_JS.replace("KILN_CONFIG", &script_json(&cfg))
                ),
            )
        }
    };
    let report_html = if p.has_report {
        format!(
            "<iframe id=\"report\" title=\"job report\" src=\"{files}/report/index.html\"></iframe>"
        )
    } else {
        let where_ = match p.output {
            OutputLocation::Local { dir, .. } => format!(
                " (looked for <code>{}</code>)",
                escape_html(&dir.join("report/index.html").display().to_string())
            ),
            _ => String::new(),
        };
        format!("<div class=\"note\" id=\"report-note\">No report yet for this job{where_}.</div>")
    };
    let body = format!(
        "{header}<main class=\"split\"><section>{viewer_html}</section>\
         <section>{report_html}</section></main>\n{script}"
    );
    page(&format!("Kiln · {}", j.id), &head_extra, &body)
}

/// A small error page (404, 400, 500) with a message that says what to do.
pub fn message_page(title: &str, message_html: &str) -> String {
    page(
        title,
        "",
        &format!(
            "<header><h1><a href=\"/\">jobs</a> / {}</h1></header><div class=\"note\">{message_html}</div>",
            escape_html(title)
        ),
    )
}

/// `path` shown in a message.
pub fn code_path(path: &Path) -> String {
    format!("<code>{}</code>", escape_html(&path.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(output: &str, state: &str) -> JobRow {
        JobRow {
            id: "avo-1".into(),
            name: "avo<script>".into(),
            kind: "mesh".into(),
            input: "in".into(),
            output: output.into(),
            state: state.into(),
            created_at: "2026-11-30T00:00:00Z".into(),
            finished_at: None,
            error: None,
        }
    }

    #[test]
    fn html_escape_covers_markup_and_quotes() {
        assert_eq!(
            escape_html("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn script_json_cannot_close_the_script_element() {
        let s = script_json(&serde_json::json!({"e": "</script><!--"}));
        assert!(!s.contains("</script>") && !s.contains("<!--"), "{s}");
    }

    #[test]
    fn job_page_without_cesium_says_how_to_install_it_and_never_uses_a_cdn() {
        let j = job("/tmp/out", "succeeded");
        let loc = OutputLocation::Local {
            dir: "/tmp/out".into(),
            was_relative: false,
        };
        let html = job_page(&JobPageInput {
            job: &j,
            output: &loc,
            has_tileset: true,
            has_report: false,
            has_cameras: false,
            cesium: &CesiumState::NotConfigured,
        });
        assert!(html.contains("npm i cesium@1.145.0"), "{html}");
        assert!(html.contains("KILN_CESIUM_DIR"));
        assert!(html.contains("No report yet"));
        assert!(!html.contains("https://"), "no external URL may appear");
        assert!(!html.contains("avo<script>"), "names are escaped");
    }

    #[test]
    fn job_page_with_cesium_loads_the_tileset_and_frames_the_report() {
        let j = job("/tmp/out", "succeeded");
        let loc = OutputLocation::Local {
            dir: "/tmp/out".into(),
            was_relative: false,
        };
        let html = job_page(&JobPageInput {
            job: &j,
            output: &loc,
            has_tileset: true,
            has_report: true,
            has_cameras: false,
            cesium: &CesiumState::Available,
        });
        assert!(html.contains("src=\"/cesium/Cesium.js\""));
        assert!(html.contains("\"tilesetUrl\":\"/jobs/avo-1/files/tileset.json\""));
        assert!(html.contains("src=\"/jobs/avo-1/files/report/index.html\""));
        assert!(!html.contains("https://"));
    }

    #[test]
    fn job_page_for_remote_output_says_it_is_remote() {
        let j = job("s3://b/p", "succeeded");
        let loc = OutputLocation::Remote {
            url: "s3://b/p".into(),
        };
        let html = job_page(&JobPageInput {
            job: &j,
            output: &loc,
            has_tileset: false,
            has_report: false,
            has_cameras: false,
            cesium: &CesiumState::Available,
        });
        assert!(html.contains("output is remote"), "{html}");
        assert!(!html.contains("/cesium/Cesium.js"));
    }

    #[test]
    fn segment_encoding_keeps_ids_and_escapes_the_rest() {
        assert_eq!(encode_segment("fox-2026T1-ab_c.d~"), "fox-2026T1-ab_c.d~");
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
    }
}
