//! The versioned price catalog: USD per GPU-hour for each GPU SKU (on-demand, and spot where a
//! figure is documented), USD per vCPU-hour for CPU stages, USD per GB-month of object storage
//! and per GB of egress, plus each GPU's datasheet FP32 TFLOPS and memory bandwidth (used only to
//! scale a measured training time from one GPU to another, in [`crate::estimate`]).
//!
//! The built-in catalog is `jobs/src/prices/default.toml` ([`PriceCatalog::default_catalog`]):
//! AWS us-east-1 on-demand per GPU, every figure taken from the research notes
//! `pipeline-anchors.md` §3 (research date 2026-11-30) with the row it came from and its
//! confidence mark. `kiln plan --prices FILE` reads another file of the same shape
//! ([`PriceCatalog::from_file`]). The catalog's `version` is meant to be recorded beside any cost
//! computed from it, so the figure can be reproduced later (pipeline-anchors.md §3.5).
//!
//! Units: money in USD, durations in seconds, rates per hour (GPU-hour = one GPU held for 3 600
//! s), storage per GB-month, egress per GB (10⁹ bytes).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The built-in catalog's text.
const DEFAULT_TOML: &str = include_str!("default.toml");
/// What errors call the built-in catalog instead of a path.
const DEFAULT_NAME: &str = "<built-in jobs/src/prices/default.toml>";

/// Errors reading or using a price catalog. Each names the catalog file (or the built-in one) and,
/// where one is at fault, the field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriceError {
    /// The catalog file cannot be read.
    #[error("price catalog {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// The catalog is not valid TOML or a field has the wrong type, is missing or unknown (the
    /// TOML error names the field and line).
    #[error("price catalog {file}: {message}; see jobs/src/prices/default.toml for the format")]
    Parse { file: String, message: String },
    /// A field parsed but its value is out of range (a negative price, an empty version).
    #[error("price catalog {file}: field `{field}`: expected {expected}, found {found}")]
    Field {
        file: String,
        field: String,
        expected: String,
        found: String,
    },
    /// The SKU is not in the catalog.
    #[error("unknown GPU SKU `{sku}` in price catalog {catalog}; known SKUs: {known}")]
    UnknownSku {
        sku: String,
        catalog: String,
        known: String,
    },
    /// A spot price was asked for a SKU whose catalog entry has none.
    #[error("price catalog {catalog} has no spot price for `{sku}` (field `gpu_hour_usd_spot`)")]
    NoSpotPrice { sku: String, catalog: String },
}

/// Pricing tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// List on-demand price.
    OnDemand,
    /// Interruptible / spot price (may be reclaimed; only where the catalog documents one).
    Spot,
}

/// A price catalog (the TOML file's shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceCatalog {
    /// Catalog version (a date, `2026-11-30`); record it with any cost computed from the catalog.
    pub version: String,
    /// Currency of every price; only `USD` is accepted.
    pub currency: String,
    /// Where the figures come from, one line each.
    pub sources: Vec<String>,
    /// Shortest billed lease, seconds (AWS EC2 Linux: 60). A GPU stage shorter than this is
    /// billed for this long. ≥ 0.
    pub billing_minimum_s: f64,
    /// The CPU rate, for CPU stages and CPU-only training.
    pub cpu: CpuPrice,
    /// GPU SKUs by name (`T4`, `A100-80GB`, `H200`, …).
    pub sku: BTreeMap<String, GpuSku>,
    /// Object storage classes by name, $ per GB-month.
    #[serde(default)]
    pub storage: BTreeMap<String, StoragePrice>,
    /// Egress routes by name, $ per GB.
    #[serde(default)]
    pub egress: BTreeMap<String, EgressPrice>,
    /// The file the catalog was read from (or the built-in name); for messages.
    #[serde(skip)]
    pub file: String,
}

/// Price of one vCPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuPrice {
    pub provider: String,
    /// Which instance and how the per-vCPU figure was derived.
    pub basis: String,
    /// Where the figure comes from (a row of pipeline-anchors.md or the catalog it cites).
    pub anchor: String,
    /// When the figure was current.
    pub as_of: String,
    /// Confidence mark of the source (`v`, `d`, `m`, `?`).
    pub confidence: String,
    /// USD per vCPU-hour, on-demand. ≥ 0.
    pub vcpu_hour_usd_on_demand: f64,
    /// USD per vCPU-hour, spot; absent when not documented. ≥ 0.
    #[serde(default)]
    pub vcpu_hour_usd_spot: Option<f64>,
}

/// One GPU SKU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSku {
    pub provider: String,
    /// Which instance and how the per-GPU figure was derived.
    pub basis: String,
    /// Where the figure comes from (a row of pipeline-anchors.md §3.2).
    pub anchor: String,
    /// When the figure was current.
    pub as_of: String,
    /// Confidence mark of the source (`v`, `d`, `m`, `?`).
    pub confidence: String,
    /// USD per GPU-hour, on-demand. ≥ 0.
    pub gpu_hour_usd_on_demand: f64,
    /// USD per GPU-hour, spot; absent when the research documents no spot figure. ≥ 0.
    #[serde(default)]
    pub gpu_hour_usd_spot: Option<f64>,
    /// GPU memory, GiB. > 0.
    pub memory_gib: f64,
    /// Datasheet FP32 throughput (no tensor cores), TFLOPS. > 0.
    pub fp32_tflops: f64,
    /// Datasheet memory bandwidth, GB/s. > 0.
    pub memory_bandwidth_gbs: f64,
}

/// One storage class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoragePrice {
    pub provider: String,
    pub basis: String,
    pub anchor: String,
    pub confidence: String,
    /// USD per GB (10⁹ bytes) stored for a month. ≥ 0.
    pub gb_month_usd: f64,
}

/// One egress route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPrice {
    pub provider: String,
    pub basis: String,
    pub anchor: String,
    pub confidence: String,
    /// USD per GB (10⁹ bytes) sent. ≥ 0.
    pub gb_usd: f64,
}

impl PriceCatalog {
    /// The built-in catalog (`jobs/src/prices/default.toml`, compiled in).
    ///
    /// Never fails at run time: a unit test parses and validates it.
    pub fn default_catalog() -> PriceCatalog {
        PriceCatalog::from_toml_str(DEFAULT_TOML, DEFAULT_NAME)
            .expect("the built-in price catalog parses (checked by a unit test)")
    }

    /// Read and validate the catalog at `path`.
    ///
    /// # Errors
    /// [`PriceError::Read`] when the file cannot be read; [`PriceError::Parse`] for bad TOML or a
    /// missing, unknown or mistyped field; [`PriceError::Field`] for an out-of-range value. Each
    /// names the file.
    pub fn from_file(path: &Path) -> Result<PriceCatalog, PriceError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PriceError::Read {
            file: file.clone(),
            source,
        })?;
        PriceCatalog::from_toml_str(&text, &file)
    }

    /// Parse and validate catalog `text`; `file` names it in errors.
    ///
    /// # Errors
    /// As [`PriceCatalog::from_file`], less `Read`.
    pub fn from_toml_str(text: &str, file: &str) -> Result<PriceCatalog, PriceError> {
        let mut cat: PriceCatalog = toml::from_str(text).map_err(|e| PriceError::Parse {
            file: file.to_string(),
            message: match e.span() {
                Some(span) => format!(
                    "line {}: {}",
                    text[..span.start.min(text.len())].lines().count().max(1),
                    e.message().trim_end()
                ),
                None => e.message().trim_end().to_string(),
            },
        })?;
        cat.file = file.to_string();
        cat.validate()?;
        Ok(cat)
    }

    /// Check ranges: a non-empty version, currency `USD`, at least one SKU, every price and the
    /// billing minimum finite and ≥ 0, memory, TFLOPS and bandwidth finite and > 0.
    ///
    /// # Errors
    /// [`PriceError::Field`] naming the first bad field by its dotted path (`sku.T4.gpu_hour_usd_on_demand`).
    pub fn validate(&self) -> Result<(), PriceError> {
        let bad = |field: String, expected: &str, found: String| PriceError::Field {
            file: self.file.clone(),
            field,
            expected: expected.into(),
            found,
        };
        if self.version.trim().is_empty() {
            return Err(bad("version".into(), "a non-empty version", "\"\"".into()));
        }
        if self.currency != "USD" {
            return Err(bad(
                "currency".into(),
                "\"USD\"",
                format!("{:?}", self.currency),
            ));
        }
        if self.sku.is_empty() {
            return Err(bad(
                "sku".into(),
                "at least one [sku.NAME] table",
                "none".into(),
            ));
        }
        let price = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(bad(field, "a price ≥ 0", v.to_string()))
            }
        };
        let positive = |field: String, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(bad(field, "a number > 0", v.to_string()))
            }
        };
        price("billing_minimum_s".into(), self.billing_minimum_s)?;
        price(
            "cpu.vcpu_hour_usd_on_demand".into(),
            self.cpu.vcpu_hour_usd_on_demand,
        )?;
        if let Some(s) = self.cpu.vcpu_hour_usd_spot {
            price("cpu.vcpu_hour_usd_spot".into(), s)?;
        }
        for (name, s) in &self.sku {
            let f = |k: &str| format!("sku.{name}.{k}");
            price(f("gpu_hour_usd_on_demand"), s.gpu_hour_usd_on_demand)?;
            if let Some(spot) = s.gpu_hour_usd_spot {
                price(f("gpu_hour_usd_spot"), spot)?;
            }
            positive(f("memory_gib"), s.memory_gib)?;
            positive(f("fp32_tflops"), s.fp32_tflops)?;
            positive(f("memory_bandwidth_gbs"), s.memory_bandwidth_gbs)?;
        }
        for (name, s) in &self.storage {
            price(format!("storage.{name}.gb_month_usd"), s.gb_month_usd)?;
        }
        for (name, e) in &self.egress {
            price(format!("egress.{name}.gb_usd"), e.gb_usd)?;
        }
        Ok(())
    }

    /// The SKU named `name` (exact, then ASCII-case-insensitive match).
    ///
    /// # Errors
    /// [`PriceError::UnknownSku`] listing the catalog's SKUs.
    pub fn sku(&self, name: &str) -> Result<&GpuSku, PriceError> {
        self.sku
            .get(name)
            .or_else(|| {
                self.sku
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v)
            })
            .ok_or_else(|| PriceError::UnknownSku {
                sku: name.to_string(),
                catalog: self.file.clone(),
                known: self.sku_names().join(", "),
            })
    }

    /// The catalog's SKU names, in catalog (alphabetical) order.
    pub fn sku_names(&self) -> Vec<String> {
        self.sku.keys().cloned().collect()
    }

    /// USD per GPU-hour of `sku` at `tier`.
    ///
    /// # Errors
    /// [`PriceError::UnknownSku`]; [`PriceError::NoSpotPrice`] for [`Tier::Spot`] on a SKU without
    /// a spot figure.
    pub fn gpu_hour_usd(&self, sku: &str, tier: Tier) -> Result<f64, PriceError> {
        let s = self.sku(sku)?;
        match tier {
            Tier::OnDemand => Ok(s.gpu_hour_usd_on_demand),
            Tier::Spot => s.gpu_hour_usd_spot.ok_or_else(|| PriceError::NoSpotPrice {
                sku: sku.to_string(),
                catalog: self.file.clone(),
            }),
        }
    }

    /// USD for holding one `sku` GPU for `seconds` (GPU-seconds) at `tier`:
    /// `seconds / 3600 × $/GPU-hour`. No billing minimum is applied here (see
    /// [`PriceCatalog::billed_seconds`]). `seconds` must be ≥ 0 (a negative value is treated as 0).
    ///
    /// # Errors
    /// As [`PriceCatalog::gpu_hour_usd`].
    pub fn usd_for_gpu_seconds(
        &self,
        sku: &str,
        seconds: f64,
        tier: Tier,
    ) -> Result<f64, PriceError> {
        Ok(seconds.max(0.0) / 3600.0 * self.gpu_hour_usd(sku, tier)?)
    }

    /// USD per vCPU-hour at `tier`; `None` for spot when the catalog has no CPU spot figure.
    pub fn vcpu_hour_usd(&self, tier: Tier) -> Option<f64> {
        match tier {
            Tier::OnDemand => Some(self.cpu.vcpu_hour_usd_on_demand),
            Tier::Spot => self.cpu.vcpu_hour_usd_spot,
        }
    }

    /// USD for `vcpu_seconds` vCPU-seconds at `tier` (`None` as in [`PriceCatalog::vcpu_hour_usd`]).
    pub fn usd_for_vcpu_seconds(&self, vcpu_seconds: f64, tier: Tier) -> Option<f64> {
        self.vcpu_hour_usd(tier)
            .map(|rate| vcpu_seconds.max(0.0) / 3600.0 * rate)
    }

    /// The seconds a lease of `seconds` is billed for: at least `billing_minimum_s` when anything
    /// ran (`seconds > 0`), 0 otherwise.
    pub fn billed_seconds(&self, seconds: f64) -> f64 {
        if seconds > 0.0 {
            seconds.max(self.billing_minimum_s)
        } else {
            0.0
        }
    }

    /// USD for storing `bytes` for `months` in storage class `class`; `None` for an unknown class.
    pub fn usd_for_storage(&self, class: &str, bytes: u64, months: f64) -> Option<f64> {
        self.storage
            .get(class)
            .map(|s| bytes as f64 / 1e9 * months.max(0.0) * s.gb_month_usd)
    }

    /// USD for sending `bytes` over egress route `route`; `None` for an unknown route.
    pub fn usd_for_egress(&self, route: &str, bytes: u64) -> Option<f64> {
        self.egress
            .get(route)
            .map(|e| bytes as f64 / 1e9 * e.gb_usd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_parses_and_has_the_documented_skus() {
        let cat = PriceCatalog::default_catalog();
        assert!(!cat.version.is_empty());
        for sku in [
            "T4",
            "L4",
            "A10G",
            "L40S",
            "A100-40GB",
            "A100-80GB",
            "H100",
            "H200",
        ] {
            let s = cat.sku(sku).unwrap();
            assert!(s.gpu_hour_usd_on_demand > 0.0, "{sku}");
            assert!(!s.anchor.is_empty(), "{sku}");
        }
        assert!(cat.cpu.vcpu_hour_usd_on_demand > 0.0);
        assert!(cat.storage.contains_key("s3-standard"));
        assert!(cat.egress.contains_key("aws-internet"));
        assert_eq!(cat.billing_minimum_s, 60.0);
    }

    #[test]
    fn usd_for_gpu_seconds_is_hours_times_rate() {
        let cat = PriceCatalog::default_catalog();
        // H100 on-demand $6.88/GPU-h: 1800 s = 0.5 h → $3.44; spot $2.34 → $1.17.
        let od = cat
            .usd_for_gpu_seconds("H100", 1800.0, Tier::OnDemand)
            .unwrap();
        assert!((od - 3.44).abs() < 1e-12, "{od}");
        let spot = cat.usd_for_gpu_seconds("H100", 1800.0, Tier::Spot).unwrap();
        assert!((spot - 1.17).abs() < 1e-12, "{spot}");
        // Case-insensitive SKU names.
        assert_eq!(
            cat.usd_for_gpu_seconds("h100", 3600.0, Tier::OnDemand)
                .unwrap(),
            6.88
        );
    }

    #[test]
    fn unknown_sku_error_lists_known_skus() {
        let cat = PriceCatalog::default_catalog();
        let e = cat
            .usd_for_gpu_seconds("B200", 1.0, Tier::OnDemand)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`B200`"), "{e}");
        assert!(
            e.contains("H200") && e.contains("T4") && e.contains("A100-80GB"),
            "{e}"
        );
    }

    #[test]
    fn spot_price_missing_is_an_error_naming_the_field() {
        let cat = PriceCatalog::default_catalog();
        let e = cat.gpu_hour_usd("T4", Tier::Spot).unwrap_err().to_string();
        assert!(e.contains("gpu_hour_usd_spot") && e.contains("`T4`"), "{e}");
    }

    #[test]
    fn negative_price_is_rejected_naming_file_and_field() {
        let text = DEFAULT_TOML.replace(
            "gpu_hour_usd_on_demand = 0.526",
            "gpu_hour_usd_on_demand = -0.526",
        );
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mine.toml"), "{e}");
        assert!(e.contains("sku.T4.gpu_hour_usd_on_demand"), "{e}");
        assert!(e.contains("-0.526"), "{e}");
    }

    #[test]
    fn missing_or_unknown_field_is_a_parse_error_naming_file_and_field() {
        let text = DEFAULT_TOML.replace("memory_gib = 16\n", "");
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mine.toml") && e.contains("memory_gib"), "{e}");
        let text = DEFAULT_TOML.replace("memory_gib = 16\n", "memory_gb = 16\nmemory_gib = 16\n");
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memory_gb"), "{e}");
    }

    #[test]
    fn from_file_names_a_missing_file() {
        let e = PriceCatalog::from_file(Path::new("/nonexistent/prices.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/prices.toml"), "{e}");
    }

    #[test]
    fn storage_egress_and_billing_minimum() {
        let cat = PriceCatalog::default_catalog();
        // 10 GB on S3 Standard for 3 months: 10 × 3 × 0.023 = $0.69.
        let s = cat
            .usd_for_storage("s3-standard", 10_000_000_000, 3.0)
            .unwrap();
        assert!((s - 0.69).abs() < 1e-12, "{s}");
        // 2 GB out to the internet from AWS: 2 × 0.09 = $0.18; R2: $0.
        let e = cat.usd_for_egress("aws-internet", 2_000_000_000).unwrap();
        assert!((e - 0.18).abs() < 1e-12, "{e}");
        assert_eq!(cat.usd_for_egress("r2", 2_000_000_000), Some(0.0));
        assert_eq!(cat.billed_seconds(5.0), 60.0);
        assert_eq!(cat.billed_seconds(90.0), 90.0);
        assert_eq!(cat.billed_seconds(0.0), 0.0);
        // 7200 vCPU-s on demand at $0.03825/vCPU-h = $0.0765.
        let c = cat.usd_for_vcpu_seconds(7200.0, Tier::OnDemand).unwrap();
        assert!((c - 0.0765).abs() < 1e-12, "{c}");
    }
}
