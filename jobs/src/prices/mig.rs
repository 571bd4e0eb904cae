//! MIG (Multi-Instance GPU) profiles in the price catalog: the `[[mig]]` tables.
//!
//! A MIG profile is a fixed partition of one GPU: `1g.10gb` on an H100 80GB is one of the GPU's
//! seven compute slices with 10 GB of its memory. Kiln charges a slot of the profile as
//! `compute_slices / 7` of the whole GPU ([`MigProfile::fraction`]), unless the catalog entry has
//! a price per slot-hour that a provider publishes for that profile. Profile names and slice
//! counts: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
//! (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html>).

use serde::{Deserialize, Serialize};

use super::{PriceCatalog, PriceError, Tier};

/// Compute slices of a whole MIG-capable GPU (A100, H100, H200: seven GPCs usable by MIG).
pub const MIG_SLICES_PER_GPU: u32 = 7;

/// One MIG profile of one catalog SKU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigProfile {
    /// The catalog SKU it partitions (`H100`, `A100-40GB`); must be a `[sku.NAME]` of the catalog.
    pub sku: String,
    /// NVIDIA's profile name, `<compute slices>g.<memory>gb` (`1g.10gb`, `7g.80gb`).
    pub profile: String,
    /// Compute slices of the [`MIG_SLICES_PER_GPU`] the profile gets, 1–7.
    pub compute_slices: u32,
    /// Memory of the instance, GB (as in the profile name).
    pub memory_gb: f64,
    /// Where the profile is documented (a URL).
    pub source: String,
    /// When the source was read.
    pub as_of: String,
    /// USD per hour of one instance of this profile, on-demand, where a provider publishes one;
    /// absent: charged at [`MigProfile::fraction`] × the SKU's GPU-hour. ≥ 0.
    #[serde(default)]
    pub slot_hour_usd_on_demand: Option<f64>,
    /// USD per instance-hour at spot rates, where published. ≥ 0.
    #[serde(default)]
    pub slot_hour_usd_spot: Option<f64>,
    /// Where the slot prices come from (required with either price).
    #[serde(default)]
    pub price_source: Option<String>,
}

impl MigProfile {
    /// The profile's share of the whole GPU: `compute_slices / 7` (1g = 1/7 ≈ 0.143, 3g = 3/7,
    /// 7g = 1). Compute, not memory: on an A100 80GB a 1g.10gb instance has 1/8 of the memory but
    /// 1/7 of the SMs, and providers that rent slices size them by compute.
    pub fn fraction(&self) -> f64 {
        f64::from(self.compute_slices) / f64::from(MIG_SLICES_PER_GPU)
    }

    /// USD per instance-hour at `tier` where the catalog has a published slot price.
    pub fn slot_hour_usd(&self, tier: Tier) -> Option<f64> {
        match tier {
            Tier::OnDemand => self.slot_hour_usd_on_demand,
            Tier::Spot => self.slot_hour_usd_spot,
            // No provider publishes committed MIG slot prices in this catalog.
            Tier::Committed => None,
        }
    }
}

impl PriceCatalog {
    /// The MIG profile `profile` of `sku` (both compared ASCII-case-insensitively).
    ///
    /// # Errors
    /// [`PriceError::UnknownSku`] for `sku`; [`PriceError::UnknownMigProfile`] listing the SKU's
    /// profiles.
    pub fn mig_profile(&self, sku: &str, profile: &str) -> Result<&MigProfile, PriceError> {
        self.sku(sku)?;
        let of_sku = || {
            self.mig
                .iter()
                .filter(move |m| m.sku.eq_ignore_ascii_case(sku))
        };
        of_sku()
            .find(|m| m.profile.eq_ignore_ascii_case(profile))
            .ok_or_else(|| PriceError::UnknownMigProfile {
                sku: sku.to_string(),
                profile: profile.to_string(),
                catalog: self.file.clone(),
                known: {
                    let names: Vec<&str> = of_sku().map(|m| m.profile.as_str()).collect();
                    if names.is_empty() {
                        "none (no [[mig]] table for this SKU)".into()
                    } else {
                        names.join(", ")
                    }
                },
            })
    }

    /// Check the `[[mig]]` tables: a known SKU, 1–7 compute slices, no duplicate profile, prices
    /// ≥ 0 with a `price_source`.
    ///
    /// # Errors
    /// [`PriceError::Field`] naming `mig[INDEX].FIELD`.
    pub(super) fn validate_mig(&self) -> Result<(), PriceError> {
        let bad = |i: usize, field: &str, expected: &str, found: String| PriceError::Field {
            file: self.file.clone(),
            field: format!("mig[{i}].{field}"),
            expected: expected.into(),
            found,
        };
        for (i, m) in self.mig.iter().enumerate() {
            if self.sku(&m.sku).is_err() {
                return Err(bad(
                    i,
                    "sku",
                    &format!(
                        "one of the catalog's SKUs ({})",
                        self.sku_names().join(", ")
                    ),
                    format!("{:?}", m.sku),
                ));
            }
            if !(1..=MIG_SLICES_PER_GPU).contains(&m.compute_slices) {
                return Err(bad(
                    i,
                    "compute_slices",
                    "1 to 7",
                    m.compute_slices.to_string(),
                ));
            }
            if !(m.memory_gb.is_finite() && m.memory_gb > 0.0) {
                return Err(bad(i, "memory_gb", "a number > 0", m.memory_gb.to_string()));
            }
            let dup = self.mig[..i].iter().any(|o| {
                o.sku.eq_ignore_ascii_case(&m.sku) && o.profile.eq_ignore_ascii_case(&m.profile)
            });
            if dup {
                return Err(bad(
                    i,
                    "profile",
                    "one table per SKU and profile",
                    format!("a second {}:{}", m.sku, m.profile),
                ));
            }
            for (field, v) in [
                ("slot_hour_usd_on_demand", m.slot_hour_usd_on_demand),
                ("slot_hour_usd_spot", m.slot_hour_usd_spot),
            ] {
                if let Some(v) = v {
                    if !(v.is_finite() && v >= 0.0) {
                        return Err(bad(i, field, "a price ≥ 0", v.to_string()));
                    }
                    if m.price_source.as_deref().is_none_or(str::is_empty) {
                        return Err(bad(
                            i,
                            "price_source",
                            &format!("where the {field} figure comes from"),
                            "nothing".into(),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_has_the_h100_and_a100_mig_profiles_with_sources() {
        let cat = PriceCatalog::default_catalog();
        let want: &[(&str, &[(&str, u32)])] = &[
            (
                "H100",
                &[
                    ("1g.10gb", 1),
                    ("1g.20gb", 1),
                    ("2g.20gb", 2),
                    ("3g.40gb", 3),
                    ("4g.40gb", 4),
                    ("7g.80gb", 7),
                ],
            ),
            (
                "A100-40GB",
                &[
                    ("1g.5gb", 1),
                    ("1g.10gb", 1),
                    ("2g.10gb", 2),
                    ("3g.20gb", 3),
                    ("4g.20gb", 4),
                    ("7g.40gb", 7),
                ],
            ),
            (
                "A100-80GB",
                &[
                    ("1g.10gb", 1),
                    ("1g.20gb", 1),
                    ("2g.20gb", 2),
                    ("3g.40gb", 3),
                    ("4g.40gb", 4),
                    ("7g.80gb", 7),
                ],
            ),
        ];
        for (sku, profiles) in want {
            for (p, slices) in *profiles {
                let m = cat.mig_profile(sku, p).unwrap();
                assert_eq!(m.compute_slices, *slices, "{sku}:{p}");
                assert!(
                    m.source.starts_with("https://docs.nvidia.com/"),
                    "{sku}:{p}"
                );
                assert!(!m.as_of.is_empty(), "{sku}:{p}");
            }
        }
        // 3 of 7 slices: 3/7 ≈ 0.428571.
        let m = cat.mig_profile("h100", "3G.40GB").unwrap();
        assert!((m.fraction() - 3.0 / 7.0).abs() < 1e-15);
    }

    #[test]
    fn unknown_profile_lists_the_skus_profiles() {
        let cat = PriceCatalog::default_catalog();
        let e = cat.mig_profile("H100", "5g.50gb").unwrap_err().to_string();
        assert!(
            e.contains("5g.50gb") && e.contains("1g.10gb") && e.contains("7g.80gb"),
            "{e}"
        );
        let e = cat.mig_profile("T4", "1g.5gb").unwrap_err().to_string();
        assert!(e.contains("no [[mig]] table"), "{e}");
    }

    #[test]
    fn bad_mig_tables_name_the_field() {
        let base = include_str!("default.toml");
        let text = base.replacen("compute_slices = 1\n", "compute_slices = 9\n", 1);
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml") && e.contains("mig[0].compute_slices"),
            "{e}"
        );
        let text = format!(
            "{base}\n[[mig]]\nsku = \"H100\"\nprofile = \"9g.1gb\"\ncompute_slices = 1\nmemory_gb = 1\n\
             source = \"s\"\nas_of = \"d\"\nslot_hour_usd_on_demand = 1.0\n"
        );
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("price_source"), "{e}");
    }
}
