//! The splat `tile` stage's contract: trained splats (a capture's `train` output) or splats
//! trained elsewhere (a splats job's `ingest` output) → a 3D Tiles 1.1 splat tileset, its parent
//! levels refined against the capture's training photos when there are some.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::refine::{LevelRefinement, LevelRefiner};
use super::{TILER_VERSION, tile_splats_refined};
use crate::Result;
use crate::dag::StageKind;
use crate::plan::JobPlan;
use crate::stage::{Input, Output, Stage, StageContext, file_len};
use crate::stages::tile::frame::TilesetFrame;
use crate::stages::tile::{check_written_tileset, georef, tile_key_params};
use crate::stages::{ingest, train};

/// Where a splat stage's splats come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplatSource {
    /// A capture job's `train` output (`splats.ply`, upright frame in `frame.json`), with the
    /// capture's photos in `ingest`.
    Trained,
    /// A splats job's `ingest` output (`splats.ply`, possibly around an f64 origin).
    Ingested,
}

impl SplatSource {
    /// The stage whose folder holds the splats.
    #[must_use]
    pub fn stage(self) -> StageKind {
        match self {
            SplatSource::Trained => StageKind::TRAIN,
            SplatSource::Ingested => StageKind::INGEST,
        }
    }

    /// The splats' PLY in that stage's folder.
    ///
    /// # Errors
    /// When that stage has not finished (a Kiln bug).
    pub fn ply(self, cx: &StageContext) -> Result<PathBuf> {
        let dir = cx.stage_dir(self.stage())?;
        Ok(match self {
            SplatSource::Trained => dir.join("splats.ply"),
            SplatSource::Ingested => dir.join(ingest::SPLATS_PLY),
        })
    }
}

/// The splat `tile` stage.
#[derive(Debug, Clone, Copy)]
pub struct TileSplats {
    /// Where the splats come from.
    pub source: SplatSource,
}

impl TileSplats {
    /// A capture job's: tiles the trained splats, refining parents against the photos.
    pub const TRAINED: TileSplats = TileSplats {
        source: SplatSource::Trained,
    };
    /// A splats job's: tiles the ingested splats.
    pub const INGESTED: TileSplats = TileSplats {
        source: SplatSource::Ingested,
    };

    /// Whether parents are refined against photos: trained splats with `refine_steps` > 0.
    fn refines(&self, plan: &JobPlan) -> bool {
        self.source == SplatSource::Trained && plan.tile.refine_steps > 0
    }
}

/// The summary of [`TileSplats`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplatTileSummary {
    /// Tiles in the tileset.
    pub tiles: usize,
    /// Levels, root = level 0.
    pub levels: u32,
    /// Bytes of the tile GLBs (`tileset.json` not included).
    pub content_bytes: u64,
    /// What each parent level's refinement against the photos did, deepest first (absent when
    /// none was refined).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refined_levels: Vec<LevelRefinement>,
}

impl Stage for TileSplats {
    type Summary = SplatTileSummary;

    fn kind(&self) -> StageKind {
        StageKind::TILE
    }

    fn inputs(&self) -> Vec<Input> {
        vec![Input::Stage(self.source.stage())]
    }

    fn key_params(&self, plan: &JobPlan) -> serde_json::Value {
        let v = serde_json::to_value(plan.tile).map(|mut v| {
            // The tiler's algorithm is part of what its output depends on.
            v["tiler"] = TILER_VERSION.into();
            v
        });
        tile_key_params(plan, v.unwrap_or(serde_json::Value::Null))
    }

    fn uses_rasterizer(&self, plan: &JobPlan) -> bool {
        self.refines(plan)
    }

    fn bytes_read(&self, cx: &StageContext) -> u64 {
        self.source.ply(cx).map_or(0, |p| file_len(&p))
    }

    fn run(&self, cx: &StageContext, out: &Path) -> Result<Output<SplatTileSummary>> {
        let plan = &cx.plan;
        // Survey-sized positions come as f32 means around an f64 origin, which the frame's
        // translation (and so the root transform) carries.
        let placed = kiln_formats::splats::ply::read(&self.source.ply(cx)?)?;
        let mut splats = placed.splats;
        let frame = self.content_frame(cx)?.placed_at(placed.origin_m);
        let r = frame.rotation();
        if r != [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]] {
            kiln_formats::splats::transform::rotate_splats(&mut splats, r)?;
        }
        // Every tile is an SPZ payload: say once, for the whole set, which values SPZ's bytes
        // clamp (issue 44, rule 2: no writer clamps silently).
        // Named by where the tiles are published, not the work folder the user never sees.
        let published = Path::new(&cx.plan.output).join("tileset.json");
        kiln_formats::splats::spz::warn_clamps(&published, &splats);
        let views = self.refine_views(cx)?;
        let extent = f64::from(train::init::scene_extent(
            &views.iter().map(|v| v.camera).collect::<Vec<_>>(),
        ));
        let refiner = LevelRefiner {
            renderer: &cx.renderer,
            views: &views,
            params: &plan.train,
            steps: plan.tile.refine_steps,
            content_from_capture: frame.rotation(),
            scene_extent: extent,
        };
        let (report, refined_levels) = tile_splats_refined(
            &splats,
            &plan.tile,
            &frame,
            (!views.is_empty()).then_some(&refiner),
            out,
        )?;
        if let Some(g) = &plan.georef {
            georef::apply_georef(&report.tileset_path, g)?;
        }
        check_written_tileset(&report.tileset_path)?;
        Ok(Output::new(SplatTileSummary {
            tiles: report.tiles,
            levels: report.levels,
            content_bytes: report.content_bytes,
            refined_levels,
        }))
    }
}

impl TileSplats {
    /// How the tileset stands: trained splats are turned upright (the train stage's estimated
    /// up axis, `frame.json`, becomes glTF +Y); ingested splats were rotated at ingest
    /// (`[ingest] up_axis`).
    fn content_frame(&self, cx: &StageContext) -> Result<TilesetFrame> {
        match self.source {
            SplatSource::Trained => {
                let info = train::read_frame_info(&cx.stage_dir(StageKind::TRAIN)?)?;
                Ok(TilesetFrame::upright(&info))
            }
            SplatSource::Ingested => Ok(TilesetFrame::default()),
        }
    }

    /// The photos parent levels are refined against: the capture's training views (never the
    /// held-out ones); none for ingested splats or with `refine_steps = 0`.
    fn refine_views(&self, cx: &StageContext) -> Result<Vec<train::TrainView>> {
        if !self.refines(&cx.plan) {
            return Ok(Vec::new());
        }
        let ingest_dir = cx.stage_dir(StageKind::INGEST)?;
        let cap = ingest::load_ingested(&ingest_dir)?;
        Ok(train::training_views(
            train::train_views(&ingest_dir, &cap, &cx.plan.train),
            cx.plan.train.eval_every,
        ))
    }
}
