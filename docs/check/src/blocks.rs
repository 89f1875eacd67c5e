//! The book's shell blocks that show output, and which test checks each.
//!
//! A fenced block shows output when it is in **console form**: a line `$ COMMAND` (continued on the next lines while
//! a line ends with `\`) followed by lines that are not commands, the command's output, up to the next `$ ` line or
//! the end of the block. Output is shown in no other form: in an `sh` block (commands only) a full-line comment
//! right after a command line would be output written as a comment ([`output_as_comments`]).
//!
//! Each such block is either checked by a named end-to-end test — the line before its fence is
//! `<!-- checked: MODULE::TEST -->`, `TEST` a test of `tests/e2e/tests/MODULE.rs` that runs (or compares) every
//! command of the block (`e2e::book` fails the test when a block marked with its name is not checked in full) — or
//! listed in [`UNCHECKED`] with the reason it is not.

use std::path::Path;

/// The blocks that show output and are not checked yet: (page, first command, why). Kept short; an entry that no
/// longer names a block, or names a checked one, fails the inventory test.
pub const UNCHECKED: &[(&str, &str, &str)] = &[];

/// A command of a block and the output the block shows for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The command as a shell reads it: continuation lines joined by `\` + newline, without the `$ `.
    pub command: String,
    /// The lines after it, up to the next command (the block's indentation removed).
    pub output: Vec<String>,
}

/// A fenced block in console form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The page, relative to `docs/src/`.
    pub page: String,
    /// The 1-based line of the opening fence.
    pub line: usize,
    /// The test named by `<!-- checked: TEST -->` on the line before the fence, if any.
    pub checked_by: Option<String>,
    pub steps: Vec<Step>,
}

impl Block {
    /// Whether some command of the block has output shown.
    pub fn shows_output(&self) -> bool {
        self.steps.iter().any(|s| s.output.iter().any(|l| !l.trim().is_empty()))
    }

    /// The first line of the first command: how the unchecked list and the tests name a block.
    pub fn first_command(&self) -> &str {
        self.steps.first().map(|s| s.command.lines().next().unwrap_or("")).unwrap_or("")
    }
}

const MARKER: &str = "<!-- checked:";

/// A fenced block: its opening line number (1-based), info string, the line before it and its lines.
struct Fenced<'a> {
    line: usize,
    info: &'a str,
    before: Option<&'a str>,
    body: Vec<&'a str>,
}

fn fenced(text: &str) -> Vec<Fenced<'_>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        let Some(fence) = fence else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let info = trimmed.trim_start_matches(fence.chars().next().unwrap_or('`')).trim();
        let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).copied();
        let end = (i + 1..lines.len()).find(|&j| lines[j].trim_start().starts_with(fence)).unwrap_or(lines.len());
        let body = lines[i + 1..end]
            .iter()
            .map(|l| l.get(indent..).filter(|_| l.len() >= indent).unwrap_or(l.trim_start()))
            .collect();
        out.push(Fenced { line: i + 1, info, before, body });
        i = end + 1;
    }
    out
}

/// The console-form blocks of a page (`page` relative to `docs/src/`), in order.
pub fn console_blocks(page: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    for f in fenced(text) {
        if !f.body.iter().any(|l| l.starts_with("$ ")) {
            continue;
        }
        let mut steps: Vec<Step> = Vec::new();
        let mut continued = false;
        for l in &f.body {
            if continued {
                if let Some(step) = steps.last_mut() {
                    step.command.push('\n');
                    step.command.push_str(l);
                }
                continued = l.ends_with('\\');
            } else if let Some(command) = l.strip_prefix("$ ") {
                steps.push(Step { command: command.to_string(), output: Vec::new() });
                continued = command.ends_with('\\');
            } else if let Some(step) = steps.last_mut() {
                step.output.push(l.to_string());
            }
        }
        let checked_by = f
            .before
            .map(str::trim)
            .and_then(|b| b.strip_prefix(MARKER))
            .and_then(|rest| rest.strip_suffix("-->"))
            .map(|name| name.trim().to_string());
        out.push(Block { page: page.to_string(), line: f.line, checked_by, steps });
    }
    out
}

/// Every console-form block of the book under `src` (`docs/src`), pages in path order.
pub fn book_blocks(src: &Path) -> Vec<Block> {
    let pages = crate::files_under(src, &|p: &Path| p.extension().is_some_and(|e| e == "md"));
    let mut out = Vec::new();
    for page in pages {
        let Ok(text) = std::fs::read_to_string(&page) else { continue };
        let rel = page.strip_prefix(src).unwrap_or(&page).to_string_lossy().into_owned();
        out.extend(console_blocks(&rel, &text));
    }
    out
}

/// The lines (1-based) of `sh`/`bash`/`shell` blocks that show output as comments: a full-line `#` comment right
/// after a command line (or after another such comment). Comments there go before the command they explain (after a
/// blank line) or at the end of its line.
pub fn output_as_comments(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for f in fenced(text) {
        if !matches!(f.info, "sh" | "bash" | "shell") {
            continue;
        }
        let mut after_command = false;
        let mut continued = false;
        for (k, l) in f.body.iter().enumerate() {
            let t = l.trim();
            if t.starts_with('#') && !continued {
                if after_command {
                    out.push(f.line + 1 + k);
                }
            } else if t.is_empty() {
                after_command = false;
            } else {
                after_command = !t.ends_with('\\');
            }
            continued = t.ends_with('\\') && !t.starts_with('#');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_console_block_is_split_into_commands_and_their_output() {
        let page = "Text\n\n<!-- checked: book_blocks::walkthrough -->\n```console\n$ kubectl get a\nNAME\na-x2v4b\n\
                    $ kubectl patch x \\\n    -p='{}'\nx patched\n$ echo $?\n0\n```\n\n  ```\n  $ ls\n  a\n  ```\n\n\
                    ```sh\nkubectl get a\n```\n";
        let blocks = console_blocks("p.md", page);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].checked_by.as_deref(), Some("book_blocks::walkthrough"));
        assert_eq!(blocks[0].line, 4);
        assert_eq!(blocks[0].first_command(), "kubectl get a");
        assert_eq!(
            blocks[0].steps,
            vec![
                Step { command: "kubectl get a".into(), output: vec!["NAME".into(), "a-x2v4b".into()] },
                Step { command: "kubectl patch x \\\n    -p='{}'".into(), output: vec!["x patched".into()] },
                Step { command: "echo $?".into(), output: vec!["0".into()] },
            ]
        );
        assert_eq!(blocks[1].checked_by, None, "an indented block, no marker");
        assert_eq!(blocks[1].steps, vec![Step { command: "ls".into(), output: vec!["a".into()] }]);
        assert!(blocks[1].shows_output());
    }

    #[test]
    fn output_written_as_comments_after_a_command_is_found() {
        let page = "```sh\n# why\nkubectl get a   # inline\n# NAME\n# a\n\n# next step\nkubectl x \\\n  -y\n```\n";
        assert_eq!(output_as_comments(page), vec![4, 5]);
    }
}
