//! `OnDelete`: the operator never updates a pod by itself. Pods move to the new template when someone deletes
//! them: the scale step recreates them from the update revision (keeping `partition` pods on the current
//! revision, as for every strategy). This is the kourse API's "legacy" strategy, which BCS declared but did not
//! implement.

/// What the `Progressing` condition says while pods wait for a user to delete them.
pub const WAITING_FOR_DELETION: &str = "updateStrategy.type is OnDelete: delete pods to move them to the new revision";
