//! The book (`docs/src/`) and every `README.md` of the repository: links resolve, every page is in
//! `SUMMARY.md`, the repository paths and source files they name exist, the root README is a short front door into
//! the book, and no page tells run history.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use docs_check::{
    broken_links, code_span_paths, code_span_source_files, files_under, is_path_tail, reachable_markdown, repo_root,
    summary_pages, top_level_dirs,
};

fn book_src() -> PathBuf {
    repo_root().join("docs/src")
}

fn book_pages() -> Vec<PathBuf> {
    files_under(&book_src(), &|p: &Path| p.extension().is_some_and(|e| e == "md"))
}

fn readmes() -> Vec<PathBuf> {
    files_under(&repo_root(), &|p: &Path| p.file_name().is_some_and(|n| n == "README.md"))
}

fn report(problems: &[String]) -> String {
    problems.join("\n")
}

#[test]
fn every_relative_link_of_the_book_and_the_readmes_resolves() {
    let pages = book_pages();
    assert!(pages.len() > 10, "the book has pages under docs/src");
    let mut problems = Vec::new();
    for file in pages.iter().chain(readmes().iter()) {
        problems.extend(broken_links(file).into_iter().map(|p| p.to_string()));
    }
    assert!(problems.is_empty(), "broken links:\n{}", report(&problems));
}

#[test]
fn every_page_of_the_book_is_in_the_summary() {
    let src = book_src();
    let listed = summary_pages(&src);
    let mut problems = Vec::new();
    for page in book_pages() {
        let Ok(rel) = page.strip_prefix(&src) else { continue };
        if rel != Path::new("SUMMARY.md") && !listed.contains(rel) {
            problems.push(format!("{} is not listed in docs/src/SUMMARY.md", rel.display()));
        }
    }
    for rel in &listed {
        if !src.join(rel).is_file() {
            problems.push(format!("SUMMARY.md lists {}, which does not exist", rel.display()));
        }
    }
    assert!(problems.is_empty(), "{}", report(&problems));
}

#[test]
fn every_path_the_layout_pages_name_exists() {
    let root = repo_root();
    let dirs = top_level_dirs(&root);
    let mut files = files_under(&book_src().join("layout"), &|p: &Path| p.extension().is_some_and(|e| e == "md"));
    files.push(book_src().join("architecture/one-pass.md"));
    let mut problems = Vec::new();
    let mut named = 0;
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (line, path) in code_span_paths(&text, &dirs) {
            named += 1;
            if !root.join(&path).exists() {
                problems.push(format!("{}:{line}: `{path}` does not exist", file.display()));
            }
        }
    }
    assert!(named > 0, "the layout pages name the files they describe");
    assert!(problems.is_empty(), "{}", report(&problems));
}

/// The book's pages and every README, each once (the book's `README.md` pages are both).
fn book_pages_and_readmes() -> BTreeSet<PathBuf> {
    book_pages().into_iter().chain(readmes()).collect()
}

/// Every file of the repository (build output, VCS data and the built book left out), relative to the root.
fn repository_files(root: &Path) -> Vec<String> {
    files_under(root, &|_: &Path| true)
        .into_iter()
        .filter_map(|p| p.strip_prefix(root).ok().map(|r| r.to_string_lossy().replace('\\', "/")))
        .collect()
}

/// `common/src/intstr.rs`, `tests/e2e/`: a path from the repository root exists. A path whose first folder is a
/// top-level one only by name (`tests/egress.rs`, a crate's own `tests/`) is the tail of some file.
#[test]
fn every_repository_path_the_book_and_the_readmes_name_exists() {
    let root = repo_root();
    let dirs = top_level_dirs(&root);
    let files = repository_files(&root);
    let mut problems = Vec::new();
    for file in book_pages_and_readmes() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (line, path) in code_span_paths(&text, &dirs) {
            if !root.join(&path).exists() && !is_path_tail(&path, &files) {
                problems.push(format!("{}:{line}: `{path}` does not exist", file.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", report(&problems));
}

/// `src/gate.rs`, `planner/world.rs`, `gate.rs`: a source file named relative to its crate or folder is the tail
/// of some file of the repository. (`module::function` spans are not file names and are not checked.)
#[test]
fn every_crate_relative_source_file_the_book_and_the_readmes_name_exists() {
    let root = repo_root();
    let dirs = top_level_dirs(&root);
    let files = repository_files(&root);
    let mut problems = Vec::new();
    let mut named = 0;
    for file in book_pages_and_readmes() {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (line, rel) in code_span_source_files(&text, &dirs) {
            named += 1;
            if !is_path_tail(&rel, &files) {
                problems.push(format!("{}:{line}: `{rel}` is no file of the repository", file.display()));
            }
        }
    }
    assert!(named > 0, "the book names source files relative to their crate");
    assert!(problems.is_empty(), "{}", report(&problems));
}

#[test]
fn the_root_readme_is_a_short_front_door_into_the_whole_book() {
    let root = repo_root();
    let readme = root.join("README.md");
    let size = fs::metadata(&readme).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0 && size <= 12 * 1024, "README.md is {size} bytes; the front door stays within 12 KiB");
    let text = fs::read_to_string(&readme).unwrap_or_default();
    assert!(text.contains("scripts/sandbox") && text.contains("scripts/test"), "README.md gives the two commands");
    let reachable = reachable_markdown(&readme, &root);
    let unreachable: Vec<String> =
        book_pages().into_iter().filter(|p| !reachable.contains(p)).map(|p| p.display().to_string()).collect();
    assert!(unreachable.is_empty(), "book pages not reachable from README.md:\n{}", unreachable.join("\n"));
}

#[test]
fn no_page_tells_run_history() {
    let root = repo_root();
    let mut problems = Vec::new();
    let words = ["load average", "this session", "th session", "session of 20"];
    let all_md = files_under(&root, &|p: &Path| p.extension().is_some_and(|e| e == "md"));
    for file in all_md {
        // benchmark-history.md, PERFORMANCE-HISTORY.md: run history belongs in git, not in a file.
        if file.file_name().is_some_and(|n| n.to_string_lossy().to_lowercase().contains("history")) {
            problems.push(format!("{}: run history belongs in git, not in the docs", file.display()));
        }
        let text = fs::read_to_string(&file).unwrap_or_default().to_lowercase();
        for (n, line) in text.lines().enumerate() {
            for w in words {
                if line.contains(w) {
                    problems.push(format!("{}:{}: `{w}`", file.display(), n + 1));
                }
            }
        }
    }
    let unique: BTreeSet<String> = problems.into_iter().collect();
    assert!(unique.is_empty(), "{}", unique.into_iter().collect::<Vec<_>>().join("\n"));
}
