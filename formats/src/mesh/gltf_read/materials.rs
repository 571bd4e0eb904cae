//! Materials, textures and images of the primitives read: each glTF material converted in
//! full into a [`Material`] (identical ones sharing a slot), texture infos resolved to images
//! (WebP and KTX2 decoded and kept as PNG, missing files listed once), samplers and
//! `KHR_texture_transform` kept.
//!
//! Source: glTF 2.0 §3.9 (materials: metallic-roughness, normal, occlusion, emissive, alpha
//! modes, double-sided), §3.8 (textures, images, samplers); `KHR_texture_transform`,
//! `KHR_materials_emissive_strength`, `KHR_materials_unlit`, `EXT_texture_webp`,
//! `KHR_texture_basisu`.

use super::Builder;
use super::buffers::{UriTarget, resolve_uri};
use crate::mesh::EmbeddedImage;
use crate::mesh::material::{AlphaMode, Material, Sampler, TextureRef, for_each_texture_info};
use crate::{Error, Result};

/// glTF's Basis Universal texture extension (KTX2 images; read, stored as PNG, see `source_image`).
pub const KHR_TEXTURE_BASISU: &str = "KHR_texture_basisu";

/// glTF's WebP texture extension (read; WebP images are stored as PNG, see `source_image`).
pub const EXT_TEXTURE_WEBP: &str = "EXT_texture_webp";

impl<'a> Builder<'a> {
    /// Index into `self.materials` of glTF material `index` (`None`: the default material),
    /// converting it on first use.
    pub(super) fn material_slot(&mut self, index: Option<usize>) -> Result<u32> {
        if let Some(&slot) = self.material_slots.get(&index) {
            return Ok(slot);
        }
        let material = match index {
            Some(i) => self.convert_material(i)?,
            None => Material::default(),
        };
        // Identical materials (CAD exporters write one per part: 2CylinderEngine has 34 entries,
        // 8 distinct) share one slot, so tiles carry one primitive per distinct look.
        let slot = match self.materials.iter().position(|m| *m == material) {
            Some(existing) => existing as u32,
            None => {
                self.materials.push(material);
                (self.materials.len() - 1) as u32
            }
        };
        self.material_slots.insert(index, slot);
        Ok(slot)
    }

    /// `materials[i]` as a [`Material`], read from its JSON (so that extensions the `gltf` crate
    /// does not model are seen as written). Textures whose image is missing or not PNG/JPEG are
    /// left out (the factors stay); extensions other than `KHR_materials_*` are dropped with a
    /// warning (their meaning is unknown, so they cannot be carried safely).
    fn convert_material(&mut self, i: usize) -> Result<Material> {
        let json = self
            .doc()
            .as_json()
            .materials
            .get(i)
            .and_then(|m| serde_json::to_value(m).ok())
            .unwrap_or_default();
        let field = format!("materials[{i}]");
        let num = |v: &serde_json::Value, default: f32| v.as_f64().map_or(default, |x| x as f32);
        let mut m = Material {
            name: json["name"].as_str().map(String::from),
            ..Material::default()
        };
        let pbr = &json["pbrMetallicRoughness"];
        if let Some(c) = floats::<4>(&pbr["baseColorFactor"]) {
            m.base_color_factor = c;
        }
        m.metallic_factor = num(&pbr["metallicFactor"], 1.0);
        m.roughness_factor = num(&pbr["roughnessFactor"], 1.0);
        m.base_color_texture = self.texture_ref(
            &pbr["baseColorTexture"],
            &format!("{field}.baseColorTexture"),
        )?;
        m.metallic_roughness_texture = self.texture_ref(
            &pbr["metallicRoughnessTexture"],
            &format!("{field}.metallicRoughnessTexture"),
        )?;
        m.normal_texture =
            self.texture_ref(&json["normalTexture"], &format!("{field}.normalTexture"))?;
        m.normal_scale = num(&json["normalTexture"]["scale"], 1.0);
        m.occlusion_texture = self.texture_ref(
            &json["occlusionTexture"],
            &format!("{field}.occlusionTexture"),
        )?;
        m.occlusion_strength = num(&json["occlusionTexture"]["strength"], 1.0);
        if let Some(c) = floats::<3>(&json["emissiveFactor"]) {
            m.emissive_factor = c;
        }
        m.emissive_texture = self.texture_ref(
            &json["emissiveTexture"],
            &format!("{field}.emissiveTexture"),
        )?;
        m.alpha_mode = json["alphaMode"]
            .as_str()
            .and_then(AlphaMode::parse)
            .unwrap_or_default();
        m.alpha_cutoff = num(&json["alphaCutoff"], 0.5);
        m.double_sided = json["doubleSided"].as_bool().unwrap_or(false);
        let extensions = json["extensions"].as_object().cloned().unwrap_or_default();
        for (name, mut value) in extensions {
            match name.as_str() {
                crate::mesh::KHR_MATERIALS_EMISSIVE_STRENGTH => {
                    m.emissive_strength = Some(num(&value["emissiveStrength"], 1.0));
                }
                crate::mesh::KHR_MATERIALS_UNLIT => m.unlit = true,
                n if n.starts_with("KHR_materials_") => {
                    let mut textures = Vec::new();
                    let mut missing = false;
                    let mut infos = Vec::new();
                    for_each_texture_info(&mut value, &mut |info| infos.push(info.clone()));
                    for info in &infos {
                        match self.texture_ref(info, &format!("{field}.extensions.{n}"))? {
                            Some(t) => textures.push(t),
                            None => missing = true,
                        }
                    }
                    if missing {
                        tracing::warn!(
                            file = %self.path.display(),
                            "{field}.extensions.{n}: a texture it names is missing or not PNG/JPEG; extension dropped"
                        );
                        continue;
                    }
                    let mut next = m.extension_textures.len();
                    for_each_texture_info(&mut value, &mut |info| {
                        info["index"] = serde_json::json!(next);
                        next += 1;
                    });
                    m.extension_textures.extend(textures);
                    m.other_extensions.insert(name, without_nulls(value));
                }
                other => tracing::warn!(
                    file = %self.path.display(),
                    "{field}.extensions.{other}: not a KHR_materials_* extension; dropped"
                ),
            }
        }
        Ok(m)
    }

    /// A glTF textureInfo JSON object as a [`TextureRef`]; `None` when `info` is not an object
    /// with an `index`, when the image is missing or not PNG/JPEG, or when it samples a set other
    /// than TEXCOORD_0/1 (warned).
    fn texture_ref(&mut self, info: &serde_json::Value, field: &str) -> Result<Option<TextureRef>> {
        let Some(index) = info["index"].as_u64() else {
            return Ok(None);
        };
        let root = self.doc().as_json();
        let Some(texture) = root.textures.get(index as usize) else {
            return Ok(None);
        };
        let sampler = texture
            .sampler
            .and_then(|s| root.samplers.get(s.value()))
            .and_then(|s| serde_json::to_value(s).ok())
            .map_or_else(Sampler::default, |s| Sampler {
                mag_filter: s["magFilter"].as_u64().map(|f| f as u32),
                min_filter: s["minFilter"].as_u64().map(|f| f as u32),
                wrap_s: s["wrapS"]
                    .as_u64()
                    .map_or(crate::mesh::WRAP_REPEAT, |f| f as u32),
                wrap_t: s["wrapT"]
                    .as_u64()
                    .map_or(crate::mesh::WRAP_REPEAT, |f| f as u32),
            });
        let Some(source) = texture_source(texture) else {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: textures[{index}] names no image (core source, EXT_texture_webp or \
                 KHR_texture_basisu); the texture is dropped, the material keeps its factors"
            );
            return Ok(None);
        };
        let t = TextureRef {
            image: 0,
            sampler,
            tex_coord: info["texCoord"].as_u64().unwrap_or(0) as u32,
            transform: info["extensions"][crate::mesh::KHR_TEXTURE_TRANSFORM]
                .as_object()
                .map(|o| without_nulls(serde_json::Value::Object(o.clone()))),
        };
        if crate::mesh::effective_tex_coord(&t) > 1 {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: samples TEXCOORD_{}; only sets 0 and 1 are kept, so the texture is dropped",
                crate::mesh::effective_tex_coord(&t)
            );
            return Ok(None);
        }
        Ok(self
            .image_slot(source)?
            .map(|image| TextureRef { image, ..t }))
    }

    /// Index into `self.images` of glTF image `index`, loading it on first use; `None` when the
    /// file is missing (already warned about) or not PNG/JPEG.
    fn image_slot(&mut self, index: usize) -> Result<Option<usize>> {
        if let Some(&slot) = self.image_slots.get(&index) {
            return Ok(slot);
        }
        let slot = if self.missing.iter().any(|(m, _)| *m == index) {
            None
        } else {
            self.load_image(index)?.map(|image| {
                self.images.push(image);
                self.images.len() - 1
            })
        };
        self.image_slots.insert(index, slot);
        Ok(slot)
    }

    /// Every `images[i]` whose relative or `file:` URI names a file that is not there, as
    /// `(i, what to report)`. Checked for all images, used or not, so that one warning lists every
    /// file the user has to supply; URIs that do not resolve are left to [`Self::load_image`].
    pub(super) fn missing_images(&self) -> Vec<(usize, crate::mesh::MissingTexture)> {
        let root = self.doc().as_json();
        let mut out = Vec::new();
        for (i, image) in root.images.iter().enumerate() {
            // Data URIs are never missing (and decoding them here would be wasted work).
            let Some(uri) = image.uri.as_deref().filter(|u| !u.starts_with("data:")) else {
                continue;
            };
            let field = format!("images[{i}].uri");
            if let Ok(UriTarget::File(file)) = resolve_uri(self.path, self.base, &field, uri)
                && !file.is_file()
            {
                out.push((
                    i,
                    crate::mesh::MissingTexture {
                        field,
                        as_written: uri.to_string(),
                        resolved: file,
                    },
                ));
            }
        }
        out
    }

    /// Encoded bytes of `images[index]` (WebP and KTX2 stored as PNG); `None` (with a warning)
    /// for other image types.
    fn load_image(&self, index: usize) -> Result<Option<EmbeddedImage>> {
        let root = self.doc().as_json();
        let Some(image) = root.images.get(index) else {
            return Ok(None);
        };
        let field = format!("images[{index}]");
        let bytes = if let Some(view_index) = image.buffer_view {
            let range = self.view_bytes(view_index.value());
            range.map(<[u8]>::to_vec).ok_or_else(|| Error::Corrupt {
                path: self.path.to_path_buf(),
                location: format!("{field}.bufferView"),
                what: "image buffer view lies outside its buffer".into(),
            })?
        } else if let Some(uri) = image.uri.as_deref() {
            match resolve_uri(self.path, self.base, &format!("{field}.uri"), uri)? {
                UriTarget::Inline(b) => b,
                UriTarget::File(file) => {
                    std::fs::read(&file).map_err(|e| match Error::io(&file, e) {
                        Error::NotFound { path, .. } => Error::NotFound {
                            path,
                            what: "glTF image (named by images[].uri)",
                        },
                        other => other,
                    })?
                }
            }
        } else {
            return Ok(None);
        };
        let converted =
            crate::mesh::source_image::as_kept_image(bytes).map_err(|what| Error::Corrupt {
                path: self.path.to_path_buf(),
                location: field.clone(),
                what,
            })?;
        let Some(converted) = converted else {
            tracing::warn!(
                file = %self.path.display(),
                "{field}: not PNG, JPEG, WebP or KTX2; textures using it are dropped, the \
                 materials keep their factors"
            );
            return Ok(None);
        };
        if let Some(from) = &converted.from {
            tracing::info!(
                file = %self.path.display(),
                "{field}: {from} decoded and stored as lossless PNG ({} bytes)",
                converted.image.bytes.len()
            );
        }
        Ok(Some(converted.image))
    }
}

/// The image a texture samples: the `EXT_texture_webp` source when present (the extension's
/// image is the one the author meant; the core `source`, if any, is its fallback for viewers
/// without WebP), else the core `source`, else the `KHR_texture_basisu` source (a GPU-compressed
/// KTX2, lossier than a PNG or JPEG fallback beside it); `None` when none is set.
fn texture_source(texture: &gltf::json::Texture) -> Option<usize> {
    let extension_source = |name: &str| {
        texture
            .extensions
            .as_ref()
            .and_then(|e| e.others.get(name))
            .and_then(|w| w["source"].as_u64())
            .map(|i| i as usize)
    };
    let core = texture.source.value();
    extension_source(EXT_TEXTURE_WEBP)
        .or((core != u32::MAX as usize).then_some(core))
        .or_else(|| extension_source(KHR_TEXTURE_BASISU))
}

/// `value` without object members that are `null`: the `gltf` crate serialises absent optional
/// fields (`texCoord`, `extras`) as `null`, which glTF-Validator reports as a type error.
fn without_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(without_nulls).collect())
        }
        other => other,
    }
}

/// `N` numbers of a JSON array (`None` when it is not an array of `N` numbers).
fn floats<const N: usize>(v: &serde_json::Value) -> Option<[f32; N]> {
    let a = v.as_array().filter(|a| a.len() == N)?;
    let mut out = [0.0; N];
    for (o, x) in out.iter_mut().zip(a) {
        *o = x.as_f64()? as f32;
    }
    Some(out)
}
