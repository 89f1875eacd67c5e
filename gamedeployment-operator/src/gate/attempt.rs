//! One gated pod change is one **attempt**: this GameDeployment (UID), this pod (UID), this change (delete, in-place
//! to revision X, post-inplace after X), this visit of the pod's Preparing state (its lifecycle timestamp). A pod
//! HookRun is made for exactly one attempt and opens the gate for that attempt only:
//!
//! - the run records its attempt when it is created ([`stamp`]): the pod UID as a label, the change and the
//!   Preparing timestamp as annotations, the controller ownerReference, the hash of the spec the operator wrote,
//!   and a signature: an HMAC-SHA256 over all of it and the run's name, keyed by a secret only the operator holds
//!   ([`crate::hookrun_keys`]). Labels, annotations and hashes are data whoever creates a HookRun chooses; the
//!   signature is what they cannot make;
//! - a run found under the expected name is accepted only if [`judge`] finds every part equal, the spec still
//!   hashing to what was written and the signature verifying. Anything else is *foreign*: never trusted, never
//!   waited on, never counted as a retry; a run that claims this very attempt without a valid signature is
//!   *forged* (reported with a Warning Event);
//! - a later attempt (the pod left Preparing and came back, or the target revision changed) never matches an
//!   older run, whether or not that run was deleted — a consumed run cannot be reused;
//! - names stay BCS's, with BCS's `.N` suffix when the name is taken by a foreign run ([`choose_in`]), so a
//!   pre-created or left-over object never makes a pass loop.
//!
//! Everything here is pure; the gate calls it with what the planner observed.

use common::api::HookRun;
use common::cached_pod::Pod;
use common::hookrun::spec_hash;
use common::keys;
use std::sync::Arc;

use crate::hookrun_keys::Keyring;

/// How many `.N` names are tried before the gate gives up and says so (bounded work per pod).
pub const MAX_NAME_SUFFIX: usize = 8;

/// What the run gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Delete,
    /// An in-place or hot-patch update to this revision.
    InPlace(String),
    /// The post-inplace hook after the update to this revision.
    PostInPlace(String),
}

impl Change {
    /// The value of [`keys::HOOKRUN_CHANGE`].
    pub fn annotation(&self) -> String {
        match self {
            Self::Delete => "delete".into(),
            Self::InPlace(revision) => format!("inplace/{revision}"),
            Self::PostInPlace(revision) => format!("postinplace/{revision}"),
        }
    }
}

/// One attempt, as the planner sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt<'a> {
    pub gd_uid: &'a str,
    pub pod_uid: &'a str,
    pub change: Change,
    /// The pod's lifecycle timestamp of its current Preparing visit (`None` for post-inplace runs, which are
    /// bound to the update instead: the pod's `Updated` visit timestamp).
    pub prepared_at: Option<&'a str>,
}

impl<'a> Attempt<'a> {
    /// The attempt of `pod` for `change`: bound to the pod's current lifecycle timestamp.
    pub fn of(gd_uid: &'a str, pod: &'a Pod, change: Change) -> Self {
        Self {
            gd_uid,
            pod_uid: pod.metadata.uid.as_deref().unwrap_or(""),
            change,
            prepared_at: common::pod::annotation(pod, keys::LIFECYCLE_TIMESTAMP),
        }
    }
}

/// What a stamp's signature covers: the attempt (GameDeployment UID, pod UID, change, Preparing timestamp), the run's
/// name and its spec hash, each length-prefixed (no two different stamps give the same bytes), after a label naming
/// the layout.
fn signed_message(attempt: &Attempt<'_>, run_name: &str, spec_hash: &str) -> Vec<u8> {
    let change = attempt.change.annotation();
    let fields: [Option<&str>; 6] = [
        Some(attempt.gd_uid),
        Some(attempt.pod_uid),
        Some(&change),
        attempt.prepared_at,
        Some(run_name),
        Some(spec_hash),
    ];
    let mut message = b"gamedeployment.tkex.tencent.com/attempt-signature v1".to_vec();
    for field in fields {
        match field {
            None => message.push(0),
            Some(text) => {
                message.push(1);
                message.extend_from_slice(&(text.len() as u64).to_be_bytes());
                message.extend_from_slice(text.as_bytes());
            }
        }
    }
    message
}

/// Records the attempt on a run about to be created (its name set), signed with the first of `keys`.
pub fn stamp(run: &mut HookRun, attempt: &Attempt<'_>, keys: &Keyring) {
    let hash = spec_hash(&run.spec);
    let signature = keys.sign(&signed_message(attempt, run.metadata.name.as_deref().unwrap_or(""), &hash));
    let labels = run.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(keys::HOOKRUN_POD_UID.into(), attempt.pod_uid.into());
    let annotations = run.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(keys::HOOKRUN_CHANGE.into(), attempt.change.annotation());
    if let Some(at) = attempt.prepared_at {
        annotations.insert(keys::HOOKRUN_PREPARED_AT.into(), at.into());
    }
    annotations.insert(keys::HOOKRUN_SPEC_HASH.into(), hash);
    annotations.insert(keys::HOOKRUN_SIGNATURE.into(), signature);
}

/// Whether a run found under one of the attempt's names may decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Made by us for this attempt, spec unchanged.
    Ours,
    /// Anything else, with the reason (for the Event and the condition message).
    Foreign(String),
    /// Stamped for this very attempt, but its signature does not verify: made by someone else than this operator
    /// (or signed with a key since removed). Treated as foreign, and reported.
    Forged(String),
}

fn label<'a>(run: &'a HookRun, key: &str) -> Option<&'a str> {
    run.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(run: &'a HookRun, key: &str) -> Option<&'a str> {
    run.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The UID of the run's controller ownerReference.
pub fn controller_uid(run: &HookRun) -> Option<&str> {
    run.metadata.owner_references.as_ref()?.iter().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
}

/// Decides whether `run` was made for `attempt` by this operator (signed with one of `keys`) and is unchanged since.
pub fn judge(run: &HookRun, attempt: &Attempt<'_>, keys: &Keyring) -> Judgement {
    let foreign = |why: String| Judgement::Foreign(why);
    if controller_uid(run) != Some(attempt.gd_uid) {
        return foreign("it is not controlled by this GameDeployment".into());
    }
    if label(run, keys::HOOKRUN_POD_UID) != Some(attempt.pod_uid) {
        return foreign("it was made for another pod (or before pods were bound to runs)".into());
    }
    let change = attempt.change.annotation();
    match annotation(run, keys::HOOKRUN_CHANGE) {
        Some(c) if c == change => {}
        other => return foreign(format!("it gates {:?}, not {change:?}", other.unwrap_or("nothing recorded"))),
    }
    if annotation(run, keys::HOOKRUN_PREPARED_AT) != attempt.prepared_at {
        return foreign("it was made for an earlier attempt of this pod".into());
    }
    let hash = match annotation(run, keys::HOOKRUN_SPEC_HASH) {
        Some(hash) if hash == stored_spec_hash(run) => hash,
        Some(_) => return foreign("its spec was edited after it was created".into()),
        None => return foreign("it carries no spec hash".into()),
    };
    let Some(signature) = annotation(run, keys::HOOKRUN_SIGNATURE) else {
        return Judgement::Forged("it carries no signature of this operator (not made by it)".into());
    };
    let message = signed_message(attempt, run.metadata.name.as_deref().unwrap_or(""), hash);
    if keys.verify(&message, signature) {
        Judgement::Ours
    } else {
        Judgement::Forged("its signature does not verify: it was not made by this operator".into())
    }
}

/// [`spec_hash`] of a run, remembered per UID and `metadata.generation`, for runs read from the API: every pass
/// judges every held pod's run, and hashing a spec (serialize, sort, SHA-256) for each was a tenth of the operator's
/// CPU in a 2,000-pod roll. The API server raises a custom object's generation on every change of its spec and never
/// lets a client set it, so a remembered hash is reused only while the run's spec is the one it was computed from —
/// also across the hook-operator's status writes, which change the resourceVersion, not the generation. The entry is
/// the generation and the hash, not a copy of the spec: after a roll of thousands of pods, copies of their runs'
/// specs were a large part of the operator's peak memory. Runs without a UID or a generation (built in memory) are
/// hashed each time. Entries of runs no pass asks about any more are forgotten ([`crate::memo`]).
fn stored_spec_hash(run: &HookRun) -> String {
    use std::sync::LazyLock;
    static MEMO: LazyLock<crate::memo::UidMemo<SpecHashEntry>> = LazyLock::new(Default::default);
    let (Some(uid), Some(generation)) = (run.metadata.uid.as_deref(), run.metadata.generation) else {
        return spec_hash(&run.spec);
    };
    if let Some(hash) = MEMO.get(uid, |entry| (entry.generation == generation).then(|| entry.hash.clone())) {
        return hash;
    }
    let hash = spec_hash(&run.spec);
    MEMO.insert(uid, SpecHashEntry { generation, hash: hash.clone() });
    hash
}

/// What [`stored_spec_hash`] remembers of a run.
#[derive(Debug)]
struct SpecHashEntry {
    /// The run's `metadata.generation` when its spec was hashed.
    generation: i64,
    hash: String,
}

/// The runs named `base` (index 0) and `base.N` (index N, up to [`MAX_NAME_SUFFIX`]) in one scan of `runs` (the
/// first of each name): looking each name up separately was 18 scans of every HookRun of the namespace per held pod
/// and pass.
pub fn named<'a>(runs: &'a [Arc<HookRun>], base: &str) -> [Option<&'a HookRun>; MAX_NAME_SUFFIX + 1] {
    let mut found = [None; MAX_NAME_SUFFIX + 1];
    for run in runs {
        let Some(rest) = run.metadata.name.as_deref().and_then(|n| n.strip_prefix(base)) else { continue };
        let n = if rest.is_empty() {
            0
        } else {
            match rest.strip_prefix('.').and_then(|d| d.parse::<usize>().ok()) {
                // `nth_name` never writes a leading zero or `.0`: "x.01" is not a name of ours.
                Some(n) if (1..=MAX_NAME_SUFFIX).contains(&n) && nth_name(base, n).len() == base.len() + rest.len() => {
                    n
                }
                _ => continue,
            }
        };
        found[n].get_or_insert(&**run);
    }
    found
}

/// The namespace's runs by name (the first run of each name), built once per pass: [`named`] scans every run of the
/// namespace for each held pod, `O(pods × runs)` string comparisons per pass in a roll of thousands of pods.
#[derive(Debug)]
pub struct RunNames<'a> {
    runs: &'a [Arc<HookRun>],
    by_name: std::collections::HashMap<&'a str, &'a HookRun>,
}

impl<'a> RunNames<'a> {
    pub fn of(runs: &'a [Arc<HookRun>]) -> Self {
        let mut by_name = std::collections::HashMap::with_capacity(runs.len());
        for run in runs {
            if let Some(name) = run.metadata.name.as_deref() {
                by_name.entry(name).or_insert(&**run);
            }
        }
        Self { runs, by_name }
    }

    /// Whether this index was built from exactly `runs` (the same slice): otherwise the caller scans.
    fn covers(&self, runs: &[Arc<HookRun>]) -> bool {
        std::ptr::eq(self.runs, runs)
    }
}

/// [`named`], looking the names up in `names` when it was built from `runs` (the same result, without the scan).
pub fn named_in<'a>(
    runs: &'a [Arc<HookRun>],
    names: Option<&RunNames<'a>>,
    base: &str,
) -> [Option<&'a HookRun>; MAX_NAME_SUFFIX + 1] {
    let Some(names) = names.filter(|n| n.covers(runs)) else { return named(runs, base) };
    let mut found = [None; MAX_NAME_SUFFIX + 1];
    let mut name = String::with_capacity(base.len() + 3);
    for (n, slot) in found.iter_mut().enumerate() {
        name.clear();
        name.push_str(base);
        if n > 0 {
            use std::fmt::Write;
            let _ = write!(name, ".{n}");
        }
        *slot = names.by_name.get(name.as_str()).copied();
    }
    found
}

/// Where the attempt's run is, or which name a new one gets.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice<'a> {
    /// Our run for this attempt exists under this name.
    Found(&'a HookRun),
    /// None exists: create one named so. `skipped` lists the names taken by foreign runs, with why.
    Create { name: String, skipped: Vec<(String, String)> },
    /// Every name up to [`MAX_NAME_SUFFIX`] is taken by foreign runs.
    Exhausted { skipped: Vec<(String, String)> },
}

/// The `n`th name of a run: BCS's name, then `name.1`, `name.2`, … (BCS's collision suffix).
pub fn nth_name(base: &str, n: usize) -> String {
    if n == 0 { base.to_string() } else { format!("{base}.{n}") }
}

/// Finds the attempt's run among the observed runs named `base` or `base.N`, or chooses the name of a new one (the
/// first free name). Every name is looked at before a new one is chosen: once an older run under `base` is
/// deleted, our run may live under `base.1` while `base` is free again.
#[cfg(test)]
pub fn choose<'a>(runs: &'a [Arc<HookRun>], base: &str, attempt: &Attempt<'_>, keys: &Keyring) -> Choice<'a> {
    choose_in(runs, None, base, attempt, keys)
}

/// Finds the attempt's run among the runs named `base` or `base.N`, or chooses the name of a new one, with the
/// pass's index of the runs by name ([`named_in`]); the tests' `choose` is this without the index.
pub fn choose_in<'a>(
    runs: &'a [Arc<HookRun>],
    names: Option<&RunNames<'a>>,
    base: &str,
    attempt: &Attempt<'_>,
    keys: &Keyring,
) -> Choice<'a> {
    let mut skipped = Vec::new();
    let mut free = None;
    for (n, run) in named_in(runs, names, base).into_iter().enumerate() {
        let name = nth_name(base, n);
        match run {
            None => {
                free.get_or_insert(name);
            }
            Some(run) => match judge(run, attempt, keys) {
                Judgement::Ours => return Choice::Found(run),
                Judgement::Foreign(why) | Judgement::Forged(why) => {
                    if free.is_none() {
                        skipped.push((name, why));
                    }
                }
            },
        }
    }
    match free {
        Some(name) => Choice::Create { name, skipped },
        None => Choice::Exhausted { skipped },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hookrun_keys::test_keys;
    use common::api::{HookRunSpec, Metric};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn run(name: &str, attempt: &Attempt<'_>) -> HookRun {
        let metric: Metric = serde_json::from_value(serde_json::json!({
            "name": "web", "provider": {"web": {"url": "http://127.0.0.1:9091"}}
        }))
        .unwrap();
        let mut run = HookRun {
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "tkex.tencent.com/v1alpha1".into(),
                    kind: "GameDeployment".into(),
                    name: "gd".into(),
                    uid: attempt.gd_uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: HookRunSpec { metrics: vec![metric], args: vec![], terminate: false, policy: None },
            status: None,
        };
        stamp(&mut run, attempt, test_keys());
        run
    }

    fn attempt(change: Change, prepared_at: &str) -> Attempt<'_> {
        Attempt { gd_uid: "gd-uid", pod_uid: "pod-uid", change, prepared_at: Some(prepared_at) }
    }

    #[test]
    fn a_run_opens_only_the_attempt_it_was_made_for() {
        let made = attempt(Change::InPlace("r2".into()), "2026-01-01T00:00:01.5Z");
        let r = run("pre", &made);
        assert_eq!(judge(&r, &made, test_keys()), Judgement::Ours);
        // Another revision, another visit of Preparing, another pod, another GameDeployment: all foreign.
        for other in [
            attempt(Change::InPlace("r3".into()), "2026-01-01T00:00:01.5Z"),
            attempt(Change::Delete, "2026-01-01T00:00:01.5Z"),
            attempt(Change::InPlace("r2".into()), "2026-01-01T00:00:09Z"),
            Attempt { pod_uid: "other-pod", ..made.clone() },
            Attempt { gd_uid: "recreated-gd", ..made.clone() },
        ] {
            assert!(matches!(judge(&r, &other, test_keys()), Judgement::Foreign(_)), "{other:?}");
        }
    }

    /// Issue 35: whoever may create HookRuns can copy a real run's owner, labels and annotations onto `<name>.1`,
    /// give it a spec that always succeeds and set the spec-hash annotation to that spec's hash. Without the
    /// operator's key the signature cannot follow: the run is forged, not ours (before signatures it was ours and
    /// the held pod was deleted on its word).
    #[test]
    fn a_run_stamped_by_someone_without_the_key_is_forged() {
        let made = attempt(Change::Delete, "2026-01-01T00:00:01Z");
        let real = run("pre", &made);
        let mut forged = real.clone();
        forged.metadata.name = Some("pre.1".into());
        forged.spec.metrics[0].success_condition = Some("true".into());
        let hash = spec_hash(&forged.spec);
        forged.metadata.annotations.as_mut().unwrap().insert(keys::HOOKRUN_SPEC_HASH.into(), hash);
        assert!(matches!(judge(&forged, &made, test_keys()), Judgement::Forged(_)));
        // The real run's spec under another name: the name is signed too.
        let mut renamed = real.clone();
        renamed.metadata.name = Some("pre.1".into());
        assert!(matches!(judge(&renamed, &made, test_keys()), Judgement::Forged(_)));
        // No signature at all (as every run was before signatures): forged, and said so.
        let mut unsigned = real.clone();
        unsigned.metadata.annotations.as_mut().unwrap().remove(keys::HOOKRUN_SIGNATURE);
        let judged = judge(&unsigned, &made, test_keys());
        assert!(matches!(&judged, Judgement::Forged(why) if why.contains("no signature")), "{judged:?}");
        // Signed by another operator's key (another installation): forged.
        let theirs = Keyring::parse("their-key-0123456789-0123456789-0123456789").unwrap();
        let mut other = real.clone();
        stamp(&mut other, &made, &theirs);
        assert!(matches!(judge(&other, &made, test_keys()), Judgement::Forged(_)));
        // The forgery never decides: the real run is found, the forged name is skipped for a new one.
        let runs = [Arc::new(forged), Arc::new(real.clone())];
        assert_eq!(choose(&runs, "pre", &made, test_keys()), Choice::Found(&runs[1]));
        let only_forged = [Arc::new(renamed)];
        match choose(&only_forged, "pre", &made, test_keys()) {
            Choice::Create { name, skipped } => {
                assert_eq!(name, "pre");
                assert!(skipped.is_empty(), "the free base name comes first: {skipped:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Every part of the attempt and the run's name are signed: changing any one of them in the stamp (and nothing
    /// else) breaks the signature, even where the structural checks would let it through.
    #[test]
    fn the_signature_covers_the_attempt_the_name_and_the_spec_hash() {
        let made = attempt(Change::InPlace("r2".into()), "t1");
        let base = signed_message(&made, "pre", "hash");
        let variants = [
            signed_message(&Attempt { gd_uid: "other", ..made.clone() }, "pre", "hash"),
            signed_message(&Attempt { pod_uid: "other", ..made.clone() }, "pre", "hash"),
            signed_message(&Attempt { change: Change::PostInPlace("r2".into()), ..made.clone() }, "pre", "hash"),
            signed_message(&Attempt { prepared_at: None, ..made.clone() }, "pre", "hash"),
            signed_message(&Attempt { prepared_at: Some(""), ..made.clone() }, "pre", "hash"),
            signed_message(&made, "pre.1", "hash"),
            signed_message(&made, "pre", "hash2"),
            // Moving bytes between fields gives other bytes (length prefixes).
            signed_message(&made, "preh", "ash"),
        ];
        for (i, variant) in variants.iter().enumerate() {
            assert_ne!(*variant, base, "variant {i}");
            assert!(!test_keys().verify(variant, &test_keys().sign(&base)), "variant {i}");
        }
    }

    /// Rotation: a keyring with a new key in front of the old one verifies the runs the old key signed (a held pod's
    /// run keeps its gate), signs new runs with the new key; once the old key is removed, its runs are forged.
    #[test]
    fn rotation_keeps_the_gates_of_runs_signed_with_the_old_key() {
        let made = attempt(Change::Delete, "t1");
        let old = Keyring::parse("old-key-0123456789-0123456789-0123456789").unwrap();
        let rotated =
            Keyring::parse("new-key-0123456789-0123456789-0123456789\nold-key-0123456789-0123456789-0123456789")
                .unwrap();
        let mut before = run("pre", &made);
        stamp(&mut before, &made, &old);
        assert_eq!(judge(&before, &made, &rotated), Judgement::Ours);
        let mut after = run("pre.1", &made);
        stamp(&mut after, &made, &rotated);
        assert_eq!(judge(&after, &made, &rotated), Judgement::Ours);
        assert!(matches!(judge(&after, &made, &old), Judgement::Forged(_)), "signed with the new key");
        let new_only = Keyring::parse("new-key-0123456789-0123456789-0123456789").unwrap();
        assert!(matches!(judge(&before, &made, &new_only), Judgement::Forged(_)));
        assert_eq!(judge(&after, &made, &new_only), Judgement::Ours);
    }

    #[test]
    fn named_finds_each_suffix_in_one_scan_and_only_names_nth_name_writes() {
        let made = attempt(Change::Delete, "t1");
        let runs: Vec<Arc<HookRun>> =
            ["pre.2", "pre", "pre.01", "pre.0", "pre.9", "prefix", "pre.x", "pre.8", "other", "pre"]
                .iter()
                .map(|name| Arc::new(run(name, &made)))
                .collect();
        let found = named(&runs, "pre");
        let names: Vec<Option<&str>> = found.iter().map(|r| r.and_then(|r| r.metadata.name.as_deref())).collect();
        assert_eq!(names, [Some("pre"), None, Some("pre.2"), None, None, None, None, None, Some("pre.8")]);
        assert!(std::ptr::eq(found[0].unwrap(), &*runs[1]), "the first run of a name, as a lookup by name finds it");
        for (n, run) in found.iter().enumerate() {
            let by_lookup = runs
                .iter()
                .map(AsRef::as_ref)
                .find(|r| r.metadata.name.as_deref() == Some(nth_name("pre", n).as_str()));
            assert_eq!(run.map(|r| r as *const HookRun), by_lookup.map(|r| r as *const HookRun), "name {n}");
        }
    }

    #[test]
    fn the_pass_index_finds_what_the_scan_finds_and_is_used_only_for_its_own_runs() {
        let made = attempt(Change::Delete, "t1");
        let runs: Vec<Arc<HookRun>> =
            ["pre.2", "pre", "pre.01", "pre.0", "pre.9", "prefix", "pre.x", "pre.8", "other", "pre", "pre.1"]
                .iter()
                .map(|name| Arc::new(run(name, &made)))
                .collect();
        let index = RunNames::of(&runs);
        let ptrs = |found: [Option<&HookRun>; MAX_NAME_SUFFIX + 1]| found.map(|r| r.map(|r| r as *const HookRun));
        for base in ["pre", "prefix", "other", "pre.1", "missing"] {
            assert_eq!(ptrs(named_in(&runs, Some(&index), base)), ptrs(named(&runs, base)), "{base}");
        }
        // Another slice (a state whose runs were replaced): the index does not describe it, so it is scanned.
        let other: Vec<Arc<HookRun>> = vec![Arc::new(run("pre.3", &made))];
        let found = named_in(&other, Some(&index), "pre");
        assert!(std::ptr::eq(found[3].unwrap(), &*other[0]));
        assert!(found[0].is_none() && found[2].is_none());
        assert_eq!(choose_in(&runs, Some(&index), "pre", &made, test_keys()), choose(&runs, "pre", &made, test_keys()));
    }

    #[test]
    fn a_stored_run_edited_under_a_new_generation_is_foreign() {
        let made = attempt(Change::Delete, "t-stored");
        let mut stored = run("pre", &made);
        stored.metadata.uid = Some("run-uid-stored".into());
        stored.metadata.generation = Some(1);
        assert_eq!(judge(&stored, &made, test_keys()), Judgement::Ours);
        assert_eq!(judge(&stored, &made, test_keys()), Judgement::Ours, "remembered");
        // The API server raises the generation with every spec change.
        stored.spec.metrics.clear();
        stored.metadata.generation = Some(2);
        assert_eq!(
            judge(&stored, &made, test_keys()),
            Judgement::Foreign("its spec was edited after it was created".into())
        );
    }

    #[test]
    fn a_remembered_hash_follows_the_generation_not_the_resource_version() {
        let made = attempt(Change::Delete, "t-remembered");
        let mut stored = run("pre", &made);
        stored.metadata.uid = Some("run-uid-remembered".into());
        stored.metadata.generation = Some(1);
        stored.metadata.resource_version = Some("10".into());
        assert_eq!(judge(&stored, &made, test_keys()), Judgement::Ours);
        // A status write (new resourceVersion, same generation and spec): still ours.
        stored.metadata.resource_version = Some("11".into());
        stored.status = Some(Default::default());
        assert_eq!(judge(&stored, &made, test_keys()), Judgement::Ours);
        // The spec edited (the server's next generation): foreign; edited back (a later generation): ours again.
        let original = stored.spec.clone();
        stored.spec.args.push(common::api::Argument::new("extra", "x".to_string()));
        stored.metadata.generation = Some(2);
        assert!(matches!(judge(&stored, &made, test_keys()), Judgement::Foreign(_)));
        stored.spec = original;
        stored.metadata.generation = Some(3);
        assert_eq!(judge(&stored, &made, test_keys()), Judgement::Ours);
    }

    #[test]
    fn a_run_without_a_generation_is_hashed_each_time() {
        let made = attempt(Change::Delete, "t-no-generation");
        let mut built = run("pre", &made);
        built.metadata.uid = Some("run-uid-no-generation".into());
        assert_eq!(judge(&built, &made, test_keys()), Judgement::Ours);
        built.spec.metrics.clear();
        assert!(matches!(judge(&built, &made, test_keys()), Judgement::Foreign(_)));
    }

    #[test]
    fn the_memo_keeps_a_generation_and_a_hash_not_a_spec() {
        // A copy of each run's spec per remembered run was a large share of the peak after a big roll.
        assert!(std::mem::size_of::<SpecHashEntry>() <= 32);
    }

    #[test]
    fn an_edited_or_unstamped_run_is_foreign_but_terminate_is_not_an_edit() {
        let made = attempt(Change::Delete, "t1");
        let mut edited = run("pre", &made);
        edited.spec.metrics.clear();
        assert_eq!(
            judge(&edited, &made, test_keys()),
            Judgement::Foreign("its spec was edited after it was created".into())
        );
        let mut terminated = run("pre", &made);
        terminated.spec.terminate = true;
        assert_eq!(judge(&terminated, &made, test_keys()), Judgement::Ours);
        let mut bare = run("pre", &made);
        bare.metadata.labels = None;
        bare.metadata.annotations = None;
        assert!(matches!(judge(&bare, &made, test_keys()), Judgement::Foreign(_)));
        let mut orphan = run("pre", &made);
        orphan.metadata.owner_references = None;
        assert!(matches!(judge(&orphan, &made, test_keys()), Judgement::Foreign(_)));
    }

    #[test]
    fn foreign_names_are_skipped_with_bcs_suffixes_and_the_search_is_bounded() {
        let made = attempt(Change::Delete, "t1");
        let old = attempt(Change::Delete, "t0");
        assert_eq!(choose(&[], "pre", &made, test_keys()), Choice::Create { name: "pre".into(), skipped: vec![] });
        let runs = [Arc::new(run("pre", &old)), Arc::new(run("pre.1", &made))];
        assert_eq!(choose(&runs, "pre", &made, test_keys()), Choice::Found(&runs[1]));
        // The stale run under the base name was deleted: ours under `.1` is still found, not made again.
        let runs = [Arc::new(run("pre.1", &made))];
        assert_eq!(choose(&runs, "pre", &made, test_keys()), Choice::Found(&runs[0]));
        let runs = [Arc::new(run("pre", &old))];
        match choose(&runs, "pre", &made, test_keys()) {
            Choice::Create { name, skipped } => {
                assert_eq!(name, "pre.1");
                assert_eq!(skipped.len(), 1);
                assert!(skipped[0].1.contains("earlier attempt"), "{skipped:?}");
            }
            other => panic!("{other:?}"),
        }
        let taken: Vec<Arc<HookRun>> =
            (0..=MAX_NAME_SUFFIX).map(|n| Arc::new(run(&nth_name("pre", n), &old))).collect();
        assert!(
            matches!(choose(&taken, "pre", &made, test_keys()), Choice::Exhausted { skipped } if skipped.len() == MAX_NAME_SUFFIX + 1)
        );
    }
}
