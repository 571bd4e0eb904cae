//! Georeference: place a tileset on the WGS84 ellipsoid by putting an east-north-up (ENU) →
//! Earth-centred Earth-fixed (ECEF) transform in front of the root tile's own transform.
//!
//! Sources: OGC 3D Tiles 1.1 (22-025r4) §"Transforms" (a tile's `transform` maps its local
//! Z-up frame into its parent's; the root's maps into ECEF metres, column-major 4×4);
//! NIMA TR8350.2 (WGS84: a = 6 378 137 m, f = 1 / 298.257223563) for geodetic → ECEF;
//! the heading convention is CesiumJS's `Transforms.headingPitchRollToFixedFrame` with pitch =
//! roll = 0 (heading clockwise from north, seen from above), checked against CesiumJS 1.145 in the
//! tests below.
//!
//! Frames: a Kiln tileset's local frame is Z-up (glTF Y-up content is rotated Y-up → Z-up by the
//! client, see `tile/splat.rs`), so local +x is east, +y north and +z up once georeferenced: a
//! glTF model's +X points east, its +Y up and its −Z north (heading 0).

use std::path::Path;
use std::str::FromStr;

use kiln_formats::atomic_write::write_atomic;
use kiln_formats::tiles::tileset::Tileset;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Error, Result};

/// WGS84 semi-major axis, metres.
const WGS84_A: f64 = 6_378_137.0;
/// WGS84 flattening.
const WGS84_F: f64 = 1.0 / 298.257_223_563;

/// Where a tileset's local origin sits on Earth, and which way it faces.
///
/// Written and parsed as `"lon,lat,height[,heading]"`: longitude and latitude in decimal degrees
/// (WGS84, east and north positive), height in metres above the WGS84 ellipsoid (not above sea
/// level), heading in degrees clockwise from north (default 0) — the compass bearing of the local
/// +y (north) axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Georef {
    /// Longitude, degrees in [−180, 180].
    pub longitude_deg: f64,
    /// Geodetic latitude, degrees in [−90, 90].
    pub latitude_deg: f64,
    /// Height above the WGS84 ellipsoid, metres.
    pub height_m: f64,
    /// Heading, degrees clockwise from north (any finite value).
    pub heading_deg: f64,
}

impl FromStr for Georef {
    type Err = String;

    /// Parse `"lon,lat,height[,heading]"` (see [`Georef`]).
    ///
    /// # Errors
    /// A message naming the bad part and the expected form: wrong number of parts, a part that
    /// is not a finite number, longitude outside [−180, 180] or latitude outside [−90, 90].
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let form = "expected \"lon,lat,height[,heading]\" in degrees, degrees, metres (ellipsoid), degrees clockwise from north, e.g. \"-1.1088,50.8020,10,30\"";
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if !(3..=4).contains(&parts.len()) {
            return Err(format!("{s:?} has {} parts; {form}", parts.len()));
        }
        let names = ["longitude", "latitude", "height", "heading"];
        let mut values = [0.0f64; 4];
        for (i, p) in parts.iter().enumerate() {
            values[i] = p
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{} {p:?} is not a finite number; {form}", names[i]))?;
        }
        let [longitude_deg, latitude_deg, height_m, heading_deg] = values;
        if !(-180.0..=180.0).contains(&longitude_deg) {
            return Err(format!(
                "longitude {longitude_deg} is outside [-180, 180] (did you swap lon and lat?); {form}"
            ));
        }
        if !(-90.0..=90.0).contains(&latitude_deg) {
            return Err(format!(
                "latitude {latitude_deg} is outside [-90, 90] (did you swap lon and lat?); {form}"
            ));
        }
        Ok(Georef {
            longitude_deg,
            latitude_deg,
            height_m,
            heading_deg,
        })
    }
}

impl std::fmt::Display for Georef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{},{},{},{}",
            self.longitude_deg, self.latitude_deg, self.height_m, self.heading_deg
        )
    }
}

impl Serialize for Georef {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Georef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Georef {
    /// ECEF position of the local origin, metres: geodetic → ECEF on WGS84 with the prime
    /// vertical radius N = a / √(1 − e² sin²φ) (TR8350.2 §4).
    pub fn origin_ecef(&self) -> [f64; 3] {
        let (lon, lat) = (
            self.longitude_deg.to_radians(),
            self.latitude_deg.to_radians(),
        );
        let e2 = WGS84_F * (2.0 - WGS84_F);
        let n = WGS84_A / (1.0 - e2 * lat.sin().powi(2)).sqrt();
        let h = self.height_m;
        [
            (n + h) * lat.cos() * lon.cos(),
            (n + h) * lat.cos() * lon.sin(),
            (n * (1.0 - e2) + h) * lat.sin(),
        ]
    }

    /// The local (east, north, up, rotated by the heading) → ECEF transform as a column-major
    /// 4×4 matrix, the layout of a 3D Tiles `transform`: columns are the local x, y, z axes as
    /// ECEF unit vectors and the origin in ECEF metres.
    ///
    /// With heading θ: x = cos θ·E − sin θ·N, y = sin θ·E + cos θ·N, z = U, where E, N, U are the
    /// ellipsoid's east, north and up unit vectors at the origin (same as CesiumJS
    /// `Transforms.headingPitchRollToFixedFrame(origin, new HeadingPitchRoll(θ, 0, 0))`).
    pub fn enu_to_ecef(&self) -> [f64; 16] {
        let (lon, lat) = (
            self.longitude_deg.to_radians(),
            self.latitude_deg.to_radians(),
        );
        let east = [-lon.sin(), lon.cos(), 0.0];
        let north = [-lat.sin() * lon.cos(), -lat.sin() * lon.sin(), lat.cos()];
        let up = [lat.cos() * lon.cos(), lat.cos() * lon.sin(), lat.sin()];
        let (s, c) = self.heading_deg.to_radians().sin_cos();
        let x: [f64; 3] = std::array::from_fn(|i| c * east[i] - s * north[i]);
        let y: [f64; 3] = std::array::from_fn(|i| s * east[i] + c * north[i]);
        let o = self.origin_ecef();
        [
            x[0], x[1], x[2], 0.0, y[0], y[1], y[2], 0.0, up[0], up[1], up[2], 0.0, o[0], o[1],
            o[2], 1.0,
        ]
    }
}

/// Column-major 4×4 product `a · b`.
fn mat_mul(a: &[f64; 16], b: &[f64; 16]) -> [f64; 16] {
    let mut out = [0.0; 16];
    for col in 0..4 {
        for row in 0..4 {
            out[col * 4 + row] = (0..4).map(|k| a[k * 4 + row] * b[col * 4 + k]).sum();
        }
    }
    out
}

/// Georeference the tileset at `tileset_path` in place: root `transform` := [`Georef::enu_to_ecef`]
/// · (the root's existing transform, identity when absent). Rewritten atomically.
///
/// # Errors
/// [`Error::Input`] when the file is not a readable tileset (names the file); [`Error::Format`]
/// when it cannot be written.
pub fn apply_georef(tileset_path: &Path, georef: &Georef) -> Result<()> {
    let bad = |problem: String| Error::Input {
        path: tileset_path.into(),
        field: "tileset".into(),
        problem,
    };
    let bytes = std::fs::read(tileset_path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let mut tileset: Tileset =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("not a tileset: {e}")))?;
    let local = tileset.root.transform.unwrap_or([
        1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0,
    ]);
    let enu_to_ecef = georef.enu_to_ecef();
    tileset.root.transform = Some(mat_mul(&enu_to_ecef, &local));
    // Evaluation and viewer cameras need the frame in front of the root undone.
    let mut frame = super::frame::TilesetFrame::of_tileset(&tileset);
    frame.georef = Some(enu_to_ecef);
    frame.record_in(&mut tileset);
    let json =
        serde_json::to_vec_pretty(&tileset).map_err(|e| bad(format!("cannot serialise: {e}")))?;
    write_atomic(tileset_path, &json)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64], tol: f64) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol,
                "element {i}: {x} vs {y}\n{a:?}\n{b:?}"
            );
        }
    }

    /// Reference matrices printed by CesiumJS 1.145 (node, npm `cesium`):
    /// `Transforms.headingPitchRollToFixedFrame(Cartesian3.fromDegrees(lon, lat, h),
    /// new HeadingPitchRoll(toRadians(heading), 0, 0))`.
    #[test]
    fn enu_to_ecef_matches_cesium() {
        let cases: [(&str, [f64; 16]); 3] = [
            (
                "-1.1088,50.802,10,30",
                [
                    0.4041691812496757,
                    0.8583650521086407,
                    -0.3160011238057506,
                    0.0,
                    -0.661339551093462,
                    0.5128936219334436,
                    0.5473300016804232,
                    0.0,
                    0.6318839063368088,
                    -0.012229877289835711,
                    0.7749665534808651,
                    0.0,
                    4038374.7022902886,
                    -78161.23589174252,
                    4919660.915969799,
                    1.0,
                ],
            ),
            (
                "0,0,0",
                [
                    0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 6378137.0, 0.0,
                    0.0, 1.0,
                ],
            ),
            (
                "139.7,35.68,40,-90",
                [
                    0.44483219218565506,
                    -0.3772451330419276,
                    0.8122871600557793,
                    0.0,
                    0.6467897795104599,
                    0.762668329695688,
                    1.8036398154026118e-16,
                    0.0,
                    -0.6195056915929952,
                    0.525379033151655,
                    0.5832577214306873,
                    0.0,
                    -3955823.963382703,
                    3354782.687881365,
                    3699431.973876118,
                    1.0,
                ],
            ),
        ];
        for (text, want) in cases {
            let g: Georef = text.parse().unwrap();
            let m = g.enu_to_ecef();
            // CesiumJS takes "up" as the normal of the ellipsoid scaled through the point
            // (geodeticSurfaceNormal of the position), which leans from the geodetic normal by
            // about e²·h/a (4e-8 rad at 40 m); ours is the geodetic normal. Both are exact at h = 0.
            close(&m[..12], &want[..12], 1e-7);
            // Positions: 1 mm.
            close(&m[12..], &want[12..], 1e-3);
        }
    }

    #[test]
    fn pole_origin_is_on_the_semi_minor_axis() {
        // b = a (1 − f) = 6 356 752.314 245 m (WGS84).
        let g: Georef = "0,90,0".parse().unwrap();
        close(&g.origin_ecef(), &[0.0, 0.0, 6_356_752.314_245], 1e-6);
    }

    #[test]
    fn bad_georefs_name_the_part_and_the_form() {
        for (text, needle) in [
            ("1,2", "2 parts"),
            ("1,2,3,4,5", "5 parts"),
            ("x,2,3", "longitude \"x\""),
            ("1,NaN,3", "latitude \"NaN\""),
            ("200,2,3", "longitude 200 is outside"),
            ("2,95,3", "latitude 95 is outside"),
        ] {
            let e = text.parse::<Georef>().unwrap_err();
            assert!(
                e.contains(needle) && e.contains("lon,lat,height"),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn georef_round_trips_through_its_text_form() {
        let g: Georef = " -1.5 , 50.25 , 12.5 ".parse().unwrap();
        assert_eq!(g.heading_deg, 0.0);
        assert_eq!(g.to_string().parse::<Georef>().unwrap(), g);
    }

    #[test]
    fn apply_georef_premultiplies_the_root_transform() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tileset.json");
        let json = serde_json::json!({
            "asset": {"version": "1.1"},
            "geometricError": 10.0,
            "root": {
                "boundingVolume": {"box": [0,0,0, 1,0,0, 0,1,0, 0,0,1]},
                "geometricError": 5.0,
                "refine": "REPLACE",
                "transform": [1,0,0,0, 0,1,0,0, 0,0,1,0, 2,3,4,1]
            }
        });
        std::fs::write(&path, serde_json::to_vec(&json).unwrap()).unwrap();
        let g: Georef = "0,0,0".parse().unwrap();
        apply_georef(&path, &g).unwrap();
        let t: Tileset = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        // Local (2, 3, 4) = 2 m east, 3 m north, 4 m up at (lon 0, lat 0): ECEF x = a + 4,
        // y = 2 (east), z = 3 (north).
        let m = t.root.transform.unwrap();
        close(&m[12..15], &[WGS84_A + 4.0, 2.0, 3.0], 1e-9);
        close(&m[..3], &[0.0, 1.0, 0.0], 1e-12);
    }
}
