//! Kubernetes Events, published from a background task so that a slow or failing Events API never delays a
//! reconcile. The queue is bounded; when it is full events are dropped and counted
//! (`gamedeployment_events_dropped_total`), never waited for.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::action::{EventType as PlannedType, PlannedEvent};
use crate::metrics::Metrics;

/// Events larger than this are cut (the API limit for an event note is 1 kB).
const MAX_NOTE: usize = 1000;

struct Queued {
    regarding: ObjectReference,
    event: PlannedEvent,
}

/// Where reconciles put events.
#[derive(Clone, Debug)]
pub struct EventSink {
    sender: mpsc::Sender<Queued>,
    metrics: Metrics,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("reason", &self.event.reason).finish()
    }
}

impl EventSink {
    /// Starts the publisher task; it ends when every sink is dropped.
    pub fn start(client: Client, reporter: Reporter, capacity: usize, metrics: Metrics) -> Self {
        let (sender, mut receiver) = mpsc::channel::<Queued>(capacity.max(1));
        let recorder = Recorder::new(client, reporter);
        tokio::spawn(async move {
            while let Some(queued) = receiver.recv().await {
                let event = Event {
                    type_: match queued.event.type_ {
                        PlannedType::Normal => EventType::Normal,
                        PlannedType::Warning => EventType::Warning,
                    },
                    reason: queued.event.reason.clone(),
                    note: Some(truncate(&queued.event.message)),
                    action: queued.event.reason.clone(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&event, &queued.regarding).await {
                    tracing::warn!(error = %e, reason = %queued.event.reason, "publishing an event failed");
                }
            }
        });
        Self { sender, metrics }
    }

    /// Queues an event about `regarding`; never waits.
    pub fn publish(&self, regarding: &ObjectReference, event: PlannedEvent) {
        match event.type_ {
            PlannedType::Normal => {
                tracing::info!(reason = %event.reason, object = ?regarding.name, "{}", event.message)
            }
            PlannedType::Warning => {
                tracing::warn!(reason = %event.reason, object = ?regarding.name, "{}", event.message)
            }
        }
        if self.sender.try_send(Queued { regarding: regarding.clone(), event }).is_err() {
            self.metrics.events_dropped.inc();
        }
    }
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_NOTE {
        return message.to_string();
    }
    let mut end = MAX_NOTE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short"), "short");
        let long = "é".repeat(800);
        let cut = truncate(&long);
        assert!(cut.len() <= MAX_NOTE && cut.ends_with("..."));
    }
}
