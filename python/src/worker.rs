//! The thread that runs the interpreter's main-thread calls, so the main
//! thread can watch for Ctrl-C meanwhile.
//!
//! One thread, started on the first such call and kept: a thread spawned
//! per call cost about 45 µs, more than a small call's own work. Jobs may
//! borrow from the caller's stack because [`run`] never returns, nor
//! unwinds, before the job has finished. After a `fork` the child has no
//! worker (only the forking thread survives), so a new one is started
//! there.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// A job with its borrows' lifetime erased (see [`run`]).
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The worker's queue, and the process it was started in.
struct Worker {
    pid: u32,
    jobs: Sender<Job>,
}

static WORKER: Mutex<Option<Worker>> = Mutex::new(None);

/// Where a job leaves its outcome.
pub(crate) struct Slot<R> {
    outcome: Mutex<Option<std::thread::Result<R>>>,
    filled: Condvar,
}

impl<R> Slot<R> {
    fn lock(&self) -> MutexGuard<'_, Option<std::thread::Result<R>>> {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `timeout` for the job to finish; whether it has.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let g = self.lock();
        let (g, _) = self
            .filled
            .wait_timeout_while(g, timeout, |o| o.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        g.is_some()
    }

    fn done(&self) -> bool {
        self.lock().is_some()
    }
}

/// Waits for the job to finish when dropped, so nothing the job borrows
/// goes away under it, however [`run`] is left.
struct Joined<'a, R>(&'a Slot<R>);

impl<R> Drop for Joined<'_, R> {
    fn drop(&mut self) {
        while !self.0.wait(Duration::from_secs(3600)) {}
    }
}

/// The worker's queue in this process, starting the worker if there is
/// none (or it was started before a `fork`); `None` if no thread can be
/// started. The lock is held only to read or install the queue, never
/// while a thread starts, so a `fork` from another thread finds it held
/// for at most those few instructions.
fn queue() -> Option<Sender<Job>> {
    let pid = std::process::id();
    let current = || {
        let w = WORKER.lock().unwrap_or_else(PoisonError::into_inner);
        w.as_ref().filter(|w| w.pid == pid).map(|w| w.jobs.clone())
    };
    if let Some(jobs) = current() {
        return Some(jobs);
    }
    let (jobs, rx) = channel::<Job>();
    std::thread::Builder::new()
        .name("locus-calls".into())
        .spawn(move || {
            while let Ok(job) = rx.recv() {
                job();
            }
        })
        .ok()?;
    let mut w = WORKER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(theirs) = w.as_ref().filter(|w| w.pid == pid) {
        // Another thread installed a worker meanwhile: use it; ours ends
        // when its queue's only sender is dropped here.
        return Some(theirs.jobs.clone());
    }
    *w = Some(Worker {
        pid,
        jobs: jobs.clone(),
    });
    Some(jobs)
}

/// Runs `f` on the worker thread and returns its outcome (a panic caught),
/// calling `poll` with the job's [`Slot`] until the job has finished:
/// `poll` waits on it (`Slot::wait`) and does whatever the caller watches
/// for meanwhile. Where no worker can be started, `f` runs here.
pub(crate) fn run<R, F>(f: F, mut poll: impl FnMut(&Slot<R>)) -> std::thread::Result<R>
where
    R: Send,
    F: FnOnce() -> R + Send,
{
    let Some(jobs) = queue() else {
        return catch_unwind(AssertUnwindSafe(f));
    };
    let slot = Arc::new(Slot {
        outcome: Mutex::new(None),
        filled: Condvar::new(),
    });
    let theirs = Arc::clone(&slot);
    let job = move || {
        // `f` and its borrows are gone before the outcome is visible.
        let out = catch_unwind(AssertUnwindSafe(f));
        *theirs.lock() = Some(out);
        theirs.filled.notify_all();
    };
    let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
    // SAFETY: the job borrows what `f` borrows, which outlives this call.
    // The job is run exactly once (by the worker, or below when the queue
    // is closed), and this function does not return or unwind before its
    // outcome is in the slot (`Joined` waits for it on every way out), by
    // which time `f` has been consumed and dropped. The slot itself is
    // shared through an `Arc`, so the worker's last touches of it (the
    // notification, the drop of its `Arc`) never reach freed memory.
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
    let joined = Joined(&slot);
    if let Err(returned) = jobs.send(job) {
        // The worker has gone (it never exits while its queue is open):
        // run the job here, without the watch.
        (returned.0)();
    }
    while !slot.done() {
        poll(&slot);
    }
    drop(joined);
    let out = slot.lock().take();
    out.unwrap_or_else(|| Err(Box::new("the call's outcome was lost")))
}
