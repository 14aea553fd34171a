//! Cancellation: a token a caller (or a signal handler, or a deadline)
//! sets, which every op checks between blocks of work.
//!
//! A call is cancelled by running it inside [`CancelToken::run`]: the op
//! reads the token once, on the calling thread, when it starts, and hands
//! it to the work it fans out (rayon tasks, GPU dispatch windows, MeanShift
//! iterations). Each piece of work checks it before it starts, so a
//! cancelled call stops within one block of work and returns
//! [`Error::Cancelled`]: nothing half-written is returned, and the engine,
//! its buffers and its key sets stay usable.
//!
//! ```
//! use locus::{CancelToken, Engine, Error, Kernel, Profile};
//! use ndarray::Array2;
//!
//! let engine = Engine::cpu();
//! let x = Array2::from_shape_fn((100, 2), |(i, j)| (i * 3 + j) as f32);
//! let kernel = Kernel::new(Profile::Gaussian, 3.0)?;
//! let token = CancelToken::new();
//! token.cancel();
//! let out = token.run(|| engine.self_local_mean(&kernel, x.view()));
//! assert!(matches!(out, Err(Error::Cancelled { .. })));
//! // The engine is untouched: the same call without the token runs.
//! assert!(engine.self_local_mean(&kernel, x.view()).is_ok());
//! # Ok::<(), locus::Error>(())
//! ```

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A shared request to stop: cancelled by [`cancel`](Self::cancel) from
/// any thread, or by its deadline passing. Clones share one state.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cancelled: AtomicBool,
    deadline: Option<Instant>,
    /// Work shared by several callers: cancelled once every one of these
    /// is (none: only by this token's own flag or deadline).
    all_of: Vec<CancelToken>,
    /// Tests: the threads that looked at the token, and their names.
    #[cfg(test)]
    seen:
        Option<std::sync::Mutex<std::collections::HashMap<std::thread::ThreadId, Option<String>>>>,
}

/// How often a thread that waits (for memory, for its batch) looks at its
/// cancellation token.
pub(crate) const POLL: Duration = Duration::from_millis(50);

thread_local! {
    /// The token of the innermost [`CancelToken::run`] on this thread.
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

impl CancelToken {
    /// A token that stops nothing until [`cancel`](Self::cancel) is called.
    pub fn new() -> Self {
        Self::default()
    }

    /// A token that is cancelled once `deadline` has passed (or earlier, by
    /// [`cancel`](Self::cancel)).
    pub fn with_deadline(deadline: Instant) -> Self {
        Self {
            inner: Arc::new(Inner {
                deadline: Some(deadline),
                ..Inner::default()
            }),
        }
    }

    /// A token cancelled `timeout` from now.
    pub fn with_timeout(timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => Self::with_deadline(deadline),
            None => Self::new(),
        }
    }

    /// Asks every call running under this token (and every later one) to
    /// stop. Safe from any thread; calling it again does nothing more.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::Release);
    }

    /// A token for work done on behalf of several callers (a batch of
    /// their requests): cancelled when every one of `tokens` is, or by its
    /// own [`cancel`](Self::cancel). With no tokens it is never cancelled
    /// but by its own flag.
    pub(crate) fn all_of(tokens: Vec<CancelToken>) -> Self {
        Self {
            inner: Arc::new(Inner {
                all_of: tokens,
                ..Inner::default()
            }),
        }
    }

    /// The token of the innermost [`run`](Self::run) on this thread, if
    /// any (to carry it into another thread pool).
    pub(crate) fn current() -> Option<CancelToken> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Whether the token was cancelled or its deadline has passed.
    pub fn is_cancelled(&self) -> bool {
        #[cfg(test)]
        if let Some(seen) = &self.inner.seen {
            let t = std::thread::current();
            let mut seen = seen.lock().expect("not poisoned"); // ok: test probe
            seen.insert(t.id(), t.name().map(str::to_owned));
        }
        self.inner.cancelled.load(Ordering::Acquire)
            || self.inner.deadline.is_some_and(|d| Instant::now() >= d)
            || (!self.inner.all_of.is_empty()
                && self.inner.all_of.iter().all(CancelToken::is_cancelled))
    }

    /// The deadline given at construction, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// Runs `f` with this token as the current one on this thread: every
    /// locus op `f` calls on this thread checks it. Nested runs see the
    /// innermost token; the previous one is restored when `f` returns or
    /// unwinds.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Restore(Option<CancelToken>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        let _restore = Restore(previous);
        f()
    }

    /// `Err(Error::Cancelled)` naming `op` once the token is cancelled.
    pub fn check(&self, op: &'static str) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled {
                op,
                reason: self.reason(),
            })
        } else {
            Ok(())
        }
    }

    /// Tests: a token that records every thread that checks it (the
    /// threads an op's work ran on), read by [`threads_seen`](Self::threads_seen).
    #[cfg(test)]
    pub(crate) fn probe() -> Self {
        Self {
            inner: Arc::new(Inner {
                seen: Some(std::sync::Mutex::default()),
                ..Inner::default()
            }),
        }
    }

    /// Tests: the names of the threads that checked a [`probe`](Self::probe)
    /// token (`None` for an unnamed thread), one per thread.
    #[cfg(test)]
    pub(crate) fn threads_seen(&self) -> Vec<Option<String>> {
        let seen = self.inner.seen.as_ref().expect("a probe token");
        seen.lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect() // ok: test probe
    }

    fn reason(&self) -> &'static str {
        if self.inner.deadline.is_some_and(|d| Instant::now() >= d) {
            "deadline passed"
        } else {
            "cancelled"
        }
    }
}

/// What an op checks between blocks of work: the token current on the
/// thread that started the op (or none), and the op's name for the error.
/// Cheap to share with rayon tasks.
#[derive(Clone, Debug)]
pub(crate) struct Checkpoint {
    op: &'static str,
    token: Option<CancelToken>,
}

impl Checkpoint {
    /// The token current on this thread for `op` (read once where an op
    /// starts, before it fans out to other threads).
    pub(crate) fn current(op: &'static str) -> Self {
        Self {
            op,
            token: CancelToken::current(),
        }
    }

    /// The op's name.
    pub(crate) fn op(&self) -> &'static str {
        self.op
    }

    /// `Err(Error::Cancelled)` once the op's token is cancelled.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        match &self.token {
            Some(t) => t.check(self.op),
            None => Ok(()),
        }
    }

    /// Whether the op's token is cancelled: a task that sees it skips its
    /// work, and the op reports [`check`](Self::check)'s error once its
    /// tasks have returned.
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        self.token.as_ref().is_some_and(CancelToken::is_cancelled)
    }

    /// The token, if the op runs under one.
    pub(crate) fn token(&self) -> Option<&CancelToken> {
        self.token.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_sets_and_restores_the_current_token() {
        assert!(!Checkpoint::current("t").is_cancelled());
        let outer = CancelToken::new();
        let inner = CancelToken::new();
        inner.cancel();
        outer.run(|| {
            assert!(Checkpoint::current("t").check().is_ok());
            inner.run(|| assert!(Checkpoint::current("t").is_cancelled()));
            assert!(!Checkpoint::current("t").is_cancelled());
        });
        assert!(Checkpoint::current("t").token.is_none());
    }

    #[test]
    fn a_panic_inside_run_restores_the_previous_token() {
        let t = CancelToken::new();
        t.cancel();
        let caught = std::panic::catch_unwind(|| t.run(|| panic!("boom")));
        assert!(caught.is_err());
        assert!(Checkpoint::current("t").token.is_none());
    }

    #[test]
    fn a_deadline_cancels_once_passed() {
        let t = CancelToken::with_timeout(Duration::from_millis(20));
        assert!(t.check("t").is_ok());
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            t.check("t"),
            Err(Error::Cancelled {
                op: "t",
                reason: "deadline passed"
            })
        );
        let c = CancelToken::with_timeout(Duration::from_secs(60));
        c.cancel();
        assert!(matches!(
            c.check("t"),
            Err(Error::Cancelled {
                reason: "cancelled",
                ..
            })
        ));
    }

    #[test]
    fn a_shared_token_is_cancelled_once_all_its_callers_are() {
        let (a, b) = (CancelToken::new(), CancelToken::new());
        let both = CancelToken::all_of(vec![a.clone(), b.clone()]);
        a.cancel();
        assert!(!both.is_cancelled());
        b.cancel();
        assert!(both.is_cancelled());
        let own = CancelToken::all_of(Vec::new());
        assert!(!own.is_cancelled());
        own.cancel();
        assert!(own.is_cancelled());
    }

    #[test]
    fn clones_share_one_state_across_threads() {
        let t = CancelToken::new();
        let c = t.clone();
        std::thread::spawn(move || c.cancel()).join().unwrap();
        assert!(t.is_cancelled());
    }
}
