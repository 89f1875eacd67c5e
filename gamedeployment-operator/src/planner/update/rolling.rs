//! `RollingUpdate`: an old pod is deleted (through the delete gate) and the scale step of a later pass creates
//! its replacement from the update revision. With `maxSurge`, the scale step first creates up to `maxSurge`
//! extra new pods, so old pods can go without dropping below `replicas − maxUnavailable` available pods.

use super::super::plan_draft::Draft;
use super::super::settings::{PodInfo, Settings};
use crate::action::Action;
use crate::gate::{DeleteCause, GateKind};

/// Replaces one pod: delete it if the gate allows.
pub(crate) fn replace(settings: &Settings<'_>, info: &PodInfo<'_>, cause: DeleteCause, draft: &mut Draft) {
    if draft.pass_gate(settings, info, GateKind::Delete(cause)) {
        draft.actions.push(Action::DeletePod { pod: info.pod_ref(), cause });
    }
}
