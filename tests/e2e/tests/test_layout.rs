//! Each crate has one integration-test binary whose modules are the files under its `tests/` (see
//! `tests/suites.rs`): a file without its `mod` line there would compile nowhere and never run. This finds such
//! files in every crate of the workspace.

use std::path::Path;

use e2e::repo_root;

/// The crate directories and their one test binary's root file (Cargo.toml `[[test]]`, `autotests = false`).
const HARNESSES: &[(&str, &str)] = &[
    ("tests/e2e", "suites.rs"),
    ("kube-sim", "cluster.rs"),
    ("common", "integration.rs"),
    ("hook-operator", "integration.rs"),
    ("kubectl-gd", "integration.rs"),
];

#[test]
fn every_test_file_is_a_module_of_its_crates_test_binary() {
    let root = repo_root();
    let mut missing = Vec::new();
    for (krate, harness) in HARNESSES {
        let dir = root.join(krate).join("tests");
        let harness_text = std::fs::read_to_string(dir.join(harness)).unwrap();
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        assert!(manifest.contains("autotests = false"), "{krate}/Cargo.toml: autotests is on again");
        assert!(
            manifest.contains(&format!("path = \"tests/{harness}\"")),
            "{krate}/Cargo.toml names no tests/{harness}"
        );
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let Some(stem) = module_name(&path) else { continue };
            if format!("{stem}.rs") == *harness {
                continue;
            }
            // Directories with a main.rs are test binaries of their own (`[[test]]` entries in Cargo.toml).
            if path.is_dir() && path.join("main.rs").is_file() {
                assert!(
                    manifest.contains(&format!("path = \"tests/{stem}/main.rs\"")),
                    "{krate}: tests/{stem}/ is not a [[test]]"
                );
                continue;
            }
            if !harness_text.lines().any(|l| l.trim() == format!("mod {stem};")) {
                missing.push(format!("{krate}/tests/{}", path.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "test files no test binary compiles (add `mod <name>;` to the crate's harness): {missing:?}"
    );
}

/// `foo` for `foo.rs` and for a directory `foo/` (a shared module or a test binary of its own); `None` otherwise.
fn module_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    if path.is_dir() {
        return (!name.starts_with('.') && (path.join("mod.rs").is_file() || path.join("main.rs").is_file()))
            .then(|| name.to_string());
    }
    name.strip_suffix(".rs").map(str::to_string)
}

/// The features each package of `cargo tree` is built with (`-e features`), for the packages `selection` selects:
/// `name version` → the feature lists it appears with (more than one when a package is built for the host and the
/// target differently).
fn resolved_features(selection: &[&str]) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-q", "-e", "features", "--prefix", "none", "-f", "{p} {f}"])
        .args(selection)
        .current_dir(repo_root())
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    let mut features: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for line in String::from_utf8_lossy(&output.stdout).lines().filter(|l| !l.contains(" feature \"")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [name, version, rest @ ..] = &words[..] else { continue };
        let list = rest.iter().find(|w| !w.starts_with('(')).copied().unwrap_or("");
        features.entry(format!("{name} {version}")).or_default().insert(list.to_string());
    }
    features
}

/// `scripts/test` compiles every test with `cargo test --workspace --no-run`, then runs `cargo test --workspace
/// --exclude e2e` beside `cargo test -p e2e`, which resolves features for e2e's own graph: a package the two resolve differently is built twice on a clean clone (once e2e did not name
/// the gamedeployment-operator's kube features, so the end-to-end step rebuilt kube, common, hook-operator, kube-sim
/// and e2e in a second configuration). Every package of e2e's graph has the features the whole workspace gives it.
#[test]
fn the_end_to_end_step_builds_its_packages_with_the_workspaces_features() {
    let workspace = resolved_features(&["--workspace"]);
    let e2e = resolved_features(&["-p", "e2e"]);
    let differ: Vec<String> = e2e
        .iter()
        .filter(|(package, lists)| workspace.get(*package) != Some(lists))
        .map(|(package, lists)| format!("{package}: e2e {lists:?}, workspace {:?}", workspace.get(package)))
        .collect();
    assert!(differ.is_empty(), "name these features in tests/e2e/Cargo.toml:\n{}", differ.join("\n"));
}

/// Every cargo command of `scripts/test` selects the whole workspace, or e2e (whose features the test above pins):
/// Cargo resolves features for the packages a command selects, so a command on one package can build its
/// dependencies in a second configuration. The CRD check ran `cargo run -p common --bin crdgen`, which got serde_json
/// without the workspace's `preserve_order`, and compiled serde_json, k8s-openapi and kube a second time on a clean
/// clone (5 minutes); it now runs after the build as `cargo run --bin crdgen`, the binary the build made.
#[test]
fn every_cargo_command_of_the_test_script_selects_the_workspace_or_e2e() {
    let script = std::fs::read_to_string(repo_root().join("scripts/test")).expect("scripts/test is readable");
    let commands: Vec<&str> =
        script.lines().map(str::trim).filter(|l| l.starts_with("cargo ") && !l.starts_with("cargo install")).collect();
    assert!(commands.iter().any(|c| c.contains("--bin crdgen")), "the CRD check is one of them: {commands:#?}");
    let one_package: Vec<&&str> = commands
        .iter()
        .filter(|c| {
            let words: Vec<&str> = c.split_whitespace().collect();
            words.windows(2).any(|w| (w[0] == "-p" || w[0] == "--package") && w[1] != "e2e")
        })
        .collect();
    assert!(one_package.is_empty(), "select the workspace (no -p) in scripts/test: {one_package:#?}");
}

/// `cargo test` builds every binary a second time as a test harness, a full compile and link of the program with
/// its dependencies, and runs it, unless its target says `test = false`. The workspace's binaries are thin `main`s
/// over their crate's library, where the tests live: 13 harnesses ran no test and cost a clean clone minutes of
/// compiling and linking. Each binary has `test = false`, and none holds a test (which would then never run).
#[test]
fn binaries_are_not_built_as_test_harnesses_and_hold_no_tests() {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--offline", "--format-version", "1", "--no-deps"])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let (mut harnesses, mut with_tests, mut binaries) = (Vec::new(), Vec::new(), 0);
    for package in metadata["packages"].as_array().into_iter().flatten() {
        for target in package["targets"].as_array().into_iter().flatten() {
            if !target["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "bin")) {
                continue;
            }
            binaries += 1;
            let name =
                format!("{} {}", package["name"].as_str().unwrap_or("?"), target["name"].as_str().unwrap_or("?"));
            if target["test"] != serde_json::Value::Bool(false) {
                harnesses.push(name.clone());
            }
            let source = std::fs::read_to_string(target["src_path"].as_str().unwrap_or_default()).unwrap_or_default();
            if source.contains("#[test]") || source.contains("#[tokio::test") || source.contains("#[cfg(test)]") {
                with_tests.push(name);
            }
        }
    }
    assert!(binaries >= 10, "cargo metadata listed {binaries} binaries: the workspace has more");
    assert!(harnesses.is_empty(), "give these binaries `test = false` in a [[bin]] entry: {harnesses:?}");
    assert!(with_tests.is_empty(), "move these binaries' tests into their crate's library: {with_tests:?}");
}
