//! Which threads hold working memory of a budget: a thread that does is
//! already admitted, so its next charge goes before the queue (it ends by
//! giving everything back), and a budget can tell when every such thread
//! waits (a deadlock, broken by failing the last one).
//!
//! Each thread keeps a count per budget; a [`Hold`] raises the count of
//! the thread that made it and lowers that same count when dropped, on
//! whatever thread that happens.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::MemoryBudget;

/// Source of budget ids (a budget's address can be reused after it is
/// freed; an id cannot).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's holds, per budget id.
    static HOLDS: RefCell<Vec<(u64, Arc<AtomicUsize>)>> = const { RefCell::new(Vec::new()) };
}

/// A fresh budget id.
pub(super) fn next_budget_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// This thread's hold count for budget `id`, created if missing (counts
/// of other budgets that nothing holds any more are dropped on the way).
fn count_here(id: u64) -> Arc<AtomicUsize> {
    HOLDS.with(|h| {
        let mut h = h.borrow_mut();
        if let Some((_, c)) = h.iter().find(|(i, _)| *i == id) {
            return Arc::clone(c);
        }
        h.retain(|(_, c)| Arc::strong_count(c) > 1 || c.load(Ordering::Acquire) > 0);
        let c = Arc::new(AtomicUsize::new(0));
        h.push((id, Arc::clone(&c)));
        c
    })
}

/// Whether the calling thread holds working memory of budget `id`.
pub(super) fn held_here(id: u64) -> bool {
    HOLDS.with(|h| {
        h.borrow()
            .iter()
            .any(|(i, c)| *i == id && c.load(Ordering::Acquire) > 0)
    })
}

/// Marks the thread that made it as holding working memory of a budget
/// (a request's working memory, a GPU buffer on loan) until dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    budget: Arc<MemoryBudget>,
    count: Arc<AtomicUsize>,
}

impl Hold {
    pub(super) fn new(budget: &Arc<MemoryBudget>) -> Self {
        let count = count_here(budget.id);
        // The count changes under the budget's lock, so the budget's
        // number of holders follows it exactly.
        let mut s = budget.lock();
        if count.fetch_add(1, Ordering::AcqRel) == 0 {
            s.holders += 1;
        }
        Hold {
            budget: Arc::clone(budget),
            count,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut s = self.budget.lock();
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            s.holders = s.holders.saturating_sub(1);
            drop(s);
            // Waiters may now all be holders that wait: let them look.
            self.budget.freed.notify_all();
        }
    }
}
