//! The book's shell blocks checked against what the commands print: a test that runs a command the book shows
//! compares its output with the page's block, names and times masked, so a page cannot drift from the tool
//! (issue 49). A block is a fenced block of a page under `docs/src/` whose first line is `$ COMMAND`; the lines after
//! it are the output, and a line `...` (or `…`, any indentation) stands for any number of lines.

/// The expected output of the block of `page` (relative to `docs/src/`) that starts with `$ {command}`.
pub fn block(page: &str, command: &str) -> Vec<String> {
    let path = crate::repo_root().join("docs/src").join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = format!("$ {command}");
    let mut lines = text.lines().skip_while(|l| l.trim() != start);
    let first = lines.next().unwrap_or_else(|| panic!("{page} has no block starting with `{start}`"));
    // A block inside a list item is indented; its lines are read without that indentation.
    let indent = first.len() - first.trim_start().len();
    lines
        .map(|l| l.get(indent..).filter(|_| l.starts_with(&first[..indent])).unwrap_or(l.trim_start()))
        .take_while(|l| !l.trim_start().starts_with("```") && !l.starts_with("$ "))
        .map(str::to_string)
        .collect()
}

/// Names and times masked: a 5-character id after a hyphen (pod names, run names) becomes `-ID`, every number or
/// duration `N`; a tree's branch glyphs are made alike (`|-- ` and `` `-- `` are `-- `, `|   ` is blank: where a pod sorts
/// among random names decides which it gets); trailing spaces go.
pub fn mask(line: &str) -> String {
    let line = line.replace("|-- ", "-- ").replace("`-- ", "-- ").replace("|   ", "    ");
    let chars: Vec<char> = line.trim_end().chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let id = chars[i] == '-'
            && i + 6 <= chars.len()
            && chars[i + 1..i + 6].iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && chars.get(i + 6).is_none_or(|c| !c.is_ascii_alphanumeric());
        if id {
            out.push_str("-ID");
            i += 6;
        } else if chars[i].is_ascii_digit() {
            // A number, or a duration (`31s`, `1m5s`, `2h`): one `N` either way, so `age 59s` and `age 1m2s` agree.
            out.push('N');
            loop {
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let unit = i < chars.len() && matches!(chars[i], 's' | 'm' | 'h' | 'd');
                let after = chars.get(i + 1);
                if unit && after.is_none_or(|c| !c.is_ascii_alphabetic()) {
                    i += 1;
                    if after.is_some_and(char::is_ascii_digit) {
                        continue;
                    }
                }
                break;
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// Whether `output` is what the block shows, masked; `...` lines match any number of lines.
pub fn matches(expected: &[String], output: &str) -> bool {
    fn go(expected: &[String], actual: &[String]) -> bool {
        match expected.split_first() {
            None => actual.iter().all(|l| l.trim().is_empty()),
            Some((first, rest)) if matches!(first.trim(), "..." | "…") => {
                (0..=actual.len()).any(|skip| go(rest, &actual[skip..]))
            }
            Some((first, rest)) => actual.split_first().is_some_and(|(a, more)| mask(first) == *a && go(rest, more)),
        }
    }
    let actual: Vec<String> = output.lines().map(mask).collect();
    go(expected, &actual)
}

/// Fails, showing both, unless the output of `command` is what `page`'s block for it shows.
pub fn assert_block_matches(page: &str, command: &str, output: &str) {
    let expected = block(page, command);
    assert!(
        matches(&expected, output),
        "docs/src/{page} shows for `$ {command}`:\n{}\n--- but it prints:\n{output}",
        expected.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_times_are_masked_and_ellipses_skip_lines() {
        assert_eq!(
            mask("pod test-gamedeployment-56gnm  Running  age 31s  "),
            "pod test-gamedeployment-ID  Running  age N"
        );
        assert_eq!(mask("age 1m5s, 2h ago, ~4s apart, 1/3 measured"), "age N, N ago, ~N apart, N/N measured");
        assert_eq!(mask("    |   `-- hookrun r"), mask("        `-- hookrun r"), "the branch glyphs");
        assert_eq!(
            mask("predelete-test-gamedeployment-58df655f74-56gnm-test"),
            "predelete-test-gamedeployment-NdfNfN-ID-test"
        );
        let expected: Vec<String> = ["a pod x-abcde for 1s", "    ...", "z"].map(String::from).to_vec();
        assert!(matches(&expected, "a pod x-q1w2e for 12s\nb\nc\nz\n"));
        assert!(matches(&expected, "a pod x-q1w2e for 2s\nz"));
        assert!(!matches(&expected, "a pod x-q1w2e for 2s\ny"));
        assert!(!matches(&expected, "a pod x-q1w2ee for 2s\nz"), "a longer name is not an id");
    }
}
