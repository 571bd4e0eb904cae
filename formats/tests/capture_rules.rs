//! Issue 44's capture rules as properties over generated captures of every layout the readers
//! know (instant-ngp `transforms.json`, Blender `transforms_{train,val,test}.json`, LLFF
//! `poses_bounds.npy`, COLMAP text model under `sparse/0`), each a few 4×3 photos:
//!
//! - rule 1, *any file of a capture names the capture*: reading what any of its files (or its
//!   model folder) names gives the same views as reading the folder;
//! - rule 3, *a bad camera is skipped, never fatal*: one invalid camera of each kind among N
//!   leaves N−1 views and one warning naming it; all invalid is one error naming them all.
//!
//! The workspace has no `proptest`; the generator is a seeded SplitMix64 loop, so a failure names
//! its seed and reproduces.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use kiln_formats::capture::{
    Capture, capture_root_of_key, name_capture, read_capture, read_named_capture,
};

/// SplitMix64: small, seeded, good enough to vary sizes, poses and which camera is bad.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A random unit quaternion (w, x, y, z), w ≥ 0.
    fn quaternion(&mut self) -> [f64; 4] {
        let mut q = [0.0; 4];
        for v in &mut q {
            *v = self.unit() * 2.0 - 1.0;
        }
        let n = q.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-3);
        let s = if q[0] < 0.0 { -1.0 } else { 1.0 };
        q.map(|v| s * v / n)
    }
}

/// Rotation matrix of a unit quaternion (w, x, y, z), rows first.
fn rotation(q: [f64; 4]) -> [[f64; 3]; 3] {
    let [w, x, y, z] = q;
    [
        [
            1.0 - 2.0 * (y * y + z * z),
            2.0 * (x * y - w * z),
            2.0 * (x * z + w * y),
        ],
        [
            2.0 * (x * y + w * z),
            1.0 - 2.0 * (x * x + z * z),
            2.0 * (y * z - w * x),
        ],
        [
            2.0 * (x * z - w * y),
            2.0 * (y * z + w * x),
            1.0 - 2.0 * (x * x + y * y),
        ],
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    Ngp,
    Blender,
    Llff,
    ColmapText,
}

const LAYOUTS: [Layout; 4] = [
    Layout::Ngp,
    Layout::Blender,
    Layout::Llff,
    Layout::ColmapText,
];

/// The ways one camera can be invalid.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Defect {
    NonFinite,
    Singular,
    Mirrored,
    NonRigid,
    MissingImage,
    UnreadableImage,
    /// A 4×4 matrix written transposed (last row holds the translation).
    Transposed,
    /// A focal length of 0 (LLFF row, COLMAP camera of its own).
    ZeroFocal,
    /// A COLMAP CAMERA_ID that `cameras.txt` does not list.
    UnknownCamera,
}

impl Defect {
    /// Whether `layout` can hold this defect, and its reader (not ingest) must catch it. COLMAP
    /// stores quaternions, which cannot be mirrored or scaled; LLFF pairs rows with the images
    /// present, so a missing image is a count mismatch, but it reads every image's header;
    /// the other readers never open an image whose size the poses state.
    fn caught_by_reader(self, layout: Layout) -> bool {
        match (self, layout) {
            (Defect::Mirrored | Defect::NonRigid, Layout::ColmapText) => false,
            (Defect::MissingImage, Layout::Llff) => false,
            (Defect::UnreadableImage, l) => l == Layout::Llff,
            (Defect::Transposed, l) => matches!(l, Layout::Ngp | Layout::Blender),
            (Defect::ZeroFocal, l) => matches!(l, Layout::Llff | Layout::ColmapText),
            (Defect::UnknownCamera, l) => l == Layout::ColmapText,
            _ => true,
        }
    }
}

const DEFECTS: [Defect; 9] = [
    Defect::NonFinite,
    Defect::Singular,
    Defect::Mirrored,
    Defect::NonRigid,
    Defect::MissingImage,
    Defect::UnreadableImage,
    Defect::Transposed,
    Defect::ZeroFocal,
    Defect::UnknownCamera,
];

/// A camera-to-world rotation (OpenCV axes) with `defect` applied to it.
fn damaged(r: [[f64; 3]; 3], defect: Option<Defect>) -> [[f64; 3]; 3] {
    let mut r = r;
    match defect {
        Some(Defect::Singular) => r.iter_mut().for_each(|row| row[0] = 0.0),
        Some(Defect::Mirrored) => r.iter_mut().for_each(|row| row[0] = -row[0]),
        Some(Defect::NonRigid) => r.iter_mut().flatten().for_each(|v| *v *= 1.5),
        _ => {}
    }
    r
}

/// A generated capture: its folder, and each frame's name as the reader names it (index order).
struct Generated {
    root: PathBuf,
    names: Vec<String>,
}

/// Write a capture of `layout` with `n` frames under `dir/capture`, camera `bad.0` carrying
/// defect `bad.1`.
fn generate(
    dir: &Path,
    layout: Layout,
    n: usize,
    rng: &mut Rng,
    bad: Option<(usize, Defect)>,
) -> Generated {
    let defect = |i: usize| bad.filter(|(b, _)| *b == i).map(|(_, d)| d);
    generate_with(dir, layout, n, rng, &defect)
}

/// [`generate`] with camera `i` carrying `defect(i)`.
fn generate_with(
    dir: &Path,
    layout: Layout,
    n: usize,
    rng: &mut Rng,
    defect: &dyn Fn(usize) -> Option<Defect>,
) -> Generated {
    let root = dir.join("capture");
    std::fs::create_dir_all(&root).unwrap();
    let poses: Vec<([f64; 4], [f64; 3])> = (0..n)
        .map(|_| {
            let c = [
                rng.unit() * 4.0 - 2.0,
                rng.unit() * 4.0 - 2.0,
                rng.unit() + 3.0,
            ];
            (rng.quaternion(), c)
        })
        .collect();
    let names = match layout {
        Layout::Ngp => write_ngp(&root, &poses, defect),
        Layout::Blender => write_blender(&root, &poses, defect),
        Layout::Llff => write_llff(&root, &poses, defect),
        Layout::ColmapText => write_colmap(&root, &poses, defect),
    };
    Generated { root, names }
}

/// A 4×3 PNG at `path` (parents created), garbage for an unreadable image, nothing when missing.
fn photo(path: &Path, defect: Option<Defect>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    match defect {
        Some(Defect::MissingImage) => {}
        Some(Defect::UnreadableImage) => std::fs::write(path, b"not a png at all").unwrap(),
        _ => image::RgbImage::from_pixel(4, 3, image::Rgb([90, 120, 200]))
            .save(path)
            .unwrap(),
    }
}

/// A nerfstudio `transform_matrix` (OpenGL camera-to-world) as JSON text, rows first (columns
/// first when `Transposed`); `NaN` as Python's `json.dump` writes it.
fn gl_matrix(q: [f64; 4], c: [f64; 3], defect: Option<Defect>) -> String {
    let r = damaged(rotation(q), defect);
    let mut m: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let t = if defect == Some(Defect::NonFinite) && i == 0 {
                "NaN".to_string()
            } else {
                c[i].to_string()
            };
            // OpenCV → OpenGL camera axes: y and z columns negated.
            vec![
                r[i][0].to_string(),
                (-r[i][1]).to_string(),
                (-r[i][2]).to_string(),
                t,
            ]
        })
        .collect();
    m.push(["0", "0", "0", "1"].map(String::from).to_vec());
    if defect == Some(Defect::Transposed) {
        m = (0..4)
            .map(|j| (0..4).map(|i| m[i][j].clone()).collect())
            .collect();
    }
    let rows: Vec<String> = m.iter().map(|r| format!("[{}]", r.join(", "))).collect();
    format!("[{}]", rows.join(", "))
}

fn write_ngp(
    root: &Path,
    poses: &[([f64; 4], [f64; 3])],
    defect: impl Fn(usize) -> Option<Defect>,
) -> Vec<String> {
    let mut frames = Vec::new();
    let mut names = Vec::new();
    for (i, (q, c)) in poses.iter().enumerate() {
        let name = format!("f{i:02}.png");
        photo(&root.join("images").join(&name), defect(i));
        frames.push(format!(
            r#"{{"file_path": "./images/{name}", "transform_matrix": {}}}"#,
            gl_matrix(*q, *c, defect(i))
        ));
        names.push(name);
    }
    let json = format!(
        r#"{{"fl_x": 5, "fl_y": 5, "w": 4, "h": 3, "frames": [{}]}}"#,
        frames.join(",\n")
    );
    std::fs::write(root.join("transforms.json"), json).unwrap();
    names
}

/// Blender layout: the last frame in `test`, the one before in `val`, the rest in `train`;
/// `file_path`s without extension, as NeRF-synthetic writes them.
fn write_blender(
    root: &Path,
    poses: &[([f64; 4], [f64; 3])],
    defect: impl Fn(usize) -> Option<Defect>,
) -> Vec<String> {
    let n = poses.len();
    let split_of = |i: usize| match i {
        i if i + 1 == n => "test",
        i if i + 2 == n => "val",
        _ => "train",
    };
    let mut names = Vec::new();
    for split in ["train", "val", "test"] {
        let mut frames = Vec::new();
        for (i, (q, c)) in poses
            .iter()
            .enumerate()
            .filter(|(i, _)| split_of(*i) == split)
        {
            photo(&root.join(split).join(format!("r_{i}.png")), defect(i));
            frames.push(format!(
                r#"{{"file_path": "./{split}/r_{i}", "transform_matrix": {}}}"#,
                gl_matrix(*q, *c, defect(i))
            ));
        }
        let json = format!(
            r#"{{"camera_angle_x": 0.7, "w": 4, "h": 3, "frames": [{}]}}"#,
            frames.join(",\n")
        );
        std::fs::write(root.join(format!("transforms_{split}.json")), json).unwrap();
    }
    for (i, _) in poses.iter().enumerate() {
        names.push(format!("{}/r_{i}.png", split_of(i)));
    }
    names
}

/// LLFF: rows `[down right back | centre | (h, w, f)]` then near, far, as f64 NPY.
fn write_llff(
    root: &Path,
    poses: &[([f64; 4], [f64; 3])],
    defect: impl Fn(usize) -> Option<Defect>,
) -> Vec<String> {
    let mut values = Vec::new();
    let mut names = Vec::new();
    for (i, (q, c)) in poses.iter().enumerate() {
        let name = format!("img_{i:02}.png");
        photo(&root.join("images").join(&name), defect(i));
        let r = damaged(rotation(*q), defect(i));
        for k in 0..3 {
            // OpenCV camera-to-world columns x (right), y (down), z (forward) → down, right, back.
            let focal = if defect(i) == Some(Defect::ZeroFocal) {
                0.0
            } else {
                5.0
            };
            let hwf = [3.0, 4.0, focal][k];
            let centre = if defect(i) == Some(Defect::NonFinite) && k == 0 {
                f64::NAN
            } else {
                c[k]
            };
            values.extend([r[k][1], r[k][0], -r[k][2], centre, hwf]);
        }
        values.extend([0.5, 10.0]);
        names.push(name);
    }
    std::fs::write(root.join("poses_bounds.npy"), npy(poses.len(), &values)).unwrap();
    names
}

/// A v1.0 NPY file of shape (n, 17), little-endian f64 (NEP 1 header, padded to 64 bytes).
fn npy(n: usize, values: &[f64]) -> Vec<u8> {
    let mut header = format!("{{'descr': '<f8', 'fortran_order': False, 'shape': ({n}, 17), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(header.len()).unwrap().to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    values
        .iter()
        .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out
}

/// COLMAP text model in `sparse/0`, photos in `images/`; a zero quaternion for a singular pose,
/// `nan` for a non-finite one, a camera of its own with fx = 0 for a zero focal, CAMERA_ID 99
/// for an unknown camera.
fn write_colmap(
    root: &Path,
    poses: &[([f64; 4], [f64; 3])],
    defect: impl Fn(usize) -> Option<Defect>,
) -> Vec<String> {
    let model = root.join("sparse/0");
    std::fs::create_dir_all(&model).unwrap();
    let mut cameras = "1 PINHOLE 4 3 5 5 2 1.5\n".to_string();
    let mut images = String::new();
    let mut names = Vec::new();
    for (i, (q, c)) in poses.iter().enumerate() {
        let name = format!("img_{i:02}.png");
        photo(&root.join("images").join(&name), defect(i));
        let q = match defect(i) {
            Some(Defect::Singular) => [0.0; 4],
            _ => *q,
        };
        let tx = match defect(i) {
            Some(Defect::NonFinite) => "nan".to_string(),
            _ => c[0].to_string(),
        };
        let camera = match defect(i) {
            Some(Defect::ZeroFocal) => {
                cameras.push_str(&format!("{} PINHOLE 4 3 0 5 2 1.5\n", i + 2));
                i + 2
            }
            Some(Defect::UnknownCamera) => 99,
            _ => 1,
        };
        images.push_str(&format!(
            "{} {} {} {} {} {tx} {} {} {camera} {name}\n\n",
            i + 1,
            q[0],
            q[1],
            q[2],
            q[3],
            c[1],
            c[2]
        ));
        names.push(name);
    }
    std::fs::write(model.join("images.txt"), images).unwrap();
    std::fs::write(model.join("cameras.txt"), cameras).unwrap();
    names
}

/// Every file under `dir`, and every folder below it, sorted.
fn every_path(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(every_path(&p));
        }
        out.push(p);
    }
    out.sort();
    out
}

/// Views as compared between two reads: name, pose and intrinsics of each frame.
fn views(c: &Capture) -> Vec<(String, [[f64; 4]; 4], [f64; 4])> {
    c.frames
        .iter()
        .map(|f| {
            let k = &f.intrinsics;
            (f.name.clone(), f.world_to_camera, [k.fx, k.fy, k.cx, k.cy])
        })
        .collect()
}

#[test]
fn every_file_of_a_capture_names_the_capture_and_reads_the_same_views() {
    for seed in 0..12u64 {
        for layout in LAYOUTS {
            let mut rng = Rng(seed * 31 + layout as u64);
            let n = 4 + rng.below(4);
            let tmp = tempfile::tempdir().unwrap();
            let g = generate(tmp.path(), layout, n, &mut rng, None);
            let folder = read_capture(&g.root).unwrap();
            assert_eq!(folder.frames.len(), n, "seed {seed} {layout:?}");
            // Every file, and every folder holding a COLMAP model (`sparse/0`).
            let model_dir = |p: &Path| p.join("cameras.txt").is_file();
            for path in every_path(&g.root)
                .into_iter()
                .filter(|p| p.is_file() || model_dir(p))
            {
                let at = format!("seed {seed} {layout:?} {}", path.display());
                let named = name_capture(&path);
                assert_eq!(named.root, g.root, "{at}");
                let key = path.to_string_lossy();
                if path.is_file() {
                    let (root, _) = capture_root_of_key(&key).unwrap();
                    assert_eq!(Path::new(&root), g.root, "{at}: by names alone");
                }
                let read = read_named_capture(&path).unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(views(&read), views(&folder), "{at}");
            }
        }
    }
}

#[test]
fn object_keys_name_their_capture_by_names_alone() {
    for (key, root, entry) in [
        ("scene/transforms.json", "scene", "transforms.json"),
        ("a/b/transforms_train.json", "a/b", "transforms_train.json"),
        ("room/poses_bounds.npy", "room", "poses_bounds.npy"),
        (
            "scene/sparse/0/cameras.bin",
            "scene",
            "sparse/0/cameras.bin",
        ),
        (
            "scene/sparse/12/images.txt",
            "scene",
            "sparse/12/images.txt",
        ),
        (
            "scene/colmap/sparse/0/points3D.bin",
            "scene",
            "colmap/sparse/0/points3D.bin",
        ),
        ("model/cameras.txt", "model", "cameras.txt"),
        ("scene/images/0001.JPG", "scene", ""),
        ("scene/images_4/0001.jpg", "scene", ""),
        ("lego/train/r_0.png", "lego", ""),
        ("photos/IMG_1.jpg", "photos", ""),
    ] {
        assert_eq!(
            capture_root_of_key(key),
            Some((root.to_string(), entry.to_string())),
            "{key}"
        );
    }
    assert_eq!(capture_root_of_key("scene/notes.txt"), None);
    assert_eq!(capture_root_of_key("scene"), None);
}

/// Warnings a closure logs, one string per event, captured through a `tracing` subscriber.
fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (out, text.lines().map(str::to_string).collect())
}

/// The name a skipped frame is listed by: a Blender `file_path` has no extension, and the reader
/// cannot know it when the image is missing.
fn skipped_name(layout: Layout, name: &str, defect: Defect) -> String {
    match (layout, defect) {
        (Layout::Blender, Defect::MissingImage) => name.trim_end_matches(".png").to_string(),
        _ => name.to_string(),
    }
}

#[test]
fn one_invalid_camera_of_each_kind_is_skipped_with_one_warning_naming_it() {
    for seed in 0..6u64 {
        for layout in LAYOUTS {
            for defect in DEFECTS.into_iter().filter(|d| d.caught_by_reader(layout)) {
                let mut rng = Rng(seed * 97 + layout as u64 * 7 + defect as u64);
                let n = 4 + rng.below(5);
                let bad = rng.below(n);
                let tmp = tempfile::tempdir().unwrap();
                let g = generate(tmp.path(), layout, n, &mut rng, Some((bad, defect)));
                let at = format!("seed {seed} {layout:?} {defect:?} camera {bad} of {n}");
                let (read, warnings) = warnings_of(|| read_capture(&g.root));
                let capture = read.unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(capture.frames.len(), n - 1, "{at}");
                let name = skipped_name(layout, &g.names[bad], defect);
                assert_eq!(capture.skipped, std::slice::from_ref(&name), "{at}");
                assert_eq!(warnings.len(), 1, "{at}: {warnings:?}");
                assert!(warnings[0].contains(&name), "{at}: {warnings:?}");
            }
        }
    }
}

#[test]
fn a_capture_whose_every_camera_is_invalid_is_one_error_naming_them_all() {
    for layout in LAYOUTS {
        let kinds: Vec<Defect> = DEFECTS
            .into_iter()
            .filter(|d| d.caught_by_reader(layout))
            .collect();
        let n = kinds.len().max(4);
        let tmp = tempfile::tempdir().unwrap();
        let every = |i: usize| Some(kinds[i % kinds.len()]);
        let g = generate_with(tmp.path(), layout, n, &mut Rng(layout as u64), &every);
        let err = read_capture(&g.root).unwrap_err().to_string();
        for (i, name) in g.names.iter().enumerate() {
            let name = skipped_name(layout, name, kinds[i % kinds.len()]);
            assert!(err.contains(&name), "{layout:?}: {err}");
        }
    }
}

/// List frame `i` of a generated capture a second time, under the same image name: in
/// `transforms.json` a copy of its frame, in `images.txt` a new IMAGE_ID with its NAME.
fn list_twice(g: &Generated, layout: Layout, i: usize) {
    match layout {
        Layout::Ngp => {
            let path = g.root.join("transforms.json");
            let text = std::fs::read_to_string(&path).unwrap();
            let copy = format!(
                r#"{{"file_path": "./images/{}", "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 4], [0, 0, 0, 1]]}}"#,
                g.names[i]
            );
            let text = text.replacen("\"frames\": [", &format!("\"frames\": [{copy},\n"), 1);
            std::fs::write(path, text).unwrap();
        }
        Layout::ColmapText => {
            let path = g.root.join("sparse/0/images.txt");
            let mut text = std::fs::read_to_string(&path).unwrap();
            text.push_str(&format!("999 1 0 0 0 0 0 4 1 {}\n\n", g.names[i]));
            std::fs::write(path, text).unwrap();
        }
        _ => unreachable!("LLFF pairs rows with images; Blender splits are named apart"),
    }
}

#[test]
fn a_frame_listed_twice_is_kept_once_with_one_warning_naming_it() {
    for seed in 0..6u64 {
        for layout in [Layout::Ngp, Layout::ColmapText] {
            let mut rng = Rng(seed * 13 + layout as u64);
            let n = 4 + rng.below(4);
            let twice = rng.below(n);
            let tmp = tempfile::tempdir().unwrap();
            let g = generate(tmp.path(), layout, n, &mut rng, None);
            let folder = read_capture(&g.root).unwrap();
            list_twice(&g, layout, twice);
            let at = format!("seed {seed} {layout:?} frame {twice} of {n}");
            let (read, warnings) = warnings_of(|| read_capture(&g.root));
            let capture = read.unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(capture.frames.len(), n, "{at}");
            assert_eq!(capture.skipped, [g.names[twice].clone()], "{at}");
            assert_eq!(warnings.len(), 1, "{at}: {warnings:?}");
            assert!(warnings[0].contains(&g.names[twice]), "{at}: {warnings:?}");
            assert!(warnings[0].contains("listed twice"), "{at}: {warnings:?}");
            // The first listing is kept: for COLMAP the original line (the copy comes last).
            if layout == Layout::ColmapText {
                assert_eq!(views(&capture), views(&folder), "{at}");
            }
        }
    }
}

/// `images.txt` rewritten from a generated one (image lines each followed by an empty POINTS2D
/// line, or an earlier rewrite): per image, its POINTS2D line left out (`drop`), or holding 0 to
/// 2 triples; with the header comment stating `stated` images when given.
fn rewrite_images_txt(
    g: &Generated,
    rng: &mut Rng,
    drop: &dyn Fn(usize) -> bool,
    stated: Option<usize>,
) {
    let path = g.root.join("sparse/0/images.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut out = String::from("# Image list with two lines of data per image:\n");
    if let Some(n) = stated {
        out.push_str(&format!(
            "# Number of images: {n}, mean observations per image: 0\n"
        ));
    }
    // Image lines only (10 fields): the file may be an earlier rewrite, with comments and points.
    let image_lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.split_whitespace().count() == 10);
    for (i, line) in image_lines.enumerate() {
        out.push_str(line);
        out.push('\n');
        if drop(i) {
            continue;
        }
        let triples = rng.below(3);
        let points: Vec<String> = (0..triples)
            .map(|k| {
                format!(
                    "{}.5 {}.25 {}",
                    k + 1,
                    k + 2,
                    if k == 0 { -1 } else { k as i64 }
                )
            })
            .collect();
        out.push_str(&points.join(" "));
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn images_txt_without_points2d_lines_reads_every_image_with_one_warning() {
    for seed in 0..8u64 {
        let mut rng = Rng(seed * 7 + 3);
        let n = 4 + rng.below(9);
        let tmp = tempfile::tempdir().unwrap();
        let g = generate(tmp.path(), Layout::ColmapText, n, &mut rng, None);
        let folder = read_capture(&g.root).unwrap();
        // Left out after every image, after some (seeded), after none.
        let pattern = rng.next();
        let every = |_: usize| true;
        let some = move |i: usize| pattern >> (i % 64) & 1 == 1;
        let none = |_: usize| false;
        let cases: [(&str, &dyn Fn(usize) -> bool); 3] =
            [("none", &every), ("some", &some), ("all present", &none)];
        for (what, drop) in cases {
            // The last image's line has nothing after it to be mistaken for.
            let dropped = (0..n - 1).any(drop);
            let at = format!("seed {seed} POINTS2D {what}, {n} images");
            rewrite_images_txt(&g, &mut rng, drop, Some(n));
            let (read, warnings) = warnings_of(|| read_capture(&g.root));
            let capture = read.unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(views(&capture), views(&folder), "{at}");
            assert_eq!(warnings.len(), usize::from(dropped), "{at}: {warnings:?}");
            if dropped {
                assert!(
                    warnings[0].contains("images.txt has no POINTS2D line"),
                    "{at}"
                );
            }
        }
    }
}

#[test]
fn images_txt_whose_header_count_differs_is_warned_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let g = generate(tmp.path(), Layout::ColmapText, 5, &mut Rng(5), None);
    rewrite_images_txt(&g, &mut Rng(6), &|_| false, Some(7));
    let (read, warnings) = warnings_of(|| read_capture(&g.root));
    assert_eq!(read.unwrap().frames.len(), 5);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("images.txt") && warnings[0].contains("Number of images: 7"),
        "{warnings:?}"
    );
}
