//! The book (`docs/src/`) and every `README.md` of the repository: links resolve, every page is in
//! `SUMMARY.md`, the repository paths and source files they name exist, the root README is a short front door into
//! the book, no page tells run history, and no text of the repository points at what is not in it (notes, seed
//! documents, numbered sections of other documents, issue numbers, BCS bug items or book pages that do not exist).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use docs_check::references::{bcs_citations, bcs_items, book_paths, outside_references};
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

/// Every text file of the repository a reader can open: sources, Markdown, manifests, the chart, the scripts. Not
/// the checks' own source (it names the patterns it looks for), lock files or proptest's seed files.
fn text_files(root: &Path) -> Vec<PathBuf> {
    const TEXT: &[&str] = &["rs", "md", "yaml", "yml", "tpl", "toml", "sh", "py", "json", "txt"];
    files_under(root, &|p: &Path| {
        let scripts = p.parent().is_some_and(|d| d.ends_with("scripts"));
        (scripts || p.extension().is_some_and(|e| TEXT.contains(&e.to_string_lossy().as_ref())))
            && !p.starts_with(root.join("docs/check"))
            && !p.components().any(|c| c.as_os_str() == "proptest-regressions")
            && p.file_name().is_none_or(|n| n != "Cargo.lock")
    })
}

/// Text a user reads (the book, READMEs, examples, the chart, the scripts), where an issue number is a dead end too.
fn user_facing(root: &Path, file: &Path) -> bool {
    file.starts_with(root.join("docs/src"))
        || file.file_name().is_some_and(|n| n == "README.md")
        || ["examples", "charts", "scripts"].iter().any(|d| file.starts_with(root.join(d)))
}

/// Issue 49: the sandbox's banner named `seeds/002`, a page cited `research §1.6`, code and pages cited a "bug list
/// §7.x" and `research/bcs-*-spec.md`, an example `(kourse, issue 15)`: none of which a reader can open.
#[test]
fn no_text_points_outside_the_repository() {
    let root = repo_root();
    let mut problems = Vec::new();
    let files = text_files(&root);
    assert!(files.len() > 100, "the repository's text files are scanned: {}", files.len());
    for file in files {
        let text = fs::read_to_string(&file).unwrap_or_default();
        let facing = user_facing(&root, &file);
        for (n, line) in text.lines().enumerate() {
            for found in outside_references(line, facing) {
                problems.push(format!("{}:{}: {found}", file.display(), n + 1));
            }
        }
    }
    assert!(problems.is_empty(), "references to what the repository does not hold:\n{}", report(&problems));
}

/// The BCS bug list is the numbered items of the book's "Differences from BCS" page; code and pages cite an item
/// by its name (`BCS-G11`), and each name must be an item of the list (numbered as it is named).
#[test]
fn every_bcs_bug_citation_names_an_item_of_the_list() {
    let root = repo_root();
    let page = book_src().join("compatibility/bcs-differences.md");
    let (items, mut problems) = bcs_items(&fs::read_to_string(&page).unwrap_or_default());
    assert!(items.len() >= 60, "the page lists the BCS bug list: {} items", items.len());
    let mut cited = 0;
    for file in text_files(&root) {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            for name in bcs_citations(line) {
                cited += 1;
                if !items.contains(&name) {
                    problems.push(format!("{}:{}: {name} is no item of {}", file.display(), n + 1, page.display()));
                }
            }
        }
    }
    assert!(cited > items.len(), "code and pages cite the list: {cited} citations");
    assert!(problems.is_empty(), "{}", report(&problems));
}

/// A book page named by its path anywhere (a code comment, an example, a chart value's comment) exists.
#[test]
fn every_book_page_a_text_names_exists() {
    let root = repo_root();
    let mut problems = Vec::new();
    for file in text_files(&root) {
        let text = fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            for path in book_paths(line) {
                if !root.join(&path).is_file() {
                    problems.push(format!("{}:{}: `{path}` does not exist", file.display(), n + 1));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", report(&problems));
}

/// Every shell block of the book that shows output is checked by a named end-to-end test or listed, with a reason,
/// as not checked yet (`docs_check::blocks`); a marker names a test that exists; the list names only blocks that
/// exist and are not checked; and no `sh` block shows output as comments (output is written in console form).
#[test]
fn every_output_block_of_the_book_is_checked_by_a_test_or_listed() {
    use docs_check::blocks::{UNCHECKED, book_blocks, output_as_comments};
    let root = repo_root();
    let blocks: Vec<_> = book_blocks(&book_src()).into_iter().filter(|b| b.shows_output()).collect();
    assert!(blocks.len() > 10, "the book shows output in console blocks");
    let mut problems = Vec::new();
    for block in &blocks {
        let at = format!("docs/src/{}:{} (`$ {}`)", block.page, block.line, block.first_command());
        let listed =
            UNCHECKED.iter().any(|(page, command, _)| *page == block.page && *command == block.first_command());
        match &block.checked_by {
            Some(test) => {
                let found = test.split_once("::").and_then(|(module, name)| {
                    let source = fs::read_to_string(root.join("tests/e2e/tests").join(format!("{module}.rs"))).ok()?;
                    source.contains(&format!("fn {name}(")).then_some(())
                });
                if found.is_none() {
                    problems.push(format!("{at}: `<!-- checked: {test} -->` names no test of tests/e2e/tests/"));
                }
                if listed {
                    problems.push(format!("{at}: checked by {test}, so it leaves blocks::UNCHECKED"));
                }
            }
            None if !listed => problems.push(format!(
                "{at} shows output but no test checks it: mark it `<!-- checked: MODULE::TEST -->` (an end-to-end test \
                 that runs it through e2e::book) or list it in docs_check::blocks::UNCHECKED with the reason"
            )),
            None => {}
        }
    }
    for (page, command, reason) in UNCHECKED {
        if reason.trim().is_empty() {
            problems.push(format!("blocks::UNCHECKED: {page} `$ {command}` gives no reason"));
        }
        if !blocks.iter().any(|b| b.page == *page && b.first_command() == *command) {
            problems.push(format!("blocks::UNCHECKED names {page} `$ {command}`, which no output block starts with"));
        }
    }
    for page in book_pages() {
        let text = fs::read_to_string(&page).unwrap_or_default();
        for line in output_as_comments(&text) {
            problems.push(format!(
                "{}:{line}: output shown as a comment after a command; write the block in console form (`$ command`, then \
                 its output) so a test can check it",
                page.display()
            ));
        }
    }
    let checked = blocks.iter().filter(|b| b.checked_by.is_some()).count();
    println!("{} output blocks: {checked} checked, {} listed as not checked yet", blocks.len(), UNCHECKED.len());
    assert!(problems.is_empty(), "{}", report(&problems));
}
