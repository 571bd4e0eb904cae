//! `kiln report JOB_ID --html DIR` end to end: run a real job, write its HTML page, and check the
//! page is one self-contained file holding the pictures its outputs call for.

use super::harness::*;

/// The `src` attribute values of every `<img>` in `html`.
fn img_sources(html: &str) -> Vec<&str> {
    html.split("<img ")
        .skip(1)
        .filter_map(|el| {
            let s = &el[el.find("src=\"")? + 5..];
            Some(&s[..s.find('"')?])
        })
        .collect()
}

#[test]
fn avocado_report_html_embeds_lod_renders_tile_map_and_cost_table() {
    let sb = Sandbox::new();
    let id = run_avocado(&sb);

    let r = sb.kiln(&["report", &id, "--html", "page"]);
    ok(&r);
    assert!(stdout(&r).contains("index.html"), "{}", stdout(&r));
    let page = sb.path().join("page");
    let files: Vec<_> = std::fs::read_dir(&page).unwrap().collect();
    assert_eq!(
        files.len(),
        1,
        "only index.html is written (images are embedded)"
    );
    let html = std::fs::read_to_string(page.join("index.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));

    // 4 LOD renders and 4 tileset levels drawn from the tile GLBs (PNG) + the tile map (SVG),
    // all embedded.
    let srcs = img_sources(&html);
    assert_eq!(srcs.len(), 9, "{} images", srcs.len());
    assert!(srcs.iter().all(|s| s.starts_with("data:image/")));
    assert_eq!(
        srcs.iter()
            .filter(|s| s.starts_with("data:image/png;base64,"))
            .count(),
        8
    );
    // What the viewer loads: the leaves (682 triangles, the full mesh) look like lod_0; the root
    // (a coarse simplification) is scored too.
    assert!(html.contains("What the viewer loads"));
    let leaves = html
        .split("leaves (depth 3): 1 tiles, 682 triangles, PSNR ")
        .nth(1)
        .and_then(|rest| rest.split(" dB").next())
        .and_then(|db| db.parse::<f64>().ok())
        .expect("a PSNR caption for the leaves");
    assert!(leaves > 45.0, "leaves {leaves} dB against lod_0");
    assert!(html.contains("root: 1 tiles, "));
    // Triangle counts and errors of the LOD chain (ratios 1, ½, ¼, ⅛ of 682 triangles).
    for n in [682, 341, 170, 86] {
        assert!(
            html.contains(&format!("{n} triangles")),
            "LOD with {n} triangles"
        );
    }
    assert!(html.contains("simplification error"));
    // One tile per LOD level; the cost table has one row per stage plus the total.
    assert!(
        html.contains("<td class=\"n\">4</td>"),
        "4 tiles in the level table"
    );
    for stage in ["ingest", "decimate", "tile", "publish"] {
        assert!(
            html.contains(&format!("<td>{stage}</td>")),
            "cost row {stage}"
        );
    }
    assert!(html.contains("GPU-hours"));
    // The bill is `kiln report`'s: the page's total USD and storage USD are the JSON's.
    let j = sb.kiln(&["report", &id, "--json"]);
    ok(&j);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&j)).unwrap();
    let total = format!(
        "<tr class=\"total\"><td>total</td><td class=\"n\">{}</td><td class=\"n\">{:.6}</td>\
         <td class=\"n\">{:.6}</td><td class=\"n\">{:.6}</td><td class=\"n\">{:.6}</td>",
        doc["totals"]["attempts"],
        doc["cost"]["gpu_usd"].as_f64().unwrap() + doc["cost"]["cpu_usd"].as_f64().unwrap(),
        doc["cost"]["storage_usd"].as_f64().unwrap(),
        doc["cost"]["egress_usd"].as_f64().unwrap(),
        doc["cost"]["usd"].as_f64().unwrap(),
    );
    assert!(html.contains(&total), "{total} not in the page");
    assert!(html.contains("compute USD") && html.contains("idle GPU-s"));
    assert!(
        !html.contains("class=\"err\""),
        "no notes or failures expected"
    );

    // The LOD renders are real pictures: 320 × 320 PNGs (IHDR at bytes 16..24) that do not
    // compress like a blank image (a flat 320 × 320 PNG is under 1 kB).
    let png = base64_decode(srcs[0].trim_start_matches("data:image/png;base64,"));
    assert_eq!(&png[1..4], b"PNG");
    assert_eq!(&png[16..24], &[0, 0, 1, 64, 0, 0, 1, 64]);
    assert!(png.len() > 4000, "render looks blank: {} bytes", png.len());
}

#[test]
fn report_html_refuses_a_missing_output_folder_with_a_hint() {
    let sb = Sandbox::new();
    let id = run_avocado(&sb);
    std::fs::rename(sb.path().join("out"), sb.path().join("moved")).unwrap();
    let r = sb.kiln(&["report", &id, "--html", "page"]);
    assert!(!r.status.success());
    let err = stderr(&r);
    assert!(
        err.contains("out/avocado") && err.contains("--output-dir"),
        "{err}"
    );
    let r = sb.kiln(&[
        "report",
        &id,
        "--html",
        "page",
        "--output-dir",
        "moved/avocado",
    ]);
    ok(&r);
    assert!(sb.path().join("page/index.html").is_file());
}

#[test]
fn fox_report_html_shows_triptychs_and_training_curves() {
    let sb = Sandbox::new();
    let fox = dataset("capture-fox-instantngp");
    let job = sb.job(
        "fox",
        &format!(
            "name = \"fox\"\nkind = \"capture\"\ninput = \"{}\"\noutput = \"out/fox\"\n\
             [ingest]\nmax_side = 32\n[train]\nsteps = 45\nseed = 1\n",
            fox.display()
        ),
    );
    let o = sb.kiln(&["run", job.to_str().unwrap()]);
    ok(&o);
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sb.path().join("out/fox/metrics.json")).unwrap())
            .unwrap();
    // ⌈45 / 9⌉ = 5: held-out PSNR at steps 5, 10, …, 40, then the final value at 45.
    assert_eq!(metrics["psnr_curve"].as_array().unwrap().len(), 9);
    assert_eq!(
        metrics["splat_count_curve"].as_array().unwrap().len(),
        metrics["loss_curve"].as_array().unwrap().len()
    );

    let r = sb.kiln(&["report", &job_id(&o), "--html", "page"]);
    ok(&r);
    let html = std::fs::read_to_string(sb.path().join("page/index.html")).unwrap();
    let srcs = img_sources(&html);
    // 3 charts + colour bar + 7 held-out triptychs (every 8th of 50 frames) + the delivery's
    // PSNR-versus-bytes plot and 7 strips + tile map.
    assert_eq!(srcs.len(), 20, "{srcs:?}");
    assert_eq!(
        srcs.iter()
            .filter(|s| s.starts_with("data:image/svg+xml;base64,"))
            .count(),
        5,
        "3 charts, the PSNR-versus-bytes plot and the tile map"
    );
    assert!(html.contains("What the viewer will see") && html.contains("Publish loss"));
    assert!(html.contains("held-out PSNR") && html.contains("splat count"));
    assert_eq!(
        html.matches("<figcaption>").count(),
        15,
        "one caption per view in each section, and the plot's"
    );
    assert!(html.contains("dB, SSIM"));
    assert!(!html.contains("class=\"err\""), "no notes expected");
}

/// Standard base64 (RFC 4648 §4) decoding, enough for the test's own data URIs.
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let v: u32 = chunk
            .iter()
            .enumerate()
            .map(|(i, &c)| (val(c) as u32) << (18 - 6 * i))
            .sum();
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((v >> (16 - 8 * i)) as u8);
        }
    }
    out
}
