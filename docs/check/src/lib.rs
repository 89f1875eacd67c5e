//! Checks of the project's Markdown: the book under `docs/src/` and every `README.md`.
//!
//! Plain std, no Markdown parser: the rules below are the subset of CommonMark the project writes (ATX headings,
//! fenced code blocks, inline code spans, inline links `[text](target)`), which is all the checks need.
//! The tests (`tests/checks.rs`) run them over the repository.

pub mod blocks;
pub mod references;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The repository root (this crate is `docs/check/`).
pub fn repo_root() -> PathBuf {
    let joined = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    fs::canonicalize(&joined).unwrap_or(joined)
}

/// Directories never searched for Markdown: build output, tools, caches, VCS data.
const SKIPPED_DIRS: &[&str] = &["target", ".git", ".venv", ".tools", ".sandbox", "book", "node_modules"];

/// Every file under `dir` (recursively) whose name satisfies `keep`, skipping [`SKIPPED_DIRS`] and hidden
/// directories, sorted.
pub fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && !name.starts_with("target") && !SKIPPED_DIRS.contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if keep(&path) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The lines of `text` outside fenced code blocks (```` ``` ```` or `~~~`), with their 1-based numbers.
pub fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// `line` with the contents of inline code spans blanked out, so that `` `[a](b)` `` is not a link.
pub fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for ch in line.chars() {
        if ch == '`' {
            in_code = !in_code;
            out.push(ch);
        } else if in_code {
            out.push(' ');
        } else {
            out.push(ch);
        }
    }
    out
}

/// The targets of the inline links `[text](target)` and images on one line (code spans excluded).
pub fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b']' && bytes[i + 1] == b'(' {
            let start = i + 2;
            let mut depth = 1;
            let mut j = start;
            while j < bytes.len() {
                match bytes[j] {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            if j < bytes.len() {
                let inner = line[start..j].trim();
                // `[t](target "title")`: the target is the first word.
                let target = inner.split_whitespace().next().unwrap_or("");
                let target = target.trim_start_matches('<').trim_end_matches('>');
                if !target.is_empty() {
                    out.push(target.to_string());
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a link target leaves the repository (a URL, `mailto:`).
pub fn is_external(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.')
        }
        None => false,
    }
}

/// The anchor of a heading as mdBook and GitHub make it: lower case; letters, digits, `_` and `-` kept; spaces
/// become `-`; everything else (punctuation, backticks, emphasis) dropped. Link syntax in the heading counts its
/// text only.
pub fn slug(heading: &str) -> String {
    let text = strip_links(heading);
    let mut out = String::new();
    for ch in text.trim().chars() {
        if ch.is_alphanumeric() || ch == '_' || ch == '-' {
            out.extend(ch.to_lowercase());
        } else if ch == ' ' {
            out.push('-');
        }
    }
    out
}

/// `[text](target)` → `text`.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](") {
            Some(close) => match after[close + 2..].find(')') {
                Some(end) => {
                    out.push_str(&after[..close]);
                    rest = &after[close + 2 + end + 1..];
                }
                None => {
                    out.push('[');
                    rest = after;
                }
            },
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The ATX headings of a Markdown text (outside code blocks), as written.
pub fn headings(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
                Some(line[hashes..].trim().trim_end_matches('#').trim().to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a Markdown text's headings, a repeated one numbered `-1`, `-2`, … as mdBook and GitHub do.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for h in headings(text) {
        let s = slug(&h);
        let n = seen.entry(s.clone()).or_insert(0);
        if *n == 0 {
            out.insert(s);
        } else {
            out.insert(format!("{s}-{n}"));
        }
        *n += 1;
    }
    out
}

/// `base/rel` with `.` and `..` resolved lexically.
pub fn join_normalized(base: &Path, rel: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Percent-decoding of the few escapes a path link may carry (`%20`).
fn decode(s: &str) -> String {
    s.replace("%20", " ")
}

/// One broken link: where it is and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.message)
    }
}

/// Every relative link of `file` that does not resolve: a missing file or directory, or an `#anchor` that is no
/// heading of the Markdown file it points into.
pub fn broken_links(file: &Path) -> Vec<Problem> {
    let Ok(text) = fs::read_to_string(file) else {
        return vec![Problem { file: file.to_path_buf(), line: 0, message: "unreadable".into() }];
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let own_anchors = anchors(&text);
    let mut problems = Vec::new();
    for (n, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if is_external(&target) {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let problem = |message: String| Problem { file: file.to_path_buf(), line: n, message };
            if path.is_empty() {
                if let Some(a) = anchor
                    && !own_anchors.contains(a)
                {
                    problems.push(problem(format!("`#{a}` is no heading of this file")));
                }
                continue;
            }
            let resolved = join_normalized(dir, &decode(path));
            if !resolved.exists() {
                problems.push(problem(format!("`{target}`: {} does not exist", resolved.display())));
                continue;
            }
            if let Some(a) = anchor {
                if resolved.extension().is_some_and(|e| e == "md") {
                    let target_text = fs::read_to_string(&resolved).unwrap_or_default();
                    if !anchors(&target_text).contains(a) {
                        problems.push(problem(format!("`{target}`: `#{a}` is no heading of {}", resolved.display())));
                    }
                } else if !a.starts_with('L') {
                    problems.push(problem(format!("`{target}`: an anchor into a file that is not Markdown")));
                }
            }
        }
    }
    problems
}

/// The `.md` files that `SUMMARY.md` (in `src`) links to, relative to `src`.
pub fn summary_pages(src: &Path) -> BTreeSet<PathBuf> {
    let text = fs::read_to_string(src.join("SUMMARY.md")).unwrap_or_default();
    prose_lines(&text)
        .into_iter()
        .flat_map(|(_, line)| link_targets(line))
        .filter(|t| !is_external(t))
        .map(|t| t.split('#').next().unwrap_or("").to_string())
        .filter(|t| t.ends_with(".md"))
        .map(|t| join_normalized(Path::new(""), &t))
        .collect()
}

/// The words in inline code spans of `text` (outside code blocks), with their line numbers: a `::item` suffix (a
/// test or function in the file) and trailing punctuation are cut; words with placeholders (`<`, `*`, `{`, `…`, `$`)
/// are left out.
fn code_span_words(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        // The odd-numbered parts are inside code spans.
        for part in line.split('`').skip(1).step_by(2) {
            for word in part.split_whitespace() {
                let word = word.split("::").next().unwrap_or("");
                let word = word.trim_end_matches([',', ';', ':', '.', ')']);
                if !word.contains(['<', '*', '{', '…', '$']) {
                    out.push((n, word));
                }
            }
        }
    }
    out
}

/// The words in inline code spans of `text` (outside code blocks) that name a repository path: they contain a
/// `/` and start with one of `top_dirs` followed by `/`. A `::item` suffix (a test or function in the file) and
/// trailing punctuation are cut; spans with placeholders (`<`, `*`, `{`, `…`) are skipped.
pub fn code_span_paths(text: &str, top_dirs: &BTreeSet<String>) -> Vec<(usize, String)> {
    code_span_words(text)
        .into_iter()
        .filter(|(_, word)| word.contains('/') && top_dirs.contains(word.split('/').next().unwrap_or("")))
        .map(|(n, word)| (n, word.to_string()))
        .collect()
}

/// The words in inline code spans of `text` (outside code blocks) that name a Rust source file relative to a
/// crate or folder rather than to the repository: they end in `.rs` and do not start with one of `top_dirs`
/// (`src/gate.rs`, `planner/world.rs`, `gate.rs`). The same cuts as [`code_span_paths`] apply: a `::item` suffix
/// and trailing punctuation go, spans with placeholders are skipped.
pub fn code_span_source_files(text: &str, top_dirs: &BTreeSet<String>) -> Vec<(usize, String)> {
    code_span_words(text)
        .into_iter()
        .map(|(n, word)| (n, word.trim_start_matches("./")))
        .filter(|(_, word)| {
            word.ends_with(".rs") && !word.starts_with('/') && !top_dirs.contains(word.split('/').next().unwrap_or(""))
        })
        .map(|(n, word)| (n, word.to_string()))
        .collect()
}

/// Whether `rel` (a `/`-separated path) is the tail of some path in `files`, whole components only:
/// `planner/sim_cluster.rs` is the tail of `gamedeployment-operator/src/planner/sim_cluster.rs`; `ster.rs` is not.
/// A directory (`rel` ends in `/`) matches when some file lies under it.
pub fn is_path_tail(rel: &str, files: &[String]) -> bool {
    let tail = format!("/{rel}");
    if rel.ends_with('/') {
        files.iter().any(|f| f.starts_with(rel) || f.contains(&tail))
    } else {
        files.iter().any(|f| f == rel || f.ends_with(&tail))
    }
}

/// The repository's top-level directories (not hidden, not build output).
pub fn top_level_dirs(root: &Path) -> BTreeSet<String> {
    fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.starts_with('.') && !n.starts_with("target"))
                .collect()
        })
        .unwrap_or_default()
}

/// The Markdown files reachable from `start` by following relative links to `.md` files inside `root`.
pub fn reachable_markdown(start: &Path, root: &Path) -> BTreeSet<PathBuf> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![start.to_path_buf()];
    while let Some(file) = stack.pop() {
        if !seen.insert(file.clone()) {
            continue;
        }
        let Ok(text) = fs::read_to_string(&file) else { continue };
        let dir = file.parent().unwrap_or(root).to_path_buf();
        for (_, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if is_external(&target) {
                    continue;
                }
                let path = target.split('#').next().unwrap_or("");
                if path.ends_with(".md") {
                    let resolved = join_normalized(&dir, &decode(path));
                    if resolved.starts_with(root) && resolved.is_file() {
                        stack.push(resolved);
                    }
                }
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_mdbook_and_github() {
        assert_eq!(
            slug("The pod gate: `kubectl delete pod` and `kubectl drain` wait for the pre-delete hook"),
            "the-pod-gate-kubectl-delete-pod-and-kubectl-drain-wait-for-the-pre-delete-hook"
        );
        assert_eq!(
            slug("CloneSet lifecycle handlers, specified-delete and game-pod-deleting"),
            "cloneset-lifecycle-handlers-specified-delete-and-game-pod-deleting"
        );
        assert_eq!(slug("Metrics (`/metrics`)"), "metrics-metrics");
        assert_eq!(
            slug("Differences from BCS (the bugs of the spec's §8, fixed)"),
            "differences-from-bcs-the-bugs-of-the-specs-8-fixed"
        );
        assert_eq!(slug("See [Flags](flags.md) now"), "see-flags-now");
        assert_eq!(slug("snake_case and-dash"), "snake_case-and-dash");
    }

    #[test]
    fn repeated_headings_are_numbered() {
        let a = anchors("# Events\n\n## Events\n\n```\n# not a heading\n```\n## Other\n");
        assert_eq!(a.into_iter().collect::<Vec<_>>(), ["events", "events-1", "other"]);
    }

    #[test]
    fn links_in_code_are_not_links() {
        assert_eq!(link_targets("see [a](b.md) and `[c](d.md)` and [e](f.md#g \"t\")"), ["b.md", "f.md#g"]);
        let text = "```\n[x](y.md)\n```\n[z](w.md)\n";
        let lines: Vec<_> = prose_lines(text).into_iter().flat_map(|(_, l)| link_targets(l)).collect();
        assert_eq!(lines, ["w.md"]);
    }

    #[test]
    fn external_links_are_told_apart() {
        assert!(is_external("https://example.com/a"));
        assert!(is_external("mailto:a@b"));
        assert!(!is_external("../a.md#b"));
        assert!(!is_external("#x"));
    }

    #[test]
    fn source_files_are_the_crate_relative_rs_spans() {
        let dirs: BTreeSet<String> = ["common".to_string()].into();
        let text = "`src/gate.rs` and `common/src/lib.rs`, `gate.rs::tests::a`, `controller::overlay`, \
                    `planner/*.rs` `cargo test` (`world.rs`).\n```\n`fenced.rs`\n```\n";
        let words: Vec<_> = code_span_source_files(text, &dirs).into_iter().map(|(_, p)| p).collect();
        assert_eq!(words, ["src/gate.rs", "gate.rs", "world.rs"]);
    }

    #[test]
    fn path_tails_match_whole_components() {
        let files = ["gamedeployment-operator/src/planner/sim_cluster.rs".to_string(), "common/src/lib.rs".to_string()];
        assert!(is_path_tail("planner/sim_cluster.rs", &files));
        assert!(is_path_tail("sim_cluster.rs", &files));
        assert!(is_path_tail("src/lib.rs", &files));
        assert!(!is_path_tail("cluster.rs", &files));
        assert!(!is_path_tail("planner/world.rs", &files));
        assert!(is_path_tail("src/planner/", &files));
        assert!(is_path_tail("common/src/", &files));
        assert!(!is_path_tail("rc/planner/", &files));
    }

    #[test]
    fn code_span_paths_are_the_repository_paths() {
        let dirs: BTreeSet<String> = ["common".to_string(), "kube-sim".to_string()].into();
        let text = "| `common/src/intstr.rs` | `common/tests/x.rs::a_test` and `src/lib.rs`, `kube-sim/<x>`, \
                    `cargo test -p common` `common/src/runtime/` |\n";
        let paths: Vec<_> = code_span_paths(text, &dirs).into_iter().map(|(_, p)| p).collect();
        assert_eq!(paths, ["common/src/intstr.rs", "common/tests/x.rs", "common/src/runtime/"]);
    }
}
