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
//!
//! Besides prices the catalog holds the rules that turn usage into a bill
//! (shared/research/pipeline-anchors.md §3.5):
//! - `[billing.PROVIDER]`: per-provider increment and minimum charge for a GPU lease
//!   ([`PriceCatalog::billed_gpu_seconds`]: `max(minimum_s, ⌈s / granularity_s⌉ × granularity_s)`
//!   per GPU, on-demand and spot; committed capacity is amortised and charged exactly);
//! - `[placement]`: the place the workers run (`aws:us-east-1`), the storage class of what they
//!   store and how long it is kept (stage cache and published outputs), which
//!   [`PriceCatalog::storage_usd_for_days`] prices as `GB × days / 30 × $/GB-month`;
//! - `[[destination]]`: which output URLs live in another place ([`PriceCatalog::output_place`]),
//!   and `[egress.NAME]` routes from place to place ([`PriceCatalog::egress_route`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod mig;
pub use mig::{MIG_SLICES_PER_GPU, MigProfile};

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
    /// A `kiln plan --sku` value that is not a SKU, `SKU:PROFILE` or `SKU:FRACTION`.
    #[error("kiln plan --sku {text}: {problem}")]
    BadSkuOption { text: String, problem: String },
    /// The SKU is not in the catalog.
    #[error("unknown GPU SKU `{sku}` in price catalog {catalog}; known SKUs: {known}")]
    UnknownSku {
        sku: String,
        catalog: String,
        known: String,
    },
    /// The SKU has no `[[mig]]` table for this profile.
    #[error(
        "unknown MIG profile `{profile}` of `{sku}` in price catalog {catalog}; known profiles of `{sku}`: {known}"
    )]
    UnknownMigProfile {
        sku: String,
        profile: String,
        catalog: String,
        known: String,
    },
    /// A spot price was asked for a SKU whose catalog entry has none.
    #[error("price catalog {catalog} has no spot price for `{sku}` (field `gpu_hour_usd_spot`)")]
    NoSpotPrice { sku: String, catalog: String },
    /// A committed price was asked for a SKU whose catalog entry has none.
    #[error(
        "price catalog {catalog} has no committed price for `{sku}` (field `gpu_hour_usd_committed`)"
    )]
    NoCommittedPrice { sku: String, catalog: String },
}

/// Pricing tier (`--pricing on-demand|spot|committed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// List on-demand price, billed by the provider's `[billing.*]` rule.
    OnDemand,
    /// Interruptible / spot price (may be reclaimed; only where the catalog documents one),
    /// billed by the provider's `[billing.*]` rule.
    Spot,
    /// Committed / reserved capacity (`gpu_hour_usd_committed`), amortised: each attempt is
    /// charged its allocated seconds exactly, with no increment or minimum.
    Committed,
}

impl Tier {
    /// The name used on the command line and in reports: `on-demand`, `spot`, `committed`.
    pub fn name(self) -> &'static str {
        match self {
            Tier::OnDemand => "on-demand",
            Tier::Spot => "spot",
            Tier::Committed => "committed",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tier {
    type Err = String;

    /// `on-demand`, `spot` or `committed` (also `on_demand`, `ondemand`, `reserved`).
    fn from_str(s: &str) -> Result<Tier, String> {
        match s.to_ascii_lowercase().as_str() {
            "on-demand" | "on_demand" | "ondemand" => Ok(Tier::OnDemand),
            "spot" => Ok(Tier::Spot),
            "committed" | "reserved" => Ok(Tier::Committed),
            _ => Err(format!(
                "unknown pricing `{s}`: expected on-demand, spot or committed"
            )),
        }
    }
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
    /// Billing rules by provider name (the `provider` of the `[sku.*]` entries).
    #[serde(default)]
    pub billing: BTreeMap<String, BillingRule>,
    /// Where the workers run and how long stored bytes are kept; `None`: storage and egress are
    /// not charged (a catalog written before they were).
    #[serde(default)]
    pub placement: Option<Placement>,
    /// Output URL prefixes that live in another place than `placement.workers`, first match wins.
    #[serde(default)]
    pub destination: Vec<Destination>,
    /// MIG profiles of the catalog's SKUs (`[[mig]]` tables; see [`MigProfile`]).
    #[serde(default)]
    pub mig: Vec<MigProfile>,
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
    /// USD per GPU-hour of committed / reserved capacity, amortised; absent when the research
    /// documents none. ≥ 0.
    #[serde(default)]
    pub gpu_hour_usd_committed: Option<f64>,
    /// Which commitment `gpu_hour_usd_committed` is (term, product) and where it comes from.
    #[serde(default)]
    pub committed_basis: Option<String>,
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
    /// When the figure was current.
    #[serde(default)]
    pub as_of: Option<String>,
    pub confidence: String,
    /// USD per GB (10⁹ bytes) stored for a month. ≥ 0.
    pub gb_month_usd: f64,
}

/// One egress route: bytes sent from place `from` to place `to`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPrice {
    pub provider: String,
    /// Sending place pattern: `provider:region`, `provider:*` or `*`.
    pub from: String,
    /// Receiving place pattern: `provider:region`, `provider:*`, `internet` or `*`.
    pub to: String,
    pub basis: String,
    /// Where the figure comes from (a URL or a row of pipeline-anchors.md §3.3).
    pub anchor: String,
    /// When the figure was current.
    #[serde(default)]
    pub as_of: Option<String>,
    pub confidence: String,
    /// USD per GB (10⁹ bytes) sent. ≥ 0.
    pub gb_usd: f64,
}

/// How one provider bills a GPU lease at on-demand and spot prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillingRule {
    /// The rule in words (which products it covers).
    pub basis: String,
    /// Where it comes from.
    pub anchor: String,
    /// When it was current.
    pub as_of: String,
    /// Confidence mark of the source (`v`, `d`, `m`, `?`).
    pub confidence: String,
    /// Billing increment, seconds: 1 = per second, 60 = per minute, 3600 = per hour. > 0.
    pub granularity_s: f64,
    /// Shortest billed lease, seconds (a lease that ran at all is billed at least this). ≥ 0.
    pub minimum_s: f64,
}

/// Where the workers run and how long what they store is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The workers' place, `provider:region` (`aws:us-east-1`): egress routes start here.
    pub workers: String,
    /// Storage class (a `[storage.*]` name) of the stage cache and of outputs no
    /// `[[destination]]` rule names.
    pub storage_class: String,
    /// Days a stage output in the stage cache is charged for. ≥ 0.
    pub stage_cache_days: f64,
    /// Days a published output is charged for. ≥ 0.
    pub published_days: f64,
}

/// An output URL prefix stored somewhere other than the workers' place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    /// Matches a job's recorded output that starts with it (`s3://tiles-eu/`, `/mnt/tiles-eu/`).
    pub url_prefix: String,
    /// The place, `provider:region` (`aws:eu-west-1`) or `internet`.
    pub place: String,
    /// Storage class there (a `[storage.*]` name); default `placement.storage_class`.
    #[serde(default)]
    pub storage_class: Option<String>,
}

/// Where a job's output is stored and what sending it there costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutputPlace {
    /// The output's place (`aws:eu-west-1`); the workers' place when no rule names the URL.
    pub place: String,
    /// Its storage class (a `[storage.*]` name).
    pub storage_class: String,
    /// The route from the workers to `place`; `None` when they are the same place (free).
    pub route: Option<EgressRoute>,
}

/// The egress route a transfer is priced by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EgressRoute {
    /// The `[egress.NAME]` entry used.
    pub name: String,
    /// Sending and receiving places of the transfer (not the entry's patterns).
    pub from: String,
    pub to: String,
    /// USD per GB (10⁹ bytes).
    pub gb_usd: f64,
    /// `false` when no entry matches and the dearest route's price is charged instead.
    pub matched: bool,
}

impl EgressRoute {
    /// `from → to` with the entry and price, for messages: `aws:us-east-1 → aws:eu-west-1
    /// (egress.aws-inter-region, $0.02/GB)`.
    pub fn describe(&self) -> String {
        let how = if self.matched {
            format!("egress.{}", self.name)
        } else {
            format!(
                "no route in the catalog; priced as the dearest, egress.{}",
                self.name
            )
        };
        format!("{} → {} ({how}, ${}/GB)", self.from, self.to, self.gb_usd)
    }
}

/// The dotted name of the `key = value` field on the line of byte `offset` of catalog `text`
/// (`storage.s3-standard.gb_month_usd`), from the nearest `[table]` header above it; `None`
/// when that line is not a `key = value` line. TOML's own message names the line and the type
/// only.
fn field_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

/// `text` (an output or a `url_prefix`) as the two are compared: a plain path or a `file://` URL
/// as its path ([`kiln_pipeline::location::Location`], the parser jobs' outputs go through), so
/// `file:///data/eu/` matches the output `/data/eu/avocado`; anything else as written.
fn comparable_location(text: &str) -> String {
    match kiln_pipeline::location::Location::parse(text) {
        Ok(kiln_pipeline::location::Location::Local(p)) => p.to_string_lossy().into_owned(),
        _ => text.to_string(),
    }
}

/// How specifically place pattern `pattern` names `place`: 2 exact, 1 `provider:*`, 0 `*`;
/// `None` when it does not match. Places compare ASCII-case-insensitively.
fn place_match(pattern: &str, place: &str) -> Option<u8> {
    if pattern == "*" {
        return Some(0);
    }
    if let Some(provider) = pattern.strip_suffix(":*") {
        let (p, _) = place.split_once(':')?;
        return p.eq_ignore_ascii_case(provider).then_some(1);
    }
    pattern.eq_ignore_ascii_case(place).then_some(2)
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
                    "line {}{}: {}",
                    text[..span.start.min(text.len())].lines().count().max(1),
                    field_at(text, span.start).map_or(String::new(), |f| format!(", field `{f}`")),
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
                Err(bad(field, "a finite price ≥ 0 (USD)", v.to_string()))
            }
        };
        let positive = |field: String, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(bad(field, "a finite number > 0", v.to_string()))
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
        self.validate_billing_and_placement()?;
        self.validate_mig()?;
        Ok(())
    }

    /// Ranges of `[billing.*]`, committed prices, `[placement]` and `[[destination]]`: increments
    /// > 0, minimums, prices and days ≥ 0, places `provider:region`, storage classes that exist.
    fn validate_billing_and_placement(&self) -> Result<(), PriceError> {
        let bad = |field: String, expected: &str, found: String| PriceError::Field {
            file: self.file.clone(),
            field,
            expected: expected.into(),
            found,
        };
        let at_least_0 = |field: String, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(bad(field, "a finite number ≥ 0", v.to_string()))
            }
        };
        for (name, b) in &self.billing {
            let g = b.granularity_s;
            if !(g.is_finite() && g > 0.0) {
                return Err(bad(
                    format!("billing.{name}.granularity_s"),
                    "a number of seconds > 0 (1 = per second, 3600 = per hour)",
                    g.to_string(),
                ));
            }
            at_least_0(format!("billing.{name}.minimum_s"), b.minimum_s)?;
        }
        for (name, s) in &self.sku {
            if let Some(c) = s.gpu_hour_usd_committed {
                at_least_0(format!("sku.{name}.gpu_hour_usd_committed"), c)?;
            }
        }
        let known_class = |field: String, class: &str| {
            if self.storage.contains_key(class) {
                return Ok(());
            }
            let known: Vec<&str> = self.storage.keys().map(String::as_str).collect();
            Err(bad(
                field,
                &format!("a [storage.NAME] class ({})", known.join(", ")),
                format!("{class:?}"),
            ))
        };
        if let Some(p) = &self.placement {
            if !p.workers.contains(':') {
                return Err(bad(
                    "placement.workers".into(),
                    "a place `provider:region` (aws:us-east-1)",
                    format!("{:?}", p.workers),
                ));
            }
            known_class("placement.storage_class".into(), &p.storage_class)?;
            at_least_0("placement.stage_cache_days".into(), p.stage_cache_days)?;
            at_least_0("placement.published_days".into(), p.published_days)?;
        }
        for (i, d) in self.destination.iter().enumerate() {
            if self.placement.is_none() {
                return Err(bad(
                    format!("destination[{i}]"),
                    "a [placement] table (a destination is a place other than the workers')",
                    "no [placement]".into(),
                ));
            }
            if d.url_prefix.is_empty() {
                return Err(bad(
                    format!("destination[{i}].url_prefix"),
                    "a non-empty URL or path prefix",
                    "\"\"".into(),
                ));
            }
            if !(d.place.contains(':') || d.place.eq_ignore_ascii_case("internet")) {
                return Err(bad(
                    format!("destination[{i}].place"),
                    "a place `provider:region` (aws:eu-west-1) or `internet`: without the \
                     provider the egress route cannot be chosen",
                    format!("{:?}", d.place),
                ));
            }
            if let Some(c) = &d.storage_class {
                known_class(format!("destination[{i}].storage_class"), c)?;
            }
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
            Tier::Committed => {
                s.gpu_hour_usd_committed
                    .ok_or_else(|| PriceError::NoCommittedPrice {
                        sku: sku.to_string(),
                        catalog: self.file.clone(),
                    })
            }
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
    /// The catalog has no committed CPU rate: `Committed` answers `None` (callers fall back to
    /// on-demand).
    pub fn vcpu_hour_usd(&self, tier: Tier) -> Option<f64> {
        match tier {
            Tier::OnDemand => Some(self.cpu.vcpu_hour_usd_on_demand),
            Tier::Spot => self.cpu.vcpu_hour_usd_spot,
            Tier::Committed => None,
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

    /// The billing rule of `provider` as (granularity_s, minimum_s): its `[billing.PROVIDER]`
    /// entry (exact, then ASCII-case-insensitive), else per second with the catalog's
    /// `billing_minimum_s`.
    pub fn billing_rule(&self, provider: &str) -> (f64, f64) {
        self.billing
            .get(provider)
            .or_else(|| {
                self.billing
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(provider))
                    .map(|(_, v)| v)
            })
            .map_or((1.0, self.billing_minimum_s), |b| {
                (b.granularity_s, b.minimum_s)
            })
    }

    /// The seconds a lease of one GPU held `seconds` is billed for at `tier`:
    /// `max(minimum_s, ⌈seconds / granularity_s⌉ × granularity_s)` by the SKU's provider rule
    /// (pipeline-anchors.md §3.5 `billed_gpu_s`) for on-demand and spot; `seconds` unchanged for
    /// committed (amortised). 0 when nothing ran (`seconds ≤ 0` or NaN). An unknown SKU is billed
    /// by the catalog's default rule (per second, `billing_minimum_s`).
    ///
    /// Worked example: per-hour billing (granularity 3600 s) bills a 61 s lease 3600 s and a
    /// 3601 s lease 7200 s; AWS (1 s, 60 s minimum) bills 5 s as 60 s and 90.4 s as 91 s.
    pub fn billed_gpu_seconds(&self, sku: &str, seconds: f64, tier: Tier) -> f64 {
        if seconds.is_nan() || seconds <= 0.0 {
            return 0.0;
        }
        if tier == Tier::Committed {
            return seconds;
        }
        let provider = self.sku(sku).map(|s| s.provider.as_str()).unwrap_or("");
        let (granularity, minimum) = self.billing_rule(provider);
        // A hair over a whole increment (float noise in summed timestamps) is not rounded up.
        let increments = (seconds / granularity - 1e-9).ceil().max(1.0);
        (increments * granularity).max(minimum)
    }

    /// USD of an estimated job at pricing `tier`: `gpu_s` GPU-seconds on `sku` (not looked up
    /// when `gpu_s` is 0, so a CPU-only row may name no SKU) billed as one lease ([`PriceCatalog::billed_gpu_seconds`]) plus `vcpu_hours` at the vCPU rate. Spot
    /// answers `None` where the SKU (with GPU time) or the CPU (with CPU time) has no spot price,
    /// as `kiln plan` reports no spot price rather than guessing one; committed falls back to
    /// on-demand where the catalog has no committed price (the capacity can always be bought
    /// on demand).
    ///
    /// # Errors
    /// [`PriceError::UnknownSku`].
    pub fn estimate_usd(
        &self,
        sku: &str,
        gpu_s: f64,
        vcpu_hours: f64,
        tier: Tier,
    ) -> Result<Option<f64>, PriceError> {
        let gpu_usd = if gpu_s > 0.0 {
            let (rate, gpu_tier) = match self.gpu_hour_usd(sku, tier) {
                Ok(r) => (Some(r), tier),
                Err(PriceError::NoCommittedPrice { .. }) => (
                    Some(self.gpu_hour_usd(sku, Tier::OnDemand)?),
                    Tier::OnDemand,
                ),
                Err(PriceError::NoSpotPrice { .. }) => (None, tier),
                Err(e) => return Err(e),
            };
            rate.map(|r| self.billed_gpu_seconds(sku, gpu_s, gpu_tier) / 3600.0 * r)
        } else {
            Some(0.0)
        };
        let cpu_rate = self
            .vcpu_hour_usd(tier)
            .or_else(|| (tier == Tier::Committed).then_some(self.cpu.vcpu_hour_usd_on_demand));
        let cpu_usd = if vcpu_hours > 0.0 {
            cpu_rate.map(|r| vcpu_hours * r)
        } else {
            Some(0.0)
        };
        Ok(gpu_usd.zip(cpu_usd).map(|(g, c)| g + c))
    }

    /// USD of storing `bytes` for `days` in storage class `class`: `GB × days / 30 ×
    /// $/GB-month` (a month = 30 days, §3.5); `None` for an unknown class.
    pub fn storage_usd_for_days(&self, class: &str, bytes: u64, days: f64) -> Option<f64> {
        self.usd_for_storage(class, bytes, days.max(0.0) / 30.0)
    }

    /// Where output `url` (a job's recorded output: a URL or a path) is stored: the first
    /// `[[destination]]` whose `url_prefix` starts it, else the workers' place; and the route
    /// there. `None` when the catalog has no `[placement]` (storage and egress not charged).
    pub fn output_place(&self, url: &str) -> Option<OutputPlace> {
        let p = self.placement.as_ref()?;
        let url = comparable_location(url);
        let rule = self
            .destination
            .iter()
            .find(|d| url.starts_with(&comparable_location(&d.url_prefix)));
        let (place, class) = match rule {
            Some(d) => (
                d.place.clone(),
                d.storage_class
                    .clone()
                    .unwrap_or_else(|| p.storage_class.clone()),
            ),
            None => (p.workers.clone(), p.storage_class.clone()),
        };
        let route = self.egress_route(&p.workers, &place);
        Some(OutputPlace {
            place,
            storage_class: class,
            route,
        })
    }

    /// The route bytes sent from place `from` to place `to` are priced by: `None` for the same
    /// place (free); else the most specific `[egress.*]` entry (from-pattern first, then
    /// to-pattern: exact > `provider:*` > `*`; ties go to the first name), else the dearest
    /// entry with `matched = false` (never under-charged), else a $0 route named `none` when the
    /// catalog has no egress entries at all.
    pub fn egress_route(&self, from: &str, to: &str) -> Option<EgressRoute> {
        if from.eq_ignore_ascii_case(to) {
            return None;
        }
        let mut best: Option<((u8, u8), &String, &EgressPrice)> = None;
        for (name, e) in &self.egress {
            let (Some(f), Some(t)) = (place_match(&e.from, from), place_match(&e.to, to)) else {
                continue;
            };
            if best.is_none_or(|(score, _, _)| (f, t) > score) {
                best = Some(((f, t), name, e));
            }
        }
        let dearest = || {
            self.egress
                .iter()
                .max_by(|a, b| a.1.gb_usd.total_cmp(&b.1.gb_usd))
        };
        let (name, gb_usd, matched) = match (best, dearest()) {
            (Some((_, name, e)), _) => (name.clone(), e.gb_usd, true),
            (None, Some((name, e))) => (name.clone(), e.gb_usd, false),
            (None, None) => ("none".to_string(), 0.0, false),
        };
        Some(EgressRoute {
            name,
            from: from.to_string(),
            to: to.to_string(),
            gb_usd,
            matched,
        })
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

    /// The built-in catalog with the T4 rented from a provider billing per whole hour.
    fn hourly_t4_catalog() -> PriceCatalog {
        let text = DEFAULT_TOML.replace(
            "[sku.T4]\nprovider = \"AWS\"",
            "[sku.T4]\nprovider = \"HourlyCloud\"",
        ) + "\n[billing.HourlyCloud]\nbasis = \"test: per-hour billing\"\nanchor = \"test\"\n\
             as_of = \"2026-12-02\"\nconfidence = \"?\"\ngranularity_s = 3600.0\nminimum_s = 0.0\n";
        PriceCatalog::from_toml_str(&text, "hourly.toml").unwrap()
    }

    #[test]
    fn per_hour_billing_rounds_a_lease_up_to_whole_hours() {
        let cat = hourly_t4_catalog();
        assert_eq!(cat.billed_gpu_seconds("T4", 61.0, Tier::OnDemand), 3600.0);
        assert_eq!(cat.billed_gpu_seconds("T4", 3600.0, Tier::OnDemand), 3600.0);
        assert_eq!(cat.billed_gpu_seconds("T4", 3601.0, Tier::OnDemand), 7200.0);
        assert_eq!(cat.billed_gpu_seconds("T4", 0.0, Tier::OnDemand), 0.0);
        // 61 s of a T4 at $0.526/h billed as a whole hour: $0.526.
        let usd = cat
            .estimate_usd("T4", 61.0, 0.0, Tier::OnDemand)
            .unwrap()
            .unwrap();
        assert!((usd - 0.526).abs() < 1e-12, "{usd}");
    }

    #[test]
    fn aws_per_second_billing_has_a_60_s_minimum() {
        let cat = PriceCatalog::default_catalog();
        assert_eq!(cat.billing_rule("AWS"), (1.0, 60.0));
        assert_eq!(cat.billed_gpu_seconds("H100", 5.0, Tier::OnDemand), 60.0);
        assert_eq!(cat.billed_gpu_seconds("H100", 5.0, Tier::Spot), 60.0);
        assert_eq!(cat.billed_gpu_seconds("H100", 90.4, Tier::OnDemand), 91.0);
        assert_eq!(cat.billed_gpu_seconds("H100", 90.0, Tier::OnDemand), 90.0);
        // 5 s of an H100 on demand: 60 s × $6.88/3600 = $0.114666…
        let usd = cat
            .estimate_usd("H100", 5.0, 0.0, Tier::OnDemand)
            .unwrap()
            .unwrap();
        assert!((usd - 60.0 * 6.88 / 3600.0).abs() < 1e-12, "{usd}");
    }

    #[test]
    fn per_minute_billing_without_minimum_rounds_to_whole_minutes() {
        let text = DEFAULT_TOML.replace(
            "[sku.L4]\nprovider = \"AWS\"",
            "[sku.L4]\nprovider = \"CoreWeave\"",
        );
        let cat = PriceCatalog::from_toml_str(&text, "cw.toml").unwrap();
        assert_eq!(cat.billing_rule("coreweave"), (60.0, 0.0));
        assert_eq!(cat.billed_gpu_seconds("L4", 1.0, Tier::OnDemand), 60.0);
        assert_eq!(cat.billed_gpu_seconds("L4", 61.0, Tier::OnDemand), 120.0);
        assert_eq!(cat.billed_gpu_seconds("L4", 120.0, Tier::OnDemand), 120.0);
    }

    #[test]
    fn committed_capacity_is_amortised_at_its_own_rate_without_rounding() {
        let cat = PriceCatalog::default_catalog();
        assert_eq!(cat.billed_gpu_seconds("H100", 5.0, Tier::Committed), 5.0);
        // Half an hour of an H100 Capacity Block at $4.916/GPU-h: $2.458.
        let usd = cat
            .estimate_usd("H100", 1800.0, 0.0, Tier::Committed)
            .unwrap()
            .unwrap();
        assert!((usd - 2.458).abs() < 1e-12, "{usd}");
        // No committed price for the T4: on-demand, billed by the AWS rule (5 s → 60 s).
        let t4 = cat
            .estimate_usd("T4", 5.0, 0.0, Tier::Committed)
            .unwrap()
            .unwrap();
        assert!((t4 - 60.0 * 0.526 / 3600.0).abs() < 1e-12, "{t4}");
        // Spot without a spot price is not guessed; CPU-only rows need no SKU.
        assert_eq!(cat.estimate_usd("T4", 5.0, 0.0, Tier::Spot).unwrap(), None);
        let cpu = cat
            .estimate_usd("cpu", 0.0, 2.0, Tier::Committed)
            .unwrap()
            .unwrap();
        assert!((cpu - 2.0 * 0.03825).abs() < 1e-12, "{cpu}");
        let e = cat
            .gpu_hour_usd("T4", Tier::Committed)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gpu_hour_usd_committed") && e.contains("`T4`"),
            "{e}"
        );
    }

    #[test]
    fn a_provider_without_a_billing_rule_uses_the_catalog_minimum_per_second() {
        let cat = PriceCatalog::default_catalog();
        assert_eq!(cat.billing_rule("Nowhere"), (1.0, 60.0));
        assert_eq!(cat.billed_gpu_seconds("B200", 5.5, Tier::OnDemand), 60.0);
    }

    #[test]
    fn pricing_modes_parse_from_their_command_line_names() {
        assert_eq!("on-demand".parse::<Tier>(), Ok(Tier::OnDemand));
        assert_eq!("spot".parse::<Tier>(), Ok(Tier::Spot));
        assert_eq!("committed".parse::<Tier>(), Ok(Tier::Committed));
        assert_eq!("reserved".parse::<Tier>(), Ok(Tier::Committed));
        let e = "cheap".parse::<Tier>().unwrap_err();
        assert!(e.contains("on-demand, spot or committed"), "{e}");
        assert_eq!(Tier::Committed.to_string(), "committed");
    }

    #[test]
    fn egress_routes_pick_the_most_specific_entry() {
        let cat = PriceCatalog::default_catalog();
        let r = |to: &str| cat.egress_route("aws:us-east-1", to);
        assert_eq!(r("aws:us-east-1"), None, "same place is free");
        let eu = r("aws:eu-west-1").unwrap();
        assert_eq!(
            (eu.name.as_str(), eu.gb_usd, eu.matched),
            ("aws-inter-region", 0.02, true)
        );
        let ohio = r("aws:us-east-2").unwrap();
        assert_eq!(
            (ohio.name.as_str(), ohio.gb_usd),
            ("aws-us-east-1-to-us-east-2", 0.01)
        );
        let gcp = r("gcp:us-central1").unwrap();
        assert_eq!((gcp.name.as_str(), gcp.gb_usd), ("aws-internet", 0.09));
        assert_eq!(r("internet").unwrap().gb_usd, 0.09);
        // From a place no entry covers: the dearest route, marked as not matched.
        let odd = cat
            .egress_route("azure:westeurope", "aws:us-east-1")
            .unwrap();
        assert_eq!((odd.gb_usd, odd.matched), (0.1118, false));
        assert!(
            odd.describe().contains("no route in the catalog"),
            "{}",
            odd.describe()
        );
    }

    #[test]
    fn outputs_are_placed_by_the_first_destination_rule_else_with_the_workers() {
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"s3://tiles-eu/\"\nplace = \"aws:eu-west-1\"\n\
             [[destination]]\nurl_prefix = \"s3://tiles-\"\nplace = \"cloudflare:auto\"\nstorage_class = \"r2\"\n"
        );
        let cat = PriceCatalog::from_toml_str(&text, "dest.toml").unwrap();
        let eu = cat.output_place("s3://tiles-eu/fox").unwrap();
        assert_eq!(
            (eu.place.as_str(), eu.storage_class.as_str()),
            ("aws:eu-west-1", "s3-standard")
        );
        assert_eq!(eu.route.unwrap().gb_usd, 0.02);
        let r2 = cat.output_place("s3://tiles-us/fox").unwrap();
        assert_eq!(
            (r2.place.as_str(), r2.storage_class.as_str()),
            ("cloudflare:auto", "r2")
        );
        // Leaving AWS for Cloudflare is internet egress.
        assert_eq!(r2.route.unwrap().name, "aws-internet");
        let home = cat.output_place("out/fox").unwrap();
        assert_eq!((home.place.as_str(), home.route), ("aws:us-east-1", None));
    }

    #[test]
    fn a_mistyped_or_infinite_price_names_its_field_and_asks_for_a_finite_number() {
        let text = DEFAULT_TOML.replacen("gb_month_usd = 0.023", "gb_month_usd = \"cheap\"", 1);
        assert_ne!(text, DEFAULT_TOML);
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml") && e.contains("field `storage.s3-standard.gb_month_usd`"),
            "{e}"
        );
        let text = DEFAULT_TOML.replacen(
            "vcpu_hour_usd_on_demand = ",
            "vcpu_hour_usd_on_demand = inf\n# was ",
            1,
        );
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a finite price ≥ 0") && e.contains("found inf"),
            "{e}"
        );
    }

    #[test]
    fn a_destination_place_without_provider_is_refused_naming_the_field_and_the_fix() {
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"s3://tiles-eu/\"\nplace = \"eu-west-1\"\n"
        );
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml")
                && e.contains("destination[0].place")
                && e.contains("aws:eu-west-1")
                && e.contains("\"eu-west-1\""),
            "{e}"
        );
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"https://cdn/\"\nplace = \"internet\"\n"
        );
        assert!(PriceCatalog::from_toml_str(&text, "ok.toml").is_ok());
    }

    #[test]
    fn file_urls_and_plain_paths_match_each_other_as_destinations() {
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"file:///data/eu/\"\nplace = \"aws:eu-west-1\"\n\
             [[destination]]\nurl_prefix = \"/data/us2/\"\nplace = \"aws:us-east-2\"\n"
        );
        let cat = PriceCatalog::from_toml_str(&text, "dest.toml").unwrap();
        for out in ["/data/eu/avocado", "file:///data/eu/avocado"] {
            let eu = cat.output_place(out).unwrap();
            assert_eq!(eu.place, "aws:eu-west-1", "{out}");
            // AWS to another AWS region: $0.02/GB.
            assert_eq!(eu.route.unwrap().gb_usd, 0.02, "{out}");
        }
        for out in ["/data/us2/fox", "file:///data/us2/fox"] {
            assert_eq!(
                cat.output_place(out).unwrap().place,
                "aws:us-east-2",
                "{out}"
            );
        }
        let home = cat.output_place("/data/elsewhere/fox").unwrap();
        assert_eq!(home.route, None);
    }

    #[test]
    fn storage_for_days_is_gb_times_days_over_30_times_the_monthly_rate() {
        let cat = PriceCatalog::default_catalog();
        // 10 GB on S3 Standard for 15 days: 10 × 15/30 × 0.023 = $0.115.
        let s = cat
            .storage_usd_for_days("s3-standard", 10_000_000_000, 15.0)
            .unwrap();
        assert!((s - 0.115).abs() < 1e-12, "{s}");
        let p = cat.placement.as_ref().unwrap();
        assert_eq!((p.stage_cache_days, p.published_days), (30.0, 30.0));
        assert_eq!(p.workers, "aws:us-east-1");
    }

    #[test]
    fn bad_billing_and_placement_fields_are_named() {
        let text = DEFAULT_TOML.replacen("granularity_s = 1.0", "granularity_s = 0.0", 1);
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mine.toml") && e.contains("billing.AWS.granularity_s"),
            "{e}"
        );
        let text = format!(
            "{DEFAULT_TOML}\n[[destination]]\nurl_prefix = \"s3://x/\"\nplace = \"aws:eu-west-1\"\nstorage_class = \"glacier\"\n"
        );
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("destination[0].storage_class") && e.contains("s3-standard"),
            "{e}"
        );
        let text = DEFAULT_TOML.replace("workers = \"aws:us-east-1\"", "workers = \"virginia\"");
        let e = PriceCatalog::from_toml_str(&text, "mine.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("placement.workers") && e.contains("provider:region"),
            "{e}"
        );
    }
}
