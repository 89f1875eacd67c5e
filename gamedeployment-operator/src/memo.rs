//! What a pass derived from an object, remembered per UID so the next pass does not derive it again (the in-place
//! progress a pod records, a HookRun's spec hash), and **forgotten once the object is no longer used**.
//!
//! Every pass reads every pod and judges every held pod's run, so the live objects' entries are used again within a
//! pass or two. Pods and runs come and go with every roll and scale-in: a memo that only ever grew held every UID the
//! operator had seen (up to a cap of 100,000 entries, each HookRun entry with a copy of its spec: past the chart's
//! memory limit in a fleet that rolls often). Here the entries live in two generations: one in use and the one
//! before; every [`UidMemo::PERIOD`] the older generation is dropped, and an entry found there is moved to the one
//! in use. An entry not used for two periods is gone, so the memo holds what recent passes used, not history.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A memo by object UID whose entries last while they are used (see the module docs).
#[derive(Debug)]
pub struct UidMemo<V> {
    generations: Mutex<Generations<V>>,
}

impl<V> Default for UidMemo<V> {
    fn default() -> Self {
        Self { generations: Mutex::new(Generations::new(Instant::now())) }
    }
}

impl<V> UidMemo<V> {
    /// How long a generation is in use: an entry unused for two of these is dropped.
    pub const PERIOD: Duration = Duration::from_secs(300);
    /// A bound on either generation, whatever the churn within one period: past it, that generation starts over.
    pub const MAX_ENTRIES: usize = 100_000;

    /// `read(entry)` of the entry remembered for `uid`, if there is one and `read` accepts it (`None` when the
    /// object changed since: then the caller derives it again and [`insert`](Self::insert)s the result).
    pub fn get<R>(&self, uid: &str, read: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        self.lock().get(uid, Instant::now(), read)
    }

    /// Remembers `value` for `uid`, replacing what was there.
    pub fn insert(&self, uid: &str, value: V) {
        self.lock().insert(uid, value, Instant::now());
    }

    /// The memo locked for a run of look-ups and inserts (a pass over many objects): one lock and one look at the
    /// clock for all of them, where [`get`](Self::get) and [`insert`](Self::insert) take both each time.
    pub fn batch(&self) -> Batch<'_, V> {
        Batch { generations: self.lock(), now: Instant::now() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations<V>> {
        self.generations.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// [`UidMemo::batch`]: the memo, locked until this is dropped.
pub struct Batch<'m, V> {
    generations: std::sync::MutexGuard<'m, Generations<V>>,
    now: Instant,
}

impl<V> Batch<'_, V> {
    /// As [`UidMemo::get`].
    pub fn get<R>(&mut self, uid: &str, read: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        self.generations.get(uid, self.now, read)
    }

    /// As [`UidMemo::insert`].
    pub fn insert(&mut self, uid: &str, value: V) {
        self.generations.insert(uid, value, self.now);
    }
}

/// The entries used in this period (`current`) and in the one before (`previous`).
#[derive(Debug)]
struct Generations<V> {
    current: HashMap<String, V>,
    previous: HashMap<String, V>,
    started: Instant,
}

impl<V> Generations<V> {
    fn new(now: Instant) -> Self {
        Self { current: HashMap::new(), previous: HashMap::new(), started: now }
    }

    /// Starts a new period when the current one is over: what was not used in it or the one before is dropped.
    fn age(&mut self, now: Instant) {
        if now.saturating_duration_since(self.started) >= UidMemo::<V>::PERIOD {
            self.previous = std::mem::take(&mut self.current);
            self.started = now;
        }
    }

    fn get<R>(&mut self, uid: &str, now: Instant, read: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        self.age(now);
        if let Some(value) = self.current.get(uid) {
            return read(value);
        }
        let value = self.previous.remove(uid)?;
        let out = read(&value);
        self.current.insert(uid.to_string(), value);
        out
    }

    fn insert(&mut self, uid: &str, value: V, now: Instant) {
        self.age(now);
        if self.current.len() >= UidMemo::<V>::MAX_ENTRIES && !self.current.contains_key(uid) {
            self.current.clear();
        }
        self.current.insert(uid.to_string(), value);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = UidMemo::<u32>::PERIOD;

    fn found(memo: &mut Generations<u32>, uid: &str, now: Instant) -> Option<u32> {
        memo.get(uid, now, |v| Some(*v))
    }

    #[test]
    fn an_entry_is_found_until_it_goes_unused_for_two_periods() {
        let t0 = Instant::now();
        let mut memo = Generations::new(t0);
        memo.insert("a", 1, t0);
        assert_eq!(found(&mut memo, "a", t0 + PERIOD / 2), Some(1));
        // Unused from then on: still there one period later (in the previous generation), gone after the next.
        assert_eq!(memo.len(), 1);
        memo.age(t0 + PERIOD);
        assert_eq!(memo.len(), 1, "one period unused: kept");
        memo.age(t0 + PERIOD * 2);
        assert_eq!(memo.len(), 0, "two periods unused: dropped");
        assert_eq!(found(&mut memo, "a", t0 + PERIOD * 2), None);
    }

    #[test]
    fn an_entry_used_every_period_lasts() {
        let t0 = Instant::now();
        let mut memo = Generations::new(t0);
        memo.insert("live", 7, t0);
        for period in 1..50u32 {
            assert_eq!(found(&mut memo, "live", t0 + PERIOD * period + PERIOD / 3), Some(7), "period {period}");
        }
    }

    /// Pods and runs replaced roll after roll (new UIDs each time): the memo holds about the objects of the last two
    /// periods, not every UID it ever saw.
    #[test]
    fn churn_does_not_accumulate() {
        let t0 = Instant::now();
        let mut memo = Generations::new(t0);
        let per_roll = 1_000u32;
        for roll in 0..40u32 {
            let now = t0 + PERIOD * roll;
            for pod in 0..per_roll {
                let uid = format!("{roll}-{pod}");
                if found(&mut memo, &uid, now).is_none() {
                    memo.insert(&uid, pod, now);
                }
            }
        }
        assert!(memo.len() <= 2 * per_roll as usize, "{} entries after 40 rolls of {per_roll}", memo.len());
    }

    #[test]
    fn a_rejected_entry_is_not_returned_and_can_be_replaced() {
        let t0 = Instant::now();
        let mut memo = Generations::new(t0);
        memo.insert("a", 1, t0);
        assert_eq!(memo.get("a", t0, |v| (*v == 2).then_some("fresh")), None);
        memo.insert("a", 2, t0);
        assert_eq!(memo.get("a", t0, |v| (*v == 2).then_some("fresh")), Some("fresh"));
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn a_generation_never_holds_more_than_the_bound() {
        let t0 = Instant::now();
        let mut memo = Generations::new(t0);
        for i in 0..(UidMemo::<u32>::MAX_ENTRIES as u32 + 10) {
            memo.insert(&i.to_string(), i, t0);
        }
        assert!(memo.current.len() <= UidMemo::<u32>::MAX_ENTRIES);
    }
}
