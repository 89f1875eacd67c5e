//! Per-pod behaviour chosen by annotations on the pod (or on the pod template of the workload that
//! creates it), so tests and sandbox users can stage slow starts, pods that never become ready,
//! crash loops and hook endpoints without container images.
//!
//! Annotations are re-read on every sync: changing one on a live pod (`kubectl annotate`) takes
//! effect at once, which is how a test "fixes" a failing hook endpoint mid-story.

use std::collections::BTreeMap;
use std::time::Duration;

use super::duration::parse_duration;

/// Duration from container start to ready (overrides `--ready-delay`).
pub(crate) const READY_AFTER: &str = "kube-sim.kourse.dev/ready-after";
/// `"true"` (every container) or a comma-separated list of container names that never become ready.
pub(crate) const NEVER_READY: &str = "kube-sim.kourse.dev/never-ready";
/// `"true"` or container names: those containers exit with code 1 after `exit-after` (default 1 s)
/// and are restarted with crash-loop back-off.
pub(crate) const CRASH_LOOP: &str = "kube-sim.kourse.dev/crash-loop";
/// Duration after which the containers (the crash-loop ones, or every container when
/// `crash-loop` is absent) exit.
pub(crate) const EXIT_AFTER: &str = "kube-sim.kourse.dev/exit-after";
/// Exit code used with `exit-after` (default 0, or 1 for crash-loop containers).
pub(crate) const EXIT_CODE: &str = "kube-sim.kourse.dev/exit-code";
/// Comma-separated ports on which the pod serves `http-body` on its pod IP.
pub(crate) const HTTP_PORT: &str = "kube-sim.kourse.dev/http-port";
/// HTTP status code of that endpoint (default 200).
pub(crate) const HTTP_STATUS: &str = "kube-sim.kourse.dev/http-status";
/// Response body of that endpoint (default `{}`).
pub(crate) const HTTP_BODY: &str = "kube-sim.kourse.dev/http-body";
/// `Content-Type` of that endpoint (default `application/json`).
pub(crate) const HTTP_CONTENT_TYPE: &str = "kube-sim.kourse.dev/http-content-type";
/// Delay before the endpoint answers, to stage slow or hanging hooks.
pub(crate) const HTTP_DELAY: &str = "kube-sim.kourse.dev/http-delay";
/// BCS hot-patch marker: with it, an image change swaps the image without restarting the
/// container (what BCS's patched kubelet does for `HotPatchUpdate`).
pub(crate) const HOT_PATCH: &str = "io.kubernetes.hotpatch.container";

const DEFAULT_CRASH_AFTER: Duration = Duration::from_secs(1);
/// Containers exiting sooner would spin the state machine without time passing.
const MIN_EXIT_AFTER: Duration = Duration::from_millis(10);

/// Which containers an annotation applies to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Selection {
    #[default]
    None,
    All,
    Names(Vec<String>),
}

impl Selection {
    fn parse(value: &str) -> Self {
        match value.trim() {
            "" | "false" => Self::None,
            "true" | "*" => Self::All,
            names => Self::Names(
                names.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_owned).collect(),
            ),
        }
    }

    fn contains(&self, container: &str) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Names(names) => names.iter().any(|name| name == container),
        }
    }
}

/// The behaviour a pod's annotations ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PodBehaviour {
    ready_after: Option<Duration>,
    never_ready: Selection,
    crash_loop: Selection,
    exit_after: Option<Duration>,
    exit_code: Option<i32>,
    /// HTTP endpoint from annotations, if any.
    pub http: Option<HttpBehaviour>,
    /// Whether image changes are applied without restarting containers.
    pub hot_patch: bool,
}

/// What one container does, derived from the pod's behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ContainerBehaviour {
    /// Time from start to ready; `None` = never ready.
    pub ready_after: Option<Duration>,
    /// Time from start to exit and the exit code; `None` = runs until stopped.
    pub exit: Option<(Duration, i32)>,
}

/// An HTTP endpoint served on the pod IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HttpBehaviour {
    pub ports: Vec<u16>,
    pub status: u16,
    pub body: String,
    pub content_type: String,
    pub delay: Duration,
}

impl PodBehaviour {
    /// Reads the annotations; malformed values are ignored and reported as problems (a kubelet
    /// cannot reject a pod, so the best it can do is say what it did not understand).
    pub(crate) fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> (Self, Vec<String>) {
        let mut behaviour = Self::default();
        let mut problems = Vec::new();
        let Some(annotations) = annotations else {
            return (behaviour, problems);
        };
        let get = |key: &str| annotations.get(key).map(String::as_str);
        let mut duration = |key: &str| {
            let value = get(key)?;
            parse_duration(value).map_err(|e| problems.push(format!("annotation {key}: {e}"))).ok()
        };
        behaviour.ready_after = duration(READY_AFTER);
        behaviour.exit_after = duration(EXIT_AFTER);
        let http_delay = duration(HTTP_DELAY);
        behaviour.never_ready = get(NEVER_READY).map(Selection::parse).unwrap_or_default();
        behaviour.crash_loop = get(CRASH_LOOP).map(Selection::parse).unwrap_or_default();
        behaviour.hot_patch = get(HOT_PATCH) == Some("true");
        if let Some(value) = get(EXIT_CODE) {
            match value.trim().parse::<i32>() {
                Ok(code) => behaviour.exit_code = Some(code),
                Err(e) => problems.push(format!("annotation {EXIT_CODE}: {value:?}: {e}")),
            }
        }
        if let Some(value) = get(HTTP_PORT) {
            let mut ports = Vec::new();
            for item in value.split(',').map(str::trim).filter(|item| !item.is_empty()) {
                match item.parse::<u16>() {
                    Ok(port) if port != 0 => ports.push(port),
                    _ => problems.push(format!("annotation {HTTP_PORT}: {item:?} is not a port")),
                }
            }
            let status = match get(HTTP_STATUS).map(|s| (s, s.trim().parse::<u16>())) {
                None => 200,
                Some((_, Ok(code))) if (100..=599).contains(&code) => code,
                Some((raw, _)) => {
                    problems.push(format!("annotation {HTTP_STATUS}: {raw:?} is not an HTTP status"));
                    200
                }
            };
            if !ports.is_empty() {
                behaviour.http = Some(HttpBehaviour {
                    ports,
                    status,
                    body: get(HTTP_BODY).unwrap_or("{}").to_owned(),
                    content_type: get(HTTP_CONTENT_TYPE).unwrap_or("application/json").to_owned(),
                    delay: http_delay.unwrap_or_default(),
                });
            }
        }
        (behaviour, problems)
    }

    /// What the container called `name` does, with `default_ready_after` from the configuration.
    pub(crate) fn container(&self, name: &str, default_ready_after: Duration) -> ContainerBehaviour {
        let ready_after = (!self.never_ready.contains(name)).then(|| self.ready_after.unwrap_or(default_ready_after));
        let exit = if self.crash_loop.contains(name) {
            let after = self.exit_after.unwrap_or(DEFAULT_CRASH_AFTER);
            Some((after, self.exit_code.unwrap_or(1)))
        } else if self.crash_loop == Selection::None {
            self.exit_after.map(|after| (after, self.exit_code.unwrap_or(0)))
        } else {
            None
        };
        ContainerBehaviour { ready_after, exit: exit.map(|(after, code)| (after.max(MIN_EXIT_AFTER), code)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    const DEFAULT: Duration = Duration::from_millis(300);

    #[test]
    fn no_annotations_means_default_behaviour() {
        let (behaviour, problems) = PodBehaviour::from_annotations(None);
        assert!(problems.is_empty());
        assert_eq!(behaviour.container("app", DEFAULT), ContainerBehaviour { ready_after: Some(DEFAULT), exit: None });
        assert_eq!(behaviour.http, None);
        assert!(!behaviour.hot_patch);
    }

    #[test]
    fn readiness_annotations() {
        let map = annotations(&[(READY_AFTER, "5s"), (NEVER_READY, "sidecar, other")]);
        let (behaviour, problems) = PodBehaviour::from_annotations(Some(&map));
        assert!(problems.is_empty());
        assert_eq!(behaviour.container("app", DEFAULT).ready_after, Some(Duration::from_secs(5)));
        assert_eq!(behaviour.container("sidecar", DEFAULT).ready_after, None);
        assert_eq!(behaviour.container("other", DEFAULT).ready_after, None);

        let map = annotations(&[(NEVER_READY, "true")]);
        let (behaviour, _) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(behaviour.container("anything", DEFAULT).ready_after, None);
    }

    #[test]
    fn crash_loop_and_exit() {
        let map = annotations(&[(CRASH_LOOP, "true")]);
        let (behaviour, _) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(behaviour.container("app", DEFAULT).exit, Some((DEFAULT_CRASH_AFTER, 1)));

        let map = annotations(&[(CRASH_LOOP, "bad"), (EXIT_AFTER, "200ms")]);
        let (behaviour, _) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(behaviour.container("bad", DEFAULT).exit, Some((Duration::from_millis(200), 1)));
        assert_eq!(behaviour.container("good", DEFAULT).exit, None);

        let map = annotations(&[(EXIT_AFTER, "2s"), (EXIT_CODE, "3")]);
        let (behaviour, _) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(behaviour.container("job", DEFAULT).exit, Some((Duration::from_secs(2), 3)));

        let map = annotations(&[(EXIT_AFTER, "0s")]);
        let (behaviour, _) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(behaviour.container("job", DEFAULT).exit, Some((MIN_EXIT_AFTER, 0)));
    }

    #[test]
    fn http_endpoint() {
        let map = annotations(&[
            (HTTP_PORT, "9091, 9092"),
            (HTTP_STATUS, "503"),
            (HTTP_BODY, r#"{"age": 20}"#),
            (HTTP_DELAY, "1s"),
        ]);
        let (behaviour, problems) = PodBehaviour::from_annotations(Some(&map));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            behaviour.http,
            Some(HttpBehaviour {
                ports: vec![9091, 9092],
                status: 503,
                body: r#"{"age": 20}"#.into(),
                content_type: "application/json".into(),
                delay: Duration::from_secs(1),
            })
        );
    }

    #[test]
    fn malformed_values_are_reported_not_fatal() {
        let map = annotations(&[
            (READY_AFTER, "soon"),
            (EXIT_CODE, "x"),
            (HTTP_PORT, "9091,notaport,0"),
            (HTTP_STATUS, "42"),
        ]);
        let (behaviour, problems) = PodBehaviour::from_annotations(Some(&map));
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert_eq!(behaviour.container("app", DEFAULT).ready_after, Some(DEFAULT));
        let http = behaviour.http.unwrap();
        assert_eq!(http.ports, vec![9091]);
        assert_eq!(http.status, 200);
    }

    #[test]
    fn hot_patch_marker() {
        let map = annotations(&[(HOT_PATCH, "true")]);
        assert!(PodBehaviour::from_annotations(Some(&map)).0.hot_patch);
    }
}
