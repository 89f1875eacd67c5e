//! Commands printed as hints (in conditions, Events, webhook answers and `kubectl gd`): each is a command a person
//! can paste as printed, so they are built in one place. Every command names the object's namespace (`-n
//! NAMESPACE`, `default` too, as kubectl's own hints do), so it works whatever namespace the reader's kubeconfig
//! context selects. the e2e suite `hints` runs every one of them.

/// `NAME -n NAMESPACE` (`NAME` alone for an object without a namespace): what follows the verb in a hint's
/// command.
pub fn target(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        None | Some("") => name.to_string(),
        Some(ns) => format!("{name} -n {ns}"),
    }
}

/// `kubectl patch gamedeployment NAME … --type=merge -p '{"spec":{<path>:<value>}}'`, the plain kubectl write a
/// `kubectl gd` verb stands for. `path` is the dotted path below `spec` (`preDeleteUpdateStrategy.retry`).
pub fn patch_spec(name: &str, namespace: Option<&str>, path: &str, value: &str) -> String {
    let mut json = value.to_string();
    for key in path.rsplit('.') {
        json = format!("{{\"{key}\":{json}}}");
    }
    format!("kubectl patch gamedeployment {} --type=merge -p '{{\"spec\":{json}}}'", target(name, namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_is_named_even_the_default_one() {
        assert_eq!(target("web", None), "web");
        assert_eq!(target("web", Some("default")), "web -n default");
        assert_eq!(target("web", Some("games")), "web -n games");
    }

    #[test]
    fn spec_patches_nest_the_dotted_path() {
        assert_eq!(
            patch_spec("web", Some("games"), "preDeleteUpdateStrategy.retry", "true"),
            r#"kubectl patch gamedeployment web -n games --type=merge -p '{"spec":{"preDeleteUpdateStrategy":{"retry":true}}}'"#
        );
        assert_eq!(
            patch_spec("web", Some("default"), "updateStrategy.paused", "false"),
            r#"kubectl patch gamedeployment web -n default --type=merge -p '{"spec":{"updateStrategy":{"paused":false}}}'"#
        );
    }
}
