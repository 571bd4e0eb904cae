//! Splats whose positions need more than f32: an f64 origin carried beside [`GaussianSplats`],
//! whose f32 `means` are relative to it, from the reader to the last writer.
//!
//! Why: a projected or survey frame (a UTM easting of 500 km, a northing of 4 000 km) leaves f32
//! a step of 3–25 cm between neighbouring values, so casting such coordinates to f32 on read
//! merges splats 1 cm apart and shifts the scene by centimetres. Kiln therefore keeps positions
//! as `origin_m + means` (origin f64, means f32 and small) until they are re-centred per tile or
//! written to a format that holds f64 (PLY `double x/y/z`, a glTF node `translation`, a 3D Tiles
//! `transform`). Formats that store absolute f32 or 24-bit fixed-point positions (SPZ, `.splat`,
//! PlayCanvas compressed PLY) are refused by the writer when they would move a splat by more
//! than [`POSITION_TOLERANCE_M`] ([`crate::Error::PositionRange`]).
//!
//! Every input that f32 holds to [`RECENTRE_ABOVE_M`] keeps origin 0, so its splats, and
//! everything written from them, are unchanged.
//!
//! Every splat reader returns a [`PlacedSplats`] and every writer takes a [`PlacedRef`] (a
//! `&PlacedSplats`, or a `&GaussianSplats` whose means are absolute), so one function per format
//! handles both; the writers of absolute-position formats check the move their cast causes here
//! (`PlacedRef::absolute_f32_for`).

use std::borrow::Cow;
use std::path::Path;

use super::GaussianSplats;
use super::transform::rotate_splats;
use crate::{Error, Result};

/// Largest move (metres) that casting an input coordinate to f32 may cause before a reader
/// re-centres that axis on an f64 origin. 1 µm is far below the smallest trained splats
/// (~0.1 mm) and above f32's rounding of any coordinate within ±16 m (half a step there is
/// 2^−20 m ≈ 0.95 µm), so ordinary scenes stored as `double` keep origin 0; a 3 km or 500 km
/// coordinate (steps of 0.24 mm and 31 mm) is re-centred.
pub const RECENTRE_ABOVE_M: f64 = 1e-6;

/// Largest move (metres) a writer may cause when it stores positions as absolute f32 or fixed
/// point; beyond it the write is refused. 1 mm: below the size of any splat that matters and
/// the accuracy of survey data, and 1/10 of the 1 cm spacing that a cast to f32 at 500 km
/// destroys (f32 keeps it up to |x| < 32 768 m, SPZ at 12 fractional bits within ±2048 m).
pub const POSITION_TOLERANCE_M: f64 = 1e-3;

/// N splats placed at an f64 origin: splat i sits at `origin_m + splats.means[i]` (computed in
/// f64).
///
/// - `origin_m`: `[3]` metres, f64, in the same frame and axes as the means (the file's frame
///   as read; rotated with them by [`Self::rotate`]). `[0, 0, 0]` for every input that f32 holds
///   to [`RECENTRE_ABOVE_M`].
/// - `splats`: as documented on [`GaussianSplats`], with `means` `[N, 3]` f32 metres relative to
///   `origin_m`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlacedSplats {
    pub origin_m: [f64; 3],
    pub splats: GaussianSplats,
}

impl PlacedSplats {
    /// Splats whose means are absolute already (origin 0).
    #[must_use]
    pub fn at_zero(splats: GaussianSplats) -> Self {
        Self {
            origin_m: [0.0; 3],
            splats,
        }
    }

    /// Place `splats` (whose `means` are ignored and replaced) at the absolute positions
    /// `xyz_m` (`[N, 3]` f64 metres): when f32 holds every value to [`RECENTRE_ABOVE_M`] the
    /// origin is 0 and the means are exactly `xyz as f32`; otherwise the origin is the centre of
    /// the bounding box rounded to whole metres ([`origin_for`]) and the means are
    /// `(x − origin) as f32` (subtracted in f64).
    ///
    /// # Panics
    /// When `xyz_m.len()` is not 3 × `splats.len()` (callers build both from the same rows).
    #[must_use]
    pub fn from_absolute(xyz_m: &[f64], mut splats: GaussianSplats) -> Self {
        assert_eq!(xyz_m.len(), 3 * splats.len(), "xyz_m must be [N, 3]");
        let origin_m = origin_for(xyz_m);
        splats.means = xyz_m
            .iter()
            .enumerate()
            .map(|(j, &x)| (x - origin_m[j % 3]) as f32)
            .collect();
        Self { origin_m, splats }
    }

    /// True when the origin is `[0, 0, 0]` (the means are absolute).
    #[must_use]
    pub fn is_at_zero(&self) -> bool {
        self.origin_m == [0.0; 3]
    }

    /// Absolute position of splat `i`, metres (f64).
    ///
    /// # Panics
    /// When `i` ≥ N.
    #[must_use]
    pub fn absolute_mean(&self, i: usize) -> [f64; 3] {
        std::array::from_fn(|a| self.origin_m[a] + f64::from(self.splats.means[3 * i + a]))
    }

    /// The largest absolute |coordinate| (metres) and where it is: `(value, splat, axis)`;
    /// `(0, 0, 0)` for N = 0.
    #[must_use]
    pub fn largest_coordinate(&self) -> (f64, usize, usize) {
        largest_coordinate(&self.splats, self.origin_m)
    }

    /// The splats with absolute f32 means (`(origin + mean) as f32`, summed in f64) and the
    /// largest move that cast caused (metres). Origin 0 returns the splats as they are (no copy)
    /// with move 0, so a reader's splats come back bit for bit. Lossy beyond f32's range (31 mm
    /// steps at 500 km): what a caller that works in absolute f32 gets, as the readers' f32
    /// casts gave before origins existed (the same value, or the neighbouring f32 where `x` lies
    /// within the sub-µm rounding of the origin split of a rounding midpoint).
    #[must_use]
    pub fn into_absolute_f32(self) -> (GaussianSplats, f64) {
        if self.is_at_zero() {
            return (self.splats, 0.0);
        }
        absolute_f32(&self.splats, self.origin_m)
    }

    /// Rotate the scene by the proper rotation `r` (row-major, p′ = r·p) as
    /// [`rotate_splats`] does, and the origin with it (in f64), so absolute positions become
    /// r·(origin + mean).
    ///
    /// # Errors
    /// As [`rotate_splats`].
    pub fn rotate(&mut self, r: [[f64; 3]; 3]) -> Result<()> {
        rotate_splats(&mut self.splats, r)?;
        let o = self.origin_m;
        self.origin_m = std::array::from_fn(|i| (0..3).map(|k| r[i][k] * o[k]).sum());
        Ok(())
    }
}

/// Borrowed splats at an f64 origin: what every splat writer takes, so that a
/// `&PlacedSplats` and a `&GaussianSplats` (absolute means, origin 0) go through the same
/// function without a copy (`From` converts both).
///
/// - `origin_m`: `[3]` metres, f64, as [`PlacedSplats::origin_m`].
/// - `splats`: means `[N, 3]` f32 metres relative to `origin_m`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedRef<'a> {
    pub origin_m: [f64; 3],
    pub splats: &'a GaussianSplats,
}

impl<'a> From<&'a PlacedSplats> for PlacedRef<'a> {
    fn from(placed: &'a PlacedSplats) -> Self {
        Self {
            origin_m: placed.origin_m,
            splats: &placed.splats,
        }
    }
}

impl<'a> From<&'a GaussianSplats> for PlacedRef<'a> {
    /// Splats whose means are absolute: origin `[0, 0, 0]`.
    fn from(splats: &'a GaussianSplats) -> Self {
        Self {
            origin_m: [0.0; 3],
            splats,
        }
    }
}

/// What to do instead when a format cannot hold the positions (the fix in
/// [`Error::PositionRange`]).
const POSITION_RANGE_FIX: &str = "write `.ply` (double x/y/z) or `.glb` (f64 node translation) \
    instead, or tile the file with a `kind = \"splats\"` job (3D Tiles transforms), which all keep \
    f64 positions; or move the scene near the origin before converting";

impl<'a> PlacedRef<'a> {
    /// True when the origin is `[0, 0, 0]` (the means are absolute).
    #[must_use]
    pub fn is_at_zero(&self) -> bool {
        self.origin_m == [0.0; 3]
    }

    /// The origin when it is not `[0, 0, 0]` (what the PLY and GLB writers store in f64).
    #[must_use]
    pub fn nonzero_origin(&self) -> Option<[f64; 3]> {
        (!self.is_at_zero()).then_some(self.origin_m)
    }

    /// [`Error::PositionRange`] for writing these splats to `path` as `format` (its short name,
    /// e.g. `"SPZ"`), whose range and precision `capacity` states; the error names the largest
    /// absolute coordinate, its splat and axis, and what to write instead.
    pub(crate) fn position_range_error(
        &self,
        path: &Path,
        format: &'static str,
        capacity: String,
    ) -> Error {
        let (largest_m, i, axis) = largest_coordinate(self.splats, self.origin_m);
        Error::PositionRange {
            path: path.to_path_buf(),
            format,
            capacity,
            largest_m,
            location: format!("splat {i}, {}", ["x", "y", "z"][axis]),
            fix: POSITION_RANGE_FIX,
        }
    }

    /// The splats with absolute f32 means for a writer of `format` that stores absolute f32
    /// positions (`how` says how, for the error): borrowed as they are at origin 0, else
    /// `(origin + mean) as f32`.
    ///
    /// # Errors
    /// [`Error::PositionRange`] naming `path` when the cast moves a coordinate by more than
    /// [`POSITION_TOLERANCE_M`] (f32's range at that tolerance and its step at the largest
    /// coordinate are in the message).
    pub(crate) fn absolute_f32_for(
        &self,
        path: &Path,
        format: &'static str,
        how: &str,
    ) -> Result<Cow<'a, GaussianSplats>> {
        if self.is_at_zero() {
            return Ok(Cow::Borrowed(self.splats));
        }
        let (absolute, moved_m) = absolute_f32(self.splats, self.origin_m);
        if moved_m > POSITION_TOLERANCE_M {
            let (largest_m, _, _) = largest_coordinate(self.splats, self.origin_m);
            return Err(self.position_range_error(
                path,
                format,
                format!(
                    "{how}, within {POSITION_TOLERANCE_M} m only for |x| < {:.0} m (f32 steps \
                     are {:.3} mm at {largest_m:.0} m; casting moves a splat by up to {:.3} mm)",
                    f32_range_m(POSITION_TOLERANCE_M),
                    f32_step_m(largest_m) * 1e3,
                    moved_m * 1e3
                ),
            ));
        }
        Ok(Cow::Owned(absolute))
    }
}

/// [`PlacedSplats::largest_coordinate`] of `splats` at `origin_m` held apart.
pub(crate) fn largest_coordinate(
    splats: &GaussianSplats,
    origin_m: [f64; 3],
) -> (f64, usize, usize) {
    let mut best = (0.0, 0, 0);
    for (j, &m) in splats.means.iter().enumerate() {
        let x = (origin_m[j % 3] + f64::from(m)).abs();
        if x > best.0 {
            best = (x, j / 3, j % 3);
        }
    }
    best
}

/// [`PlacedSplats::into_absolute_f32`] of `splats` at `origin_m` held apart (always a copy).
fn absolute_f32(splats: &GaussianSplats, origin_m: [f64; 3]) -> (GaussianSplats, f64) {
    let mut out = splats.clone();
    if origin_m == [0.0; 3] {
        return (out, 0.0);
    }
    let mut moved_m = 0f64;
    for (j, m) in out.means.iter_mut().enumerate() {
        let x = origin_m[j % 3] + f64::from(*m);
        *m = x as f32;
        moved_m = moved_m.max((f64::from(*m) - x).abs());
    }
    (out, moved_m)
}

/// The origin [`PlacedSplats::from_absolute`] picks for `xyz_m` (`[N, 3]` metres): `[0, 0, 0]`
/// when every value casts to f32 within [`RECENTRE_ABOVE_M`]; else, on every axis, the centre of
/// the values' range rounded to a whole metre (all axes, so that the means are small and later
/// f32 arithmetic on them, such as merging or SPZ's ±2048 m fixed point, keeps precision too).
#[must_use]
pub fn origin_for(xyz_m: &[f64]) -> [f64; 3] {
    let needs = xyz_m
        .iter()
        .any(|&x| (f64::from(x as f32) - x).abs() > RECENTRE_ABOVE_M);
    if !needs {
        return [0.0; 3];
    }
    std::array::from_fn(|a| {
        let (lo, hi) = xyz_m
            .iter()
            .skip(a)
            .step_by(3)
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        ((lo + hi) / 2.0).round()
    })
}

/// Largest |x| (metres, a power of two) below which f32 stores every value within
/// `tolerance_m`: half an f32 step, 2^(e − 24) for |x| in [2^e, 2^(e+1)), must not exceed it.
#[must_use]
pub fn f32_range_m(tolerance_m: f64) -> f64 {
    let mut e = -126i32;
    while 2f64.powi(e + 1 - 24) <= tolerance_m && e < 127 {
        e += 1;
    }
    2f64.powi(e + 1)
}

/// The step between neighbouring f32 values at |x| (metres); 0 for x = 0.
#[must_use]
pub fn f32_step_m(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    2f64.powi(x.abs().log2().floor() as i32 - 23)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splats::test_data::{random_splats, survey_xyz};

    #[test]
    fn survey_coordinates_get_a_whole_metre_origin_and_keep_1_cm_spacing() {
        let p = PlacedSplats::from_absolute(&survey_xyz(), random_splats(3, 0, 1.0, 1));
        assert_eq!(p.origin_m, [500_000.0, 4_000_000.0, 10.0]);
        for (i, want) in survey_xyz().chunks_exact(3).enumerate() {
            let got = p.absolute_mean(i);
            for a in 0..3 {
                assert!((got[a] - want[a]).abs() < 1e-6, "{got:?} vs {want:?}");
            }
        }
        assert_eq!(p.largest_coordinate(), (4_000_000.0, 0, 1));
        // Cast to absolute f32, 1 cm at 500 km moves by more than the tolerance.
        let (_, moved) = p.clone().into_absolute_f32();
        assert!(moved > POSITION_TOLERANCE_M, "{moved}");
    }

    #[test]
    fn coordinates_that_f32_holds_keep_origin_zero_and_exact_means() {
        let s = random_splats(50, 1, 20.0, 3);
        let xyz: Vec<f64> = s.means.iter().map(|&m| f64::from(m)).collect();
        let p = PlacedSplats::from_absolute(&xyz, s.clone());
        assert!(p.is_at_zero());
        assert_eq!(p.splats, s);
        // Doubles that are not f32 values but round within 1 µm (|x| < 16 m) keep 0 too; one
        // coordinate that does not re-centres every axis.
        let near: Vec<f64> = xyz.iter().map(|x| x / 2.0 + 1e-9).collect();
        assert_eq!(origin_for(&near), [0.0; 3]);
        assert_eq!(
            origin_for(&[0.5, 2.0, -3.0, 3_000.000_1, 4.0, -5.0]),
            [1500.0, 3.0, -4.0]
        );
    }

    #[test]
    fn rotating_placed_splats_rotates_the_origin_in_f64() {
        let mut p = PlacedSplats::from_absolute(&survey_xyz(), random_splats(3, 0, 1.0, 1));
        // (x, y, z) → (x, −y, −z).
        p.rotate([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])
            .unwrap();
        let got = p.absolute_mean(1);
        assert!((got[0] - 500_000.01).abs() < 1e-6, "{got:?}");
        assert!((got[1] + 4_000_000.0).abs() < 1e-6, "{got:?}");
        assert!((got[2] + 10.0).abs() < 1e-6, "{got:?}");
        assert_eq!(p.origin_m, [500_000.0, -4_000_000.0, -10.0]);
    }

    #[test]
    fn f32_range_and_step_follow_the_float_layout() {
        // Half a step is ≤ 1 mm below 2^15 m (step 2^−9 m there), not above.
        assert_eq!(f32_range_m(1e-3), 32_768.0);
        assert_eq!(f32_step_m(500_000.0), 0.031_25);
        assert_eq!(f32_step_m(1.5), 2f64.powi(-23));
    }
}
