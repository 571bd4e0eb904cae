//! Training views and the bounded cache their pixels go through.
//!
//! A capture of a few thousand large photos does not fit in RAM as `f32` images (3DGS issue #381:
//! `MemoryError` at 308 photos; OpenSplat #134: ~160 GB for 3 564). So a [`TrainView`] built by a
//! job holds a loader rather than its pixels ([`Pixels::Load`]), and the training loop reads
//! pixels through a [`ViewCache`] that keeps the most recently used views up to a byte budget
//! (`train.image_cache_mb`) and decodes the rest again when they come up. Views built in memory
//! (tests, library callers) hold their pixels ([`Pixels::Resident`]) and bypass the budget.

use std::collections::VecDeque;
use std::sync::Arc;

use kiln_formats::capture::Split;
use kiln_kernels::Camera;

/// The pixels of one view, as the trainer uses them.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewPixels {
    /// `[H, W, 3]` linear RGB in [0, 1], row-major, composited over
    /// [`super::TrainParams::background`] where the photo is transparent or masked out.
    pub image: Vec<f32>,
    /// `[H, W]` share of the background in each pixel of `image` (1 − alpha for RGBA photos, 1
    /// outside a mask used as background); `None` when the photo is opaque everywhere. With
    /// [`super::TrainParams::random_background`] the target of a step is
    /// `image + transparency·(random − background)`.
    pub transparency: Option<Vec<f32>>,
    /// `[H, W]` per-pixel loss weights in [0, 1]: 0 where the capture's mask excludes the pixel
    /// (`mask_mode = "ignore"`) or undistortion had no source pixel, so training and evaluation
    /// ignore it; `None` weighs every pixel 1.
    pub loss_weights: Option<Vec<f32>>,
}

impl ViewPixels {
    /// Opaque pixels, every one weighted 1: `image` is `[H, W, 3]` linear RGB in [0, 1].
    pub fn opaque(image: Vec<f32>) -> Self {
        Self {
            image,
            transparency: None,
            loss_weights: None,
        }
    }

    /// Heap bytes held (what the cache budget counts).
    pub fn bytes(&self) -> usize {
        let len = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, Vec::len);
        (self.image.len() + len(&self.transparency) + len(&self.loss_weights))
            * std::mem::size_of::<f32>()
    }
}

/// Decodes a view's pixels on demand (e.g. from the ingested PNGs); called again after the
/// cache evicted them, so it must return the same pixels every time.
pub type PixelLoader = Arc<dyn Fn() -> crate::Result<ViewPixels> + Send + Sync>;

/// Where a view's pixels come from.
#[derive(Clone)]
pub enum Pixels {
    /// Held in memory for the whole run (not counted against the cache budget).
    Resident(Arc<ViewPixels>),
    /// Decoded on demand through the [`ViewCache`].
    Load(PixelLoader),
}

impl std::fmt::Debug for Pixels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Resident(p) => write!(f, "Resident({} bytes)", p.bytes()),
            Self::Load(_) => f.write_str("Load(..)"),
        }
    }
}

/// One posed training image.
#[derive(Debug, Clone)]
pub struct TrainView {
    /// Unique name (e.g. the image file name); views are sorted by it for the hold-out split.
    pub name: String,
    /// Pinhole camera, OpenCV frame, `world_to_camera`; its width/height are the image's.
    pub camera: Camera,
    /// The image, its transparency and its loss weights, held or loaded on demand.
    pub pixels: Pixels,
    /// The capture's declared split for this view, if any: training then uses `Train` views and
    /// holds out `Test` (else `Val`) views instead of every n-th view.
    pub split: Option<Split>,
}

impl TrainView {
    /// A view whose pixels are held in memory.
    pub fn resident(name: impl Into<String>, camera: Camera, pixels: ViewPixels) -> Self {
        Self {
            name: name.into(),
            camera,
            pixels: Pixels::Resident(Arc::new(pixels)),
            split: None,
        }
    }

    /// A view whose pixels `load` decodes when the trainer needs them.
    pub fn on_demand(name: impl Into<String>, camera: Camera, load: PixelLoader) -> Self {
        Self {
            name: name.into(),
            camera,
            pixels: Pixels::Load(load),
            split: None,
        }
    }

    /// This view with the capture's declared split.
    #[must_use]
    pub fn with_split(self, split: Option<Split>) -> Self {
        Self { split, ..self }
    }

    /// The view's pixels, decoded now when they are not resident (no caching), and checked
    /// against the camera.
    ///
    /// # Errors
    /// The loader's error, or [`crate::Error::Input`] naming the view when the pixels do not
    /// match the camera size or are out of range.
    pub fn load(&self) -> crate::Result<Arc<ViewPixels>> {
        let pixels = match &self.pixels {
            Pixels::Resident(p) => Arc::clone(p),
            Pixels::Load(load) => Arc::new(load()?),
        };
        check_pixels(self, &pixels)?;
        Ok(pixels)
    }
}

/// Check that `pixels` fit `view`'s camera: sizes, finite values in [0, 1] for transparency and
/// weights, and at least one pixel weighted above 0.
///
/// # Errors
/// [`crate::Error::Input`] naming the view, field `image`, with what was found and the fix.
pub(crate) fn check_pixels(view: &TrainView, px: &ViewPixels) -> crate::Result<()> {
    let (w, h) = (view.camera.width as usize, view.camera.height as usize);
    let in_unit = |v: &[f32]| v.iter().all(|x| (0.0..=1.0).contains(x));
    let problem = if w == 0 || h == 0 {
        Some(format!("camera size {w}×{h}: expected a non-empty image"))
    } else if px.image.len() != w * h * 3 {
        Some(format!(
            "expected {h}×{w}×3 = {} values, found {}",
            w * h * 3,
            px.image.len()
        ))
    } else if !px.image.iter().all(|x| x.is_finite()) {
        Some("contains non-finite values; expected linear RGB in [0, 1]".into())
    } else if let Some(t) = &px.transparency
        && (t.len() != w * h || !in_unit(t))
    {
        Some(format!(
            "transparency has {} values (expected {h}×{w} = {} in [0, 1]); ingest again",
            t.len(),
            w * h
        ))
    } else if let Some(lw) = &px.loss_weights
        && (lw.len() != w * h || !in_unit(lw))
    {
        Some(format!(
            "loss_weights has {} values (expected {h}×{w} = {} in [0, 1]); ingest again",
            lw.len(),
            w * h
        ))
    } else if px
        .loss_weights
        .as_ref()
        .is_some_and(|lw| lw.iter().all(|&x| x == 0.0))
    {
        Some("its mask excludes every pixel; fix the mask or drop the view".into())
    } else {
        None
    };
    match problem {
        Some(problem) => Err(crate::Error::Input {
            path: view.name.clone().into(),
            field: "image".into(),
            problem,
        }),
        None => Ok(()),
    }
}

/// What the cache did over a run (reported in `metrics.json` as `image_cache`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// The budget, bytes.
    pub budget_bytes: u64,
    /// Most bytes of loaded pixels the cache held at once (resident views not counted). Room
    /// is made before each load, so this stays within the budget unless one view is larger than
    /// the budget (the view being trained on is always kept) or views differ in size.
    pub peak_bytes: u64,
    /// Pixels decoded by a loader (first use and reloads after eviction).
    pub loads: u64,
    /// Requests served without decoding.
    pub hits: u64,
}

/// A least-recently-used cache of loaded view pixels, bounded by bytes.
#[derive(Debug)]
pub(crate) struct ViewCache {
    /// `(view key, pixels)`, least recently used first.
    entries: VecDeque<(usize, Arc<ViewPixels>)>,
    bytes: usize,
    /// Size of the last view loaded, bytes: the room made before the next load.
    last_bytes: usize,
    stats: CacheStats,
}

impl ViewCache {
    /// An empty cache holding at most `budget_bytes` of loaded pixels (plus the newest view).
    pub(crate) fn new(budget_bytes: u64) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            last_bytes: 0,
            stats: CacheStats {
                budget_bytes,
                ..CacheStats::default()
            },
        }
    }

    /// The pixels of `view` (keyed by `key`, unique per view within the run): resident ones as
    /// they are, cached ones from memory, others decoded, checked and cached, evicting the least
    /// recently used views beyond the budget.
    ///
    /// # Errors
    /// As [`TrainView::load`].
    pub(crate) fn get(&mut self, key: usize, view: &TrainView) -> crate::Result<Arc<ViewPixels>> {
        // Resident pixels were checked once by `warm`; a step only needs the shared handle.
        if let Pixels::Resident(pixels) = &view.pixels {
            self.stats.hits += 1;
            return Ok(Arc::clone(pixels));
        }
        if let Some(i) = self.entries.iter().position(|(k, _)| *k == key) {
            self.stats.hits += 1;
            let entry = self.entries.remove(i).expect("position is in range");
            let pixels = Arc::clone(&entry.1);
            self.entries.push_back(entry);
            return Ok(pixels);
        }
        // Make room first, sized by the last view loaded (views of a capture are usually the
        // same size), so the old pixels are freed before the new ones are decoded.
        self.evict_until(
            self.stats
                .budget_bytes
                .saturating_sub(self.last_bytes as u64),
            0,
        );
        let pixels = view.load()?;
        self.stats.loads += 1;
        self.last_bytes = pixels.bytes();
        self.bytes += pixels.bytes();
        self.entries.push_back((key, Arc::clone(&pixels)));
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.bytes as u64);
        self.evict_until(self.stats.budget_bytes, 1);
        Ok(pixels)
    }

    /// Drop least recently used entries until at most `bytes` are held or only `keep` remain.
    fn evict_until(&mut self, bytes: u64, keep: usize) {
        while self.bytes as u64 > bytes && self.entries.len() > keep {
            if let Some((_, old)) = self.entries.pop_front() {
                self.bytes -= old.bytes();
            }
        }
    }

    /// Check every view of `views` (keyed by index) once before training, so a bad photo fails
    /// the run at the start: resident views in place, the others by decoding them into the cache
    /// (which keeps the last ones it can hold).
    ///
    /// # Errors
    /// As [`TrainView::load`], for the first view that fails.
    pub(crate) fn warm(&mut self, views: &[TrainView]) -> crate::Result<()> {
        for (i, v) in views.iter().enumerate() {
            match v.pixels {
                Pixels::Resident(_) => drop(v.load()?),
                Pixels::Load(_) => drop(self.get(i, v)?),
            }
        }
        Ok(())
    }

    /// What the cache did so far.
    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn camera() -> Camera {
        Camera {
            width: 4,
            height: 2,
            fx: 4.0,
            fy: 4.0,
            cx: 2.0,
            cy: 1.0,
            world_to_camera: [
                [1.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 0.0, 0.0],
                [0.0, 0.0, 1.0, 2.0],
                [0.0, 0.0, 0.0, 1.0],
            ],
        }
    }

    fn counted(value: f32, loads: &Arc<AtomicUsize>) -> TrainView {
        let loads = Arc::clone(loads);
        TrainView::on_demand(
            format!("v{value}"),
            camera(),
            Arc::new(move || {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(ViewPixels::opaque(vec![value; 4 * 2 * 3]))
            }),
        )
    }

    #[test]
    fn the_cache_keeps_the_most_recent_views_within_its_budget() {
        let loads = Arc::new(AtomicUsize::new(0));
        let views: Vec<TrainView> = (0..4).map(|i| counted(i as f32 / 4.0, &loads)).collect();
        // 24 floats = 96 bytes per view; room for two.
        let mut cache = ViewCache::new(2 * 96);
        for i in [0, 1, 0, 2, 0, 1] {
            let px = cache.get(i, &views[i]).unwrap();
            assert_eq!(px.image[0], i as f32 / 4.0);
        }
        // 0, 1 load; 0 hits; 1 is evicted (0 was used later) and 2 loads; 0 hits; 2 is
        // evicted and 1 reloads.
        assert_eq!(loads.load(Ordering::SeqCst), 4);
        let s = cache.stats();
        assert_eq!((s.loads, s.hits, s.peak_bytes), (4, 2, 2 * 96));
        assert!(cache.bytes <= 2 * 96);
    }

    #[test]
    fn a_view_larger_than_the_budget_is_still_served() {
        let loads = Arc::new(AtomicUsize::new(0));
        let views: Vec<TrainView> = (0..2).map(|i| counted(i as f32, &loads)).collect();
        let mut cache = ViewCache::new(0);
        for i in [0, 0, 1] {
            cache.get(i, &views[i]).unwrap();
        }
        // The view in use stays (a repeat is a hit); the next one replaces it.
        assert_eq!(cache.entries.len(), 1);
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        assert_eq!(cache.stats().peak_bytes, 24 * 4);
    }

    #[test]
    fn loaded_pixels_of_the_wrong_size_name_the_view() {
        let view = TrainView::on_demand(
            "IMG_0001.JPG",
            camera(),
            Arc::new(|| Ok(ViewPixels::opaque(vec![0.5; 5]))),
        );
        let err = ViewCache::new(1 << 20).get(0, &view).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("IMG_0001.JPG") && msg.contains("found 5"),
            "{msg}"
        );
    }
}
