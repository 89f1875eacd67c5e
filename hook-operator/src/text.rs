//! Small text helpers for messages that end up in `status` and Events, where size matters.

/// At most `max` characters, cut on a character boundary, with a marker saying how much was dropped.
pub use common::runtime::text::excerpt;

/// `10s`, `1.5s`, `250ms`: durations in messages, written as in manifests.
pub fn seconds(d: std::time::Duration) -> String {
    common::duration::format_go(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_long_text_on_character_boundaries() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééééé", 2), "éé… (3 more characters)");
        assert_eq!(seconds(std::time::Duration::from_millis(1500)), "1.5s");
    }
}
