//! Starting a container's process (and the commands run inside it: exec probes, `preStop`
//! hooks) the way a container runtime would, with what a plain process on this host can have:
//!
//! - its own session and process group, so a stop signals everything it started;
//! - `PR_SET_PDEATHSIG`, so it dies with kube-sim even when kube-sim is killed outright;
//! - when it mounts volumes, its own mount namespace in which each volume directory is
//!   bind-mounted at its `mountPath` (read-only when the mount says so), so the program reads
//!   `/etc/app/keys` or `/var/run/secrets/kubernetes.io/serviceaccount/token` where the pod spec
//!   put them while other pods see their own files there;
//! - the container's working directory (inside those mounts), environment and `argv`.
//!
//! Everything the child does between `fork` and `exec` is a plain system call on data prepared
//! before the fork (no allocation), as `pre_exec` requires.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::mount::MsFlags;
use nix::sched::CloneFlags;

use super::images::Program;

/// A volume directory (or file) of the pod made visible at `target` inside the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// Everything needed to start one process of a container.
#[derive(Clone, Debug)]
pub(super) struct Launch {
    pub program: Program,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    pub mounts: Vec<Mount>,
}

/// Where a command runs: a new container (own mount namespace when it has mounts), or inside
/// the mount namespace of a running container's process.
pub(super) enum Namespace {
    New,
    Join(OwnedFd),
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

/// The command for `launch`, stdout and stderr piped, stdin closed.
pub(super) fn command(launch: &Launch, namespace: Namespace) -> std::io::Result<tokio::process::Command> {
    let mut command = tokio::process::Command::new(&launch.program.executable);
    if let Some((arg0, args)) = launch.program.argv.split_first() {
        command.arg0(arg0).args(args);
    }
    command.env_clear().envs(launch.env.iter().map(|(k, v)| (k, v)));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mounts: Vec<(CString, CString, bool)> = match namespace {
        Namespace::New => launch
            .mounts
            .iter()
            .map(|m| Ok((c_path(&m.source)?, c_path(&m.target)?, m.read_only)))
            .collect::<std::io::Result<_>>()?,
        Namespace::Join(_) => Vec::new(),
    };
    let join = match namespace {
        Namespace::Join(fd) => Some(fd),
        Namespace::New => None,
    };
    let working_dir = launch.working_dir.as_deref().map(c_path).transpose()?;
    let root = c_path(Path::new("/"))?;
    // SAFETY: the closure runs in the child between fork and exec; it only makes system calls on
    // data owned by the closure (prepared above), allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGKILL))?;
            if let Some(fd) = &join {
                nix::sched::setns(fd.as_fd(), CloneFlags::CLONE_NEWNS)?;
            } else if !mounts.is_empty() {
                nix::sched::unshare(CloneFlags::CLONE_NEWNS)?;
                // Nothing mounted here propagates back to the host.
                nix::mount::mount(
                    None::<&std::ffi::CStr>,
                    root.as_c_str(),
                    None::<&std::ffi::CStr>,
                    MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                    None::<&std::ffi::CStr>,
                )?;
                for (source, target, read_only) in &mounts {
                    let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
                    nix::mount::mount(
                        Some(source.as_c_str()),
                        target.as_c_str(),
                        None::<&std::ffi::CStr>,
                        bind,
                        None::<&std::ffi::CStr>,
                    )?;
                    if *read_only {
                        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
                        nix::mount::mount(
                            None::<&std::ffi::CStr>,
                            target.as_c_str(),
                            None::<&std::ffi::CStr>,
                            flags,
                            None::<&std::ffi::CStr>,
                        )?;
                    }
                }
            }
            if let Some(dir) = &working_dir {
                nix::unistd::chdir(dir.as_c_str())?;
            }
            Ok(())
        });
    }
    Ok(command)
}

/// The mount namespace of a running process, to run commands inside its container.
pub(super) fn mount_namespace_of(pid: u32) -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open(format!("/proc/{pid}/ns/mnt"))?.into())
}

/// Sends `signal` to the process group `pgid` (the container's process and its children);
/// a group that is already gone is no error.
pub(super) fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) {
    let Ok(pid) = i32::try_from(pgid) else { return };
    match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pgid, %signal, error = %e, "signalling a container's process group failed"),
    }
}

/// Kills the process group when dropped: a container's processes never outlive its supervisor
/// (nor kube-sim, with `PR_SET_PDEATHSIG` on the leader).
#[derive(Debug)]
pub(super) struct GroupGuard(pub u32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Finds an exec command's program: `command[0]` by file name in the image's program directory
/// (when it is mapped to one), else on the container's `PATH` (absolute paths as they are).
pub(super) fn resolve_exec(name: &str, image_dir: Option<&Path>, path_env: &str) -> Option<PathBuf> {
    let file = Path::new(name).file_name()?;
    if let Some(found) = image_dir.map(|dir| dir.join(file)).filter(|p| p.is_file()) {
        return Some(found);
    }
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    path_env.split(':').map(|dir| Path::new(dir).join(name)).find(|p| p.is_file())
}
