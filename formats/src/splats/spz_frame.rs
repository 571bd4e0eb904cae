//! The axis convention an SPZ v4 file records for its data: the `SPZ_ADOBE_coordinate_system`
//! extension record.
//!
//! Source: nianticlabs/spz `extensions/README.md` (records `[u32 type][u32 byteLength][payload]`
//! between the 32-byte v4 header and the table of contents, header flag 0x2) and
//! `extensions/cc/coordinate-system-adobe.cc` (type `0xADBE0003`, payload one u32: the library's
//! `CoordinateSystem` value, `splat-types.h`). Without the record a reader assumes the SPZ
//! default, RUB (x right, y up, z back), which is why files converted from a PLY without
//! turning them show upside down: the most requested SPZ fix is that a file says its frame.
//!
//! A frame's three letters say where stored +x, +y and +z point: L/R (left, right), U/D (up,
//! down), F/B (front, back). Codes 1–8 keep y vertical (LDB … RUF), 9–16 put y along front/back
//! (LFD … RBU). RDF is the INRIA 3DGS PLY's frame (x right, y down, z forward: OpenCV / COLMAP),
//! LUF glTF's, RUB three.js's and SPZ's default.

use crate::{Error, Result};

/// Extension type of the coordinate-system record (vendor `0xADBE`, extension 3).
pub const SPZ_ADOBE_COORDINATE_SYSTEM: u32 = 0xADBE_0003;

/// The frame names by code − 1.
const NAMES: [&str; 16] = [
    "LDB", "RDB", "LUB", "RUB", "LDF", "RDF", "LUF", "RUF", "LFD", "RFD", "LFU", "RFU", "LBD",
    "RBD", "LBU", "RBU",
];

/// One of the sixteen frames an SPZ file can record (code 1..=16 of nianticlabs/spz
/// `CoordinateSystem`; 0, "unspecified", is no frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpzFrame(u8);

impl SpzFrame {
    /// Right, down, front: the INRIA 3DGS PLY (OpenCV, COLMAP) frame.
    pub const RDF: Self = Self(6);
    /// Right, up, back: SPZ's default and three.js's frame.
    pub const RUB: Self = Self(4);
    /// Left, up, front: glTF's frame (what `KHR_gaussian_splatting` GLBs hold).
    pub const LUF: Self = Self(7);

    /// The frame of code `code` (1..=16); `None` for 0 (unspecified) and unknown codes.
    #[must_use]
    pub fn from_code(code: u32) -> Option<Self> {
        (1..=16).contains(&code).then_some(Self(code as u8))
    }

    /// The code written in the record.
    #[must_use]
    pub fn code(self) -> u32 {
        u32::from(self.0)
    }

    /// Three-letter name, e.g. `RDF`.
    #[must_use]
    pub fn name(self) -> &'static str {
        NAMES[usize::from(self.0) - 1]
    }

    /// The frame named `name` (case-insensitive), if any.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
            .map(|i| Self(i as u8 + 1))
    }

    /// Row-major 3×3 whose columns are where stored +x, +y, +z point in the RUB world: a
    /// point stored as v lies at basis · v.
    #[must_use]
    pub fn basis(self) -> [[f64; 3]; 3] {
        let dir = |c: u8| -> [f64; 3] {
            match c {
                b'R' => [1.0, 0.0, 0.0],
                b'L' => [-1.0, 0.0, 0.0],
                b'U' => [0.0, 1.0, 0.0],
                b'D' => [0.0, -1.0, 0.0],
                b'B' => [0.0, 0.0, 1.0],
                _ => [0.0, 0.0, -1.0], // F
            }
        };
        let name = self.name().as_bytes();
        let cols = [dir(name[0]), dir(name[1]), dir(name[2])];
        std::array::from_fn(|r| std::array::from_fn(|c| cols[c][r]))
    }

    /// The frame whose [`Self::basis`] is `m` (entries within 1e−6), if it is one of the sixteen.
    #[must_use]
    pub fn from_basis(m: &[[f64; 3]; 3]) -> Option<Self> {
        (1..=16u8).map(Self).find(|f| {
            let b = f.basis();
            (0..3).all(|r| (0..3).all(|c| (b[r][c] - m[r][c]).abs() < 1e-6))
        })
    }

    /// Whether the frame is right-handed (x × y = z), as RDF, RUB and LUF are.
    #[must_use]
    pub fn is_right_handed(self) -> bool {
        det3(&self.basis()) > 0.0
    }

    /// The rotation R (row-major, v_to = R · v_self) that re-expresses data stored in `self` in
    /// `to`: R = basis(to)ᵀ · basis(self). `None` when the two differ in handedness (a mirror,
    /// which would also mirror every splat's SH).
    #[must_use]
    pub fn rotation_to(self, to: Self) -> Option<[[f64; 3]; 3]> {
        if self.is_right_handed() != to.is_right_handed() {
            return None;
        }
        let (a, b) = (self.basis(), to.basis());
        Some(std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).map(|k| b[k][i] * a[k][j]).sum())
        }))
    }
}

fn det3(m: &[[f64; 3]; 3]) -> f64 {
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
}

/// The 12 bytes of a coordinate-system record for `frame`.
#[must_use]
pub(crate) fn record(frame: SpzFrame) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..4].copy_from_slice(&SPZ_ADOBE_COORDINATE_SYSTEM.to_le_bytes());
    out[4..8].copy_from_slice(&4u32.to_le_bytes());
    out[8..].copy_from_slice(&frame.code().to_le_bytes());
    out
}

/// The frame recorded in a v4 file's extension zone (the bytes between the header and the
/// table of contents), skipping records of other types; `None` without a coordinate-system
/// record or with "unspecified" (0). `corrupt(location, what)` builds the error.
///
/// # Errors
/// A record running past the zone, a coordinate-system payload that is not 4 bytes, or a code
/// above 16.
pub(crate) fn recorded_frame(
    zone: &[u8],
    corrupt: impl Fn(String, String) -> Error,
) -> Result<Option<SpzFrame>> {
    let mut at = 0;
    let mut frame = None;
    while at < zone.len() {
        let field = |o: usize| -> Option<u32> {
            zone.get(o..o + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (Some(kind), Some(len)) = (field(at), field(at + 4)) else {
            return Err(corrupt(
                format!("extension record at byte {}", 32 + at),
                "truncated record header".into(),
            ));
        };
        let start = at + 8;
        let end = start.saturating_add(len as usize);
        if end > zone.len() {
            return Err(corrupt(
                format!("extension record {kind:#010x} at byte {}", 32 + at),
                format!("{len}-byte payload runs past the table of contents"),
            ));
        }
        if kind == SPZ_ADOBE_COORDINATE_SYSTEM {
            let code = (len == 4).then(|| field(start)).flatten();
            match code {
                Some(0) => frame = None,
                Some(c) if c <= 16 => frame = SpzFrame::from_code(c),
                _ => {
                    return Err(corrupt(
                        "SPZ_ADOBE_coordinate_system".into(),
                        format!("payload {len} bytes, value {code:?}: expected one u32 of 0..=16"),
                    ));
                }
            }
        }
        at = end;
    }
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_round_trips_through_its_code_name_and_basis() {
        for code in 1..=16 {
            let f = SpzFrame::from_code(code).unwrap();
            assert_eq!(f.code(), code);
            assert_eq!(SpzFrame::parse(&f.name().to_lowercase()), Some(f));
            assert_eq!(SpzFrame::from_basis(&f.basis()), Some(f));
        }
        assert_eq!(SpzFrame::from_code(0), None);
        assert_eq!(SpzFrame::from_code(17), None);
        assert_eq!(SpzFrame::RDF.name(), "RDF");
        assert_eq!(SpzFrame::RUB.name(), "RUB");
        assert_eq!(SpzFrame::LUF.name(), "LUF");
    }

    #[test]
    fn rdf_to_rub_flips_y_and_z_and_mirrors_are_refused() {
        // Hand calculation: RUB = (x, −y, −z) of RDF (the SPZ README's PLY → SPZ conversion).
        let r = SpzFrame::RDF.rotation_to(SpzFrame::RUB).unwrap();
        assert_eq!(r, [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]]);
        // glTF (LUF) from RDF: x and y flip.
        let r = SpzFrame::RDF.rotation_to(SpzFrame::LUF).unwrap();
        assert_eq!(r, [[-1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]);
        // RUF (Unity) is left-handed: no rotation reaches it from RDF.
        let ruf = SpzFrame::parse("ruf").unwrap();
        assert!(!ruf.is_right_handed());
        assert_eq!(SpzFrame::RDF.rotation_to(ruf), None);
        // Eight of the sixteen are right-handed.
        let right = (1..=16)
            .filter(|&c| SpzFrame::from_code(c).unwrap().is_right_handed())
            .count();
        assert_eq!(right, 8);
    }

    #[test]
    fn records_of_other_vendors_are_skipped_and_bad_ones_named() {
        let corrupt = |l: String, w: String| Error::InvalidInput {
            context: "test",
            field: l,
            expected: String::new(),
            found: w,
        };
        let mut zone = Vec::new();
        zone.extend_from_slice(&0xADBE_0002u32.to_le_bytes());
        zone.extend_from_slice(&12u32.to_le_bytes());
        zone.extend_from_slice(&[0u8; 12]);
        zone.extend_from_slice(&record(SpzFrame::RUB));
        assert_eq!(recorded_frame(&zone, corrupt).unwrap(), Some(SpzFrame::RUB));
        assert_eq!(recorded_frame(&[], corrupt).unwrap(), None);
        let mut bad = record(SpzFrame::RUB);
        bad[8] = 40;
        let err = recorded_frame(&bad, corrupt).unwrap_err().to_string();
        assert!(err.contains("0..=16"), "{err}");
        let err = recorded_frame(&zone[..30], corrupt)
            .unwrap_err()
            .to_string();
        assert!(err.contains("runs past"), "{err}");
    }
}
