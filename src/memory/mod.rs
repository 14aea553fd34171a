//! A cap on the bytes an engine holds: device buffers on the GPU (in use,
//! idle in the pool, resident key sets), key sets and request working
//! memory on the CPU.
//!
//! **Admission.** Memory is of two uses: *resident* (key sets, attention
//! sets: held until the set is dropped) and *working* (a running call's
//! buffers or working memory: given back when it ends). A charge that can
//! never fit — more than the limit less the resident bytes — fails at
//! once with [`Error::MemoryLimit`]. One that would fit but for other
//! calls' working memory waits for it, up to the engine's
//! [`memory_wait`](crate::EngineOptions::memory_wait), and ends early with
//! [`Error::Cancelled`] when the calling thread's cancellation token is
//! cancelled (checked every [`POLL`](crate::cancel::POLL)).
//!
//! Waiters are served in the order they arrived (a ticket queue), so a
//! large request is not passed forever by a stream of small ones: while
//! one waits, later charges queue behind it even when they would fit.
//! The one exception is a thread already holding working memory of the
//! same budget (a call taking its second GPU buffer): it goes first, since
//! it is admitted already and ends by giving everything back. Two such
//! threads can hold what each other needs; when every thread holding
//! working memory is waiting, the one that came last fails at once, so
//! the others go on (the deadlock is broken, not waited out).

mod hold;

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cancel::{Checkpoint, POLL};
use crate::error::{Error, Result};
pub(crate) use hold::Hold;

/// How much memory an engine holds, against its limit
/// ([`EngineOptions::memory_limit`](crate::EngineOptions::memory_limit)).
///
/// On a GPU this counts every device buffer the engine created and has not
/// freed: resident key sets, buffers of running calls and idle buffers kept
/// for reuse (which are freed first when a new allocation would pass the
/// limit). On the CPU it counts key sets and the working memory of their
/// running requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Bytes held now.
    pub in_use: u64,
    /// Of which idle GPU buffers kept for reuse (freed on demand).
    pub idle: u64,
    /// The limit, if one was set.
    pub limit: Option<u64>,
}

/// What a charge is for: memory held until a set is dropped, or for the
/// length of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// A key set's or attention set's own data.
    Resident,
    /// A running call's buffers or working memory (and idle GPU buffers).
    Working,
}

/// The budget's books, under one lock.
#[derive(Debug)]
struct State {
    /// Bytes charged, of either use.
    in_use: u64,
    /// Of which resident.
    resident: u64,
    limit: Option<u64>,
    /// Longest a charge waits for memory others hold (zero: never).
    wait: Duration,
    /// Threads holding working memory of this budget (see [`Hold`]).
    holders: usize,
    /// Tickets of waiting charges from threads holding nothing here,
    /// oldest first.
    queue: VecDeque<u64>,
    /// Tickets of waiting charges from threads that hold working memory.
    holding_waiters: BTreeSet<u64>,
    next_ticket: u64,
}

impl State {
    fn fits(&self, bytes: u64) -> bool {
        self.limit
            .is_none_or(|l| self.in_use.saturating_add(bytes) <= l)
    }

    /// Whether `bytes` cannot fit even once every call has ended.
    fn never_fits(&self, bytes: u64) -> bool {
        self.limit
            .is_some_and(|l| bytes > l.saturating_sub(self.resident))
    }

    fn refused(&self, op: &'static str, what: &'static str, bytes: u64) -> Error {
        Error::MemoryLimit {
            op,
            what,
            bytes,
            in_use: self.in_use,
            limit: self.limit.unwrap_or(u64::MAX),
        }
    }

    fn take(&mut self, bytes: u64, use_: Use) {
        self.in_use += bytes;
        if use_ == Use::Resident {
            self.resident += bytes;
        }
    }
}

/// Bytes charged against an optional limit. Charges are taken before an
/// allocation and given back when it is freed; a charge that does not fit
/// now but could later waits (see the module's documentation).
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    id: u64,
    state: Mutex<State>,
    /// Notified whenever memory is given back or a waiter leaves.
    freed: Condvar,
    /// Charges waiting now (read without the lock by the GPU pool, which
    /// then frees buffers instead of keeping them idle).
    waiting: AtomicUsize,
}

impl MemoryBudget {
    /// A budget capped at `limit` (`None`: unlimited) whose charges fail at
    /// once when they do not fit.
    pub(crate) fn new(limit: Option<u64>) -> Self {
        MemoryBudget {
            id: hold::next_budget_id(),
            state: Mutex::new(State {
                in_use: 0,
                resident: 0,
                limit,
                wait: Duration::ZERO,
                holders: 0,
                queue: VecDeque::new(),
                holding_waiters: BTreeSet::new(),
                next_ticket: 0,
            }),
            freed: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the limit (`None`: unlimited). Existing charges stay.
    pub(crate) fn set_limit(&self, limit: Option<u64>) {
        self.lock().limit = limit;
        self.freed.notify_all();
    }

    /// Sets how long a charge that could fit later waits for memory others
    /// hold (zero: it fails at once).
    pub(crate) fn set_wait(&self, wait: Duration) {
        self.lock().wait = wait;
        self.freed.notify_all();
    }

    /// Bytes charged now, and the limit.
    pub(crate) fn usage(&self) -> (u64, Option<u64>) {
        let s = self.lock();
        (s.in_use, s.limit)
    }

    /// Whether some charge is waiting for memory now.
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// Charges `bytes` for `use_`. When they do not fit beside what is
    /// charged already, calls `reclaim` (which may give back memory held
    /// only for reuse) and, if they still do not fit, waits its turn for
    /// memory other calls hold.
    ///
    /// # Errors
    /// [`Error::MemoryLimit`] at once when `bytes` exceed the limit less
    /// the resident bytes, or when the budget does not wait; after the
    /// wait when it ran out, or when every thread holding working memory
    /// waits (this one came last). [`Error::Cancelled`] when the calling
    /// thread's cancellation token is cancelled while it waits.
    pub(crate) fn charge(
        &self,
        op: &'static str,
        what: &'static str,
        bytes: u64,
        use_: Use,
        reclaim: &dyn Fn(),
    ) -> Result<()> {
        let holding = hold::held_here(self.id);
        let mut s = self.lock();
        let free_to_go =
            |s: &State| holding || (s.queue.is_empty() && s.holding_waiters.is_empty());
        if s.fits(bytes) && free_to_go(&s) {
            s.take(bytes, use_);
            return Ok(());
        }
        drop(s);
        reclaim();
        s = self.lock();
        if s.fits(bytes) && free_to_go(&s) {
            s.take(bytes, use_);
            return Ok(());
        }
        if s.never_fits(bytes) || s.wait.is_zero() {
            return Err(s.refused(op, what, bytes));
        }
        let deadline = Instant::now().checked_add(s.wait);
        let ticket = s.next_ticket;
        s.next_ticket += 1;
        if holding {
            s.holding_waiters.insert(ticket);
        } else {
            s.queue.push_back(ticket);
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let token = Checkpoint::current(op);
        // Memory idled in the GPU pool before this charge queued (the pool
        // frees instead of idling once a charge waits) is given back once
        // per wake-up.
        let mut reclaimed = true;
        let out = loop {
            let turn = if holding {
                true
            } else {
                s.queue.front() == Some(&ticket) && s.holding_waiters.is_empty()
            };
            if turn && s.fits(bytes) {
                s.take(bytes, use_);
                break Ok(());
            }
            if s.never_fits(bytes) {
                break Err(s.refused(op, what, bytes));
            }
            if holding
                && s.holding_waiters.len() >= s.holders
                && s.holding_waiters.last() == Some(&ticket)
            {
                // Every thread holding working memory waits: nobody will
                // give any back. The last to come leaves.
                break Err(s.refused(op, what, bytes));
            }
            if let Err(e) = token.check() {
                break Err(e);
            }
            if !reclaimed {
                drop(s);
                reclaim();
                s = self.lock();
                reclaimed = true;
                continue;
            }
            let now = Instant::now();
            let slice = match deadline {
                Some(d) if now >= d => break Err(s.refused(op, what, bytes)),
                Some(d) => (d - now).min(POLL),
                None => POLL,
            };
            s = self
                .freed
                .wait_timeout(s, slice)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            reclaimed = false;
        };
        if holding {
            s.holding_waiters.remove(&ticket);
        } else if let Some(i) = s.queue.iter().position(|&t| t == ticket) {
            s.queue.remove(i);
        }
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        drop(s);
        // The queue's head may have changed (or memory was given back).
        self.freed.notify_all();
        out
    }

    /// Gives back `bytes` charged earlier for `use_`.
    pub(crate) fn release(&self, bytes: u64, use_: Use) {
        let mut s = self.lock();
        s.in_use = s.in_use.saturating_sub(bytes);
        if use_ == Use::Resident {
            s.resident = s.resident.saturating_sub(bytes);
        }
        drop(s);
        self.freed.notify_all();
    }

    /// Marks the calling thread as holding working memory of this budget
    /// while the returned guard lives (see [`Hold`]).
    pub(crate) fn hold(self: &Arc<Self>) -> Hold {
        Hold::new(self)
    }

    /// Charges `bytes` of a set's resident data for as long as the
    /// returned guard lives (see [`charge`](Self::charge)).
    pub(crate) fn reserve(
        self: &Arc<Self>,
        op: &'static str,
        what: &'static str,
        bytes: u64,
    ) -> Result<Reservation> {
        self.reserve_reclaiming(op, what, bytes, &|| {})
    }

    /// [`reserve`](Self::reserve), calling `reclaim` (which may give back
    /// memory held only for reuse) before waiting.
    pub(crate) fn reserve_reclaiming(
        self: &Arc<Self>,
        op: &'static str,
        what: &'static str,
        bytes: u64,
        reclaim: &dyn Fn(),
    ) -> Result<Reservation> {
        self.charge(op, what, bytes, Use::Resident, reclaim)?;
        Ok(Reservation {
            budget: Arc::clone(self),
            bytes,
            use_: Use::Resident,
            _hold: None,
        })
    }

    /// Charges `bytes` of resident data, as [`reserve`](Self::reserve),
    /// only when they fit now with `headroom` more bytes left free and
    /// nobody waiting: never waits, `None` otherwise (for optional data
    /// such as a spatial index, which its owner can do without, and which
    /// must not take the room requests need).
    pub(crate) fn reserve_if_free(
        self: &Arc<Self>,
        bytes: u64,
        headroom: u64,
    ) -> Option<Reservation> {
        let mut s = self.lock();
        let free = s.queue.is_empty() && s.holding_waiters.is_empty();
        if !(free && s.fits(bytes.saturating_add(headroom))) {
            return None;
        }
        s.take(bytes, Use::Resident);
        Some(Reservation {
            budget: Arc::clone(self),
            bytes,
            use_: Use::Resident,
            _hold: None,
        })
    }

    /// Charges `bytes` of a call's working memory for as long as the
    /// returned guard lives, the calling thread marked as holding them
    /// (see [`charge`](Self::charge)).
    pub(crate) fn reserve_working(
        self: &Arc<Self>,
        op: &'static str,
        what: &'static str,
        bytes: u64,
    ) -> Result<Reservation> {
        self.charge(op, what, bytes, Use::Working, &|| {})?;
        Ok(Reservation {
            budget: Arc::clone(self),
            bytes,
            use_: Use::Working,
            _hold: Some(self.hold()),
        })
    }
}

/// A charge on a [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
    use_: Use,
    /// For working memory: the mark that the reserving thread holds it
    /// (dropped after the bytes are given back).
    _hold: Option<Hold>,
}

impl Reservation {
    /// Bytes charged.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The budget charged.
    pub(crate) fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes, self.use_);
    }
}

#[cfg(test)]
mod tests;
