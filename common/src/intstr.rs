//! Int-or-percent arithmetic with the Kubernetes rounding rules (`GetScaledValueFromIntOrPercent`).
//!
//! Percentages of a total are rounded up or down depending on the field: `maxSurge` and `createBatch` round up,
//! `maxUnavailable` rounds down — as Deployments, CloneSet and the BCS update budget do; `partition` follows
//! CloneSet's own rules ([`partition`]: up, at least one pod kept and one updated). Unlike
//! BCS, which silently treats a malformed percentage as 0, a malformed value is an error the operator reports.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// An int-or-percent field the operator cannot use; reported on the workload instead of being read as 0 (as BCS does).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntStrError {
    /// A string that is not `<digits>%`.
    #[error("invalid value {value:?} for {field}: a string must be a percentage such as \"20%\"")]
    NotAPercentage {
        /// The field's path, as the user knows it (`spec.updateStrategy.maxSurge`).
        field: &'static str,
        /// The string as written.
        value: String,
    },
    /// A negative count or percentage.
    #[error("invalid value {value} for {field}: must not be negative")]
    Negative {
        /// The field's path, as the user knows it.
        field: &'static str,
        /// The negative value.
        value: i64,
    },
}

/// How a percentage of a total becomes a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Towards more pods (`maxSurge`, `createBatch`, `partition`): a small percentage still means one.
    Up,
    /// Towards fewer pods (`maxUnavailable`): a budget is never exceeded by rounding.
    Down,
}

/// Resolves `value` against `total`. `field` names the field in error messages (`spec.updateStrategy.maxSurge`).
pub fn scaled_value(
    value: &IntOrString,
    total: i32,
    rounding: Rounding,
    field: &'static str,
) -> Result<i32, IntStrError> {
    match value {
        IntOrString::Int(n) if *n < 0 => Err(IntStrError::Negative { field, value: i64::from(*n) }),
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let percent = parse_percent(s).ok_or_else(|| IntStrError::NotAPercentage { field, value: s.clone() })?;
            let product = i64::from(percent) * i64::from(total.max(0));
            let scaled = match rounding {
                Rounding::Up => (product + 99) / 100,
                Rounding::Down => product / 100,
            };
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// `"25%"` → 25. Kubernetes accepts only non-negative decimal integers before the `%`.
fn parse_percent(s: &str) -> Option<i32> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Resolves an optional value, using `default` when it is unset.
pub fn scaled_value_or(
    value: Option<&IntOrString>,
    default: i32,
    total: i32,
    rounding: Rounding,
    field: &'static str,
) -> Result<i32, IntStrError> {
    value.map_or(Ok(default), |v| scaled_value(v, total, rounding, field))
}

/// A `partition` (old pods kept) as OpenKruise CloneSet resolves it (`CalculatePartitionReplicas`,
/// pkg/util/tools.go): unset is 0; an integer is taken as is; a percentage of `replicas` rounds **up**, so a
/// partition above "0%" keeps at least one old pod; one below "100%" (the literal string, as Kruise compares it)
/// with more than one replica updates at least one pod; the result is capped at `replicas`. Percentages may have a
/// decimal part ("99.99%"), computed in `f64` as Kruise does.
pub fn partition(value: Option<&IntOrString>, replicas: i32, field: &'static str) -> Result<i32, IntStrError> {
    let Some(value) = value else { return Ok(0) };
    let replicas = replicas.max(0);
    let kept = match value {
        IntOrString::Int(n) if *n < 0 => return Err(IntStrError::Negative { field, value: i64::from(*n) }),
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => {
            let percent =
                parse_decimal_percent(s).ok_or_else(|| IntStrError::NotAPercentage { field, value: s.clone() })?;
            // Go: int(math.Ceil(v * (float64(total)) / 100)), same operations in the same order.
            let scaled = (percent * f64::from(replicas) / 100.0).ceil();
            let mut kept = if scaled >= f64::from(i32::MAX) { i32::MAX } else { scaled as i32 };
            if replicas > 1 && kept == replicas && s != "100%" {
                kept = replicas - 1;
            }
            kept
        }
    };
    Ok(kept.clamp(0, replicas))
}

/// `"99.99%"` → 99.99: digits, optionally a point and more digits, then `%` (the CRD's `partition` pattern).
fn parse_decimal_percent(s: &str) -> Option<f64> {
    let number = s.strip_suffix('%')?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, "0"));
    let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) {
        return None;
    }
    number.parse().ok()
}

/// The update budget of a rollout as Deployments compute it (`ResolveFenceposts`): surge rounds up,
/// unavailable rounds down, and when both come out 0 one pod may be unavailable so the rollout can progress.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), IntStrError> {
    let surge = scaled_value_or(max_surge, 0, replicas, Rounding::Up, "spec.updateStrategy.maxSurge")?;
    let unavailable =
        scaled_value_or(max_unavailable, 0, replicas, Rounding::Down, "spec.updateStrategy.maxUnavailable")?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.to_string())
    }

    #[test]
    fn integers_are_taken_as_is() {
        assert_eq!(scaled_value(&IntOrString::Int(3), 10, Rounding::Down, "f"), Ok(3));
        assert_eq!(scaled_value(&IntOrString::Int(30), 10, Rounding::Up, "f"), Ok(30));
    }

    #[test]
    fn percentages_round_as_kubernetes() {
        // 20% of 6 = 1.2
        assert_eq!(scaled_value(&s("20%"), 6, Rounding::Down, "f"), Ok(1));
        assert_eq!(scaled_value(&s("20%"), 6, Rounding::Up, "f"), Ok(2));
        // exact values do not round
        assert_eq!(scaled_value(&s("25%"), 8, Rounding::Up, "f"), Ok(2));
        assert_eq!(scaled_value(&s("25%"), 8, Rounding::Down, "f"), Ok(2));
        assert_eq!(scaled_value(&s("0%"), 8, Rounding::Up, "f"), Ok(0));
        assert_eq!(scaled_value(&s("100%"), 7, Rounding::Down, "f"), Ok(7));
        assert_eq!(scaled_value(&s("1%"), 1, Rounding::Up, "f"), Ok(1));
        assert_eq!(scaled_value(&s("1%"), 1, Rounding::Down, "f"), Ok(0));
        assert_eq!(scaled_value(&s("150%"), 4, Rounding::Down, "f"), Ok(6));
    }

    #[test]
    fn malformed_values_are_errors_not_zero() {
        for bad in ["20", "%", "2 0%", "-5%", "abc", "20.5%", ""] {
            let err = scaled_value(&s(bad), 10, Rounding::Down, "spec.updateStrategy.maxUnavailable").unwrap_err();
            assert!(err.to_string().contains("maxUnavailable"), "{err}");
        }
        assert!(matches!(
            scaled_value(&IntOrString::Int(-1), 10, Rounding::Down, "f"),
            Err(IntStrError::Negative { .. })
        ));
    }

    /// Every case of OpenKruise's `TestCalculatePartitionReplicas` (pkg/util/tools_test.go; `replicas=nil` is 1
    /// there, as an unset `spec.replicas` defaults to 1 here) and the partition-relevant cases of
    /// `TestGetScaledValueFromIntOrPercent` (same file, rounding up), plus the example.
    #[test]
    fn partition_as_kruise_calculates_it() {
        let i = |n: i32| Some(IntOrString::Int(n));
        let p = |v: &str| Some(s(v));
        // (replicas, partition, expected; None = an error)
        let table: Vec<(i32, Option<IntOrString>, Option<i32>)> = vec![
            // TestCalculatePartitionReplicas
            (0, p("99%"), Some(0)),
            (10, None, Some(0)),
            (9, p("99%"), Some(8)),
            (10, p("90%"), Some(9)),
            (10, p("1%"), Some(1)),
            (99, p("99%"), Some(98)),
            (99, p("100%"), Some(99)),
            (99, p("0%"), Some(0)),
            (1, p("100%"), Some(1)),
            (1, None, Some(0)),
            (1, p("1%"), Some(1)),
            (10, i(5), Some(5)),
            (10, i(1), Some(1)),
            (10, i(0), Some(0)),
            (10, i(10), Some(10)),
            (9, p("99"), None),
            (9, p("0.01%"), Some(1)),
            (999, p("99.99%"), Some(998)),
            // TestGetScaledValueFromIntOrPercent, roundUp = true (then the partition rules)
            (100, p("90%"), Some(90)),
            (95, p("90%"), Some(86)),
            (95, p("0.01%"), Some(1)),
            (10, p("%"), None),
            (10, p("90#"), None),
            (10, p("#%"), None),
            // Issue 31: 50 % of 5 keeps 3 old pods (2.5 rounded up); an integer above replicas is capped.
            (5, p("50%"), Some(3)),
            (5, i(7), Some(5)),
            (2, p("99%"), Some(1)),
            (2, p("100%"), Some(2)),
        ];
        for (replicas, value, want) in table {
            let got = partition(value.as_ref(), replicas, "spec.updateStrategy.partition").ok();
            assert_eq!(got, want, "replicas {replicas}, partition {value:?}");
        }
    }

    #[test]
    fn fenceposts_never_deadlock() {
        assert_eq!(resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&IntOrString::Int(0)), 5), Ok((0, 1)));
        assert_eq!(resolve_fenceposts(Some(&s("25%")), Some(&s("25%")), 10), Ok((3, 2)));
        assert_eq!(resolve_fenceposts(None, Some(&s("20%")), 3), Ok((0, 1)));
        assert_eq!(resolve_fenceposts(Some(&IntOrString::Int(2)), Some(&IntOrString::Int(0)), 4), Ok((2, 0)));
    }

    proptest::proptest! {
        #[test]
        fn percent_bounds(p in 0i32..=200, total in 0i32..=10_000) {
            let down = scaled_value(&s(&format!("{p}%")), total, Rounding::Down, "f").unwrap();
            let up = scaled_value(&s(&format!("{p}%")), total, Rounding::Up, "f").unwrap();
            proptest::prop_assert!(down <= up && up - down <= 1);
            proptest::prop_assert!(i64::from(down) * 100 <= i64::from(p) * i64::from(total));
            proptest::prop_assert!(i64::from(up) * 100 >= i64::from(p) * i64::from(total));
        }
    }
}
