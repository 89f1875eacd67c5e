//! The takeover section of `kubectl gd plan NAME --takeover`: for a fleet another operator ran (BCS's, or a
//! CloneSet's pods about to be adopted), per pod whether this operator would change it and why
//! ([`gamedeployment_operator::forecast::takeover`]).

use std::fmt::Write as _;

use gamedeployment_operator::forecast::takeover::Takeover;

/// The section as text: which revision holds the current template, then one line per pod.
pub fn render(takeover: &Takeover) -> String {
    let mut out = String::new();
    let revision = if takeover.revision_exists {
        format!("revision {} holds the current template", takeover.update_revision)
    } else {
        format!("no revision holds the current template: the operator would create {}", takeover.update_revision)
    };
    let changes = takeover.changes();
    let verdict = match changes {
        0 => "no pod would change".to_string(),
        1 => "1 pod would change".to_string(),
        n => format!("{n} pods would change"),
    };
    let _ = writeln!(out, "\nTakeover: {revision}; {verdict}");
    let width = takeover.pods.iter().map(|p| p.pod.len()).max().unwrap_or(0);
    for pod in &takeover.pods {
        let mark = if pod.would_change { "would change" } else { "unchanged" };
        let _ = writeln!(out, "  {:width$}  {mark:12}  {}", pod.pod, pod.why);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gamedeployment_operator::forecast::takeover::PodVerdict;

    #[test]
    fn one_line_per_pod_with_its_reason() {
        let takeover = Takeover {
            update_revision: "game-6ddc6c86bc".into(),
            revision_exists: true,
            pods: vec![
                PodVerdict {
                    pod: "game-bbbx2".into(),
                    revision: Some("game-6ddc6c86bc".into()),
                    would_change: false,
                    why: "runs game-6ddc6c86bc, which holds the current template".into(),
                },
                PodVerdict {
                    pod: "game-x".into(),
                    revision: None,
                    would_change: true,
                    why: "it names no revision (controller-revision-hash): outdated".into(),
                },
            ],
        };
        let text = render(&takeover);
        assert!(text.contains("Takeover: revision game-6ddc6c86bc holds the current template; 1 pod would change"));
        assert!(text.contains("  game-bbbx2  unchanged     runs game-6ddc6c86bc"), "{text}");
        assert!(text.contains("  game-x      would change  it names no revision"), "{text}");
    }
}
