//! Kubernetes resource quantities (`500m`, `1.5Gi`, `1e3`) as plain numbers.
//!
//! The scheduler only needs to compare requests with what a node offers, so an `f64` in base
//! units (cores, bytes) is precise enough and keeps the arithmetic trivial.

/// Parses a quantity into base units, or `None` when it is not a valid quantity.
pub(super) fn parse(text: &str) -> Option<f64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    const SUFFIXES: [(&str, f64); 16] = [
        ("Ki", 1024.0),
        ("Mi", 1_048_576.0),
        ("Gi", 1_073_741_824.0),
        ("Ti", 1_099_511_627_776.0),
        ("Pi", 1_125_899_906_842_624.0),
        ("Ei", 1_152_921_504_606_846_976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("", 1.0),
    ];
    for (suffix, factor) in SUFFIXES {
        let Some(number) = text.strip_suffix(suffix) else {
            continue;
        };
        if !is_decimal_number(number) {
            continue;
        }
        let value: f64 = number.parse().ok()?;
        return (value.is_finite() && value >= 0.0).then_some(value * factor);
    }
    None
}

/// The number part of a quantity: optional sign, digits with at most one dot, optional decimal
/// exponent (`1e3`, `2E-2`). Rejects what Rust's float parser accepts but Kubernetes does not
/// (`inf`, `NaN`).
fn is_decimal_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let digits = mantissa.chars().filter(char::is_ascii_digit).count();
    let dots = mantissa.chars().filter(|c| *c == '.').count();
    let mantissa_ok = digits > 0 && dots <= 1 && digits + dots == mantissa.len();
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(parse("1"), Some(1.0));
        assert_eq!(parse("500m"), Some(0.5));
        assert_eq!(parse("1.5"), Some(1.5));
        assert_eq!(parse("128Mi"), Some(128.0 * 1024.0 * 1024.0));
        assert_eq!(parse("1Gi"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse("2k"), Some(2000.0));
        assert_eq!(parse("1e3"), Some(1000.0));
        assert_eq!(parse("1E3"), Some(1000.0));
        assert_eq!(parse("100M"), Some(1e8));
        assert_eq!(parse(" 2 "), Some(2.0));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "inf", "NaN", "Gi", "1Xi", "-1", "1e", "m"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
