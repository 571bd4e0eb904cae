//! A top-down picture of a tileset's tile tree: every tile's bounding volume projected onto the
//! x–y plane of the tileset frame (3D Tiles is Z up; glTF content is Y up and turned Z up by the
//! tileset's convention, so x–y is the ground plane), coloured by depth, plus tile count and
//! content bytes per level.
//!
//! Bounding volumes (3D Tiles 1.1 §"Bounding volumes"): `box` (centre + three half-axis vectors)
//! and `sphere` (centre + radius) are transformed by the tile's accumulated `transform`
//! (column-major 4 × 4, §"Transforms") and their x–y extent is drawn; `region` (radians, EPSG:4979)
//! is drawn as longitude/latitude degrees without transforms. A tileset mixing regions with boxes
//! or spheres is drawn in mixed units (noted). External tilesets (`.json` content) are counted but
//! not opened.
//!
//! Source: OGC 3D Tiles 1.1, <https://docs.ogc.org/cs/22-025r4/22-025r4.html>.

use std::path::Path;

use serde_json::Value;

use super::PageError;
use super::triptych::viridis;

/// Tilesets nested deeper than this are refused as malformed (a real tree is far shallower, and
/// the walk must not overflow the stack).
const MAX_DEPTH: usize = 64;

/// The frame of the picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapFrame {
    /// Tileset x–y, metres.
    Cartesian,
    /// Longitude–latitude, degrees (`region` volumes).
    Geographic,
    /// Both kinds of volume were found.
    Mixed,
}

impl MapFrame {
    /// The axes in words, for captions.
    pub fn describe(self) -> &'static str {
        match self {
            MapFrame::Cartesian => "tileset x–y in metres",
            MapFrame::Geographic => "longitude–latitude in degrees",
            MapFrame::Mixed => "mixed metres and degrees",
        }
    }
}

/// One tile's footprint.
#[derive(Debug, Clone, PartialEq)]
pub struct TileFootprint {
    /// Depth in the tree; the root is 0.
    pub depth: usize,
    /// `[x, y]` minimum corner (metres or degrees, see [`MapFrame`]).
    pub min: [f64; 2],
    /// `[x, y]` maximum corner.
    pub max: [f64; 2],
    /// Bytes of the tile's local content files (0 when none or not found).
    pub content_bytes: u64,
}

/// All footprints of a tileset.
#[derive(Debug, Clone, PartialEq)]
pub struct TileMap {
    /// One entry per tile, in depth-first order.
    pub tiles: Vec<TileFootprint>,
    /// Units of the picture.
    pub frame: MapFrame,
    /// Problems found while walking (missing content, unsupported volumes).
    pub notes: Vec<String>,
}

/// Read `tileset.json` at `path` and collect every tile's footprint.
///
/// # Errors
/// [`PageError::Io`] when it cannot be read; [`PageError::Invalid`] when it is not JSON, has no
/// `root`, a bounding volume has the wrong number of values, or the tree is deeper than 64.
pub fn read_tileset(path: &Path) -> Result<TileMap, PageError> {
    let bytes = std::fs::read(path).map_err(|source| PageError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| PageError::Invalid {
        path: path.to_path_buf(),
        field: "(document)".into(),
        expected: "3D Tiles tileset JSON".into(),
        found: e.to_string(),
    })?;
    let root = doc.get("root").ok_or_else(|| PageError::Invalid {
        path: path.to_path_buf(),
        field: "root".into(),
        expected: "a root tile".into(),
        found: "nothing".into(),
    })?;
    let mut walk = Walk {
        path,
        base: path.parent().unwrap_or(Path::new(".")),
        tiles: Vec::new(),
        notes: Vec::new(),
        geographic: false,
        cartesian: false,
        missing_content: 0,
        external: 0,
    };
    walk.tile(root, IDENTITY, 0, "root")?;
    let frame = match (walk.cartesian, walk.geographic) {
        (true, true) => MapFrame::Mixed,
        (false, true) => MapFrame::Geographic,
        _ => MapFrame::Cartesian,
    };
    if walk.missing_content > 0 {
        walk.notes.push(format!(
            "{}: {} content file(s) not found beside the tileset; counted as 0 bytes",
            path.display(),
            walk.missing_content
        ));
    }
    if walk.external > 0 {
        walk.notes.push(format!(
            "{}: {} external tileset(s) not opened; their tiles are not drawn",
            path.display(),
            walk.external
        ));
    }
    Ok(TileMap {
        tiles: walk.tiles,
        frame,
        notes: walk.notes,
    })
}

type Mat4 = [f64; 16];
const IDENTITY: Mat4 = [
    1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0,
];

struct Walk<'a> {
    path: &'a Path,
    base: &'a Path,
    tiles: Vec<TileFootprint>,
    notes: Vec<String>,
    geographic: bool,
    cartesian: bool,
    missing_content: usize,
    external: usize,
}

impl Walk<'_> {
    fn invalid(&self, field: &str, expected: &str, found: String) -> PageError {
        PageError::Invalid {
            path: self.path.to_path_buf(),
            field: field.into(),
            expected: expected.into(),
            found,
        }
    }

    fn tile(
        &mut self,
        tile: &Value,
        parent: Mat4,
        depth: usize,
        at: &str,
    ) -> Result<(), PageError> {
        if depth > MAX_DEPTH {
            return Err(self.invalid(at, "a tree at most 64 levels deep", "deeper".into()));
        }
        let transform = match tile.get("transform") {
            Some(t) => {
                let m = numbers(t, 16).ok_or_else(|| {
                    self.invalid(&format!("{at}.transform"), "16 numbers", t.to_string())
                })?;
                mat_mul(&parent, &m.try_into().unwrap_or(IDENTITY))
            }
            None => parent,
        };
        let bv = tile.get("boundingVolume");
        let footprint = if let Some(b) = bv.and_then(|v| v.get("box")) {
            let v = numbers(b, 12).ok_or_else(|| {
                self.invalid(
                    &format!("{at}.boundingVolume.box"),
                    "12 numbers",
                    b.to_string(),
                )
            })?;
            self.cartesian = true;
            let mut corners = Vec::with_capacity(8);
            for sx in [-1.0, 1.0] {
                for sy in [-1.0, 1.0] {
                    for sz in [-1.0, 1.0] {
                        corners.push(std::array::from_fn(|i| {
                            v[i] + sx * v[3 + i] + sy * v[6 + i] + sz * v[9 + i]
                        }));
                    }
                }
            }
            extent_xy(&transform, &corners)
        } else if let Some(s) = bv.and_then(|v| v.get("sphere")) {
            let v = numbers(s, 4).ok_or_else(|| {
                self.invalid(
                    &format!("{at}.boundingVolume.sphere"),
                    "4 numbers",
                    s.to_string(),
                )
            })?;
            self.cartesian = true;
            let mut corners = Vec::with_capacity(8);
            for sx in [-1.0, 1.0] {
                for sy in [-1.0, 1.0] {
                    for sz in [-1.0, 1.0] {
                        corners.push([v[0] + sx * v[3], v[1] + sy * v[3], v[2] + sz * v[3]]);
                    }
                }
            }
            extent_xy(&transform, &corners)
        } else if let Some(r) = bv.and_then(|v| v.get("region")) {
            let v = numbers(r, 6).ok_or_else(|| {
                self.invalid(
                    &format!("{at}.boundingVolume.region"),
                    "6 numbers",
                    r.to_string(),
                )
            })?;
            self.geographic = true;
            (
                [v[0].to_degrees(), v[1].to_degrees()],
                [v[2].to_degrees(), v[3].to_degrees()],
            )
        } else {
            return Err(self.invalid(
                &format!("{at}.boundingVolume"),
                "a box, sphere or region",
                bv.map_or("nothing".into(), |v| v.to_string()),
            ));
        };
        let content_bytes = self.content_bytes(tile);
        self.tiles.push(TileFootprint {
            depth,
            min: footprint.0,
            max: footprint.1,
            content_bytes,
        });
        if let Some(children) = tile.get("children").and_then(Value::as_array) {
            for (i, child) in children.iter().enumerate() {
                self.tile(child, transform, depth + 1, &format!("{at}.children[{i}]"))?;
            }
        }
        Ok(())
    }

    /// Bytes of the tile's `content` / `contents[]` files that are local and present.
    fn content_bytes(&mut self, tile: &Value) -> u64 {
        let mut uris = Vec::new();
        if let Some(c) = tile.get("content") {
            uris.push(c);
        }
        if let Some(Value::Array(cs)) = tile.get("contents") {
            uris.extend(cs.iter());
        }
        let mut total = 0;
        for c in uris {
            let Some(uri) = c
                .get("uri")
                .or_else(|| c.get("url"))
                .and_then(Value::as_str)
            else {
                continue;
            };
            if uri.to_ascii_lowercase().ends_with(".json") {
                self.external += 1;
            }
            if uri.contains("://") || uri.starts_with('/') {
                self.missing_content += 1;
                continue;
            }
            match std::fs::metadata(self.base.join(uri)) {
                Ok(m) => total += m.len(),
                Err(_) => self.missing_content += 1,
            }
        }
        total
    }
}

/// `n` finite numbers from a JSON array, or `None`.
fn numbers(v: &Value, n: usize) -> Option<Vec<f64>> {
    let a = v.as_array().filter(|a| a.len() == n)?;
    a.iter()
        .map(|x| x.as_f64().filter(|f| f.is_finite()))
        .collect()
}

fn mat_mul(a: &Mat4, b: &Mat4) -> Mat4 {
    // Column-major: element (row r, col c) at c·4 + r.
    std::array::from_fn(|i| {
        let (c, r) = (i / 4, i % 4);
        (0..4).map(|k| a[k * 4 + r] * b[c * 4 + k]).sum()
    })
}

/// x–y extent of `points` after the affine `m`.
fn extent_xy(m: &Mat4, points: &[[f64; 3]]) -> ([f64; 2], [f64; 2]) {
    let mut lo = [f64::INFINITY; 2];
    let mut hi = [f64::NEG_INFINITY; 2];
    for p in points {
        for (r, (l, h)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
            let v = m[r] * p[0] + m[4 + r] * p[1] + m[8 + r] * p[2] + m[12 + r];
            *l = l.min(v);
            *h = h.max(v);
        }
    }
    (lo, hi)
}

/// Picture width, pixels (height follows the aspect ratio, clamped to 160..=640).
const MAP_WIDTH_PX: f64 = 640.0;
/// Margin around the drawing, pixels.
const MARGIN_PX: f64 = 24.0;

/// The tile map as a standalone SVG: one `<rect class="tile" data-depth="D">` per tile (x right,
/// y up), outline and faint fill coloured by depth through viridis, deeper tiles drawn on top,
/// plus a depth legend and the extent in the frame's units.
pub fn tile_map_svg(map: &TileMap) -> String {
    let max_depth = map.tiles.iter().map(|t| t.depth).max().unwrap_or(0);
    let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
    for t in &map.tiles {
        for i in 0..2 {
            lo[i] = lo[i].min(t.min[i]);
            hi[i] = hi[i].max(t.max[i]);
        }
    }
    if !lo[0].is_finite() {
        (lo, hi) = ([0.0; 2], [1.0; 2]);
    }
    let span = [(hi[0] - lo[0]).max(1e-9), (hi[1] - lo[1]).max(1e-9)];
    let inner_w = MAP_WIDTH_PX - 2.0 * MARGIN_PX;
    let inner_h = (inner_w * span[1] / span[0]).clamp(160.0, 640.0);
    // One scale for both axes keeps squares square; the larger ratio fits both.
    let s = (inner_w / span[0]).min(inner_h / span[1]);
    let (w, h) = (MAP_WIDTH_PX, inner_h + 2.0 * MARGIN_PX + 20.0);
    let px = |x: f64| MARGIN_PX + (x - lo[0]) * s;
    let py = |y: f64| MARGIN_PX + inner_h - (y - lo[1]) * s;
    let colour = |d: usize| {
        let [r, g, b] = viridis(if max_depth == 0 {
            0.0
        } else {
            d as f64 / max_depth as f64
        });
        format!("rgb({r},{g},{b})")
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" \
         viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let mut order: Vec<&TileFootprint> = map.tiles.iter().collect();
    order.sort_by_key(|t| t.depth);
    for t in order {
        let c = colour(t.depth);
        // Keep zero-area footprints visible as a 1 px outline.
        svg.push_str(&format!(
            "<rect class=\"tile\" data-depth=\"{}\" x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" \
             height=\"{:.2}\" fill=\"{c}\" fill-opacity=\"0.08\" stroke=\"{c}\" stroke-width=\"1\"/>\n",
            t.depth,
            px(t.min[0]),
            py(t.max[1]),
            ((t.max[0] - t.min[0]) * s).max(1.0),
            ((t.max[1] - t.min[1]) * s).max(1.0),
        ));
    }
    let unit = match map.frame {
        MapFrame::Geographic => "°",
        MapFrame::Cartesian => " m",
        MapFrame::Mixed => "",
    };
    svg.push_str(&format!(
        "<text x=\"{MARGIN_PX}\" y=\"{:.0}\">x {:.4}{unit} … {:.4}{unit}, y {:.4}{unit} … {:.4}{unit}</text>\n",
        h - 8.0,
        lo[0],
        hi[0],
        lo[1],
        hi[1]
    ));
    for d in 0..=max_depth.min(12) {
        let x = w - MARGIN_PX - 28.0 * (max_depth.min(12) - d + 1) as f64;
        svg.push_str(&format!(
            "<rect x=\"{x:.0}\" y=\"4\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{:.0}\" y=\"14\">{d}</text>\n",
            colour(d),
            x + 14.0
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

/// `<table>` of tiles and content bytes per level, with a total row.
pub fn level_table_html(map: &TileMap) -> String {
    let max_depth = map.tiles.iter().map(|t| t.depth).max().unwrap_or(0);
    let mut rows = vec![(0usize, 0u64); max_depth + 1];
    for t in &map.tiles {
        rows[t.depth].0 += 1;
        rows[t.depth].1 += t.content_bytes;
    }
    let mut out = String::from(
        "<table><tr><th>level</th><th class=\"n\">tiles</th><th class=\"n\">content bytes</th></tr>\n",
    );
    for (d, (n, b)) in rows.iter().enumerate() {
        out.push_str(&format!(
            "<tr><td>{d}</td><td class=\"n\">{n}</td><td class=\"n\">{}</td></tr>\n",
            super::cost::group_digits(*b as i64)
        ));
    }
    out.push_str(&format!(
        "<tr class=\"total\"><td>total</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n</table>\n",
        map.tiles.len(),
        super::cost::group_digits(map.tiles.iter().map(|t| t.content_bytes as i64).sum())
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root box 2 × 2 m centred at the origin, four 1 × 1 m children (one with a transform
    /// moving it +10 m in x), one grandchild sphere; two content files of 100 and 30 bytes.
    fn small_tileset(dir: &Path) -> std::path::PathBuf {
        std::fs::write(dir.join("a.glb"), vec![0u8; 100]).unwrap();
        std::fs::write(dir.join("b.glb"), vec![0u8; 30]).unwrap();
        let child = |cx: f64, cy: f64| {
            serde_json::json!({"boundingVolume": {"box": [cx, cy, 0, 0.5,0,0, 0,0.5,0, 0,0,0.5]},
                               "geometricError": 0.0})
        };
        let mut moved = child(0.5, 0.5);
        moved["transform"] = serde_json::json!([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 10, 0, 0, 1]);
        moved["children"] = serde_json::json!([
            {"boundingVolume": {"sphere": [0, 0, 0, 0.25]}, "geometricError": 0.0,
             "content": {"uri": "b.glb"}}
        ]);
        let ts = serde_json::json!({
            "asset": {"version": "1.1"}, "geometricError": 4.0,
            "root": {"boundingVolume": {"box": [0,0,0, 1,0,0, 0,1,0, 0,0,1]},
                     "geometricError": 2.0, "content": {"uri": "a.glb"},
                     "children": [child(-0.5, -0.5), child(0.5, -0.5), child(-0.5, 0.5), moved]}
        });
        let p = dir.join("tileset.json");
        std::fs::write(&p, ts.to_string()).unwrap();
        p
    }

    #[test]
    fn small_tileset_gives_one_rect_per_tile_and_per_level_totals() {
        let dir = tempfile::tempdir().unwrap();
        let map = read_tileset(&small_tileset(dir.path())).unwrap();
        assert_eq!(map.tiles.len(), 6);
        assert_eq!(map.frame, MapFrame::Cartesian);
        assert!(map.notes.is_empty(), "{:?}", map.notes);
        // The transformed child and its sphere grandchild are shifted by 10 m in x.
        assert_eq!(map.tiles[4].min, [10.0, 0.0]);
        assert_eq!(map.tiles[5].min, [9.75, -0.25]);
        assert_eq!(map.tiles[5].max, [10.25, 0.25]);
        let svg = tile_map_svg(&map);
        assert_eq!(svg.matches("class=\"tile\"").count(), 6);
        assert_eq!(svg.matches("data-depth=\"1\"").count(), 4);
        let table = level_table_html(&map);
        assert!(table.contains("<td>0</td><td class=\"n\">1</td><td class=\"n\">100</td>"));
        assert!(table.contains("<td>1</td><td class=\"n\">4</td><td class=\"n\">0</td>"));
        assert!(table.contains("<td>2</td><td class=\"n\">1</td><td class=\"n\">30</td>"));
    }

    #[test]
    fn regions_are_drawn_in_degrees() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tileset.json");
        let r = std::f64::consts::PI / 180.0;
        std::fs::write(
            &p,
            serde_json::json!({"root": {"boundingVolume": {"region": [r, 2.0*r, 3.0*r, 4.0*r, 0, 10]},
                                        "geometricError": 0}})
            .to_string(),
        )
        .unwrap();
        let map = read_tileset(&p).unwrap();
        assert_eq!(map.frame, MapFrame::Geographic);
        let t = &map.tiles[0];
        assert!((t.min[0] - 1.0).abs() < 1e-9 && (t.max[1] - 4.0).abs() < 1e-9);
    }

    #[test]
    fn bad_bounding_volumes_and_missing_content_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tileset.json");
        std::fs::write(
            &p,
            r#"{"root": {"boundingVolume": {"box": [0, 0, 0]}, "geometricError": 0}}"#,
        )
        .unwrap();
        let e = read_tileset(&p).unwrap_err().to_string();
        assert!(
            e.contains("tileset.json") && e.contains("root.boundingVolume.box"),
            "{e}"
        );
        std::fs::write(&p, r#"{"asset": {}}"#).unwrap();
        assert!(read_tileset(&p).unwrap_err().to_string().contains("root"));
        std::fs::write(
            &p,
            r#"{"root": {"boundingVolume": {"sphere": [0,0,0,1]}, "geometricError": 0,
                         "content": {"uri": "gone.glb"}}}"#,
        )
        .unwrap();
        let map = read_tileset(&p).unwrap();
        assert_eq!(map.notes.len(), 1);
        assert!(map.notes[0].contains("not found"));
    }
}
