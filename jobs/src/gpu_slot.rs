//! GPU slots that are part of a GPU: a MIG instance (`H100:1g.10gb`) or a vGPU / time-sliced
//! partition given as a fraction (`0.5`, `H100:0.25`, `1/4`). `kiln worker --gpu-slot` declares
//! one; `kiln plan --sku` estimates for one.
//!
//! Charging rule: an attempt on a slot that is fraction *f* of a GPU is recorded with *f* × its
//! allocated GPU-seconds (`kiln_pipeline::meter::StageUsage::on_gpu_slot`), so a slot-hour costs
//! *f* × the SKU's GPU-hour; a MIG profile whose catalog table has a published per-instance price
//! costs that price per slot-hour instead ([`GpuSlot::gpu_hour_usd`]).

use serde::Serialize;

use crate::prices::{PriceCatalog, PriceError, Tier};

/// A parsed slot description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSlot {
    /// Canonical text, recorded in the ledger's `gpu_slot` (`H100:1g.10gb`, `0.5`, `H100:0.25`).
    pub label: String,
    /// The catalog SKU the slot is part of, when the description names one.
    pub sku: Option<String>,
    /// The MIG profile, for MIG slots.
    pub mig_profile: Option<String>,
    /// Share of the whole GPU, 0 < fraction ≤ 1 (MIG: compute slices / 7).
    pub fraction: f64,
}

/// A slot description that cannot be used; the message names the text, what was expected and
/// the fix.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// Not `FRACTION`, `SKU:PROFILE` or `SKU:FRACTION`.
    #[error(
        "GPU slot `{text}`: {problem}; expected a fraction of one GPU (`0.5`, `1/4`), a MIG profile of a catalog SKU (`H100:1g.10gb`), or a SKU and fraction (`H100:0.5`)"
    )]
    Syntax { text: String, problem: String },
    /// The SKU or profile is not in the price catalog.
    // The catalog's message is part of this one (not a `#[source]`), so a chain printer
    // such as anyhow's does not repeat it.
    #[error("GPU slot `{text}`: {cause}")]
    Catalog {
        text: String,
        cause: Box<PriceError>,
    },
}

/// Parse a fraction `0.5` or `1/4`: finite, 0 < f ≤ 1.
fn parse_fraction(text: &str, part: &str) -> Result<f64, SlotError> {
    let syntax = |problem: String| SlotError::Syntax {
        text: text.to_string(),
        problem,
    };
    let v = match part.split_once('/') {
        Some((n, d)) => {
            let n: f64 = n
                .trim()
                .parse()
                .map_err(|_| syntax(format!("`{n}` is not a number")))?;
            let d: f64 = d
                .trim()
                .parse()
                .map_err(|_| syntax(format!("`{d}` is not a number")))?;
            n / d
        }
        None => part
            .trim()
            .parse()
            .map_err(|_| syntax(format!("`{part}` is neither a number nor a MIG profile")))?,
    };
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(syntax(format!(
            "the fraction {part} is not in (0, 1] (a slot is at most one whole GPU)"
        )))
    }
}

impl GpuSlot {
    /// Parse `text` against `catalog`: `FRACTION`, `SKU:PROFILE` (a `[[mig]]` table of the
    /// catalog) or `SKU:FRACTION`. SKU and profile names are case-insensitive and canonicalised to
    /// the catalog's spelling in [`GpuSlot::label`].
    ///
    /// # Errors
    /// [`SlotError::Syntax`] for a malformed text or a fraction outside (0, 1];
    /// [`SlotError::Catalog`] for an unknown SKU or profile (listing the known ones).
    pub fn parse(text: &str, catalog: &PriceCatalog) -> Result<GpuSlot, SlotError> {
        let catalog_err = |source| SlotError::Catalog {
            text: text.to_string(),
            cause: Box::new(source),
        };
        let Some((sku, rest)) = text.split_once(':') else {
            let fraction = parse_fraction(text, text)?;
            return Ok(GpuSlot {
                label: format!("{fraction}"),
                sku: None,
                mig_profile: None,
                fraction,
            });
        };
        catalog.sku(sku).map_err(catalog_err)?;
        let sku = catalog
            .sku
            .keys()
            .find(|k| k.eq_ignore_ascii_case(sku))
            .cloned()
            .unwrap_or_else(|| sku.to_string());
        // A MIG profile starts with `<slices>g.`; anything else must be a fraction.
        let looks_mig = rest
            .to_ascii_lowercase()
            .split_once("g.")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if looks_mig {
            let m = catalog.mig_profile(&sku, rest).map_err(catalog_err)?;
            return Ok(GpuSlot {
                label: format!("{sku}:{}", m.profile),
                sku: Some(sku),
                mig_profile: Some(m.profile.clone()),
                fraction: m.fraction(),
            });
        }
        let fraction = parse_fraction(text, rest)?;
        Ok(GpuSlot {
            label: format!("{sku}:{fraction}"),
            sku: Some(sku),
            mig_profile: None,
            fraction,
        })
    }

    /// USD per *GPU-equivalent* hour of this slot on `sku` at `tier` — the rate to multiply the
    /// ledger's `gpu_s` (already × fraction) by: the SKU's GPU-hour, or, for a MIG profile with a
    /// published per-instance price, that price ÷ fraction (so a slot-hour costs the published
    /// price). `None` when the catalog has no price for `sku` at `tier`.
    pub fn gpu_hour_usd(&self, catalog: &PriceCatalog, sku: &str, tier: Tier) -> Option<f64> {
        let published = self
            .mig_profile
            .as_deref()
            .and_then(|p| catalog.mig_profile(sku, p).ok())
            .and_then(|m| m.slot_hour_usd(tier));
        match published {
            Some(p) => Some(p / self.fraction),
            None => catalog.gpu_hour_usd(sku, tier).ok(),
        }
    }

    /// The slot recorded on a ledger row (`gpu_slot`), re-parsed; `None` when absent or no longer
    /// in the catalog (the row is then priced as GPU-equivalent seconds at the SKU's rate).
    pub fn of_row(label: Option<&str>, catalog: &PriceCatalog) -> Option<GpuSlot> {
        GpuSlot::parse(label?, catalog).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_mig_profiles_and_sku_fractions_parse() {
        let cat = PriceCatalog::default_catalog();
        let s = GpuSlot::parse("0.5", &cat).unwrap();
        assert_eq!((s.label.as_str(), s.fraction, s.sku), ("0.5", 0.5, None));
        assert_eq!(GpuSlot::parse("1/4", &cat).unwrap().fraction, 0.25);
        let s = GpuSlot::parse("h100:1G.10GB", &cat).unwrap();
        assert_eq!(s.label, "H100:1g.10gb");
        assert_eq!(s.mig_profile.as_deref(), Some("1g.10gb"));
        assert!((s.fraction - 1.0 / 7.0).abs() < 1e-15);
        let s = GpuSlot::parse("a100-80gb:0.25", &cat).unwrap();
        assert_eq!((s.label.as_str(), s.fraction), ("A100-80GB:0.25", 0.25));
    }

    #[test]
    fn bad_slots_say_what_was_expected() {
        let cat = PriceCatalog::default_catalog();
        for (text, needle) in [
            ("1.5", "not in (0, 1]"),
            ("0", "not in (0, 1]"),
            ("half", "neither a number"),
            ("H100:5g.50gb", "known profiles of `H100`"),
            ("B200:1g.23gb", "unknown GPU SKU `B200`"),
        ] {
            let e = GpuSlot::parse(text, &cat).unwrap_err().to_string();
            assert!(e.contains(text) && e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn published_mig_prices_are_per_slot_hour() {
        // A catalog whose H100 1g.10gb has a published $1.40 per instance-hour: a GPU-equivalent
        // hour of it costs 1.40 × 7 = $9.80, so one slot-hour (1/7 GPU-h) costs $1.40.
        let text = include_str!("prices/default.toml").replacen(
                "profile = \"1g.10gb\"\ncompute_slices = 1\nmemory_gb = 10\nsource = \"https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html\"\nas_of = \"2026-12-02\"\n",
                "profile = \"1g.10gb\"\ncompute_slices = 1\nmemory_gb = 10\nsource = \"https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html\"\nas_of = \"2026-12-02\"\nslot_hour_usd_on_demand = 1.40\nprice_source = \"test\"\n",
                1,
            );
        let cat = PriceCatalog::from_toml_str(&text, "t.toml").unwrap();
        let mig = GpuSlot::parse("H100:1g.10gb", &cat).unwrap();
        let rate = mig.gpu_hour_usd(&cat, "H100", Tier::OnDemand).unwrap();
        assert!((rate - 9.8).abs() < 1e-12, "{rate}");
        // No spot price for the profile: the SKU's spot GPU-hour ($2.34).
        assert_eq!(mig.gpu_hour_usd(&cat, "H100", Tier::Spot), Some(2.34));
        // A plain fraction: the SKU's GPU-hour ($6.88).
        let half = GpuSlot::parse("0.5", &cat).unwrap();
        assert_eq!(half.gpu_hour_usd(&cat, "H100", Tier::OnDemand), Some(6.88));
    }
}
