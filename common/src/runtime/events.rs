//! Kubernetes Events for both operators, published from one background task per operator so that a slow or
//! failing Events API never delays a reconcile. The queue is bounded: when it is full, events are dropped and
//! counted (the `dropped` counter the operator registers), never waited for.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

/// The API limit of an Event note, in bytes.
pub const MAX_NOTE: usize = 1000;

/// An Event to publish about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    /// `reason` (CamelCase, machine-readable).
    pub reason: String,
    /// `note`, for people; cut to [`MAX_NOTE`] bytes.
    pub message: String,
    /// `action` (what the controller was doing).
    pub action: String,
}

struct Queued {
    regarding: ObjectReference,
    /// The other object the event is about (events.k8s.io `related`): part of the aggregation key, so events
    /// with one reason about different pods stay apart.
    related: Option<ObjectReference>,
    note: Note,
}

/// Where reconciles put Events. Cloning it is cheap; the publisher task ends when every clone is dropped.
#[derive(Clone, Debug)]
pub struct EventSink {
    sender: mpsc::Sender<Queued>,
    dropped: Counter,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("reason", &self.note.reason).finish()
    }
}

impl EventSink {
    /// Starts the publisher task with a queue of `capacity` events; `dropped` counts events the full queue
    /// refused.
    pub fn start(client: Client, reporter: Reporter, capacity: usize, dropped: Counter) -> Self {
        let (sender, receiver) = mpsc::channel::<Queued>(capacity.max(1));
        tokio::spawn(publish_all(Recorder::new(client, reporter), receiver));
        Self { sender, dropped }
    }

    /// Queues an event about `regarding` and logs it; never waits.
    pub fn publish(&self, regarding: &ObjectReference, note: Note) {
        self.publish_related(regarding, None, note);
    }

    /// [`Self::publish`] with a `related` object (a pod of the workload): events that differ in it are never
    /// aggregated into one (the Recorder's key holds `related` but not the note).
    pub fn publish_related(&self, regarding: &ObjectReference, related: Option<ObjectReference>, note: Note) {
        let object = regarding.name.as_deref().unwrap_or_default();
        if note.warning {
            tracing::warn!(reason = %note.reason, object, "{}", note.message);
        } else {
            tracing::info!(reason = %note.reason, object, "{}", note.message);
        }
        self.enqueue(Queued { regarding: regarding.clone(), related, note });
    }

    /// Queues an event without logging it (the caller logs what matters).
    pub fn queue(&self, regarding: &ObjectReference, note: Note) {
        self.enqueue(Queued { regarding: regarding.clone(), related: None, note });
    }

    fn enqueue(&self, queued: Queued) {
        if self.sender.try_send(queued).is_err() {
            self.dropped.inc();
        }
    }

    /// A sink whose queue holds `capacity` events and is never drained, and the receiving end (tests).
    #[doc(hidden)]
    pub fn detached(capacity: usize, dropped: Counter) -> (Self, impl Send) {
        let (sender, receiver) = mpsc::channel::<Queued>(capacity.max(1));
        (Self { sender, dropped }, receiver)
    }
}

async fn publish_all(recorder: Recorder, mut receiver: mpsc::Receiver<Queued>) {
    while let Some(Queued { regarding, related, note }) = receiver.recv().await {
        let event = Event {
            type_: if note.warning { EventType::Warning } else { EventType::Normal },
            reason: note.reason.clone(),
            note: Some(super::text::fit_bytes(&note.message, MAX_NOTE)),
            action: note.action,
            secondary: related,
        };
        if let Err(e) = recorder.publish(&event, &regarding).await {
            tracing::warn!(error = %e, reason = %note.reason, "publishing an event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(reason: &str) -> Note {
        Note { warning: false, reason: reason.into(), message: "m".into(), action: "Test".into() }
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dropped = Counter::default();
        let (sink, _receiver) = EventSink::detached(2, dropped.clone());
        let regarding = ObjectReference::default();
        for i in 0..5 {
            sink.queue(&regarding, note(&format!("R{i}")));
        }
        assert_eq!(dropped.get(), 3);
    }
}
