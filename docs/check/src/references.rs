//! References that must resolve inside the repository: every text a reader can open — the book, the READMEs, the
//! examples, the chart, the scripts, the code's comments — may point only at things that are here.
//!
//! - [`outside_references`]: notes the repository does not hold (`research/…`, `seeds/…`), numbered sections of
//!   documents that are not here (`§3.4`; a standard's section such as `RFC 9112 §6` is fine), and, in what a user
//!   reads, the issue tracker (`issue 15`);
//! - [`bcs_items`] and [`bcs_citations`]: the BCS bug list is the numbered items of the book's "Differences from
//!   BCS" page (`BCS-G11`, `BCS-H2`); a citation must name an item of it;
//! - [`book_paths`]: a book page named by path (`docs/src/webhooks.md`) must exist.

use std::collections::BTreeSet;

/// What `line` cites that a reader of the repository cannot open. `user_facing`: the line is in the book, a
/// README, an example, the chart or a script, where an issue number means nothing either.
pub fn outside_references(line: &str, user_facing: bool) -> Vec<String> {
    let mut out = Vec::new();
    for note in ["research/", "seeds/"] {
        if line.contains(note) {
            out.push(format!("`{note}` (a note the repository does not hold)"));
        }
    }
    for (at, _) in line.match_indices('§') {
        if !after_rfc(&line[..at]) {
            let section: String =
                line[at..].chars().take_while(|c| *c == '§' || c.is_ascii_alphanumeric() || *c == '.').collect();
            out.push(format!("`{}` (a section of a document that is not here)", section.trim_end_matches('.')));
        }
    }
    if user_facing {
        out.extend(issue_numbers(line).into_iter().map(|n| format!("`issue {n}` (the issue tracker)")));
    }
    out
}

/// Whether the text before a `§` ends with `RFC <number> `: a published standard's section.
fn after_rfc(before: &str) -> bool {
    let trimmed = before.trim_end();
    let digits = trimmed.len() - trimmed.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    digits > 0 && trimmed[..trimmed.len() - digits].trim_end().ends_with("RFC")
}

/// The numbers of `issue N`, `issues N`, `Issue #N` in a line.
fn issue_numbers(line: &str) -> Vec<String> {
    let lower = line.to_lowercase();
    let mut out = Vec::new();
    for (at, word) in lower.match_indices("issue") {
        let before_ok = lower[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
        let rest = lower[at + word.len()..].strip_prefix('s').unwrap_or(&lower[at + word.len()..]);
        let Some(rest) = rest.strip_prefix(' ') else { continue };
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if before_ok && !number.is_empty() {
            out.push(number);
        }
    }
    out
}

/// The BCS bug list items a page defines: list items `N. **BCS-XN.** …` (X is `G` or `H`). An item whose list
/// number and name disagree is a problem: the number is what readers count, the name what code cites.
pub fn bcs_items(page: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut items = BTreeSet::new();
    let mut problems = Vec::new();
    for (n, line) in page.lines().enumerate() {
        let Some((number, rest)) = line.split_once(". **BCS-") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        let (kind, item) = name.split_at(1.min(name.len()));
        if number.trim() != item || !matches!(kind, "G" | "H") {
            problems.push(format!("line {}: item {} is named BCS-{name}", n + 1, number.trim()));
        }
        if !items.insert(format!("BCS-{name}")) {
            problems.push(format!("line {}: BCS-{name} is defined twice", n + 1));
        }
    }
    (items, problems)
}

/// Every `BCS-G<n>` / `BCS-H<n>` a text cites.
pub fn bcs_citations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("BCS-") {
        let rest = &text[at + 4..];
        let mut chars = rest.chars();
        let Some(kind) = chars.next().filter(|c| matches!(c, 'G' | 'H')) else { continue };
        let number: String = chars.take_while(char::is_ascii_digit).collect();
        if !number.is_empty() {
            out.push(format!("BCS-{kind}{number}"));
        }
    }
    out
}

/// Paths of book pages (`docs/src/….md`) a text names.
pub fn book_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("docs/src/") {
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
            .collect();
        let path = path.trim_end_matches('.');
        if path.ends_with(".md") {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_sections_and_issues_outside_the_repository_are_found() {
        let found = outside_references("as BCS does (research §1.6), see `seeds/002_x.txt` and research/a.md", false);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("research/") && found[1].contains("seeds/"), "{found:?}");
        assert!(found[2].contains("`§1.6`"), "{found:?}");
        assert!(outside_references("bug list §7.13.", false)[0].contains("`§7.13`"));
        assert!(outside_references("chunked coding (RFC 9112 §6.3)", false).is_empty());
        assert!(outside_references("# Addition (kourse, issue 15): x", false).is_empty(), "only user-facing text");
        assert_eq!(outside_references("# Addition (kourse, issue 15): x", true).len(), 1);
        assert_eq!(outside_references("Issue #49 and issues 3", true).len(), 2);
        assert!(outside_references("an issuer 5, reissue 4, the issue is", true).is_empty());
    }

    #[test]
    fn bcs_items_are_named_after_their_number() {
        let page = "1. **BCS-G1.** a\n2. **BCS-G2.** b\n1. **BCS-H1.** c\n3. **BCS-G4.** d\n";
        let (items, problems) = bcs_items(page);
        assert_eq!(items.into_iter().collect::<Vec<_>>(), ["BCS-G1", "BCS-G2", "BCS-G4", "BCS-H1"]);
        assert_eq!(problems, ["line 4: item 3 is named BCS-G4"]);
        assert_eq!(bcs_citations("see BCS-G11, BCS-H2 and BCS-X1, `BCS-G`"), ["BCS-G11", "BCS-H2"]);
    }

    #[test]
    fn book_paths_are_found_in_comments_and_prose() {
        assert_eq!(
            book_paths("//! (docs/src/concepts/gate.md). See docs/src/ or docs/src/api/x.md#anchor"),
            ["docs/src/concepts/gate.md", "docs/src/api/x.md"]
        );
    }
}
