//! Bounds of the numeric stage parameters. Each parameter type that is a table of a job file
//! (`ReconstructParams` is `[reconstruct]`, `SplatTileParams` is `[tile]`, …) declares the bounds
//! of its numeric fields with [`Bounded`]; its `validate()` checks them with
//! [`Bounded::check_bounds`] and adds only the rules a range cannot express (`fanout` ∈ {2, 4},
//! ratios strictly descending, an open end such as `> 0`). kiln-jobs collects the same tables to
//! name a field's bound in job-file errors and to print the table of `docs/job-file.md`
//! ("Limits"), so each range is written once, here beside its field.
//!
//! The bounds are generous: each is far above what any published recipe uses (3DGS trains 30 k
//! steps to a few million splats), and each says why it is where it is. They stop a typo or a
//! hostile request (`steps = 9.2e18`, `init_random_points = 1e12`) at once, naming the field and
//! the limit, instead of holding a GPU for years or exhausting a worker's memory.
//!
//! NaN and ±infinity are outside every bound (they are refused as "a finite number …").

use serde::Serialize;
use serde_json::Value;

use crate::{Error, Result};

/// The bound of one numeric field of a parameter table: a scalar, or a list whose every element
/// lies in `min ..= max` and which holds at most `max_len` elements. Both ends are inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The field's key in its table (`steps`, `ratios`), as serialised.
    pub key: &'static str,
    /// Smallest value accepted (inclusive).
    pub min: f64,
    /// Largest value accepted (inclusive).
    pub max: f64,
    /// For list fields, the most elements; 0 for scalars.
    pub max_len: usize,
    /// Why the bound is where it is (and the field's unit), shown in errors and docs.
    pub why: &'static str,
}

impl Bound {
    /// The bound of a scalar field.
    pub const fn scalar(key: &'static str, min: f64, max: f64, why: &'static str) -> Bound {
        Bound {
            key,
            min,
            max,
            max_len: 0,
            why,
        }
    }

    /// The bound of a list field: every element in `min ..= max`, at most `max_len` of them.
    pub const fn list(
        key: &'static str,
        min: f64,
        max: f64,
        max_len: usize,
        why: &'static str,
    ) -> Bound {
        Bound {
            key,
            min,
            max,
            max_len,
            why,
        }
    }

    /// `min ..= max`, as errors and docs print it (`1 ..= 1000000`).
    pub fn range(&self) -> String {
        format!(
            "{} ..= {}",
            format_number(self.min),
            format_number(self.max)
        )
    }

    /// `min ..= max (why)`: what an error expects.
    pub fn expected(&self) -> String {
        format!("{} ({})", self.range(), self.why)
    }

    /// Whether `x` is within the bound (never for NaN).
    pub fn contains(&self, x: f64) -> bool {
        (self.min..=self.max).contains(&x)
    }
}

/// A parameter type that is one table of a job file, with the bounds of its numeric fields.
pub trait Bounded: Serialize {
    /// The job-file table (`train`, `tile`, `mesh_tile`); also the `stage` of its
    /// [`Error::Param`]s.
    const TABLE: &'static str;

    /// The bound of every numeric field the table can hold, in the table's order.
    const BOUNDS: &'static [Bound];

    /// The fields [`Bounded::check_bounds`] checks, as a JSON object: the value serialised
    /// (`serde_json::to_value`). A type whose serialised form leaves out fields a job file can
    /// set (settings kept out of a stage's cache key) adds them here.
    fn bounded_values(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Check every field of [`Bounded::bounded_values`] that has a bound in
    /// [`Bounded::BOUNDS`], in that order.
    ///
    /// # Errors
    /// [`Error::Param`] on the first field out of bounds, naming it (a list element as
    /// `key[i]`), its range and why: a number outside `min ..= max`, NaN or ±infinity, or a list
    /// longer than `max_len`.
    fn check_bounds(&self) -> Result<()> {
        check(self, Self::TABLE, Self::BOUNDS, &self.bounded_values())
    }
}

fn check<T: Serialize + ?Sized>(
    value: &T,
    table: &'static str,
    bounds: &[Bound],
    fields: &Value,
) -> Result<()> {
    let error = |field: String, expected: String, found: String| Error::Param {
        stage: table,
        field,
        expected,
        found,
    };
    // JSON has no NaN or infinity (serde_json writes them as null, as it writes a `None`): the
    // TOML form, which has both and leaves a `None` out, tells them apart. Built only when a
    // bounded field is null.
    let mut toml_form: Option<Option<toml::Value>> = None;
    let mut non_finite = |key: &str, index: Option<usize>| -> Option<String> {
        let form = toml_form.get_or_insert_with(|| toml::Value::try_from(value).ok());
        // Without a TOML form (an integer beyond i64, which only an in-range u64 seed can be) a
        // null is taken as a non-finite number.
        let Some(form) = form else {
            return Some("NaN or infinite".into());
        };
        let field = form.get(key)?;
        let x = match index {
            Some(i) => field.get(i)?,
            None => field,
        };
        Some(
            x.as_float()
                .map_or_else(|| x.to_string(), |x| x.to_string()),
        )
    };
    for bound in bounds {
        let Some(field) = fields.get(bound.key) else {
            continue;
        };
        let mut check_number = |name: String, v: &Value, index: Option<usize>| match v {
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::INFINITY);
                if bound.contains(x) {
                    Ok(())
                } else {
                    Err(error(name, bound.expected(), format_number(x)))
                }
            }
            Value::Null => match non_finite(bound.key, index) {
                Some(found) => Err(error(
                    name,
                    format!("a finite number {}", bound.expected()),
                    found,
                )),
                None => Ok(()),
            },
            _ => Ok(()),
        };
        match field {
            Value::Array(items) => {
                if items.len() > bound.max_len {
                    return Err(error(
                        bound.key.into(),
                        format!("at most {} values ({})", bound.max_len, bound.why),
                        format!("{} values", items.len()),
                    ));
                }
                for (i, item) in items.iter().enumerate() {
                    check_number(format!("{}[{i}]", bound.key), item, Some(i))?;
                }
            }
            v => check_number(bound.key.into(), v, None)?,
        }
    }
    Ok(())
}

/// A bound or value without float noise: integers as integers, large values in exponent form.
pub fn format_number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// Test support: `value`'s numeric fields (numbers, and lists holding numbers, in
/// [`Bounded::bounded_values`]) that have no bound, and the bounds that name no such field.
/// `value` should have every optional field set, so that each is serialised.
#[cfg(test)]
pub(crate) fn unbounded_and_stale<T: Bounded>(value: &T) -> (Vec<String>, Vec<&'static str>) {
    let fields = value.bounded_values();
    let numeric: Vec<&String> = fields
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| match v {
            Value::Number(_) => true,
            Value::Array(items) => items.iter().any(Value::is_number),
            _ => false,
        })
        .map(|(k, _)| k)
        .collect();
    let unbounded = numeric
        .iter()
        .filter(|k| !T::BOUNDS.iter().any(|b| b.key == k.as_str()))
        .map(|k| k.to_string())
        .collect();
    let stale = T::BOUNDS
        .iter()
        .filter(|b| !numeric.iter().any(|k| k.as_str() == b.key))
        .map(|b| b.key)
        .collect();
    (unbounded, stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Table {
        count: usize,
        share: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<f32>,
        maybe: Option<u32>,
        list: Vec<f32>,
        label: String,
    }

    impl Bounded for Table {
        const TABLE: &'static str = "table";
        const BOUNDS: &'static [Bound] = &[
            Bound::scalar("count", 1.0, 100.0, "things"),
            Bound::scalar("share", 0.0, 1.0, "a fraction"),
            Bound::scalar("skipped", 0.0, 1.0, "a fraction"),
            Bound::scalar("maybe", 16.0, 64.0, "pixels"),
            Bound::list("list", 0.0, 1.0, 3, "linear RGB"),
        ];
    }

    fn ok() -> Table {
        Table {
            count: 10,
            share: 0.5,
            skipped: None,
            maybe: None,
            list: vec![0.0, 1.0],
            label: "x".into(),
        }
    }

    fn err(t: &Table) -> String {
        t.check_bounds().unwrap_err().to_string()
    }

    #[test]
    fn values_within_bounds_and_absent_options_pass() {
        ok().check_bounds().unwrap();
        Table {
            skipped: Some(1.0),
            maybe: Some(16),
            count: 100,
            ..ok()
        }
        .check_bounds()
        .unwrap();
        assert_eq!(
            unbounded_and_stale(&ok()),
            (vec![], vec!["skipped", "maybe"])
        );
        let full = Table {
            skipped: Some(0.5),
            maybe: Some(20),
            ..ok()
        };
        assert_eq!(unbounded_and_stale(&full), (vec![], vec![]));
    }

    #[test]
    fn a_value_out_of_bounds_names_the_field_the_range_and_why() {
        let e = err(&Table { count: 0, ..ok() });
        assert_eq!(
            e,
            "stage `table`: parameter `count`: expected 1 ..= 100 (things), found 0"
        );
        let e = err(&Table {
            maybe: Some(8),
            ..ok()
        });
        assert!(
            e.contains("`maybe`: expected 16 ..= 64 (pixels), found 8"),
            "{e}"
        );
        let e = err(&Table { share: 1.5, ..ok() });
        assert!(
            e.contains("`share`: expected 0 ..= 1 (a fraction), found 1.5"),
            "{e}"
        );
    }

    #[test]
    fn nan_and_infinity_are_refused_as_not_finite() {
        for (t, field, found) in [
            (
                Table {
                    share: f64::NAN,
                    ..ok()
                },
                "`share`",
                "found NaN",
            ),
            (
                Table {
                    skipped: Some(f32::INFINITY),
                    ..ok()
                },
                "`skipped`",
                "found inf",
            ),
            (
                Table {
                    list: vec![0.5, f32::NEG_INFINITY],
                    ..ok()
                },
                "`list[1]`",
                "found -inf",
            ),
        ] {
            let e = err(&t);
            assert!(
                e.contains(field) && e.contains("expected a finite number") && e.contains(found),
                "{e}"
            );
        }
    }

    #[test]
    fn lists_are_bounded_in_length_and_in_every_element() {
        let e = err(&Table {
            list: vec![0.5; 4],
            ..ok()
        });
        assert!(
            e.contains("`list`: expected at most 3 values (linear RGB), found 4 values"),
            "{e}"
        );
        let e = err(&Table {
            list: vec![0.5, 2.0],
            ..ok()
        });
        assert!(
            e.contains("`list[1]`: expected 0 ..= 1 (linear RGB), found 2"),
            "{e}"
        );
    }

    #[test]
    fn numbers_print_without_float_noise() {
        assert_eq!(format_number(1_000_000.0), "1000000");
        assert_eq!(format_number(0.01), "0.01");
        assert_eq!(format_number(u64::MAX as f64), "18446744073709552000");
    }
}
