//! The buffer pool (uploads: `buffers.rs`; readback: `submission.rs`).
//!
//! Every device buffer the engine creates is charged to its
//! [`MemoryBudget`] while it lives, idle ones included; when a new buffer
//! would pass the limit, idle buffers are freed first, and then the charge
//! waits its turn for buffers other calls hold (see `crate::memory`): while
//! one waits, returned buffers are freed rather than kept idle. The pool is
//! a part of the context: it takes the device it creates buffers on, not
//! the context.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::memory::{Hold, MemoryBudget, MemoryUsage, Reservation, Use};

/// Buffers up to this size are pooled by power-of-two classes; larger ones
/// by multiples of [`BIG_STEP`].
const SMALL_MAX: u64 = 64 << 20;
const BIG_STEP: u64 = 16 << 20;

/// Idle buffers by (size class, usage), and their total size.
#[derive(Default)]
struct Idle {
    free: HashMap<(u64, u32), Vec<wgpu::Buffer>>,
    bytes: u64,
}

/// Reuses device buffers by (size class, usage). Idle buffers are kept up
/// to a byte cap; beyond it they are freed on return.
pub(crate) struct BufferPool {
    idle: Mutex<Idle>,
    cap: u64,
    max_buffer: u64,
    budget: Arc<MemoryBudget>,
}

impl BufferPool {
    /// A pool keeping up to `cap` bytes of idle buffers, on a device whose
    /// buffers may have up to `max_buffer` bytes (as it reports them: 2³¹ − 1
    /// on most Vulkan drivers); buffers are whole multiples of 4 bytes, so
    /// the largest is `max_buffer` rounded down to one.
    pub(crate) fn new(cap: u64, max_buffer: u64) -> Self {
        BufferPool {
            idle: Mutex::new(Idle::default()),
            cap,
            max_buffer: max_buffer / 4 * 4,
            budget: Arc::new(MemoryBudget::new(None)),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the cap on device bytes held (`None`: no cap).
    pub(crate) fn set_limit(&self, limit: Option<u64>) {
        self.budget.set_limit(limit);
    }

    /// Sets how long a new buffer or key set that would fit under the cap
    /// waits for buffers other calls hold (zero: it fails at once).
    pub(crate) fn set_wait(&self, wait: Duration) {
        self.budget.set_wait(wait);
    }

    /// Device bytes held, idle ones, and the cap.
    pub(crate) fn usage(&self) -> MemoryUsage {
        let (in_use, limit) = self.budget.usage();
        MemoryUsage {
            in_use,
            idle: self.idle().bytes,
            limit,
        }
    }

    /// Charges `bytes` of new device memory for a call, freeing idle
    /// buffers first when the cap would be passed, then waiting for other
    /// calls' buffers.
    fn charge(&self, op: &'static str, what: &'static str, bytes: u64) -> Result<()> {
        self.budget
            .charge(op, what, bytes, Use::Working, &|| self.trim())
    }

    /// Frees every idle buffer.
    fn trim(&self) {
        let freed = {
            let mut idle = self.idle();
            idle.free.clear();
            std::mem::take(&mut idle.bytes)
        };
        self.budget.release(freed, Use::Working);
    }

    /// Charges `bytes` of device memory owned outside the pool (resident
    /// key sets) for as long as the guard lives, freeing idle buffers
    /// first when the cap would be passed, then waiting for calls' buffers.
    pub(crate) fn reserve(
        &self,
        op: &'static str,
        what: &'static str,
        bytes: u64,
    ) -> Result<Reservation> {
        self.budget
            .reserve_reclaiming(op, what, bytes, &|| self.trim())
    }

    /// Charges `bytes` of device memory owned outside the pool only when
    /// they fit now with `headroom` more bytes free and nobody waiting
    /// (optional data, such as a key set's cell index); `None` otherwise,
    /// without waiting.
    pub(crate) fn reserve_if_free(&self, bytes: u64, headroom: u64) -> Option<Reservation> {
        self.budget.reserve_if_free(bytes, headroom)
    }

    fn class(&self, size: u64) -> u64 {
        let c = if size <= SMALL_MAX {
            size.max(256).next_power_of_two()
        } else {
            size.div_ceil(BIG_STEP) * BIG_STEP
        };
        c.min(self.max_buffer).max(size)
    }

    /// A buffer of at least `size` bytes with `usage`, from the pool when
    /// one is idle, else new on `device`.
    pub(crate) fn get<'p>(
        &'p self,
        device: &wgpu::Device,
        op: &'static str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<Pooled<'p>> {
        let size = size.max(4).next_multiple_of(4);
        if size > self.max_buffer {
            return Err(Error::TooLarge {
                op,
                what: "one GPU buffer",
                bytes: size,
            });
        }
        let class = self.class(size);
        let key = (class, usage.bits());
        let reused = {
            let mut idle = self.idle();
            let b = idle.free.get_mut(&key).and_then(Vec::pop);
            if b.is_some() {
                idle.bytes -= class;
            }
            b
        };
        let buffer = match reused {
            Some(b) => b,
            None => {
                // Charged before the loan is marked: a call's first buffer
                // queues behind waiting calls, its later ones go first.
                self.charge(op, "a GPU buffer", class)?;
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some(op),
                    size: class,
                    usage,
                    mapped_at_creation: false,
                })
            }
        };
        Ok(Pooled {
            buffer: Some(buffer),
            pool: Some(self),
            key,
            len: size,
            _hold: Some(self.budget.hold()),
        })
    }

    fn put(&self, key: (u64, u32), buffer: wgpu::Buffer) {
        // While a charge waits for memory, buffers are freed, not idled.
        if !self.budget.has_waiters() {
            let mut idle = self.idle();
            if idle.bytes + key.0 <= self.cap {
                idle.bytes += key.0;
                idle.free.entry(key).or_default().push(buffer);
                return;
            }
        }
        drop(buffer); // freed by wgpu once no submission uses it
        self.budget.release(key.0, Use::Working);
    }
}

/// A buffer on loan from the pool, returned when dropped; or a buffer
/// outside the pool (a resident key set's, charged by its reservation),
/// owned or on loan, which dropping leaves to wgpu.
pub(crate) struct Pooled<'p> {
    buffer: Option<wgpu::Buffer>,
    pool: Option<&'p BufferPool>,
    key: (u64, u32),
    len: u64,
    /// For a loan from the pool: the mark that the borrowing thread holds
    /// a buffer (dropped after the buffer went back).
    _hold: Option<Hold>,
}

impl Pooled<'_> {
    /// A loan of `buffer` (its first `len` bytes), owned and charged by
    /// someone else; dropping the loan leaves it alone.
    pub(crate) fn shared(buffer: &wgpu::Buffer, len: u64) -> Pooled<'static> {
        Pooled::owned(buffer.clone(), len)
    }

    /// `buffer` (its first `len` bytes used), created outside the pool and
    /// charged by the caller; dropping it frees the buffer once no
    /// submission uses it.
    pub(crate) fn owned(buffer: wgpu::Buffer, len: u64) -> Pooled<'static> {
        Pooled {
            buffer: Some(buffer),
            pool: None,
            key: (0, 0),
            len,
            _hold: None,
        }
    }

    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop") // ok: taken only in Drop
    }

    /// Bytes in use (what was asked for, rounded up to 4).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Binding of exactly the bytes in use (the pooled buffer may be larger
    /// than the binding limit allows).
    pub(crate) fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.buffer(),
            offset: 0,
            size: NonZeroU64::new(self.len),
        })
    }

    /// Binding of `size` bytes at `offset` (for dynamic uniform offsets).
    pub(crate) fn binding_sized(&self, size: u64) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: self.buffer(),
            offset: 0,
            size: NonZeroU64::new(size),
        })
    }
}

impl Pooled<'_> {
    /// Frees the buffer instead of returning it to the pool (once no
    /// submission uses it): for a staging buffer whose mapping may still be
    /// pending, which the next borrower could not map.
    pub(crate) fn discard(mut self) {
        if let (Some(b), Some(pool)) = (self.buffer.take(), self.pool) {
            drop(b);
            pool.budget.release(self.key.0, Use::Working);
        }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let (Some(b), Some(pool)) = (self.buffer.take(), self.pool) {
            pool.put(self.key, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_stay_within_the_device_buffer_size() {
        // Vulkan drivers report 2³¹ − 1 bytes: the largest buffer is a
        // whole number of words below it.
        let pool = BufferPool::new(0, (1 << 31) - 1);
        assert_eq!(pool.max_buffer, (1 << 31) - 4);
        assert_eq!(pool.class((1 << 31) - 4), (1 << 31) - 4);
        assert_eq!(pool.class((1 << 31) - 100), (1 << 31) - 4);
        assert_eq!(pool.class(100 << 20), 112 << 20);
        assert_eq!(pool.class(1000), 1024);
        for size in [1u64, 255, 64 << 20, (64 << 20) + 1, (1 << 31) - 4] {
            let c = pool.class(size);
            assert!(
                c >= size && c <= pool.max_buffer && c.is_multiple_of(4),
                "{size}: {c}"
            );
        }
    }
}
