//! A splat tileset as a client sees it: the tile tree with each tile's bounding box, geometric
//! error and content placed in the capture's frame, so that a cut of it can be rendered from the
//! capture's cameras.
//!
//! Source: OGC 3D Tiles 1.1 (22-025r4) §"Tile transforms" (each `transform` maps the tile's frame
//! into its parent's; the root's maps into the world), §"Bounding volumes" (`box` = centre + three
//! half-axis vectors in the tile frame, after its `transform`; `sphere`), §"glTF transforms"
//! (content is glTF Y-up, rotated to Z-up before the tile transform). Where a Kiln tileset sits
//! relative to the capture is read from `asset.extras.kiln.frame` ([`TilesetFrame`]).
//!
//! Content is decoded lazily, once per tile, and kept (a cut usually needs most tiles again from
//! the next camera).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use kiln_formats::splats::GaussianSplats;
use kiln_formats::splats::glb;
use kiln_formats::splats::transform::{raise_sh_degree, rotate_splats};
use kiln_formats::tiles::tileset::{Tile, Tileset, Y_UP_TO_Z_UP};
use kiln_formats::tiles::transform::{self, Mat4};

use crate::stages::tile::frame::TilesetFrame;
use crate::{Error, Result};

/// An oriented box in the capture frame: centre and three half-axis vectors (metres).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrientedBox {
    pub center: [f64; 3],
    pub half_axes: [[f64; 3]; 3],
}

impl OrientedBox {
    /// The eight corners.
    #[must_use]
    pub fn corners(&self) -> [[f64; 3]; 8] {
        std::array::from_fn(|i| {
            let s = [
                if i & 1 == 0 { -1.0 } else { 1.0 },
                if i & 2 == 0 { -1.0 } else { 1.0 },
                if i & 4 == 0 { -1.0 } else { 1.0 },
            ];
            std::array::from_fn(|a| {
                self.center[a] + (0..3).map(|k| s[k] * self.half_axes[k][a]).sum::<f64>()
            })
        })
    }

    /// Distance (metres) from `p` to the box, 0 inside (CesiumJS
    /// `OrientedBoundingBox.distanceSquaredTo`).
    #[must_use]
    pub fn distance_to(&self, p: [f64; 3]) -> f64 {
        let d: [f64; 3] = std::array::from_fn(|a| p[a] - self.center[a]);
        let mut sq = 0.0;
        for axis in &self.half_axes {
            let len = (axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2]).sqrt();
            if len <= 0.0 {
                continue;
            }
            let along = (d[0] * axis[0] + d[1] * axis[1] + d[2] * axis[2]) / len;
            let excess = along.abs() - len;
            if excess > 0.0 {
                sq += excess * excess;
            }
        }
        sq.sqrt()
    }
}

/// One tile, placed in the capture frame.
#[derive(Debug, Clone)]
pub struct EvalTile {
    /// Metres of error if this tile is shown instead of its children (0 for leaves).
    pub geometric_error: f64,
    /// Bounding volume in the capture frame (a sphere is read as its enclosing cube).
    pub bounds: OrientedBox,
    /// Child indices in [`LoadedTileset::tiles`].
    pub children: Vec<usize>,
    /// Depth below the root (root = 0).
    pub depth: u32,
    /// Content file, when the tile has one.
    pub content: Option<PathBuf>,
    /// Size of the content file, bytes (0 without content).
    pub content_bytes: u64,
    /// Content frame (glTF Y-up, tile-local) → capture frame.
    content_to_capture: Mat4,
}

/// A splat tileset read for evaluation. Tiles are in depth-first order, root first.
#[derive(Debug)]
pub struct LoadedTileset {
    pub path: PathBuf,
    pub tiles: Vec<EvalTile>,
    /// The recorded frame (identity for tilesets without one).
    pub frame: TilesetFrame,
    contents: Vec<OnceLock<Arc<GaussianSplats>>>,
}

impl LoadedTileset {
    /// Read `tileset.json` at `path` and every tile's placement; content is read on demand.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::Input`] naming the file and the tile
    /// when it is not a tileset, a tile has a `region` volume or a transform that is not rigid
    /// (rotation + translation: splat content cannot be scaled here), or a content file is missing.
    pub fn open(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let ts: Tileset = serde_json::from_slice(&bytes).map_err(|e| Error::Input {
            path: path.to_path_buf(),
            field: "tileset.json".into(),
            problem: format!("not a 3D Tiles tileset: {e}"),
        })?;
        let frame = TilesetFrame::of_tileset(&ts);
        let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let mut tiles = Vec::new();
        let capture_from_world = frame.capture_from_world();
        place(&ts.root, &capture_from_world, 0, path, &dir, &mut tiles)?;
        let contents = (0..tiles.len()).map(|_| OnceLock::new()).collect();
        Ok(Self {
            path: path.to_path_buf(),
            tiles,
            frame,
            contents,
        })
    }

    /// Total content bytes of all tiles.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.tiles.iter().map(|t| t.content_bytes).sum()
    }

    /// The splats of tile `i` in the capture frame (empty for a tile without content), decoded on
    /// first use.
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::Format`] when the GLB cannot be read or decoded;
    /// [`Error::Input`] when the tile's placement is not a rigid transform.
    pub fn content(&self, i: usize) -> Result<Arc<GaussianSplats>> {
        if let Some(c) = self.contents[i].get() {
            return Ok(Arc::clone(c));
        }
        let tile = &self.tiles[i];
        let splats = match &tile.content {
            None => GaussianSplats::default(),
            Some(p) => {
                let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
                // Absolute f32 means, as the tile transforms below are applied in f32.
                let (mut s, _) = glb::decode(&bytes)?.into_absolute_f32();
                place_splats(&mut s, &tile.content_to_capture).map_err(|e| Error::Input {
                    path: p.clone(),
                    field: "tile transform".into(),
                    problem: e,
                })?;
                s
            }
        };
        Ok(Arc::clone(
            self.contents[i].get_or_init(|| Arc::new(splats)),
        ))
    }

    /// Number of splats of tile `i` (decodes it).
    ///
    /// # Errors
    /// As [`Self::content`].
    pub fn splat_count(&self, i: usize) -> Result<usize> {
        Ok(self.content(i)?.len())
    }

    /// The leaves' splats together (the full-detail tileset), in the capture frame.
    ///
    /// # Errors
    /// As [`Self::content`].
    pub fn leaves(&self) -> Result<GaussianSplats> {
        let leaves: Vec<usize> = (0..self.tiles.len())
            .filter(|&i| self.tiles[i].children.is_empty())
            .collect();
        self.gather(&leaves)
    }

    /// The splats of `tiles` concatenated, in the capture frame. Tiles of a lower SH degree than
    /// the others (coarse levels may drop bands) get zero coefficients for the missing bands,
    /// which renders exactly what they store.
    ///
    /// # Errors
    /// As [`Self::content`].
    pub fn gather(&self, tiles: &[usize]) -> Result<GaussianSplats> {
        let parts: Vec<Arc<GaussianSplats>> = tiles
            .iter()
            .map(|&i| self.content(i))
            .collect::<Result<_>>()?;
        // Tiles without content are empty sets of degree 0: they add nothing, nor a degree.
        let filled: Vec<&GaussianSplats> = parts
            .iter()
            .map(|p| &**p)
            .filter(|p| !p.is_empty())
            .collect();
        let degree = filled.iter().map(|p| p.sh_degree).max().unwrap_or(0);
        let mut out = GaussianSplats {
            sh_degree: degree,
            ..Default::default()
        };
        for p in filled {
            if p.sh_degree == degree {
                out.extend(p)?;
            } else {
                let mut raised = p.clone();
                raise_sh_degree(&mut raised, degree)?;
                out.extend(&raised)?;
            }
        }
        Ok(out)
    }
}

/// Add `tile` and its subtree to `out` (depth first), with `parent_to_capture` the map from the
/// parent's frame to the capture frame.
fn place(
    tile: &Tile,
    parent_to_capture: &Mat4,
    depth: u32,
    path: &Path,
    dir: &Path,
    out: &mut Vec<EvalTile>,
) -> Result<usize> {
    let local = tile.transform.unwrap_or(transform::IDENTITY);
    let to_capture = transform::mul(parent_to_capture, &local);
    let index = out.len();
    let bad = |problem: String| Error::Input {
        path: path.to_path_buf(),
        field: format!("tile {index} (depth {depth}) boundingVolume"),
        problem,
    };
    let bounds = if let Some(b) = tile.bounding_volume.box_ {
        let center = transform::apply(&to_capture, [b[0], b[1], b[2]]);
        let half_axes = std::array::from_fn(|k| {
            transform::apply_vector(&to_capture, [b[3 + 3 * k], b[4 + 3 * k], b[5 + 3 * k]])
        });
        OrientedBox { center, half_axes }
    } else if let Some(s) = tile.bounding_volume.sphere {
        let center = transform::apply(&to_capture, [s[0], s[1], s[2]]);
        let r = s[3] * transform::scale_range(&to_capture).1;
        OrientedBox {
            center,
            half_axes: [[r, 0.0, 0.0], [0.0, r, 0.0], [0.0, 0.0, r]],
        }
    } else {
        return Err(bad(
            "only `box` and `sphere` volumes can be evaluated (no `region`)".into(),
        ));
    };
    let content = match &tile.content {
        Some(c) => {
            let p = dir.join(&c.uri);
            let len = std::fs::metadata(&p).map_err(|e| Error::io(&p, e))?.len();
            Some((p, len))
        }
        None => None,
    };
    out.push(EvalTile {
        geometric_error: tile.geometric_error,
        bounds,
        children: Vec::new(),
        depth,
        content_bytes: content.as_ref().map_or(0, |c| c.1),
        content: content.map(|c| c.0),
        content_to_capture: transform::mul(&to_capture, &Y_UP_TO_Z_UP),
    });
    for child in &tile.children {
        let c = place(child, &to_capture, depth + 1, path, dir, out)?;
        out[index].children.push(c);
    }
    Ok(index)
}

/// Move splats from their content frame into the capture frame by the rigid `m`.
fn place_splats(s: &mut GaussianSplats, m: &Mat4) -> std::result::Result<(), String> {
    if !transform::is_rigid(m, 1e-6) {
        return Err(format!(
            "the transform from this tile's content to the capture frame is not a rotation + \
             translation ({m:?}); scaled splat tiles are not supported"
        ));
    }
    let r = transform::linear_part(m);
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    if r != identity {
        rotate_splats(s, r).map_err(|e| e.to_string())?;
    }
    let t = transform::translation_part(m);
    for p in s.means.chunks_exact_mut(3) {
        for a in 0..3 {
            p[a] = (f64::from(p[a]) + t[a]) as f32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_to_a_box_is_zero_inside_and_euclidean_outside() {
        let b = OrientedBox {
            center: [0.0; 3],
            half_axes: [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]],
        };
        assert_eq!(b.distance_to([0.5, 1.0, -2.0]), 0.0);
        assert!((b.distance_to([4.0, 0.0, 0.0]) - 3.0).abs() < 1e-12);
        assert!((b.distance_to([4.0, 6.0, 0.0]) - 5.0).abs() < 1e-12);
        assert_eq!(b.corners().len(), 8);
    }
}
