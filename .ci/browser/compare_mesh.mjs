// Headless picture comparison of a mesh job's tiles with their source: renders the source glTF as
// a CesiumJS Model, then each given 3D Tiles tileset at a maximum screen-space error of 0 (every
// leaf), in one CesiumJS viewer with the same camera, placement, time, light and canvas, and
// reports the PSNR of each tileset's picture against the source's. Saves the pictures and an
// amplified difference image per tileset.
//
// Usage: NODE_PATH=<cache>/node_modules node compare_mesh.mjs [options] SOURCE.gltf|glb
//          NAME=PATH/tileset.json [NAME=PATH/tileset.json ...]
// Options: --out DIR        where the PNGs go (default .), named source.png, NAME.png, NAME-diff.png
//          --size N         canvas width and height in pixels (default 512)
//          --view AZ,EL     camera azimuth about the tileset's +z and elevation in degrees
//                           (default 0,0: looking along +y, i.e. at the glTF +z face, level)
//          --timeout S      seconds for the whole check (default 120)
// Env:     KILN_CHROMIUM (default /usr/bin/chromium);
//          KILN_CESIUM_DIR (the CesiumJS build folder, default NODE_PATH/cesium/Build/Cesium).
//
// Frames: a tileset puts its glTF content (Y up) in its Z-up frame by the 3D Tiles rule (y-up →
// z-up rotation only: CesiumJS's tilesets use up axis Y and forward axis X), then applies the
// root transform. The Model is loaded with the same axes (its own default forward axis Z would add
// a 90° turn about z) and the root transform as its modelMatrix, so source and tiles coincide.
// Without a root transform both are placed by one east-north-up frame (see setUp).
//
// PSNR: 10·log10(255² / MSE) over the RGB channels of the pixels where either picture is not
// background (the clear colour, magenta, which no test asset contains): background pixels are
// equal by construction, and counting them would make the score depend on how much of the frame
// the asset fills. The full-frame PSNR is reported too.
//
// Prints a JSON summary on stdout. Exit: 0 all renders done (the caller judges the PSNR), 1 a
// render failed (console error, failed request, tileset or model error, timeout), 2 usage or the
// browser cannot start.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
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

function usage(msg) {
  console.error(`${msg}\nusage: node compare_mesh.mjs [--out DIR] [--size N] [--view AZ,EL] [--timeout S] SOURCE.gltf NAME=TILESET.json...`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { out: '.', size: 512, view: [0, 0], timeout: 120, source: null, tilesets: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) { usage(`${a} needs a value`); }
      i += 1;
      return argv[i];
    };
    if (a === '--out') { opts.out = value(); }
    else if (a === '--size') { opts.size = Number(value()); }
    else if (a === '--timeout') { opts.timeout = Number(value()); }
    else if (a === '--view') { opts.view = value().split(',').map(Number); }
    else if (a.startsWith('--')) { usage(`unknown option ${a}`); }
    else if (!opts.source) { opts.source = a; }
    else {
      const eq = a.indexOf('=');
      if (eq <= 0) { usage(`tileset argument ${a} must be NAME=PATH/tileset.json`); }
      opts.tilesets.push({ name: a.slice(0, eq), file: a.slice(eq + 1) });
    }
  }
  if (!opts.source) { usage('no source glTF given'); }
  if (!opts.tilesets.length) { usage('no tileset given'); }
  if (!(opts.size >= 16 && opts.size <= 4096)) { usage(`--size ${opts.size}: give 16 to 4096 pixels`); }
  if (opts.view.length !== 2 || opts.view.some((v) => !Number.isFinite(v))) { usage('--view needs AZ,EL in degrees'); }
  for (const f of [opts.source, ...opts.tilesets.map((t) => t.file)]) {
    if (!fs.statSync(f, { throwIfNoEntry: false })?.isFile()) { usage(`${f}: no such file`); }
  }
  for (const t of opts.tilesets) {
    if (!/^[A-Za-z0-9_.-]+$/.test(t.name)) { usage(`tileset name ${t.name}: use letters, digits, '-', '_', '.'`); }
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));

// The tilesets' root transform (column-major, 16 numbers) or null; every tileset given must have
// the same one, since the source is placed by it.
function rootTransformOf(file) {
  let json;
  try {
    json = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    usage(`${file}: not a tileset JSON (${e.message})`);
  }
  const m = json && json.root && json.root.transform;
  if (m === undefined) { return null; }
  if (!Array.isArray(m) || m.length !== 16 || !m.every(Number.isFinite)) {
    usage(`${file}: root.transform must be 16 numbers (3D Tiles 1.1, column-major)`);
  }
  return m;
}
const rootTransform = rootTransformOf(opts.tilesets[0].file);
for (const t of opts.tilesets.slice(1)) {
  if (JSON.stringify(rootTransformOf(t.file)) !== JSON.stringify(rootTransform)) {
    usage(`${t.file}: root.transform differs from ${opts.tilesets[0].file}'s; compare one placement per run`);
  }
}
const chromium = process.env.KILN_CHROMIUM || '/usr/bin/chromium';
const cesiumDir = process.env.KILN_CESIUM_DIR
  || path.join((process.env.NODE_PATH || '').split(path.delimiter)[0] || '.', 'cesium/Build/Cesium');
if (!fs.existsSync(path.join(cesiumDir, 'Cesium.js'))) {
  usage(`no Cesium.js in ${cesiumDir} (set KILN_CESIUM_DIR)`);
}
fs.mkdirSync(opts.out, { recursive: true });

// The page: a full-window container; everything else is driven from here through evaluate().
const PAGE = `<!doctype html><html><head><meta charset="utf-8">
<style>html,body,#c{margin:0;padding:0;width:100%;height:100%;overflow:hidden;background:#000}</style>
<link rel="stylesheet" href="/cesium/Widgets/widgets.css">
<script src="/cesium/Cesium.js"></script></head><body><div id="c"></div></body></html>`;

const TYPES = {
  '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.json': 'application/json', '.gltf': 'model/gltf+json', '.glb': 'model/gltf-binary',
  '.bin': 'application/octet-stream', '.png': 'image/png', '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg', '.webp': 'image/webp', '.ktx2': 'image/ktx2', '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml', '.xml': 'application/xml',
};

// Static server: /page.html, /cesium/* from the CesiumJS build, /f/K/* from the folder of the K-th
// input file (the source's folder is 0). Paths that leave their folder are refused.
const roots = [path.dirname(path.resolve(opts.source)), ...opts.tilesets.map((t) => path.dirname(path.resolve(t.file)))];
function resolveRequest(urlPath) {
  let p;
  try {
    p = decodeURIComponent(urlPath.split('?')[0]);
  } catch (e) {
    return null;
  }
  if (p === '/page.html') { return { body: PAGE, type: 'text/html' }; }
  // Chromium asks for one; an empty answer keeps a 404 out of the console.
  if (p === '/favicon.ico') { return { body: '', type: 'image/x-icon' }; }
  let root = null;
  let rest = null;
  if (p.startsWith('/cesium/')) { root = path.resolve(cesiumDir); rest = p.slice('/cesium/'.length); }
  const m = /^\/f\/(\d+)\/(.*)$/.exec(p);
  if (m && Number(m[1]) < roots.length) { root = roots[Number(m[1])]; rest = m[2]; }
  if (root === null) { return null; }
  const file = path.resolve(root, rest);
  if (file !== root && !file.startsWith(root + path.sep)) { return null; }
  return { file, type: TYPES[path.extname(file).toLowerCase()] || 'application/octet-stream' };
}
const server = http.createServer((req, res) => {
  const r = resolveRequest(req.url);
  if (r && r.body !== undefined) {
    res.writeHead(200, { 'content-type': r.type });
    res.end(r.body);
    return;
  }
  if (!r || !fs.statSync(r.file, { throwIfNoEntry: false })?.isFile()) {
    res.writeHead(404);
    res.end();
    return;
  }
  res.writeHead(200, { 'content-type': r.type });
  fs.createReadStream(r.file).pipe(res);
});
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const base = `http://127.0.0.1:${server.address().port}`;
const fileUrl = (k, file) => `${base}/f/${k}/${encodeURIComponent(path.basename(file))}`;

// ---- In-page functions (serialised by puppeteer; no closure over this module) ----

// Set up the viewer: no globe, sky, sun, moon, fog, anti-aliasing or HDR; magenta background; a
// fixed time and directional light. Source and tiles are placed by one matrix: the tileset's root
// transform when it has one (a georeferenced job), otherwise an east-north-up frame at a fixed
// place (Portsmouth, as tests/e2e/viewer.rs's fixture), so that CesiumJS's default dynamic
// environment map (the sky at that place, reflected by metallic surfaces; what makes normal and
// metallic-roughness maps show) is the same for both: the Model and the tileset each compute their
// own map, at positions a few centimetres apart, for the same time and light.
function setUp(rootTransform) {
  const C = window.Cesium;
  const viewer = new C.Viewer('c', {
    globe: false, skyBox: false, skyAtmosphere: false, baseLayer: false, baseLayerPicker: false,
    geocoder: false, homeButton: false, sceneModePicker: false, navigationHelpButton: false,
    animation: false, timeline: false, fullscreenButton: false, infoBox: false,
    selectionIndicator: false, scene3DOnly: true, shouldAnimate: false,
    useBrowserRecommendedResolution: false, msaaSamples: 1,
    contextOptions: { webgl: { preserveDrawingBuffer: true, antialias: false } },
  });
  const scene = viewer.scene;
  viewer.resolutionScale = 1;
  viewer.clock.currentTime = C.JulianDate.fromIso8601('2026-06-21T12:00:00Z');
  scene.backgroundColor = new C.Color(1, 0, 1, 1);
  if (scene.sun) { scene.sun.show = false; }
  if (scene.moon) { scene.moon.show = false; }
  scene.fog.enabled = false;
  scene.highDynamicRange = false;
  scene.postProcessStages.fxaa.enabled = false;
  const place = rootTransform
    ? C.Matrix4.fromArray(rootTransform)
    : C.Transforms.eastNorthUpToFixedFrame(C.Cartesian3.fromDegrees(-1.1088, 50.802, 10));
  // From the camera's side, above and to the right (tileset frame, Z up).
  const light = C.Cartesian3.normalize(new C.Cartesian3(-0.4, 0.7, -0.6), new C.Cartesian3());
  scene.light = new C.DirectionalLight({
    direction: C.Matrix4.multiplyByPointAsVector(place, light, new C.Cartesian3()),
    intensity: 2.0,
  });
  window.kilnCompare = {
    viewer,
    place,
    // The tileset's own root transform already places it.
    tilesetMatrix: rootTransform ? C.Matrix4.IDENTITY : place,
    errors: [],
    tileset: null,
    model: null,
    visible: new Map(),
  };
  viewer.resize();
  return { width: scene.canvas.width, height: scene.canvas.height };
}

async function loadModel(url) {
  const C = window.Cesium;
  const k = window.kilnCompare;
  const model = await C.Model.fromGltfAsync({
    url,
    upAxis: C.Axis.Y,
    forwardAxis: C.Axis.X,
    incrementallyLoadTextures: false,
    modelMatrix: k.place,
  });
  model.errorEvent.addEventListener((e) => k.errors.push(`model: ${e}`));
  k.viewer.scene.primitives.add(model);
  k.model = model;
  await new Promise((ok) => {
    if (model.ready) { ok(); return; }
    model.readyEvent.addEventListener(() => ok());
  });
  const bs = model.boundingSphere;
  return { center: [bs.center.x, bs.center.y, bs.center.z], radius: bs.radius };
}

// Camera at azimuth `az` (degrees, about the tileset frame's +z, 0 = looking along +y) and
// elevation `el` (degrees) around the sphere (centre in world coordinates), far enough that the
// whole sphere fits the 45° field of view.
function placeCamera(center, radius, az, el) {
  const C = window.Cesium;
  const { viewer, place } = window.kilnCompare;
  const camera = viewer.camera;
  camera.frustum.fov = Math.PI / 4;
  const a = C.Math.toRadians(az);
  const e = C.Math.toRadians(el);
  const v = () => new C.Cartesian3();
  const dir = new C.Cartesian3(-Math.sin(a) * Math.cos(e), Math.cos(a) * Math.cos(e), -Math.sin(e));
  const right = C.Cartesian3.normalize(C.Cartesian3.cross(dir, C.Cartesian3.UNIT_Z, v()), v());
  const up = C.Cartesian3.cross(right, dir, v());
  const dirWorld = C.Matrix4.multiplyByPointAsVector(place, dir, v());
  const dist = (radius / Math.sin(Math.PI / 8)) * 1.05;
  const pos = C.Cartesian3.subtract(new C.Cartesian3(...center), C.Cartesian3.multiplyByScalar(dirWorld, dist, v()), v());
  camera.setView({
    destination: pos,
    orientation: { direction: dirWorld, up: C.Matrix4.multiplyByPointAsVector(place, up, v()) },
  });
}

async function loadTileset(url) {
  const C = window.Cesium;
  const k = window.kilnCompare;
  if (k.model) { k.model.show = false; }
  if (k.tileset) { k.viewer.scene.primitives.remove(k.tileset); k.tileset = null; }
  // Every leaf: a maximum screen-space error of 0 refines every tile with a non-zero geometric
  // error; the optimisations that defer or skip tiles are off so "loaded" means "leaves loaded".
  const tileset = await C.Cesium3DTileset.fromUrl(url, {
    maximumScreenSpaceError: 0,
    skipLevelOfDetail: false,
    dynamicScreenSpaceError: false,
    foveatedScreenSpaceError: false,
    progressiveResolutionHeightFraction: 0,
    cullRequestsWhileMoving: false,
    modelMatrix: k.tilesetMatrix,
  });
  tileset.tileFailed.addEventListener((e) => k.errors.push(`tile ${e.url}: ${e.message}`));
  tileset.tileVisible.addEventListener((tile) => {
    k.visible.set(tile.content.url, tile.children.length === 0);
  });
  k.viewer.scene.primitives.add(tileset);
  k.tileset = tileset;
}

// One frame's loading state: the tileset's tiles for this view loaded, the shown primitive's
// environment map finished, and which tiles were drawn.
function frameState() {
  const C = window.Cesium;
  const k = window.kilnCompare;
  k.visible.clear();
  k.viewer.scene.render();
  const t = k.tileset;
  // The map is built over several frames (radiance, specular convolutions, irradiance, then the
  // spherical harmonics read back); the flags and queue read here are CesiumJS 1.145 internals, so
  // where they are missing only the picture's stability (see settle) is relied on.
  const envDone = (m) => {
    const D = C.DynamicEnvironmentMapManager;
    if (!m || m._radianceMapDirty === undefined || !D || D._nextFrameCommandQueue === undefined) {
      return true;
    }
    return m._radianceCubeMap !== undefined && !m._radianceMapDirty
      && !m._convolutionsCommandsDirty && !m._irradianceCommandDirty
      && !m._irradianceTextureDirty && !m._sphericalHarmonicCoefficientsDirty
      && D._nextFrameCommandQueue.length === 0 && D._activeComputeCommandCount === 0;
  };
  return {
    errors: k.errors.slice(),
    loaded: t ? t.tilesLoaded : true,
    environment: envDone(t ? t.environmentMapManager : k.model && k.model.environmentMapManager),
    visible: Array.from(k.visible, ([url, leaf]) => ({ url, leaf })),
  };
}

// The canvas as a PNG data URL (compact across the puppeteer boundary) and a checksum of its RGBA
// bytes to tell whether two frames differ.
function capture() {
  const c = window.kilnCompare.viewer.scene.canvas;
  const t = document.createElement('canvas');
  t.width = c.width;
  t.height = c.height;
  const ctx = t.getContext('2d');
  ctx.drawImage(c, 0, 0);
  const d = ctx.getImageData(0, 0, t.width, t.height).data;
  let sum = 0;
  for (let i = 0; i < d.length; i += 1) { sum = (sum * 31 + d[i]) >>> 0; }
  return { png: t.toDataURL('image/png'), sum, width: t.width, height: t.height };
}

// PSNR of the current canvas against the picture `refPng` (a data URL), over the pixels where
// either is not the magenta background (any channel more than 8 away: SwiftShader rounding stays
// below that) and over the whole frame; and a difference image (|a - b| × 4 per channel).
async function compareWith(refPng) {
  const img = new Image();
  img.src = refPng;
  await img.decode();
  const c = window.kilnCompare.viewer.scene.canvas;
  const w = c.width;
  const h = c.height;
  const read = (src) => {
    const t = document.createElement('canvas');
    t.width = w;
    t.height = h;
    const ctx = t.getContext('2d');
    ctx.drawImage(src, 0, 0);
    return ctx.getImageData(0, 0, w, h);
  };
  const a = read(c).data;
  const b = read(img).data;
  const diff = new ImageData(w, h);
  const isBg = (d, i) => Math.abs(d[i] - 255) <= 8 && d[i + 1] <= 8 && Math.abs(d[i + 2] - 255) <= 8;
  let fgA = 0; let fgB = 0; let n = 0; let se = 0; let seAll = 0;
  for (let i = 0; i < a.length; i += 4) {
    const bgA = isBg(a, i);
    const bgB = isBg(b, i);
    if (!bgA) { fgA += 1; }
    if (!bgB) { fgB += 1; }
    let s = 0;
    for (let ch = 0; ch < 3; ch++) {
      const d = a[i + ch] - b[i + ch];
      s += d * d;
      diff.data[i + ch] = Math.min(255, Math.abs(d) * 4);
    }
    diff.data[i + 3] = 255;
    seAll += s;
    if (!bgA || !bgB) { n += 1; se += s; }
  }
  const psnr = (sum, count) => (sum > 0 ? 10 * Math.log10((255 * 255 * 3 * count) / sum) : 100);
  const t = document.createElement('canvas');
  t.width = w;
  t.height = h;
  t.getContext('2d').putImageData(diff, 0, 0);
  return {
    psnr_db: n > 0 ? psnr(se, n) : 0,
    psnr_full_frame_db: psnr(seAll, w * h),
    compared_pixels: n,
    foreground_pixels: fgA,
    source_foreground_pixels: fgB,
    diff_png: t.toDataURL('image/png'),
  };
}

// ---- Driver ----

const started = Date.now();
const deadline = started + opts.timeout * 1000;
const left = () => Math.max(1000, deadline - Date.now());
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const savePng = (name, dataUrl) => {
  const file = path.join(opts.out, name);
  fs.writeFileSync(file, Buffer.from(dataUrl.slice(dataUrl.indexOf(',') + 1), 'base64'));
  return file;
};
function withTimeout(promise, what) {
  return Promise.race([
    promise,
    sleep(left()).then(() => { throw new Error(`timed out after ${opts.timeout} s ${what}`); }),
  ]);
}

// Render until the picture stops changing: the tileset's tiles for the view loaded, the
// environment map built, and two captures 400 ms apart identical (textures and shaders finish a
// few frames after "ready").
async function settle(page, what) {
  let last = null;
  while (Date.now() < deadline) {
    const st = await page.evaluate(frameState);
    if (st.errors.length) { return { st, shot: null }; }
    if (st.loaded && st.environment) {
      const shot = await page.evaluate(capture);
      if (last && shot.sum === last.sum) { return { st, shot }; }
      last = shot;
    }
    await sleep(400);
  }
  throw new Error(`timed out after ${opts.timeout} s waiting for ${what} to finish loading`);
}

let browser;
try {
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: [
      '--no-sandbox', '--use-gl=angle', '--use-angle=swiftshader', '--enable-unsafe-swiftshader',
      '--ignore-gpu-blocklist', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run', `--window-size=${opts.size},${opts.size}`,
    ],
    defaultViewport: { width: opts.size, height: opts.size },
  });
} catch (e) {
  console.error(`cannot start ${chromium}: ${e.message}`);
  server.close();
  process.exit(2);
}

const problems = [];
const summary = { source: opts.source, size: opts.size, view: opts.view, tilesets: {} };
try {
  const page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') { problems.push(`console error: ${m.text()}`); } });
  page.on('pageerror', (e) => { problems.push(`page error: ${e.message}`); });
  page.on('requestfailed', (r) => { problems.push(`request failed: ${r.url()}: ${r.failure()?.errorText}`); });
  page.on('response', (r) => { if (r.status() >= 400) { problems.push(`request failed: ${r.url()}: HTTP ${r.status()}`); } });
  await page.goto(`${base}/page.html`, { waitUntil: 'load', timeout: left() });
  summary.root_transform = rootTransform;
  summary.canvas = await page.evaluate(setUp, rootTransform);

  const sphere = await withTimeout(page.evaluate(loadModel, fileUrl(0, opts.source)), 'loading the source model');
  summary.bounding_sphere = sphere;
  await page.evaluate(placeCamera, sphere.center, sphere.radius, opts.view[0], opts.view[1]);
  const src = await settle(page, 'the source model');
  if (src.st.errors.length) { throw new Error(src.st.errors.join('; ')); }
  const srcPng = src.shot.png;
  summary.source_png = savePng('source.png', srcPng);
  summary.source_seconds = (Date.now() - started) / 1000;

  for (const [k, t] of opts.tilesets.entries()) {
    const t0 = Date.now();
    await withTimeout(page.evaluate(loadTileset, fileUrl(k + 1, t.file)), `loading ${t.file}`);
    const r = { tileset: t.file };
    summary.tilesets[t.name] = r;
    const { st, shot } = await settle(page, t.file);
    r.visible_tiles = st.visible.map((v) => v.url);
    r.non_leaf_visible = st.visible.filter((v) => !v.leaf).map((v) => v.url);
    if (st.errors.length) {
      problems.push(...st.errors.map((e) => `${t.name}: ${e}`));
      continue;
    }
    r.png = savePng(`${t.name}.png`, shot.png);
    const cmp = await page.evaluate(compareWith, srcPng);
    r.diff_png = savePng(`${t.name}-diff.png`, cmp.diff_png);
    delete cmp.diff_png;
    Object.assign(r, cmp);
    r.seconds = (Date.now() - t0) / 1000;
  }
} catch (e) {
  problems.push(`check failed: ${e && e.stack ? e.stack : e}`);
} finally {
  await browser.close().catch(() => {});
  server.close();
}
summary.ok = problems.length === 0;
summary.problems = problems;
summary.seconds = (Date.now() - started) / 1000;
console.log(JSON.stringify(summary, null, 2));
process.exit(summary.ok ? 0 : 1);
