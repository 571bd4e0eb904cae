// Headless check of a `kiln serve` job page: opens URL in Debian's Chromium (puppeteer-core,
// software WebGL through SwiftShader), waits until the CesiumJS viewer reports the tileset loaded
// (window.kilnViewer, see jobs/src/serve/pages.rs), and fails on any console error, page error,
// failed request, failed tile, or a canvas with nothing but background. Saves a screenshot and
// prints a JSON summary on stdout.
//
// Usage: NODE_PATH=<cache>/node_modules node check_viewer.mjs URL SCREENSHOT.png [TIMEOUT_S]
// Env:   KILN_CHROMIUM (default /usr/bin/chromium).
//        KILN_COMPARE_PNG=REF.png: the page opens at a camera of cameras.json (`?camera=N`); the
//        canvas, scaled to REF's size, is compared with REF (Kiln's own render of that view):
//        Pearson correlation of luminance and PSNR; fails below KILN_COMPARE_MIN_CORR (default
//        0.6). A rotated, missing or wrongly framed scene correlates near 0.
//        KILN_AXES_CHECK=1: the page shows the axis fixture (tests/e2e/viewer.rs) from the top
//        (`?view=top`, north up): also require its red arm (+x, east) right of the green arm (+y,
//        up, pointing at the camera) and its blue arm (glTF +z, south) below it.
// Exit:  0 pass, 1 check failed (summary says why), 2 usage / cannot start the browser.
import { createRequire } from 'node:module';
import path from 'node:path';

// NODE_PATH is not used by ESM `import`; resolve puppeteer-core through CommonJS instead.
const require = createRequire(path.join(process.cwd(), 'noop.js'));
let puppeteer;
try {
  puppeteer = require('puppeteer-core');
} catch (e) {
  console.error('puppeteer-core not found: run .ci/browser/install.sh ~/.cache/kiln-ci/browser and set NODE_PATH=~/.cache/kiln-ci/browser/node_modules');
  process.exit(2);
}

const [url, shot, timeoutArg] = process.argv.slice(2);
if (!url || !shot) {
  console.error('usage: node check_viewer.mjs URL SCREENSHOT.png [TIMEOUT_S]');
  process.exit(2);
}
const timeoutMs = Number(timeoutArg || 90) * 1000;
const chromium = process.env.KILN_CHROMIUM || '/usr/bin/chromium';

const problems = [];
const consoleErrors = [];
const consoleWarnings = [];
const failedRequests = [];

let browser;
try {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: [
      '--no-sandbox', '--use-gl=angle', '--use-angle=swiftshader', '--enable-unsafe-swiftshader',
      '--ignore-gpu-blocklist', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', '--window-size=1280,800',
    ],
    defaultViewport: { width: 1280, height: 800 },
  });
} catch (e) {
  console.error(`cannot start ${chromium}: ${e.message}`);
  process.exit(2);
}

const started = Date.now();
const deadline = started + timeoutMs;

// Runs in the page: pixels of the 3D canvas that differ from the viewer's background colour by
// more than 8 in some channel (anti-aliasing and SwiftShader rounding stay below that).
function countForeground() {
  const c = document.querySelector('#viewer canvas');
  const bg = (window.kilnViewer && window.kilnViewer.backgroundColor) || [0, 0, 0];
  if (!c) { return { width: 0, height: 0, foreground: 0, total: 0 }; }
  const w = c.width;
  const h = c.height;
  const tmp = document.createElement('canvas');
  tmp.width = w;
  tmp.height = h;
  const ctx = tmp.getContext('2d');
  ctx.drawImage(c, 0, 0);
  const d = ctx.getImageData(0, 0, w, h).data;
  let fg = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - bg[0]) > 8 || Math.abs(d[i + 1] - bg[1]) > 8 || Math.abs(d[i + 2] - bg[2]) > 8) { fg += 1; }
  }
  return { width: w, height: h, foreground: fg, total: w * h };
}
// Runs in the page: count and centroid (canvas pixels) of strongly red, green and blue pixels:
// one channel above 60 and at least 1.6 times each of the other two.
function colourCentroids() {
  const c = document.querySelector('#viewer canvas');
  const out = {};
  for (const k of ['red', 'green', 'blue']) { out[k] = { n: 0, x: 0, y: 0 }; }
  if (!c) { return out; }
  const tmp = document.createElement('canvas');
  tmp.width = c.width;
  tmp.height = c.height;
  const ctx = tmp.getContext('2d');
  ctx.drawImage(c, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  const names = ['red', 'green', 'blue'];
  for (let i = 0; i < d.length; i += 4) {
    for (let ch = 0; ch < 3; ch++) {
      const v = d[i + ch];
      const o1 = d[i + (ch + 1) % 3];
      const o2 = d[i + (ch + 2) % 3];
      if (v > 60 && v >= 1.6 * o1 && v >= 1.6 * o2) {
        const p = (i / 4);
        const acc = out[names[ch]];
        acc.n += 1;
        acc.x += p % c.width;
        acc.y += Math.floor(p / c.width);
      }
    }
  }
  for (const k of names) {
    if (out[k].n > 0) { out[k].x /= out[k].n; out[k].y /= out[k].n; }
  }
  return out;
}

// Runs in the page: the 3D canvas scaled to the reference image's size, compared with it
// (luminance correlation, PSNR over RGB). `dataUrl` is the reference PNG.
async function compareWithReference(dataUrl) {
  const img = new Image();
  img.src = dataUrl;
  await img.decode();
  const w = img.naturalWidth;
  const h = img.naturalHeight;
  const read = (src) => {
    const t = document.createElement('canvas');
    t.width = w;
    t.height = h;
    const ctx = t.getContext('2d');
    ctx.imageSmoothingQuality = 'high';
    ctx.drawImage(src, 0, 0, w, h);
    return ctx.getImageData(0, 0, w, h).data;
  };
  const c = document.querySelector('#viewer canvas');
  if (!c) { return { error: 'no canvas' }; }
  const a = read(c);
  const b = read(img);
  const n = w * h;
  let sa = 0; let sb = 0; let saa = 0; let sbb = 0; let sab = 0; let se = 0;
  for (let i = 0; i < n; i++) {
    const la = 0.299 * a[4 * i] + 0.587 * a[4 * i + 1] + 0.114 * a[4 * i + 2];
    const lb = 0.299 * b[4 * i] + 0.587 * b[4 * i + 1] + 0.114 * b[4 * i + 2];
    sa += la; sb += lb; saa += la * la; sbb += lb * lb; sab += la * lb;
    for (let ch = 0; ch < 3; ch++) { const d = (a[4 * i + ch] - b[4 * i + ch]) / 255; se += d * d; }
  }
  const cov = sab / n - (sa / n) * (sb / n);
  const va = saa / n - (sa / n) ** 2;
  const vb = sbb / n - (sb / n) ** 2;
  const mse = se / (3 * n);
  return {
    width: w, height: h,
    correlation: cov / Math.sqrt(Math.max(va * vb, 1e-12)),
    psnr_db: mse > 0 ? -10 * Math.log10(mse) : 100,
  };
}

// The axis fixture's expected layout in a north-up top view (see the usage note above).
function axesProblems(a) {
  const p = [];
  for (const k of ['red', 'green', 'blue']) {
    if (a[k].n < 30) { p.push(`axis check: only ${a[k].n} ${k} pixels (the ${k} arm is not visible)`); }
  }
  if (p.length) { return p; }
  const dxr = a.red.x - a.green.x;
  const dyr = a.red.y - a.green.y;
  if (!(dxr > 10 && Math.abs(dyr) < dxr / 2)) {
    p.push(`axis check: the red (+x, east) arm should be right of the green (up) arm: offset (${dxr.toFixed(1)}, ${dyr.toFixed(1)}) px`);
  }
  const dxb = a.blue.x - a.green.x;
  const dyb = a.blue.y - a.green.y;
  if (!(dyb > 10 && Math.abs(dxb) < dyb / 2)) {
    p.push(`axis check: the blue (glTF +z, south) arm should be below the green (up) arm: offset (${dxb.toFixed(1)}, ${dyb.toFixed(1)}) px`);
  }
  return p;
}

let summary = { url, screenshot: shot };
try {
  const page = await browser.newPage();
  page.on('console', (m) => {
    const text = m.text();
    const loc = m.location();
    const where = loc && loc.url ? ` (${loc.url}${loc.lineNumber !== undefined ? ':' + loc.lineNumber : ''})` : '';
    if (m.type() === 'error') { consoleErrors.push(text + where); }
    if (m.type() === 'warn' || m.type() === 'warning') { consoleWarnings.push(text + where); }
  });
  page.on('pageerror', (e) => { problems.push(`page error: ${e.message}`); });
  page.on('requestfailed', (r) => { failedRequests.push(`${r.url()}: ${r.failure()?.errorText}`); });
  page.on('response', (r) => {
    if (r.status() >= 400) { failedRequests.push(`${r.url()}: HTTP ${r.status()}`); }
  });

  const resp = await page.goto(url, { waitUntil: 'load', timeout: timeoutMs });
  if (!resp || !resp.ok()) {
    problems.push(`job page ${url}: HTTP ${resp ? resp.status() : 'no response'}`);
  } else {
    // Ready and tiles loaded (or an error reported).
    try {
      await page.waitForFunction(() => {
        const s = window.kilnViewer;
        if (!s) { return false; }
        if (s.error || (s.failed && s.failed.length)) { return true; }
        return s.ready && s.tilesLoaded;
      }, { timeout: Math.max(1000, deadline - Date.now()), polling: 200 });
    } catch (e) {
      problems.push(`timed out after ${timeoutMs / 1000} s waiting for kilnViewer.ready && tilesLoaded`);
    }
    // Content can appear a few frames after allTilesLoaded (splats are drawn only once the
    // worker has sorted them): wait for foreground pixels, then for the count to settle.
    // Cesium also refines level by level, so "settled" means: all loaded for the current view,
    // the same number of loaded tiles and about the same foreground as one second before.
    let last = { n: -1, ready: -1 };
    let settleUntil = 0;
    while (Date.now() < deadline) {
      const st = await page.evaluate(() => {
        const s = window.kilnViewer;
        return {
          broken: !s || !!s.error || (s.failed && s.failed.length > 0) || !s.ready,
          loaded: !!s && s.tilesLoaded,
          ready: s && s.statistics ? s.statistics.numberOfTilesWithContentReady : -1,
        };
      });
      if (st.broken) { break; }
      const n = (await page.evaluate(countForeground)).foreground;
      if (n > 0 && settleUntil === 0) { settleUntil = Math.min(deadline, Date.now() + 20000); }
      const stable = st.loaded && st.ready === last.ready && Math.abs(n - last.n) <= 0.02 * n;
      // After the settle window, stop as soon as the current view's tiles are loaded; while a
      // refinement is still in flight (a busy machine decodes slowly) keep waiting, up to the
      // deadline.
      if (n > 0 && (stable || (Date.now() >= settleUntil && st.loaded))) { break; }
      last = { n, ready: st.ready };
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  // The loop above decided on one snapshot; Cesium can start another refinement request between
  // that snapshot and this one (tilesLoaded flips back to false), so give an in-flight request
  // the rest of the deadline to finish before reading the final state.
  try {
    await page.waitForFunction(() => {
      const s = window.kilnViewer;
      return !s || !!s.error || (s.failed && s.failed.length > 0) || (s.ready && s.tilesLoaded);
    }, { timeout: Math.max(1000, deadline - Date.now()), polling: 200 });
  } catch (e) {
    // Reported below as "tiles never finished loading" with the viewer's statistics.
  }
  const status = await page.evaluate(() => {
    const s = window.kilnViewer || null;
    return s ? JSON.parse(JSON.stringify(s)) : null;
  });
  if (!status) {
    problems.push('the page defines no window.kilnViewer');
  } else {
    if (status.error) { problems.push(`viewer error: ${status.error}`); }
    for (const f of status.failed || []) { problems.push(`tile failed: ${f.url}: ${f.message}`); }
    if (!status.ready) { problems.push('viewer never became ready'); }
    if (!status.tilesLoaded) { problems.push('tiles never finished loading'); }
  }

  const pixels = await page.evaluate(countForeground);
  if (status && status.ready && pixels.foreground === 0) {
    problems.push(`the 3D canvas (${pixels.width}x${pixels.height}) shows only background`);
  }

  let axes = null;
  if (process.env.KILN_AXES_CHECK === '1' && status && status.ready) {
    axes = await page.evaluate(colourCentroids);
    problems.push(...axesProblems(axes));
  }

  let compare = null;
  if (process.env.KILN_COMPARE_PNG && status && status.ready) {
    const fs = await import('node:fs');
    const ref = 'data:image/png;base64,' + fs.readFileSync(process.env.KILN_COMPARE_PNG).toString('base64');
    compare = await page.evaluate(compareWithReference, ref);
    const min = Number(process.env.KILN_COMPARE_MIN_CORR || 0.6);
    if (!status.camera) {
      problems.push('compare: the viewer did not open at a camera of cameras.json');
    }
    if (!compare || compare.error || !(compare.correlation >= min)) {
      problems.push(`compare: the viewer's picture does not match Kiln's render of the same camera (correlation ${compare && compare.correlation}, minimum ${min})`);
    }
  }

  await page.screenshot({ path: shot });
  for (const e of consoleErrors) { problems.push(`console error: ${e}`); }
  for (const r of failedRequests) { problems.push(`request failed: ${r}`); }
  summary = {
    ...summary,
    ok: problems.length === 0,
    seconds: (Date.now() - started) / 1000,
    problems,
    consoleWarnings,
    viewer: status,
    canvas: pixels,
    axes,
    compare,
  };
} catch (e) {
  problems.push(`check crashed: ${e && e.stack ? e.stack : e}`);
  summary = { ...summary, ok: false, problems };
} finally {
  await browser.close().catch(() => {});
}
console.log(JSON.stringify(summary, null, 2));
process.exit(summary.ok ? 0 : 1);
