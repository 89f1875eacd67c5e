//! Container logs (`GET pods/NAME/log`).
//!
//! The kubelet simulator writes what a simulated container would print about its life (started from an image,
//! ready, stopped for an in-place update or a deletion, crashed) into a per-container log, and the process runtime
//! writes what a real container process prints on stdout and stderr; the API server reads it back as a kubelet's
//! log endpoint would serve it. Each container keeps its current instance's log and the previous
//! instance's (`previous=true`), each capped at [`MAX_LINES`] lines (the oldest go first), and a pod's logs go when
//! the kubelet forgets the pod. A running process instance can be followed (`follow=true`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;

/// Lines kept per container instance.
pub(crate) const MAX_LINES: usize = 1000;
/// Longest line kept (what a process prints beyond it on one line is cut): with [`MAX_LINES`], this bounds what
/// one container instance's log can hold.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024;

#[derive(Debug, Default)]
struct Instance {
    lines: VecDeque<(Timestamp, String)>,
    ready_logged: bool,
    /// The instance started (a process may start without printing anything).
    begun: bool,
    /// A process instance still running: `follow=true` streams its new lines until it ends.
    live: bool,
    /// Lines ever pushed, so a follower knows which ones it has not sent yet.
    pushed: u64,
}

impl Instance {
    fn push(&mut self, at: Timestamp, line: String) {
        if self.lines.len() == MAX_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back((at, line));
        self.pushed += 1;
    }
}

#[derive(Debug, Default)]
struct ContainerLog {
    current: Instance,
    previous: Option<Instance>,
    /// Instances begun so far: a follower stops when a new one begins.
    generation: u64,
}

type Logs = HashMap<String, HashMap<String, ContainerLog>>;

/// The logs of every container of every pod the kubelet runs, by pod UID and container name.
#[derive(Debug, Default)]
pub(crate) struct PodLogs {
    pods: Mutex<Logs>,
    /// Bumped on every change, for followers.
    changes: tokio::sync::watch::Sender<u64>,
}

/// What a log request asks for (the `PodLogOptions` kube-sim honours).
#[derive(Clone, Debug, Default)]
pub(crate) struct LogOptions {
    pub previous: bool,
    pub timestamps: bool,
    pub tail_lines: Option<usize>,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<usize>,
}

impl PodLogs {
    fn with<R>(&self, f: impl FnOnce(&mut Logs) -> R) -> R {
        f(&mut self.pods.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// [`PodLogs::with`] for a change, which wakes the followers.
    fn write<R>(&self, f: impl FnOnce(&mut Logs) -> R) -> R {
        let result = self.with(f);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
        result
    }

    /// A new instance of the container started: the current log becomes the previous one.
    pub(crate) fn started(&self, pod_uid: &str, container: &str, at: Timestamp, line: String) {
        self.begin(pod_uid, container);
        self.line(pod_uid, container, at, line);
    }

    /// A new instance of the container started, with nothing printed yet.
    pub(crate) fn begin(&self, pod_uid: &str, container: &str) {
        self.begin_instance(pod_uid, container, false);
    }

    /// A process instance of the container started: `follow=true` streams it until [`PodLogs::end`].
    pub(crate) fn begin_live(&self, pod_uid: &str, container: &str) {
        self.begin_instance(pod_uid, container, true);
    }

    fn begin_instance(&self, pod_uid: &str, container: &str, live: bool) {
        self.write(|pods| {
            let log = pods.entry(pod_uid.to_string()).or_default().entry(container.to_string()).or_default();
            let mut old = std::mem::take(&mut log.current);
            old.live = false;
            if old.begun {
                log.previous = Some(old);
            }
            log.current.begun = true;
            log.current.live = live;
            log.generation += 1;
        });
    }

    /// The container's current process instance ended.
    pub(crate) fn end(&self, pod_uid: &str, container: &str) {
        self.write(|pods| {
            if let Some(log) = pods.get_mut(pod_uid).and_then(|p| p.get_mut(container)) {
                log.current.live = false;
            }
        });
    }

    /// A line of the container's current instance (ignored when it never started). Lines longer
    /// than [`MAX_LINE_BYTES`] are cut there.
    pub(crate) fn line(&self, pod_uid: &str, container: &str, at: Timestamp, mut line: String) {
        if line.len() > MAX_LINE_BYTES {
            let mut end = MAX_LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        self.write(|pods| {
            if let Some(log) = pods.get_mut(pod_uid).and_then(|p| p.get_mut(container))
                && log.current.begun
            {
                log.current.push(at, line);
            }
        });
    }

    /// The current instance's line saying it became ready, once per instance.
    pub(crate) fn ready(&self, pod_uid: &str, container: &str, at: Timestamp, line: impl FnOnce() -> String) {
        self.write(|pods| {
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
    pub(crate) fn remove_pod(&self, pod_uid: &str) {
        self.write(|pods| pods.remove(pod_uid));
    }

    /// The log text, or `None` when the container (or its previous instance) has no log.
    pub(crate) fn read(&self, pod_uid: &str, container: &str, opts: &LogOptions) -> Option<String> {
        self.with(|pods| {
            let log = pods.get(pod_uid)?.get(container)?;
            let instance = if opts.previous { log.previous.as_ref()? } else { &log.current };
            instance.begun.then(|| read_instance(instance, opts))
        })
    }

    /// `follow=true`: the log as [`PodLogs::read`] gives it, then each new line of the same instance as it comes,
    /// until the instance ends, the container restarts or the pod goes. `None` when the current instance is not a
    /// running process (then the log is read as it is).
    pub(crate) fn follow(
        self: &Arc<Self>,
        pod_uid: &str,
        container: &str,
        opts: &LogOptions,
    ) -> Option<impl futures::Stream<Item = String> + Send + 'static> {
        // Subscribed before reading, so no line pushed after the read is missed.
        let changes = self.changes.subscribe();
        let (head, generation, seen) = self.with(|pods| {
            let log = pods.get(pod_uid)?.get(container)?;
            let head = read_instance(&log.current, opts);
            log.current.live.then_some((head, log.generation, log.current.pushed))
        })?;
        let follower = Follower {
            logs: self.clone(),
            pod_uid: pod_uid.to_owned(),
            container: container.to_owned(),
            generation,
            seen,
            timestamps: opts.timestamps,
            changes,
            done: false,
        };
        let tail = futures::stream::unfold(follower, |mut follower| async move {
            if follower.done {
                return None;
            }
            loop {
                let (text, open) = follower.take_new();
                if !open {
                    follower.done = true;
                    return Some((text, follower));
                }
                if !text.is_empty() {
                    return Some((text, follower));
                }
                if follower.changes.changed().await.is_err() {
                    return None;
                }
            }
        });
        Some(futures::stream::once(std::future::ready(head)).chain(tail))
    }
}

/// One line as the log endpoint sends it.
fn format_line(at: Timestamp, line: &str, timestamps: bool) -> String {
    if timestamps {
        // The kubelet's fixed nine-digit RFC 3339 form.
        let seconds = at.strftime("%Y-%m-%dT%H:%M:%S");
        format!("{seconds}.{:09}Z {line}\n", at.subsec_nanosecond())
    } else {
        format!("{line}\n")
    }
}

/// An instance's lines as a log request selects them.
fn read_instance(instance: &Instance, opts: &LogOptions) -> String {
    let since = |l: &&(Timestamp, String)| opts.since.is_none_or(|s| l.0 >= s);
    let selected: Vec<&(Timestamp, String)> = instance.lines.iter().filter(since).collect();
    let skip = opts.tail_lines.map_or(0, |n| selected.len().saturating_sub(n));
    let mut out = String::new();
    for (at, line) in &selected[skip..] {
        out.push_str(&format_line(*at, line, opts.timestamps));
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
    out
}

/// A `follow=true` request waiting for new lines of one container instance.
struct Follower {
    logs: Arc<PodLogs>,
    pod_uid: String,
    container: String,
    generation: u64,
    seen: u64,
    timestamps: bool,
    changes: tokio::sync::watch::Receiver<u64>,
    done: bool,
}

impl Follower {
    /// The lines pushed since the last call, and whether more may come.
    fn take_new(&mut self) -> (String, bool) {
        let (pod_uid, container, generation, timestamps) =
            (&self.pod_uid, &self.container, self.generation, self.timestamps);
        let seen = &mut self.seen;
        self.logs.with(|pods| {
            let log = pods.get(pod_uid).and_then(|p| p.get(container));
            let Some(log) = log.filter(|log| log.generation == generation) else {
                return (String::new(), false);
            };
            let instance = &log.current;
            let new = instance.pushed.saturating_sub(*seen).min(instance.lines.len() as u64) as usize;
            *seen = instance.pushed;
            let skip = instance.lines.len() - new;
            let text = instance.lines.iter().skip(skip).map(|(at, line)| format_line(*at, line, timestamps)).collect();
            (text, instance.live)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_live_instance_is_followed_until_it_ends() {
        let logs = Arc::new(PodLogs::default());
        let t = Timestamp::from_second(1_700_000_000).unwrap();
        logs.started("u", "sim", t, "simulated".into());
        assert!(logs.follow("u", "sim", &LogOptions::default()).is_none(), "a simulated instance is read as it is");
        logs.begin_live("u", "c");
        logs.line("u", "c", t, "one".into());
        let stream = logs.follow("u", "c", &LogOptions::default()).unwrap();
        logs.line("u", "c", t, "two".into());
        let writer = logs.clone();
        let collected = tokio::spawn(async move { stream.collect::<Vec<String>>().await.concat() });
        tokio::task::yield_now().await;
        writer.line("u", "c", t, "three".into());
        writer.end("u", "c");
        let text = tokio::time::timeout(std::time::Duration::from_secs(10), collected).await.unwrap().unwrap();
        assert_eq!(text, "one\ntwo\nthree\n");
    }

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
