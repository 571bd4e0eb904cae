//! Splat positions beyond f32 (survey frames: a UTM easting of 500 km, a northing of 4000 km):
//! a `double` PLY goes through a splats job and `kiln convert` at f64 precision until it is
//! re-centred per tile, and formats that cannot hold it refuse with their range.

use std::path::Path;

use super::harness::{Sandbox, ok, stderr, stdout};
use kiln_formats::tiles::tileset::{Tile, Tileset};

/// Three splats 1 cm apart along x at x = 500 km, y = 4000 km, z = 10 m (glTF Y-up metres).
const SURVEY_XYZ: [[f64; 3]; 3] = [
    [500_000.00, 4_000_000.0, 10.0],
    [500_000.01, 4_000_000.0, 10.0],
    [500_000.02, 4_000_000.0, 10.0],
];

/// An ASCII INRIA PLY of the survey splats: `double x y z` written with two decimals, the
/// rest `float` (SH degree 0, small opaque splats).
fn write_survey_ply(path: &Path) {
    let mut text = String::from("ply\nformat ascii 1.0\nelement vertex 3\n");
    for p in ["x", "y", "z"] {
        text.push_str(&format!("property double {p}\n"));
    }
    for p in [
        "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1",
        "rot_2", "rot_3",
    ] {
        text.push_str(&format!("property float {p}\n"));
    }
    text.push_str("end_header\n");
    for [x, y, z] in SURVEY_XYZ {
        text.push_str(&format!(
            "{x:.2} {y:.2} {z:.2} 0.5 0.2 -0.3 3 -6 -6.5 -7 1 0 0 0\n"
        ));
    }
    std::fs::write(path, text).unwrap();
}

/// Every leaf splat of the tileset at `path` in the tileset frame (3D Tiles Z-up, metres, f64):
/// the tile transforms composed in f64 (Kiln's are translations) plus the decoded content
/// turned Y-up → Z-up.
fn leaf_positions(path: &Path) -> Vec<[f64; 3]> {
    fn walk(dir: &Path, t: &Tile, offset: [f64; 3], out: &mut Vec<[f64; 3]>) {
        let m = t
            .transform
            .unwrap_or(kiln_formats::tiles::transform::IDENTITY);
        assert_eq!(
            &m[..12],
            &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            "Kiln writes translations only"
        );
        let o: [f64; 3] = std::array::from_fn(|a| offset[a] + m[12 + a]);
        if t.children.is_empty() {
            let uri = &t.content.as_ref().unwrap().uri;
            let glb = std::fs::read(dir.join(uri)).unwrap();
            let s = kiln_formats::splats::glb::decode(&glb).unwrap().splats;
            for p in s.means.chunks_exact(3) {
                let [x, y, z] = [p[0], p[1], p[2]].map(f64::from);
                out.push([o[0] + x, o[1] - z, o[2] + y]);
            }
        }
        for c in &t.children {
            walk(dir, c, o, out);
        }
    }
    let ts: Tileset = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut out = Vec::new();
    walk(path.parent().unwrap(), &ts.root, [0.0; 3], &mut out);
    out
}

/// A splats job on a `double` PLY at survey coordinates writes a tileset whose transforms
/// (f64) plus tile content put every splat within 1 mm of its input position, 1 cm spacing
/// intact; the ingest report names the origin it kept.
#[test]
fn a_splats_job_keeps_1_cm_spacing_at_500_km_in_the_tileset() {
    let sb = Sandbox::new();
    let input = sb.path().join("survey.ply");
    write_survey_ply(&input);
    let job = sb.job(
        "survey",
        &format!(
            "name = \"survey\"\nkind = \"splats\"\ninput = \"{}\"\noutput = \"out/survey\"\n",
            input.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    assert!(
        stdout(&o).contains("\"origin_m\":[500000.0,4000000.0,10.0]"),
        "{}",
        stdout(&o)
    );
    let got = leaf_positions(&sb.path().join("out/survey/tileset.json"));
    assert_eq!(got.len(), 3, "{got:?}");
    for [x, y, z] in SURVEY_XYZ {
        // Y-up input → the tileset's Z-up frame: (x, −z, y).
        let want = [x, -z, y];
        let hits = got
            .iter()
            .filter(|g| (0..3).all(|a| (g[a] - want[a]).abs() < 1e-3))
            .count();
        assert_eq!(hits, 1, "{want:?} not within 1 mm of one splat in {got:?}");
    }
}

/// `kiln convert` of the same PLY keeps the positions in `.ply` and `.glb` and refuses `.spz`
/// and `.splat` with the format's range and the fix, writing nothing.
#[test]
fn convert_keeps_survey_positions_in_ply_and_glb_and_refuses_spz_and_splat() {
    let sb = Sandbox::new();
    let input = sb.path().join("survey.ply");
    write_survey_ply(&input);
    for name in ["out.ply", "out.glb"] {
        let o = sb.kiln(&["convert", input.to_str().unwrap(), name]);
        ok(&o);
        assert!(
            stdout(&o).contains("f64 origin (500000, 4000000, 10) m"),
            "{}",
            stdout(&o)
        );
    }
    let back = kiln_formats::splats::convert::read(&sb.path().join("out.ply")).unwrap();
    for (i, want) in SURVEY_XYZ.iter().enumerate() {
        let got = back.absolute_mean(i);
        assert!(
            (0..3).all(|a| (got[a] - want[a]).abs() < 1e-3),
            "{got:?} vs {want:?}"
        );
    }
    for (name, range) in [
        ("out.spz", "|x| ≤ 2048.000 m at 12 fractional bits"),
        ("out.splat", "within 0.001 m only for |x| < 32768 m"),
    ] {
        let o = sb.kiln(&["convert", input.to_str().unwrap(), name]);
        assert!(!o.status.success(), "{name} was written");
        let e = stderr(&o);
        for part in [
            name,
            range,
            "the largest |coordinate| is 4000000.000 m",
            "write `.ply`",
        ] {
            assert!(e.contains(part), "{name}: `{part}` missing from:\n{e}");
        }
        assert!(!sb.path().join(name).exists());
    }
}
