//! Durations as users write them: Go `time.ParseDuration` strings (`60s`, `1m30s`, `500ms`, `1.5h`), which is
//! what BCS and Argo manifests contain, and, for flags and the CLI, humantime's friendlier forms (`2min`,
//! `1h 30m`).

use std::time::Duration;

/// A duration that does not parse; its message shows the input and how to write one, for a status or a flag error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write it like 30s, 1m30s, 500ms or 1h)")]
pub struct DurationError {
    /// The text as the user wrote it.
    pub input: String,
    /// What is wrong with it (`missing unit`, `overflow`, ...).
    pub reason: &'static str,
}

/// Parses a Go duration (`time.ParseDuration`). Negative durations are rejected: nothing in this API can wait
/// a negative time.
pub fn parse_go(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError { input: input.to_string(), reason };
    let s = input.strip_prefix('+').unwrap_or(input);
    if s.starts_with('-') {
        return Err(err("negative durations are not allowed"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err("expected a number"));
        }
        let unit_len = after.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| err("number too large"))? };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(|| err("number too large"))?;
        // Fractions are exact up to the nanosecond, as in Go.
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| err("number too large"))?;
        rest = after;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000).map_err(|_| err("number too large"))?;
    // The remainder of a division by 1e9 always fits in u32.
    let sub_nanos = u32::try_from(total_nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, sub_nanos))
}

/// Go syntax first, then humantime (`2min`, `1h 30m`). For flags and the CLI, not for manifests.
pub fn parse_flexible(input: &str) -> Result<Duration, DurationError> {
    parse_go(input).or_else(|go_err| humantime::parse_duration(input.trim()).map_err(|_| go_err))
}

/// Formats a duration the way Go prints it (`1m30s`, `500ms`), so messages echo what users wrote.
pub fn format_go(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    if d < Duration::from_secs(1) {
        let nanos = d.as_nanos();
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}µs", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let frac = d.subsec_nanos();
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let digits = format!("{frac:09}");
        format!("{s}.{}s", digits.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let cases = [
            ("60s", Duration::from_secs(60)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1h", Duration::from_secs(3600)),
            ("1.5h", Duration::from_secs(5400)),
            ("2h45m", Duration::from_secs(9900)),
            ("300us", Duration::from_micros(300)),
            ("300µs", Duration::from_micros(300)),
            ("10ns", Duration::from_nanos(10)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("+5s", Duration::from_secs(5)),
            ("1.25s", Duration::from_millis(1250)),
            (".5s", Duration::from_millis(500)),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn bad_go_durations_say_why() {
        for input in ["", "5", "5x", "s", "-5s", "1..5s", "1m30", "abc", "1 m"] {
            let err = parse_go(input).unwrap_err();
            assert!(err.to_string().contains(input), "{err}");
        }
        assert_eq!(parse_go("5").unwrap_err().reason, "missing unit");
        assert_eq!(parse_go("5d").unwrap_err().reason, "unknown unit");
    }

    #[test]
    fn flexible_accepts_humantime() {
        assert_eq!(parse_flexible("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_flexible("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_flexible("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_flexible("soon").is_err());
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go(Duration::from_secs(60)), "1m0s");
        assert_eq!(format_go(Duration::from_millis(500)), "500ms");
        assert_eq!(format_go(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format_go(Duration::ZERO), "0s");
    }

    proptest::proptest! {
        #[test]
        fn format_then_parse_round_trips(ms in 0u64..10_000_000) {
            let d = Duration::from_millis(ms);
            proptest::prop_assert_eq!(parse_go(&format_go(d)), Ok(d));
        }
    }
}
