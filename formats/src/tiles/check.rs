//! Kiln's own 3D Tiles checker (`kiln check`): reads a `tileset.json`, every content file and every
//! external tileset it references, and reports each problem as a [`Finding`] with a severity, the
//! tile path (`root.children[2]`), the file and a fix.
//!
//! It covers what the CesiumGS 3D Tiles validator does not check (shared/research/tiles-formats.md
//! §5, §7): content geometry inside its tile's and every ancestor's bounding volume, tileset
//! geometricError ≥ root, splat/triangle budgets, the `3DTILES_content_gltf` declarations CesiumJS
//! needs to route splat GLBs, and the SPZ payload version CesiumJS can decode.
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Tileset JSON" (asset.version, geometricError,
//! extensionsUsed/Required), §"Tiles" (refine required on the root, content/contents, transforms),
//! §"Bounding volumes" (spatial coherence: content inside its tile's volume and its ancestors'),
//! §"Geometric error" (children ≤ parent, leaves 0), §"glTF transforms" (Y-up → Z-up before tile
//! transforms), §"External tilesets" (no children, no cycles); `3DTILES_content_gltf`; CesiumJS
//! 1.145 `Cesium3DTileset` / `GaussianSplat3DTileContent` routing and its SPZ loader (research §1.7).
//!
//! Boundaries: implicit tilesets (`implicitTiling`) are checked at their root only (subtrees are not
//! expanded); `i3dm`/`pnts`/`cmpt` content and remote or `data:` URIs are noted, not opened.
//! Containment is tested on the corners of each primitive's POSITION `min`/`max` box, then on the
//! positions themselves when they are readable (plain float data or decoded SPZ), so rotated nodes
//! do not cause false errors.

mod content;
mod volume;

use crate::uri::percent_decode;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::splats::glb::{KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2};
use content::{ContentFormat, GltfSource, GltfSummary, PrimitiveExtent};
use volume::{Mat4, Volume};

/// Default most splats per tile: 64 Ki (Spark's chunk size; CesiumJS decodes each tile in a 2 GB
/// WASM heap — research §3).
pub const DEFAULT_MAX_SPLATS_PER_TILE: u64 = 65_536;

/// Default most triangles per tile: 64 Ki (research §7 target for mesh tiles).
pub const DEFAULT_MAX_TRIANGLES_PER_TILE: u64 = 65_536;

/// Content sticking out of a volume by at most this fraction of the volume's size (largest
/// half-axis) is a warning, not an error: hand-made reference tilesets graze their content (the
/// CesiumGS samples: MultipleContents' points 1 % of the box outside, the 1.0 dragon 0.3 %), and
/// clients only cull a little late at that scale. Kiln's own boxes are exact, and its tests also
/// demand no such warning.
pub const SLIGHT_EXCESS_FRACTION: f64 = 0.02;

/// The 3D Tiles extension CesiumJS reads to learn which glTF extensions content uses.
pub const CONTENT_GLTF: &str = "3DTILES_content_gltf";

/// How bad a finding is. Only errors fail a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The tileset is invalid or will fail in a client.
    Error,
    /// Likely wrong or suboptimal, but loadable.
    Warning,
    /// Something the checker did not inspect, and why.
    Info,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` so that `{:<7}` aligns the finding lines.
        f.pad(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        })
    }
}

/// Which check produced a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// tileset.json structure: asset, required fields, volumes, transforms, content URIs.
    Structure,
    /// geometricError monotonicity (tileset ≥ root, child ≤ parent, leaves 0).
    GeometricError,
    /// Content geometry inside the bounding volumes of its tile and ancestors.
    Bounds,
    /// Splats / triangles per tile.
    Budget,
    /// glTF and tileset extension declarations.
    Extensions,
    /// SPZ payloads of `KHR_gaussian_splatting_compression_spz_2`.
    Spz,
    /// A content file that cannot be read or parsed.
    Content,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Errors fail the check; warnings and notes do not.
    pub severity: Severity,
    /// The check that produced it.
    pub kind: CheckKind,
    /// Tile path, e.g. `root.children[2]`; tiles of an external tileset are written
    /// `root.children[0]>root.children[1]`. Empty for tileset-level findings.
    pub tile: String,
    /// The file at fault, relative to the checked tileset's folder.
    pub file: PathBuf,
    /// What is wrong (expected vs found).
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

impl fmt::Display for Finding {
    /// `error  root.children[2]  tiles/a.glb: message (fix: …)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tile = if self.tile.is_empty() {
            "-"
        } else {
            &self.tile
        };
        write!(
            f,
            "{:<7}  {}  {}: {} (fix: {})",
            self.severity,
            tile,
            self.file.display(),
            self.message,
            self.fix
        )
    }
}

/// Limits of [`check_tileset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Most Gaussian splats one tile's content may hold (all its contents together); default
    /// [`DEFAULT_MAX_SPLATS_PER_TILE`].
    pub max_splats_per_tile: u64,
    /// Most triangles one tile's content may hold; default [`DEFAULT_MAX_TRIANGLES_PER_TILE`].
    pub max_triangles_per_tile: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            max_splats_per_tile: DEFAULT_MAX_SPLATS_PER_TILE,
            max_triangles_per_tile: DEFAULT_MAX_TRIANGLES_PER_TILE,
        }
    }
}

/// The result of [`check_tileset`]: counts of what was read, and every finding in the order found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// The checked tileset.json.
    pub tileset: PathBuf,
    /// Tiles visited (external tilesets included).
    pub tiles: usize,
    /// Content files opened (GLB, b3dm, glTF, external tilesets).
    pub contents: usize,
    /// Gaussian splats over all content.
    pub splats: u64,
    /// Triangles over all content.
    pub triangles: u64,
    /// Every finding, in the order found (tileset order, depth first).
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Number of findings of `severity`.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// True when there is no error (warnings and notes do not fail a check).
    pub fn passed(&self) -> bool {
        self.count(Severity::Error) == 0
    }
}

/// Check a 3D Tiles tileset: structure, geometricError monotonicity, content inside bounding
/// volumes, per-tile budgets, extension declarations and SPZ payload headers (see the module doc
/// for each rule and its source).
///
/// Never fails: an unreadable or unparsable `tileset.json` is itself an error [`Finding`].
/// Reads every referenced content file once; external tilesets are followed (cycles reported).
///
/// - `path`: the tileset JSON (usually `tileset.json`); content URIs resolve against its folder
///   and must stay inside it.
/// - `options`: budgets ([`CheckOptions::default`] = 64 Ki splats and triangles per tile).
pub fn check_tileset(path: &Path, options: &CheckOptions) -> CheckReport {
    let abs = normalize(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
    let root_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut c = Checker {
        options,
        root_dir,
        open: Vec::new(),
        declarations: Declarations::default(),
        images: content::ImageCache::default(),
        report: CheckReport {
            tileset: path.to_path_buf(),
            tiles: 0,
            contents: 0,
            splats: 0,
            triangles: 0,
            findings: Vec::new(),
        },
    };
    let ctx = Ctx {
        parent_error: None,
        ancestors: Vec::new(),
        world: volume::IDENTITY,
        prefix: String::new(),
    };
    c.check_file(&abs, &ctx, None);
    c.report
}

/// Extensions declared by the tilesets read so far (the root's and any external ones').
#[derive(Debug, Default, Clone)]
struct Declarations {
    /// Tileset `extensionsUsed`.
    used: BTreeSet<String>,
    /// `3DTILES_content_gltf` object present: its (extensionsUsed, extensionsRequired).
    content_gltf: Option<(BTreeSet<String>, BTreeSet<String>)>,
}

/// A bounding volume of the current tile or an ancestor, and how to reach its frame.
#[derive(Debug, Clone)]
struct Frame {
    volume: Volume,
    /// Current tile frame → this volume's tile frame.
    to_frame: Mat4,
    /// e.g. `its bounding volume`, `the bounding volume of ancestor root`.
    label: String,
}

/// What a tile inherits from its parent.
#[derive(Debug, Clone)]
struct Ctx {
    parent_error: Option<(f64, String)>,
    /// Ancestors' volumes, `to_frame` relative to the *parent's* frame.
    ancestors: Vec<Frame>,
    /// Parent frame → world (ECEF when georeferenced).
    world: Mat4,
    /// Tile-path prefix for external tilesets (`root.children[0]>`).
    prefix: String,
}

/// Where a check is: the tile's path in the tileset (`root.children[0]`), the tileset JSON
/// holding it and that file's folder (content URIs resolve against it).
#[derive(Clone, Copy)]
struct At<'a> {
    tile: &'a str,
    file: &'a Path,
    base_dir: &'a Path,
}

/// What a content object sits in: the volumes it must lie inside (ancestors' and its tile's),
/// the tile frame → world transform, its tile's geometricError and whether the tile has
/// children.
#[derive(Clone)]
struct ContentCtx {
    frames: Vec<Frame>,
    world: Mat4,
    tile_error: Option<f64>,
    has_children: bool,
}

/// A content file opened by its format.
enum Opened<'b> {
    /// glTF JSON, its binary chunk and the transform before its nodes (a b3dm's RTC_CENTER).
    Gltf(Value, Option<&'b [u8]>, Mat4),
    /// An external tileset (checked already).
    External,
    /// Not glTF, or unreadable (reported).
    Skipped,
}

/// What a tile's contents hold.
#[derive(Default)]
struct Loaded {
    splats: u64,
    triangles: u64,
    /// A content is an external tileset.
    external: bool,
}

impl Loaded {
    fn add(&mut self, other: Loaded) {
        self.splats += other.splats;
        self.triangles += other.triangles;
        self.external |= other.external;
    }
}

struct Checker<'o> {
    options: &'o CheckOptions,
    root_dir: PathBuf,
    /// Tileset files being read (cycle detection).
    open: Vec<PathBuf>,
    declarations: Declarations,
    report: CheckReport,
    images: content::ImageCache,
}

/// Lexical normalisation (`a/./b/../c` → `a/c`) without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn strings(v: Option<&Value>) -> BTreeSet<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl Checker<'_> {
    fn rel(&self, p: &Path) -> PathBuf {
        p.strip_prefix(&self.root_dir)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| p.to_path_buf())
    }

    fn push(
        &mut self,
        severity: Severity,
        kind: CheckKind,
        tile: &str,
        file: &Path,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        let file = self.rel(file);
        self.report.findings.push(Finding {
            severity,
            kind,
            tile: tile.to_string(),
            file,
            message: message.into(),
            fix: fix.into(),
        });
    }

    /// Check one tileset JSON file. `referrer` is the tile path whose content it is (external).
    fn check_file(&mut self, path: &Path, ctx: &Ctx, referrer: Option<&str>) {
        let tile_ref = referrer.unwrap_or("");
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    tile_ref,
                    path,
                    format!("cannot read the tileset JSON: {e}"),
                    "check the path",
                );
                return;
            }
        };
        let json: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    tile_ref,
                    path,
                    format!("not valid JSON: {e}"),
                    "write UTF-8 JSON (3D Tiles 1.1 §Tileset JSON)",
                );
                return;
            }
        };
        self.open.push(path.to_path_buf());
        self.check_tileset_json(&json, path, ctx, tile_ref);
        self.open.pop();
    }

    fn check_tileset_json(&mut self, json: &Value, path: &Path, ctx: &Ctx, tile_ref: &str) {
        use Severity::*;
        // asset.version
        match json.pointer("/asset/version").and_then(Value::as_str) {
            Some("1.0" | "1.1") => {}
            Some(v) => self.push(
                Error,
                CheckKind::Structure,
                tile_ref,
                path,
                format!("asset.version is {v:?}, expected \"1.0\" or \"1.1\""),
                "write asset.version \"1.1\"",
            ),
            None => self.push(
                Error,
                CheckKind::Structure,
                tile_ref,
                path,
                "asset.version is missing",
                "write \"asset\": {\"version\": \"1.1\"}",
            ),
        }
        // Top-level geometricError.
        let top_error = self.geometric_error(json, tile_ref, path, "tileset geometricError");
        // Extensions.
        let used = strings(json.get("extensionsUsed"));
        let required = strings(json.get("extensionsRequired"));
        for r in required.difference(&used) {
            self.push(
                Error,
                CheckKind::Extensions,
                tile_ref,
                path,
                format!("tileset extensionsRequired lists {r} but extensionsUsed does not"),
                format!("add {r} to the tileset extensionsUsed"),
            );
        }
        let exts = json.get("extensions").and_then(Value::as_object);
        for name in exts.into_iter().flatten().map(|(k, _)| k) {
            if !used.contains(name) {
                self.push(
                    Error,
                    CheckKind::Extensions,
                    tile_ref,
                    path,
                    format!("tileset has an extensions.{name} object but extensionsUsed does not list {name}"),
                    format!("add {name} to the tileset extensionsUsed"),
                );
            }
        }
        self.declarations.used.extend(used.iter().cloned());
        if let Some(cg) = exts.and_then(|e| e.get(CONTENT_GLTF)) {
            let (u, r) = (
                strings(cg.get("extensionsUsed")),
                strings(cg.get("extensionsRequired")),
            );
            let entry = self.declarations.content_gltf.get_or_insert_default();
            entry.0.extend(u);
            entry.1.extend(r);
        }
        // Root.
        let Some(root) = json.get("root") else {
            self.push(
                Error,
                CheckKind::Structure,
                tile_ref,
                path,
                "root tile is missing",
                "write a \"root\" tile",
            );
            return;
        };
        let root_path = format!("{}root", ctx.prefix);
        if let (Some(t), Some(r)) = (
            top_error,
            root.get("geometricError").and_then(Value::as_f64),
        ) && r > t
        {
            self.push(
                Error,
                CheckKind::GeometricError,
                &root_path,
                path,
                format!("tileset geometricError {t} is less than the root's {r}"),
                "make the tileset geometricError ≥ root.geometricError (e.g. the root box diagonal)",
            );
        }
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let at = At {
            tile: &root_path,
            file: path,
            base_dir: &base_dir,
        };
        self.walk_tile(root, &at, ctx, true);
    }

    /// Read `geometricError` of an object: present, a number, finite, ≥ 0.
    fn geometric_error(&mut self, obj: &Value, tile: &str, file: &Path, what: &str) -> Option<f64> {
        let fix = "write geometricError as a finite number of metres ≥ 0";
        match obj.get("geometricError") {
            None => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    tile,
                    file,
                    format!("{what} is missing"),
                    fix,
                );
                None
            }
            Some(v) => match v.as_f64() {
                Some(e) if e.is_finite() && e >= 0.0 => Some(e),
                _ => {
                    self.push(
                        Severity::Error,
                        CheckKind::Structure,
                        tile,
                        file,
                        format!("{what} is {v}, expected a finite number ≥ 0"),
                        fix,
                    );
                    None
                }
            },
        }
    }

    /// Check one tile and, depth first, its content and children.
    fn walk_tile(&mut self, tile: &Value, at: &At<'_>, ctx: &Ctx, is_root: bool) {
        self.report.tiles += 1;
        if !tile.is_object() {
            self.push(
                Severity::Error,
                CheckKind::Structure,
                at.tile,
                at.file,
                format!("tile is {tile}, expected an object"),
                "write each tile as a JSON object",
            );
            return;
        }
        let error = self.tile_geometric_error(tile, at, ctx);
        self.check_refine(tile, at, is_root);
        let local = self.tile_transform(tile, at);
        let world = volume::mul(&ctx.world, &local);
        // Ancestors' volumes seen from this tile's frame.
        let mut frames: Vec<Frame> = ctx
            .ancestors
            .iter()
            .map(|a| Frame {
                to_frame: volume::mul(&a.to_frame, &local),
                ..a.clone()
            })
            .collect();
        let own_frame = self.tile_volumes(tile, at).map(|v| Frame {
            volume: v,
            to_frame: volume::IDENTITY,
            label: format!("the bounding volume of {}", at.tile),
        });
        let contents = self.tile_contents(tile, at);
        let implicit = tile.get("implicitTiling");
        if let Some(it) = implicit {
            self.implicit_root(it, at.tile, at.file, at.base_dir);
        }
        let children = tile.get("children");
        let has_children = children
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let mut loaded = Loaded::default();
        // Implicit tiling's content URIs are templates: not expanded.
        if implicit.is_none() {
            let mut content_frames = frames.clone();
            content_frames.extend(own_frame.clone());
            let around = ContentCtx {
                frames: content_frames,
                world,
                tile_error: error,
                has_children,
            };
            for (c, label) in &contents {
                loaded.add(self.content(c, label, at, around.clone()));
            }
        }
        self.check_budgets(&loaded, at);
        if !has_children && !loaded.external && implicit.is_none() {
            self.check_leaf_error(error, at);
        }
        frames.extend(own_frame);
        let child_ctx = Ctx {
            parent_error: error.map(|e| (e, at.tile.to_string())),
            ancestors: frames,
            world,
            prefix: ctx.prefix.clone(),
        };
        self.walk_children(children, at, &child_ctx);
    }

    /// The tile's `geometricError`, checked to be no greater than its parent's.
    fn tile_geometric_error(&mut self, tile: &Value, at: &At<'_>, ctx: &Ctx) -> Option<f64> {
        let error = self.geometric_error(tile, at.tile, at.file, "geometricError");
        if let (Some(e), Some((pe, pp))) = (error, &ctx.parent_error)
            && e > *pe
        {
            self.push(
                Severity::Error,
                CheckKind::GeometricError,
                at.tile,
                at.file,
                format!("geometricError {e} is greater than its parent's {pe} ({pp})"),
                "make every child's geometricError ≤ its parent's (error must not grow when refining)",
            );
        }
        error
    }

    /// `refine`: required on the root, `ADD` or `REPLACE` where given.
    fn check_refine(&mut self, tile: &Value, at: &At<'_>, is_root: bool) {
        let (path, file) = (at.tile, at.file);
        match tile.get("refine") {
            None if is_root => self.push(
                Severity::Error,
                CheckKind::Structure,
                path,
                file,
                "root tile has no refine",
                "write \"refine\": \"REPLACE\" (or \"ADD\") on the root",
            ),
            None => {}
            Some(Value::String(s)) if s == "ADD" || s == "REPLACE" => {}
            Some(v) => self.push(
                Severity::Error,
                CheckKind::Structure,
                path,
                file,
                format!("refine is {v}, expected \"ADD\" or \"REPLACE\""),
                "write refine as \"ADD\" or \"REPLACE\"",
            ),
        }
    }

    /// The tile's `transform` (identity when absent or malformed): an affine, invertible
    /// matrix; scaling ones are warned about.
    fn tile_transform(&mut self, tile: &Value, at: &At<'_>) -> Mat4 {
        use Severity::*;
        let (path, file) = (at.tile, at.file);
        let Some(t) = tile.get("transform") else {
            return volume::IDENTITY;
        };
        match volume::numbers::<16>(t) {
            Ok(m) if [m[3], m[7], m[11], m[15]] != [0.0, 0.0, 0.0, 1.0] => self.push(
                Error,
                CheckKind::Structure,
                path,
                file,
                format!(
                    "transform's last row is {:?}, expected [0, 0, 0, 1] (column-major affine)",
                    [m[3], m[7], m[11], m[15]]
                ),
                "write the transform column-major with translation in elements 12–14",
            ),
            Ok(m) => {
                let (lo, hi) = volume::scale_range(&m);
                if lo <= 0.0 || !lo.is_finite() {
                    self.push(
                        Error,
                        CheckKind::Structure,
                        path,
                        file,
                        "transform is singular (a zero column)",
                        "write an invertible transform",
                    );
                } else if (hi - 1.0).abs() > 1e-6 || (lo - 1.0).abs() > 1e-6 {
                    self.push(
                        Warning,
                        CheckKind::Structure,
                        path,
                        file,
                        format!("transform scales by {lo:.6}..{hi:.6}; clients disagree on whether scale applies to geometricError (3d-tiles#367)"),
                        "keep transforms rigid (rotation + translation) and bake scale into the content",
                    );
                }
                return m;
            }
            Err(e) => self.push(
                Error,
                CheckKind::Structure,
                path,
                file,
                format!("transform: {e}"),
                "write transform as 16 finite numbers (column-major 4×4)",
            ),
        }
        volume::IDENTITY
    }

    /// The tile's `boundingVolume` (required) as containment can use it; a
    /// `viewerRequestVolume` is checked too.
    fn tile_volumes(&mut self, tile: &Value, at: &At<'_>) -> Option<Volume> {
        let own = match tile.get("boundingVolume") {
            None => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    at.tile,
                    at.file,
                    "boundingVolume is missing",
                    "write a boundingVolume (box of the content in the tile frame)",
                );
                None
            }
            Some(bv) => self.volume(bv, at.tile, at.file, "boundingVolume"),
        };
        if let Some(v) = tile.get("viewerRequestVolume") {
            self.volume(v, at.tile, at.file, "viewerRequestVolume");
        }
        own
    }

    /// The tile's content objects with their labels: `content`, or each of `contents` (not
    /// both).
    fn tile_contents<'t>(&mut self, tile: &'t Value, at: &At<'_>) -> Vec<(&'t Value, String)> {
        let (path, file) = (at.tile, at.file);
        match (tile.get("content"), tile.get("contents")) {
            (Some(_), Some(_)) => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    path,
                    file,
                    "tile has both content and contents",
                    "use content for one content, contents for several — not both",
                );
                Vec::new()
            }
            (Some(c), None) => vec![(c, "content".into())],
            (None, Some(Value::Array(a))) => a
                .iter()
                .enumerate()
                .map(|(i, c)| (c, format!("contents[{i}]")))
                .collect(),
            (None, Some(v)) => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    path,
                    file,
                    format!("contents is {v}, expected an array"),
                    "write contents as an array of content objects",
                );
                Vec::new()
            }
            (None, None) => Vec::new(),
        }
    }

    /// The splat and triangle budgets of one tile's content.
    fn check_budgets(&mut self, loaded: &Loaded, at: &At<'_>) {
        let (splats, triangles) = (loaded.splats, loaded.triangles);
        if splats > self.options.max_splats_per_tile {
            self.push(
                Severity::Error,
                CheckKind::Budget,
                at.tile,
                at.file,
                format!(
                    "{splats} splats in this tile's content, over the budget of {}",
                    self.options.max_splats_per_tile
                ),
                "split the tile (lower the tiler's max_splats_per_tile) or raise --max-splats-per-tile",
            );
        }
        if triangles > self.options.max_triangles_per_tile {
            self.push(
                Severity::Error,
                CheckKind::Budget,
                at.tile,
                at.file,
                format!(
                    "{triangles} triangles in this tile's content, over the budget of {}",
                    self.options.max_triangles_per_tile
                ),
                "split or simplify the tile's mesh, or raise --max-triangles-per-tile",
            );
        }
    }

    /// A leaf (nothing refines it) should have geometricError 0.
    fn check_leaf_error(&mut self, error: Option<f64>, at: &At<'_>) {
        if let Some(e) = error
            && e > 0.0
        {
            self.push(
                Severity::Warning,
                CheckKind::GeometricError,
                at.tile,
                at.file,
                format!("leaf tile has geometricError {e}, expected 0"),
                "write geometricError 0 on leaves (nothing refines them)",
            );
        }
    }

    /// Walk `children` (an array of tiles) under `child_ctx`.
    fn walk_children(&mut self, children: Option<&Value>, at: &At<'_>, child_ctx: &Ctx) {
        match children {
            None => {}
            Some(Value::Array(kids)) => {
                for (i, k) in kids.iter().enumerate() {
                    let path = format!("{}.children[{i}]", at.tile);
                    let child = At { tile: &path, ..*at };
                    self.walk_tile(k, &child, child_ctx, false);
                }
            }
            Some(v) => self.push(
                Severity::Error,
                CheckKind::Structure,
                at.tile,
                at.file,
                format!("children is {v}, expected an array"),
                "write children as an array of tiles",
            ),
        }
    }

    /// Parse a bounding volume, reporting malformed ones; returns what containment can use.
    fn volume(&mut self, bv: &Value, path: &str, file: &Path, what: &str) -> Option<Volume> {
        match volume::parse_volume(bv) {
            Ok(v) => Some(v),
            Err(p) => {
                let message = p.message.replacen("boundingVolume", what, 1);
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    path,
                    file,
                    message,
                    "write box as centre + three non-zero half-axes (12 numbers), region as 6 numbers in radians/metres, or sphere with radius > 0",
                );
                p.usable.map(|v| *v)
            }
        }
    }

    /// The root of an implicit tileset: its root subtree must exist; nothing below is expanded.
    fn implicit_root(&mut self, it: &Value, path: &str, file: &Path, base_dir: &Path) {
        match it.pointer("/subtrees/uri").and_then(Value::as_str) {
            Some(t) => {
                let uri = t
                    .replace("{level}", "0")
                    .replace("{x}", "0")
                    .replace("{y}", "0")
                    .replace("{z}", "0");
                let p = normalize(&base_dir.join(percent_decode(&uri)));
                if !p.is_file() {
                    self.push(
                        Severity::Error,
                        CheckKind::Structure,
                        path,
                        &p,
                        "the root subtree of implicitTiling is missing",
                        "write the level-0 subtree file the subtrees.uri template names",
                    );
                }
            }
            None => self.push(
                Severity::Error,
                CheckKind::Structure,
                path,
                file,
                "implicitTiling has no subtrees.uri",
                "write implicitTiling.subtrees.uri (a template with {level}, {x}, {y}[, {z}])",
            ),
        }
        self.push(
            Severity::Info,
            CheckKind::Structure,
            path,
            file,
            "implicit tiling: subtrees and their content are not expanded; only the root was checked",
            "none needed",
        );
    }

    /// Check one content object: its URI, its bounding volume, and what it holds (an external
    /// tileset, walked in turn, or glTF content summarised and checked against every volume
    /// around it).
    fn content(&mut self, c: &Value, label: &str, at: &At<'_>, mut around: ContentCtx) -> Loaded {
        let Some(uri) = self.content_uri(c, label, at) else {
            return Loaded::default();
        };
        if let Some(bv) = c.get("boundingVolume")
            && let Some(v) = self.volume(bv, at.tile, at.file, &format!("{label}.boundingVolume"))
        {
            around.frames.push(Frame {
                volume: v,
                to_frame: volume::IDENTITY,
                label: format!("{label}.boundingVolume"),
            });
        }
        let Some(target) = self.local_content(uri, label, at) else {
            return Loaded::default();
        };
        let bytes = match std::fs::read(&target) {
            Ok(b) => b,
            Err(e) => {
                self.push(
                    Severity::Error,
                    CheckKind::Structure,
                    at.tile,
                    &target,
                    format!("{label} uri {uri}: content file cannot be read ({e})"),
                    "write the content file or fix content.uri",
                );
                return Loaded::default();
            }
        };
        self.report.contents += 1;
        let json: Option<Value> = bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .filter(|&&b| b == b'{')
            .and_then(|_| serde_json::from_slice(&bytes).ok());
        let opened = self.open_content(&bytes, json, label, at, &target, &around);
        let (gltf, bin, pre) = match opened {
            Opened::Gltf(gltf, bin, pre) => (gltf, bin, pre),
            Opened::External => {
                return Loaded {
                    external: true,
                    ..Loaded::default()
                };
            }
            Opened::Skipped => return Loaded::default(),
        };
        let content_dir = target.parent().map(Path::to_path_buf).unwrap_or_default();
        let summary = content::summarise_gltf(
            &gltf,
            &GltfSource {
                bin,
                dir: &content_dir,
                pre,
                images: &self.images,
            },
        );
        for i in &summary.issues {
            self.push(
                i.severity,
                i.kind,
                at.tile,
                &target,
                i.message.clone(),
                i.fix.clone(),
            );
        }
        self.declared(&summary, at.tile, &target);
        for p in &summary.primitives {
            self.containment(p, &around.frames, &around.world, at.tile, &target);
        }
        self.report.splats += summary.splats;
        self.report.triangles += summary.triangles;
        Loaded {
            splats: summary.splats,
            triangles: summary.triangles,
            external: false,
        }
    }

    /// The content's `uri` (or 3D Tiles 1.0's `url`), reported when missing.
    fn content_uri<'c>(&mut self, c: &'c Value, label: &str, at: &At<'_>) -> Option<&'c str> {
        let uri = c
            .get("uri")
            .or_else(|| c.get("url"))
            .and_then(Value::as_str);
        if uri.is_none() {
            self.push(
                Severity::Error,
                CheckKind::Structure,
                at.tile,
                at.file,
                format!("{label} has no uri"),
                "write content.uri relative to the tileset JSON",
            );
        }
        uri
    }

    /// The local file a content URI names inside the tileset folder; `None` (reported) for
    /// `data:` and remote URIs and for files outside the folder.
    fn local_content(&mut self, uri: &str, label: &str, at: &At<'_>) -> Option<PathBuf> {
        if uri.starts_with("data:") {
            self.push(
                Severity::Info,
                CheckKind::Content,
                at.tile,
                at.file,
                format!("{label} is a data: URI; not inspected"),
                "none needed",
            );
            return None;
        }
        if uri.contains("://") {
            self.push(
                Severity::Warning,
                CheckKind::Content,
                at.tile,
                at.file,
                format!("{label} uri {uri} is remote; not checked"),
                "keep content inside the tileset folder so it can be checked and published together",
            );
            return None;
        }
        let clean = uri.split(['?', '#']).next().unwrap_or(uri);
        let target = normalize(&at.base_dir.join(percent_decode(clean)));
        if Path::new(clean).is_absolute() || !target.starts_with(&self.root_dir) {
            self.push(
                Severity::Error,
                CheckKind::Structure,
                at.tile,
                at.file,
                format!("{label} uri {uri} points outside the tileset folder"),
                "keep every content file under the tileset.json's folder and use relative URIs without escaping `..`",
            );
            return None;
        }
        Some(target)
    }

    /// Open content `bytes` (the file `target`) by its format: an external tileset is checked
    /// in turn; GLB, b3dm and glTF JSON give the glTF to summarise; anything else is noted.
    fn open_content<'b>(
        &mut self,
        bytes: &'b [u8],
        json: Option<Value>,
        label: &str,
        at: &At<'_>,
        target: &Path,
        around: &ContentCtx,
    ) -> Opened<'b> {
        use Severity::*;
        let tile = at.tile;
        match content::sniff(bytes, json.as_ref()) {
            ContentFormat::Tileset => {
                self.external_tileset(label, at, target, around);
                Opened::External
            }
            ContentFormat::Glb => match content::split_glb(bytes) {
                Ok((j, b)) => Opened::Gltf(j, b, volume::IDENTITY),
                Err(e) => {
                    self.push(
                        Error,
                        CheckKind::Content,
                        tile,
                        target,
                        e,
                        "re-export the GLB",
                    );
                    Opened::Skipped
                }
            },
            ContentFormat::B3dm => {
                let split = content::split_b3dm(bytes)
                    .and_then(|(glb, rtc)| content::split_glb(glb).map(|(j, b)| (j, b, rtc)));
                match split {
                    Ok((j, b, rtc)) => {
                        Opened::Gltf(j, b, volume::translation(rtc.unwrap_or([0.0; 3])))
                    }
                    Err(e) => {
                        self.push(
                            Error,
                            CheckKind::Content,
                            tile,
                            target,
                            e,
                            "re-export the b3dm (or convert it to GLB)",
                        );
                        Opened::Skipped
                    }
                }
            }
            ContentFormat::GltfJson => {
                Opened::Gltf(json.unwrap_or_default(), None, volume::IDENTITY)
            }
            ContentFormat::Other(kind) => {
                self.push(
                    Info,
                    CheckKind::Content,
                    tile,
                    target,
                    format!("{label} is {kind} content; not inspected"),
                    "none needed (3D Tiles 1.1 prefers glTF content)",
                );
                Opened::Skipped
            }
        }
    }

    /// An external tileset as a tile's content: checked in turn under the tile (not when it
    /// is already being read: a cycle); a tile with one must have no children.
    fn external_tileset(&mut self, label: &str, at: &At<'_>, target: &Path, around: &ContentCtx) {
        let tile = at.tile;
        if around.has_children {
            self.push(
                Severity::Error,
                CheckKind::Structure,
                tile,
                at.file,
                format!("{label} is an external tileset but the tile also has children"),
                "move the children into the external tileset (3D Tiles 1.1 §External tilesets)",
            );
        }
        if self.open.iter().any(|p| p == target) {
            self.push(
                Severity::Error,
                CheckKind::Structure,
                tile,
                target,
                "external tileset cycle: this tileset is already being read",
                "break the cycle of external tileset references",
            );
            return;
        }
        let ctx = Ctx {
            parent_error: around.tile_error.map(|e| (e, tile.to_string())),
            ancestors: around.frames.clone(),
            world: around.world,
            prefix: format!("{tile}>"),
        };
        self.check_file(target, &ctx, Some(tile));
    }

    /// The tileset must declare what CesiumJS needs to route the content (research §1.7): splat
    /// GLBs need `3DTILES_content_gltf` with both KHR extensions used and required; when a
    /// `3DTILES_content_gltf` object exists it should list every glTF extension the content uses.
    fn declared(&mut self, s: &GltfSummary, tile: &str, file: &Path) {
        let d = self.declarations.clone();
        let splats = s.uses_splats
            || s.extensions_used
                .iter()
                .any(|e| e == KHR_GAUSSIAN_SPLATTING);
        let spz = s.uses_spz
            || s.extensions_used
                .iter()
                .any(|e| e == KHR_GAUSSIAN_SPLATTING_SPZ_2);
        if splats {
            if !d.used.contains(CONTENT_GLTF) {
                self.push(
                    Severity::Error,
                    CheckKind::Extensions,
                    tile,
                    file,
                    format!("splat content, but the tileset extensionsUsed does not list {CONTENT_GLTF} (CesiumJS then loads the GLB as a plain model)"),
                    format!("add {CONTENT_GLTF} to the tileset extensionsUsed and declare the splat extensions in extensions.{CONTENT_GLTF}"),
                );
            }
            let (u, r) = d.content_gltf.clone().unwrap_or_default();
            let mut needed = vec![KHR_GAUSSIAN_SPLATTING];
            if spz {
                needed.push(KHR_GAUSSIAN_SPLATTING_SPZ_2);
            }
            for n in needed {
                for (set, name) in [(&u, "extensionsUsed"), (&r, "extensionsRequired")] {
                    if !set.contains(n) {
                        self.push(
                            Severity::Error,
                            CheckKind::Extensions,
                            tile,
                            file,
                            format!("the glTF uses {n} but the tileset's extensions.{CONTENT_GLTF}.{name} does not list it (CesiumJS 1.145 routes splats only when both lists name both KHR extensions)"),
                            format!("add {n} to extensions.{CONTENT_GLTF}.{name} in tileset.json"),
                        );
                    }
                }
            }
        } else if let Some((u, r)) = &d.content_gltf {
            for e in s.extensions_used.iter().filter(|e| !u.contains(*e)) {
                self.push(
                    Severity::Warning,
                    CheckKind::Extensions,
                    tile,
                    file,
                    format!("the glTF uses {e} but extensions.{CONTENT_GLTF}.extensionsUsed does not list it"),
                    format!("add {e} to extensions.{CONTENT_GLTF}.extensionsUsed"),
                );
            }
            for e in s.extensions_required.iter().filter(|e| !r.contains(*e)) {
                self.push(
                    Severity::Warning,
                    CheckKind::Extensions,
                    tile,
                    file,
                    format!("the glTF requires {e} but extensions.{CONTENT_GLTF}.extensionsRequired does not list it"),
                    format!("add {e} to extensions.{CONTENT_GLTF}.extensionsRequired"),
                );
            }
        }
    }

    /// Content extent inside each volume of `frames` (own content volume, own tile volume, every
    /// ancestor's). Errors for POSITION (means for splats); warnings for splats' 3σ extents.
    fn containment(
        &mut self,
        p: &PrimitiveExtent,
        frames: &[Frame],
        world: &Mat4,
        tile: &str,
        file: &Path,
    ) {
        let to_world = volume::mul(world, &p.to_tile);
        for f in frames {
            let to_frame = volume::mul(&f.to_frame, &p.to_tile);
            let tol = f.volume.tolerance_m() + p.quantum_m;
            let excess_of = |pts: &mut dyn Iterator<Item = [f64; 3]>| {
                pts.map(|q| {
                    f.volume
                        .excess_m(volume::apply(&to_frame, q), volume::apply(&to_world, q))
                })
                .fold(0.0, f64::max)
            };
            let mut excess = excess_of(&mut corners(p.min, p.max).into_iter());
            let mut exact = f.volume.corners_are_exact();
            if excess > tol
                && let Some(pts) = &p.points
            {
                excess = excess_of(&mut pts.iter().copied());
                exact = true;
            }
            let what = if p.kind == content::PrimitiveKind::Splats {
                "splat means lie"
            } else {
                "POSITION extent lies"
            };
            if excess > tol {
                let slight = excess <= SLIGHT_EXCESS_FRACTION * f.volume.size_m();
                self.push(
                    if exact && !slight { Severity::Error } else { Severity::Warning },
                    CheckKind::Bounds,
                    tile,
                    file,
                    format!(
                        "{} {what} up to {excess:.6} m outside {} ({}){}",
                        p.label,
                        f.label,
                        f.volume.describe(),
                        if exact { "" } else { " — tested on the corners of POSITION min/max only" }
                    ),
                    "grow the tile's boundingVolume (and its ancestors') to enclose the content in the tile frame, after the glTF Y-up→Z-up rotation and the tile transforms",
                );
                continue;
            }
            if let Some(boxes) = &p.sigma3 {
                let mut lo = [f64::INFINITY; 3];
                let mut hi = [f64::NEG_INFINITY; 3];
                for (a, b) in boxes {
                    for k in 0..3 {
                        lo[k] = lo[k].min(a[k]);
                        hi[k] = hi[k].max(b[k]);
                    }
                }
                if boxes.is_empty() || excess_of(&mut corners(lo, hi).into_iter()) <= tol {
                    continue;
                }
                let mut outside = 0usize;
                let mut worst = 0.0f64;
                for (a, b) in boxes {
                    let e = excess_of(&mut corners(*a, *b).into_iter());
                    if e > tol {
                        outside += 1;
                        worst = worst.max(e);
                    }
                }
                if outside > 0 {
                    self.push(
                        Severity::Warning,
                        CheckKind::Bounds,
                        tile,
                        file,
                        format!(
                            "{}: the 3σ extents of {outside} of {} splats reach up to {worst:.6} m outside {} ({})",
                            p.label,
                            boxes.len(),
                            f.label,
                            f.volume.describe()
                        ),
                        "build boxes from mean ± 3σ of every splat so clients do not cull visible splats",
                    );
                }
            }
        }
    }
}

/// The 8 corners of an axis-aligned box.
fn corners(min: [f64; 3], max: [f64; 3]) -> [[f64; 3]; 8] {
    std::array::from_fn(|i| {
        [
            if i & 1 == 0 { min[0] } else { max[0] },
            if i & 2 == 0 { min[1] } else { max[1] },
            if i & 4 == 0 { min[2] } else { max[2] },
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::glb::{self, SplatGlbOptions};
    use crate::splats::spz::{self, SpzOptions, SpzVersion};
    use crate::splats::test_data::random_splats;
    use serde_json::json;

    /// A GLB from its JSON and BIN chunk (padded as GLB §4.4 requires).
    fn glb(json: &Value, bin: &[u8]) -> Vec<u8> {
        let mut j = serde_json::to_vec(json).unwrap();
        while !j.len().is_multiple_of(4) {
            j.push(b' ');
        }
        let mut b = bin.to_vec();
        while !b.len().is_multiple_of(4) {
            b.push(0);
        }
        let total = 12 + 8 + j.len() + if b.is_empty() { 0 } else { 8 + b.len() };
        let mut out = b"glTF".to_vec();
        out.extend(2u32.to_le_bytes());
        out.extend((total as u32).to_le_bytes());
        out.extend((j.len() as u32).to_le_bytes());
        out.extend(CHUNK_JSON_TYPE.to_le_bytes());
        out.extend(j);
        if !b.is_empty() {
            out.extend((b.len() as u32).to_le_bytes());
            out.extend(CHUNK_BIN_TYPE.to_le_bytes());
            out.extend(b);
        }
        out
    }
    const CHUNK_JSON_TYPE: u32 = 0x4E4F_534A;
    const CHUNK_BIN_TYPE: u32 = 0x004E_4942;

    /// One triangle (glTF Y-up) with corners `a`, `b`, `c`, float POSITION with min/max.
    fn triangle_glb(p: [[f32; 3]; 3]) -> Vec<u8> {
        let bin: Vec<u8> = p.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
        let min: Vec<f32> = (0..3)
            .map(|a| p.iter().map(|v| v[a]).fold(f32::MAX, f32::min))
            .collect();
        let max: Vec<f32> = (0..3)
            .map(|a| p.iter().map(|v| v[a]).fold(f32::MIN, f32::max))
            .collect();
        glb(
            &json!({
                "asset": {"version": "2.0"},
                "scenes": [{"nodes": [0]}],
                "nodes": [{"mesh": 0}],
                "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
                "buffers": [{"byteLength": 36}],
                "bufferViews": [{"buffer": 0, "byteLength": 36}],
                "accessors": [{"bufferView": 0, "componentType": 5126, "count": 3, "type": "VEC3",
                               "min": min, "max": max}]
            }),
            &bin,
        )
    }

    /// A splat GLB whose SPZ payload is `spz` and whose POSITION accessor says `count` points.
    fn splat_glb(spz: &[u8], count: usize, sh_degree: u32) -> Vec<u8> {
        let mut attributes = json!({"POSITION": 0});
        for l in 1..=sh_degree {
            for m in 0..2 * l + 1 {
                attributes[format!("KHR_gaussian_splatting:SH_DEGREE_{l}_COEF_{m}")] = json!(0);
            }
        }
        let both = [KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2];
        glb(
            &json!({
                "asset": {"version": "2.0"},
                "extensionsUsed": both, "extensionsRequired": both,
                "scenes": [{"nodes": [0]}],
                "nodes": [{"mesh": 0}],
                "meshes": [{"primitives": [{"mode": 0, "attributes": attributes, "extensions": {
                    KHR_GAUSSIAN_SPLATTING: {"kernel": "ellipse", "colorSpace": "srgb_rec709_display",
                        "extensions": {KHR_GAUSSIAN_SPLATTING_SPZ_2: {"bufferView": 0}}}}}]}],
                "buffers": [{"byteLength": spz.len()}],
                "bufferViews": [{"buffer": 0, "byteLength": spz.len()}],
                "accessors": [{"componentType": 5126, "count": count, "type": "VEC3",
                               "min": [-1, -1, -1], "max": [1, 1, 1]}]
            }),
            spz,
        )
    }

    /// A one-or-two-tile tileset in a temp dir: `root` JSON, `files` written beside it.
    fn tileset(tileset: Value, files: &[(&str, Vec<u8>)]) -> (tempfile::TempDir, CheckReport) {
        tileset_with(tileset, files, &CheckOptions::default())
    }

    fn tileset_with(
        tileset: Value,
        files: &[(&str, Vec<u8>)],
        options: &CheckOptions,
    ) -> (tempfile::TempDir, CheckReport) {
        let dir = tempfile::tempdir().unwrap();
        let ts = dir.path().join("ts");
        std::fs::create_dir_all(&ts).unwrap();
        for (name, bytes) in files {
            let p = dir.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        std::fs::write(
            ts.join("tileset.json"),
            serde_json::to_vec(&tileset).unwrap(),
        )
        .unwrap();
        let report = check_tileset(&ts.join("tileset.json"), options);
        (dir, report)
    }

    fn find<'a>(r: &'a CheckReport, severity: Severity, needle: &str) -> &'a Finding {
        r.findings
            .iter()
            .find(|f| f.severity == severity && f.message.contains(needle))
            .unwrap_or_else(|| panic!("no {severity} containing {needle:?} in {:#?}", r.findings))
    }

    fn unit_box(center_z: f64) -> Value {
        json!({"box": [0, 0, center_z, 1, 0, 0, 0, 1, 0, 0, 0, 1]})
    }

    /// glTF triangle in y ∈ [0, 1] (Y-up) → z ∈ [0, 1] in the tile frame.
    fn upright_triangle() -> Vec<u8> {
        triangle_glb([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    }

    fn two_level(child_error: f64, child_box: Value, child_uri: &str) -> Value {
        json!({
            "asset": {"version": "1.1"},
            "geometricError": 10.0,
            "root": {
                "boundingVolume": unit_box(0.5), "geometricError": 1.0, "refine": "REPLACE",
                "content": {"uri": "a.glb"},
                "children": [{"boundingVolume": child_box, "geometricError": child_error,
                              "content": {"uri": child_uri}}]
            }
        })
    }

    #[test]
    fn valid_two_level_mesh_tileset_passes() {
        let (_d, r) = tileset(
            two_level(0.0, unit_box(0.5), "b.glb"),
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        assert!(r.passed(), "{:#?}", r.findings);
        assert_eq!((r.tiles, r.contents, r.triangles), (2, 2, 2));
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
    }

    #[test]
    fn child_error_above_parent_is_an_error() {
        let (_d, r) = tileset(
            two_level(2.0, unit_box(0.5), "b.glb"),
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        let f = find(&r, Severity::Error, "greater than its parent's 1");
        assert_eq!(f.tile, "root.children[0]");
        assert_eq!(f.kind, CheckKind::GeometricError);
        // The non-zero leaf is also flagged, as a warning.
        find(&r, Severity::Warning, "leaf tile has geometricError 2");
    }

    #[test]
    fn tileset_error_below_root_is_an_error() {
        let mut ts = two_level(0.0, unit_box(0.5), "b.glb");
        ts["geometricError"] = json!(0.5);
        let (_d, r) = tileset(
            ts,
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        find(
            &r,
            Severity::Error,
            "tileset geometricError 0.5 is less than the root's 1",
        );
    }

    #[test]
    fn y_up_content_outside_the_z_up_box_is_an_error() {
        // The box spans z ∈ [1, 3]: the triangle (z ∈ [0, 1] after Y-up→Z-up) sticks out by 1 m.
        let (_d, r) = tileset(
            two_level(0.0, unit_box(2.0), "b.glb"),
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        let f = find(
            &r,
            Severity::Error,
            "outside the bounding volume of root.children[0]",
        );
        assert_eq!(f.file, Path::new("b.glb"));
        assert!(f.message.contains("1.000000 m"), "{}", f.message);
    }

    #[test]
    fn content_outside_an_ancestor_is_an_error() {
        // The child's own box is large, but the triangle leaves the root's box.
        let big = json!({"box": [0, 0, 0, 5, 0, 0, 0, 5, 0, 0, 0, 5]});
        let far = triangle_glb([[2.0, 0.0, 0.0], [3.0, 0.0, 0.0], [2.0, 1.0, 0.0]]);
        let (_d, r) = tileset(
            two_level(0.0, big, "b.glb"),
            &[("ts/a.glb", upright_triangle()), ("ts/b.glb", far)],
        );
        let f = find(&r, Severity::Error, "outside the bounding volume of root (");
        assert_eq!(f.tile, "root.children[0]");
    }

    #[test]
    fn child_transform_moves_content_into_place() {
        // Content at z ∈ [0, 1] translated by +1 m lands in a box spanning z ∈ [0.5, 2.5]...
        let mut ts = two_level(0.0, unit_box(0.5), "b.glb");
        ts["root"]["boundingVolume"] = json!({"box": [0, 0, 1, 2, 0, 0, 0, 2, 0, 0, 0, 1.5]});
        ts["root"]["children"][0]["transform"] =
            json!([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1]);
        let (_d, r) = tileset(
            ts.clone(),
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        assert!(r.passed(), "{:#?}", r.findings);
        // ...but not in a root box that ends at z = 1.5.
        ts["root"]["boundingVolume"] = json!({"box": [0, 0, 0.75, 2, 0, 0, 0, 2, 0, 0, 0, 0.75]});
        let (_d, r) = tileset(
            ts,
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
        );
        find(&r, Severity::Error, "outside the bounding volume of root (");
    }

    /// The upright triangle with `images` and one texture per image (all sharing the
    /// tileset's image files), plus `extra_textures`.
    fn textured_triangle(images: Value, extra_textures: Value) -> Vec<u8> {
        let plain = upright_triangle();
        let (mut json, bin) = content::split_glb(&plain)
            .map(|(j, b)| (j, b.map(<[u8]>::to_vec)))
            .unwrap();
        let n = images.as_array().map_or(0, Vec::len);
        let mut textures: Vec<Value> = (0..n).map(|i| json!({"source": i})).collect();
        textures.extend(extra_textures.as_array().cloned().unwrap_or_default());
        json["images"] = images;
        json["textures"] = Value::Array(textures);
        json["materials"] = json!([{"pbrMetallicRoughness": {"baseColorTexture": {"index": 0}}}]);
        json["meshes"][0]["primitives"][0]["material"] = json!(0);
        glb(&json, &bin.unwrap_or_default())
    }

    /// A 2×2 RGB PNG.
    fn png_bytes() -> Vec<u8> {
        let mut out = Vec::new();
        image::RgbImage::from_pixel(2, 2, image::Rgb([200, 100, 50]))
            .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
            .unwrap();
        out
    }

    #[test]
    fn missing_corrupt_and_dangling_textures_are_errors_and_good_ones_pass() {
        let images = json!([{"uri": "tex/good.png"}, {"uri": "tex/missing.png"},
                            {"uri": "tex/corrupt.png"}]);
        let a = textured_triangle(images.clone(), json!([{"source": 7}]));
        let b = textured_triangle(json!([{"uri": "tex/good.png"}]), json!([]));
        let mut truncated = png_bytes();
        truncated.truncate(truncated.len() / 2);
        let (_d, r) = tileset(
            two_level(0.0, unit_box(0.5), "b.glb"),
            &[
                ("ts/a.glb", a),
                ("ts/b.glb", b),
                ("ts/tex/good.png", png_bytes()),
                ("ts/tex/corrupt.png", truncated),
            ],
        );
        let missing = find(
            &r,
            Severity::Error,
            "images[1] uri tex/missing.png: cannot be read",
        );
        assert_eq!(missing.file, Path::new("a.glb"));
        assert!(missing.fix.contains("images[1].uri"), "{missing:?}");
        find(
            &r,
            Severity::Error,
            "images[2] uri tex/corrupt.png: does not decode",
        );
        find(
            &r,
            Severity::Error,
            "textures[3].source is image 7, but the glTF has 3 images",
        );
        // The good image (used by both tiles) raises nothing; nothing is reported about b.glb.
        assert_eq!(r.count(Severity::Error), 3, "{:#?}", r.findings);
        assert!(
            r.findings.iter().all(|f| f.file == Path::new("a.glb")),
            "{:#?}",
            r.findings
        );
    }

    #[test]
    fn missing_content_file_is_an_error() {
        let (_d, r) = tileset(
            two_level(0.0, unit_box(0.5), "missing.glb"),
            &[("ts/a.glb", upright_triangle())],
        );
        let f = find(&r, Severity::Error, "content file cannot be read");
        assert_eq!(f.file, Path::new("missing.glb"));
    }

    #[test]
    fn content_uri_escaping_the_folder_is_an_error() {
        let (_d, r) = tileset(
            two_level(0.0, unit_box(0.5), "../outside.glb"),
            &[
                ("ts/a.glb", upright_triangle()),
                ("outside.glb", upright_triangle()),
            ],
        );
        find(&r, Severity::Error, "points outside the tileset folder");
    }

    #[test]
    fn malformed_structure_is_reported_field_by_field() {
        let ts = json!({
            "asset": {"version": "2.0"},
            "root": {
                "boundingVolume": {"box": [0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]},
                "geometricError": -1,
                "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0],
                "children": [{"boundingVolume": {"sphere": [0, 0, 0, 0]}, "geometricError": 0, "refine": "MERGE"}]
            }
        });
        let (_d, r) = tileset(ts, &[]);
        find(&r, Severity::Error, "asset.version is \"2.0\"");
        find(&r, Severity::Error, "tileset geometricError is missing");
        find(&r, Severity::Error, "root tile has no refine");
        find(&r, Severity::Error, "geometricError is -1");
        find(
            &r,
            Severity::Error,
            "boundingVolume.box: expected 12 numbers",
        );
        find(&r, Severity::Error, "transform: expected 16 numbers");
        find(&r, Severity::Error, "radius 0 must be > 0");
        find(&r, Severity::Error, "refine is \"MERGE\"");
    }

    #[test]
    fn triangle_budget_is_enforced() {
        let options = CheckOptions {
            max_triangles_per_tile: 0,
            ..Default::default()
        };
        let (_d, r) = tileset_with(
            two_level(0.0, unit_box(0.5), "b.glb"),
            &[
                ("ts/a.glb", upright_triangle()),
                ("ts/b.glb", upright_triangle()),
            ],
            &options,
        );
        let f = find(
            &r,
            Severity::Error,
            "1 triangles in this tile's content, over the budget of 0",
        );
        assert_eq!(f.kind, CheckKind::Budget);
    }

    fn splat_tileset(glb: Vec<u8>, declare: bool) -> (tempfile::TempDir, CheckReport) {
        let both = json!([KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2]);
        let mut ts = json!({
            "asset": {"version": "1.1"},
            "geometricError": 1.0,
            "root": {"boundingVolume": {"box": [0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 3]},
                     "geometricError": 0.0, "refine": "REPLACE", "content": {"uri": "s.glb"}}
        });
        if declare {
            ts["extensionsUsed"] = json!([CONTENT_GLTF]);
            ts["extensions"] =
                json!({CONTENT_GLTF: {"extensionsUsed": both, "extensionsRequired": both}});
        }
        tileset(ts, &[("ts/s.glb", glb)])
    }

    #[test]
    fn declared_spz_v3_splat_tile_passes() {
        let splats = random_splats(500, 2, 1.0, 7);
        let (_d, r) = splat_tileset(
            glb::encode(&splats, &SplatGlbOptions::default()).unwrap(),
            true,
        );
        assert!(r.passed(), "{:#?}", r.findings);
        assert_eq!(r.splats, 500);
        assert!(
            r.findings.iter().all(|f| f.severity != Severity::Warning),
            "{:#?}",
            r.findings
        );
    }

    #[test]
    fn splat_tile_without_content_gltf_declaration_fails() {
        let splats = random_splats(50, 0, 1.0, 8);
        let (_d, r) = splat_tileset(
            glb::encode(&splats, &SplatGlbOptions::default()).unwrap(),
            false,
        );
        let f = find(&r, Severity::Error, "does not list 3DTILES_content_gltf");
        assert_eq!(f.kind, CheckKind::Extensions);
        find(
            &r,
            Severity::Error,
            "uses KHR_gaussian_splatting_compression_spz_2 but the tileset's extensions.3DTILES_content_gltf.extensionsRequired",
        );
    }

    #[test]
    fn splat_means_outside_the_box_fail_and_3sigma_overflow_warns() {
        // Means within ±2.9 m in a ±3 m box: means pass, but 3σ extents (up to ~1.1 m) poke out.
        let splats = random_splats(300, 0, 2.9, 9);
        let (_d, r) = splat_tileset(
            glb::encode(&splats, &SplatGlbOptions::default()).unwrap(),
            true,
        );
        assert!(r.passed(), "{:#?}", r.findings);
        find(&r, Severity::Warning, "3σ extents of");
        let splats = random_splats(300, 0, 4.0, 9);
        let (_d, r) = splat_tileset(
            glb::encode(&splats, &SplatGlbOptions::default()).unwrap(),
            true,
        );
        find(&r, Severity::Error, "splat means lie up to");
    }

    #[test]
    fn spz_v4_payload_is_an_error() {
        let splats = random_splats(20, 1, 0.5, 3);
        let v4 = spz::encode(
            &splats,
            &SpzOptions {
                version: SpzVersion::V4,
                ..Default::default()
            },
        )
        .unwrap();
        let (_d, r) = splat_tileset(splat_glb(&v4, 20, 1), true);
        let f = find(&r, Severity::Error, "SPZ version 4");
        assert_eq!(f.kind, CheckKind::Spz);
        assert!(f.fix.contains("version 3"), "{}", f.fix);
    }

    #[test]
    fn spz_count_and_sh_degree_must_match_the_accessors() {
        let splats = random_splats(20, 1, 0.5, 4);
        let v3 = spz::encode(&splats, &SpzOptions::default()).unwrap();
        let (_d, r) = splat_tileset(splat_glb(&v3, 21, 2), true);
        find(
            &r,
            Severity::Error,
            "SPZ header has 20 points but the POSITION accessor count is 21",
        );
        find(
            &r,
            Severity::Error,
            "SPZ header SH degree 1, but the SH_DEGREE_l attributes give degree 2",
        );
        let (_d, r) = splat_tileset(splat_glb(&v3, 20, 1), true);
        assert!(r.passed(), "{:#?}", r.findings);
    }

    #[test]
    fn splat_budget_is_enforced() {
        let splats = random_splats(100, 0, 1.0, 5);
        let dir = tempfile::tempdir().unwrap();
        let both = json!([KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2]);
        std::fs::write(
            dir.path().join("s.glb"),
            glb::encode(&splats, &SplatGlbOptions::default()).unwrap(),
        )
        .unwrap();
        let ts = json!({
            "asset": {"version": "1.1"}, "geometricError": 1.0,
            "extensionsUsed": [CONTENT_GLTF], "extensionsRequired": [CONTENT_GLTF],
            "extensions": {CONTENT_GLTF: {"extensionsUsed": both, "extensionsRequired": both}},
            "root": {"boundingVolume": {"box": [0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 3]},
                     "geometricError": 0.0, "refine": "REPLACE", "content": {"uri": "s.glb"}}
        });
        std::fs::write(dir.path().join("tileset.json"), ts.to_string()).unwrap();
        let options = CheckOptions {
            max_splats_per_tile: 99,
            ..Default::default()
        };
        let r = check_tileset(&dir.path().join("tileset.json"), &options);
        find(
            &r,
            Severity::Error,
            "100 splats in this tile's content, over the budget of 99",
        );
    }

    #[test]
    fn external_tilesets_are_followed_and_cycles_reported() {
        let outer = json!({
            "asset": {"version": "1.1"}, "geometricError": 10.0,
            "root": {"boundingVolume": unit_box(0.5), "geometricError": 1.0, "refine": "REPLACE",
                     "content": {"uri": "sub/inner.json"}}
        });
        let inner = json!({
            "asset": {"version": "1.1"}, "geometricError": 1.0,
            "root": {"boundingVolume": unit_box(0.5), "geometricError": 2.0, "refine": "ADD",
                     "content": {"uri": "../tileset.json"},
                     "children": [{"boundingVolume": unit_box(0.5), "geometricError": 0.0,
                                   "content": {"uri": "t.glb"}}]}
        });
        let (_d, r) = tileset(
            outer,
            &[
                ("ts/sub/inner.json", serde_json::to_vec(&inner).unwrap()),
                ("ts/sub/t.glb", upright_triangle()),
            ],
        );
        // The inner root's error 2 exceeds the referring tile's 1 (and the inner tileset's 1).
        let f = find(&r, Severity::Error, "greater than its parent's 1");
        assert_eq!(f.tile, "root>root");
        assert_eq!(f.file, Path::new("sub/inner.json"));
        find(&r, Severity::Error, "external tileset cycle");
        find(
            &r,
            Severity::Error,
            "is an external tileset but the tile also has children",
        );
        assert_eq!(r.triangles, 1);
    }
}
