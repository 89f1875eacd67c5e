//! Server-declared state (addition; kruise-game's `opsState`, Agones' `Allocated`): a game server — or its
//! matchmaker — labels its own pod with what it is doing, ahead of any change, and the operator takes it into
//! account when it chooses which servers a scale-in deletes, and which it may touch at all. The label is
//! [`crate::keys::SERVER_STATE`].
//!
//! | value | scale-in |
//! |---|---|
//! | `WaitToBeDeleted` (or `Draining`) | first: the server asked to go |
//! | `Idle` | next: nobody plays on it |
//! | unset or any other value | then the rest, in the usual order |
//! | `Allocated` | last: players are on it (and it still goes through its pre-delete hook) |
//! | `Maintaining` | never: a quarantine (for debugging) the operator neither updates nor deletes |
//!
//! The state comes before readiness, deletion costs and age; a pod already on its way out (`PreparingDelete`) is
//! still taken first.

use crate::keys::SERVER_STATE;

/// What a game server says it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServerState {
    /// `WaitToBeDeleted` or `Draining`: the server asked to go, so a scale-in takes it first.
    WaitToBeDeleted,
    /// Nobody plays on it: taken next.
    Idle,
    /// No label, or a value this operator does not know.
    Unset,
    /// Players are on it: taken last (and still through its pre-delete hook).
    Allocated,
    /// Quarantined by a person (or the server itself): the operator never updates or deletes it, and it does not
    /// count as available.
    Maintaining,
}

impl ServerState {
    /// The state a pod declares (its [`SERVER_STATE`] label).
    pub fn of(pod: &impl crate::pod::PodFields) -> Self {
        match crate::pod::label(pod, SERVER_STATE) {
            Some("WaitToBeDeleted" | "Draining") => Self::WaitToBeDeleted,
            Some("Idle") => Self::Idle,
            Some("Allocated") => Self::Allocated,
            Some("Maintaining") => Self::Maintaining,
            _ => Self::Unset,
        }
    }

    /// The label value that names the state (`None` for [`Self::Unset`]); `Draining` is counted as `WaitToBeDeleted`.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::WaitToBeDeleted => Some("WaitToBeDeleted"),
            Self::Idle => Some("Idle"),
            Self::Allocated => Some("Allocated"),
            Self::Maintaining => Some("Maintaining"),
            Self::Unset => None,
        }
    }

    /// Every state with a name, for metrics (a bounded label set: never a value a pod made up).
    pub const NAMED: [Self; 4] = [Self::WaitToBeDeleted, Self::Idle, Self::Allocated, Self::Maintaining];

    /// Every value a server may declare that the operator knows, as it is written (`Draining` is a value of its own
    /// here, though it ranks as `WaitToBeDeleted`): what `status.serverStates` and the metrics count, a bounded set.
    pub const DECLARED: [&'static str; 5] = ["WaitToBeDeleted", "Draining", "Idle", "Allocated", "Maintaining"];

    /// The known value `pod` declares, as written (`None` without the label or for a value the operator does not
    /// know): a server that says `Draining` is counted as `Draining`.
    pub fn declared(pod: &impl crate::pod::PodFields) -> Option<&'static str> {
        let value = crate::pod::label(pod, SERVER_STATE)?;
        Self::DECLARED.into_iter().find(|known| *known == value)
    }

    /// Scale-in order: the lower goes first (the enum's order; a `Maintaining` server is never a scale-in victim,
    /// its rank only keeps the order total).
    pub fn deletion_rank(self) -> u8 {
        self as u8
    }

    /// Whether the operator must leave the pod as it is: never update it, never delete it (a person still may).
    pub fn is_quarantine(self) -> bool {
        self == Self::Maintaining
    }

    /// Whether `pod` declares `Maintaining`.
    pub fn quarantined(pod: &impl crate::pod::PodFields) -> bool {
        Self::of(pod).is_quarantine()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn labelled(value: Option<&str>) -> Pod {
        let labels = value.map(|v| [(SERVER_STATE.to_string(), v.to_string())].into());
        Pod { metadata: ObjectMeta { labels, ..Default::default() }, ..Default::default() }
    }

    #[test]
    fn states_rank_wait_to_be_deleted_idle_the_rest_then_allocated() {
        let rank = |v: Option<&str>| ServerState::of(&labelled(v)).deletion_rank();
        let order = [Some("WaitToBeDeleted"), Some("Idle"), None, Some("Allocated")];
        let ranks: Vec<u8> = order.iter().map(|v| rank(*v)).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
        assert_eq!(rank(Some("Draining")), rank(Some("WaitToBeDeleted")));
        assert_eq!(rank(Some("allocated")), rank(None), "values are case-sensitive, as label values are");
        assert_eq!(rank(Some("Maintained")), rank(None), "an unknown value counts as unset");
        assert!(ServerState::quarantined(&labelled(Some("Maintaining"))));
        assert!(!ServerState::quarantined(&labelled(Some("maintaining"))), "case-sensitive");
        assert!(!ServerState::quarantined(&labelled(None)));
    }

    #[test]
    fn a_server_is_counted_by_the_value_it_declares() {
        let declared = |v: Option<&str>| ServerState::declared(&labelled(v));
        assert_eq!(declared(Some("Draining")), Some("Draining"), "not folded into WaitToBeDeleted");
        for known in ServerState::DECLARED {
            assert_eq!(declared(Some(known)), Some(known));
        }
        assert_eq!(declared(Some("draining")), None, "case-sensitive");
        assert_eq!(declared(Some("Bogus")), None);
        assert_eq!(declared(None), None);
        // Every named state is a declared value (the metrics' label set covers the rank's states).
        for state in ServerState::NAMED {
            assert!(state.name().is_some_and(|n| ServerState::DECLARED.contains(&n)));
        }
    }
}
