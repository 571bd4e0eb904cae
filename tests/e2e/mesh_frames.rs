//! Mesh jobs and the up axis: `[ingest] up_axis` turns a mesh whose up is not glTF's +Y upright.

use super::harness::*;

/// The Stanford bunny (Y-up, as its OBJ is distributed) stood on its back — written Z-up, as
/// Blender or a scanner would export it: (x, y, z) → (x, −z, y). A mesh job with `up_axis = "z"`
/// must give exactly the tileset of the original Y-up file (the turn back is a signed permutation
/// of axes, exact in f32, so every tile is byte-identical), and without `up_axis` it must not.
#[test]
fn a_z_up_mesh_job_with_up_axis_z_gives_the_tileset_of_the_y_up_original() {
    let sb = Sandbox::new();
    let original = dataset("mesh-common-3d-test-models").join("stanford-bunny.obj");
    let z_up = sb.path().join("bunny-z-up.obj");
    std::fs::write(
        &z_up,
        lying_on_its_back(&std::fs::read_to_string(&original).unwrap()),
    )
    .unwrap();
    let run = |name: &str, input: &std::path::Path, ingest: &str| {
        let job = sb.job(
            name,
            &format!(
                "name = \"{name}\"\nkind = \"mesh\"\ninput = \"{}\"\noutput = \"out/{name}\"\n{ingest}",
                input.display()
            ),
        );
        ok(&sb.kiln(&["run", job.to_str().unwrap()]));
        sb.path().join("out").join(name)
    };
    let upright = run("upright", &original, "");
    let turned = run("turned", &z_up, "[ingest]\nup_axis = \"z\"\n");
    let lying = run("lying", &z_up, "");

    let root = |out: &std::path::Path| -> serde_json::Value {
        let t: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("tileset.json")).unwrap()).unwrap();
        t["root"].clone()
    };
    assert_eq!(
        root(&turned),
        root(&upright),
        "the turned tileset's tiles differ"
    );
    assert_ne!(
        root(&lying),
        root(&upright),
        "without up_axis the bunny must stay on its back"
    );
    let tiles = files_with_ext(&upright, "glb");
    assert!(!tiles.is_empty());
    for tile in &tiles {
        let same = turned.join(tile.strip_prefix(&upright).unwrap());
        assert_eq!(
            std::fs::read(tile).unwrap(),
            std::fs::read(&same).unwrap(),
            "{} differs from {}",
            same.display(),
            tile.display()
        );
    }
}

/// An OBJ's `v` and `vn` lines turned by (x, y, z) → (x, −z, y) (+Y becomes +Z); other lines kept.
fn lying_on_its_back(obj: &str) -> String {
    let mut out = String::with_capacity(obj.len() + obj.len() / 8);
    for line in obj.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some(kind @ ("v" | "vn")) => {
                let v: Vec<&str> = words.collect();
                let neg = |s: &str| {
                    s.strip_prefix('-')
                        .map_or_else(|| format!("-{s}"), str::to_string)
                };
                out.push_str(&format!("{kind} {} {} {}\n", v[0], neg(v[2]), v[1]));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}
