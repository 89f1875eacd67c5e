//! The forecast's own signing key: the gate trusts only HookRuns whose attempt stamp is signed with the operator's
//! key ([`crate::hookrun_keys`], [`crate::gate::attempt::judge`]), and whoever forecasts cannot read that key (nor
//! should they). So the forecast generates a keyring of its own and re-signs **in-memory copies** of the live runs
//! that carry a stamp for this GameDeployment; the planner then treats them as the operator does. Nothing is written
//! back. A run whose stamp no longer matches its spec (edited after creation) is not re-signed: it stays foreign,
//! as it is to the operator. The one difference: a run forged with a valid-looking stamp but no valid signature is
//! trusted by the forecast (it cannot tell), while the operator would treat it as foreign and make a new run.

use common::api::HookRun;
use common::hookrun::spec_hash;
use common::keys;

use crate::gate::attempt::{Attempt, Change, controller_uid, stamp};
use crate::hookrun_keys::Keyring;

fn parse_change(text: &str) -> Option<Change> {
    if text == "delete" {
        return Some(Change::Delete);
    }
    if let Some(revision) = text.strip_prefix("inplace/") {
        return Some(Change::InPlace(revision.to_string()));
    }
    text.strip_prefix("postinplace/").map(|revision| Change::PostInPlace(revision.to_string()))
}

/// Re-signs `run` with `keys` if it carries an attempt stamp for the GameDeployment `gd_uid` whose spec hash still
/// matches its spec. Returns whether it did.
pub fn resign(run: &mut HookRun, gd_uid: &str, keys: &Keyring) -> bool {
    if controller_uid(run) != Some(gd_uid) {
        return false;
    }
    let labels = run.metadata.labels.clone().unwrap_or_default();
    let annotations = run.metadata.annotations.clone().unwrap_or_default();
    let (Some(pod_uid), Some(change), Some(hash)) = (
        labels.get(keys::HOOKRUN_POD_UID),
        annotations.get(keys::HOOKRUN_CHANGE).and_then(|c| parse_change(c)),
        annotations.get(keys::HOOKRUN_SPEC_HASH),
    ) else {
        return false;
    };
    if *hash != spec_hash(&run.spec) {
        return false;
    }
    let attempt = Attempt {
        gd_uid,
        pod_uid,
        change,
        prepared_at: annotations.get(keys::HOOKRUN_PREPARED_AT).map(String::as_str),
    };
    stamp(run, &attempt, keys);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::attempt::{Judgement, judge};
    use common::api::HookRunSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn a_run_signed_by_the_operator_is_trusted_by_the_forecast_once_re_signed_and_an_edited_one_is_not() {
        let operator = Keyring::parse("operator-key-0123456789-0123456789-0123").unwrap();
        let (forecast, _) = Keyring::generate().unwrap();
        let attempt =
            Attempt { gd_uid: "gd", pod_uid: "pod", change: Change::InPlace("rev-2".into()), prepared_at: Some("t1") };
        let mut run = HookRun::new("predelete-rev-1-abcde-test", HookRunSpec::default());
        run.metadata.owner_references =
            Some(vec![OwnerReference { uid: "gd".into(), controller: Some(true), ..OwnerReference::default() }]);
        stamp(&mut run, &attempt, &operator);
        assert!(matches!(judge(&run, &attempt, &forecast), Judgement::Forged(_)), "the forecast cannot verify it");
        let mut copy = run.clone();
        assert!(resign(&mut copy, "gd", &forecast));
        assert_eq!(judge(&copy, &attempt, &forecast), Judgement::Ours);
        assert!(!resign(&mut run.clone(), "another-gd", &forecast), "only this GameDeployment's runs");
        let mut edited = run.clone();
        edited.spec.policy = Some(common::api::HookPolicy::Ordered);
        assert!(!resign(&mut edited, "gd", &forecast), "an edited run stays foreign");
        let mut unstamped = HookRun::new("x", HookRunSpec::default());
        unstamped.metadata.owner_references = run.metadata.owner_references.clone();
        assert!(!resign(&mut unstamped, "gd", &forecast));
    }
}
