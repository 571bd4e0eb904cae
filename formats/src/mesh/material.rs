//! Materials of a [`super::Mesh`]: the glTF 2.0 PBR metallic-roughness model, per primitive, and
//! the JSON that every Kiln mesh writer emits for it.
//!
//! Sources: glTF 2.0 specification §3.9 (materials: `pbrMetallicRoughness`, `normalTexture.scale`,
//! `occlusionTexture.strength`, `emissiveFactor`, `alphaMode`/`alphaCutoff`, `doubleSided`, their
//! defaults), §3.8 (textures, images, samplers; `textureInfo.texCoord`), §5.26 (sampler enums);
//! the Khronos extension specifications `KHR_texture_transform`, `KHR_materials_emissive_strength`
//! and `KHR_materials_unlit` (ratified). Other `KHR_materials_*` extensions (clearcoat, sheen,
//! transmission, volume, ior, specular, iridescence, anisotropy, …) are carried through as their
//! JSON, with the `index` of every textureInfo inside them renumbered for the file being written.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// `KHR_texture_transform`, the glTF extension name.
pub const KHR_TEXTURE_TRANSFORM: &str = "KHR_texture_transform";
/// `KHR_materials_emissive_strength`, the glTF extension name.
pub const KHR_MATERIALS_EMISSIVE_STRENGTH: &str = "KHR_materials_emissive_strength";
/// `KHR_materials_unlit`, the glTF extension name.
pub const KHR_MATERIALS_UNLIT: &str = "KHR_materials_unlit";

/// glTF sampler state (§5.26, WebGL enums). `None` filters mean "client's choice" (the spec's
/// undefined). Default: no filters, `REPEAT` (10497) on both axes, as glTF's default sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sampler {
    /// `magFilter`: 9728 NEAREST or 9729 LINEAR.
    pub mag_filter: Option<u32>,
    /// `minFilter`: 9728, 9729 or one of the four MIPMAP enums 9984–9987.
    pub min_filter: Option<u32>,
    /// `wrapS`: 33071 CLAMP_TO_EDGE, 33648 MIRRORED_REPEAT or 10497 REPEAT.
    pub wrap_s: u32,
    /// `wrapT`, as `wrap_s`.
    pub wrap_t: u32,
}

/// glTF `REPEAT` wrap mode.
pub const WRAP_REPEAT: u32 = 10497;

impl Default for Sampler {
    fn default() -> Self {
        Self {
            mag_filter: None,
            min_filter: None,
            wrap_s: WRAP_REPEAT,
            wrap_t: WRAP_REPEAT,
        }
    }
}

/// One texture reference of a material (glTF `textureInfo` resolved through `textures[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TextureRef {
    /// Index into [`super::Mesh::images`].
    pub image: usize,
    /// The sampler of the source texture.
    pub sampler: Sampler,
    /// `texCoord`: 0 reads [`super::Mesh::uvs`], 1 reads [`super::Mesh::uvs1`].
    pub tex_coord: u32,
    /// The `KHR_texture_transform` object as written (offset, rotation in radians, scale, optional
    /// texCoord override), or `None`.
    pub transform: Option<Value>,
}

/// glTF `alphaMode` (§3.9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AlphaMode {
    /// Alpha ignored.
    #[default]
    Opaque,
    /// Alpha tested against `alphaCutoff`.
    Mask,
    /// Alpha blended ("over" compositing).
    Blend,
}

impl AlphaMode {
    /// The glTF JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AlphaMode::Opaque => "OPAQUE",
            AlphaMode::Mask => "MASK",
            AlphaMode::Blend => "BLEND",
        }
    }

    /// Parse the glTF JSON spelling; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "OPAQUE" => Some(AlphaMode::Opaque),
            "MASK" => Some(AlphaMode::Mask),
            "BLEND" => Some(AlphaMode::Blend),
            _ => None,
        }
    }
}

/// One material: the glTF 2.0 PBR metallic-roughness model plus the extensions named in the module
/// docs. Factors are linear (not sRGB); [`Material::default`] gives the glTF defaults (§3.9).
#[derive(Debug, Clone, PartialEq)]
pub struct Material {
    /// `name`, when the source gave one.
    pub name: Option<String>,
    /// Linear RGBA `baseColorFactor`, default `[1, 1, 1, 1]`.
    pub base_color_factor: [f32; 4],
    /// `baseColorTexture` (sRGB RGBA).
    pub base_color_texture: Option<TextureRef>,
    /// `metallicFactor` in [0, 1], default 1.
    pub metallic_factor: f32,
    /// `roughnessFactor` in [0, 1], default 1.
    pub roughness_factor: f32,
    /// `metallicRoughnessTexture` (B = metallic, G = roughness; linear).
    pub metallic_roughness_texture: Option<TextureRef>,
    /// `normalTexture` (tangent-space, linear).
    pub normal_texture: Option<TextureRef>,
    /// `normalTexture.scale`, default 1.
    pub normal_scale: f32,
    /// `occlusionTexture` (R channel, linear).
    pub occlusion_texture: Option<TextureRef>,
    /// `occlusionTexture.strength` in [0, 1], default 1.
    pub occlusion_strength: f32,
    /// Linear RGB `emissiveFactor`, default `[0, 0, 0]`.
    pub emissive_factor: [f32; 3],
    /// `emissiveTexture` (sRGB RGB).
    pub emissive_texture: Option<TextureRef>,
    /// `alphaMode`, default OPAQUE.
    pub alpha_mode: AlphaMode,
    /// `alphaCutoff` (MASK only), default 0.5.
    pub alpha_cutoff: f32,
    /// `doubleSided`, default false.
    pub double_sided: bool,
    /// `KHR_materials_emissive_strength.emissiveStrength` (≥ 0), `None` when absent (= 1).
    pub emissive_strength: Option<f32>,
    /// `KHR_materials_unlit` present.
    pub unlit: bool,
    /// Other material extensions by name, as JSON. Every textureInfo inside (an object with an
    /// `index`) has its `index` replaced by an index into [`Material::extension_textures`].
    pub other_extensions: BTreeMap<String, Value>,
    /// Textures referenced from [`Material::other_extensions`].
    pub extension_textures: Vec<TextureRef>,
}

impl Default for Material {
    fn default() -> Self {
        Self {
            name: None,
            base_color_factor: [1.0; 4],
            base_color_texture: None,
            metallic_factor: 1.0,
            roughness_factor: 1.0,
            metallic_roughness_texture: None,
            normal_texture: None,
            normal_scale: 1.0,
            occlusion_texture: None,
            occlusion_strength: 1.0,
            emissive_factor: [0.0; 3],
            emissive_texture: None,
            alpha_mode: AlphaMode::Opaque,
            alpha_cutoff: 0.5,
            double_sided: false,
            emissive_strength: None,
            unlit: false,
            other_extensions: BTreeMap::new(),
            extension_textures: Vec::new(),
        }
    }
}

impl Material {
    /// A non-metallic, fully rough material of colour `base_color_factor`: how formats without a
    /// PBR model (OBJ without `Pr`/`Pm`, PLY) are drawn, a Lambert-like diffuse surface.
    pub fn diffuse(base_color_factor: [f32; 4]) -> Self {
        Self {
            base_color_factor,
            metallic_factor: 0.0,
            roughness_factor: 1.0,
            ..Self::default()
        }
    }

    /// Every texture of the material, core slots first, then the extensions' (in their order).
    pub fn textures(&self) -> impl Iterator<Item = &TextureRef> {
        [
            &self.base_color_texture,
            &self.metallic_roughness_texture,
            &self.normal_texture,
            &self.occlusion_texture,
            &self.emissive_texture,
        ]
        .into_iter()
        .flatten()
        .chain(&self.extension_textures)
    }

    /// Mutable [`Material::textures`].
    pub fn textures_mut(&mut self) -> impl Iterator<Item = &mut TextureRef> {
        [
            &mut self.base_color_texture,
            &mut self.metallic_roughness_texture,
            &mut self.normal_texture,
            &mut self.occlusion_texture,
            &mut self.emissive_texture,
        ]
        .into_iter()
        .flatten()
        .chain(&mut self.extension_textures)
    }

    /// Does any texture read texture-coordinate set `set` (counting a `KHR_texture_transform`
    /// texCoord override)?
    pub fn uses_tex_coord(&self, set: u32) -> bool {
        self.textures().any(|t| effective_tex_coord(t) == set)
    }
}

/// The set a texture samples: the `KHR_texture_transform` `texCoord` override when present, else
/// the textureInfo's own (extension spec, "texCoord").
pub fn effective_tex_coord(t: &TextureRef) -> u32 {
    t.transform
        .as_ref()
        .and_then(|x| x.get("texCoord"))
        .and_then(Value::as_u64)
        .map_or(t.tex_coord, |s| s as u32)
}

/// Call `f` on every textureInfo object (an object holding a numeric `index`) inside an
/// extension's JSON, depth first. glTF names these `…Texture`; matching on the shape also catches
/// vendor extensions that follow the same convention.
pub fn for_each_texture_info(value: &mut Value, f: &mut impl FnMut(&mut Value)) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if key.ends_with("Texture") && child.get("index").is_some_and(Value::is_u64) {
                    f(child);
                } else {
                    for_each_texture_info(child, f);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| for_each_texture_info(v, f)),
        _ => {}
    }
}

/// Builds the `materials`, `textures` and `samplers` arrays of one glTF file: each distinct
/// (image, sampler) pair becomes one texture and each distinct sampler one sampler, shared by
/// every material that uses them. Images are numbered in order of first use; the caller writes
/// `images[]` from [`MaterialTable::images`] (embedded or by URI).
#[derive(Debug, Default)]
pub struct MaterialTable {
    /// Source image indices (into `Mesh::images`), in output order.
    images: Vec<usize>,
    samplers: Vec<Sampler>,
    /// `(output image, output sampler)` per output texture.
    textures: Vec<(usize, usize)>,
    materials: Vec<Value>,
    extensions: std::collections::BTreeSet<String>,
}

impl MaterialTable {
    /// Append `m` as the next material (`materials[i]`, i = number added before) and return i.
    pub fn add(&mut self, m: &Material) -> usize {
        let mut pbr = json!({
            "baseColorFactor": m.base_color_factor,
            "metallicFactor": m.metallic_factor,
            "roughnessFactor": m.roughness_factor,
        });
        if let Some(t) = &m.base_color_texture {
            pbr["baseColorTexture"] = self.texture_info(t);
        }
        if let Some(t) = &m.metallic_roughness_texture {
            pbr["metallicRoughnessTexture"] = self.texture_info(t);
        }
        let mut out = json!({
            "pbrMetallicRoughness": pbr,
            "emissiveFactor": m.emissive_factor,
            "alphaMode": m.alpha_mode.as_str(),
            "doubleSided": m.double_sided,
        });
        if let Some(name) = &m.name {
            out["name"] = json!(name);
        }
        if m.alpha_mode == AlphaMode::Mask {
            out["alphaCutoff"] = json!(m.alpha_cutoff);
        }
        if let Some(t) = &m.normal_texture {
            out["normalTexture"] = self.texture_info(t);
            out["normalTexture"]["scale"] = json!(m.normal_scale);
        }
        if let Some(t) = &m.occlusion_texture {
            out["occlusionTexture"] = self.texture_info(t);
            out["occlusionTexture"]["strength"] = json!(m.occlusion_strength);
        }
        if let Some(t) = &m.emissive_texture {
            out["emissiveTexture"] = self.texture_info(t);
        }
        let mut extensions = serde_json::Map::new();
        if let Some(s) = m.emissive_strength {
            extensions.insert(
                KHR_MATERIALS_EMISSIVE_STRENGTH.into(),
                json!({"emissiveStrength": s}),
            );
        }
        if m.unlit {
            extensions.insert(KHR_MATERIALS_UNLIT.into(), json!({}));
        }
        for (name, value) in &m.other_extensions {
            let mut value = value.clone();
            let mut bad = false;
            for_each_texture_info(&mut value, &mut |info| {
                let slot = info["index"].as_u64().unwrap_or(u64::MAX) as usize;
                match m.extension_textures.get(slot) {
                    Some(t) => {
                        let written = self.texture_info(t);
                        info["index"] = written["index"].clone();
                    }
                    None => bad = true,
                }
            });
            if !bad {
                extensions.insert(name.clone(), value);
            }
        }
        if !extensions.is_empty() {
            self.extensions.extend(extensions.keys().cloned());
            out["extensions"] = Value::Object(extensions);
        }
        self.materials.push(out);
        self.materials.len() - 1
    }

    /// `{"index", "texCoord", "extensions": {KHR_texture_transform}}` for `t`, registering its
    /// image, sampler and texture.
    fn texture_info(&mut self, t: &TextureRef) -> Value {
        let image = index_of(&mut self.images, t.image);
        let sampler = index_of(&mut self.samplers, t.sampler);
        let texture = index_of(&mut self.textures, (image, sampler));
        let mut info = json!({"index": texture});
        if t.tex_coord != 0 {
            info["texCoord"] = json!(t.tex_coord);
        }
        if let Some(x) = &t.transform {
            info["extensions"] = json!({ KHR_TEXTURE_TRANSFORM: x });
            self.extensions.insert(KHR_TEXTURE_TRANSFORM.into());
        }
        info
    }

    /// Source image indices (into `Mesh::images`) in output order: `images[k]` of the file is
    /// `Mesh::images[self.images()[k]]`.
    pub fn images(&self) -> &[usize] {
        &self.images
    }

    /// glTF extensions the materials use (for `extensionsUsed`; none of them is required, since a
    /// client without them still draws the core material).
    pub fn extensions_used(&self) -> impl Iterator<Item = &str> {
        self.extensions.iter().map(String::as_str)
    }

    /// Put `materials`, `textures` and `samplers` (the latter two only when non-empty) into the
    /// glTF root object `root`, and add the used extensions to its `extensionsUsed`.
    pub fn write_into(&self, root: &mut Value) {
        root["materials"] = json!(self.materials);
        if !self.textures.is_empty() {
            root["textures"] = self
                .textures
                .iter()
                .map(|&(source, sampler)| json!({"source": source, "sampler": sampler}))
                .collect();
            root["samplers"] = self.samplers.iter().map(sampler_json).collect();
        }
        if !self.extensions.is_empty() {
            let mut used: Vec<Value> = root["extensionsUsed"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            used.extend(self.extensions.iter().map(|e| json!(e)));
            root["extensionsUsed"] = Value::Array(used);
        }
    }
}

fn sampler_json(s: &Sampler) -> Value {
    let mut v = json!({"wrapS": s.wrap_s, "wrapT": s.wrap_t});
    if let Some(f) = s.mag_filter {
        v["magFilter"] = json!(f);
    }
    if let Some(f) = s.min_filter {
        v["minFilter"] = json!(f);
    }
    v
}

/// Position of `item` in `list`, appending it when absent (lists are short: a tile's materials).
fn index_of<T: PartialEq>(list: &mut Vec<T>, item: T) -> usize {
    match list.iter().position(|x| *x == item) {
        Some(i) => i,
        None => {
            list.push(item);
            list.len() - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tex(image: usize, wrap: u32) -> TextureRef {
        TextureRef {
            image,
            sampler: Sampler {
                wrap_s: wrap,
                ..Sampler::default()
            },
            tex_coord: 0,
            transform: None,
        }
    }

    #[test]
    fn shared_textures_and_samplers_are_written_once() {
        let a = Material {
            base_color_texture: Some(tex(7, WRAP_REPEAT)),
            normal_texture: Some(tex(3, WRAP_REPEAT)),
            normal_scale: 0.5,
            ..Material::default()
        };
        let b = Material {
            emissive_texture: Some(tex(7, WRAP_REPEAT)),
            occlusion_texture: Some(tex(7, 33071)),
            ..Material::default()
        };
        let mut table = MaterialTable::default();
        assert_eq!(table.add(&a), 0);
        assert_eq!(table.add(&b), 1);
        let mut root = json!({});
        table.write_into(&mut root);
        // Images 7 and 3 → 0 and 1; (7, repeat) shared by a's base colour and b's emissive.
        assert_eq!(table.images(), &[7, 3]);
        assert_eq!(root["textures"].as_array().unwrap().len(), 3);
        assert_eq!(root["samplers"].as_array().unwrap().len(), 2);
        let m = &root["materials"];
        assert_eq!(
            m[0]["pbrMetallicRoughness"]["baseColorTexture"]["index"],
            m[1]["emissiveTexture"]["index"]
        );
        assert_eq!(m[0]["normalTexture"]["scale"], 0.5);
        assert!(root.get("extensionsUsed").is_none());
    }

    #[test]
    fn extension_textures_are_renumbered_and_extensions_listed() {
        let mut m = Material {
            emissive_strength: Some(4.0),
            unlit: true,
            extension_textures: vec![tex(2, WRAP_REPEAT)],
            ..Material::default()
        };
        m.other_extensions.insert(
            "KHR_materials_clearcoat".into(),
            json!({"clearcoatFactor": 1.0, "clearcoatTexture": {"index": 0}}),
        );
        let mut table = MaterialTable::default();
        table.add(&Material {
            base_color_texture: Some(tex(9, WRAP_REPEAT)),
            ..Material::default()
        });
        table.add(&m);
        let mut root = json!({"extensionsUsed": ["EXT_meshopt_compression"]});
        table.write_into(&mut root);
        let ext = &root["materials"][1]["extensions"];
        assert_eq!(
            ext["KHR_materials_clearcoat"]["clearcoatTexture"]["index"],
            1
        );
        assert_eq!(
            ext[KHR_MATERIALS_EMISSIVE_STRENGTH]["emissiveStrength"],
            4.0
        );
        assert_eq!(
            root["extensionsUsed"],
            json!([
                "EXT_meshopt_compression",
                "KHR_materials_clearcoat",
                KHR_MATERIALS_EMISSIVE_STRENGTH,
                KHR_MATERIALS_UNLIT
            ])
        );
    }
}
