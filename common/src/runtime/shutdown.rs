//! One cancellation signal for the whole process: SIGTERM/SIGINT, a lost Lease or a fatal error all trigger
//! it, and every long-running part (controller, server, elector) watches it to stop cleanly. A process that serves
//! others (admission webhooks) stops in two steps instead ([`Handover`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// The process-wide stop signal: cheap to clone, fires once, never resets.
#[derive(Clone, Debug)]
pub struct Shutdown {
    sender: Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        let (sender, _) = watch::channel(false);
        Self { sender: Arc::new(sender) }
    }
}

impl Shutdown {
    /// Fires the signal; every [`Shutdown::wait`] resolves. Idempotent.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    /// Whether the signal fired, for loops that check between steps rather than await.
    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }

    /// Resolves once [`Shutdown::trigger`] was called (immediately if it already was).
    pub async fn wait(&self) {
        let mut receiver = self.sender.subscribe();
        // `wait_for` only fails when the sender is dropped, which cannot happen while `self` holds it.
        let _ = receiver.wait_for(|triggered| *triggered).await;
    }

    /// Triggers on SIGINT or SIGTERM (what the kubelet sends before killing the pod).
    pub fn trigger_on_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            Signals::new().next().await;
            this.trigger();
        });
    }
}

/// A graceful stop in two steps, for a replica others send requests to through a Service:
///
/// 1. [`Handover::stopping`] fires at the first SIGTERM/SIGINT (or whatever else stops the process: a lost Lease, a
///    fatal error): the replica reports not ready, so its endpoint is withdrawn, and hands its work over (the
///    controller stops, the Lease is released), but keeps answering requests;
/// 2. [`Handover::stopped`] fires `drain` later — longer than endpoint propagation, so nothing is still routed to
///    it — or at a second signal: the servers close and the process exits.
///
/// With a zero `drain` both fire together (nothing to drain).
#[derive(Clone, Debug)]
pub struct Handover {
    /// Step 1: report not ready and hand the work over, but keep serving.
    pub stopping: Shutdown,
    /// Step 2: close the servers and exit.
    pub stopped: Shutdown,
    drain: Duration,
}

impl Handover {
    /// Both steps, `drain` apart, without any signal handling (tests; [`Handover::on_signals`] adds it).
    pub fn new(drain: Duration) -> Self {
        let handover = Self { stopping: Shutdown::default(), stopped: Shutdown::default(), drain };
        tokio::spawn({
            let handover = handover.clone();
            async move {
                handover.stopping.wait().await;
                if !handover.drain.is_zero() {
                    tracing::info!(
                        drain = ?handover.drain,
                        "stopping: not ready; still answering requests for the drain period (a second signal ends it)"
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(handover.drain) => {}
                    _ = handover.stopped.wait() => {}
                }
                handover.stopped.trigger();
            }
        });
        handover
    }

    /// [`Handover::new`], with SIGTERM/SIGINT triggering the first step and a second signal the last.
    pub fn on_signals(drain: Duration) -> Self {
        let handover = Self::new(drain);
        tokio::spawn({
            let handover = handover.clone();
            async move {
                let mut signals = Signals::new();
                signals.next().await;
                handover.stopping.trigger();
                signals.next().await;
                tracing::info!("second signal: stopping now");
                handover.stopped.trigger();
            }
        });
        handover
    }

    /// The time between the two steps.
    pub fn drain(&self) -> Duration {
        self.drain
    }
}

/// SIGTERM (what the kubelet sends before killing the pod) and SIGINT, as a stream of arrivals.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process"))
                .ok();
            Self { terminate }
        }
        #[cfg(not(unix))]
        Self {}
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        let terminate = async {
            match self.terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminate = std::future::pending::<()>();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
            _ = terminate => tracing::info!("SIGTERM received, shutting down"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_handover_stops_serving_a_drain_after_it_stops_acting() {
        let handover = Handover::new(Duration::from_secs(15));
        assert!(!handover.stopping.is_triggered() && !handover.stopped.is_triggered());
        let began = tokio::time::Instant::now();
        handover.stopping.trigger();
        tokio::time::sleep(Duration::from_secs(14)).await;
        assert!(!handover.stopped.is_triggered(), "still serving during the drain");
        handover.stopped.wait().await;
        assert_eq!(began.elapsed().as_secs(), 15);
        // Ended early: the second step alone (a second signal) does not wait.
        let early = Handover::new(Duration::from_secs(15));
        early.stopping.trigger();
        early.stopped.trigger();
        early.stopped.wait().await;
        // No drain: both steps together.
        let none = Handover::new(Duration::ZERO);
        none.stopping.trigger();
        none.stopped.wait().await;
    }

    #[tokio::test]
    async fn wait_returns_after_trigger_even_when_subscribed_late() {
        let shutdown = Shutdown::default();
        assert!(!shutdown.is_triggered());
        let waiter = tokio::spawn({
            let s = shutdown.clone();
            async move { s.wait().await }
        });
        shutdown.trigger();
        waiter.await.unwrap();
        shutdown.wait().await;
        assert!(shutdown.is_triggered());
    }
}
