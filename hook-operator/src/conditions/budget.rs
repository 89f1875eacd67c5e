//! Counting and capping what an evaluation allocates, and the in-process evaluation threads.
//!
//! - [`Counting`], the binaries' global allocator, counts per thread the bytes an evaluation allocated and has not
//!   freed ([`metered`], read at checkpoints), and, in an evaluation worker process only, caps the whole process'
//!   live heap ([`cap_process`]): an allocation past the cap fails and the worker aborts. That cap is the hard
//!   memory bound of [`crate::isolation`]; the per-thread count gives the same bound a friendlier message when a
//!   checkpoint comes first.
//! - **Checkpoints**: expr-lang asks its context for `result` on every use of it;
//!   [`Scope::get`](crate::conditions::evaluate) is where a marked or late evaluation is stopped early (it answers
//!   "no such variable", and the error is reported as the bound being reached).
//! - [`Pool`]: evaluation threads with large stacks and per-namespace round-robin queues, for
//!   `--condition-isolation thread` and the library's tests. There the bounds are only the checkpoints: between two
//!   of them expr-lang may still allocate or compute without limit, which is why the operator uses worker
//!   processes by default.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Stack of a pool thread (reserved address space; only what is used becomes memory).
pub const STACK_BYTES: usize = 64 * 1024 * 1024;
/// Largest string `repeat`, `replace` and `join` may build.
pub const MAX_STRING_BYTES: usize = 64 * 1024;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static LIMIT: Cell<isize> = const { Cell::new(isize::MAX) };
    static OVER: Cell<bool> = const { Cell::new(false) };
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static LATE: Cell<bool> = const { Cell::new(false) };
}

// Allocations (and reallocations) made on each thread, counted in unit tests only: the tests that hold the
// measurement path to its allocations per measurement read it ([`allocations`]).
#[cfg(test)]
thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations and reallocations this thread made so far (unit tests only).
#[cfg(test)]
pub(crate) fn allocations() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

#[inline]
fn tally() {
    #[cfg(test)]
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// Process-wide hard cap (only in an evaluation worker process, see [`crate::isolation`]): bytes allocated and not
/// freed by the whole process, and the most it may hold. An allocation past the cap *fails* (the allocator returns
/// null), which ends the process at once: the hard bound that stops even a step between checkpoints.
static CAPPED: AtomicBool = AtomicBool::new(false);
static PROCESS_LIVE: AtomicIsize = AtomicIsize::new(0);
static PROCESS_CAP: AtomicIsize = AtomicIsize::new(isize::MAX);
/// Called once, just before a capped allocation fails (the process is about to abort); must not allocate.
static ON_CAP: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Caps this process' live heap at `bytes` more than it holds now; `on_cap` runs (once, without allocating) when an
/// allocation is refused, just before the process aborts. Only for a process that does nothing but evaluate.
pub fn cap_process(bytes: usize, on_cap: fn()) {
    let _ = ON_CAP.set(on_cap);
    let now = PROCESS_LIVE.load(Ordering::Relaxed);
    PROCESS_CAP.store(now.saturating_add(isize::try_from(bytes).unwrap_or(isize::MAX)), Ordering::Relaxed);
    CAPPED.store(true, Ordering::Release);
}

/// Moves the cap to `bytes` above what the process holds now (a worker calls it between jobs, so each job gets the
/// whole budget whatever the previous ones left allocated).
pub fn recap_process(bytes: usize) {
    let now = PROCESS_LIVE.load(Ordering::Relaxed);
    PROCESS_CAP.store(now.saturating_add(isize::try_from(bytes).unwrap_or(isize::MAX)), Ordering::Relaxed);
}

/// Whether the process-wide cap admits `size` more bytes (and counts them if so).
#[inline]
fn admit(size: usize) -> bool {
    if !CAPPED.load(Ordering::Relaxed) {
        return true;
    }
    let size = size as isize;
    let live = PROCESS_LIVE.fetch_add(size, Ordering::Relaxed).saturating_add(size);
    if live > PROCESS_CAP.load(Ordering::Relaxed) {
        PROCESS_LIVE.fetch_sub(size, Ordering::Relaxed);
        static ONCE: AtomicBool = AtomicBool::new(false);
        if !ONCE.swap(true, Ordering::Relaxed)
            && let Some(on_cap) = ON_CAP.get()
        {
            on_cap();
        }
        return false;
    }
    true
}

#[inline]
fn release(size: usize) {
    if CAPPED.load(Ordering::Relaxed) {
        PROCESS_LIVE.fetch_sub(size as isize, Ordering::Relaxed);
    }
}

/// A global allocator that counts, per thread and only while an evaluation runs there, the bytes allocated and
/// not freed. Install it in a binary: `#[global_allocator] static A: Counting<mimalloc::MiMalloc> = ...`.
/// Without it the memory budget is not enforced (deadlines still are).
pub struct Counting<A>(pub A);

#[inline]
fn note(delta: isize) {
    let _ = ACTIVE.try_with(|active| {
        if active.get() {
            let live = LIVE.get().saturating_add(delta);
            LIVE.set(live);
            if live > LIMIT.get() {
                OVER.set(true);
            }
        }
    });
}

/// A new block of `size` bytes from `allocate` (the wrapped allocator's `alloc` or `alloc_zeroed`, which count alike):
/// refused (null) when the process-wide cap does not admit it, else counted, and the admitted bytes given back if
/// the allocator fails.
#[inline]
fn counted(size: usize, allocate: impl FnOnce() -> *mut u8) -> *mut u8 {
    if !admit(size) {
        return std::ptr::null_mut();
    }
    tally();
    let p = allocate();
    if p.is_null() {
        release(size);
    } else {
        note(size as isize);
    }
    p
}

// SAFETY: every call is forwarded to the wrapped allocator unchanged; counting only touches const-initialized
// thread-locals without destructors, which never allocate.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        counted(layout.size(), || unsafe { self.0.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        counted(layout.size(), || unsafe { self.0.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        release(layout.size());
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grows = new_size.saturating_sub(layout.size());
        if grows > 0 && !admit(grows) {
            return std::ptr::null_mut();
        }
        tally();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if p.is_null() {
            release(grows);
        } else {
            release(layout.size().saturating_sub(new_size));
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Why an evaluation was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// It allocated more than [`Limits::memory`].
    Memory,
    /// It ran longer than [`Limits::timeout`].
    Time,
}

/// Called by the evaluation's context at every checkpoint: `Some` when the evaluation must stop.
pub fn checkpoint() -> Option<Exceeded> {
    if OVER.get() {
        return Some(Exceeded::Memory);
    }
    if LATE.get() {
        return Some(Exceeded::Time);
    }
    if DEADLINE.get().is_some_and(|d| Instant::now() >= d) {
        LATE.set(true);
        return Some(Exceeded::Time);
    }
    None
}

/// Whether the evaluation on this thread was stopped (or went over budget after its last checkpoint).
pub fn exceeded() -> Option<Exceeded> {
    if OVER.get() {
        Some(Exceeded::Memory)
    } else if LATE.get() {
        Some(Exceeded::Time)
    } else {
        None
    }
}

/// Runs `f` on this thread with a memory budget and a deadline (read by [`checkpoint`]).
pub fn metered<T>(memory: usize, deadline: Instant, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.set(false);
            DEADLINE.set(None);
        }
    }
    LIVE.set(0);
    LIMIT.set(isize::try_from(memory).unwrap_or(isize::MAX));
    OVER.set(false);
    LATE.set(false);
    DEADLINE.set(Some(deadline));
    ACTIVE.set(true);
    let _reset = Reset;
    f()
}

/// Limits of one evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// CPU time one evaluation may take (`--condition-timeout`).
    pub timeout: Duration,
    /// Bytes one evaluation may allocate (`--condition-memory`).
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(1), memory: 32 * 1024 * 1024 }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// Waiting evaluations, one queue per namespace, served round-robin: namespaces take turns, so one namespace's
/// many conditions never wait in front of another's. Both evaluators keep this order, the threads of [`Pool`] and
/// each lane of the worker processes ([`crate::isolation::workers`]), and keep it with this one type.
pub(crate) struct Turns<T> {
    by_namespace: HashMap<String, VecDeque<T>>,
    /// Namespaces with waiting items, in round-robin order.
    turn: VecDeque<String>,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self { by_namespace: HashMap::new(), turn: VecDeque::new() }
    }
}

impl<T> Turns<T> {
    /// Queues `item` behind `namespace`'s others; a namespace that had none takes the last turn.
    pub(crate) fn push(&mut self, namespace: &str, item: T) {
        let queue = self.by_namespace.entry(namespace.to_string()).or_default();
        if queue.is_empty() {
            self.turn.push_back(namespace.to_string());
        }
        queue.push_back(item);
    }

    /// The first item of the namespace whose turn it is, and that namespace, which goes to the back of the turns if
    /// it has more. Items `wanted` refuses (their caller gave up waiting) are dropped on the way.
    pub(crate) fn pop(&mut self, wanted: impl Fn(&T) -> bool) -> Option<(String, T)> {
        while let Some(namespace) = self.turn.pop_front() {
            let Some(queue) = self.by_namespace.get_mut(&namespace) else { continue };
            let item = queue.pop_front();
            if queue.is_empty() {
                self.by_namespace.remove(&namespace);
            } else {
                self.turn.push_back(namespace.clone());
            }
            match item {
                Some(item) if wanted(&item) => return Some((namespace, item)),
                _ => continue,
            }
        }
        None
    }

    /// All of `namespace`'s waiting items, taken out of the turns.
    pub(crate) fn take_namespace(&mut self, namespace: &str) -> VecDeque<T> {
        self.turn.retain(|n| n != namespace);
        self.by_namespace.remove(namespace).unwrap_or_default()
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }
}

/// The evaluation threads and their per-namespace queues.
pub struct Pool {
    queues: Mutex<Turns<Job>>,
    ready: Condvar,
    /// The limits every evaluation of the pool runs under.
    pub limits: Limits,
}

impl Pool {
    /// Starts `threads` evaluation threads (at least one).
    pub fn new(threads: usize, limits: Limits) -> Arc<Self> {
        let pool = Arc::new(Self { queues: Mutex::new(Turns::default()), ready: Condvar::new(), limits });
        for i in 0..threads.max(1) {
            let worker = Arc::downgrade(&pool);
            let spawned =
                std::thread::Builder::new().name(format!("condition-{i}")).stack_size(STACK_BYTES).spawn(move || {
                    while let Some(job) = worker.upgrade().and_then(|pool| pool.next()) {
                        job();
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a condition evaluation thread");
            }
        }
        pool
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Turns<Job>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next job, round-robin over namespaces; waits (at most a second, so a dropped pool ends its threads).
    fn next(&self) -> Option<Job> {
        let mut queues = self.lock();
        loop {
            if let Some((_, job)) = queues.pop(|_| true) {
                return Some(job);
            }
            let (guard, timeout) =
                self.ready.wait_timeout(queues, Duration::from_secs(1)).unwrap_or_else(|p| p.into_inner());
            queues = guard;
            if timeout.timed_out() && queues.is_empty() {
                return Some(Box::new(|| {}));
            }
        }
    }

    /// Runs `f` on a pool thread under the limits, in `namespace`'s queue. The deadline starts when a thread
    /// takes the job. Panics in `f` are caught and returned as errors.
    pub async fn run<T: Send + 'static>(
        &self,
        namespace: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let limits = self.limits;
        let job: Job = Box::new(move || {
            let deadline = Instant::now() + limits.timeout;
            let outcome = metered(limits.memory, deadline, || std::panic::catch_unwind(AssertUnwindSafe(f)));
            let _ = tx.send(outcome.map_err(|panic| Stopped::Panicked(panic_message(panic.as_ref()))));
        });
        self.lock().push(namespace, job);
        self.ready.notify_one();
        // The job stops itself at its next checkpoint after the deadline; this outer timeout (queueing included)
        // only guards against a step that never reaches one.
        match tokio::time::timeout(limits.timeout * 10 + Duration::from_secs(5), rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(Stopped::Panicked("the evaluation thread stopped".into())),
            Err(_) => Err(Stopped::Late(limits.timeout)),
        }
    }
}

/// Why [`Pool::run`] returned no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The evaluation panicked (the message), or its thread went away: the thread is replaced.
    Panicked(String),
    /// No answer within ten times the timeout (plus 5 s): the thread is stuck where the budget cannot stop it.
    Late(Duration),
}

/// The text of a panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn runs_jobs_on_big_stacks_and_reports_panics() {
        let pool = Pool::new(1, Limits::default());
        fn deep(n: u32) -> u32 {
            let pad = std::hint::black_box([0u8; 1024]);
            if n == 0 { pad[0] as u32 } else { deep(n - 1) + pad[1] as u32 }
        }
        // ~20 MiB of stack: far beyond a tokio worker's 2 MiB.
        assert_eq!(pool.run("a", || deep(20_000)).await, Ok(0));
        let panicked = pool.run("a", || -> u32 { panic!("boom") }).await;
        assert_eq!(panicked, Err(Stopped::Panicked("boom".into())));
        assert_eq!(pool.run("a", || 7).await, Ok(7), "the thread survives a panic");
    }

    #[tokio::test]
    async fn the_deadline_is_seen_at_checkpoints() {
        let pool = Pool::new(1, Limits { timeout: Duration::from_millis(50), memory: usize::MAX });
        let outcome = pool
            .run("a", || {
                loop {
                    if let Some(why) = checkpoint() {
                        return why;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
            .await;
        assert_eq!(outcome, Ok(Exceeded::Time));
    }

    #[tokio::test]
    async fn namespaces_take_turns() {
        let pool = Pool::new(1, Limits::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        // Block the only thread so every job below queues first.
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let blocker = pool.run("x", move || {
            let _ = release_rx.recv();
        });
        let mut waiting = Vec::new();
        let pool_ref = &pool;
        for (ns, n) in [("greedy", 0), ("greedy", 1), ("greedy", 2), ("greedy", 3), ("polite", 0)] {
            let order = order.clone();
            waiting.push(async move { pool_ref.run(ns, move || order.lock().unwrap().push(format!("{ns}{n}"))).await });
        }
        let all = futures::future::join_all(waiting);
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = release_tx.send(());
        };
        let (_, _, results) = tokio::join!(blocker, release, all);
        assert!(results.iter().all(Result::is_ok));
        let order = order.lock().unwrap().clone();
        let polite = order.iter().position(|o| o == "polite0").unwrap();
        assert!(polite <= 1, "the second namespace is served after at most one job of the first: {order:?}");
    }
}
