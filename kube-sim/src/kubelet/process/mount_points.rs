//! Mount points a container needs and this host lacks.
//!
//! A bind mount needs an existing target, and a mount namespace shares the host's file system, so a
//! `mountPath` missing on the host (`/etc/settings`, `/data`) has to be created on the host to mount onto. What
//! kube-sim creates for that it also removes: each mount point it made is counted per container instance that
//! uses it (two replicas of one Deployment share `/etc/settings`), and when the last of them ends the mount point
//! and the parent directories created with it are removed again, if they are still as kube-sim left them (an
//! empty directory, an empty file). Paths that existed before are never touched.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use super::spawn::Mount;

/// What kube-sim created for one mount point: the target, and the highest directory it had to create for it
/// (the target itself when only the target was missing).
#[derive(Clone, Debug)]
struct Created {
    top: PathBuf,
    is_file: bool,
    users: usize,
}

/// Every mount point kube-sim created on this host, by target (one host, so one table per process).
static CREATED: LazyLock<Mutex<HashMap<PathBuf, Created>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// The mount points one container instance uses that kube-sim created; dropping it removes those no other
/// instance still uses.
#[derive(Debug, Default)]
#[must_use = "the mount points are removed when this is dropped"]
pub(super) struct MountPoints {
    targets: Vec<PathBuf>,
}

/// Creates the mount points `mounts` lack (an empty directory, or an empty file for a file mounted through
/// `subPath`) and counts this instance as a user of every mount point kube-sim made for them.
pub(super) fn acquire(mounts: &[Mount]) -> std::io::Result<MountPoints> {
    let mut table = CREATED.lock().unwrap_or_else(|p| p.into_inner());
    let mut held = MountPoints::default();
    for mount in mounts {
        if let Some(c) = table.get_mut(&mount.target) {
            c.users += 1;
            held.targets.push(mount.target.clone());
            continue;
        }
        if mount.target.exists() {
            continue;
        }
        let top = highest_missing(&mount.target);
        let is_file = !mount.source.is_dir();
        let made = if is_file {
            mount
                .target
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(&mount.target).map(drop))
        } else {
            std::fs::create_dir_all(&mount.target)
        };
        if let Err(e) = made {
            remove(&mount.target, &top, is_file);
            drop(table);
            drop(held);
            return Err(e);
        }
        table.insert(mount.target.clone(), Created { top, is_file, users: 1 });
        held.targets.push(mount.target.clone());
    }
    Ok(held)
}

impl Drop for MountPoints {
    fn drop(&mut self) {
        let mut table = CREATED.lock().unwrap_or_else(|p| p.into_inner());
        for target in self.targets.drain(..) {
            let Some(c) = table.get_mut(&target) else { continue };
            c.users = c.users.saturating_sub(1);
            if c.users == 0 {
                let c = c.clone();
                table.remove(&target);
                remove(&target, &c.top, c.is_file);
            }
        }
    }
}

/// The highest ancestor of `path` (or `path` itself) that does not exist.
fn highest_missing(path: &Path) -> PathBuf {
    let mut top = path.to_path_buf();
    while let Some(parent) = top.parent() {
        if parent.as_os_str().is_empty() || parent.exists() {
            break;
        }
        top = parent.to_path_buf();
    }
    top
}

/// Removes `target` and its parents up to `top`, each only if it is still empty; stops at the first that is not
/// (someone else put something there).
fn remove(target: &Path, top: &Path, is_file: bool) {
    if is_file {
        let empty = std::fs::symlink_metadata(target).is_ok_and(|m| m.is_file() && m.len() == 0);
        if !empty || std::fs::remove_file(target).is_err() {
            return;
        }
    } else if std::fs::remove_dir(target).is_err() {
        return;
    }
    if target == top {
        return;
    }
    let mut dir = target.parent();
    while let Some(d) = dir {
        if std::fs::remove_dir(d).is_err() || d == top {
            return;
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kube-sim-mount-points-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    }

    fn mount(source: &Path, target: PathBuf) -> Mount {
        Mount { source: source.to_path_buf(), target, read_only: false }
    }

    #[test]
    fn a_created_mount_point_lives_while_a_container_uses_it() {
        let root = scratch("shared");
        let volume = root.join("volume");
        std::fs::create_dir_all(&volume).expect("volume");
        let target = root.join("etc").join("settings");
        let first = acquire(&[mount(&volume, target.clone())]).expect("first container");
        assert!(target.is_dir());
        let second = acquire(&[mount(&volume, target.clone())]).expect("second container");
        drop(first);
        assert!(target.is_dir(), "the second container still mounts it");
        drop(second);
        assert!(!root.join("etc").exists(), "the mount point and the parent created with it are gone");
        assert!(root.exists());
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn what_existed_or_changed_is_left_alone() {
        let root = scratch("kept");
        let volume = root.join("volume");
        std::fs::create_dir_all(&volume).expect("volume");
        let existing = root.join("existing");
        std::fs::create_dir_all(&existing).expect("existing");
        let file = volume.join("key");
        std::fs::write(&file, "k").expect("file");
        let made_dir = root.join("made");
        let made_file = root.join("conf").join("key");
        let held = acquire(&[
            mount(&volume, existing.clone()),
            mount(&volume, made_dir.clone()),
            mount(&file, made_file.clone()),
        ])
        .expect("mount points");
        assert!(made_dir.is_dir() && made_file.is_file());
        // Someone writes into a created directory while the container runs.
        std::fs::write(made_dir.join("note"), "mine").expect("note");
        drop(held);
        assert!(existing.is_dir(), "a path that existed before is never removed");
        assert!(made_dir.join("note").exists(), "a directory that is no longer empty is kept");
        assert!(!root.join("conf").exists(), "the empty file and its created parent are removed");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
