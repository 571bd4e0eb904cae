//! `kiln regress` end to end: scenes from datasets/baselines.toml pass on this code, and a
//! deliberately degraded decimator or trainer makes the run fail naming the scene, the metric, the
//! baseline and the new value.

use std::path::{Path, PathBuf};

use super::harness::*;

/// The repository's baselines file.
fn baselines() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/baselines.toml")
}

fn regress(sb: &Sandbox, args: &[&str]) -> std::process::Output {
    let b = baselines();
    let out = sb.path().join("regress");
    let mut all = vec![
        "regress",
        "--quick",
        "--baselines",
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    sb.kiln(&all)
}

#[test]
fn mesh_scene_passes_and_a_degraded_decimator_fails_naming_the_metric() {
    let sb = Sandbox::new();
    let o = regress(&sb, &["--scenes", "avocado"]);
    ok(&o);
    let md = std::fs::read_to_string(sb.path().join("regress/summary.md")).unwrap();
    assert!(md.starts_with("# kiln regress (quick): passed"), "{md}");
    // Avocado has 682 triangles; LOD 1 keeps half of them (meshopt target ⌈0.5·682⌉ = 341).
    assert!(md.contains("| lod1.triangles | 341 ± "), "{md}");
    assert!(
        sb.path()
            .join("regress/scenes/avocado/output/report/index.html")
            .is_file()
    );

    // Degrade: a coarser chain (LOD 1 at a quarter of the triangles instead of a half).
    let o = regress(
        &sb,
        &[
            "--scenes",
            "avocado",
            "--set",
            "decimate.ratios=[1.0, 0.25, 0.125, 0.0625]",
        ],
    );
    assert!(!o.status.success(), "degraded run passed:\n{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("REGRESSION avocado lod1.triangles: baseline 341"),
        "{err}"
    );
    assert!(err.contains("now 171") || err.contains("now 170"), "{err}");
    let junit = std::fs::read_to_string(sb.path().join("regress/junit.xml")).unwrap();
    assert!(
        junit.contains("<failure") && junit.contains("classname=\"avocado\""),
        "{junit}"
    );
    let html = std::fs::read_to_string(sb.path().join("regress/index.html")).unwrap();
    assert!(html.contains("FAILED") && html.contains("class=\"fail\"><td>lod1.triangles"));
}

#[test]
fn halving_the_training_steps_fails_on_held_out_psnr() {
    let sb = Sandbox::new();
    let b: toml::Table = toml::from_str(&std::fs::read_to_string(baselines()).unwrap()).unwrap();
    let fox = b["scene"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"].as_str() == Some("fox"))
        .unwrap();
    let steps = fox["quick"]["set"]["train.steps"].as_integer().unwrap();
    let half = format!("train.steps={}", steps / 2);
    let o = regress(&sb, &["--scenes", "fox", "--set", &half]);
    assert!(!o.status.success(), "degraded run passed:\n{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("REGRESSION fox psnr_db: baseline") && err.contains("(higher is better), now"),
        "{err}"
    );
}

#[test]
fn update_baselines_records_values_and_a_changed_count_then_fails() {
    let sb = Sandbox::new();
    // A one-scene baselines file in the sandbox, with its job beside it.
    std::fs::create_dir_all(sb.path().join("jobs")).unwrap();
    std::fs::write(
        sb.path().join("jobs/dog.toml"),
        "name = \"dog\"\nkind = \"splats\"\n\
         input = \"dataset://splat-plushdog-smartdatascan/point_cloud_29999_clean.ply\"\n\
         output = \"out/dog\"\n[tile]\nmax_splats_per_tile = 4096\n",
    )
    .unwrap();
    let b = sb.path().join("baselines.toml");
    std::fs::write(
        &b,
        "# my scenes\n[[scene]]\nname = \"dog\"\njob = \"jobs/dog.toml\"\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "regress",
            "--quick",
            "--baselines",
            b.to_str().unwrap(),
            "--out",
            "r",
        ];
        args.extend_from_slice(extra);
        sb.kiln(&args)
    };
    // No baselines yet: a clear failure, not a silent pass.
    let o = run(&[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no quick baselines for scene `dog`"));

    let o = run(&["--update-baselines"]);
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains("baselines updated") && out.contains("+"),
        "{out}"
    );
    let text = std::fs::read_to_string(&b).unwrap();
    assert!(text.starts_with("# my scenes"), "{text}");
    let t: toml::Table = toml::from_str(&text).unwrap();
    let metrics = &t["scene"][0]["quick"]["metrics"];
    // The plush-dog PLY holds 15,105 splats (dataset PROVENANCE / issue 5).
    assert_eq!(metrics["splats"]["baseline"].as_float(), Some(15105.0));
    assert!(metrics["tiles"]["baseline"].as_float().unwrap() >= 2.0);

    ok(&run(&[]));

    // A baseline that disagrees with the data beyond its tolerance fails, naming both values.
    let edited: String = text
        .lines()
        .map(|l| {
            if l.starts_with("splats =") {
                "splats = { baseline = 15000.0, tolerance = 10.0 }".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(edited, text.trim_end());
    std::fs::write(&b, edited).unwrap();
    let o = run(&[]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("dog splats: baseline 15000 ± 10") && stderr(&o).contains("now 15105"),
        "{}",
        stderr(&o)
    );
}
