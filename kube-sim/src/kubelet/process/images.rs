//! Which images run as real processes, and which program a container of such an image runs.
//!
//! kube-sim has no container engine and no images: an image is *mapped* to something on this
//! host. A mapping to a **directory** makes it the image's program directory: the container's
//! `command[0]` (an absolute path like `/gamedeployment-operator` or a name like `sh`) is looked
//! up by its file name in it, so one image carrying several binaries (the chart's image) maps to
//! `target/debug`. A mapping to a **file** makes it the program the image runs whatever its
//! `command[0]` names (`python` → the host's `python3`), and its entrypoint when the container
//! has no `command`. Images mapped to nothing keep the simulated containers.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::super::image::repository;

/// One `IMAGE=PATH` rule (`--image-map`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRule {
    /// An image reference: with a tag or digest it matches that exact reference; without, every
    /// tag of the repository, and a bare name (`busybox`) also the `docker.io/library/` form.
    pub image: String,
    pub path: PathBuf,
}

impl FromStr for ImageRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (image, path) =
            text.split_once('=').ok_or_else(|| format!("{text:?} is not IMAGE=PATH (e.g. busybox=/usr/bin)"))?;
        if image.is_empty() || path.is_empty() {
            return Err(format!("{text:?}: both the image and the path are needed"));
        }
        Ok(Self { image: image.to_owned(), path: PathBuf::from(path) })
    }
}

/// The image mappings, first match wins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ImageMap {
    rules: Vec<ImageRule>,
}

/// What a container's process is: the program to execute and its `argv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Program {
    pub executable: PathBuf,
    /// `argv`, `argv[0]` being the name the container gave its program.
    pub argv: Vec<String>,
}

impl ImageMap {
    pub(crate) fn new(rules: Vec<ImageRule>) -> Self {
        Self { rules }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The mapped path of `image`, if it runs as a process.
    pub(crate) fn lookup(&self, image: &str) -> Option<&Path> {
        let repo = normalize(repository(image));
        let exact = normalize(image);
        self.rules
            .iter()
            .find(|rule| {
                let key = normalize(&rule.image);
                if key != repository(&key) { key == exact } else { key == repo }
            })
            .map(|rule| rule.path.as_path())
    }

    /// The program a container of a mapped image runs: `command` (or the mapped file as the
    /// entrypoint) followed by `args`. `Err` says why it cannot start, as the runtime's
    /// `StartError` would.
    pub(crate) fn program(&self, image: &str, command: &[String], args: &[String]) -> Result<Program, String> {
        let mapped = self.lookup(image).ok_or_else(|| format!("image {image:?} is not mapped to a program"))?;
        let argv: Vec<String> = command.iter().chain(args).cloned().collect();
        if mapped.is_dir() {
            let Some(name) = command.first() else {
                return Err(format!(
                    "image {image:?} is mapped to the directory {} and has no known entrypoint: give the container a command",
                    mapped.display()
                ));
            };
            let file = Path::new(name).file_name().map(|f| mapped.join(f));
            return match file.filter(|f| f.is_file()) {
                Some(executable) => Ok(Program { executable, argv }),
                None => Err(format!(
                    "exec: {name:?}: executable file not found in {} (the program directory of image {image:?})",
                    mapped.display()
                )),
            };
        }
        if !mapped.is_file() {
            return Err(format!("image {image:?} is mapped to {}, which does not exist", mapped.display()));
        }
        let argv = if command.is_empty() {
            std::iter::once(mapped.display().to_string()).chain(args.iter().cloned()).collect()
        } else {
            argv
        };
        Ok(Program { executable: mapped.to_path_buf(), argv })
    }
}

/// `docker.io/library/busybox` and `busybox` name the same image.
fn normalize(image: &str) -> String {
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    image.strip_prefix("library/").unwrap_or(image).to_owned()
}

/// The common images mapped to what this host has (`--host-images`): `busybox` and `alpine`
/// run the host's shell tools, `python` the host's Python 3.
pub(crate) fn host_rules() -> Vec<ImageRule> {
    let mut rules = Vec::new();
    let bin = ["/usr/bin", "/bin"].into_iter().map(PathBuf::from).find(|dir| dir.join("sh").is_file());
    if let Some(bin) = bin {
        for image in ["busybox", "alpine"] {
            rules.push(ImageRule { image: image.into(), path: bin.clone() });
        }
    }
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"].into_iter().map(PathBuf::from).find(|p| p.is_file());
    if let Some(python) = python {
        rules.push(ImageRule { image: "python".into(), path: python });
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rules_match_repositories_and_exact_references() {
        let map = ImageMap::new(vec![
            "busybox=/usr/bin".parse().unwrap(),
            "ghcr.io/x/ops:v2=/opt/v2".parse().unwrap(),
            "ghcr.io/x/ops=/opt/any".parse().unwrap(),
        ]);
        assert_eq!(map.lookup("busybox"), Some(Path::new("/usr/bin")));
        assert_eq!(map.lookup("busybox:1.36"), Some(Path::new("/usr/bin")));
        assert_eq!(map.lookup("docker.io/library/busybox:1.36"), Some(Path::new("/usr/bin")));
        assert_eq!(map.lookup("ghcr.io/x/ops:v2"), Some(Path::new("/opt/v2")));
        assert_eq!(map.lookup("ghcr.io/x/ops:v1"), Some(Path::new("/opt/any")));
        assert_eq!(map.lookup("ghcr.io/y/busybox"), None, "only the same repository matches");
        assert_eq!(map.lookup("python:3.5"), None);
        assert!("busybox".parse::<ImageRule>().is_err());
    }

    #[test]
    fn directories_resolve_command_names_and_files_replace_them() {
        let dir = std::env::temp_dir().join(format!("kube-sim-images-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("operator"), "").unwrap();
        let map = ImageMap::new(vec![
            ImageRule { image: "ops".into(), path: dir.clone() },
            ImageRule { image: "tool".into(), path: dir.join("operator") },
        ]);
        let program = map.program("ops:1", &strings(&["/operator"]), &strings(&["--flag"])).unwrap();
        assert_eq!(program, Program { executable: dir.join("operator"), argv: strings(&["/operator", "--flag"]) });
        assert!(map.program("ops:1", &strings(&["/missing"]), &[]).unwrap_err().contains("not found"));
        assert!(map.program("ops:1", &[], &[]).unwrap_err().contains("entrypoint"));
        let program = map.program("tool", &strings(&["python", "-m"]), &strings(&["x"])).unwrap();
        assert_eq!(program.executable, dir.join("operator"));
        assert_eq!(program.argv, strings(&["python", "-m", "x"]));
        let program = map.program("tool", &[], &strings(&["a"])).unwrap();
        assert_eq!(program.argv[1..], strings(&["a"]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
