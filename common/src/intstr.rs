//! Int-or-percent arithmetic with the Kubernetes rounding rules (`GetScaledValueFromIntOrPercent`).
//!
//! Percentages of a total are rounded up or down depending on the field: `maxSurge` and `createBatch` round up,
//! `maxUnavailable` and `partition` round down — as Deployments, CloneSet and the BCS update budget do. Unlike
//! BCS, which silently treats a malformed percentage as 0, a malformed value is an error the operator reports.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntStrError {
    #[error("invalid value {value:?} for {field}: a string must be a percentage such as \"20%\"")]
    NotAPercentage { field: &'static str, value: String },
    #[error("invalid value {value} for {field}: must not be negative")]
    Negative { field: &'static str, value: i64 },
}

/// How a percentage of a total becomes a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    Up,
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
