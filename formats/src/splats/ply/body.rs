//! PLY bodies of fixed-size binary little-endian rows, moved between the file and the
//! [`GaussianSplats`] columns a chunk of rows at a time on every core.
//!
//! Why a module of its own: this is the part of `ply` that decides throughput (issue 21: a
//! 1 M-splat SH-3 file is 248 MB, and reading or writing it must keep up with the disk). Each
//! chunk (about [`CHUNK_BYTES`]) is one positioned read or write (`pread`/`pwrite`) on the
//! shared file handle, so chunks need no ordering between threads, and memory holds the
//! columns plus one chunk buffer per thread, never the whole file. Reading gathers each splat
//! field from its row position through a table built once from the header ([`RowGather`]), so
//! any property order works and unknown properties are skipped without a per-value branch.
//! Two measures against the costs of a virtual machine's memory and disk: the columns a file
//! is read into are offered 2 MiB pages ([`zeroed_column`]), and a large body is flushed to the
//! disk while it is still being written ([`write_rows`]).

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rayon::prelude::*;

use super::{ColumnMap, check_values_finite, corrupt};
use crate::Result;
use crate::splats::GaussianSplats;

/// Bytes of rows per chunk: large enough that the per-call cost of a read or write (a few µs)
/// is noise beside copying the chunk (~0.1 ms), small enough that a chunk stays in a core's L2
/// cache between filling and checking it, and that the buffers add little to peak memory
/// (1–2 MiB per thread beside 236 MB of columns at 1 M SH-3 splats).
pub(super) const CHUNK_BYTES: usize = 1 << 20;

/// Rayon jobs per thread: chunks are handed out in runs of about `chunks / (threads × 4)` so
/// that each job allocates its chunk buffer once, while a core slowed by other work still
/// leaves runs for the others to take.
const JOBS_PER_THREAD: usize = 4;

/// Where each splat field sits in a row of `stride` f32 values (column indices from the header).
pub(super) struct RowGather {
    stride: usize,
    xyz: [usize; 3],
    scale: [usize; 3],
    rot: [usize; 4],
    opacity: usize,
    /// Mip-Splatting's `filter_3D` column, baked in as rows are copied.
    filter_3d: Option<usize>,
    /// `[K, 3]` coefficient-major: the column of `sh_coeffs[n, k, c]` is `sh[k·3 + c]`
    /// (`f_dc_c` for k = 0, `f_rest_{c·(K−1) + k − 1}` above: INRIA's channel-major rest).
    sh: Vec<usize>,
    sh_degree: u32,
}

impl RowGather {
    /// The gather table of `cols` for rows of `stride` floats.
    pub(super) fn new(cols: &ColumnMap, stride: usize) -> Self {
        let k = ((cols.sh_degree + 1) * (cols.sh_degree + 1)) as usize;
        let mut sh = Vec::with_capacity(k * 3);
        sh.extend(cols.dc);
        for kk in 1..k {
            for c in 0..3 {
                sh.push(cols.rest[c * (k - 1) + (kk - 1)]);
            }
        }
        Self {
            stride,
            xyz: cols.xyz,
            scale: cols.scale,
            rot: cols.rot,
            opacity: cols.opacity,
            filter_3d: cols.filter_3d,
            sh,
            sh_degree: cols.sh_degree,
        }
    }

    /// Copy the fields of `rows` (`[R, stride]` f32, native byte order) into `out` (R splats).
    /// Returns the first row (of these R) whose `filter_3D` is invalid, with its value.
    fn scatter(&self, rows: &[f32], out: &mut ColumnChunk<'_>) -> Option<(usize, f32)> {
        let k3 = self.sh.len();
        let fields = out
            .means
            .chunks_exact_mut(3)
            .zip(out.log_scales.chunks_exact_mut(3))
            .zip(out.rotations.chunks_exact_mut(4))
            .zip(out.logit_opacities.iter_mut())
            .zip(out.sh_coeffs.chunks_exact_mut(k3));
        let mut bad_filter = None;
        for (r, (row, ((((mean, scale), rot), opacity), sh))) in
            rows.chunks_exact(self.stride).zip(fields).enumerate()
        {
            for (dst, &col) in mean.iter_mut().zip(&self.xyz) {
                *dst = row[col];
            }
            for (dst, &col) in scale.iter_mut().zip(&self.scale) {
                *dst = row[col];
            }
            for (dst, &col) in rot.iter_mut().zip(&self.rot) {
                *dst = row[col];
            }
            *opacity = row[self.opacity];
            if let Some(col) = self.filter_3d
                && !crate::splats::mip_filter::bake(scale, opacity, row[col])
            {
                bad_filter.get_or_insert((r, row[col]));
            }
            for (dst, &col) in sh.iter_mut().zip(&self.sh) {
                *dst = row[col];
            }
        }
        bad_filter
    }
}

/// The columns of splats `first_row..first_row + R` (disjoint borrows of one
/// [`GaussianSplats`]), filled by one job.
struct ColumnChunk<'a> {
    first_row: usize,
    means: &'a mut [f32],
    log_scales: &'a mut [f32],
    rotations: &'a mut [f32],
    logit_opacities: &'a mut [f32],
    sh_coeffs: &'a mut [f32],
}

impl ColumnChunk<'_> {
    /// Whether every value is finite ([`all_finite`]); a chunk with a bad value is rare and
    /// then re-checked in order for the message.
    fn all_finite(&self) -> bool {
        [
            &*self.means,
            &*self.log_scales,
            &*self.rotations,
            &*self.logit_opacities,
            &*self.sh_coeffs,
        ]
        .iter()
        .all(|values| all_finite(values))
    }
}

/// Split the columns of `s` (sized for N splats) into chunks of `rows` splats.
fn column_chunks(s: &mut GaussianSplats, rows: usize) -> Vec<ColumnChunk<'_>> {
    let k3 = s.sh_coeffs_per_channel() * 3;
    let GaussianSplats {
        means,
        log_scales,
        rotations,
        logit_opacities,
        sh_coeffs,
        ..
    } = s;
    means
        .chunks_mut(3 * rows)
        .zip(log_scales.chunks_mut(3 * rows))
        .zip(rotations.chunks_mut(4 * rows))
        .zip(logit_opacities.chunks_mut(rows))
        .zip(sh_coeffs.chunks_mut(k3 * rows))
        .enumerate()
        .map(
            |(i, ((((means, log_scales), rotations), logit_opacities), sh_coeffs))| ColumnChunk {
                first_row: i * rows,
                means,
                log_scales,
                rotations,
                logit_opacities,
                sh_coeffs,
            },
        )
        .collect()
}

/// A column of `len` zeros, its memory offered to the kernel for 2 MiB pages.
///
/// Why: a large zeroed allocation is fresh memory that is faulted in on first write; with
/// 4 KiB pages that is one fault per page plus a TLB miss per page on every later pass, both
/// expensive under a hypervisor's nested paging (half of a 1 M-splat read on the 2-core
/// development VM). The first touch happens in the parallel jobs, after the advice.
fn zeroed_column(len: usize) -> Vec<f32> {
    let column = vec![0f32; len];
    advise_huge_pages(&column);
    column
}

/// Mark the whole 2 MiB-aligned pages inside `values` as eligible for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`; needed where THP is in `madvise` mode). Best effort: an error
/// (THP disabled, an old kernel) leaves ordinary pages and changes nothing else.
#[cfg(target_os = "linux")]
fn advise_huge_pages(values: &[f32]) {
    const HUGE_PAGE: usize = 2 << 20;
    let start = values.as_ptr() as usize;
    let end = start + std::mem::size_of_val(values);
    let (lo, hi) = (
        start.next_multiple_of(HUGE_PAGE),
        end / HUGE_PAGE * HUGE_PAGE,
    );
    if hi > lo {
        // SAFETY: [lo, hi) lies inside the live allocation of `values` and is page-aligned;
        // MADV_HUGEPAGE only changes which page size backs the range, never its contents or
        // whether it is mapped, so no Rust reference is affected.
        let _ = unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
}

/// No transparent huge pages to ask for off Linux.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_values: &[f32]) {}

/// Minimum run of chunks per rayon job for `chunks` chunks (see [`JOBS_PER_THREAD`]).
fn min_run(chunks: usize) -> usize {
    chunks
        .div_ceil(JOBS_PER_THREAD * rayon::current_num_threads())
        .max(1)
}

/// Read the `n` rows of `stride` little-endian f32 that start at byte `body_offset` of `file`
/// into splats (every column, means absolute), checking every splat value is finite.
///
/// The caller has checked that the body holds exactly `n` rows.
///
/// # Errors
/// [`crate::Error::Corrupt`] naming `path` and the first vertex of the chunk when a read fails;
/// [`crate::Error::Invalid`] as `check_values_finite` for a NaN/±Inf value (first bad field in that
/// function's order, then the lowest vertex).
pub(super) fn read_float_rows(
    path: &Path,
    file: &File,
    body_offset: u64,
    n: usize,
    gather: &RowGather,
) -> Result<GaussianSplats> {
    let k3 = gather.sh.len();
    let mut splats = GaussianSplats {
        means: zeroed_column(n * 3),
        log_scales: zeroed_column(n * 3),
        rotations: zeroed_column(n * 4),
        logit_opacities: zeroed_column(n),
        sh_coeffs: zeroed_column(n * k3),
        sh_degree: gather.sh_degree,
    };
    let row_bytes = gather.stride * 4;
    let rows_per_chunk = (CHUNK_BYTES / row_bytes).max(1);
    let chunks = column_chunks(&mut splats, rows_per_chunk);
    let run = min_run(chunks.len());
    // Per chunk: whether every value is finite, and its first invalid `filter_3D` (absolute row).
    let (all_finite, bad_filter) = chunks
        .into_par_iter()
        .with_min_len(run)
        .map_init(
            Vec::<f32>::new,
            |buf, mut chunk| -> Result<(bool, Option<(usize, f32)>)> {
                let rows = chunk.logit_opacities.len();
                buf.resize(rows * gather.stride, 0.0);
                let offset = body_offset + (chunk.first_row * row_bytes) as u64;
                read_exact_at(file, bytemuck::cast_slice_mut(&mut buf[..]), offset).map_err(
                    |e| {
                        corrupt(
                            path,
                            format!("vertex {}", chunk.first_row),
                            format!("cannot read the body: {e}"),
                        )
                    },
                )?;
                if cfg!(target_endian = "big") {
                    for v in buf.iter_mut() {
                        *v = f32::from_bits(u32::from_le(v.to_bits()));
                    }
                }
                let bad = gather.scatter(buf, &mut chunk);
                let bad = bad.map(|(r, v)| (chunk.first_row + r, v));
                Ok((chunk.all_finite(), bad))
            },
        )
        .try_reduce(
            || (true, None),
            // The lowest bad row wins, whatever order the chunks finish in.
            |a, b| {
                Ok((
                    a.0 && b.0,
                    [a.1, b.1].into_iter().flatten().min_by_key(|x| x.0),
                ))
            },
        )?;
    if let Some((row, value)) = bad_filter {
        return Err(crate::splats::mip_filter::invalid(path, row, value));
    }
    if !all_finite {
        // Walk the columns in order for the same message as every other reader path.
        check_values_finite(path, &splats)?;
    }
    Ok(splats)
}

/// Write the rows of `splats` in the INRIA column order (`stride` properties, see
/// `super::inria_property_names`) at byte `body_offset` of `file`, one chunk per positioned
/// write: all `float` when `origin` is `None`, else `double x y z` = origin + mean (f64) and
/// the other properties `float`. Bytes land at their final offsets in any order, so the file
/// is complete only when this returns `Ok`. Each chunk's values are checked finite just before
/// it is encoded (while they are in cache), so a bad value stops the write part-way: callers
/// write to a temporary file that is then discarded.
///
/// For bodies of [`SYNC_BEHIND_MIN_BYTES`] or more, a helper thread flushes written chunks to
/// the disk (`fdatasync`) while later ones are encoded, so the caller's final `fsync` waits for
/// the last few megabytes instead of the whole file.
///
/// # Errors
/// The first write or flush error; an error for which [`is_non_finite`] is true when a value of
/// `splats` is NaN or ±Inf (then [`GaussianSplats::check_finite`] names it).
pub(super) fn write_rows(
    file: &File,
    body_offset: u64,
    splats: &GaussianSplats,
    stride: usize,
    origin: Option<[f64; 3]>,
) -> io::Result<()> {
    let n = splats.len();
    // A `double x y z` row is three f32 slots (12 bytes) longer.
    let row_bytes = 4 * (stride + if origin.is_some() { 3 } else { 0 });
    let rows_per_chunk = (CHUNK_BYTES / row_bytes).max(1);
    let starts: Vec<usize> = (0..n).step_by(rows_per_chunk).collect();
    let run = min_run(starts.len());
    let written = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let syncer = (n * row_bytes >= SYNC_BEHIND_MIN_BYTES)
            .then(|| scope.spawn(|| sync_behind(file, &written, &done)));
        let result = starts.into_par_iter().with_min_len(run).try_for_each_init(
            RowScratch::default,
            |scratch, start| {
                let count = rows_per_chunk.min(n - start);
                if !chunk_is_finite(splats, start, count) {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, NonFinite));
                }
                let bytes = scratch.encode(splats, start, count, stride, origin);
                write_all_at(file, bytes, body_offset + (start * row_bytes) as u64)?;
                written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(())
            },
        );
        done.store(true, Ordering::Release);
        let synced = syncer.map_or(Ok(()), |h| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        result.and(synced)
    })
}

/// Bodies smaller than this are written without a flushing helper (64 MiB: below it the
/// final `fsync` is short anyway, and a thread is not worth starting).
pub(super) const SYNC_BEHIND_MIN_BYTES: usize = 64 << 20;

/// Written bytes the helper lets accumulate before it flushes them (16 MiB: each flush also
/// commits the file's metadata, so flushing every chunk would cost more than it overlaps).
const SYNC_STEP_BYTES: u64 = 16 << 20;

/// The helper of [`write_rows`]: `fdatasync` whenever [`SYNC_STEP_BYTES`] more have been
/// written, until the writers are `done`. An error is returned, not dropped, since Linux
/// reports a failed writeback to one `fsync` only.
fn sync_behind(file: &File, written: &AtomicU64, done: &AtomicBool) -> io::Result<()> {
    let mut synced = 0;
    while !done.load(Ordering::Acquire) {
        let now = written.load(Ordering::Relaxed);
        if now - synced >= SYNC_STEP_BYTES {
            file.sync_data()?;
            synced = now;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Ok(())
}

/// The marker inside the `io::Error` [`write_rows`] stops with on a NaN/±Inf value.
#[derive(Debug)]
struct NonFinite;

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a splat value is NaN or infinite")
    }
}

impl std::error::Error for NonFinite {}

/// Whether `e` is [`write_rows`] stopping on a NaN/±Inf value.
pub(super) fn is_non_finite(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NonFinite>())
}

/// Whether every value of splats `start..start + count` is finite ([`all_finite`]).
fn chunk_is_finite(splats: &GaussianSplats, start: usize, count: usize) -> bool {
    let k3 = splats.sh_coeffs_per_channel() * 3;
    let end = start + count;
    [
        &splats.means[start * 3..end * 3],
        &splats.log_scales[start * 3..end * 3],
        &splats.rotations[start * 4..end * 4],
        &splats.logit_opacities[start..end],
        &splats.sh_coeffs[start * k3..end * k3],
    ]
    .iter()
    .all(|values| all_finite(values))
}

/// Whether no value is NaN or ±Inf: an f32 is non-finite exactly when its bits without the
/// sign are at least those of +Inf (exponent all ones), so one unsigned max over the slice
/// decides, which compiles to SIMD max instructions (a short-circuiting `is_finite` loop does
/// not vectorise and cost more than building the rows).
fn all_finite(values: &[f32]) -> bool {
    const ABS_BITS: u32 = 0x7FFF_FFFF;
    let largest = values
        .iter()
        .fold(0u32, |m, v| m.max(v.to_bits() & ABS_BITS));
    largest < f32::INFINITY.to_bits()
}

/// One job's row buffers, reused across its chunks.
#[derive(Default)]
struct RowScratch {
    rows: Vec<f32>,
    bytes: Vec<u8>,
}

impl RowScratch {
    /// The file bytes of splats `start..start + count` (see [`write_rows`]).
    fn encode(
        &mut self,
        splats: &GaussianSplats,
        start: usize,
        count: usize,
        stride: usize,
        origin: Option<[f64; 3]>,
    ) -> &[u8] {
        self.rows.resize(count * stride, 0.0);
        fill_rows(splats, start, stride, &mut self.rows);
        let Some(o) = origin else {
            return bytemuck::cast_slice(&self.rows);
        };
        // x y z as f64 (origin + mean), then the row's other floats (already little-endian).
        self.bytes.clear();
        let means = &splats.means[start * 3..(start + count) * 3];
        for (row, mean) in self.rows.chunks_exact(stride).zip(means.chunks_exact(3)) {
            for a in 0..3 {
                let x = o[a] + f64::from(mean[a]);
                self.bytes.extend_from_slice(&x.to_le_bytes());
            }
            self.bytes
                .extend_from_slice(bytemuck::cast_slice(&row[3..]));
        }
        &self.bytes
    }
}

/// Fill `rows` (`[rows.len() / stride, stride]`, INRIA column order, little-endian) with the
/// splats from index `start` on: `x y z`, normals 0, `f_dc_0..2`, `f_rest_*` channel-major,
/// `opacity`, `scale_0..2`, `rot_0..3`.
pub(super) fn fill_rows(splats: &GaussianSplats, start: usize, stride: usize, rows: &mut [f32]) {
    let k = splats.sh_coeffs_per_channel();
    let count = rows.len() / stride;
    let end = start + count;
    let fields = splats.means[start * 3..end * 3]
        .chunks_exact(3)
        .zip(splats.sh_coeffs[start * k * 3..end * k * 3].chunks_exact(k * 3))
        .zip(&splats.logit_opacities[start..end])
        .zip(splats.log_scales[start * 3..end * 3].chunks_exact(3))
        .zip(splats.rotations[start * 4..end * 4].chunks_exact(4));
    let tail = 9 + 3 * (k - 1);
    for (row, ((((mean, sh), &opacity), scale), rot)) in rows.chunks_exact_mut(stride).zip(fields) {
        row[0..3].copy_from_slice(mean);
        row[3..6].fill(0.0); // normals
        row[6..9].copy_from_slice(&sh[0..3]);
        let rest = &mut row[9..tail];
        for c in 0..3 {
            for kk in 1..k {
                rest[c * (k - 1) + (kk - 1)] = sh[kk * 3 + c];
            }
        }
        row[tail] = opacity;
        row[tail + 1..tail + 4].copy_from_slice(scale);
        row[tail + 4..tail + 8].copy_from_slice(rot);
    }
    if cfg!(target_endian = "big") {
        for v in rows.iter_mut() {
            *v = f32::from_bits(v.to_bits().to_le());
        }
    }
}

/// `pread` of exactly `buf.len()` bytes at `offset`, leaving the file cursor alone.
#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Positioned read of exactly `buf.len()` bytes at `offset` (moves the cursor on Windows,
/// which the callers do not use).
#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(got) => {
                buf = &mut buf[got..];
                offset += got as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `pwrite` of all of `buf` at `offset`, leaving the file cursor alone.
#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// Positioned write of all of `buf` at `offset` (moves the cursor on Windows, which the
/// callers do not use).
#[cfg(windows)]
fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_write(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(put) => {
                buf = &buf[put..];
                offset += put as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_finite_rejects_every_nan_and_infinity_and_accepts_extremes() {
        let finite = [
            0.0,
            -0.0,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
        ];
        assert!(all_finite(&finite));
        assert!(all_finite(&[]));
        let bad = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7F80_0001), // signalling NaN, smallest payload
            f32::from_bits(0xFFFF_FFFF),
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for b in bad {
            let mut values = finite.to_vec();
            values.insert(3, b);
            assert!(!all_finite(&values), "{b:?} ({:#x})", b.to_bits());
        }
    }
}
