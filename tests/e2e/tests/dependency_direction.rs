//! Dependencies between a crate's modules run one way. A crate's `lib.rs` lists its top-level modules in layers under
//! a `# Layering` heading, top to bottom, and a module uses only modules on lines below its own; inside
//! a folder module (`planner/`, `providers/http/`) the sibling modules never form a circle. This reads every module
//! of each crate with `syn`, finds the modules each one names, and fails on a circle (printing it, with the path
//! that makes each step) and on an edge the layering does not allow. Every workspace member whose `lib.rs` has the
//! heading is checked, and the product crates (common, the two operators, kubectl-gd) must have it.
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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use e2e::repo_root;
use syn::visit::Visit;

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

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().trim() == "test"))
}

fn load_crate(root: &Path, name: &str) -> Crate {
    let mut krate = Crate { name: name.to_string(), modules: BTreeMap::new() };
    let lib = root.join(name).join("src/lib.rs");
    let file = parse(&lib);
    let dir = lib.parent().expect("src/").to_path_buf();
    load_items(root, &mut krate, &lib, Vec::new(), dir, false, &file.items);
    krate
}

fn parse(path: &Path) -> syn::File {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Records the module `path` made of `items` (read from `file`), whose child modules' files are under `dir`.
fn load_items(
    root: &Path,
    krate: &mut Crate,
    file: &Path,
    path: ModPath,
    dir: PathBuf,
    test_only: bool,
    items: &[syn::Item],
) {
    let mut module =
        Module { file: file.strip_prefix(root).unwrap_or(file).display().to_string(), test_only, ..Module::default() };
    let mut children = Vec::new();
    for item in items {
        let test = test_only || is_cfg_test(item_attrs(item));
        match item {
            syn::Item::Mod(m) => {
                let name = m.ident.to_string();
                module.children.insert(name.clone());
                children.push((m, test));
            }
            syn::Item::Use(u) => {
                if !test {
                    flatten_use(&u.tree, Vec::new(), &mut |prefix, leaf| match leaf {
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
            other => {
                if let Some(name) = item_name(other) {
                    module.items.insert(name);
                }
                if !test {
                    let mut collector = PathCollector { paths: &mut module.paths };
                    collector.visit_item(other);
                }
            }
        }
    }
    krate.modules.insert(path.clone(), module);
    for (m, test) in children {
        let name = m.ident.to_string();
        let mut child_path = path.clone();
        child_path.push(name.clone());
        match &m.content {
            Some((_, items)) => load_items(root, krate, file, child_path, dir.join(&name), test, items),
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let (child_file, child_dir) = if flat.is_file() {
                    (flat, dir.join(&name))
                } else {
                    (dir.join(&name).join("mod.rs"), dir.join(&name))
                };
                let parsed = parse(&child_file);
                load_items(root, krate, &child_file, child_path, child_dir, test, &parsed.items);
            }
        }
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

fn item_name(item: &syn::Item) -> Option<String> {
    Some(match item {
        syn::Item::Const(i) => i.ident.to_string(),
        syn::Item::Enum(i) => i.ident.to_string(),
        syn::Item::Fn(i) => i.sig.ident.to_string(),
        syn::Item::Macro(i) => i.ident.as_ref()?.to_string(),
        syn::Item::Static(i) => i.ident.to_string(),
        syn::Item::Struct(i) => i.ident.to_string(),
        syn::Item::Trait(i) => i.ident.to_string(),
        syn::Item::TraitAlias(i) => i.ident.to_string(),
        syn::Item::Type(i) => i.ident.to_string(),
        syn::Item::Union(i) => i.ident.to_string(),
        _ => return None,
    })
}

enum UseLeaf {
    /// `name` is brought into scope and names `written`.
    Name(String, Written),
    /// `prefix::*`.
    Glob,
}

/// Calls `leaf` for each name a `use` tree brings in, with the path before it.
fn flatten_use(tree: &syn::UseTree, prefix: Written, leaf: &mut dyn FnMut(Written, UseLeaf)) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut prefix = prefix;
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, leaf);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last().cloned() {
                    leaf(prefix.clone(), UseLeaf::Name(last, prefix));
                }
            } else {
                let mut written = prefix.clone();
                written.push(name.clone());
                leaf(prefix, UseLeaf::Name(name, written));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut written = prefix.clone();
            written.push(r.ident.to_string());
            if r.ident == "self" {
                written.pop();
            }
            leaf(prefix, UseLeaf::Name(r.rename.to_string(), written));
        }
        syn::UseTree::Glob(_) => leaf(prefix, UseLeaf::Glob),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix.clone(), leaf);
            }
        }
    }
}

/// Collects the paths of a module's code, skipping `#[cfg(test)]` items and the `use` items inside function bodies
/// are taken as the paths they write.
struct PathCollector<'a> {
    paths: &'a mut Vec<Written>,
}

impl<'ast> Visit<'ast> for PathCollector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_cfg_test(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        flatten_use(&item.tree, Vec::new(), &mut |prefix, leaf| match leaf {
            UseLeaf::Name(_, written) => self.paths.push(written),
            UseLeaf::Glob => self.paths.push(prefix),
        });
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut written: Written = Vec::new();
        if path.leading_colon.is_some() {
            written.push(String::new());
        }
        written.extend(path.segments.iter().map(|s| s.ident.to_string()));
        self.paths.push(written);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        macro_paths(mac.tokens.clone(), self.paths);
    }
}

/// The `a::b::c` paths in a macro's tokens (a macro's arguments are not parsed as Rust by `syn`).
fn macro_paths(tokens: proc_macro2::TokenStream, paths: &mut Vec<Written>) {
    let tokens: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            proc_macro2::TokenTree::Group(g) => macro_paths(g.stream(), paths),
            proc_macro2::TokenTree::Ident(ident) => {
                let mut written = vec![ident.to_string()];
                let mut j = i + 1;
                while let (Some(proc_macro2::TokenTree::Punct(a)), Some(proc_macro2::TokenTree::Punct(b))) =
                    (tokens.get(j), tokens.get(j + 1))
                {
                    let Some(proc_macro2::TokenTree::Ident(next)) = tokens.get(j + 2) else { break };
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    written.push(next.to_string());
                    j += 3;
                }
                if written.len() > 1 {
                    paths.push(written);
                    i = j;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
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
