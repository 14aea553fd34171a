//! The threads an engine's CPU work runs on: rayon's global pool, or a
//! pool of the engine's own, built once when the engine is
//! ([`EngineOptions::threads`](crate::EngineOptions::threads)).
//!
//! Every parallel piece of CPU work enters it through [`Threads::install`],
//! which carries the calling thread's cancellation token into the pool:
//! the token is a thread-local ([`CancelToken::run`]), and a pool's
//! workers are other threads. Only computation is installed, never a wait
//! for memory under the engine's limit: a worker blocked on memory held by
//! a call queued behind it in the same pool would wait for nothing.
//!
//! A pool's threads do not survive `fork` (Python's `multiprocessing`
//! forks by default on Linux before 3.14): in a child, work sent to a pool
//! started before the fork — the engine's own or rayon's global one —
//! would wait forever. So each pool remembers the process it was started
//! in, and in another process the work runs on a pool of the same size
//! started there (one per size and process, kept).
//!
//! Imports: `crate::cancel`, `crate::error`.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::cancel::CancelToken;
use crate::error::{Error, Result};

/// Rayon's global pool (`None`), or the engine's own, and the process
/// that started it.
#[derive(Clone, Default)]
pub(crate) struct Threads {
    pool: Option<Arc<rayon::ThreadPool>>,
    pid: u32,
}

/// The process that first ran work on rayon's global pool through
/// [`Threads::install`].
static GLOBAL_POOL_PID: OnceLock<u32> = OnceLock::new();

/// Pools started in a forked child for work whose pool was started before
/// the fork: `(process, threads, pool)`.
static FORKED: Mutex<Vec<(u32, usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());

/// A pool of `n` threads (0: rayon's default count) named `locus-cpu-i`.
fn build_pool(n: usize) -> std::result::Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("locus-cpu-{i}"))
        .build()
}

/// This process's pool of `n` threads for work whose pool was started in
/// another process (before a `fork`), started on first use. Where not even
/// one thread can be started, there is no thread left to run the work on.
fn forked_pool(n: usize) -> Arc<rayon::ThreadPool> {
    let pid = std::process::id();
    let mut pools = FORKED.lock().unwrap_or_else(PoisonError::into_inner);
    pools.retain(|(p, _, _)| *p == pid);
    if let Some((_, _, pool)) = pools.iter().find(|(_, k, _)| *k == n) {
        return Arc::clone(pool);
    }
    let pool = match build_pool(n).or_else(|_| build_pool(1)) {
        Ok(p) => Arc::new(p),
        Err(e) => panic!("cannot start a CPU thread in this process (after a fork): {e}"),
    };
    pools.push((pid, n, Arc::clone(&pool)));
    pool
}

impl std::fmt::Debug for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("own_pool", &self.pool.is_some())
            .field("count", &self.count())
            .finish()
    }
}

impl Threads {
    /// `count` threads of the engine's own (`None`: rayon's global pool,
    /// sized by `RAYON_NUM_THREADS` or the machine's cores).
    ///
    /// # Errors
    /// [`Error::InvalidParameter`] for more threads than rayon allows
    /// ([`rayon::max_num_threads`]); [`Error::ThreadPool`] when the
    /// system cannot start them.
    pub(crate) fn new(count: Option<NonZeroUsize>) -> Result<Self> {
        let pid = std::process::id();
        let Some(count) = count else {
            return Ok(Threads { pool: None, pid });
        };
        let n = count.get();
        let max = rayon::max_num_threads();
        if n > max {
            return Err(Error::InvalidParameter {
                name: "threads",
                reason: format!("{n} threads asked for; rayon runs at most {max}"),
            });
        }
        let pool = build_pool(n).map_err(|e| Error::ThreadPool {
            threads: n,
            reason: e.to_string(),
        })?;
        Ok(Threads {
            pool: Some(Arc::new(pool)),
            pid,
        })
    }

    /// How many threads the work runs on.
    pub(crate) fn count(&self) -> usize {
        match &self.pool {
            Some(p) => p.current_num_threads(),
            None => rayon::current_num_threads(),
        }
    }

    /// Runs `f` in the pool (on the global pool: where it is), with the
    /// calling thread's cancellation token current in it; the caller
    /// waits for the result. Called from one of the pool's own workers, `f`
    /// runs right there.
    /// In a process forked after the pool started, `f` runs on a pool of
    /// the same size started in this process.
    pub(crate) fn install<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let pid = std::process::id();
        let forked;
        let pool = match &self.pool {
            Some(pool) if self.pid == pid => pool,
            Some(pool) => {
                forked = forked_pool(pool.current_num_threads());
                &forked
            }
            None if *GLOBAL_POOL_PID.get_or_init(|| pid) == pid => return f(),
            None => {
                forked = forked_pool(0);
                &forked
            }
        };
        let token = CancelToken::current();
        pool.install(move || match token {
            Some(t) => t.run(f),
            None => f(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cancel::Checkpoint;

    #[test]
    fn the_global_pool_is_the_default_and_runs_in_place() {
        let t = Threads::new(None).unwrap();
        assert_eq!(t.count(), rayon::current_num_threads());
        let here = std::thread::current().id();
        assert_eq!(t.install(|| std::thread::current().id()), here);
    }

    #[test]
    fn an_own_pool_has_its_count_and_its_own_threads() {
        let t = Threads::new(NonZeroUsize::new(3)).unwrap();
        assert_eq!(t.count(), 3);
        let (n, name) = t.install(|| {
            let name = std::thread::current().name().map(str::to_owned);
            (rayon::current_num_threads(), name)
        });
        assert_eq!(n, 3);
        assert!(name.is_some_and(|s| s.starts_with("locus-cpu-")));
        // Clones share the pool; nested installs run in place.
        let c = t.clone();
        let outer = t.install(|| {
            (
                std::thread::current().id(),
                c.install(|| std::thread::current().id()),
            )
        });
        assert_eq!(outer.0, outer.1);
    }

    #[test]
    fn the_calling_threads_token_is_current_in_the_pool() {
        let t = Threads::new(NonZeroUsize::new(1)).unwrap();
        let token = CancelToken::new();
        token.cancel();
        let seen = token.run(|| t.install(|| Checkpoint::current("t").is_cancelled()));
        assert!(seen);
        // And none outside a run.
        assert!(!t.install(|| Checkpoint::current("t").is_cancelled()));
    }

    #[test]
    fn too_many_threads_is_a_parameter_error() {
        let n = NonZeroUsize::new(rayon::max_num_threads() + 1).unwrap();
        assert!(matches!(
            Threads::new(Some(n)),
            Err(Error::InvalidParameter {
                name: "threads",
                ..
            })
        ));
    }
}
