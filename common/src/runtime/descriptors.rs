//! The process's file-descriptor limit (`RLIMIT_NOFILE`): every connection a server holds, every API watch and every
//! open file takes one, and a process at its limit can accept nothing — not even the API server's call to a webhook.
//!
//! At start the soft limit is raised to the hard limit, as most servers do (the soft limit a process inherits is often
//! 1024 while the hard one allows far more), and the result sizes the servers' connection caps
//! ([`super::connections::ConnectionLimits`]), so that no client can hold enough connections to exhaust it.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// What the process may open, after [`raise_to_hard_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit now in force (`None`: unlimited).
    pub limit: Option<u64>,
    /// The soft limit before the raise, when it was raised.
    pub raised_from: Option<u64>,
}

impl Descriptors {
    /// The limit as a number the caps are computed from: an unlimited process counts as a very large one.
    pub fn count(&self) -> u64 {
        self.limit.unwrap_or(u64::MAX)
    }
}

/// The soft limit the process should run with: the hard limit, unless that is unlimited (Linux refuses an unlimited
/// `RLIMIT_NOFILE`; such a soft limit is left as it is). `None`: nothing to change.
fn raised(current: Rlimit) -> Option<Rlimit> {
    let hard = current.maximum?;
    match current.current {
        Some(soft) if soft < hard => Some(Rlimit { current: Some(hard), maximum: Some(hard) }),
        _ => None,
    }
}

/// Raises the soft descriptor limit to the hard limit and says what the process now has. A failed raise (a sandbox
/// that forbids it) is logged and the inherited limit kept: the caps follow whatever the limit is.
pub fn raise_to_hard_limit() -> Descriptors {
    let before = getrlimit(Resource::Nofile);
    let Some(wanted) = raised(before) else {
        tracing::info!(limit = ?before.current, "descriptor limit (RLIMIT_NOFILE)");
        return Descriptors { limit: before.current, raised_from: None };
    };
    match setrlimit(Resource::Nofile, wanted) {
        Ok(()) => {
            tracing::info!(
                from = ?before.current,
                to = ?wanted.current,
                "descriptor limit (RLIMIT_NOFILE) raised to the hard limit"
            );
            Descriptors { limit: wanted.current, raised_from: before.current }
        }
        Err(e) => {
            tracing::warn!(
                limit = ?before.current,
                hard = ?before.maximum,
                error = %e,
                "cannot raise the descriptor limit (RLIMIT_NOFILE); keeping it"
            );
            Descriptors { limit: before.current, raised_from: None }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_to_a_finite_hard_limit_and_never_down() {
        let limit = |current, maximum| Rlimit { current, maximum };
        assert_eq!(raised(limit(Some(1024), Some(524_288))), Some(limit(Some(524_288), Some(524_288))));
        assert_eq!(raised(limit(Some(4096), Some(4096))), None, "already at the hard limit");
        assert_eq!(raised(limit(Some(1024), None)), None, "an unlimited hard limit is not a soft limit Linux accepts");
        assert_eq!(raised(limit(None, None)), None);
    }

    #[test]
    fn raising_leaves_the_process_at_its_hard_limit() {
        let descriptors = raise_to_hard_limit();
        let now = getrlimit(Resource::Nofile);
        assert_eq!(descriptors.limit, now.current);
        if now.maximum.is_some() {
            assert_eq!(now.current, now.maximum, "the soft limit is the hard limit");
        }
    }
}
