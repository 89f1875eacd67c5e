//! One cancellation signal for the whole process: SIGTERM/SIGINT, a lost Lease or a fatal error all trigger
//! it, and every long-running part (controller, server, elector) watches it to stop cleanly.

use std::sync::Arc;

use tokio::sync::watch;

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
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

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
            let terminate = async {
                #[cfg(unix)]
                {
                    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                        Ok(mut signal) => {
                            signal.recv().await;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                            std::future::pending::<()>().await;
                        }
                    }
                }
                #[cfg(not(unix))]
                std::future::pending::<()>().await;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
                _ = terminate => tracing::info!("SIGTERM received, shutting down"),
            }
            this.trigger();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
