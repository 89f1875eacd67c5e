//! Small text helpers for messages that end up in `status` and Events, where size matters.

/// At most `max` characters, cut on a character boundary, with a marker saying how much was dropped.
pub use common::runtime::text::excerpt;

/// `10s`, `1.5s`, `250ms`: durations in messages, written as in manifests.
pub fn seconds(d: std::time::Duration) -> String {
    common::duration::format_go(d)
}

/// `32 MiB`, `512 KiB`, `100 bytes`: sizes in messages, as flags and chart values write them.
pub fn bytes(n: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_long_text_on_character_boundaries() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééééé", 2), "éé… (3 more characters)");
        assert_eq!(seconds(std::time::Duration::from_millis(1500)), "1.5s");
        assert_eq!(
            (bytes(32 << 20), bytes(512 << 10), bytes(1000)),
            ("32 MiB".into(), "512 KiB".into(), "1000 bytes".into())
        );
    }
}
