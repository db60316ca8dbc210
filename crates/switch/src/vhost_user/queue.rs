//! A started split virtqueue on the device side: popping validated chains,
//! returning used buffers, and notifying the driver (honouring EVENT_IDX
//! and VRING_AVAIL_F_NO_INTERRUPT). Ring state lives in virtio-queue's
//! [`Queue`]; chain walking is ours ([`super::chain`]).

use super::chain::{self, Chain, ChainError};
use super::memory::GuestMem;
use crate::stats::QueueStats;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress};

const VRING_AVAIL_F_NO_INTERRUPT: u16 = 1;

/// Why a queue could not start.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Size not a power of two, or above the maximum.
    #[error("invalid queue size {0}")]
    Size(u16),
    /// Rings not inside guest memory, or misaligned.
    #[error("rings outside guest memory or misaligned")]
    Rings,
    /// The call eventfd could not be duplicated.
    #[error("call eventfd unusable")]
    Call(#[source] std::io::Error),
}

/// A running queue.
#[derive(Debug)]
pub struct ActiveQueue {
    queue: Queue,
    mem: Arc<GuestMem>,
    call: Option<File>,
    writable: bool,
    used_pending: bool,
}

/// Ring addresses in guest-physical space.
#[derive(Debug, Clone, Copy)]
pub struct RingAddrs {
    /// Descriptor table.
    pub desc: GuestAddress,
    /// Available ring.
    pub avail: GuestAddress,
    /// Used ring.
    pub used: GuestAddress,
}

/// Largest queue this device accepts.
pub const MAX_QUEUE_SIZE: u16 = 32768;

impl ActiveQueue {
    /// Starts a queue of `size` entries at `addrs`, resuming at `base`.
    /// `writable`: the driver's buffers are for the device to write (a receive queue).
    pub fn start(
        mem: Arc<GuestMem>,
        size: u16,
        addrs: RingAddrs,
        base: u16,
        event_idx: bool,
        call: Option<File>,
        writable: bool,
    ) -> Result<Self, QueueError> {
        let mut queue = Queue::new(MAX_QUEUE_SIZE).map_err(|_| QueueError::Size(size))?;
        queue
            .try_set_size(size)
            .map_err(|_| QueueError::Size(size))?;
        queue
            .try_set_desc_table_address(addrs.desc)
            .map_err(|_| QueueError::Rings)?;
        queue
            .try_set_avail_ring_address(addrs.avail)
            .map_err(|_| QueueError::Rings)?;
        queue
            .try_set_used_ring_address(addrs.used)
            .map_err(|_| QueueError::Rings)?;
        queue.set_event_idx(event_idx);
        queue.set_next_avail(base);
        queue.set_next_used(base);
        queue.set_ready(true);
        if !queue.is_valid(mem.mem()) {
            return Err(QueueError::Rings);
        }
        Ok(Self {
            queue,
            mem,
            call,
            writable,
            used_pending: false,
        })
    }

    /// The memory the queue's buffers live in.
    pub fn mem(&self) -> &Arc<GuestMem> {
        &self.mem
    }

    /// Where the device will resume (GET_VRING_BASE's answer).
    pub fn next_avail(&self) -> u16 {
        self.queue.next_avail()
    }

    /// True when the driver has offered chains not yet popped.
    pub fn has_available(&self) -> Result<bool, ChainError> {
        let avail = self
            .queue
            .avail_idx(self.mem.mem(), Ordering::Acquire)
            .map_err(|_| ChainError::Ring)?;
        Ok(avail.0 != self.queue.next_avail())
    }

    /// Pops and validates the next available chain.
    pub fn pop(&mut self) -> Result<Option<Chain>, ChainError> {
        let mem = self.mem.mem();
        let avail = self
            .queue
            .avail_idx(mem, Ordering::Acquire)
            .map_err(|_| ChainError::Ring)?;
        let next = self.queue.next_avail();
        let pending = avail.0.wrapping_sub(next);
        if pending == 0 {
            return Ok(None);
        }
        let size = self.queue.size();
        if pending > size {
            return Err(ChainError::IndexJump);
        }
        let slot =
            GuestAddress(self.queue.avail_ring()).unchecked_add(4 + 2 * u64::from(next % size));
        let head: u16 = mem.read_obj::<u16>(slot).map_err(|_| ChainError::Ring)?;
        let head = u16::from_le(head);
        self.queue.set_next_avail(next.wrapping_add(1));
        chain::walk(
            mem,
            GuestAddress(self.queue.desc_table()),
            size,
            head,
            self.writable,
        )
        .map(Some)
    }

    /// Gives back the last popped chain (it will be popped again).
    pub fn unpop(&mut self) {
        self.queue
            .set_next_avail(self.queue.next_avail().wrapping_sub(1));
    }

    /// Returns a chain to the driver with `len` bytes written.
    pub fn add_used(&mut self, head: u16, len: u32) -> Result<(), ChainError> {
        self.queue
            .add_used(self.mem.mem(), head, len)
            .map_err(|_| ChainError::Ring)?;
        self.used_pending = true;
        Ok(())
    }

    /// Notifies the driver of used buffers if it wants to be (at most one write per call).
    pub fn signal(&mut self, stats: &QueueStats) {
        if !self.used_pending {
            return;
        }
        self.used_pending = false;
        let mem = self.mem.mem();
        let wanted = if self.queue.event_idx_enabled() {
            self.queue.needs_notification(mem).unwrap_or(true)
        } else {
            fence(Ordering::SeqCst);
            let flags = mem
                .read_obj::<u16>(GuestAddress(self.queue.avail_ring()))
                .map(u16::from_le)
                .unwrap_or(0);
            flags & VRING_AVAIL_F_NO_INTERRUPT == 0
        };
        if wanted {
            if let Some(mut call) = self.call.as_ref() {
                if call.write(&1u64.to_ne_bytes()).is_ok() {
                    stats.notifications_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Asks the driver to kick on new buffers; returns true when some
    /// arrived meanwhile (poll again instead of sleeping).
    pub fn enable_notification(&mut self) -> bool {
        self.queue
            .enable_notification(self.mem.mem())
            .unwrap_or(true)
    }

    /// Switches EVENT_IDX on or off (features may be acked after the start).
    pub fn set_event_idx(&mut self, on: bool) {
        self.queue.set_event_idx(on);
    }

    /// Asks the driver not to kick (the worker is polling).
    pub fn disable_notification(&mut self) {
        let _ = self.queue.disable_notification(self.mem.mem());
    }
}
