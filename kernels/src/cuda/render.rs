//! The render passes on a [`GpuContext`]: the same stages and contract as the CPU twin
//! (`cpu::forward` / `cpu::backward`, behind [`crate::render_forward`] /
//! [`crate::render_backward`]), launched kernel by kernel.
//!
//! Forward: upload parameters → `kiln_project_forward` → exclusive scan of tile counts (the total
//! comes back to size the intersection buffers) → `kiln_bin_emit` → radix sort, 8 bits per pass
//! over the `32 + ⌈log2 tiles⌉` key bits that can be non-zero → `kiln_gather_ids` →
//! `kiln_tile_ranges` → `kiln_rasterize_forward` → download image, alpha, radii.
//! Backward: upload ∂L/∂image → `kiln_rasterize_backward` (per-intersection gradients, no atomics)
//! → `kiln_sum_isect_grads` (per-splat sums in a fixed order) → `kiln_project_backward` (the chain
//! rule) → download. With `absgrad` (AbsGS), `kiln_rasterize_backward` also writes `[I, 2]`
//! absolute mean2d sums, summed per splat by `kiln_sum_isect_abs` and read by
//! `kiln_project_backward` for `means2d_grad_norm` only; without it they are never allocated. Both passes are deterministic for a fixed input on one GPU.
//!
//! Intersection buffers are sized from the scanned count. When the largest of them (`[I, 9]`
//! gradients) would exceed the allocation cap, the render is split into bands of tile rows, each
//! with its own intersection list, binned, sorted and rasterised in turn ([`plan_bands`]); the
//! per-splat sums run band after band from the same running value, so the result is bit-identical
//! to the unsplit render. Bands bound the size of each allocation, not the total: every band's list
//! is kept for the backward pass.

use std::sync::Arc;

use super::gpu::{DeviceBuffer, GpuContext, KernelArgs};
use crate::consts::TILE_SIZE;
use crate::cpu::check_render_inputs;
use crate::cpu::ms_since;
use crate::cpu::project::{CameraModel, RasterizeMode};
use crate::types::{KernelTimings, RenderOptions, SplatGradients, SplatsRef};
use crate::{Camera, Error};

/// Threads per block of the one-thread-per-item kernels.
const BLOCK: u32 = 256;
/// Items per block of the radix sort (`KILN_SORT_CHUNK` in sort.cu).
const SORT_CHUNK: usize = 256 * 16;
/// Threads per block of the scan (`KILN_SCAN_THREADS` in scan.cu).
const SCAN_THREADS: u32 = 256;
/// Values per block of the scan (`KILN_SCAN_CHUNK` in scan.cu).
const SCAN_CHUNK: usize = 256 * 16;
/// Values per intersection in the backward buffer (`KILN_ISECT_GRAD` in common.cuh).
const ISECT_GRAD: usize = 9;

/// The camera as the kernels take it (`struct KilnCamera` in common.cuh, same field order; every
/// field is 4 bytes, so there is no padding on either side).
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuCamera {
    rot: [f32; 9],
    trans: [f32; 3],
    centre: [f32; 3],
    fx: f32,
    fy: f32,
    cx: f32,
    cy: f32,
    lim_x: [f32; 2],
    lim_y: [f32; 2],
    width: u32,
    height: u32,
    tiles_x: u32,
    tiles_y: u32,
}

impl GpuCamera {
    /// From a checked camera, through the CPU twin's `CameraModel<f32>` so derived values are
    /// bit-identical.
    fn new(camera: &Camera) -> Self {
        let m = CameraModel::<f32>::new(camera);
        let mut rot = [0.0; 9];
        for r in 0..3 {
            for c in 0..3 {
                rot[r * 3 + c] = m.rotation[r][c];
            }
        }
        Self {
            rot,
            trans: m.translation,
            centre: m.centre,
            fx: m.fx,
            fy: m.fy,
            cx: m.cx,
            cy: m.cy,
            lim_x: m.lim_x,
            lim_y: m.lim_y,
            width: m.width,
            height: m.height,
            tiles_x: m.tiles_x(),
            tiles_y: m.tiles_y(),
        }
    }
}

type Args = KernelArgs<GpuCamera>;

/// What the backward pass needs from a GPU forward pass: the parameters and every intermediate,
/// still on the device. Opaque to callers.
#[derive(Debug)]
pub struct GpuSaved {
    n: usize,
    k: usize,
    sh_degree: u32,
    camera: Camera,
    background: [f32; 3],
    /// Opacity rule of the forward pass (`RenderOptions::antialiased`); the backward pass
    /// differentiates the same one.
    mode: RasterizeMode,
    intersections: usize,
    bands: Vec<Band>,
    splats: DeviceSplats,
    conics: DeviceBuffer<f32>,
    xys: DeviceBuffer<f32>,
    radii: DeviceBuffer<f32>,
    opacities: DeviceBuffer<f32>,
    colors: DeviceBuffer<f32>,
    tile_ranges: DeviceBuffer<u32>,
    final_t: DeviceBuffer<f32>,
    n_contrib: DeviceBuffer<u32>,
}

/// One band of tile rows `[rows.0, rows.1)` of a render with its own sorted intersection list.
/// A render is split into bands only when one list would need a buffer above the allocation cap
/// (see [`plan_bands`]); otherwise a single band covers every row.
#[derive(Debug)]
struct Band {
    rows: (u32, u32),
    intersections: usize,
    /// `[N]` tiles of each splat inside the band.
    counts: DeviceBuffer<u32>,
    /// `[N]` exclusive scan of `counts`: where each splat's intersections start in the band's
    /// unsorted list.
    offsets: DeviceBuffer<u32>,
    /// `[I_band]` splat of each sorted intersection.
    sorted_ids: DeviceBuffer<u32>,
    /// `[I_band]` unsorted position of each sorted intersection.
    sorted_values: DeviceBuffer<u32>,
}

/// What binning reads for every band of one render (see [`GpuRenderer::bin_band`]).
struct Binning<'a> {
    /// `[N]` camera depths, the sort key's low 32 bits.
    depths: &'a DeviceBuffer<f32>,
    /// `[N, 4]` tile rects `(x0, y0, x1, y1)`, half-open, in tiles.
    tile_rects: &'a DeviceBuffer<u32>,
    n: usize,
    cam: &'a GpuCamera,
    /// Key bits above the depth that can be non-zero: `⌈log2 T⌉`.
    tile_bits: u32,
    /// `[T, 2]` per-tile ranges of the sorted lists, written band by band.
    tile_ranges: &'a DeviceBuffer<u32>,
}

/// `kiln_project_forward`'s per-splat outputs that rasterisation and the backward pass read (kept
/// in [`GpuSaved`]).
struct ScreenSplats {
    /// `[N, 2]` pixels.
    xys: DeviceBuffer<f32>,
    /// `[N, 3]` inverse 2D covariance `(a, b, c)`.
    conics: DeviceBuffer<f32>,
    /// `[N]` pixels, 0 where culled.
    radii: DeviceBuffer<f32>,
    /// `[N]` opacities after the sigmoid (and compensation).
    opacities: DeviceBuffer<f32>,
    /// `[N, 3]` SH colours for this view.
    colors: DeviceBuffer<f32>,
}

/// `kiln_project_forward`'s per-splat outputs that only binning reads (freed after it).
struct TileFootprints {
    /// `[N]` camera depths.
    depths: DeviceBuffer<f32>,
    /// `[N, 4]` tile rects.
    tile_rects: DeviceBuffer<u32>,
    /// `[N]` tiles each splat touches.
    tile_counts: DeviceBuffer<u32>,
}

/// `kiln_rasterize_forward`'s outputs.
struct DeviceRaster {
    /// `[H, W, 3]` linear RGB.
    image: DeviceBuffer<f32>,
    /// `[H, W]` final transmittance.
    final_t: DeviceBuffer<f32>,
    /// `[H, W]` contributor counts.
    n_contrib: DeviceBuffer<u32>,
}

/// Per-splat screen-space gradient sums of the backward pass. (Fields drop in declaration order:
/// `abs` is freed before `grads`, as when they were two locals.)
struct ScreenGrads {
    /// `[N, 2]` AbsGS absolute mean2d sums, only with `absgrad`.
    abs: Option<DeviceBuffer<f32>>,
    /// `[N, 9]` ∂L/∂(mean2d, conic, colour, opacity).
    grads: DeviceBuffer<f32>,
}

/// The forward pass's check of the SH degree against device splats: the degree must be valid for
/// `camera` ([`check_render_inputs`] on no splats) and need at most the K the device splats hold.
fn check_device_sh_degree(
    splats: &DeviceSplats,
    sh_degree: u32,
    camera: &Camera,
) -> Result<(), Error> {
    let none = SplatsRef {
        means: &[],
        log_scales: &[],
        rotations: &[],
        logit_opacities: &[],
        sh_coeffs: &[],
        sh_degree,
    };
    let needed = check_render_inputs(&none, camera)?;
    if needed > splats.k {
        return Err(Error::Invalid {
            field: "sh_degree",
            reason: format!(
                "degree {sh_degree} needs {needed} SH coefficients per channel but the \
                 device splats hold K = {}",
                splats.k
            ),
        });
    }
    Ok(())
}

/// Bytes one intersection occupies in the largest per-intersection buffer (the backward pass's
/// `[I, 9]` f32 gradients); bands are sized so that buffer stays under the allocation cap.
const LARGEST_BYTES_PER_INTERSECTION: usize = ISECT_GRAD * 4;

/// Splits tile rows `0..tiles_y` into consecutive bands whose intersection counts are each at most
/// `limit`, given `[N, 4]` tile rects `(x0, y0, x1, y1)` (half-open, in tiles). Greedy from the top:
/// the fewest bands for a row-ordered split.
///
/// # Errors
/// The offending row and its count when a single tile row holds more than `limit` intersections
/// (no split by rows can help; the caller names the cap to raise).
// row y indexes the difference array and names the band boundary.
#[allow(clippy::needless_range_loop)]
fn plan_bands(tile_rects: &[u32], tiles_y: u32, limit: u64) -> Result<Vec<(u32, u32)>, (u32, u64)> {
    let rows = tiles_y as usize;
    let mut delta = vec![0i64; rows + 1];
    for r in tile_rects.chunks_exact(4) {
        let (y0, y1) = (r[1] as usize, (r[3] as usize).min(rows));
        if y1 > y0 {
            let cols = i64::from(r[2].saturating_sub(r[0]));
            delta[y0] += cols;
            delta[y1] -= cols;
        }
    }
    let mut bands = Vec::new();
    let (mut start, mut in_band, mut per_row) = (0u32, 0u64, 0i64);
    for y in 0..rows {
        per_row += delta[y];
        let here = per_row.max(0) as u64;
        if here > limit {
            return Err((y as u32, here));
        }
        if in_band + here > limit {
            bands.push((start, y as u32));
            start = y as u32;
            in_band = 0;
        }
        in_band += here;
    }
    bands.push((start, tiles_y));
    Ok(bands)
}

impl GpuSaved {
    /// N, the splat count of the render.
    pub fn splat_count(&self) -> usize {
        self.n
    }

    /// I, the tile–splat intersections rasterised.
    pub fn intersection_count(&self) -> usize {
        self.intersections
    }

    /// `[N]` screen radii in pixels (0 where culled), on the device.
    pub fn radii(&self) -> &DeviceBuffer<f32> {
        &self.radii
    }

    /// The opacity rule the forward pass used (from `RenderOptions::antialiased`).
    pub fn rasterize_mode(&self) -> RasterizeMode {
        self.mode
    }
}

/// Splat parameters on the device (shape letters N splats, K SH coefficients per channel; same
/// layouts and units as [`SplatsRef`]). The handles are shared: a training state and the forward
/// passes it runs point at the same buffers.
#[derive(Debug, Clone)]
pub struct DeviceSplats {
    /// `[N, 3]` world positions, metres.
    pub means: Arc<DeviceBuffer<f32>>,
    /// `[N, 3]` ln σ, metres.
    pub log_scales: Arc<DeviceBuffer<f32>>,
    /// `[N, 4]` quaternions wxyz.
    pub rotations: Arc<DeviceBuffer<f32>>,
    /// `[N]` opacity logits.
    pub logit_opacities: Arc<DeviceBuffer<f32>>,
    /// `[N, K, 3]` SH coefficients.
    pub sh_coeffs: Arc<DeviceBuffer<f32>>,
    /// N.
    pub n: usize,
    /// K, 1, 4, 9 or 16.
    pub k: usize,
}

impl DeviceSplats {
    /// Checks `splats` (as [`crate::render_forward`] does, with `camera`) and uploads them.
    ///
    /// # Errors
    /// [`Error::Shape`] / [`Error::Invalid`] for bad inputs; [`Error::Device`] for device failures.
    pub fn upload(
        ctx: &Arc<GpuContext>,
        splats: &SplatsRef<'_>,
        camera: &Camera,
    ) -> Result<Self, Error> {
        let k = check_render_inputs(splats, camera)?;
        let up = |data: &[f32], what: &str| DeviceBuffer::from_slice(ctx, data, what).map(Arc::new);
        Ok(Self {
            means: up(splats.means, "means [N, 3]")?,
            log_scales: up(splats.log_scales, "log_scales [N, 3]")?,
            rotations: up(splats.rotations, "rotations [N, 4]")?,
            logit_opacities: up(splats.logit_opacities, "logit_opacities [N]")?,
            sh_coeffs: up(splats.sh_coeffs, "sh_coeffs [N, K, 3]")?,
            n: splats.logit_opacities.len(),
            k,
        })
    }

    /// The five buffers in the trainer's group order: means, log_scales, rotations,
    /// logit_opacities, sh_coeffs.
    pub fn groups(&self) -> [&Arc<DeviceBuffer<f32>>; 5] {
        [
            &self.means,
            &self.log_scales,
            &self.rotations,
            &self.logit_opacities,
            &self.sh_coeffs,
        ]
    }
}

/// Device-side results of [`GpuRenderer::forward_device`].
#[derive(Debug)]
pub struct DeviceForward {
    /// `[H, W, 3]` linear RGB.
    pub image: DeviceBuffer<f32>,
    /// State for the backward pass (also holds `[N]` radii and `[H, W]` final transmittance).
    pub saved: GpuSaved,
    /// Stage times (forward fields; the rasterisation time excludes any download).
    pub timings: KernelTimings,
}

/// Device-side results of [`GpuRenderer::backward_device`], in the trainer's group order.
#[derive(Debug)]
pub struct DeviceGrads {
    /// ∂L/∂ means `[N, 3]`, log_scales `[N, 3]`, rotations `[N, 4]`, logit_opacities `[N]`,
    /// sh_coeffs `[N, K, 3]`.
    pub groups: [DeviceBuffer<f32>; 5],
    /// `[N]` ‖∂L/∂means2d‖ in NDC units (densification statistic); the AbsGS norm when the
    /// backward pass ran with `absgrad` ([`RenderOptions::absgrad`]).
    pub means2d_grad_norm: DeviceBuffer<f32>,
    /// Stage times (backward fields).
    pub timings: KernelTimings,
}

/// Per-pixel loss weights `[H, W]` on the device, with their sum (computed once on the host, in
/// f64 chunks as the CPU twin sums them).
#[derive(Debug)]
pub struct LossWeights {
    /// `[H, W]` weights in [0, 1].
    pub buffer: DeviceBuffer<f32>,
    /// Σ weights.
    pub sum: f64,
}

impl LossWeights {
    /// Upload `weights` (`[H, W]`).
    ///
    /// # Errors
    /// [`Error::Device`] for device failures.
    pub fn upload(ctx: &Arc<GpuContext>, weights: &[f32]) -> Result<Self, Error> {
        Ok(Self {
            buffer: DeviceBuffer::from_slice(ctx, weights, "loss weights [H, W]")?,
            sum: crate::cpu::loss::weight_sum(weights),
        })
    }
}

/// Device-side results of [`GpuRenderer::loss_device`].
#[derive(Debug)]
pub struct DeviceLoss {
    /// `(1 − λ)·L1 + λ·(1 − SSIM)`.
    pub loss: f64,
    /// Mean absolute error.
    pub l1: f64,
    /// Mean SSIM.
    pub ssim: f64,
    /// ∂loss/∂image `[H, W, 3]`.
    pub grad_image: DeviceBuffer<f32>,
}

/// Host-side results of [`GpuRenderer::forward`].
#[derive(Debug)]
pub struct GpuForward {
    /// `[H, W, 3]`.
    pub image: Vec<f32>,
    /// `[H, W]`.
    pub alpha: Vec<f32>,
    /// `[N]` pixels, 0 where culled.
    pub radii: Vec<f32>,
    /// Device state for the backward pass.
    pub saved: GpuSaved,
    /// Stage times (forward fields).
    pub timings: KernelTimings,
}

/// The rasterizer on one GPU context (CUDA or the emulator).
#[derive(Debug)]
pub struct GpuRenderer {
    ctx: Arc<GpuContext>,
}

fn blocks(items: usize, per_block: usize) -> u32 {
    items.div_ceil(per_block) as u32
}

impl GpuRenderer {
    /// A renderer on `ctx`.
    pub fn new(ctx: Arc<GpuContext>) -> Self {
        Self { ctx }
    }

    /// The context (device name, memory cap and peak).
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    fn launch(
        &self,
        name: &str,
        grid: [u32; 3],
        block: [u32; 3],
        mut args: Args,
    ) -> Result<(), Error> {
        if grid.contains(&0) {
            return Ok(());
        }
        let mut ptrs = args.pointers();
        // SAFETY: every call site passes arguments in the kernel's C signature order, with
        // buffers sized for the launch (see each kernel's header comment).
        unsafe { self.ctx.backend().launch(name, grid, block, &mut ptrs) }
    }

    /// Exclusive scan of `input` into `out` (same length); returns the u64 total.
    fn scan(&self, input: &DeviceBuffer<u32>, out: &DeviceBuffer<u32>) -> Result<u64, Error> {
        let total = DeviceBuffer::<u64>::zeros(&self.ctx, 1, "scan total")?;
        if !input.is_empty() {
            let n = input.len() as u32;
            let chunks = input.len().div_ceil(SCAN_CHUNK);
            let sums = DeviceBuffer::<u64>::uninit(&self.ctx, chunks, "scan chunk sums")?;
            let grid = [chunks as u32, 1, 1];
            let block = [SCAN_THREADS, 1, 1];
            let args = Args::new().buf(input).u32(n).buf(&sums);
            self.launch("kiln_scan_chunk_sums", grid, block, args)?;
            let args = Args::new().buf(&sums).u32(chunks as u32).buf(&total);
            self.launch("kiln_scan_chunk_offsets", [1, 1, 1], block, args)?;
            let args = Args::new().buf(input).u32(n).buf(&sums).buf(out);
            self.launch("kiln_scan_apply", grid, block, args)?;
        }
        Ok(total.to_vec()?[0])
    }

    /// Stable radix sort of `count` (key, value) pairs over key bits `[0, end_bit)`; returns the
    /// sorted buffers (possibly the inputs themselves).
    fn sort(
        &self,
        keys: DeviceBuffer<u64>,
        values: DeviceBuffer<u32>,
        end_bit: u32,
    ) -> Result<(DeviceBuffer<u64>, DeviceBuffer<u32>), Error> {
        let count = keys.len();
        if count == 0 {
            return Ok((keys, values));
        }
        let nblocks = count.div_ceil(SORT_CHUNK).max(1);
        let mut keys_in = keys;
        let mut values_in = values;
        let mut keys_out = DeviceBuffer::<u64>::uninit(&self.ctx, count, "sort keys (ping-pong)")?;
        let mut values_out =
            DeviceBuffer::<u32>::uninit(&self.ctx, count, "sort values (ping-pong)")?;
        let hist = DeviceBuffer::<u32>::uninit(&self.ctx, 256 * nblocks, "radix histogram")?;
        let slots = DeviceBuffer::<u32>::uninit(&self.ctx, 256 * nblocks, "radix slots")?;
        let mut shift = 0;
        while shift < end_bit {
            let args = Args::new()
                .buf(&keys_in)
                .u32(count as u32)
                .u32(shift)
                .u32(nblocks as u32)
                .buf(&hist);
            self.launch(
                "kiln_radix_histogram",
                [nblocks as u32, 1, 1],
                [256, 1, 1],
                args,
            )?;
            self.scan(&hist, &slots)?;
            let args = Args::new()
                .buf(&keys_in)
                .buf(&values_in)
                .u32(count as u32)
                .u32(shift)
                .u32(nblocks as u32)
                .buf(&slots)
                .buf(&keys_out)
                .buf(&values_out);
            self.launch(
                "kiln_radix_scatter",
                [nblocks as u32, 1, 1],
                [256, 1, 1],
                args,
            )?;
            std::mem::swap(&mut keys_in, &mut keys_out);
            std::mem::swap(&mut values_in, &mut values_out);
            shift += 8;
        }
        Ok((keys_in, values_in))
    }

    /// Bins, sorts and ranges one band's intersections: `counts`/`offsets` `[N]` are the band's
    /// (the whole render's when there is one band), `isects` their total; writes the band's tiles'
    /// entries of `b.tile_ranges [T, 2]`.
    fn bin_band(
        &self,
        b: &Binning<'_>,
        rows: (u32, u32),
        counts: DeviceBuffer<u32>,
        offsets: DeviceBuffer<u32>,
        isects: usize,
    ) -> Result<Band, Error> {
        let Binning {
            depths,
            tile_rects,
            n,
            cam,
            tile_bits,
            tile_ranges,
        } = *b;
        let ctx = &self.ctx;
        let keys = DeviceBuffer::<u64>::uninit(ctx, isects, "intersection keys [I]")?;
        let values = DeviceBuffer::<u32>::uninit(ctx, isects, "intersection values [I]")?;
        let isect_splat = DeviceBuffer::<u32>::uninit(ctx, isects, "intersection splats [I]")?;
        let args = Args::new()
            .buf(depths)
            .buf(tile_rects)
            .buf(&counts)
            .buf(&offsets)
            .u32(n as u32)
            .u32(cam.tiles_x)
            .u32(rows.0)
            .u32(rows.1)
            .buf(&keys)
            .buf(&values)
            .buf(&isect_splat);
        self.launch("kiln_bin_emit", [blocks(n, 256), 1, 1], [BLOCK, 1, 1], args)?;
        let (sorted_keys, sorted_values) = self.sort(keys, values, 32 + tile_bits)?;
        let sorted_ids = DeviceBuffer::<u32>::uninit(ctx, isects, "sorted splat ids [I]")?;
        let args = Args::new()
            .buf(&sorted_values)
            .buf(&isect_splat)
            .u32(isects as u32)
            .buf(&sorted_ids);
        self.launch(
            "kiln_gather_ids",
            [blocks(isects, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        drop(isect_splat);
        let args = Args::new()
            .buf(&sorted_keys)
            .u32(isects as u32)
            .buf(tile_ranges);
        self.launch(
            "kiln_tile_ranges",
            [blocks(isects, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        Ok(Band {
            rows,
            intersections: isects,
            counts,
            offsets,
            sorted_ids,
            sorted_values,
        })
    }

    /// Forward pass; same contract and errors as [`crate::render_forward`].
    ///
    /// # Errors
    /// As [`crate::render_forward`], plus [`Error::Device`] for device failures or a buffer above
    /// the allocation cap.
    pub fn forward(
        &self,
        splats: &SplatsRef<'_>,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<GpuForward, Error> {
        let clock = std::time::Instant::now();
        let device = DeviceSplats::upload(&self.ctx, splats, camera)?;
        let upload_ms = ms_since(clock);
        let f = self.forward_device(&device, splats.sh_degree, camera, options)?;
        let clock = std::time::Instant::now();
        let image = f.image.to_vec()?;
        let alpha = f
            .saved
            .final_t
            .to_vec()?
            .into_iter()
            .map(|t| 1.0 - t)
            .collect();
        let radii = f.saved.radii.to_vec()?;
        let mut timings = f.timings;
        timings.project_ms += upload_ms;
        timings.rasterize_forward_ms += ms_since(clock);
        Ok(GpuForward {
            image,
            alpha,
            radii,
            saved: f.saved,
            timings,
        })
    }

    /// Forward pass on parameters already on the device; the image stays there.
    ///
    /// - `sh_degree`: active degree, ≤ the degree `splats.k` holds.
    ///
    /// Steps, each timed up to a device synchronisation: [`Self::project_forward`] (project_ms),
    /// [`Self::bin_and_sort`] (sort_ms), [`Self::rasterize_forward`] (rasterize_forward_ms).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad camera or SH degree; [`Error::Device`] for device failures or a
    /// buffer above the allocation cap.
    pub fn forward_device(
        &self,
        splats: &DeviceSplats,
        sh_degree: u32,
        camera: &Camera,
        options: &RenderOptions,
    ) -> Result<DeviceForward, Error> {
        check_device_sh_degree(splats, sh_degree, camera)?;
        let (n, k) = (splats.n, splats.k);
        let cam = GpuCamera::new(camera);
        let mode = RasterizeMode::from_antialiased(options.antialiased);
        let mut timings = KernelTimings::default();
        let ((screen, footprints), project_ms) =
            self.timed(|| self.project_forward(splats, sh_degree, mode, &cam))?;
        timings.project_ms = project_ms;
        let ((bands, tile_ranges), sort_ms) = self.timed(|| {
            let TileFootprints {
                depths,
                tile_rects,
                tile_counts,
            } = footprints;
            let sorted = self.bin_and_sort(&depths, &tile_rects, tile_counts, n, &cam)?;
            drop((depths, tile_rects));
            Ok(sorted)
        })?;
        timings.sort_ms = sort_ms;
        let (raster, rasterize_forward_ms) = self.timed(|| {
            self.rasterize_forward(&screen, &bands, &tile_ranges, &cam, options.background)
        })?;
        timings.rasterize_forward_ms = rasterize_forward_ms;
        let ScreenSplats {
            xys,
            conics,
            radii,
            opacities,
            colors,
        } = screen;
        Ok(DeviceForward {
            image: raster.image,
            saved: GpuSaved {
                n,
                k,
                sh_degree,
                camera: *camera,
                background: options.background,
                mode,
                intersections: bands.iter().map(|b| b.intersections).sum(),
                bands,
                splats: splats.clone(),
                conics,
                xys,
                radii,
                opacities,
                colors,
                tile_ranges,
                final_t: raster.final_t,
                n_contrib: raster.n_contrib,
            },
            timings,
        })
    }

    /// Runs `step`, waits for the device, and returns its result with the milliseconds both took.
    fn timed<R>(&self, step: impl FnOnce() -> Result<R, Error>) -> Result<(R, f64), Error> {
        let clock = std::time::Instant::now();
        let out = step()?;
        self.ctx.backend().synchronize()?;
        Ok((out, ms_since(clock)))
    }

    /// `kiln_project_forward`: every splat's screen-space footprint, colour and tile rectangle.
    fn project_forward(
        &self,
        splats: &DeviceSplats,
        sh_degree: u32,
        mode: RasterizeMode,
        cam: &GpuCamera,
    ) -> Result<(ScreenSplats, TileFootprints), Error> {
        let (n, k) = (splats.n, splats.k);
        let ctx = &self.ctx;
        let xys = DeviceBuffer::<f32>::uninit(ctx, 2 * n, "means2d [N, 2]")?;
        let conics = DeviceBuffer::<f32>::uninit(ctx, 3 * n, "conics [N, 3]")?;
        let depths = DeviceBuffer::<f32>::uninit(ctx, n, "depths [N]")?;
        let radii = DeviceBuffer::<f32>::uninit(ctx, n, "radii [N]")?;
        let opacities = DeviceBuffer::<f32>::uninit(ctx, n, "opacities [N]")?;
        let colors = DeviceBuffer::<f32>::uninit(ctx, 3 * n, "colors [N, 3]")?;
        let tile_rects = DeviceBuffer::<u32>::uninit(ctx, 4 * n, "tile rects [N, 4]")?;
        let tile_counts = DeviceBuffer::<u32>::uninit(ctx, n, "tile counts [N]")?;
        let args = Args::new()
            .buf(&splats.means)
            .buf(&splats.log_scales)
            .buf(&splats.rotations)
            .buf(&splats.logit_opacities)
            .buf(&splats.sh_coeffs)
            .u32(n as u32)
            .u32(k as u32)
            .u32(sh_degree)
            .u32(mode.kernel_flag())
            .value(*cam)
            .buf(&xys)
            .buf(&conics)
            .buf(&depths)
            .buf(&radii)
            .buf(&opacities)
            .buf(&colors)
            .buf(&tile_rects)
            .buf(&tile_counts);
        self.launch(
            "kiln_project_forward",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        let screen = ScreenSplats {
            xys,
            conics,
            radii,
            opacities,
            colors,
        };
        let footprints = TileFootprints {
            depths,
            tile_rects,
            tile_counts,
        };
        Ok((screen, footprints))
    }

    /// Scans the tile counts, splits the render into bands of tile rows where one intersection
    /// list would not fit the allocation cap ([`Self::plan_rows`]), and bins, sorts and ranges each
    /// band ([`Self::bin_band`]); returns the bands and the `[T, 2]` tile ranges.
    fn bin_and_sort(
        &self,
        depths: &DeviceBuffer<f32>,
        tile_rects: &DeviceBuffer<u32>,
        tile_counts: DeviceBuffer<u32>,
        n: usize,
        cam: &GpuCamera,
    ) -> Result<(Vec<Band>, DeviceBuffer<u32>), Error> {
        let ctx = &self.ctx;
        let n_tiles = (cam.tiles_x * cam.tiles_y) as usize;
        let offsets = DeviceBuffer::<u32>::uninit(ctx, n, "intersection offsets [N]")?;
        let total = self.scan(&tile_counts, &offsets)?;
        let rows = self.plan_rows(tile_rects, total, cam)?;
        let tile_bits = u32::BITS - (n_tiles.max(1) as u32 - 1).leading_zeros();
        let tile_ranges = DeviceBuffer::<u32>::zeros(ctx, 2 * n_tiles, "tile ranges [T, 2]")?;
        let binning = Binning {
            depths,
            tile_rects,
            n,
            cam,
            tile_bits,
            tile_ranges: &tile_ranges,
        };
        let mut whole = Some((tile_counts, offsets));
        let mut bands = Vec::with_capacity(rows.len());
        for &(lo, hi) in &rows {
            let (counts, offsets, isects) = match whole.take() {
                Some((c, o)) if rows.len() == 1 => (c, o, total as usize),
                _ => self.band_counts(tile_rects, n, (lo, hi))?,
            };
            bands.push(self.bin_band(&binning, (lo, hi), counts, offsets, isects)?);
        }
        Ok((bands, tile_ranges))
    }

    /// The bands of tile rows `(first, end)` to bin one after another: one band covering every
    /// row when `total` intersections fit the allocation cap's `[I, 9]` gradient buffer, else
    /// [`plan_bands`]' greedy split.
    fn plan_rows(
        &self,
        tile_rects: &DeviceBuffer<u32>,
        total: u64,
        cam: &GpuCamera,
    ) -> Result<Vec<(u32, u32)>, Error> {
        let ctx = &self.ctx;
        let limit =
            (ctx.alloc_cap() / LARGEST_BYTES_PER_INTERSECTION).min(u32::MAX as usize) as u64;
        let rows = if total <= limit {
            vec![(0, cam.tiles_y)]
        } else {
            plan_bands(&tile_rects.to_vec()?, cam.tiles_y, limit).map_err(|(row, count)| {
                ctx.device_error(format!(
                    "tile row {row} alone has {count} splat intersections, more than the {limit} \
                     that fit one {} MiB buffer of per-intersection gradients; raise \
                     KILN_GPU_ALLOC_CAP (bytes, now {}), or render fewer or smaller splats",
                    ctx.alloc_cap() >> 20,
                    ctx.alloc_cap()
                ))
            })?
        };
        if rows.len() > 1 {
            tracing::debug!(
                total,
                bands = rows.len(),
                limit,
                "rasterizer: render split into bands of tile rows"
            );
        }
        Ok(rows)
    }

    /// `kiln_band_counts` and its scan for the band of tile rows `[lo, hi)`: the band's `[N]` tile
    /// counts, their `[N]` exclusive scan and its total.
    fn band_counts(
        &self,
        tile_rects: &DeviceBuffer<u32>,
        n: usize,
        (lo, hi): (u32, u32),
    ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>, usize), Error> {
        let ctx = &self.ctx;
        let c = DeviceBuffer::<u32>::uninit(ctx, n, "band tile counts [N]")?;
        let args = Args::new()
            .buf(tile_rects)
            .u32(n as u32)
            .u32(lo)
            .u32(hi)
            .buf(&c);
        self.launch(
            "kiln_band_counts",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        let o = DeviceBuffer::<u32>::uninit(ctx, n, "band intersection offsets [N]")?;
        let t = self.scan(&c, &o)?;
        Ok((c, o, t as usize))
    }

    /// `kiln_rasterize_forward`, band after band: the `[H, W, 3]` image over `background`, the
    /// `[H, W]` final transmittance and contributor counts.
    fn rasterize_forward(
        &self,
        screen: &ScreenSplats,
        bands: &[Band],
        tile_ranges: &DeviceBuffer<u32>,
        cam: &GpuCamera,
        background: [f32; 3],
    ) -> Result<DeviceRaster, Error> {
        let ctx = &self.ctx;
        let (w, h) = (cam.width as usize, cam.height as usize);
        let image = DeviceBuffer::<f32>::uninit(ctx, w * h * 3, "image [H, W, 3]")?;
        let final_t = DeviceBuffer::<f32>::uninit(ctx, w * h, "final transmittance [H, W]")?;
        let n_contrib = DeviceBuffer::<u32>::uninit(ctx, w * h, "contributors [H, W]")?;
        let [bg_r, bg_g, bg_b] = background;
        for band in bands {
            let args = Args::new()
                .buf(&screen.xys)
                .buf(&screen.conics)
                .buf(&screen.opacities)
                .buf(&screen.colors)
                .buf(&band.sorted_ids)
                .buf(tile_ranges)
                .u32(cam.width)
                .u32(cam.height)
                .u32(cam.tiles_x)
                .u32(band.rows.0)
                .f32(bg_r)
                .f32(bg_g)
                .f32(bg_b)
                .buf(&image)
                .buf(&final_t)
                .buf(&n_contrib);
            let ts = TILE_SIZE;
            self.launch(
                "kiln_rasterize_forward",
                [cam.tiles_x, band.rows.1 - band.rows.0, 1],
                [ts, ts, 1],
                args,
            )?;
        }
        Ok(DeviceRaster {
            image,
            final_t,
            n_contrib,
        })
    }

    /// Backward pass; same contract as [`crate::render_backward`]. The splat parameters and the
    /// opacity rule (`RenderOptions::antialiased`) are the ones saved by the forward pass; `splats`
    /// is checked against them (shapes). `absgrad` is [`RenderOptions::absgrad`].
    ///
    /// # Errors
    /// [`Error::Shape`] when `grad_image` or `splats` do not match the forward render;
    /// [`Error::Device`] for device failures.
    pub fn backward(
        &self,
        splats: &SplatsRef<'_>,
        camera: &Camera,
        saved: &GpuSaved,
        grad_image: &[f32],
        absgrad: bool,
    ) -> Result<SplatGradients, Error> {
        let k = check_render_inputs(splats, camera)?;
        let n = splats.logit_opacities.len();
        let shape = crate::cpu::RenderShape {
            n: saved.n,
            sh_k: saved.k,
            size: (saved.camera.width, saved.camera.height),
        };
        crate::cpu::check_backward_shapes(n, k, camera, shape, grad_image.len())?;
        let clock = std::time::Instant::now();
        let grad = DeviceBuffer::from_slice(&self.ctx, grad_image, "grad_image [H, W, 3]")?;
        let upload_ms = ms_since(clock);
        let g = self.backward_device(saved, &grad, absgrad)?;
        let clock = std::time::Instant::now();
        let [g_means, g_scales, g_rots, g_logits, g_sh] = &g.groups;
        let mut grads = SplatGradients {
            means: g_means.to_vec()?,
            log_scales: g_scales.to_vec()?,
            rotations: g_rots.to_vec()?,
            logit_opacities: g_logits.to_vec()?,
            sh_coeffs: g_sh.to_vec()?,
            means2d_grad_norm: g.means2d_grad_norm.to_vec()?,
            timings: g.timings,
        };
        grads.timings.rasterize_backward_ms += upload_ms;
        grads.timings.project_backward_ms += ms_since(clock);
        Ok(grads)
    }

    /// Backward pass of a forward pass of this renderer with ∂L/∂image `[H, W, 3]` on the device;
    /// the gradients stay there. `absgrad` selects the densification statistic
    /// ([`RenderOptions::absgrad`]).
    ///
    /// Steps, each timed up to a device synchronisation: [`Self::rasterize_backward`]
    /// (rasterize_backward_ms), [`Self::project_backward`] (project_backward_ms).
    ///
    /// # Errors
    /// [`Error::Shape`] when `grad_image` is not `[H, W, 3]` of the forward render;
    /// [`Error::Device`] for device failures.
    pub fn backward_device(
        &self,
        saved: &GpuSaved,
        grad: &DeviceBuffer<f32>,
        absgrad: bool,
    ) -> Result<DeviceGrads, Error> {
        let camera = &saved.camera;
        let pixels = camera.width as usize * camera.height as usize;
        if grad.len() != 3 * pixels {
            return Err(Error::Shape {
                what: "grad_image [H, W, 3]",
                expected: 3 * pixels,
                found: grad.len(),
            });
        }
        let cam = GpuCamera::new(camera);
        let mut timings = KernelTimings::default();
        let (screen, rasterize_backward_ms) =
            self.timed(|| self.rasterize_backward(saved, grad, absgrad, &cam))?;
        timings.rasterize_backward_ms = rasterize_backward_ms;
        let ((groups, means2d_grad_norm), project_backward_ms) =
            self.timed(|| self.project_backward(saved, &cam, &screen))?;
        timings.project_backward_ms = project_backward_ms;
        Ok(DeviceGrads {
            groups,
            means2d_grad_norm,
            timings,
        })
    }

    /// `kiln_rasterize_backward` and the per-splat sums, band after band
    /// ([`Self::rasterize_backward_band`]): the `[N, 9]` screen-space gradients and, with
    /// `absgrad`, the `[N, 2]` absolute mean2d sums.
    fn rasterize_backward(
        &self,
        saved: &GpuSaved,
        grad: &DeviceBuffer<f32>,
        absgrad: bool,
        cam: &GpuCamera,
    ) -> Result<ScreenGrads, Error> {
        let ctx = &self.ctx;
        let n = saved.n;
        let grads = DeviceBuffer::<f32>::zeros(ctx, n * ISECT_GRAD, "screen gradients [N, 9]")?;
        let abs = if absgrad {
            Some(DeviceBuffer::<f32>::zeros(
                ctx,
                n * 2,
                "absolute mean2d sums [N, 2]",
            )?)
        } else {
            None
        };
        let screen = ScreenGrads { grads, abs };
        for band in saved.bands.iter().filter(|b| b.intersections > 0) {
            self.rasterize_backward_band(saved, band, grad, cam, &screen)?;
        }
        Ok(screen)
    }

    /// One band of [`Self::rasterize_backward`]: `kiln_rasterize_backward` into the band's
    /// `[I_band, 9]` (and, with `screen.abs`, `[I_band, 2]`) per-intersection buffers, then
    /// `kiln_sum_isect_grads` (and `kiln_sum_isect_abs`) adds them to `screen` per splat.
    fn rasterize_backward_band(
        &self,
        saved: &GpuSaved,
        band: &Band,
        grad: &DeviceBuffer<f32>,
        cam: &GpuCamera,
        screen: &ScreenGrads,
    ) -> Result<(), Error> {
        let ctx = &self.ctx;
        let isect_grads = DeviceBuffer::<f32>::zeros(
            ctx,
            band.intersections * ISECT_GRAD,
            "per-intersection gradients [I, 9]",
        )?;
        let isect_abs = if screen.abs.is_some() {
            Some(DeviceBuffer::<f32>::zeros(
                ctx,
                band.intersections * 2,
                "per-intersection absolute mean2d sums [I, 2]",
            )?)
        } else {
            None
        };
        let [bg_r, bg_g, bg_b] = saved.background;
        let args = Args::new()
            .buf(&saved.xys)
            .buf(&saved.conics)
            .buf(&saved.opacities)
            .buf(&saved.colors)
            .buf(&band.sorted_ids)
            .buf(&band.sorted_values)
            .buf(&saved.tile_ranges)
            .buf(&saved.final_t)
            .buf(&saved.n_contrib)
            .buf(grad)
            .u32(cam.width)
            .u32(cam.height)
            .u32(cam.tiles_x)
            .u32(band.rows.0)
            .f32(bg_r)
            .f32(bg_g)
            .f32(bg_b)
            .buf(&isect_grads);
        let args = match &isect_abs {
            Some(b) => args.buf(b),
            None => args.null(),
        };
        self.launch(
            "kiln_rasterize_backward",
            [cam.tiles_x, band.rows.1 - band.rows.0, 1],
            [TILE_SIZE, TILE_SIZE, 1],
            args,
        )?;
        self.sum_isect(
            "kiln_sum_isect_grads",
            band,
            saved.n,
            &isect_grads,
            &screen.grads,
        )?;
        if let (Some(isect_abs), Some(screen_abs)) = (&isect_abs, &screen.abs) {
            self.sum_isect("kiln_sum_isect_abs", band, saved.n, isect_abs, screen_abs)?;
        }
        Ok(())
    }

    /// `kernel` (`kiln_sum_isect_grads` or `kiln_sum_isect_abs`): adds a band's per-intersection
    /// values `isect` to the per-splat sums `out`, in list order.
    fn sum_isect(
        &self,
        kernel: &str,
        band: &Band,
        n: usize,
        isect: &DeviceBuffer<f32>,
        out: &DeviceBuffer<f32>,
    ) -> Result<(), Error> {
        let args = Args::new()
            .buf(&band.counts)
            .buf(&band.offsets)
            .u32(n as u32)
            .buf(isect)
            .buf(out);
        self.launch(kernel, [blocks(n, 256), 1, 1], [BLOCK, 1, 1], args)
    }

    /// `kiln_project_backward`: the chain rule from the screen-space gradients to the parameter
    /// gradients, in the trainer's group order, and the `[N]` ‖∂L/∂means2d‖ statistic (AbsGS when
    /// `screen.abs` is there).
    fn project_backward(
        &self,
        saved: &GpuSaved,
        cam: &GpuCamera,
        screen: &ScreenGrads,
    ) -> Result<([DeviceBuffer<f32>; 5], DeviceBuffer<f32>), Error> {
        let ctx = &self.ctx;
        let (n, k) = (saved.n, saved.k);
        let g_means = DeviceBuffer::<f32>::uninit(ctx, 3 * n, "grad means [N, 3]")?;
        let g_scales = DeviceBuffer::<f32>::uninit(ctx, 3 * n, "grad log_scales [N, 3]")?;
        let g_rots = DeviceBuffer::<f32>::uninit(ctx, 4 * n, "grad rotations [N, 4]")?;
        let g_logits = DeviceBuffer::<f32>::uninit(ctx, n, "grad logit_opacities [N]")?;
        let g_sh = DeviceBuffer::<f32>::uninit(ctx, 3 * k * n, "grad sh_coeffs [N, K, 3]")?;
        let g_norm = DeviceBuffer::<f32>::uninit(ctx, n, "means2d grad norm [N]")?;
        let args = Args::new()
            .buf(&saved.splats.means)
            .buf(&saved.splats.log_scales)
            .buf(&saved.splats.rotations)
            .buf(&saved.splats.logit_opacities)
            .buf(&saved.splats.sh_coeffs)
            .u32(n as u32)
            .u32(k as u32)
            .u32(saved.sh_degree)
            .u32(saved.mode.kernel_flag())
            .value(*cam)
            .buf(&saved.conics)
            .buf(&saved.radii)
            .buf(&saved.opacities)
            .buf(&screen.grads);
        let args = match &screen.abs {
            Some(b) => args.buf(b),
            None => args.null(),
        };
        let args = args
            .buf(&g_means)
            .buf(&g_scales)
            .buf(&g_rots)
            .buf(&g_logits)
            .buf(&g_sh)
            .buf(&g_norm);
        self.launch(
            "kiln_project_backward",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        Ok(([g_means, g_scales, g_rots, g_logits, g_sh], g_norm))
    }
}

impl GpuRenderer {
    /// Sum of a device array (per-block sums on the device, the block sums added in order in
    /// `f64` on the host).
    fn sum(&self, values: &DeviceBuffer<f32>) -> Result<f64, Error> {
        let n = values.len();
        let nb = n.div_ceil(256).max(1);
        let sums = DeviceBuffer::<f32>::zeros(&self.ctx, nb, "block sums")?;
        let args = Args::new().buf(values).u32(n as u32).buf(&sums);
        self.launch(
            "kiln_block_sums",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        Ok(sums.to_vec()?.iter().map(|&v| f64::from(v)).sum())
    }

    /// Both passes of the separable SSIM blur over a `[maps, H, W, 3]` stack.
    fn blur(
        &self,
        input: &DeviceBuffer<f32>,
        maps: usize,
        height: usize,
        width: usize,
        window: &DeviceBuffer<f32>,
    ) -> Result<DeviceBuffer<f32>, Error> {
        let len = input.len();
        let tmp = DeviceBuffer::<f32>::uninit(&self.ctx, len, "SSIM blur (rows)")?;
        let out = DeviceBuffer::<f32>::uninit(&self.ctx, len, "SSIM blur (columns)")?;
        for (src, dst, vertical) in [(input, &tmp, 0u32), (&tmp, &out, 1u32)] {
            let args = Args::new()
                .buf(src)
                .u32(maps as u32)
                .u32(height as u32)
                .u32(width as u32)
                .u32(vertical)
                .buf(window)
                .buf(dst);
            self.launch(
                "kiln_blur_pass",
                [blocks(len, 256), 1, 1],
                [BLOCK, 1, 1],
                args,
            )?;
        }
        Ok(out)
    }

    /// `(1 − λ)·L1 + λ·(1 − SSIM)` of `image` against `target` (`[H, W, 3]`) and its gradient,
    /// with optional per-pixel weights `[H, W]`; same contract as
    /// [`crate::cpu::loss::photometric_loss_weighted`].
    ///
    /// # Errors
    /// [`Error::Device`] for device failures.
    pub fn photometric_loss(
        &self,
        image: &[f32],
        target: &[f32],
        weights: Option<&[f32]>,
        height: usize,
        width: usize,
        lambda: f32,
    ) -> Result<crate::cpu::loss::LossOutput, Error> {
        let x = DeviceBuffer::from_slice(&self.ctx, image, "loss image [H, W, 3]")?;
        let y = DeviceBuffer::from_slice(&self.ctx, target, "loss target [H, W, 3]")?;
        let w = match weights {
            Some(w) => Some(LossWeights::upload(&self.ctx, w)?),
            None => None,
        };
        let out = self.loss_device(&x, &y, w.as_ref(), height, width, lambda)?;
        Ok(crate::cpu::loss::LossOutput {
            loss: out.loss,
            l1: out.l1,
            ssim: out.ssim,
            grad_image: out.grad_image.to_vec()?,
        })
    }

    /// [`GpuRenderer::photometric_loss`] on images already on the device; the gradient stays
    /// there.
    ///
    /// # Errors
    /// [`Error::Shape`] when a buffer is not `height × width × 3`; [`Error::Device`] for device
    /// failures.
    pub fn loss_device(
        &self,
        x: &DeviceBuffer<f32>,
        y: &DeviceBuffer<f32>,
        weights: Option<&LossWeights>,
        height: usize,
        width: usize,
        lambda: f32,
    ) -> Result<DeviceLoss, Error> {
        crate::cpu::loss::check_loss_shapes(height, width, x.len(), y.len())?;
        let ctx = &self.ctx;
        let n = height * width * 3;
        if let Some(w) = weights
            && w.buffer.len() != height * width
        {
            return Err(Error::Shape {
                what: "loss weights [H, W]",
                expected: height * width,
                found: w.buffer.len(),
            });
        }
        // The CPU twin's count and its reciprocal, rounded the same way.
        let (count, inv_count) = match weights {
            None => (n as f64, 1.0 / n as f32),
            Some(w) => (3.0 * w.sum, (1.0 / (3.0 * w.sum)) as f32),
        };
        if count <= 0.0 {
            return Ok(DeviceLoss {
                loss: 0.0,
                l1: 0.0,
                ssim: 1.0,
                grad_image: DeviceBuffer::from_slice(
                    ctx,
                    &vec![0.0f32; n],
                    "loss gradient [H, W, 3]",
                )?,
            });
        }
        let window =
            DeviceBuffer::from_slice(ctx, &crate::cpu::loss::ssim_window(), "SSIM window")?;
        let stats = DeviceBuffer::<f32>::uninit(ctx, 5 * n, "SSIM statistics [5, H, W, 3]")?;
        let args = Args::new().buf(x).buf(y).u32(n as u32).buf(&stats);
        self.launch(
            "kiln_ssim_products",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        let moments = self.blur(&stats, 5, height, width, &window)?;
        drop(stats);
        let ssim_map = DeviceBuffer::<f32>::uninit(ctx, n, "SSIM map [H, W, 3]")?;
        let partials = DeviceBuffer::<f32>::uninit(ctx, 3 * n, "SSIM partials [3, H, W, 3]")?;
        let args = Args::new().buf(&moments).u32(n as u32);
        let args = match weights {
            Some(w) => args.buf(&w.buffer),
            None => args.null(),
        };
        let args = args.buf(&ssim_map).buf(&partials);
        self.launch(
            "kiln_ssim_terms",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        drop(moments);
        let blurred = self.blur(&partials, 3, height, width, &window)?;
        drop(partials);
        let grad = DeviceBuffer::<f32>::uninit(ctx, n, "loss gradient [H, W, 3]")?;
        let abs_diff = DeviceBuffer::<f32>::uninit(ctx, n, "|image − target| [H, W, 3]")?;
        let args = Args::new().buf(x).buf(y).buf(&blurred).u32(n as u32);
        let args = match weights {
            Some(w) => args.buf(&w.buffer),
            None => args.null(),
        };
        let args = args.f32(inv_count).f32(lambda).buf(&grad).buf(&abs_diff);
        self.launch(
            "kiln_loss_grad",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )?;
        let l1 = self.sum(&abs_diff)? / count;
        let ssim = self.sum(&ssim_map)? / count;
        Ok(DeviceLoss {
            loss: f64::from(1.0 - lambda) * l1 + f64::from(lambda) * (1.0 - ssim),
            l1,
            ssim,
            grad_image: grad,
        })
    }

    /// One fused Adam step on the device over host slices (uploaded, stepped by `kiln_adam_step`,
    /// downloaded in place); same contract as [`crate::cpu::adam::adam_step`].
    ///
    /// # Errors
    /// As [`crate::cpu::adam::adam_step`], plus [`Error::Device`] for device failures.
    pub fn adam_step(
        &self,
        param: &mut [f32],
        grad: &[f32],
        m: &mut [f32],
        v: &mut [f32],
        scale: Option<crate::cpu::adam::LrScale<'_>>,
        hyper: &crate::cpu::adam::AdamStep,
    ) -> Result<(), Error> {
        crate::cpu::adam::check_adam_inputs(
            param.len(),
            grad.len(),
            m.len(),
            v.len(),
            scale.map(|s| (s.values.len(), s.stride)),
        )?;
        let n = param.len();
        if n == 0 {
            return Ok(());
        }
        let ctx = &self.ctx;
        let p_dev = DeviceBuffer::from_slice(ctx, param, "adam parameters [n]")?;
        let g_dev = DeviceBuffer::from_slice(ctx, grad, "adam gradient [n]")?;
        let m_dev = DeviceBuffer::from_slice(ctx, m, "adam first moment [n]")?;
        let v_dev = DeviceBuffer::from_slice(ctx, v, "adam second moment [n]")?;
        let scale_dev = match scale {
            Some(s) => Some((
                DeviceBuffer::from_slice(ctx, s.values, "adam lr scale [K]")?,
                s.stride,
            )),
            None => None,
        };
        let scale_ref = scale_dev.as_ref().map(|(b, stride)| (b, *stride));
        self.adam_device(&p_dev, &g_dev, &m_dev, &v_dev, scale_ref, hyper)?;
        p_dev.copy_to(param)?;
        m_dev.copy_to(m)?;
        v_dev.copy_to(v)
    }

    /// One fused Adam step in place on device buffers (`param`, `grad`, `m`, `v` all `[n]`);
    /// `scale` is an optional `(factors [K], stride)` per-column multiplier (see
    /// [`crate::cpu::adam::LrScale`]). Same math as [`crate::cpu::adam::adam_step`].
    ///
    /// # Errors
    /// [`Error::Shape`] when the buffers differ in length; [`Error::Invalid`] for an empty scale
    /// or zero stride; [`Error::Device`] for device failures.
    pub fn adam_device(
        &self,
        param: &DeviceBuffer<f32>,
        grad: &DeviceBuffer<f32>,
        m: &DeviceBuffer<f32>,
        v: &DeviceBuffer<f32>,
        scale: Option<(&DeviceBuffer<f32>, usize)>,
        hyper: &crate::cpu::adam::AdamStep,
    ) -> Result<(), Error> {
        let n = param.len();
        crate::cpu::adam::check_adam_inputs(
            n,
            grad.len(),
            m.len(),
            v.len(),
            scale.map(|(b, stride)| (b.len(), stride)),
        )?;
        if n == 0 {
            return Ok(());
        }
        let (stride, period) = scale.map_or((1, 1), |(b, s)| (s as u32, b.len() as u32));
        let args = Args::new().buf(param).buf(grad).buf(m).buf(v).u32(n as u32);
        let args = match scale {
            Some((b, _)) => args.buf(b),
            None => args.null(),
        };
        let args = args
            .u32(stride)
            .u32(period)
            .f32(hyper.step)
            .f32(hyper.beta1)
            .f32(hyper.one_minus_beta1)
            .f32(hyper.beta2)
            .f32(hyper.one_minus_beta2)
            .f32(hyper.sqrt_bc2)
            .f32(hyper.epsilon);
        let (reg_kind, reg_weight) = hyper.regulariser.kind_and_weight();
        let args = args.u32(reg_kind).f32(reg_weight);
        self.launch(
            "kiln_adam_step",
            [blocks(n, 256), 1, 1],
            [BLOCK, 1, 1],
            args,
        )
    }

    /// Whether every element of `values` is finite: one device sum (non-finite iff some element
    /// is, or on overflow, which only costs the caller a needless host check).
    ///
    /// # Errors
    /// [`Error::Device`] for device failures.
    pub fn all_finite(&self, values: &DeviceBuffer<f32>) -> Result<bool, Error> {
        Ok(values.is_empty() || self.sum(values)?.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::{GpuRenderer, SCAN_CHUNK, plan_bands};
    use crate::cuda::gpu::{DeviceBuffer, GpuContext};
    use std::sync::Arc;

    /// The scan kernels on the emulator against a running sum, at sizes around the chunk edges
    /// and past one block's worth of chunks (the offsets kernel's second round).
    #[test]
    fn multi_block_scan_matches_a_running_sum() {
        let emu = match crate::cuda::emulator::Emulator::open() {
            Ok(emu) => emu,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("CI=true but the CUDA emulator is unavailable: {e}")
            }
            Err(e) => return eprintln!("skipped: CUDA emulator unavailable ({e})"),
        };
        let ctx = Arc::new(GpuContext::new(Box::new(emu), "emulator".into(), 1 << 30));
        let r = GpuRenderer::new(Arc::clone(&ctx));
        for n in [
            1,
            17,
            SCAN_CHUNK,
            SCAN_CHUNK + 1,
            3 * SCAN_CHUNK + 123,
            257 * SCAN_CHUNK + 5,
        ] {
            // Values up to 2^26, so the total passes 2^32 at the largest size (the u32 outputs
            // wrap, the u64 total does not).
            let values: Vec<u32> = (0..n as u64)
                .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % (1 << 26)) as u32)
                .collect();
            let input = DeviceBuffer::from_slice(&ctx, &values, "scan input").unwrap();
            let out = DeviceBuffer::<u32>::uninit(&ctx, n, "scan output").unwrap();
            let total = r.scan(&input, &out).unwrap();
            let got = out.to_vec().unwrap();
            let mut run = 0u64;
            for (i, &v) in values.iter().enumerate() {
                assert_eq!(got[i], run as u32, "n = {n}, index {i}");
                run += u64::from(v);
            }
            assert_eq!(total, run, "n = {n}");
        }
    }

    #[test]
    fn bands_are_greedy_row_runs_under_the_limit() {
        // Splat A covers rows 0..4 × 2 columns (2 per row), B rows 1..3 × 3 columns (3 per row):
        // per-row counts 2, 5, 5, 2.
        let rects = [0, 0, 2, 4, 1, 1, 4, 3];
        assert_eq!(plan_bands(&rects, 4, 14), Ok(vec![(0, 4)]));
        assert_eq!(plan_bands(&rects, 4, 7), Ok(vec![(0, 2), (2, 4)]));
        assert_eq!(
            plan_bands(&rects, 4, 5),
            Ok(vec![(0, 1), (1, 2), (2, 3), (3, 4)])
        );
        // Row 1 alone holds 5.
        assert_eq!(plan_bands(&rects, 4, 4), Err((1, 5)));
        // Culled splats (empty rects) count for nothing.
        assert_eq!(plan_bands(&[0, 0, 0, 0], 2, 1), Ok(vec![(0, 2)]));
    }
}
