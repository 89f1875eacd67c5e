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
