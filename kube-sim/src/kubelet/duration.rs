//! The duration flags and annotations of the kubelet simulator (and of the `kube-sim` binary): Go/humantime
//! durations or bare seconds.

use std::time::Duration;

/// Accepts Go/humantime durations (`300ms`, `1m30s`) and bare seconds (`5`, `0.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"));
    }
    humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_both_styles() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
    }
}
