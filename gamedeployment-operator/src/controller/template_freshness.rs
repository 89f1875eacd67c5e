//! A HookRun copies its HookTemplate's metrics when it is created and runs that copy for its whole life, so a run
//! built from a cached template that has not seen the latest edit runs the old version. That is the case that
//! matters most: the documented way out of a failed hook is "fix the template, then retry", and a retry built from
//! the unfixed template fails again at once and is spent. A watch lags behind the API server by milliseconds in
//! a healthy cluster, by seconds or minutes while it reconnects.
//!
//! So before a pass creates runs, the templates its GameDeployment names are read from the API server (one GET
//! each, only in passes that create runs). If the cache is behind, the pass is planned again with the templates
//! as read; if a read fails, the pass creates no run (its pods wait in their Preparing state, which no run ever
//! skips) and looks again shortly.

use common::api::{GameDeployment, HookTemplate};
use kube::{Api, Client};

/// What the API server says about the templates a pass uses.
#[derive(Debug, PartialEq)]
pub(super) enum Freshness {
    /// Every template the GameDeployment names is as cached (same resourceVersion, or absent from both).
    Current,
    /// The templates to plan with instead of the cached ones.
    Behind(Vec<HookTemplate>),
}

/// What a pass does when the templates cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ReadFailed {
    /// Forbidden: RBAC from before the read (list and watch only). Runs are built from the cache, as then.
    UseTheCache,
    /// Anything else (the API server is failing, a timeout): no run in this pass; look again shortly.
    CreateNoRun,
}

/// [`ReadFailed`] for the error a read returned.
pub(super) fn read_failed(error: &kube::Error) -> ReadFailed {
    match error {
        kube::Error::Api(status) if status.code == 403 => ReadFailed::UseTheCache,
        _ => ReadFailed::CreateNoRun,
    }
}

/// Reads the templates `gd` names from the API server and compares them with `cached`.
pub(super) async fn check(
    client: &Client,
    namespace: &str,
    gd: &GameDeployment,
    cached: &[HookTemplate],
) -> Result<Freshness, kube::Error> {
    let api: Api<HookTemplate> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<&str> = gd.spec.hook_template_names().collect();
    names.sort_unstable();
    names.dedup();
    let mut read = Vec::with_capacity(names.len());
    for name in names {
        read.push((name.to_string(), api.get_opt(name).await?));
    }
    Ok(compare(cached, read))
}

/// `cached` against what was `read` (each name the GameDeployment uses, with the template the API server holds,
/// if any): [`Freshness::Behind`] with the cached templates of other names and the read ones, if any differs.
fn compare(cached: &[HookTemplate], read: Vec<(String, Option<HookTemplate>)>) -> Freshness {
    let find = |name: &str| cached.iter().find(|t| t.metadata.name.as_deref() == Some(name));
    let current = read.iter().all(|(name, fresh)| {
        let version = |t: &HookTemplate| t.metadata.resource_version.clone();
        find(name).map(version) == fresh.as_ref().map(version)
    });
    if current {
        return Freshness::Current;
    }
    let mut templates: Vec<HookTemplate> = cached
        .iter()
        .filter(|t| !read.iter().any(|(name, _)| t.metadata.name.as_deref() == Some(name.as_str())))
        .cloned()
        .collect();
    templates.extend(read.into_iter().filter_map(|(_, fresh)| fresh));
    Freshness::Behind(templates)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str, version: &str) -> HookTemplate {
        let mut t = crate::fixtures::hook_template();
        t.metadata.name = Some(name.into());
        t.metadata.resource_version = Some(version.into());
        t
    }

    fn names(templates: &[HookTemplate]) -> Vec<(String, String)> {
        let mut v: Vec<_> = templates
            .iter()
            .map(|t| {
                (t.metadata.name.clone().unwrap_or_default(), t.metadata.resource_version.clone().unwrap_or_default())
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_forbidden_read_falls_back_to_the_cache_and_any_other_failure_creates_no_run() {
        let api = |code: u16| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
        assert_eq!(read_failed(&api(403)), ReadFailed::UseTheCache);
        for code in [404, 429, 500, 503, 504] {
            assert_eq!(read_failed(&api(code)), ReadFailed::CreateNoRun, "{code}");
        }
        assert_eq!(read_failed(&kube::Error::LinesCodecMaxLineLengthExceeded), ReadFailed::CreateNoRun);
    }

    #[test]
    fn the_same_versions_are_current() {
        let cached = [template("gate", "7"), template("other", "3")];
        assert_eq!(compare(&cached, vec![("gate".into(), Some(template("gate", "7")))]), Freshness::Current);
        // A name absent from both: the planner says it is missing either way.
        assert_eq!(compare(&cached, vec![("missing".into(), None)]), Freshness::Current);
    }

    #[test]
    fn an_edited_template_replaces_the_cached_one_and_the_others_stay() {
        let cached = [template("gate", "7"), template("other", "3")];
        let Freshness::Behind(templates) = compare(&cached, vec![("gate".into(), Some(template("gate", "9")))]) else {
            panic!("a newer version was read")
        };
        assert_eq!(names(&templates), [("gate".into(), "9".into()), ("other".into(), "3".into())]);
    }

    #[test]
    fn a_template_created_or_deleted_since_the_cache_saw_it_is_behind() {
        let cached = [template("gate", "7")];
        let Freshness::Behind(templates) = compare(&cached, vec![("gate".into(), None)]) else {
            panic!("the template is gone")
        };
        assert!(templates.is_empty());
        let Freshness::Behind(templates) = compare(&[], vec![("gate".into(), Some(template("gate", "2")))]) else {
            panic!("the template appeared")
        };
        assert_eq!(names(&templates), [("gate".into(), "2".into())]);
    }
}
