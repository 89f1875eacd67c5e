//! Polling for tests: the one way kube-sim's tests (and the end-to-end tests) wait for
//! something to become true, with one poll period and generous deadlines, so no test depends
//! on timing luck.
//!
//! ```no_run
//! # async fn demo(api: kube::Api<k8s_openapi::api::core::v1::Pod>) -> anyhow::Result<()> {
//! use kube_sim::testing::{DEADLINE, eventually, wait_for};
//! // Fallible probes: the last error is reported on timeout (`eventually_within` for another deadline).
//! let pod = eventually("pod web to exist", || async { Ok(api.get_opt("web").await?) }).await?;
//! // Infallible probes: panics with `what` on timeout (for test harnesses that assert).
//! wait_for("pod web to go", DEADLINE, || async { api.get_opt("web").await.ok()?.is_none().then_some(()) }).await;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

/// Deadline for conditions that normally take well under a second, generous for a loaded
/// 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Time between two probes, at least: a probe that takes longer (one that runs `kubectl`, about 0.1 s of a core)
/// waits as long as it took before the next, so polling is never more than half of a core's time.
pub const POLL: Duration = Duration::from_millis(50);

/// Polls `check` every [`POLL`] until it returns `Ok(Some(_))`; after [`DEADLINE`], fails with
/// `what` and the last error the check returned.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    eventually_within(what, DEADLINE, check).await
}

/// [`eventually`] with another deadline.
pub async fn eventually_within<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        let probed = tokio::time::Instant::now();
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(match last_error {
                Some(e) => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}; last error: {e:#}"),
                None => anyhow::anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        tokio::time::sleep(POLL.max(probed.elapsed())).await;
    }
}

/// Polls `probe` every [`POLL`] until it returns `Some`; panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match eventually_within(what, timeout, || {
        let next = probe();
        async move { Ok(next.await) }
    })
    .await
    {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn polls_until_ready_and_reports_the_last_error() {
        let mut n = 0;
        let v = eventually("three polls", || {
            n += 1;
            let n = n;
            async move { Ok((n >= 3).then_some(n)) }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let e = eventually_within::<(), _, _>("never", Duration::from_millis(120), || async { anyhow::bail!("boom") })
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "timed out after 120ms waiting for never; last error: boom");
        assert_eq!(wait_for("soon", DEADLINE, || async { Some(7) }).await, 7);
    }

    /// A probe of 300 ms waits 300 ms before the next: within 1.4 s it runs at most 3 times (every 350 ms it would run
    /// 5 times). A loaded machine only lengthens the cycle, so the bound holds under load.
    #[tokio::test]
    async fn a_slow_probe_waits_as_long_as_it_took() {
        let mut probes = 0;
        let _ = eventually_within::<(), _, _>("never", Duration::from_millis(1400), || {
            probes += 1;
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(None)
            }
        })
        .await;
        assert!(probes <= 3, "{probes} probes of 300 ms in 1.4 s");
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for nothing")]
    async fn wait_for_panics_with_what_it_waited_for() {
        wait_for::<(), _, _>("nothing", Duration::from_millis(100), || async { None }).await;
    }
}
