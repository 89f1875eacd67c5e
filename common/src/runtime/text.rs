//! Cutting text that ends up in `status`, Events and logs, where size matters.

/// At most `max` characters, cut on a character boundary, with a marker saying how much was dropped.
pub fn excerpt(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} more characters)", total - max)
}

/// At most `max` bytes (an API size limit), cut on a character boundary and ending in `...` when cut.
pub fn fit_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(excerpt("short", 10), "short");
        assert_eq!(excerpt("ééééé", 2), "éé… (3 more characters)");
        assert_eq!(fit_bytes("short", 1000), "short");
        let cut = fit_bytes(&"é".repeat(800), 1000);
        assert!(cut.len() <= 1000 && cut.ends_with("..."), "{}", cut.len());
    }
}
