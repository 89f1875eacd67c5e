//! The book's shell blocks checked against what the commands print, in the manner of `trycmd`: a page cannot drift
//! from the tools. A block in console form (`$ COMMAND`, then its output; `docs_check::blocks`) whose fence is
//! preceded by `<!-- checked: MODULE::TEST -->` is checked by that end-to-end test: [`Book::of_this_test`] collects
//! the blocks marked with the running test's name, the test runs them ([`Reader::run`], every command in a shell
//! against the test's cluster) or compares output it produced itself ([`Book::assert_output`]), and the [`Book`]
//! fails the test when it ends with a marked command left unchecked. `cargo test -p docs-check` fails on a block
//! that shows output and is neither marked nor listed as not checked yet, and on a marker naming no test.
//!
//! Output is compared masked ([`mask`]): names' random suffixes and revision hashes, numbers and durations, tree
//! glyphs and runs of spaces; a line `...` (or `…`) stands for any number of lines; the rows of a `kubectl get`
//! table are compared in any order (pods sort by their random names), and so are the pod rows of each batch of a
//! `kubectl gd plan` that [`Book::assert_output`] compares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use docs_check::blocks::{Block, Step};

/// How long a look (`kubectl get`, `kubectl gd status`, …) is repeated until it shows what the page shows: the
/// longest wait of a page run with `scripts/sandbox --fast` (the walkthrough's in-place batches), on a loaded machine.
pub const LOOK_DEADLINE: Duration = Duration::from_secs(420);
/// How long one command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

/// The maximal runs of lowercase letters and digits after a `-` that are generated names: a 5-character suffix
/// (pods, runs) or a revision hash (6 to 10 characters with a digit and a letter): (start, end) byte offsets of the
/// run, without the hyphen.
fn id_spans(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'-' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end].is_ascii_digit()) {
                end += 1;
            }
            let run = &bytes[start..end];
            let bounded = bytes.get(end).is_none_or(|c| !c.is_ascii_alphanumeric());
            let hash = (6..=10).contains(&run.len())
                && run.iter().any(u8::is_ascii_digit)
                && run.iter().any(u8::is_ascii_lowercase);
            if bounded && (run.len() == 5 || hash) {
                out.push((start, end));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Names and times masked: a generated name part after a hyphen (a pod's 5-character suffix, a revision hash)
/// becomes `-ID`, every number or duration `N`; a tree's branch glyphs are made alike (`|-- ` and `` `-- `` are
/// `-- `, `|   ` is blank: where a pod sorts among random names decides which it gets); runs of spaces are one space
/// (columns widen with the values); trailing spaces go.
pub fn mask(line: &str) -> String {
    masked(line, false)
}

/// As [`mask`], but counts are kept: only durations (`31s`, `1m5s`), timestamps (`2026-11-28T03:03:33Z` is `TIME`)
/// and IPv4 addresses (`IP`) become placeholders, so `6 6 6` is not `6 0 0`. How [`Reader`] compares.
pub fn mask_times(line: &str) -> String {
    masked(line, true)
}

/// The (start, end) byte offsets of the timestamps (`2026-11-28T03:03:33Z`, fractions allowed) and IPv4 addresses
/// in `line`, with the placeholder for each.
fn times_and_addresses(line: &str) -> Vec<(usize, usize, &'static str)> {
    let b = line.as_bytes();
    let digits = |i: usize, n: usize| i + n <= b.len() && b[i..i + n].iter().all(u8::is_ascii_digit);
    let run = |mut i: usize| {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        (i > start && i - start <= 3).then_some(i)
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if boundary
            && digits(i, 4)
            && line[i + 4..].starts_with('-')
            && digits(i + 5, 2)
            && line[i + 7..].starts_with('-')
            && digits(i + 8, 2)
            && line[i + 10..].starts_with('T')
            && digits(i + 11, 2)
            && line[i + 13..].starts_with(':')
            && digits(i + 14, 2)
            && line[i + 16..].starts_with(':')
            && digits(i + 17, 2)
        {
            let mut end = i + 19;
            if line[end..].starts_with('.') {
                end += 1;
                while end < b.len() && b[end].is_ascii_digit() {
                    end += 1;
                }
            }
            if line[end..].starts_with('Z') {
                end += 1;
            }
            out.push((i, end, "TIME"));
            i = end;
            continue;
        }
        if boundary {
            let mut at = Some(i);
            for part in 0..4 {
                at = at.and_then(run).and_then(|e| match part {
                    3 => Some(e),
                    _ => (b.get(e) == Some(&b'.')).then_some(e + 1),
                });
            }
            if let Some(end) = at.filter(|&e| b.get(e).is_none_or(|c| !c.is_ascii_digit())) {
                out.push((i, end, "IP"));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn masked(line: &str, keep_counts: bool) -> String {
    let mut line = line.replace("|-- ", "-- ").replace("`-- ", "-- ").replace("|   ", "    ");
    if keep_counts {
        let mut out = String::new();
        let mut last = 0;
        for (start, end, placeholder) in times_and_addresses(&line) {
            out.push_str(&line[last..start]);
            out.push_str(placeholder);
            last = end;
        }
        out.push_str(&line[last..]);
        line = out;
    }
    let mut named = String::new();
    let mut last = 0;
    for (start, end) in id_spans(&line) {
        named.push_str(&line[last..start]);
        named.push_str("ID");
        last = end;
    }
    named.push_str(&line[last..]);
    let chars: Vec<char> = named.trim_end().chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            // A number, or a duration (`31s`, `1m5s`, `2h`): one `N` either way, so `age 59s` and `age 1m2s` agree.
            // Keeping counts, a number without a unit stays as it is.
            let start = i;
            let mut duration = false;
            loop {
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let unit = i < chars.len() && matches!(chars[i], 's' | 'm' | 'h' | 'd');
                let after = chars.get(i + 1);
                if unit && after.is_none_or(|c| !c.is_ascii_alphabetic()) {
                    duration = true;
                    i += 1;
                    if after.is_some_and(char::is_ascii_digit) {
                        continue;
                    }
                }
                break;
            }
            let number_only = start > 0 && chars[start - 1].is_ascii_alphabetic();
            if keep_counts && (!duration || number_only) {
                out.extend(&chars[start..i]);
            } else {
                out.push('N');
            }
        } else if chars[i] == ' ' {
            out.push(' ');
            while i < chars.len() && chars[i] == ' ' {
                i += 1;
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn is_ellipsis(line: &str) -> bool {
    matches!(line.trim(), "..." | "…")
}

/// The real names the book's names stand for: a book name's generated part (`896tf`, `58df655f74`) → the one the
/// run produced, learnt where an output line matched the page's.
#[derive(Debug, Default, Clone)]
pub struct Names {
    bound: BTreeMap<String, String>,
    /// Compare with [`mask_times`] (counts kept) instead of [`mask`].
    keep_counts: bool,
}

impl Names {
    /// `text` with every bound generated part replaced by the real one.
    pub fn apply(&self, text: &str) -> String {
        let mut out = String::new();
        let mut last = 0;
        for (start, end) in id_spans(text) {
            out.push_str(&text[last..start]);
            out.push_str(self.bound.get(&text[start..end]).map(String::as_str).unwrap_or(&text[start..end]));
            last = end;
        }
        out.push_str(&text[last..]);
        out
    }

    pub fn bind(&mut self, book: &str, real: &str) {
        self.bound.insert(book.to_string(), real.to_string());
    }

    /// Whether `actual` is the page's `expected` line: equal masked, and every bound name in it is the real one.
    fn line_matches(&self, expected: &str, actual: &str) -> bool {
        let expected = self.apply(expected);
        if masked(&expected, self.keep_counts) != masked(actual, self.keep_counts) {
            return false;
        }
        let bound: BTreeSet<&str> = self.bound.values().map(String::as_str).collect();
        id_spans(&expected)
            .iter()
            .map(|&(s, e)| &expected[s..e])
            .filter(|id| bound.contains(id))
            .all(|id| id_spans(actual).iter().any(|&(s, e)| &actual[s..e] == id))
    }

    /// Binds the generated parts of `expected` to those of the matching `actual` line, in order.
    fn learn(&mut self, expected: &str, actual: &str) {
        let ours = id_spans(expected);
        let theirs = id_spans(actual);
        if ours.len() != theirs.len() {
            return;
        }
        for (&(s, e), &(s2, e2)) in ours.iter().zip(&theirs) {
            let (book, real) = (&expected[s..e], &actual[s2..e2]);
            if book != real && !self.bound.contains_key(book) {
                self.bind(book, real);
            }
        }
    }

    /// Whether `output` is what the page shows, masked, as pairs (expected line, actual line) when it is. `unordered`:
    /// every line the page shows (besides `...`) matches a distinct output line, in any order, and without a `...`
    /// there are no other lines.
    fn compare(&self, expected: &[String], output: &str, unordered: bool) -> Option<Vec<(usize, usize)>> {
        let actual: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
        let expected: Vec<(usize, &String)> =
            expected.iter().enumerate().filter(|(_, l)| !l.trim().is_empty()).collect();
        if unordered {
            let mut used = vec![false; actual.len()];
            let mut pairs = Vec::new();
            for (k, line) in expected.iter().filter(|(_, l)| !is_ellipsis(l)) {
                let j = (0..actual.len()).find(|&j| !used[j] && self.line_matches(line, actual[j]))?;
                used[j] = true;
                pairs.push((*k, j));
            }
            let skips = expected.iter().any(|(_, l)| is_ellipsis(l));
            return (skips || used.iter().all(|u| *u)).then_some(pairs);
        }
        fn go(names: &Names, e: &[(usize, &String)], a: &[&str], at: usize, pairs: &mut Vec<(usize, usize)>) -> bool {
            match e.split_first() {
                None => a.is_empty(),
                Some(((_, first), rest)) if is_ellipsis(first) => {
                    (0..=a.len()).any(|skip| go(names, rest, &a[skip..], at + skip, pairs))
                }
                Some(((k, first), rest)) => {
                    let Some((line, more)) = a.split_first() else { return false };
                    if !names.line_matches(first, line) {
                        return false;
                    }
                    pairs.push((*k, at));
                    if go(names, rest, more, at + 1, pairs) {
                        return true;
                    }
                    pairs.pop();
                    false
                }
            }
        }
        let mut pairs = Vec::new();
        go(self, &expected, &actual, 0, &mut pairs).then_some(pairs)
    }

    /// Compares, and on a match learns the names the output binds.
    fn check(&mut self, expected: &[String], output: &str, unordered: bool) -> bool {
        let Some(pairs) = self.compare(expected, output, unordered) else { return false };
        let actual: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
        for (k, j) in pairs {
            self.learn(&expected[k], actual[j]);
        }
        true
    }
}

/// A `kubectl gd plan` forecast with each run of pod rows (two spaces, then the pod: a batch's pods) masked and sorted:
/// a batch lists its pods by their random names, so which row shows which forecast follows the names, as the rows
/// of a `kubectl get` table do. The race's numbered list keeps its order.
fn plan_rows_sorted(text: &str) -> String {
    fn flush(run: &mut Vec<String>, out: &mut Vec<String>) {
        run.sort();
        out.append(run);
    }
    let (mut out, mut run) = (Vec::new(), Vec::new());
    for line in text.lines() {
        if line.strip_prefix("  ").is_some_and(|rest| rest.starts_with(|c: char| !c.is_whitespace())) {
            run.push(mask(line));
        } else {
            flush(&mut run, &mut out);
            out.push(line.to_string());
        }
    }
    flush(&mut run, &mut out);
    out.join("\n")
}

/// Whether `output` is what the block shows, masked; `...` lines match any number of lines.
pub fn matches(expected: &[String], output: &str) -> bool {
    Names::default().compare(expected, output, false).is_some()
}

/// The blocks of the book marked `<!-- checked: TEST -->` with the running test's name, and which of their commands
/// the test has checked. Dropped at the end of a passing test, it fails it if a marked command was not checked.
pub struct Book {
    test: String,
    blocks: Vec<Block>,
    /// (block index, step index) checked.
    checked: Mutex<BTreeSet<(usize, usize)>>,
}

impl Book {
    /// The blocks marked with the name of the test running on this thread (`MODULE::TEST`, as libtest names the
    /// thread); fails when there are none.
    pub fn of_this_test() -> Self {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or_default().to_string();
        assert!(test.contains("::"), "Book::of_this_test runs on a test's own thread (this one is `{test}`)");
        Self::of(&test)
    }

    /// The blocks marked with `test` (`MODULE::TEST`).
    pub fn of(test: &str) -> Self {
        let blocks: Vec<Block> = docs_check::blocks::book_blocks(&crate::repo_root().join("docs/src"))
            .into_iter()
            .filter(|b| b.checked_by.as_deref() == Some(test))
            .collect();
        assert!(!blocks.is_empty(), "no block of the book is marked `<!-- checked: {test} -->`");
        Self { test: test.to_string(), blocks, checked: Mutex::new(BTreeSet::new()) }
    }

    fn find(&self, page: &str, first_command: &str) -> usize {
        self.blocks.iter().position(|b| b.page == page && b.first_command() == first_command).unwrap_or_else(|| {
            panic!("docs/src/{page} has no block starting `$ {first_command}` marked `<!-- checked: {} -->`", self.test)
        })
    }

    /// The marked block of `page` whose first command is `first_command`.
    pub fn block(&self, page: &str, first_command: &str) -> &Block {
        &self.blocks[self.find(page, first_command)]
    }

    fn mark(&self, block: usize, step: usize) {
        self.checked.lock().unwrap_or_else(|p| p.into_inner()).insert((block, step));
    }

    /// Fails, showing both, unless `output` (which the test got by running `command` itself) is what the marked block
    /// shows for `$ {command}`, masked.
    pub fn assert_output(&self, page: &str, command: &str, output: &str) {
        let found = self.blocks.iter().enumerate().find_map(|(b, block)| {
            (block.page == page).then_some(())?;
            block.steps.iter().position(|s| s.command == command).map(|s| (b, s))
        });
        let (b, s) = found.unwrap_or_else(|| {
            panic!("docs/src/{page} has no command `$ {command}` in a block marked `<!-- checked: {} -->`", self.test)
        });
        let expected = &self.blocks[b].steps[s].output;
        let matched = if command.starts_with("kubectl gd plan") {
            let rows_sorted: Vec<String> = plan_rows_sorted(&expected.join("\n")).lines().map(String::from).collect();
            matches(&rows_sorted, &plan_rows_sorted(output))
        } else {
            matches(expected, output)
        };
        assert!(
            matched,
            "docs/src/{page} shows for `$ {command}`:\n{}\n--- but it prints:\n{output}",
            expected.join("\n")
        );
        self.mark(b, s);
    }
}

impl Drop for Book {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let guard = self.checked.lock().unwrap_or_else(|p| p.into_inner());
        let checked = &*guard;
        let missing: Vec<String> = self
            .blocks
            .iter()
            .enumerate()
            .flat_map(|(b, block)| {
                block
                    .steps
                    .iter()
                    .enumerate()
                    .filter(move |(s, _)| !checked.contains(&(b, *s)))
                    .map(move |(_, step)| format!("docs/src/{}:{} `$ {}`", block.page, block.line, step.command))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "{} is named by `<!-- checked: {} -->` but did not check:\n{}",
            self.test,
            self.test,
            missing.join("\n")
        );
    }
}

/// Whether a command only looks (it changes nothing, so it is repeated until it shows what the page shows, as a
/// reader would look again): `kubectl get`, `kubectl gd get/status/plan`, `hook-operator check`.
fn is_look(command: &str) -> bool {
    ["kubectl get ", "kubectl gd get ", "kubectl gd status ", "kubectl gd plan ", "hook-operator check "]
        .iter()
        .any(|p| command.starts_with(p))
}

/// A reader following pages in a shell: each command runs in `bash` in the repository root, with the cluster's
/// kubeconfig and the workspace's binaries (`kubectl-gd`, `hook-operator`) first on the PATH, its output (stdout and
/// stderr, as a terminal shows them) compared with the page's, the names the page shows bound to the real ones.
pub struct Reader {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
    /// The page's text → this run's (an address the page names that differs here).
    replace: Vec<(String, String)>,
    /// The names each page showed, bound to this run's (a page's names are its own).
    names: BTreeMap<String, Names>,
    last_exit: i32,
}

impl Reader {
    pub fn new(kubeconfig: &Path) -> Self {
        crate::binary("kubectl-gd", "kubectl-gd");
        Self {
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().expect("a kubectl cache directory"),
            replace: Vec::new(),
            names: BTreeMap::new(),
            last_exit: 0,
        }
    }

    /// Replaces `book` by `real` in the commands the session runs (an address or port the page names).
    pub fn replace(mut self, book: &str, real: &str) -> Self {
        self.replace.push((book.to_string(), real.to_string()));
        self
    }

    /// Runs `command` in bash (the session's replacements made): (exit code, stdout and stderr together).
    pub async fn sh(&self, command: &str) -> (i32, String) {
        let mut command = command.to_string();
        for (book, real) in &self.replace {
            command = command.replace(book, real);
        }
        let bin = crate::binary("kubectl-gd", "kubectl-gd").parent().expect("target/debug").to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .expect("PATH joins");
        // `$?` of the page's `echo $?` is the exit code of the command before it.
        let script = format!("(exit {}); {{ {command}\n}} 2>&1", self.last_exit);
        let child = tokio::process::Command::new("bash")
            .args(["-c", &script])
            .env("PATH", path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", self.cache.path())
            .current_dir(crate::repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("bash runs");
        let out = tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("`{command}` ran longer than {COMMAND_TIMEOUT:?}"))
            .expect("bash runs");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs every command of the marked block of `page` that starts with `$ {first_command}`, in order, and fails
    /// unless each prints what the page shows: a look is repeated until it does (up to [`LOOK_DEADLINE`]), any
    /// other command must on its one run.
    pub async fn run(&mut self, book: &Book, page: &str, first_command: &str) {
        let b = book.find(page, first_command);
        for s in 0..book.blocks[b].steps.len() {
            self.step(book, b, s).await;
        }
    }

    /// Runs the page's next marked block (the first with a command not checked yet) from its first unchecked command,
    /// up to (not including) the command starting with `until` (to the end with None): a page followed in order, the
    /// test acting or waiting where a reader would pause.
    pub async fn run_next(&mut self, book: &Book, page: &str, until: Option<&str>) {
        let checked = book.checked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let next = book.blocks.iter().enumerate().filter(|(_, block)| block.page == page).find_map(|(b, block)| {
            let s = (0..block.steps.len()).find(|s| !checked.contains(&(b, *s)))?;
            Some((b, s))
        });
        let (b, first) = next.unwrap_or_else(|| panic!("docs/src/{page} has no marked block left to run"));
        for s in first..book.blocks[b].steps.len() {
            if until.is_some_and(|u| book.blocks[b].steps[s].command.starts_with(u)) {
                break;
            }
            self.step(book, b, s).await;
        }
    }

    /// A pod name in a `kubectl` command that the page has not shown before (`kubectl delete pod web-56s29`) stands
    /// for a pod of that workload the page has not named yet: the first such live pod by name is bound to it.
    async fn bind_new_pods(&mut self, page: &str, command: &str) {
        if !command.starts_with("kubectl ") {
            return;
        }
        let names = self.page_names(page).clone();
        let mut wanted = Vec::new();
        for (start, end) in id_spans(command) {
            let id = &command[start..end];
            let prefix_start =
                command[..start - 1].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).map_or(0, |i| i + 1);
            let prefix = &command[prefix_start..start - 1];
            if end - start == 5 && !prefix.is_empty() && !prefix.starts_with('-') && !names.bound.contains_key(id) {
                wanted.push((prefix.to_string(), id.to_string()));
            }
        }
        if wanted.is_empty() {
            return;
        }
        let (_, json) = self.sh("kubectl get pods -o json").await;
        let pods: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
        let mut live: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        live.sort();
        for (prefix, id) in wanted {
            if live.iter().any(|n| *n == format!("{prefix}-{id}")) {
                continue;
            }
            let names = self.page_names(page);
            let taken: BTreeSet<&String> = names.bound.values().collect();
            let pick = live.iter().find_map(|n| {
                let rest = n.strip_prefix(&format!("{prefix}-"))?;
                (rest.len() == 5 && !taken.contains(&rest.to_string())).then(|| rest.to_string())
            });
            if let Some(real) = pick {
                println!("(the page's {prefix}-{id} is {prefix}-{real} here)");
                names.bind(&id, &real);
            }
        }
    }

    /// The names `page` has shown so far (compared with counts kept).
    fn page_names(&mut self, page: &str) -> &mut Names {
        self.names.entry(page.to_string()).or_insert_with(|| Names { keep_counts: true, ..Names::default() })
    }

    async fn step(&mut self, book: &Book, b: usize, s: usize) {
        let block = &book.blocks[b];
        let step = &block.steps[s];
        let look = is_look(&step.command);
        let unordered = step.command.starts_with("kubectl get ") && !step.command.contains('|');
        self.bind_new_pods(&block.page, &step.command).await;
        let start = Instant::now();
        loop {
            let command = self.page_names(&block.page).apply(&step.command);
            let (code, output) = self.sh(&command).await;
            println!("$ {command}\n{output}(exit {code})");
            if self.page_names(&block.page).check(&step.output, &output, unordered) {
                self.last_exit = code;
                book.mark(b, s);
                return;
            }
            assert!(
                look && start.elapsed() < LOOK_DEADLINE,
                "docs/src/{}:{} shows for `$ {}`:\n{}\n--- but it prints{}:\n{output}",
                block.page,
                block.line,
                step.command,
                step.output.join("\n"),
                if look { format!(" (looked for {:?})", start.elapsed()) } else { String::new() }
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| l.to_string()).collect()
    }

    /// A batch's rows follow the pods' random names, the race's list its order: the same forecast for other names
    /// matches with the batch's rows in another order, and a race list in another order does not.
    #[test]
    fn a_plans_batch_rows_match_in_any_order_and_its_race_list_in_order() {
        let page = "Batch 1 (starts at 0s, not done)\n  race-9r2n5  delete  ends Failed after 8s\n  race-bbtl5  delete  \
                    succeeds after 13s\n\nRace to empty:\n   1. race-9r2n5  skipped\n   2. race-bbtl5  wins\n";
        let other_names = "Batch 1 (starts at 0s, not done)\n  race-52rqp  delete  succeeds after 14s\n  race-546nd  \
                           delete  ends Failed after 9s\n\nRace to empty:\n   1. race-546nd  skipped\n   2. race-52rqp  wins\n";
        let race_swapped = "Batch 1 (starts at 0s, not done)\n  race-52rqp  delete  succeeds after 14s\n  race-546nd  \
                            delete  ends Failed after 9s\n\nRace to empty:\n   1. race-52rqp  wins\n   2. race-546nd  skipped\n";
        let expected: Vec<String> = plan_rows_sorted(page).lines().map(String::from).collect();
        assert!(matches(&expected, &plan_rows_sorted(other_names)));
        assert!(!matches(&expected, &plan_rows_sorted(race_swapped)));
        assert!(!matches(&lines(&page.lines().collect::<Vec<_>>()), other_names), "in page order they differ");
    }

    #[test]
    fn names_and_times_are_masked_and_ellipses_skip_lines() {
        assert_eq!(
            mask("pod test-gamedeployment-56gnm  Running  age 31s  "),
            "pod test-gamedeployment-ID Running age N"
        );
        assert_eq!(mask("age 1m5s, 2h ago, ~4s apart, 1/3 measured"), "age N, N ago, ~N apart, N/N measured");
        assert_eq!(mask("    |   `-- hookrun r"), mask("        `-- hookrun r"), "the branch glyphs");
        assert_eq!(
            mask("predelete-test-gamedeployment-58df655f74-56gnm-test"),
            "predelete-test-gamedeployment-ID-ID-test"
        );
        assert_eq!(mask("--assume-hooks fail, hook-template-fail.yaml"), "--assume-ID fail, hook-template-fail.yaml");
        assert_eq!(
            mask_times("web   6   6   0   4m41s  at 2026-11-28T03:03:33Z from 127.0.0.200:9091, 1h0m0s, v2 x3s"),
            "web 6 6 0 N at TIME from IP:9091, N, v2 x3s"
        );
        let expected = lines(&["a pod x-abcde for 1s", "    ...", "z"]);
        assert!(matches(&expected, "a pod x-q1w2e for 12s\nb\nc\nz\n"));
        assert!(matches(&expected, "a pod x-q1w2e for 2s\nz"));
        assert!(!matches(&expected, "a pod x-q1w2e for 2s\ny"));
        assert!(!matches(&expected, "a pod x-qwerty for 2s\nz"), "a longer name without a digit is not an id");
    }

    #[test]
    fn names_the_output_shows_are_bound_and_hold_for_later_commands() {
        let mut names = Names { keep_counts: true, ..Names::default() };
        assert!(!names.check(&lines(&["web 6 6 6"]), "web 6 0 0", false), "counts are kept");
        let table = lines(&["NAME   STATE", "web-abcde   PreparingDelete", "..."]);
        let output = "NAME  STATE\nweb-zzzzz   Normal\nweb-q1w2e   PreparingDelete\nweb-r2d2x   Normal\n";
        assert!(names.check(&table, output, true), "rows in any order");
        assert!(!names.check(&lines(&["NAME STATE", "web-abcde PreparingDelete"]), output, true), "no other rows");
        assert_eq!(names.apply("kubectl delete pod web-abcde"), "kubectl delete pod web-q1w2e");
        assert!(names.check(&lines(&["pod web-abcde deleted"]), "pod web-q1w2e deleted", false));
        assert!(!names.check(&lines(&["pod web-abcde deleted"]), "pod web-zzzzz deleted", false), "another pod");
    }
}
