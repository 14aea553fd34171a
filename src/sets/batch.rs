//! Micro-batching: small requests for the same computation that arrive
//! together from many threads are coalesced into one call, and each
//! caller gets its own rows back.
//!
//! There is no batching thread. The first request of a batch leads it: it
//! waits (at most [`Batching::max_wait`]) while others join, then runs the
//! whole batch on its own thread and hands every member its rows. A batch
//! closes early when it holds [`Batching::max_batch_rows`] rows, or as soon
//! as fewer than [`Batching::concurrent_batches`] batches of its kind are
//! running (then waiting would only idle the device). Several batches can
//! run at once; the lock is held only to join or close a batch, never
//! while one runs.
//!
//! Requests are validated before they join, so a batch fails only for
//! reasons that are not its members' fault (memory, device). Then every
//! member runs its own request alone and gets its own result or error.
//!
//! Cancellation: a batch runs under a token cancelled only when every
//! member's is (one caller giving up does not fail the others), and a
//! member whose own token is cancelled stops waiting for its batch at once
//! with [`Error::Cancelled`](crate::Error::Cancelled).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ndarray::{ArrayView2, s};

use crate::cancel::{CancelToken, Checkpoint, POLL};
use crate::error::Result;
use crate::matrix::{Matrix, try_owned};
use crate::types::{Neighbours, RowNormalized, RowStates};

/// How a [`KeySet`](crate::KeySet) coalesces concurrent small requests.
///
/// ```
/// use std::time::Duration;
/// use locus::Batching;
/// let b = Batching { max_wait: Duration::from_micros(500), ..Batching::default() };
/// assert!(b.enabled);
/// assert!(!Batching::off().enabled);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Whether requests are coalesced at all.
    pub enabled: bool,
    /// Longest a batch waits for more requests after its first one
    /// arrived (default 1 ms).
    pub max_wait: Duration,
    /// Most query rows in one batch (default 4096); a full batch runs at once.
    pub max_batch_rows: usize,
    /// Requests with at least this many query rows skip batching and run
    /// at once on the caller's thread (default 1024).
    pub direct_rows: usize,
    /// Batches (and direct requests) of one kind that may run at once
    /// before a new batch waits to fill (default 2): with fewer running, a
    /// new batch starts at once, so a lone request is never delayed, and
    /// one batch can fill while another runs.
    pub concurrent_batches: usize,
}

impl Batching {
    /// No batching: every request runs on its caller's thread at once.
    pub fn off() -> Self {
        Batching {
            enabled: false,
            ..Batching::default()
        }
    }
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            enabled: true,
            max_wait: Duration::from_millis(1),
            max_batch_rows: 4096,
            direct_rows: 1024,
            concurrent_batches: 2,
        }
    }
}

/// Counters of how requests were served (see [`KeySet::stats`](crate::KeySet::stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Requests that ran alone at once: batching off, or large requests.
    pub direct: u64,
    /// Batches run (a batch of one request counts).
    pub batches: u64,
    /// Requests served through batches.
    pub batched_requests: u64,
    /// Most requests in one batch.
    pub largest_batch: u64,
    /// Requests run again alone because their batch failed.
    pub retried_alone: u64,
}

impl BatchStats {
    /// Adds another set of counters (the largest batch is the larger one).
    pub(crate) fn add(&mut self, o: &BatchStats) {
        self.direct += o.direct;
        self.batches += o.batches;
        self.batched_requests += o.batched_requests;
        self.largest_batch = self.largest_batch.max(o.largest_batch);
        self.retried_alone += o.retried_alone;
    }
}

/// The op a batch's allocations report.
const OP: &str = "key_set";

/// A result whose rows belong to the queries in the same order, so a
/// batch's result can be cut into its members' results.
pub(crate) trait Rows: Send + Sync + Sized {
    /// Rows `r0..r1` as a result of their own (or
    /// [`Error::TooLarge`](crate::Error::TooLarge) when the copy cannot be
    /// allocated).
    fn rows(&self, r0: usize, r1: usize) -> Result<Self>;
}

impl Rows for RowNormalized {
    fn rows(&self, r0: usize, r1: usize) -> Result<Self> {
        let values = try_owned(OP, "rows", self.values.slice(s![r0..r1, ..]))?;
        // NaN marks exactly the empty rows (inputs are finite).
        let empty_rows = values
            .rows()
            .into_iter()
            .filter(|r| r.first().is_some_and(|v| v.is_nan()))
            .count();
        Ok(RowNormalized { values, empty_rows })
    }
}

impl Rows for RowStates {
    fn rows(&self, r0: usize, r1: usize) -> Result<Self> {
        Ok(RowStates {
            max_log_weight: try_owned(OP, "rows", self.max_log_weight.slice(s![r0..r1]))?,
            sum: try_owned(OP, "rows", self.sum.slice(s![r0..r1]))?,
            weighted: try_owned(OP, "rows", self.weighted.slice(s![r0..r1, ..]))?,
        })
    }
}

impl Rows for Neighbours {
    fn rows(&self, r0: usize, r1: usize) -> Result<Self> {
        Ok(Neighbours {
            indices: try_owned(OP, "rows", self.indices.slice(s![r0..r1, ..]))?,
            distances: try_owned(OP, "rows", self.distances.slice(s![r0..r1, ..]))?,
        })
    }
}

/// What the members of a batch receive.
enum Delivery<T> {
    /// The batch's result; each member takes its rows.
    Done(T),
    /// The batch failed (or its leader gave up): run alone.
    Alone,
}

/// Where a batch's members wait for its result.
struct Outcome<T> {
    slot: Mutex<Option<Arc<Delivery<T>>>>,
    ready: Condvar,
}

impl<T> Outcome<T> {
    fn new() -> Self {
        Outcome {
            slot: Mutex::new(None),
            ready: Condvar::new(),
        }
    }

    fn deliver(&self, d: Delivery<T>) {
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(d));
        self.ready.notify_all();
    }

    /// Waits for the delivery, or until `cp` is cancelled (looked at
    /// every [`POLL`]; a member that cannot be cancelled just waits).
    fn wait(&self, cp: &Checkpoint) -> Result<Arc<Delivery<T>>> {
        let mut g = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            // A cancelled member is answered `Cancelled` even when its
            // batch has already delivered.
            cp.check()?;
            if let Some(d) = g.as_ref() {
                return Ok(Arc::clone(d));
            }
            g = match cp.token() {
                Some(_) => {
                    self.ready
                        .wait_timeout(g, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.ready.wait(g).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// The leader's promise to its members: if it is dropped unkept (the
/// leader unwound), they are told to run alone instead of waiting forever.
struct Promise<T> {
    outcome: Arc<Outcome<T>>,
    kept: bool,
}

impl<T> Promise<T> {
    fn keep(mut self, d: Delivery<T>) {
        self.outcome.deliver(d);
        self.kept = true;
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        if !self.kept {
            self.outcome.deliver(Delivery::Alone);
        }
    }
}

/// A batch still taking members.
struct Open<T> {
    queries: Vec<f32>,
    rows: usize,
    members: usize,
    /// The members' cancellation tokens (`None` once a member that cannot
    /// cancelled, so neither can the batch).
    tokens: Option<Vec<CancelToken>>,
    full: bool,
    outcome: Arc<Outcome<T>>,
}

struct Pending<K, T> {
    /// The batch taking members, per computation.
    open: HashMap<K, u64>,
    /// Batches not yet closed by their leaders, by id.
    batches: HashMap<u64, Open<T>>,
    next_id: u64,
    /// Batches and direct requests running now.
    running: usize,
    stats: BatchStats,
}

/// Coalesces requests with equal keys `K` (the computation: op, kernel,
/// value columns) whose results are `T`.
pub(crate) struct Batcher<K, T> {
    opts: Batching,
    pending: Mutex<Pending<K, T>>,
    wake: Condvar,
}

impl<K, T> std::fmt::Debug for Batcher<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl<K, T> Batcher<K, T> {
    fn lock(&self) -> MutexGuard<'_, Pending<K, T>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Counts a running batch or request until dropped, then wakes the
/// leaders waiting for the device to go idle.
struct Running<'a, K, T>(&'a Batcher<K, T>);

impl<K, T> Drop for Running<'_, K, T> {
    fn drop(&mut self) {
        let mut p = self.0.lock();
        p.running -= 1;
        drop(p);
        self.0.wake.notify_all();
    }
}

impl<K: Hash + Eq + Copy, T: Rows> Batcher<K, T> {
    pub(crate) fn new(opts: Batching) -> Self {
        Batcher {
            opts,
            pending: Mutex::new(Pending {
                open: HashMap::new(),
                batches: HashMap::new(),
                next_id: 0,
                running: 0,
                stats: BatchStats::default(),
            }),
            wake: Condvar::new(),
        }
    }

    /// How requests were served so far.
    pub(crate) fn stats(&self) -> BatchStats {
        self.lock().stats
    }

    /// Marks one more batch or request as running (the lock is held).
    fn start<'a>(&'a self, p: &mut Pending<K, T>) -> Running<'a, K, T> {
        p.running += 1;
        Running(self)
    }

    /// Answers `queries` (validated) with `run`, alone or as part of a
    /// batch of requests with the same `key`; `run` computes any rows.
    pub(crate) fn submit(
        &self,
        key: K,
        queries: &Matrix<'_>,
        run: &dyn Fn(&Matrix<'_>) -> Result<T>,
    ) -> Result<T> {
        let rows = queries.rows();
        let cp = Checkpoint::current("batched request");
        // Already cancelled: neither run nor joined.
        cp.check()?;
        let mut p = self.lock();
        if !self.opts.enabled || rows >= self.opts.direct_rows || rows >= self.opts.max_batch_rows {
            p.stats.direct += 1;
            let _running = self.start(&mut p);
            drop(p);
            return run(queries);
        }
        // Join the open batch for this key if it has room; close it if not.
        if let Some(id) = p.open.get(&key).copied() {
            let max = self.opts.max_batch_rows;
            let joined = match p.batches.get_mut(&id) {
                Some(b) if b.rows + rows <= max => {
                    let r0 = b.rows;
                    b.queries.extend_from_slice(queries.as_slice());
                    b.rows += rows;
                    b.members += 1;
                    b.tokens = b.tokens.take().zip(cp.token().cloned()).map(|(mut ts, t)| {
                        ts.push(t);
                        ts
                    });
                    b.full = b.rows >= max;
                    Some((r0, b.full, Arc::clone(&b.outcome)))
                }
                Some(b) => {
                    b.full = true;
                    None
                }
                None => None,
            };
            match joined {
                Some((r0, full, outcome)) => {
                    if full {
                        p.open.remove(&key);
                        self.wake.notify_all();
                    }
                    drop(p);
                    return self.follow(&outcome, r0, rows, queries, run, &cp);
                }
                None => {
                    p.open.remove(&key);
                    self.wake.notify_all();
                }
            }
        }
        // Lead a new batch.
        let id = p.next_id;
        p.next_id += 1;
        let outcome = Arc::new(Outcome::new());
        p.batches.insert(
            id,
            Open {
                queries: queries.as_slice().to_vec(),
                rows,
                members: 1,
                tokens: cp.token().cloned().map(|t| vec![t]),
                full: false,
                outcome: Arc::clone(&outcome),
            },
        );
        p.open.insert(key, id);
        let promise = Promise {
            outcome,
            kept: false,
        };
        let deadline = Instant::now() + self.opts.max_wait;
        loop {
            let full = p.batches.get(&id).is_none_or(|b| b.full);
            let now = Instant::now();
            if full || p.running < self.opts.concurrent_batches || now >= deadline {
                break;
            }
            p = self
                .wake
                .wait_timeout(p, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if p.open.get(&key) == Some(&id) {
            p.open.remove(&key);
        }
        let batch = p.batches.remove(&id);
        let members = batch.as_ref().map_or(1, |b| b.members);
        p.stats.batches += 1;
        p.stats.batched_requests += members as u64;
        p.stats.largest_batch = p.stats.largest_batch.max(members as u64);
        let running = self.start(&mut p);
        drop(p);
        let batch = match batch {
            Some(b) if b.members > 1 => b,
            _ => {
                // Alone after all: no copy, nobody to deliver to.
                let out = run(queries);
                drop(running);
                promise.keep(Delivery::Alone);
                return out;
            }
        };
        let result = ArrayView2::from_shape((batch.rows, queries.cols()), &batch.queries[..])
            .map_err(|e| crate::error::Error::InvalidParameter {
                name: "queries",
                reason: format!("batch of {} rows: {e}", batch.rows),
            })
            .and_then(|v| Matrix::check("batch", "queries", v))
            .and_then(|m| {
                // Cancelled only when every member is.
                CancelToken::all_of(batch.tokens.clone().unwrap_or_default()).run(|| run(&m))
            });
        drop(running);
        match result {
            Ok(out) => {
                let mine = out.rows(0, rows);
                promise.keep(Delivery::Done(out));
                // The leader's own cancel (the batch ran for the others).
                cp.check()?;
                mine
            }
            // Every member was cancelled: each finds its own token
            // cancelled when it runs alone, and nothing is retried.
            Err(e @ crate::error::Error::Cancelled { .. }) => {
                promise.keep(Delivery::Alone);
                Err(e)
            }
            Err(_) => {
                self.lock().stats.retried_alone += batch.members as u64;
                promise.keep(Delivery::Alone);
                self.alone(queries, run)
            }
        }
    }

    /// Waits for the batch joined at row `r0` and takes this member's rows.
    fn follow(
        &self,
        outcome: &Outcome<T>,
        r0: usize,
        rows: usize,
        queries: &Matrix<'_>,
        run: &dyn Fn(&Matrix<'_>) -> Result<T>,
        cp: &Checkpoint,
    ) -> Result<T> {
        match &*outcome.wait(cp)? {
            Delivery::Done(out) => out.rows(r0, r0 + rows),
            Delivery::Alone => self.alone(queries, run),
        }
    }

    /// Runs one request by itself (after its batch failed).
    fn alone(&self, queries: &Matrix<'_>, run: &dyn Fn(&Matrix<'_>) -> Result<T>) -> Result<T> {
        let running = self.start(&mut self.lock());
        let out = run(queries);
        drop(running);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use ndarray::Array2;
    use std::sync::Barrier;

    /// A fake computation: row i of the result is the query row's sum
    /// (empty when the sum is negative); fails on batches above `fail_above` rows.
    fn fake(m: &Matrix<'_>, fail_above: usize) -> Result<RowNormalized> {
        if m.rows() > fail_above {
            return Err(Error::MemoryLimit {
                op: "test",
                what: "batch",
                bytes: 1,
                in_use: 0,
                limit: 0,
            });
        }
        let v = Array2::from_shape_fn((m.rows(), 1), |(i, _)| {
            let s: f32 = m.row_range(i, i + 1).iter().sum();
            if s < 0.0 { f32::NAN } else { s }
        });
        let empty_rows = v.iter().filter(|x| x.is_nan()).count();
        Ok(RowNormalized {
            values: v,
            empty_rows,
        })
    }

    fn request(t: usize, r: usize) -> Array2<f32> {
        // Thread 3's second row is "empty" (negative sum).
        Array2::from_shape_fn((r, 2), |(i, j)| {
            let v = (t * 100 + i * 10 + j) as f32;
            if t == 3 && i == 1 { -v - 1.0 } else { v }
        })
    }

    fn run_threads(b: &Batcher<u8, RowNormalized>, fail_above: usize) {
        let threads = 8;
        let barrier = Barrier::new(threads);
        std::thread::scope(|s| {
            for t in 0..threads {
                let barrier = &barrier;
                s.spawn(move || {
                    let q = request(t, 1 + t % 3);
                    let m = Matrix::check("t", "queries", q.view()).unwrap();
                    barrier.wait();
                    let got = b.submit(0, &m, &|x| fake(x, fail_above)).unwrap();
                    let want = fake(&m, usize::MAX).unwrap();
                    assert_eq!(got.values.dim(), want.values.dim());
                    for (g, w) in got.values.iter().zip(&want.values) {
                        assert!(g == w || (g.is_nan() && w.is_nan()), "thread {t}");
                    }
                    assert_eq!(got.empty_rows, want.empty_rows, "thread {t}");
                });
            }
        });
    }

    /// `run_threads` while one running request keeps a batch open for
    /// the others (for 50 ms), and the counters after.
    fn run_threads_into_an_open_batch(fail_above: usize) -> BatchStats {
        let b = Batcher::new(Batching {
            max_wait: Duration::from_millis(200),
            concurrent_batches: 1,
            ..Batching::default()
        });
        let busy = b.start(&mut b.lock());
        std::thread::scope(|s| {
            s.spawn(|| run_threads(&b, fail_above));
            std::thread::sleep(Duration::from_millis(50));
            drop(busy);
        });
        b.stats()
    }

    #[test]
    fn members_get_their_own_rows() {
        let st = run_threads_into_an_open_batch(usize::MAX);
        assert_eq!(st.batched_requests, 8);
        assert!(st.batches < 8, "{st:?}");
        assert!(st.largest_batch > 1, "{st:?}");
    }

    #[test]
    fn a_failed_batch_runs_each_member_alone() {
        let st = run_threads_into_an_open_batch(3);
        assert!(st.retried_alone > 0, "{st:?}");
    }

    #[test]
    fn full_batches_close_and_large_requests_go_direct() {
        let b = Batcher::new(Batching {
            max_wait: Duration::from_secs(5),
            max_batch_rows: 4,
            direct_rows: 3,
            concurrent_batches: 1,
            ..Batching::default()
        });
        let busy = b.start(&mut b.lock());
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for t in 0..4 {
                let b = &b;
                s.spawn(move || {
                    let q = request(2 * t, 2); // no empty rows (NaN ≠ NaN)
                    let m = Matrix::check("t", "queries", q.view()).unwrap();
                    let got = b.submit(0, &m, &|x| fake(x, usize::MAX)).unwrap();
                    assert_eq!(got.values, fake(&m, usize::MAX).unwrap().values);
                });
            }
        });
        // Two full batches of two requests each ran without waiting 5 s.
        assert!(t0.elapsed() < Duration::from_secs(4));
        let q = request(9, 3);
        let m = Matrix::check("t", "queries", q.view()).unwrap();
        b.submit(0, &m, &|x| fake(x, usize::MAX)).unwrap();
        drop(busy);
        let st = b.stats();
        assert_eq!((st.direct, st.batched_requests, st.batches), (1, 4, 2));
    }

    #[test]
    fn without_batching_everything_is_direct() {
        let b: Batcher<u8, RowNormalized> = Batcher::new(Batching::off());
        run_threads(&b, usize::MAX);
        assert_eq!(b.stats().direct, 8);
        assert_eq!(b.stats().batches, 0);
    }
}
