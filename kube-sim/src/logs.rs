//! Container logs (`GET pods/NAME/log`).
//!
//! The kubelet simulator writes what a simulated container would print about its life (started from an image,
//! ready, stopped for an in-place update or a deletion, crashed) into a per-container log, and the process runtime
//! writes what a real container process prints on stdout and stderr; the API server reads it back as a kubelet's
//! log endpoint would serve it. Each container keeps its current instance's log and the previous
//! instance's (`previous=true`), each capped at [`MAX_LINES`] lines (the oldest go first), and a pod's logs go when
//! the kubelet forgets the pod.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;

/// Lines kept per container instance.
pub const MAX_LINES: usize = 1000;
/// Longest line kept (what a process prints beyond it on one line is cut): with [`MAX_LINES`], this bounds what
/// one container instance's log can hold.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

#[derive(Debug, Default)]
struct Instance {
    lines: VecDeque<(Timestamp, String)>,
    ready_logged: bool,
    /// The instance started (a process may start without printing anything).
    begun: bool,
}

impl Instance {
    fn push(&mut self, at: Timestamp, line: String) {
        if self.lines.len() == MAX_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back((at, line));
    }
}

#[derive(Debug, Default)]
struct ContainerLog {
    current: Instance,
    previous: Option<Instance>,
}

/// The logs of every container of every pod the kubelet runs, by pod UID and container name.
#[derive(Debug, Default)]
pub struct PodLogs {
    pods: Mutex<HashMap<String, HashMap<String, ContainerLog>>>,
}

/// What a log request asks for (the `PodLogOptions` kube-sim honours).
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<usize>,
}

impl PodLogs {
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<String, HashMap<String, ContainerLog>>) -> R) -> R {
        f(&mut self.pods.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A new instance of the container started: the current log becomes the previous one.
    pub fn started(&self, pod_uid: &str, container: &str, at: Timestamp, line: String) {
        self.begin(pod_uid, container);
        self.line(pod_uid, container, at, line);
    }

    /// A new instance of the container started, with nothing printed yet.
    pub fn begin(&self, pod_uid: &str, container: &str) {
        self.with(|pods| {
            let log = pods.entry(pod_uid.to_string()).or_default().entry(container.to_string()).or_default();
            let old = std::mem::take(&mut log.current);
            if old.begun {
                log.previous = Some(old);
            }
            log.current.begun = true;
        });
    }

    /// A line of the container's current instance (ignored when it never started). Lines longer
    /// than [`MAX_LINE_BYTES`] are cut there.
    pub fn line(&self, pod_uid: &str, container: &str, at: Timestamp, mut line: String) {
        if line.len() > MAX_LINE_BYTES {
            let mut end = MAX_LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        self.with(|pods| {
            if let Some(log) = pods.get_mut(pod_uid).and_then(|p| p.get_mut(container))
                && log.current.begun
            {
                log.current.push(at, line);
            }
        });
    }

    /// The current instance's line saying it became ready, once per instance.
    pub fn ready(&self, pod_uid: &str, container: &str, at: Timestamp, line: impl FnOnce() -> String) {
        self.with(|pods| {
            if let Some(log) = pods.get_mut(pod_uid).and_then(|p| p.get_mut(container))
                && log.current.begun
                && !log.current.ready_logged
            {
                log.current.ready_logged = true;
                log.current.push(at, line());
            }
        });
    }

    /// Forgets a pod's logs.
    pub fn remove_pod(&self, pod_uid: &str) {
        self.with(|pods| pods.remove(pod_uid));
    }

    /// The log text, or `None` when the container (or its previous instance) has no log.
    pub fn read(&self, pod_uid: &str, container: &str, opts: &LogOptions) -> Option<String> {
        self.with(|pods| {
            let log = pods.get(pod_uid)?.get(container)?;
            let instance = if opts.previous { log.previous.as_ref()? } else { &log.current };
            if !instance.begun {
                return None;
            }
            let since = |l: &&(Timestamp, String)| opts.since.is_none_or(|s| l.0 >= s);
            let selected: Vec<&(Timestamp, String)> = instance.lines.iter().filter(since).collect();
            let skip = opts.tail_lines.map_or(0, |n| selected.len().saturating_sub(n));
            let mut out = String::new();
            for (at, line) in &selected[skip..] {
                if opts.timestamps {
                    // The kubelet's fixed nine-digit RFC 3339 form.
                    let seconds = at.strftime("%Y-%m-%dT%H:%M:%S");
                    out.push_str(&format!("{seconds}.{:09}Z ", at.subsec_nanosecond()));
                }
                out.push_str(line);
                out.push('\n');
            }
            if let Some(limit) = opts.limit_bytes
                && out.len() > limit
            {
                let mut end = limit;
                while !out.is_char_boundary(end) {
                    end -= 1;
                }
                out.truncate(end);
            }
            Some(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_rotate_lines_are_capped_and_options_apply() {
        let logs = PodLogs::default();
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        logs.line("u", "c", t, "before start".into());
        assert!(logs.read("u", "c", &LogOptions::default()).is_none());
        logs.started("u", "c", t, "one".into());
        logs.ready("u", "c", t, || "ready".into());
        logs.ready("u", "c", t, || "ready again".into());
        assert_eq!(logs.read("u", "c", &LogOptions::default()).as_deref(), Some("one\nready\n"));
        assert!(logs.read("u", "c", &LogOptions { previous: true, ..Default::default() }).is_none());
        logs.started("u", "c", t, "two".into());
        for i in 0..MAX_LINES + 5 {
            logs.line("u", "c", t, format!("l{i}"));
        }
        let previous = logs.read("u", "c", &LogOptions { previous: true, ..Default::default() });
        assert_eq!(previous.as_deref(), Some("one\nready\n"));
        let current = logs.read("u", "c", &LogOptions::default()).unwrap_or_default();
        assert_eq!(current.lines().count(), MAX_LINES);
        assert!(current.starts_with("l5\n"), "the oldest lines go first: {current:.20}");
        let tail = logs.read("u", "c", &LogOptions { tail_lines: Some(1), timestamps: true, ..Default::default() });
        assert_eq!(tail.as_deref(), Some(format!("2023-11-14T22:13:20.000000000Z l{}\n", MAX_LINES + 4).as_str()));
        let limited = logs.read("u", "c", &LogOptions { limit_bytes: Some(3), ..Default::default() });
        assert_eq!(limited.as_deref(), Some("l5\n"));
        logs.remove_pod("u");
        assert!(logs.read("u", "c", &LogOptions::default()).is_none());
    }
}
