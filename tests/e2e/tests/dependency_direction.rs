//! Dependencies between a crate's modules run one way. A crate's `lib.rs` lists its top-level modules in layers under
//! a `# Layering` heading, top to bottom, and a module uses only modules on lines below its own; inside
//! a folder module (`planner/`, `providers/http/`) the sibling modules never form a circle. This reads every module
//! of each crate as `proc-macro2` tokens, finds the modules each one names, and fails on a circle (printing it, with
//! the path that makes each step) and on an edge the layering does not allow. Every workspace member whose `lib.rs`
//! has the heading is checked, and the product crates (common, the two operators, kubectl-gd) must have it.
//!
//! What counts as an edge from module `a` to module `b`: `use` items and paths in code (macro arguments included)
//! that start with `crate::`, `self::`, `super::`, a child module's name or a name a `use` brought in, resolved
//! through `use` re-exports (`pub use status::Verdict` in `planner/mod.rs` makes `super::Verdict` an edge to
//! `planner::status`). An edge is counted between the two modules that hold `a` and `b` under their nearest common
//! parent: `planner::status` naming `planner::update::inplace` is `status → update` among `planner`'s children. A
//! module naming its own ancestor's items (a child using `super::Observed` defined in `planner/mod.rs`) or its own
//! descendants is not an edge: a folder's `mod.rs` and its children are one module seen from outside.
//!
//! Test code is left out: `#[cfg(test)]` modules and items (which is where `*_tests.rs` files are declared). Tests
//! may reach anywhere, e.g. the planner's tests run on `forecast::cluster`, above the planner.
//!
//! Reading tokens rather than a syntax tree is enough for this: a module's items are split at their `;` or body,
//! a path is an identifier followed by `::`-joined identifiers wherever it stands (a type, an expression, a macro's
//! arguments), and a single identifier (a field, a local) can only name an import or a child module, which the
//! module's `use` or `mod` item already makes an edge of, or none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use e2e::repo_root;
use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// The product crates: each states its layering, so each is among the crates checked.
const PRODUCT_CRATES: &[&str] = &["common", "gamedeployment-operator", "hook-operator", "kubectl-gd"];

/// The workspace members (directories, from the root Cargo.toml's `members = [...]`) whose `src/lib.rs` has a
/// `# Layering` doc heading: the crates whose module dependencies are checked.
fn layered_crates(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml is readable");
    let list = manifest.split_once("members = [").expect("the root Cargo.toml lists its members").1;
    let list = list.split(']').next().unwrap_or_default();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .filter(|m| {
            std::fs::read_to_string(root.join(m).join("src/lib.rs")).is_ok_and(|lib| layering_heading(&lib).is_some())
        })
        .collect()
}

/// The inner doc lines of a `lib.rs`, without `//!` and one space after it.
fn inner_doc(lib_rs: &str) -> Vec<&str> {
    lib_rs.lines().filter_map(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l)).collect()
}

/// Where in `inner_doc` the `# Layering` heading is.
fn layering_heading(lib_rs: &str) -> Option<usize> {
    inner_doc(lib_rs).iter().position(|l| l.trim() == "# Layering")
}

/// A module's path from its crate root: `["planner", "status"]`; the root is `[]`.
type ModPath = Vec<String>;

/// A path as written in the code, split at `::`; a leading `::` is the segment `""`.
type Written = Vec<String>;

/// One module of a crate's library, as far as name resolution between modules needs it.
#[derive(Debug, Default)]
struct Module {
    /// The file that holds it, relative to the repository root.
    file: String,
    /// Declared under `#[cfg(test)]` (or inside such a module).
    test_only: bool,
    children: BTreeSet<String>,
    /// Names a `use` brings into this module's scope, with the path it names.
    imports: BTreeMap<String, Written>,
    /// The paths of `use …::*` items.
    globs: Vec<Written>,
    /// Names of the items defined here (types, functions, constants, traits, macros).
    items: BTreeSet<String>,
    /// Every path the module's non-test code writes that may name another module of the crate.
    paths: Vec<Written>,
}

/// The modules of one crate's library, read from `src/lib.rs` down.
struct Crate {
    name: String,
    modules: BTreeMap<ModPath, Module>,
}

/// An edge between two sibling modules, children of `parent`, with the paths that make it.
#[derive(Debug, Default)]
struct Graph {
    edges: BTreeMap<(String, String), BTreeSet<String>>,
}

/// One item of a token stream read as a list of items (a file, a module's or an impl's body, a block): its outer
/// attributes (each the tokens inside `#[…]`) and its tokens up to and including its `;` or its body.
struct Item {
    attrs: Vec<TokenStream>,
    tokens: Vec<TokenTree>,
}

/// What an item is, from the words before its name: `pub(crate) const fn f` is a `fn`, `const X` a `const`.
struct Head {
    /// `fn`, `struct`, `use`, `mod`, `impl`, `const`, `extern crate`, `macro_rules`, …; `""` for an expression or
    /// a macro call (`name!(…)`).
    keyword: String,
    /// The index in the item's tokens just after the keyword.
    after: usize,
}

fn is_punct(token: Option<&TokenTree>, c: char) -> bool {
    matches!(token, Some(TokenTree::Punct(p)) if p.as_char() == c)
}

fn is_ident(token: Option<&TokenTree>, name: &str) -> bool {
    matches!(token, Some(TokenTree::Ident(i)) if i == name)
}

fn ident(token: Option<&TokenTree>) -> Option<String> {
    match token {
        Some(TokenTree::Ident(i)) => Some(i.to_string()),
        _ => None,
    }
}

/// `tokens[i..]` starts with `::`.
fn is_path_sep(tokens: &[TokenTree], i: usize) -> bool {
    matches!((tokens.get(i), tokens.get(i + 1)), (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
        if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':')
}

fn is_brace(token: Option<&TokenTree>) -> bool {
    matches!(token, Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace)
}

/// `#[…]` or `#![…]` at `tokens[i..]`: the attribute's tokens and the index after it.
fn attribute_at(tokens: &[TokenTree], i: usize) -> Option<(TokenStream, usize)> {
    if !is_punct(tokens.get(i), '#') {
        return None;
    }
    let bang = usize::from(is_punct(tokens.get(i + 1), '!'));
    match tokens.get(i + 1 + bang) {
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket => Some((g.stream(), i + 2 + bang)),
        _ => None,
    }
}

fn head(tokens: &[TokenTree]) -> Head {
    let mut i = 0;
    if is_ident(tokens.first(), "pub") {
        i = 1;
        if matches!(tokens.get(1), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis) {
            i = 2;
        }
    }
    loop {
        let keyword = match tokens.get(i) {
            Some(TokenTree::Literal(_)) => {
                i += 1; // an ABI: `extern "C"`
                continue;
            }
            Some(TokenTree::Ident(word)) => word.to_string(),
            _ => return Head { keyword: String::new(), after: i },
        };
        let next = ident(tokens.get(i + 1));
        match keyword.as_str() {
            "const" if !matches!(next.as_deref(), Some("fn" | "async" | "unsafe" | "extern")) => {}
            "extern" if next.as_deref() == Some("crate") => {
                return Head { keyword: "extern crate".into(), after: i + 2 };
            }
            "extern" if is_brace(tokens.get(i + 1)) => {}
            "const" | "async" | "unsafe" | "extern" | "default" | "auto" | "safe" => {
                i += 1;
                continue;
            }
            _ if is_punct(tokens.get(i + 1), '!') || is_path_sep(tokens, i + 1) => {
                let macro_rules = keyword == "macro_rules";
                return Head { keyword: if macro_rules { keyword } else { String::new() }, after: i + 1 };
            }
            _ => {}
        }
        return Head { keyword, after: i + 1 };
    }
}

/// Splits `stream` into its items: each ends at its `;`, or at its first `{…}` (a body) unless it is a `use`,
/// `const`, `static`, `type` or `let`, which end at their `;` only.
fn split_items(stream: TokenStream) -> Vec<Item> {
    let tokens: Vec<TokenTree> = stream.into_iter().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let mut attrs = Vec::new();
        while let Some((attr, next)) = attribute_at(&tokens, i) {
            // Inner attributes (`#![…]`) belong to the enclosing module, not to the next item.
            if !is_punct(tokens.get(i + 1), '!') {
                attrs.push(attr);
            }
            i = next;
        }
        let start = i;
        let keyword = head(&tokens[start..]).keyword;
        let semicolon_only = matches!(keyword.as_str(), "use" | "const" | "static" | "type" | "let" | "extern crate");
        while i < tokens.len() {
            let token = &tokens[i];
            i += 1;
            if is_punct(Some(token), ';') || (!semicolon_only && is_brace(Some(token))) {
                break;
            }
        }
        if start < i || !attrs.is_empty() {
            items.push(Item { attrs, tokens: tokens[start..i].to_vec() });
        }
    }
    items
}

/// The attribute is `#[cfg(test)]`.
fn is_cfg_test(attr: &TokenStream) -> bool {
    let tokens: Vec<TokenTree> = attr.clone().into_iter().collect();
    matches!(tokens.as_slice(), [TokenTree::Ident(cfg), TokenTree::Group(g)]
        if cfg == "cfg" && g.delimiter() == Delimiter::Parenthesis && g.stream().to_string().trim() == "test")
}

impl Item {
    fn is_test(&self) -> bool {
        self.attrs.iter().any(is_cfg_test)
    }

    /// The name the item defines in its module (a type, function, constant, trait or `macro_rules!` macro).
    fn name(&self) -> Option<String> {
        let head = head(&self.tokens);
        match head.keyword.as_str() {
            "static" if is_ident(self.tokens.get(head.after), "mut") => ident(self.tokens.get(head.after + 1)),
            "const" | "enum" | "fn" | "static" | "struct" | "trait" | "type" | "union" => {
                ident(self.tokens.get(head.after))
            }
            "macro_rules" => ident(self.tokens.get(head.after + 1)),
            _ => None,
        }
    }

    /// The paths the item writes, its test-only parts left out.
    fn collect_paths(&self, paths: &mut Vec<Written>) {
        for attr in &self.attrs {
            attribute_path(attr, paths);
        }
        let head = head(&self.tokens);
        match head.keyword.as_str() {
            "use" => flatten_use(use_tree(&self.tokens[head.after..]), Vec::new(), &mut |prefix, leaf| match leaf {
                UseLeaf::Name(_, written) => paths.push(written),
                UseLeaf::Glob => paths.push(prefix),
            }),
            // Fields, variants and macro bodies hold no items whose `#[cfg(test)]` would leave them out.
            "struct" | "enum" | "union" | "macro_rules" => scan(&self.tokens, paths, false),
            _ => scan(&self.tokens, paths, true),
        }
    }
}

/// The path an attribute starts with (`cfg`, `derive`, `serde`): its arguments are not Rust code.
fn attribute_path(attr: &TokenStream, paths: &mut Vec<Written>) {
    let tokens: Vec<TokenTree> = attr.clone().into_iter().collect();
    if let Some((written, _)) = path_at(&tokens, 0) {
        paths.push(written);
    }
}

/// The path written at `tokens[i..]` (`a::b::c`, `::a::b`), and the index after it.
fn path_at(tokens: &[TokenTree], i: usize) -> Option<(Written, usize)> {
    let mut written = Vec::new();
    let mut j = i;
    if is_path_sep(tokens, j) {
        written.push(String::new());
        j += 2;
    }
    written.push(ident(tokens.get(j))?);
    j += 1;
    while is_path_sep(tokens, j)
        && let Some(next) = ident(tokens.get(j + 2))
    {
        written.push(next);
        j += 3;
    }
    Some((written, j))
}

/// The paths in `tokens`; with `blocks_hold_items`, a `{…}` not after a macro's `!` is read as a list of items
/// (a body or a block), whose `#[cfg(test)]` items are left out.
fn scan(tokens: &[TokenTree], paths: &mut Vec<Written>, blocks_hold_items: bool) {
    let mut i = 0;
    while i < tokens.len() {
        if let Some((attr, next)) = attribute_at(tokens, i) {
            attribute_path(&attr, paths);
            i = next;
            continue;
        }
        match &tokens[i] {
            TokenTree::Punct(p) if p.as_char() == '\'' => i += 2, // a lifetime or a label
            TokenTree::Group(g) => {
                // `name!{…}` and `macro_rules! name {…}`: a macro's tokens.
                let after_bang = i >= 1 && is_punct(tokens.get(i - 1), '!')
                    || i >= 2 && is_punct(tokens.get(i - 2), '!') && ident(tokens.get(i - 1)).is_some();
                if blocks_hold_items && g.delimiter() == Delimiter::Brace && !after_bang {
                    scan_items(g.stream(), paths);
                } else {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    scan(&inner, paths, blocks_hold_items && !after_bang);
                }
                i += 1;
            }
            _ => match path_at(tokens, i) {
                Some((written, next)) => {
                    paths.push(written);
                    i = next;
                }
                None => i += 1,
            },
        }
    }
}

/// The paths of a body's or a block's items; its `#[cfg(test)]` items are left out, and its `use` items (which
/// bring names into the block only) count as the paths they write.
fn scan_items(stream: TokenStream, paths: &mut Vec<Written>) {
    for item in split_items(stream) {
        if !item.is_test() {
            item.collect_paths(paths);
        }
    }
}

fn load_crate(root: &Path, name: &str) -> Crate {
    let mut krate = Crate { name: name.to_string(), modules: BTreeMap::new() };
    let lib = root.join(name).join("src/lib.rs");
    let items = parse(&lib);
    let dir = lib.parent().expect("src/").to_path_buf();
    load_items(root, &mut krate, &lib, Vec::new(), dir, false, items);
    krate
}

fn parse(path: &Path) -> Vec<Item> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tokens: TokenStream = text.parse().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    split_items(tokens)
}

/// Records the module `path` made of `items` (read from `file`), whose child modules' files are under `dir`.
fn load_items(
    root: &Path,
    krate: &mut Crate,
    file: &Path,
    path: ModPath,
    dir: PathBuf,
    test_only: bool,
    items: Vec<Item>,
) {
    let mut module =
        Module { file: file.strip_prefix(root).unwrap_or(file).display().to_string(), test_only, ..Module::default() };
    let mut children = Vec::new();
    for item in items {
        let test = test_only || item.is_test();
        let head = head(&item.tokens);
        match head.keyword.as_str() {
            "mod" => {
                let Some(name) = ident(item.tokens.get(head.after)) else { continue };
                module.children.insert(name.clone());
                let content = match item.tokens.get(head.after + 1) {
                    Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => Some(g.stream()),
                    _ => None,
                };
                children.push((name, content, test));
            }
            "use" => {
                if !test {
                    flatten_use(use_tree(&item.tokens[head.after..]), Vec::new(), &mut |prefix, leaf| match leaf {
                        UseLeaf::Name(name, written) => {
                            module.imports.insert(name, written.clone());
                            module.paths.push(written);
                        }
                        UseLeaf::Glob => {
                            module.globs.push(prefix.clone());
                            module.paths.push(prefix);
                        }
                    });
                }
            }
            _ => {
                if let Some(name) = item.name() {
                    module.items.insert(name);
                }
                if !test {
                    item.collect_paths(&mut module.paths);
                }
            }
        }
    }
    krate.modules.insert(path.clone(), module);
    for (name, content, test) in children {
        let mut child_path = path.clone();
        child_path.push(name.clone());
        match content {
            Some(stream) => load_items(root, krate, file, child_path, dir.join(&name), test, split_items(stream)),
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let (child_file, child_dir) = if flat.is_file() {
                    (flat, dir.join(&name))
                } else {
                    (dir.join(&name).join("mod.rs"), dir.join(&name))
                };
                let items = parse(&child_file);
                load_items(root, krate, &child_file, child_path, child_dir, test, items);
            }
        }
    }
}

enum UseLeaf {
    /// `name` is brought into scope and names `written`.
    Name(String, Written),
    /// `prefix::*`.
    Glob,
}

/// A `use` item's tree: its tokens after `use`, without the `;` and a leading `::`.
fn use_tree(tokens: &[TokenTree]) -> &[TokenTree] {
    let tokens = match tokens.split_last() {
        Some((last, rest)) if is_punct(Some(last), ';') => rest,
        _ => tokens,
    };
    if is_path_sep(tokens, 0) { &tokens[2..] } else { tokens }
}

/// Calls `leaf` for each name a `use` tree (`a::b::{c, d as e, f::*, self}`) brings in, with the path before it.
fn flatten_use(tree: &[TokenTree], prefix: Written, leaf: &mut dyn FnMut(Written, UseLeaf)) {
    match tree.first() {
        Some(TokenTree::Ident(first)) => {
            let name = first.to_string();
            if is_path_sep(tree, 1) {
                let mut prefix = prefix;
                prefix.push(name);
                flatten_use(&tree[3..], prefix, leaf);
            } else if is_ident(tree.get(1), "as") {
                let Some(rename) = ident(tree.get(2)) else { return };
                let mut written = prefix.clone();
                if name != "self" {
                    written.push(name);
                }
                leaf(prefix, UseLeaf::Name(rename, written));
            } else if name == "self" {
                if let Some(last) = prefix.last().cloned() {
                    leaf(prefix.clone(), UseLeaf::Name(last, prefix));
                }
            } else {
                let mut written = prefix.clone();
                written.push(name.clone());
                leaf(prefix, UseLeaf::Name(name, written));
            }
        }
        Some(TokenTree::Punct(p)) if p.as_char() == '*' => leaf(prefix, UseLeaf::Glob),
        Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Brace => {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            for tree in inner.split(|t| is_punct(Some(t), ',')) {
                if !tree.is_empty() {
                    flatten_use(tree, prefix.clone(), leaf);
                }
            }
        }
        _ => {}
    }
}

impl Crate {
    /// The crate-relative path a path written in module `at` names, or `None` for another crate's item, a local
    /// name or the prelude.
    fn absolute(&self, at: &[String], written: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 16 || written.is_empty() {
            return None;
        }
        let module = self.modules.get(at)?;
        let first = written[0].as_str();
        match first {
            "crate" => Some(written[1..].to_vec()),
            "self" => Some([at, &written[1..]].concat()),
            "super" => {
                let ups = written.iter().take_while(|s| *s == "super").count();
                let base = at.get(..at.len().checked_sub(ups)?)?;
                Some([base, &written[ups..]].concat())
            }
            "" => None,
            name if module.children.contains(name) => Some([at, written].concat()),
            name => {
                // A name a `use` brought in here (written relative to this module), or, for a child module, one in
                // scope in an ancestor is not visible: only this module's own imports count.
                let import = module.imports.get(name)?;
                if import.as_slice() == written {
                    return None;
                }
                let base = self.absolute(at, import, depth + 1)?;
                Some([base.as_slice(), &written[1..]].concat())
            }
        }
    }

    /// The module that holds what crate-relative path `absolute` names, following re-exports.
    fn holder(&self, absolute: &[String], depth: usize) -> ModPath {
        let mut at: ModPath = Vec::new();
        for (i, segment) in absolute.iter().enumerate() {
            let mut child = at.clone();
            child.push(segment.clone());
            if self.modules.contains_key(&child) {
                at = child;
                continue;
            }
            if depth > 16 {
                return at;
            }
            let module = &self.modules[&at];
            if module.items.contains(segment) {
                return at;
            }
            if let Some(import) = module.imports.get(segment)
                && let Some(target) = self.absolute(&at, import, 0)
            {
                return self.holder(&[target.as_slice(), &absolute[i + 1..]].concat(), depth + 1);
            }
            for glob in &module.globs {
                let Some(source) = self.absolute(&at, glob, 0) else { continue };
                let source_module = self.holder(&source, depth + 1);
                let Some(m) = self.modules.get(&source_module) else { continue };
                if source_module == source
                    && (m.items.contains(segment) || m.imports.contains_key(segment) || m.children.contains(segment))
                {
                    let mut target = source.clone();
                    target.extend_from_slice(&absolute[i..]);
                    return self.holder(&target, depth + 1);
                }
            }
            return at;
        }
        at
    }

    /// The edges between sibling modules, by parent: `graphs[["planner"]]` holds `status → progress_deadline`.
    fn graphs(&self) -> BTreeMap<ModPath, Graph> {
        let mut graphs: BTreeMap<ModPath, Graph> = BTreeMap::new();
        for (from, module) in &self.modules {
            if module.test_only {
                continue;
            }
            for written in &module.paths {
                let Some(absolute) = self.absolute(from, written, 0) else { continue };
                let to = self.holder(&absolute, 0);
                let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
                if common == from.len() || common == to.len() {
                    continue; // the same module, an ancestor's item or a descendant
                }
                let evidence = format!("{} `{}`", module.file, written.join("::"));
                graphs
                    .entry(from[..common].to_vec())
                    .or_default()
                    .edges
                    .entry((from[common].clone(), to[common].clone()))
                    .or_default()
                    .insert(evidence);
            }
        }
        graphs
    }
}

/// The circles among the nodes of `graph`: per strongly connected component, a shortest closed walk and the
/// component's nodes.
fn circles(graph: &Graph) -> Vec<(Vec<String>, Vec<String>)> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (a, b) in graph.edges.keys() {
        next.entry(a).or_default().insert(b);
    }
    let reaches = |from: &str, to: &str| -> Option<Vec<String>> {
        // Breadth first, so the circle printed is a shortest one.
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(node) = queue.pop_front() {
            for &n in next.get(node).into_iter().flatten() {
                if n == to {
                    let mut walk = vec![to.to_string(), node.to_string()];
                    let mut at = node;
                    while at != from {
                        at = parent[at];
                        walk.push(at.to_string());
                    }
                    walk.reverse();
                    return Some(walk);
                }
                if n != from && !parent.contains_key(n) {
                    parent.insert(n, node);
                    queue.push_back(n);
                }
            }
        }
        None
    };
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut found = Vec::new();
    for &node in next.keys() {
        if seen.contains(node) {
            continue;
        }
        if let Some(walk) = reaches(node, node) {
            // Every node on a circle through `node` is in its component: report the component once.
            let component: Vec<&str> =
                next.keys().copied().filter(|&n| reaches(node, n).is_some() && reaches(n, node).is_some()).collect();
            seen.extend(component.iter().map(|s| s.to_string()));
            found.push((walk, component.iter().map(|s| s.to_string()).collect()));
        }
    }
    found
}

/// The layers a crate's `lib.rs` states: the items of the numbered list under its `# Layering` doc heading, top to
/// bottom, each the backquoted module names before its first ` — `.
fn stated_layers(lib_rs: &str) -> Vec<Vec<String>> {
    let doc = inner_doc(lib_rs);
    let Some(start) = layering_heading(lib_rs) else { return Vec::new() };
    let mut layers = Vec::new();
    for line in &doc[start + 1..] {
        if line.starts_with('#') {
            break;
        }
        let Some((number, rest)) = line.split_once(". ") else { continue };
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let names = rest.split(" — ").next().unwrap_or_default();
        layers.push(names.split('`').skip(1).step_by(2).map(str::to_string).collect());
    }
    layers
}

/// What is wrong with `krate`'s module dependencies: circles, and edges against its `lib.rs`'s layering.
fn violations(root: &Path, krate: &Crate) -> Vec<String> {
    let mut problems = Vec::new();
    let graphs = krate.graphs();
    for (parent, graph) in &graphs {
        for (walk, component) in circles(graph) {
            let mut text = format!(
                "{}: circle among the modules of `{}`: {} (all of {} reach each other)",
                krate.name,
                if parent.is_empty() { "crate".to_string() } else { parent.join("::") },
                walk.join(" → "),
                component.join(", ")
            );
            for step in walk.windows(2) {
                let evidence = &graph.edges[&(step[0].clone(), step[1].clone())];
                let first: Vec<&String> = evidence.iter().take(3).collect();
                text.push_str(&format!("\n    {} → {}: {first:?}", step[0], step[1]));
            }
            problems.push(text);
        }
    }
    let lib_rs = std::fs::read_to_string(root.join(&krate.name).join("src/lib.rs")).expect("lib.rs is readable");
    let layers = stated_layers(&lib_rs);
    if layers.is_empty() {
        problems.push(format!("{}: src/lib.rs states no `# Layering` list", krate.name));
        return problems;
    }
    let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for name in layer {
            if layer_of.insert(name, i).is_some() {
                problems.push(format!("{}: `{name}` is on two lines of the layering", krate.name));
            }
        }
    }
    let top: Vec<&String> =
        krate.modules.iter().filter(|(p, m)| p.len() == 1 && !m.test_only).map(|(p, _)| &p[0]).collect();
    for name in &top {
        if !layer_of.contains_key(name.as_str()) {
            problems.push(format!("{}: module `{name}` is on no line of the layering in src/lib.rs", krate.name));
        }
    }
    for name in layer_of.keys() {
        if !top.iter().any(|t| t == name) {
            problems.push(format!("{}: the layering names `{name}`, which is no module of src/lib.rs", krate.name));
        }
    }
    if let Some(graph) = graphs.get(&Vec::new()) {
        for ((from, to), evidence) in &graph.edges {
            let (Some(&a), Some(&b)) = (layer_of.get(from.as_str()), layer_of.get(to.as_str())) else { continue };
            if a >= b {
                problems.push(format!(
                    "{}: `{from}` (line {} of the layering) uses `{to}` (line {}), which is not below it: {:?}",
                    krate.name,
                    a + 1,
                    b + 1,
                    evidence.iter().take(3).collect::<Vec<_>>()
                ));
            }
        }
    }
    problems
}

#[test]
fn module_dependencies_follow_each_crates_stated_layering_without_circles() {
    let root = repo_root();
    let crates = layered_crates(&root);
    for product in PRODUCT_CRATES {
        assert!(crates.iter().any(|c| c == product), "{product}'s src/lib.rs states a `# Layering`: {crates:?}");
    }
    let mut problems = Vec::new();
    for name in &crates {
        let krate = load_crate(&root, name);
        assert!(krate.modules.len() > 3, "{name}: the modules were read ({} found)", krate.modules.len());
        problems.extend(violations(&root, &krate));
    }
    assert!(problems.is_empty(), "module dependencies against the layering:\n{}", problems.join("\n"));
}

/// The check finds what it is for, in a crate written for it: a circle between two top-level modules (one of them
/// also an edge up the layering), a circle inside a folder made through a re-export, a macro argument's path, and a
/// module the layering forgot; test code is not counted.
#[test]
fn a_circle_an_upward_edge_and_a_module_off_the_layering_are_found() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let src = root.path().join("fixture/src");
    std::fs::create_dir_all(src.join("folder")).expect("src/folder");
    let files = [
        (
            "lib.rs",
            "//! # Layering\n//!\n//! 1. [`top`], `folder` — above;\n//!    more prose — with `low` in it\n//! 2. `low` — \
             the bottom.\n\nmod folder;\nmod low;\nmod top;\nmod forgotten;\n",
        ),
        ("top.rs", "pub struct Top(crate::low::Low);\n"),
        ("low.rs", "pub struct Low;\nfn f() { println!(\"{}\", crate::top::Top::NAME); }\n"),
        ("forgotten.rs", "\n"),
        ("folder/mod.rs", "mod a;\nmod b;\npub use a::A;\n"),
        ("folder/a.rs", "pub struct A(super::b::B);\n#[cfg(test)]\nmod tests {\n    use crate::top::Top;\n}\n"),
        ("folder/b.rs", "use super::A;\npub struct B;\n"),
    ];
    for (path, text) in files {
        std::fs::write(src.join(path), text).expect("a fixture file");
    }
    let krate = load_crate(root.path(), "fixture");
    let problems = violations(root.path(), &krate);
    let found = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(found("circle among the modules of `crate`: low → top → low"), "{problems:#?}");
    assert!(found("`low` (line 2 of the layering) uses `top` (line 1)"), "{problems:#?}");
    assert!(found("circle among the modules of `folder`: a → b → a"), "{problems:#?}");
    assert!(found("module `forgotten` is on no line of the layering"), "{problems:#?}");
    assert_eq!(problems.len(), 4, "the test module's `use crate::top` is no edge: {problems:#?}");
    assert_eq!(stated_layers(&std::fs::read_to_string(src.join("lib.rs")).unwrap())[0], ["top", "folder"]);
}
