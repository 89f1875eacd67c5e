//! The dependency policy (docs/src/contributing/README.md, "Dependencies"): every member names its dependencies
//! through the root `[workspace.dependencies]` table, so one place chooses each version; `Cargo.lock` holds one
//! major of each crate that table names (two majors are two builds, and two sets of types that do not meet); and
//! the release build of the operators has no tokio `test-util`.

use std::collections::{BTreeMap, BTreeSet};

use e2e::repo_root;

/// A version's semver-compatibility class: `1.2.3` → `1`, `0.22.1` → `0.22`, `0.0.3` → `0.0.3`.
fn major(version: &str) -> String {
    let parts: Vec<&str> = version.split('.').collect();
    match parts.as_slice() {
        ["0", "0", ..] => version.to_string(),
        ["0", minor, ..] => format!("0.{minor}"),
        [major, ..] => major.to_string(),
        [] => version.to_string(),
    }
}

/// `Cargo.lock`'s packages: `(name, version)`.
fn lock_packages(lock: &str) -> Vec<(String, String)> {
    let mut packages = Vec::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key} = \"")).map(|v| v.trim_end_matches('"').to_string()))
                .unwrap_or_default()
        };
        packages.push((field("name"), field("version")));
    }
    packages
}

/// A Cargo.toml's dependency sections (`[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`, their
/// `[target.….…]` forms) as `(section, line)` for each entry; a `[dependencies.name]` table is one entry, its
/// lines joined.
fn dependency_entries(manifest: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut section = String::new();
    let mut in_table = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            let last = section.rsplit('.').next().unwrap_or_default();
            in_table = false;
            if last.ends_with("dependencies") {
                continue;
            }
            // `[dependencies.name]`: the entry is the table.
            if let Some((parent, name)) = section.rsplit_once('.')
                && parent.ends_with("dependencies")
            {
                entries.push((parent.to_string(), format!("{name} =")));
                in_table = true;
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let last = section.rsplit('.').next().unwrap_or_default();
        if in_table {
            if let Some(entry) = entries.last_mut() {
                entry.1.push(' ');
                entry.1.push_str(line);
            }
        } else if last.ends_with("dependencies") {
            entries.push((section.clone(), line.to_string()));
        }
    }
    entries
}

/// The workspace members' directories, from the root Cargo.toml's `members = [...]`.
fn members(root_manifest: &str) -> Vec<String> {
    let list = root_manifest.split_once("members = [").expect("the root Cargo.toml lists its members").1;
    let list = list.split(']').next().unwrap_or_default();
    list.split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

/// The crate names (as published, `package = "…"` renames followed) that `[workspace.dependencies]` names.
fn workspace_named_crates(root_manifest: &str) -> BTreeSet<String> {
    dependency_entries(root_manifest)
        .into_iter()
        .filter(|(section, _)| section == "workspace.dependencies")
        .filter(|(_, line)| !line.contains("path ="))
        .map(|(_, line)| {
            let key = line.split('=').next().unwrap_or_default().trim().to_string();
            line.split_once("package = \"").and_then(|(_, rest)| rest.split('"').next()).map_or(key, str::to_string)
        })
        .collect()
}

/// The dependencies `manifest` (of `member`) names with a version of its own instead of `workspace = true`.
fn outside_the_table(member: &str, manifest: &str) -> Vec<String> {
    dependency_entries(manifest)
        .into_iter()
        .filter(|(_, line)| !line.replace(' ', "").contains("workspace=true"))
        .map(|(section, line)| format!("{member}/Cargo.toml [{section}] {line}"))
        .collect()
}

#[test]
fn members_name_every_dependency_through_the_workspace_table() {
    let root = repo_root();
    let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml is readable");
    let members = members(&root_manifest);
    assert!(members.iter().any(|m| m == "tests/e2e"), "the member list was read: {members:?}");
    let mut outside = Vec::new();
    let mut seen = 0;
    for member in &members {
        let path = root.join(member).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        seen += dependency_entries(&manifest).len();
        outside.extend(outside_the_table(member, &manifest));
    }
    assert!(seen > 50, "the members' dependency sections were read ({seen} entries)");
    assert!(
        outside.is_empty(),
        "name these in the root [workspace.dependencies] and write `name = {{ workspace = true }}`:\n{}",
        outside.join("\n")
    );
}

/// The crates `[workspace.dependencies]` names that `lock` holds in more than one major, each with its majors:
/// `base64: {"0.22", "0.23"}`. A crate the workspace names is one the workspace chose; a second major of it is a
/// second build and a second set of types, whichever crate pulls it in.
fn second_majors(root_manifest: &str, lock: &str) -> Vec<String> {
    let named = workspace_named_crates(root_manifest);
    let mut majors: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, version) in lock_packages(lock) {
        if named.contains(&name) {
            majors.entry(name).or_default().insert(major(&version));
        }
    }
    majors
        .into_iter()
        .filter(|(_, versions)| versions.len() > 1)
        .map(|(name, versions)| format!("{name}: {versions:?}"))
        .collect()
}

#[test]
fn the_lock_holds_one_major_of_each_crate_the_workspace_names() {
    let root = repo_root();
    let root_manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml is readable");
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock is readable");
    let named = workspace_named_crates(&root_manifest);
    assert!(named.contains("kube") && named.contains("json-patch"), "the workspace table was read: {named:?}");
    assert!(lock_packages(&lock).len() > 100, "Cargo.lock's packages were read");
    let second = second_majors(&root_manifest, &lock);
    assert!(
        second.is_empty(),
        "crates the workspace names, in more than one major in Cargo.lock (move ours to the major the other crates \
         use, or stop naming the crate: use what a crate with one major provides):\n{}",
        second.join("\n")
    );
}

/// What the workspace held before this policy: json-patch 5 beside kube's 4, and a member's own versions.
#[test]
fn a_second_major_and_a_dependency_outside_the_table_are_found() {
    let root_manifest = "[workspace]\nmembers = []\n\n[workspace.dependencies]\nkube = \"5.0\"\njson-patch = \"5.0\"\n\
                         kube-json-patch = { package = \"json-patch\", version = \"4.2\" }\n";
    let lock = "[[package]]\nname = \"json-patch\"\nversion = \"4.2.0\"\n\n[[package]]\nname = \"json-patch\"\n\
                version = \"5.0.0\"\n\n[[package]]\nname = \"kube-core\"\nversion = \"5.0.0\"\ndependencies = [\n \
                \"json-patch 4.2.0\",\n]\n";
    assert_eq!(second_majors(root_manifest, lock), ["json-patch: {\"4\", \"5\"}"]);
    // Two majors of a crate the workspace does not name, pulled in by third-party crates alone, are left to them.
    assert!(second_majors("[workspace.dependencies]\nkube = \"5.0\"\n", lock).is_empty());

    let manifest = "[package]\nname = \"m\"\n\n[dependencies]\nkube = { workspace = true }\n# a comment\n\
                    rustix = { version = \"1.1\", features = [\"process\"] }\n\n[dev-dependencies.tempfile]\n\
                    version = \"3\"\n\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n\n[features]\nx = []\n";
    let outside = outside_the_table("m", manifest);
    assert_eq!(
        outside,
        [
            "m/Cargo.toml [dependencies] rustix = { version = \"1.1\", features = [\"process\"] }",
            "m/Cargo.toml [dev-dependencies] tempfile = version = \"3\"",
            "m/Cargo.toml [target.'cfg(unix)'.dependencies] libc = \"0.2\"",
        ]
    );
}

/// tokio's `test-util` (a clock the tests pause) is for tests: the Dockerfile's release build selects the two
/// operators alone, and for that selection Cargo resolves tokio without it (the feature comes only from
/// dev-dependencies and from e2e).
#[test]
fn the_operators_release_build_has_no_tokio_test_util() {
    let output = std::process::Command::new(env!("CARGO"))
        .current_dir(repo_root())
        .args(["tree", "--offline", "-q", "-e", "normal,build", "-i", "tokio", "--depth", "0", "-f", "{p} {f}"])
        .args(["-p", "gamedeployment-operator", "-p", "hook-operator"])
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree: {}", String::from_utf8_lossy(&output.stderr));
    let line = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(line.starts_with("tokio ") && line.contains("rt-multi-thread"), "tokio's features were read: {line}");
    assert!(!line.contains("test-util"), "tokio test-util is compiled into the operators' release build: {line}");
}

#[test]
fn a_major_is_the_semver_compatibility_class() {
    assert_eq!(major("1.54.1"), "1");
    assert_eq!(major("0.22.1"), "0.22");
    assert_eq!(major("0.0.3"), "0.0.3");
}

/// The lines of one `[section]` of a TOML file, up to the next section, comments and blank lines left out.
fn toml_section<'a>(text: &'a str, section: &str) -> Vec<&'a str> {
    let header = format!("[{section}]");
    text.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The profiles the benchmarks page measured (docs/src/benchmarks.md, "The release profile"): the image is built
/// with `dist`, fat LTO over one codegen unit on top of the release profile, and the release profile, which the
/// sandbox and the benchmarks build, is Cargo's default, stated.
#[test]
fn the_image_ships_the_dist_profile_and_the_release_profile_is_the_default() {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    assert_eq!(toml_section(&manifest, "profile.release"), ["lto = false", "codegen-units = 16"]);
    assert_eq!(
        toml_section(&manifest, "profile.dist"),
        ["inherits = \"release\"", "lto = \"fat\"", "codegen-units = 1"]
    );
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).expect("Dockerfile");
    assert!(dockerfile.contains("cargo build --profile dist --locked"), "the image is not built with dist");
    for binary in ["gamedeployment-operator", "hook-operator"] {
        let copied = format!("cp target/x86_64-unknown-linux-musl/dist/{binary} /{binary}");
        assert!(dockerfile.contains(&copied), "the image does not copy the dist build of {binary}");
    }
}
