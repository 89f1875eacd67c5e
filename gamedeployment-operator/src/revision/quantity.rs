//! Resource quantities in the canonical form Kubernetes stores them in (`resource.Quantity` of apimachinery): Go
//! re-encodes every quantity it decodes, so a revision written by BCS's operator holds `"1"` where the
//! GameDeployment says `1000m`, `"500m"` for `0.5` and `"1Gi"` for `1024Mi`. Comparing templates needs the same
//! spelling on both sides.
//!
//! The algorithm is apimachinery's (`quantity.go`: `ParseQuantity`, `CanonicalizeBytes`, `AsCanonicalBytes`,
//! `AsCanonicalBase1024Bytes`) plus `SetDefaults_ResourceList`, which rounds every resource quantity of a pod up to
//! milli precision:
//! - the suffix fixes the format: `Ki`..`Ei` binary, `n`..`E` decimal, `e<N>`/`E<N>` decimal exponent;
//! - a value is rounded up (away from zero) to milli units;
//! - a binary value below 1024 in magnitude, or not a whole number, is written in decimal;
//! - a decimal value is written with the largest exponent that is a multiple of 3 and keeps the mantissa whole;
//!   a binary value with the largest power of 1024.
//!
//! kube's k8s-openapi carries a quantity as the string it was given (no arithmetic), hence this small
//! canonicalizer; values beyond what fits in 128-bit arithmetic have no canonical form here and are compared as
//! written.

/// How a quantity is written; decides the canonical spelling (as apimachinery's `Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    BinarySi,
    DecimalSi,
    DecimalExponent,
}

/// A parsed quantity: `sign × unscaled × 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    unscaled: u128,
    scale: i32,
    format: Format,
}

const DECIMAL_SUFFIXES: [(&str, i32); 10] =
    [("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)];
const BINARY_SUFFIXES: [(&str, u32); 7] =
    [("", 0), ("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50), ("Ei", 60)];
/// `SetDefaults_ResourceList` rounds up to this scale.
const MILLI: i32 = -3;

/// The canonical spelling of a quantity written as `written` (surrounding spaces ignored, as Go's JSON decoding
/// does), or `None` when it is not a quantity (or too large to handle exactly).
pub fn canonical(written: &str) -> Option<String> {
    let parsed = parse(written.trim())?;
    format(round_up_to_milli(parsed)?)
}

fn parse(s: &str) -> Option<Parsed> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let mut unscaled: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        unscaled = unscaled.checked_mul(10)?.checked_add(u128::from(digit - b'0'))?;
    }
    let mut scale = -i32::try_from(fraction.len()).ok()?;
    let mut format = Format::DecimalSi;
    if let Some(exponent) = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty()) {
        let exponent: i32 = exponent.parse().ok()?;
        if exponent.abs() > 64 {
            return None;
        }
        scale += exponent;
        format = Format::DecimalExponent;
    } else if let Some((_, power)) = BINARY_SUFFIXES.iter().skip(1).find(|(name, _)| *name == suffix) {
        unscaled = unscaled.checked_mul(1u128.checked_shl(*power)?)?;
        format = Format::BinarySi;
    } else {
        let (_, exponent) = DECIMAL_SUFFIXES.iter().find(|(name, _)| *name == suffix)?;
        scale += exponent;
    }
    let parsed = Parsed { negative, unscaled, scale, format };
    // `ParseQuantity`: a binary quantity strictly between 0 and 1 is written in decimal.
    if format == Format::BinarySi && parsed.unscaled != 0 && !at_least(parsed, 1) {
        return Some(Parsed { format: Format::DecimalSi, ..parsed });
    }
    Some(parsed)
}

/// `|q| >= n`.
fn at_least(q: Parsed, n: u128) -> bool {
    if q.scale >= 0 {
        return pow10(q.scale).and_then(|p| q.unscaled.checked_mul(p)).is_none_or(|v| v >= n);
    }
    match pow10(-q.scale) {
        Some(p) => q.unscaled / p >= n,
        None => false,
    }
}

fn pow10(exponent: i32) -> Option<u128> {
    10u128.checked_pow(u32::try_from(exponent).ok()?)
}

/// Rounds away from zero to milli units (a value with more than three decimals gets the next milli).
fn round_up_to_milli(q: Parsed) -> Option<Parsed> {
    if q.scale >= MILLI || q.unscaled == 0 {
        return Some(q);
    }
    let divisor = pow10(MILLI - q.scale)?;
    let rounded = q.unscaled / divisor + u128::from(!q.unscaled.is_multiple_of(divisor));
    Some(Parsed { unscaled: rounded, scale: MILLI, ..q })
}

fn format(q: Parsed) -> Option<String> {
    if q.unscaled == 0 {
        return Some("0".into());
    }
    let sign = if q.negative { "-" } else { "" };
    if q.format == Format::BinarySi
        && at_least(q, 1024)
        && let Some(whole) = whole_number(q)
    {
        let (mut mantissa, mut power) = (whole, 0usize);
        while mantissa.is_multiple_of(1024) && power + 1 < BINARY_SUFFIXES.len() {
            mantissa /= 1024;
            power += 1;
        }
        return Some(format!("{sign}{mantissa}{}", BINARY_SUFFIXES[power].0));
    }
    let (mut mantissa, mut exponent) = (q.unscaled, q.scale);
    while mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exponent += 1;
    }
    match exponent.rem_euclid(3) {
        1 => (mantissa, exponent) = (mantissa.checked_mul(10)?, exponent - 1),
        2 => (mantissa, exponent) = (mantissa.checked_mul(100)?, exponent - 2),
        _ => {}
    }
    if q.format == Format::DecimalExponent {
        let suffix = if exponent == 0 { String::new() } else { format!("e{exponent}") };
        return Some(format!("{sign}{mantissa}{suffix}"));
    }
    let (suffix, _) = DECIMAL_SUFFIXES.iter().find(|(_, e)| *e == exponent)?;
    Some(format!("{sign}{mantissa}{suffix}"))
}

/// The value as a whole number, if it is one.
fn whole_number(q: Parsed) -> Option<u128> {
    if q.scale >= 0 {
        return q.unscaled.checked_mul(pow10(q.scale)?);
    }
    let p = pow10(-q.scale)?;
    q.unscaled.is_multiple_of(p).then_some(q.unscaled / p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each pair: as written, as apimachinery's `Quantity.String()` prints it after parsing (and after
    /// `SetDefaults_ResourceList`'s round-up to milli). The expectations are apimachinery's own test cases
    /// (`quantity_test.go`: `TestQuantityParse`, `TestQuantityCanocicalizeZero`, `TestQuantityString`) where
    /// they apply.
    #[test]
    fn quantities_are_written_as_kubernetes_writes_them() {
        let table = [
            ("1", "1"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("500m", "500m"),
            (".5", "500m"),
            ("5.", "5"),
            ("+1", "1"),
            ("-1000m", "-1"),
            ("1.5", "1500m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("100", "100"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("1e2", "100"),
            ("1.5e0", "1500e-3"),
            ("10e-1", "1"),
            ("1000000u", "1"),
            ("1000000000n", "1"),
            ("1n", "1m"),
            ("0.0001", "1m"),
            ("0.1m", "1m"),
            ("1.0001", "1001m"),
            ("0", "0"),
            ("0m", "0"),
            ("0Mi", "0"),
            ("-0", "0"),
            ("512Mi", "512Mi"),
            ("1024Mi", "1Gi"),
            ("0.5Gi", "512Mi"),
            ("1.5Gi", "1536Mi"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("0.5Ki", "512"),
            ("1.1Ki", "1126400m"),
            ("1000Mi", "1000Mi"),
            ("1048576Ki", "1Gi"),
            ("0.5Mi", "512Ki"),
            ("1M", "1M"),
            ("1000k", "1M"),
            ("1000M", "1G"),
            ("  2  ", "2"),
        ];
        for (written, want) in table {
            assert_eq!(canonical(written).as_deref(), Some(want), "{written}");
        }
    }

    #[test]
    fn what_is_not_a_quantity_has_no_canonical_form() {
        for written in ["", "abc", "1.2.3", "1Q", "e3", ".", "1e", "--1", "1 Mi", "1i", "1e999"] {
            assert_eq!(canonical(written), None, "{written:?}");
        }
    }

    #[test]
    fn the_canonical_form_is_a_fixed_point() {
        for written in ["1", "1500m", "512Mi", "1Gi", "1e3", "1500e-3", "1k", "1126400m", "-5m", "7"] {
            let once = canonical(written).unwrap();
            assert_eq!(canonical(&once).as_deref(), Some(once.as_str()), "{written}");
        }
    }
}
