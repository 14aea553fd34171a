//! A cap on the bytes an engine holds: device buffers on the GPU (in use,
//! idle in the pool, resident key sets), key sets and request working
//! memory on the CPU.

use std::sync::Mutex;

use crate::error::{Error, Result};

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

/// Bytes charged against an optional limit. Charges are taken before an
/// allocation and given back when it is freed.
#[derive(Debug)]
pub(crate) struct MemoryBudget {
    state: Mutex<(u64, Option<u64>)>,
}

impl MemoryBudget {
    pub(crate) fn new(limit: Option<u64>) -> Self {
        MemoryBudget {
            state: Mutex::new((0, limit)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<u64>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the limit (`None`: unlimited). Existing charges stay.
    pub(crate) fn set_limit(&self, limit: Option<u64>) {
        self.lock().1 = limit;
    }

    /// Bytes charged now, and the limit.
    pub(crate) fn usage(&self) -> (u64, Option<u64>) {
        *self.lock()
    }

    /// Charges `bytes`, or fails with [`Error::MemoryLimit`] when they do not
    /// fit under the limit beside what is charged already.
    pub(crate) fn charge(&self, op: &'static str, what: &'static str, bytes: u64) -> Result<()> {
        let mut s = self.lock();
        if let Some(limit) = s.1
            && s.0.saturating_add(bytes) > limit
        {
            return Err(Error::MemoryLimit {
                op,
                what,
                bytes,
                in_use: s.0,
                limit,
            });
        }
        s.0 += bytes;
        Ok(())
    }

    /// Gives back `bytes` charged earlier.
    pub(crate) fn release(&self, bytes: u64) {
        let mut s = self.lock();
        s.0 = s.0.saturating_sub(bytes);
    }

    /// Charges `bytes` for as long as the returned guard lives.
    pub(crate) fn reserve(
        self: &std::sync::Arc<Self>,
        op: &'static str,
        what: &'static str,
        bytes: u64,
    ) -> Result<Reservation> {
        self.charge(op, what, bytes)?;
        Ok(Reservation {
            budget: std::sync::Arc::clone(self),
            bytes,
        })
    }
}

/// A charge on a [`MemoryBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: std::sync::Arc<MemoryBudget>,
    bytes: u64,
}

impl Reservation {
    /// Bytes charged.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn charges_stop_at_the_limit_and_come_back() {
        let b = Arc::new(MemoryBudget::new(Some(100)));
        let r = b.reserve("t", "a", 60).unwrap();
        let e = b.reserve("t", "b", 50).unwrap_err();
        assert!(matches!(
            e,
            Error::MemoryLimit {
                bytes: 50,
                in_use: 60,
                limit: 100,
                ..
            }
        ));
        assert_eq!(r.bytes(), 60);
        drop(r);
        assert_eq!(b.usage(), (0, Some(100)));
        let _r = b.reserve("t", "b", 100).unwrap();
        b.set_limit(None);
        let _big = b.reserve("t", "c", u64::MAX / 2).unwrap();
    }
}
