//! Tile content for the tileset checker: sniff the format by magic, split GLB and b3dm, and
//! summarise a glTF for the checks — POSITION extents of every mesh primitive in the tile frame,
//! triangle and splat counts, the extensions it uses, and the SPZ payload header of
//! `KHR_gaussian_splatting_compression_spz_2` primitives.
//!
//! Sources: glTF 2.0 §3.6.2 (accessor `min`/`max` are raw stored values even when `normalized`),
//! §3.7.2 (primitive modes), §3.5 (node TRS / matrix), GLB §4.4; OGC 3D Tiles 1.1 §"glTF
//! transforms" (content is rotated Y-up → Z-up before tile transforms) and the 1.0 Batched 3D
//! Model spec (28-byte header, `RTC_CENTER`); `KHR_gaussian_splatting` (attributes, SH degrees)
//! and the draft `KHR_gaussian_splatting_compression_spz_2`; the SPZ header as in
//! nianticlabs/spz (shared/research/tiles-formats.md §2.4).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::volume::{self, Mat4};
use super::{CheckKind, Severity};
use crate::splats::glb::{KHR_GAUSSIAN_SPLATTING, KHR_GAUSSIAN_SPLATTING_SPZ_2};
use crate::tiles::tileset::Y_UP_TO_Z_UP;

/// What the first bytes of a content file say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContentFormat {
    Glb,
    /// glTF JSON (`.gltf`).
    GltfJson,
    B3dm,
    /// An external tileset JSON.
    Tileset,
    /// A legacy or unknown format the checker does not open (`i3dm`, `pnts`, `cmpt`, …).
    Other(&'static str),
}

/// Sniff the content format from its first bytes (3D Tiles 1.1 §"Content": the format is
/// detected by magic; JSON with a `root` is an external tileset).
pub(super) fn sniff(bytes: &[u8], json: Option<&Value>) -> ContentFormat {
    match bytes.get(..4) {
        Some(b"glTF") => ContentFormat::Glb,
        Some(b"b3dm") => ContentFormat::B3dm,
        Some(b"i3dm") => ContentFormat::Other("i3dm"),
        Some(b"pnts") => ContentFormat::Other("pnts"),
        Some(b"cmpt") => ContentFormat::Other("cmpt"),
        Some(b"subt") => ContentFormat::Other("subtree"),
        _ => match json {
            Some(v) if v.get("root").is_some() => ContentFormat::Tileset,
            Some(v) if v.get("asset").is_some() => ContentFormat::GltfJson,
            _ => ContentFormat::Other("unknown"),
        },
    }
}

/// A content-level finding, placed on its tile by the caller.
#[derive(Debug, Clone)]
pub(super) struct Issue {
    pub severity: Severity,
    pub kind: CheckKind,
    pub message: String,
    pub fix: String,
}

fn issue(
    severity: Severity,
    kind: CheckKind,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> Issue {
    Issue {
        severity,
        kind,
        message: message.into(),
        fix: fix.into(),
    }
}

/// What a primitive draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PrimitiveKind {
    /// Triangles, strips or fans.
    Triangles,
    /// Gaussian splats (`KHR_gaussian_splatting`).
    Splats,
    /// Points, lines and anything else.
    Other,
}

/// Extents of one drawn primitive (one node instance of a mesh primitive).
#[derive(Debug, Clone)]
pub(super) struct PrimitiveExtent {
    /// e.g. `node 0 mesh 0 primitive 1`.
    pub label: String,
    pub kind: PrimitiveKind,
    /// glTF node-local → tile frame (RTC · Y-up→Z-up · node world matrix).
    pub to_tile: Mat4,
    /// POSITION `min` / `max` after dequantisation, node-local, metres.
    pub min: [f64; 3],
    pub max: [f64; 3],
    /// Every position (node-local) when it could be read: float data in a plain buffer view, or
    /// decoded SPZ means. Used when the corners of `min`/`max` are not conclusive.
    pub points: Option<Vec<[f64; 3]>>,
    /// For decoded splats: per-splat 3σ boxes (node-local min, max), scales shrunk by SPZ's
    /// log-scale quantisation step so rounding alone never fails.
    pub sigma3: Option<Vec<([f64; 3], [f64; 3])>>,
    /// Extra tolerance (metres) for quantised positions (SPZ: one fixed-point step).
    pub quantum_m: f64,
}

/// Everything the checks need from one glTF content.
#[derive(Debug, Clone, Default)]
pub(super) struct GltfSummary {
    pub primitives: Vec<PrimitiveExtent>,
    pub triangles: u64,
    pub splats: u64,
    pub extensions_used: Vec<String>,
    pub extensions_required: Vec<String>,
    /// A primitive carries `KHR_gaussian_splatting` / its SPZ child extension.
    pub uses_splats: bool,
    pub uses_spz: bool,
    pub issues: Vec<Issue>,
}

/// GLB chunk types (glTF 2.0 §4.4.3).
const CHUNK_JSON: u32 = 0x4E4F_534A;
const CHUNK_BIN: u32 = 0x004E_4942;

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Split a GLB into its JSON and optional BIN chunk.
///
/// # Errors
/// A message for a wrong magic or version, a declared length past the end, or a missing JSON chunk.
pub(super) fn split_glb(bytes: &[u8]) -> Result<(Value, Option<&[u8]>), String> {
    if bytes.get(..4) != Some(b"glTF") {
        return Err("not a GLB (magic is not `glTF`)".into());
    }
    let version = u32_at(bytes, 4).ok_or("truncated GLB header")?;
    if version != 2 {
        return Err(format!("GLB version {version}, expected 2 (glTF 2.0)"));
    }
    let total = u32_at(bytes, 8).ok_or("truncated GLB header")? as usize;
    if total > bytes.len() {
        return Err(format!(
            "GLB header says {total} bytes, file has {}",
            bytes.len()
        ));
    }
    let mut at = 12;
    let mut json = None;
    let mut bin = None;
    while at + 8 <= total {
        let len = u32_at(bytes, at).unwrap_or(0) as usize;
        let kind = u32_at(bytes, at + 4).unwrap_or(0);
        let data = bytes
            .get(at + 8..at + 8 + len)
            .ok_or_else(|| format!("GLB chunk at byte {at} runs past the end"))?;
        match kind {
            CHUNK_JSON if json.is_none() => {
                json = Some(
                    serde_json::from_slice::<Value>(data)
                        .map_err(|e| format!("GLB JSON chunk: {e}"))?,
                )
            }
            CHUNK_BIN if bin.is_none() => bin = Some(data),
            _ => {}
        }
        at += 8 + len;
    }
    Ok((json.ok_or("GLB has no JSON chunk")?, bin))
}

/// Split a b3dm into its embedded GLB and the `RTC_CENTER` translation (tile frame, metres).
///
/// # Errors
/// A message for a truncated header, lengths past the end, or a malformed feature table JSON.
pub(super) fn split_b3dm(bytes: &[u8]) -> Result<(&[u8], Option<[f64; 3]>), String> {
    let field = |o| u32_at(bytes, o).ok_or("truncated b3dm header (28 bytes expected)");
    let (ft_json, ft_bin, bt_json, bt_bin) = (field(12)?, field(16)?, field(20)?, field(24)?);
    let start = 28usize;
    let glb_at = start + (ft_json + ft_bin + bt_json + bt_bin) as usize;
    if glb_at > bytes.len() {
        return Err(format!(
            "b3dm table lengths point past the end (GLB at {glb_at}, file {} bytes)",
            bytes.len()
        ));
    }
    let mut rtc = None;
    if ft_json > 0 {
        let ft: Value = serde_json::from_slice(&bytes[start..start + ft_json as usize])
            .map_err(|e| format!("b3dm feature table JSON: {e}"))?;
        if let Some(c) = ft.get("RTC_CENTER") {
            rtc = Some(volume::numbers::<3>(c).map_err(|e| format!("RTC_CENTER: {e}"))?);
        }
    }
    Ok((&bytes[glb_at..], rtc))
}

/// Inputs of [`summarise_gltf`] besides the JSON.
pub(super) struct GltfSource<'a> {
    /// The GLB BIN chunk, if any.
    pub bin: Option<&'a [u8]>,
    /// Folder of the content file, for external buffers.
    pub dir: &'a Path,
    /// Tile-frame translation applied after Y-up→Z-up (b3dm `RTC_CENTER`), identity otherwise.
    pub pre: Mat4,
    /// Image files already decoded in this tileset and what was wrong with each (textures are
    /// shared by many tiles: each file is decoded once).
    pub images: &'a ImageCache,
}

/// Image files decoded so far: path → `Err(why)` when the file is missing or does not decode.
pub(super) type ImageCache =
    std::cell::RefCell<std::collections::HashMap<PathBuf, Result<(), String>>>;

/// Summarise a glTF 2.0 JSON for the checks (see [`GltfSummary`]). Never fails: what cannot be
/// read becomes an [`Issue`].
pub(super) fn summarise_gltf(json: &Value, src: &GltfSource) -> GltfSummary {
    let mut s = GltfSummary {
        extensions_used: strings(json.get("extensionsUsed")),
        extensions_required: strings(json.get("extensionsRequired")),
        ..Default::default()
    };
    let version = json
        .pointer("/asset/version")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !version.starts_with("2.") {
        s.issues.push(issue(
            Severity::Warning,
            CheckKind::Content,
            format!("glTF asset.version is {version:?}; only glTF 2.0 content is inspected"),
            "convert the content to glTF 2.0 (3D Tiles 1.1 content is glTF 2.0)",
        ));
        return s;
    }
    for r in &s.extensions_required {
        if !s.extensions_used.contains(r) {
            s.issues.push(issue(
                Severity::Error,
                CheckKind::Extensions,
                format!("glTF extensionsRequired lists {r} but extensionsUsed does not"),
                format!("add {r} to the glTF extensionsUsed"),
            ));
        }
    }
    check_images(json, src, &mut s.issues);
    let base = volume::mul(&src.pre, &Y_UP_TO_Z_UP);
    let nodes = json.get("nodes").and_then(Value::as_array);
    let Some(nodes) = nodes else {
        return s;
    };
    // Roots: the default scene's nodes, else every node no other node lists as a child.
    let scene = json.get("scene").and_then(Value::as_u64).unwrap_or(0) as usize;
    let roots: Vec<usize> = match json.pointer(&format!("/scenes/{scene}/nodes")) {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as usize)
            .collect(),
        _ => {
            let mut child = vec![false; nodes.len()];
            for n in nodes {
                for c in n
                    .get("children")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(c) = c.as_u64().and_then(|c| child.get_mut(c as usize)) {
                        *c = true;
                    }
                }
            }
            (0..nodes.len()).filter(|&i| !child[i]).collect()
        }
    };
    let mut stack: Vec<(usize, Mat4, usize)> = roots.into_iter().map(|r| (r, base, 0)).collect();
    while let Some((ni, parent, depth)) = stack.pop() {
        let Some(node) = nodes.get(ni) else {
            s.issues.push(issue(
                Severity::Error,
                CheckKind::Content,
                format!("node index {ni} does not exist ({} nodes)", nodes.len()),
                "fix the scene/children node indices",
            ));
            continue;
        };
        if depth > 64 {
            s.issues.push(issue(
                Severity::Error,
                CheckKind::Content,
                "node hierarchy deeper than 64 levels (a cycle?)",
                "make the node graph a tree",
            ));
            break;
        }
        let world = volume::mul(&parent, &node_matrix(node));
        if let Some(mi) = node.get("mesh").and_then(Value::as_u64) {
            summarise_mesh(json, src, &mut s, ni, mi as usize, &world);
        }
        for c in node
            .get("children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_u64() {
                stack.push((c as usize, world, depth + 1));
            }
        }
    }
    if s.uses_splats
        && !s
            .extensions_used
            .iter()
            .any(|e| e == KHR_GAUSSIAN_SPLATTING)
    {
        s.issues.push(issue(
            Severity::Error,
            CheckKind::Extensions,
            format!(
                "a primitive uses {KHR_GAUSSIAN_SPLATTING} but glTF extensionsUsed does not list it"
            ),
            format!("add {KHR_GAUSSIAN_SPLATTING} to the glTF extensionsUsed"),
        ));
    }
    if s.uses_spz {
        for (list, name) in [
            (&s.extensions_used, "extensionsUsed"),
            (&s.extensions_required, "extensionsRequired"),
        ] {
            if !list.iter().any(|e| e == KHR_GAUSSIAN_SPLATTING_SPZ_2) {
                s.issues.push(issue(
                    Severity::Error,
                    CheckKind::Extensions,
                    format!("a primitive uses {KHR_GAUSSIAN_SPLATTING_SPZ_2} but glTF {name} does not list it (its accessors have no uncompressed fallback)"),
                    format!("add {KHR_GAUSSIAN_SPLATTING_SPZ_2} to the glTF {name}"),
                ));
            }
        }
    }
    s
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A node's local matrix: `matrix` (column-major) or T·R·S (glTF 2.0 §3.5.3).
fn node_matrix(node: &Value) -> Mat4 {
    if let Some(m) = node
        .get("matrix")
        .and_then(|m| volume::numbers::<16>(m).ok())
    {
        return m;
    }
    let t = node
        .get("translation")
        .and_then(|v| volume::numbers::<3>(v).ok())
        .unwrap_or([0.0; 3]);
    let r = node
        .get("rotation")
        .and_then(|v| volume::numbers::<4>(v).ok())
        .unwrap_or([0.0, 0.0, 0.0, 1.0]);
    let sc = node
        .get("scale")
        .and_then(|v| volume::numbers::<3>(v).ok())
        .unwrap_or([1.0; 3]);
    volume::trs(t, r, sc)
}

/// glTF accessor component types (glTF 2.0 §3.6.2.2) → (divisor when normalised, signed).
fn component(ty: u64) -> Option<(f64, bool)> {
    match ty {
        5120 => Some((127.0, true)),
        5121 => Some((255.0, false)),
        5122 => Some((32767.0, true)),
        5123 => Some((65535.0, false)),
        5125 => Some((u32::MAX as f64, false)),
        5126 => Some((1.0, true)),
        _ => None,
    }
}

fn summarise_mesh(
    json: &Value,
    src: &GltfSource,
    s: &mut GltfSummary,
    node: usize,
    mesh: usize,
    world: &Mat4,
) {
    let Some(prims) = json
        .pointer(&format!("/meshes/{mesh}/primitives"))
        .and_then(Value::as_array)
    else {
        s.issues.push(issue(
            Severity::Error,
            CheckKind::Content,
            format!(
                "node {node} references mesh {mesh}, which does not exist or has no primitives"
            ),
            "fix the node's mesh index",
        ));
        return;
    };
    for (pi, prim) in prims.iter().enumerate() {
        let label = format!("node {node} mesh {mesh} primitive {pi}");
        summarise_primitive(json, src, s, prim, &label, world);
    }
}

/// One primitive of a mesh (`label` names it): its count of splats or triangles, its POSITION
/// bounds and points (and, for SPZ splats, their 3σ boxes) in the tile frame (`world`), checked
/// as it goes.
fn summarise_primitive(
    json: &Value,
    src: &GltfSource,
    s: &mut GltfSummary,
    prim: &Value,
    label: &str,
    world: &Mat4,
) {
    let label = label.to_string();
    let splat_ext = prim.pointer(&format!("/extensions/{KHR_GAUSSIAN_SPLATTING}"));
    let mode = prim.get("mode").and_then(Value::as_u64).unwrap_or(4);
    let kind = if splat_ext.is_some() {
        PrimitiveKind::Splats
    } else if (4..=6).contains(&mode) {
        PrimitiveKind::Triangles
    } else {
        PrimitiveKind::Other
    };
    let Some(pos_index) = prim.pointer("/attributes/POSITION").and_then(Value::as_u64) else {
        s.issues.push(issue(
            Severity::Warning,
            CheckKind::Content,
            format!("{label} has no POSITION attribute; its extent is not checked"),
            "give every primitive a POSITION accessor",
        ));
        return;
    };
    let Some(acc) = json.pointer(&format!("/accessors/{pos_index}")) else {
        s.issues.push(issue(
            Severity::Error,
            CheckKind::Content,
            format!("{label}: POSITION accessor {pos_index} does not exist"),
            "fix the attribute's accessor index",
        ));
        return;
    };
    let count = acc.get("count").and_then(Value::as_u64).unwrap_or(0);
    match kind {
        PrimitiveKind::Splats => s.splats += count,
        PrimitiveKind::Triangles => {
            let n = prim
                .get("indices")
                .and_then(Value::as_u64)
                .and_then(|i| json.pointer(&format!("/accessors/{i}/count")))
                .and_then(Value::as_u64)
                .unwrap_or(count);
            s.triangles += if mode == 4 {
                n / 3
            } else {
                n.saturating_sub(2)
            };
        }
        PrimitiveKind::Other => {}
    }
    let ctype = acc
        .get("componentType")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let normalized = acc
        .get("normalized")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some((divisor, signed)) = component(ctype) else {
        s.issues.push(issue(
            Severity::Error,
            CheckKind::Content,
            format!("{label}: POSITION componentType {ctype} is not a glTF component type"),
            "write POSITION as float (5126) or a KHR_mesh_quantization integer type",
        ));
        return;
    };
    let dequant = |x: f64| {
        if normalized && ctype != 5126 {
            let v = x / divisor;
            if signed { v.max(-1.0) } else { v }
        } else {
            x
        }
    };
    let (min, max) = match (
        acc.get("min").and_then(|v| volume::numbers::<3>(v).ok()),
        acc.get("max").and_then(|v| volume::numbers::<3>(v).ok()),
    ) {
        (Some(a), Some(b)) => (a.map(dequant), b.map(dequant)),
        _ => {
            s.issues.push(issue(
                Severity::Error,
                CheckKind::Content,
                format!("{label}: POSITION accessor {pos_index} has no finite 3-number min/max (glTF 2.0 §3.7.2.1 requires them)"),
                "write POSITION min and max",
            ));
            return;
        }
    };
    let mut extent = PrimitiveExtent {
        label: label.clone(),
        kind,
        to_tile: *world,
        min,
        max,
        points: None,
        sigma3: None,
        quantum_m: 0.0,
    };
    if ctype == 5126 {
        extent.points = read_float_vec3(json, src, acc, count as usize);
    }
    if let Some(ext) = splat_ext {
        s.uses_splats = true;
        if mode != 0 {
            s.issues.push(issue(
                Severity::Warning,
                CheckKind::Content,
                format!("{label}: {KHR_GAUSSIAN_SPLATTING} primitive has mode {mode}, expected 0 (POINTS)"),
                "write splat primitives with mode 0",
            ));
        }
        let sh_degree = attribute_sh_degree(prim, &label, &mut s.issues);
        match ext.pointer(&format!("/extensions/{KHR_GAUSSIAN_SPLATTING_SPZ_2}")) {
            Some(spz) => {
                s.uses_spz = true;
                check_spz(
                    json,
                    src,
                    spz,
                    &SpzPrimitive {
                        label: &label,
                        count,
                        sh_degree,
                    },
                    &mut extent,
                    &mut s.issues,
                );
            }
            None => s.issues.push(issue(
                Severity::Warning,
                CheckKind::Extensions,
                format!("{label}: uncompressed {KHR_GAUSSIAN_SPLATTING} (CesiumJS 1.145 renders splats only through {KHR_GAUSSIAN_SPLATTING_SPZ_2})"),
                format!("compress the splats with {KHR_GAUSSIAN_SPLATTING_SPZ_2} (SPZ v3)"),
            )),
        }
    }
    s.primitives.push(extent);
}

/// Every texture's image must exist and decode (a missing or corrupt texture renders black or
/// stops a viewer's tile load): `textures[t].source` (and the `EXT_texture_webp` /
/// `KHR_texture_basisu` sources) must name an image, and each image, by file or buffer view,
/// must decode as PNG, JPEG or WebP; KTX2 files are checked for their container signature only.
/// `data:` and remote URIs are not read.
fn check_images(json: &Value, src: &GltfSource, issues: &mut Vec<Issue>) {
    let images = json
        .get("images")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (t, texture) in json
        .get("textures")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let sources = [
            ("source", texture.get("source")),
            (
                "extensions.EXT_texture_webp.source",
                texture.pointer("/extensions/EXT_texture_webp/source"),
            ),
            (
                "extensions.KHR_texture_basisu.source",
                texture.pointer("/extensions/KHR_texture_basisu/source"),
            ),
        ];
        for (field, v) in sources {
            if let Some(i) = v.and_then(Value::as_u64)
                && i as usize >= images.len()
            {
                issues.push(issue(
                    Severity::Error,
                    CheckKind::Content,
                    format!(
                        "textures[{t}].{field} is image {i}, but the glTF has {} images",
                        images.len()
                    ),
                    format!("point textures[{t}].{field} at an existing image"),
                ));
            }
        }
    }
    for (i, image) in images.iter().enumerate() {
        if let Some(uri) = image.get("uri").and_then(Value::as_str) {
            if uri.starts_with("data:") || uri.contains("://") {
                continue;
            }
            let clean = uri.split(['?', '#']).next().unwrap_or(uri);
            let path = super::normalize(&src.dir.join(crate::uri::percent_decode(clean)));
            let cached = src.images.borrow().get(&path).cloned();
            let result = cached.unwrap_or_else(|| {
                let r = std::fs::read(&path)
                    .map_err(|e| format!("cannot be read ({e})"))
                    .and_then(|bytes| image_decodes(&bytes));
                src.images.borrow_mut().insert(path, r.clone());
                r
            });
            if let Err(why) = result {
                issues.push(issue(
                    Severity::Error,
                    CheckKind::Content,
                    format!("images[{i}] uri {uri}: {why}"),
                    format!("write the texture file or fix images[{i}].uri"),
                ));
            }
        } else if let Some(view) = image.get("bufferView").and_then(Value::as_u64) {
            if let Err(why) = buffer_view(json, src, view).and_then(|b| image_decodes(&b)) {
                issues.push(issue(
                    Severity::Error,
                    CheckKind::Content,
                    format!("images[{i}] (bufferView {view}): {why}"),
                    "re-export the content with its textures",
                ));
            }
        } else {
            issues.push(issue(
                Severity::Error,
                CheckKind::Content,
                format!("images[{i}] has neither uri nor bufferView"),
                format!("give images[{i}] a uri or a bufferView (glTF 2.0 §5.18)"),
            ));
        }
    }
}

/// KTX2 container signature (KTX 2.0 specification §3.1).
const KTX2_SIGNATURE: &[u8; 12] = b"\xABKTX 20\xBB\r\n\x1A\n";

/// Whether `bytes` decode as PNG, JPEG or WebP (fully: a truncated file fails), or carry the
/// KTX2 signature.
fn image_decodes(bytes: &[u8]) -> Result<(), String> {
    if bytes.starts_with(KTX2_SIGNATURE) {
        return Ok(());
    }
    image::load_from_memory(bytes).map(|_| ()).map_err(|e| {
        // Decoder messages can span lines; a finding is one line.
        let why = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        format!("does not decode as PNG, JPEG or WebP ({why})")
    })
}

/// The bytes of a buffer view: the GLB BIN chunk for a buffer without `uri`, else the external file.
fn buffer_view<'a>(
    json: &Value,
    src: &'a GltfSource,
    view: u64,
) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    let bv = json
        .pointer(&format!("/bufferViews/{view}"))
        .ok_or_else(|| format!("bufferView {view} does not exist"))?;
    let buffer = bv.get("buffer").and_then(Value::as_u64).unwrap_or(0);
    let offset = bv.get("byteOffset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let len = bv.get("byteLength").and_then(Value::as_u64).unwrap_or(0) as usize;
    let b = json
        .pointer(&format!("/buffers/{buffer}"))
        .ok_or_else(|| format!("buffer {buffer} does not exist"))?;
    let data: std::borrow::Cow<'a, [u8]> = match b.get("uri").and_then(Value::as_str) {
        None => std::borrow::Cow::Borrowed(src.bin.ok_or("the GLB has no BIN chunk")?),
        Some(uri) if uri.starts_with("data:") => {
            return Err("data: URI buffers are not read".into());
        }
        Some(uri) => std::borrow::Cow::Owned(
            std::fs::read(src.dir.join(uri)).map_err(|e| format!("buffer {uri}: {e}"))?,
        ),
    };
    match data {
        std::borrow::Cow::Borrowed(d) => d
            .get(offset..offset + len)
            .map(std::borrow::Cow::Borrowed)
            .ok_or_else(|| {
                format!(
                    "bufferView {view} (bytes {offset}..{}) lies outside its buffer ({} bytes)",
                    offset + len,
                    d.len()
                )
            }),
        std::borrow::Cow::Owned(d) => d
            .get(offset..offset + len)
            .map(|x| std::borrow::Cow::Owned(x.to_vec()))
            .ok_or_else(|| format!("bufferView {view} lies outside its buffer")),
    }
}

/// Float VEC3 positions when they sit plainly in a buffer view (not sparse, not meshopt-compressed).
fn read_float_vec3(
    json: &Value,
    src: &GltfSource,
    acc: &Value,
    count: usize,
) -> Option<Vec<[f64; 3]>> {
    if acc.get("sparse").is_some() || acc.get("type").and_then(Value::as_str) != Some("VEC3") {
        return None;
    }
    let view = acc.get("bufferView").and_then(Value::as_u64)?;
    if json
        .pointer(&format!("/bufferViews/{view}/extensions"))
        .is_some()
    {
        return None;
    }
    let stride = json
        .pointer(&format!("/bufferViews/{view}/byteStride"))
        .and_then(Value::as_u64)
        .unwrap_or(12) as usize;
    let offset = acc.get("byteOffset").and_then(Value::as_u64).unwrap_or(0) as usize;
    let data = buffer_view(json, src, view).ok()?;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let at = offset + i * stride;
        let f = |k: usize| {
            data.get(at + 4 * k..at + 4 * k + 4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
        };
        out.push([f(0)?, f(1)?, f(2)?]);
    }
    Some(out)
}

/// SH degree from the `KHR_gaussian_splatting:SH_DEGREE_l_COEF_n` attributes, with an issue when
/// a degree is incomplete or a lower one is missing.
fn attribute_sh_degree(prim: &Value, label: &str, issues: &mut Vec<Issue>) -> u32 {
    let prefix = format!("{KHR_GAUSSIAN_SPLATTING}:SH_DEGREE_");
    let mut coefs = [0u32; 5];
    for name in prim
        .get("attributes")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let mut it = rest.split("_COEF_");
        if let (Some(Ok(l)), Some(Ok(n))) = (
            it.next().map(str::parse::<usize>),
            it.next().map(str::parse::<u32>),
        ) && l < coefs.len()
            && n < 2 * l as u32 + 1
        {
            coefs[l] += 1;
        }
    }
    let degree = (0..coefs.len()).rev().find(|&l| coefs[l] > 0).unwrap_or(0);
    // Degree 0 (DC) may come as COLOR_0 instead (the SPZ path of CesiumJS reads it there).
    for (l, &have) in coefs.iter().enumerate().take(degree + 1).skip(1) {
        let want = 2 * l as u32 + 1;
        if have != want {
            issues.push(issue(
                Severity::Error,
                CheckKind::Spz,
                format!("{label}: SH degree {l} has {have} of its {want} SH_DEGREE_{l}_COEF_n attributes (degree {degree} present)"),
                "write every coefficient of every degree up to the highest one",
            ));
        }
    }
    degree as u32
}

/// SPZ log-scale quantisation: u8 = round((ln s + 10) · 16), so decoded ln s is within 1/32.
const SPZ_LOG_SCALE_STEP_HALF: f64 = 1.0 / 32.0;

/// 3σ: the splat extent Kiln's tiler and the rasterizer use.
const EXTENT_SIGMAS: f64 = 3.0;

/// What the glTF says of a primitive whose splats an SPZ payload holds.
struct SpzPrimitive<'a> {
    /// `meshes[m].primitives[p]`, for messages.
    label: &'a str,
    /// The POSITION accessor's count.
    count: u64,
    /// The degree the `SH_DEGREE_l_COEF_n` attributes give.
    sh_degree: u32,
}

/// The fix for every SPZ framing problem.
const FIX_SPZ_VERSION: &str = "write SPZ version 3 (gzip) — CesiumJS 1.145 reads gzip SPZ v2/v3 only (e.g. splat-transform --spz-version 3)";

/// Check the SPZ payload of a `KHR_gaussian_splatting_compression_spz_2` primitive: gzip framing,
/// magic `NGSP`, version 2 or 3 (CesiumJS 1.145 fails on v4), point count = accessor count, SH
/// degree = the attributes' degree; then decode it for exact means and 3σ boxes.
fn check_spz(
    json: &Value,
    src: &GltfSource,
    spz: &Value,
    prim: &SpzPrimitive<'_>,
    extent: &mut PrimitiveExtent,
    issues: &mut Vec<Issue>,
) {
    let Some(bytes) = spz_payload(json, src, spz, prim.label, issues) else {
        return;
    };
    let Some(fractional_bits) = check_spz_header(&bytes, prim, issues) else {
        return;
    };
    extent.quantum_m = 0.5f64.powi(fractional_bits as i32);
    match crate::splats::spz::decode(&bytes) {
        Ok(sp) => {
            let (points, boxes) = splat_extents(&sp);
            extent.points = Some(points);
            extent.sigma3 = Some(boxes);
        }
        Err(e) => issues.push(issue(
            Severity::Error,
            CheckKind::Spz,
            format!("{}: SPZ payload does not decode: {e}", prim.label),
            FIX_SPZ_VERSION,
        )),
    }
}

/// The bytes of the bufferView the SPZ extension points at.
fn spz_payload<'a>(
    json: &Value,
    src: &'a GltfSource,
    spz: &Value,
    label: &str,
    issues: &mut Vec<Issue>,
) -> Option<std::borrow::Cow<'a, [u8]>> {
    let Some(view) = spz.get("bufferView").and_then(Value::as_u64) else {
        issues.push(issue(
            Severity::Error,
            CheckKind::Spz,
            format!("{label}: {KHR_GAUSSIAN_SPLATTING_SPZ_2} has no bufferView"),
            "point the extension at the SPZ bytes' bufferView",
        ));
        return None;
    };
    match buffer_view(json, src, view) {
        Ok(b) => Some(b),
        Err(e) => {
            issues.push(issue(
                Severity::Error,
                CheckKind::Spz,
                format!("{label}: SPZ {e}"),
                "fix the SPZ bufferView",
            ));
            None
        }
    }
}

/// The SPZ header's framing (gzip, not v4's plain NGSP), magic, version, point count and SH
/// degree against the glTF's; its fractional bits when it can be decoded.
fn check_spz_header(bytes: &[u8], prim: &SpzPrimitive<'_>, issues: &mut Vec<Issue>) -> Option<u8> {
    let label = prim.label;
    let mut fail = |message: String| {
        issues.push(issue(
            Severity::Error,
            CheckKind::Spz,
            message,
            FIX_SPZ_VERSION,
        ));
        None
    };
    if bytes.get(..4) == Some(&crate::splats::spz::SPZ_MAGIC.to_le_bytes()[..]) {
        let version = u32_at(bytes, 4).unwrap_or(0);
        return fail(format!(
            "{label}: SPZ version {version} (plain NGSP header with ZSTD streams); CesiumJS 1.145 cannot read it"
        ));
    }
    if bytes.get(..2) != Some(&[0x1f, 0x8b][..]) {
        return fail(format!(
            "{label}: SPZ payload is neither gzip (1f 8b) nor an NGSP v4 header (first bytes {:02x?})",
            &bytes[..bytes.len().min(4)]
        ));
    }
    let mut header = [0u8; 16];
    if let Err(e) = flate2::read::GzDecoder::new(bytes).read_exact(&mut header) {
        return fail(format!("{label}: cannot gunzip the SPZ header: {e}"));
    }
    let magic = u32_at(&header, 0).unwrap_or(0);
    let version = u32_at(&header, 4).unwrap_or(0);
    let points = u32_at(&header, 8).unwrap_or(0);
    let (hdr_sh, fractional_bits) = (header[12], header[13]);
    if magic != crate::splats::spz::SPZ_MAGIC {
        return fail(format!(
            "{label}: SPZ magic is {:02x?}, expected `NGSP`",
            &header[..4]
        ));
    }
    if !(2..=3).contains(&version) {
        return fail(format!(
            "{label}: SPZ version {version}; CesiumJS 1.145 reads versions 2 and 3"
        ));
    }
    if points as u64 != prim.count {
        issues.push(issue(
            Severity::Error,
            CheckKind::Spz,
            format!(
                "{label}: SPZ header has {points} points but the POSITION accessor count is {}",
                prim.count
            ),
            "set the accessor count to the SPZ numPoints",
        ));
    }
    if hdr_sh as u32 != prim.sh_degree {
        issues.push(issue(
            Severity::Error,
            CheckKind::Spz,
            format!(
                "{label}: SPZ header SH degree {hdr_sh}, but the SH_DEGREE_l attributes give degree {}",
                prim.sh_degree
            ),
            "declare exactly the SH attributes of the SPZ payload's degree",
        ));
    }
    Some(fractional_bits)
}

/// Each decoded splat's mean and 3σ box (scales widened by half a quantisation step, so the box
/// bounds what the SPZ bytes can mean).
#[allow(clippy::type_complexity)]
fn splat_extents(sp: &crate::splats::GaussianSplats) -> (Vec<[f64; 3]>, Vec<([f64; 3], [f64; 3])>) {
    let n = sp.len();
    let mut points = Vec::with_capacity(n);
    let mut boxes = Vec::with_capacity(n);
    for i in 0..n {
        let m = [0, 1, 2].map(|a| sp.means[3 * i + a] as f64);
        let s =
            [0, 1, 2].map(|a| (sp.log_scales[3 * i + a] as f64 - SPZ_LOG_SCALE_STEP_HALF).exp());
        let q = &sp.rotations[4 * i..4 * i + 4];
        let qn = q
            .iter()
            .map(|x| (*x as f64).powi(2))
            .sum::<f64>()
            .sqrt()
            .max(1e-12);
        let r = volume::trs(
            [0.0; 3],
            [
                q[1] as f64 / qn,
                q[2] as f64 / qn,
                q[3] as f64 / qn,
                q[0] as f64 / qn,
            ],
            s,
        );
        // Half-extent of the ellipsoid R·S·unit-sphere along axis a: |row a of R·S|.
        let e = [0, 1, 2]
            .map(|a| EXTENT_SIGMAS * (0..3).map(|c| r[4 * c + a].powi(2)).sum::<f64>().sqrt());
        points.push(m);
        boxes.push((
            [m[0] - e[0], m[1] - e[1], m[2] - e[2]],
            [m[0] + e[0], m[1] + e[1], m[2] + e[2]],
        ));
    }
    (points, boxes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniff_tells_formats_by_magic() {
        assert_eq!(sniff(b"glTF....", None), ContentFormat::Glb);
        assert_eq!(sniff(b"b3dm....", None), ContentFormat::B3dm);
        assert_eq!(sniff(b"pnts....", None), ContentFormat::Other("pnts"));
        let ts = serde_json::json!({"asset": {}, "root": {}});
        assert_eq!(sniff(b"{ ", Some(&ts)), ContentFormat::Tileset);
    }

    #[test]
    fn split_glb_rejects_wrong_magic_and_truncation() {
        assert!(split_glb(b"glTX\x02\0\0\0").unwrap_err().contains("magic"));
        let mut b = b"glTF".to_vec();
        b.extend(2u32.to_le_bytes());
        b.extend(1000u32.to_le_bytes());
        assert!(split_glb(&b).unwrap_err().contains("1000 bytes"));
    }

    #[test]
    fn normalized_short_positions_are_dequantised() {
        let json = serde_json::json!({
            "asset": {"version": "2.0"},
            "extensionsUsed": ["KHR_mesh_quantization"],
            "scenes": [{"nodes": [0]}],
            "nodes": [{"mesh": 0, "scale": [2.0, 2.0, 2.0]}],
            "meshes": [{"primitives": [{"attributes": {"POSITION": 0}}]}],
            "accessors": [{"componentType": 5122, "normalized": true, "type": "VEC3", "count": 3,
                           "min": [-32767, 0, 0], "max": [32767, 32767, 0]}]
        });
        let s = summarise_gltf(
            &json,
            &GltfSource {
                bin: None,
                dir: Path::new("."),
                pre: volume::IDENTITY,
                images: &ImageCache::default(),
            },
        );
        assert_eq!(s.triangles, 1);
        let p = &s.primitives[0];
        assert_eq!(p.min, [-1.0, 0.0, 0.0]);
        assert_eq!(p.max, [1.0, 1.0, 0.0]);
        // Node scale 2, then Y-up → Z-up: glTF +Y lands on +Z.
        assert_eq!(volume::apply(&p.to_tile, [0.0, 1.0, 0.0]), [0.0, 0.0, 2.0]);
    }

    #[test]
    fn incomplete_sh_degree_is_reported() {
        let prim = serde_json::json!({"attributes": {
            "KHR_gaussian_splatting:SH_DEGREE_0_COEF_0": 1,
            "KHR_gaussian_splatting:SH_DEGREE_1_COEF_0": 2,
            "KHR_gaussian_splatting:SH_DEGREE_1_COEF_1": 3,
        }});
        let mut issues = Vec::new();
        assert_eq!(attribute_sh_degree(&prim, "p", &mut issues), 1);
        assert!(
            issues[0].message.contains("SH degree 1 has 2 of its 3"),
            "{}",
            issues[0].message
        );
    }
}
