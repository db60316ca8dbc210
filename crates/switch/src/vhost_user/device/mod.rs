//! The virtio-net device state a front-end builds through vhost-user
//! requests: features, memory, and two vrings per queue pair (2k: the
//! driver's receive queue of pair k, 2k+1: its transmit queue).
//!
//! Multiqueue: a port configured with N > 1 queue pairs offers
//! VIRTIO_NET_F_MQ and VHOST_USER_PROTOCOL_F_MQ and answers GET_QUEUE_NUM
//! with N; every per-queue request is checked against 2N (a bad index
//! resets the port). A pair carries frames only once enabled: QEMU enables
//! the pairs the guest's driver turned on (SET_VRING_ENABLE), the others'
//! rings may be set up and even kicked, and are left alone. The config
//! space (`max_virtqueue_pairs`) is the front-end's: this device does not
//! offer VHOST_USER_PROTOCOL_F_CONFIG, so QEMU answers the guest from its
//! own netdev `queues=N`. A single-pair port offers neither MQ bit and
//! behaves exactly as before.
//!
//! Ordering is tolerant where real front-ends differ: QEMU 7.2 sends
//! SET_VRING_ENABLE before SET_FEATURES (and never again), so an enable is
//! recorded whenever it comes and applies once the ring starts; without
//! VHOST_USER_F_PROTOCOL_FEATURES a ring is enabled as soon as it starts.
//!
//! With VIRTIO_F_RING_PACKED the rings are packed: SET_VRING_ADDR's avail
//! and used addresses are the event suppression areas, and the vring base
//! carries the avail slot with its wrap counter in bit 15 (GET_VRING_BASE
//! answers the used slot and wrap counter in the upper 16 bits, as the
//! vhost-user spec has it; on SET_VRING_BASE the used position restarts at
//! the avail one, as DPDK's vhost does, since front-ends differ on the
//! upper half and nothing is in flight across a restart).

use super::log::{DirtyLog, QueueLog};
use super::memory::GuestMem;
use super::protocol::VringAddr;
use super::queue::{ActiveQueue, PackedFeatures, QueueError, RingAddrs, MAX_QUEUE_SIZE};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// SET_VRING_ADDR's flag: log the used ring's writes at `log`.
const VRING_F_LOG: u32 = 1;

/// The driver's receive queue (of the first pair).
pub const RX_QUEUE: usize = 0;
/// The driver's transmit queue (of the first pair).
pub const TX_QUEUE: usize = 1;
/// Most queue pairs a port may have. Eight covers guests of up to eight
/// vCPUs (a guest gains nothing from more pairs than vCPUs), keeps the
/// device's rings a fixed array (no allocation, no indirection on the data
/// path) and a kick's queue index within the worker's one-byte epoll tag.
pub const MAX_QUEUE_PAIRS: usize = 8;
/// Most vrings of a device.
pub const MAX_QUEUES: usize = 2 * MAX_QUEUE_PAIRS;

/// The receive queue of pair `pair`.
#[inline]
pub const fn rx_queue(pair: usize) -> usize {
    2 * pair
}

/// The transmit queue of pair `pair`.
#[inline]
pub const fn tx_queue(pair: usize) -> usize {
    2 * pair + 1
}

pub use super::features::{feature, protocol_feature};

pub use super::outcome::{DeviceError, Reply};

#[derive(Debug, Default)]
struct Vring {
    num: u16,
    addr: Option<VringAddr>,
    /// The vring state to resume at (split: the available index; packed:
    /// avail slot and wrap counter, used ones in the upper half).
    base: u32,
    kick: Option<File>,
    kick_set: bool,
    call: Option<File>,
    enabled: Option<bool>,
    active: Option<ActiveQueue>,
}

/// The device.
#[derive(Debug, Default)]
pub struct Device {
    /// Features offered (GET_FEATURES); offloads may be withheld per port.
    offered: u64,
    acked_features: u64,
    acked_protocol: u64,
    /// Queue pairs offered (1..=[`MAX_QUEUE_PAIRS`]).
    pairs: usize,
    mem: Option<Arc<GuestMem>>,
    vrings: [Vring; MAX_QUEUES],
    mtu: Option<u64>,
    /// The dirty log of a migration (used while VHOST_F_LOG_ALL is acked).
    log: Option<Arc<DirtyLog>>,
    /// SET_LOG_FD's eventfd (held, never signalled).
    log_fd: Option<File>,
    /// The MAC a SEND_RARP announced, until the switch takes it.
    announce: Option<[u8; 6]>,
    /// Most bytes of guest memory (with the dirty log's mapping) the
    /// front-end may have mapped.
    max_memory: u64,
    /// Kick eventfds replaced or dropped since the worker last looked:
    /// kept open until the worker removed them from its epoll set, so no
    /// registration outlives its descriptor (or names a reused number).
    retired: Vec<File>,
}

fn check_eventfd(fd: Option<&File>, index: usize, what: &'static str) -> Result<(), DeviceError> {
    match fd {
        Some(f) if !crate::sys::eventfd::is_eventfd(f) => {
            Err(DeviceError::NotEventfd { index, what })
        }
        _ => Ok(()),
    }
}

impl Device {
    /// A device nobody has configured.
    pub fn new() -> Self {
        Self::offering(true)
    }

    /// A device that offers the checksum and TSO offloads or not.
    pub fn offering(offloads: bool) -> Self {
        Self {
            offered: if offloads {
                feature::OFFERED
            } else {
                feature::OFFERED & !feature::OFFLOADS
            },
            max_memory: super::memory::DEFAULT_MAX_MEMORY,
            pairs: 1,
            ..Self::default()
        }
    }

    /// The same device with `pairs` queue pairs (clamped to
    /// 1..=[`MAX_QUEUE_PAIRS`]); more than one offers VIRTIO_NET_F_MQ.
    pub fn with_queue_pairs(mut self, pairs: usize) -> Self {
        self.pairs = pairs.clamp(1, MAX_QUEUE_PAIRS);
        if self.pairs > 1 {
            self.offered |= feature::MQ;
        } else {
            self.offered &= !feature::MQ;
        }
        self
    }

    /// Queue pairs offered.
    #[inline]
    pub fn queue_pairs(&self) -> usize {
        self.pairs
    }

    /// Vrings of the device (two per pair).
    #[inline]
    fn num_queues(&self) -> usize {
        2 * self.pairs
    }

    /// `i` as a vring index, when the device has that vring.
    fn queue_index(&self, i: u32) -> Result<usize, DeviceError> {
        let q = i as usize;
        if q < self.num_queues() {
            Ok(q)
        } else {
            Err(DeviceError::QueueIndex(i))
        }
    }

    fn protocol_offered(&self) -> u64 {
        if self.pairs > 1 {
            protocol_feature::OFFERED | protocol_feature::MQ
        } else {
            protocol_feature::OFFERED
        }
    }

    /// The same device with a cap on the guest memory it maps.
    pub fn with_max_memory(mut self, bytes: u64) -> Self {
        self.max_memory = bytes;
        self
    }

    /// Every kick descriptor the device holds, handed over for the caller
    /// to close after unwatching them; the device is left as new (same
    /// offer, same cap). The rest, the guest's memory and dirty log above
    /// all, is dropped off the worker (`crate::reaper`).
    pub fn retire(&mut self, out: &mut Vec<File>) {
        let fresh = Self {
            offered: self.offered,
            max_memory: self.max_memory,
            pairs: self.pairs,
            ..Self::default()
        };
        let mut old = std::mem::replace(self, fresh);
        out.append(&mut old.retired);
        out.extend(old.vrings.iter_mut().filter_map(|v| v.kick.take()));
        crate::reaper::retire(old);
    }

    /// Kick descriptors dropped by requests since the last call, to close
    /// once unwatched.
    pub fn take_retired(&mut self, out: &mut Vec<File>) {
        out.append(&mut self.retired);
    }

    /// True when the front-end's memory vanished under the switch (the
    /// port must be reset).
    pub fn memory_lost(&self) -> bool {
        self.mem.as_ref().is_some_and(|m| m.lost()) || self.log.as_ref().is_some_and(|l| l.lost())
    }

    /// Bytes of guest memory mapped (the memory table's regions).
    fn mem_total(&self) -> u64 {
        self.mem.as_ref().map_or(0, |m| {
            m.regions()
                .iter()
                .fold(0u64, |t, r| t.saturating_add(r.memory_size))
        })
    }

    /// Why a queue's last call could not be signalled, if it could not.
    pub fn take_call_failure(&mut self) -> Option<(usize, std::io::Error)> {
        self.vrings.iter_mut().enumerate().find_map(|(i, v)| {
            v.active
                .as_mut()
                .and_then(ActiveQueue::take_call_failure)
                .map(|e| (i, e))
        })
    }

    /// True while the front-end logs the pages the device writes.
    pub fn logging(&self) -> bool {
        self.acked_features & feature::LOG_ALL != 0 && self.log.is_some()
    }

    /// What queue `i` marks while logging: the used ring at the address the
    /// front-end asked logged (VHOST_VRING_F_LOG), or where it lies.
    fn queue_log(&self, i: usize) -> Option<QueueLog> {
        let log = self.log.as_ref().filter(|_| self.logging())?;
        let a = self.vrings[i].addr?;
        let used = if a.flags & VRING_F_LOG != 0 {
            a.log
        } else {
            self.mem.as_ref()?.va_to_gpa(a.used, 1)?.0
        };
        Some(QueueLog {
            log: Arc::clone(log),
            used,
        })
    }

    /// Starts or stops logging on the running queues.
    fn apply_log(&mut self) {
        for i in 0..self.num_queues() {
            let log = self.queue_log(i);
            if let Some(q) = self.vrings[i].active.as_mut() {
                q.set_log(log);
            }
        }
    }

    /// The MAC a SEND_RARP announced since the last call: the switch
    /// points its forwarding table at this port and announces it.
    pub fn take_announce(&mut self) -> Option<[u8; 6]> {
        self.announce.take()
    }

    /// Like [`Device::take_announce`], as the frame to forward as if this
    /// port received it (a zeroed virtio-net header of
    /// [`crate::wire::virtio_net::HEADER_LEN`] bytes, then the RARP request).
    pub fn take_announce_frame(
        &mut self,
    ) -> Option<[u8; crate::wire::virtio_net::HEADER_LEN + super::announce::RARP_LEN]> {
        self.take_announce().map(super::announce::rarp_with_header)
    }

    fn try_start(&mut self, i: usize) -> Result<(), DeviceError> {
        let event_idx = self.event_idx();
        let packed = self.packed();
        let in_order = self.acked_features & feature::IN_ORDER != 0;
        let log = self.queue_log(i);
        let Some(mem) = self.mem.clone() else {
            return Ok(());
        };
        let v = &mut self.vrings[i];
        let (Some(a), true, true) = (v.addr, v.kick_set, v.num > 0) else {
            return Ok(());
        };
        let n = u64::from(v.num);
        // Packed: the avail and used addresses are the driver's and the
        // device's event suppression areas, 4 bytes each.
        let (avail_len, used_len) = if packed {
            (4, 4)
        } else {
            (6 + 2 * n, 6 + 8 * n)
        };
        let desc = mem
            .va_to_gpa(a.desc, 16 * n)
            .ok_or(DeviceError::RingAddress(i))?;
        let avail = mem
            .va_to_gpa(a.avail, avail_len)
            .ok_or(DeviceError::RingAddress(i))?;
        let used = mem
            .va_to_gpa(a.used, used_len)
            .ok_or(DeviceError::RingAddress(i))?;
        let call = v
            .call
            .as_ref()
            .map(File::try_clone)
            .transpose()
            .map_err(|e| DeviceError::Queue {
                index: i,
                source: QueueError::Call(e),
            })?;
        let addrs = RingAddrs { desc, avail, used };
        let mut q = if packed {
            let features = PackedFeatures {
                event_idx,
                in_order,
                // Not offered: the split layout walks no indirect tables.
                indirect: false,
            };
            ActiveQueue::start_packed(mem, v.num, addrs, v.base, features, call, i % 2 == 0)
        } else {
            ActiveQueue::start(
                mem,
                v.num,
                addrs,
                v.base as u16,
                event_idx,
                call,
                i % 2 == 0,
            )
        }
        .map_err(|source| DeviceError::Queue { index: i, source })?;
        q.set_log(log);
        v.active = Some(q);
        Ok(())
    }

    /// True when the device may process queue `i`: started, and enabled.
    /// An explicit SET_VRING_ENABLE wins whenever it arrived; without one a
    /// ring is enabled unless VHOST_USER_F_PROTOCOL_FEATURES was negotiated.
    #[inline]
    pub fn ready(&self, i: usize) -> bool {
        let Some(v) = self.vrings.get(i) else {
            return false;
        };
        v.active.is_some()
            && match v.enabled {
                Some(e) => e,
                None => self.acked_features & feature::PROTOCOL_FEATURES == 0,
            }
    }

    /// The pairs whose receive queue is ready, one bit per pair (bit k:
    /// pair k): where frames toward the guest may go.
    pub fn ready_rx_pairs(&self) -> u32 {
        (0..self.pairs)
            .filter(|&k| self.ready(rx_queue(k)))
            .fold(0, |m, k| m | 1 << k)
    }

    /// The running queue `i`, when ready.
    #[inline]
    pub fn queue(&mut self, i: usize) -> Option<&mut ActiveQueue> {
        if self.ready(i) {
            self.vrings[i].active.as_mut()
        } else {
            None
        }
    }

    /// Stops queue `i` after a ring error (the caller resets the connection).
    pub fn stop(&mut self, i: usize) {
        self.vrings[i].active = None;
    }

    /// The kick eventfd of queue `i`, to watch.
    pub fn kick_fd(&self, i: usize) -> Option<RawFd> {
        self.vrings[i].kick.as_ref().map(|f| f.as_raw_fd())
    }

    /// Drains queue `i`'s kick eventfd, never blocking; returns true when
    /// there was a kick.
    pub fn drain_kick(&self, i: usize) -> bool {
        match self.vrings[i].kick.as_ref() {
            Some(f) => matches!(crate::sys::eventfd::read_nowait(f), Ok(Some(_))),
            None => false,
        }
    }

    /// True when EVENT_IDX was negotiated.
    pub fn event_idx(&self) -> bool {
        self.acked_features & feature::EVENT_IDX != 0
    }

    /// True when the packed ring layout was negotiated.
    pub fn packed(&self) -> bool {
        self.acked_features & feature::RING_PACKED != 0
    }

    /// True when mergeable receive buffers were negotiated.
    pub fn mrg_rxbuf(&self) -> bool {
        self.acked_features & feature::MRG_RXBUF != 0
    }

    /// Length of the virtio-net header on this device's queues.
    pub fn vnet_hdr_len(&self) -> usize {
        if self.acked_features & (feature::VERSION_1 | feature::MRG_RXBUF) != 0 {
            crate::wire::virtio_net::HEADER_LEN
        } else {
            crate::wire::virtio_net::LEGACY_HEADER_LEN
        }
    }

    /// True when REPLY_ACK was negotiated.
    pub fn reply_ack(&self) -> bool {
        self.acked_protocol & protocol_feature::REPLY_ACK != 0
    }

    /// The driver's features.
    pub fn acked_features(&self) -> u64 {
        self.acked_features
    }

    /// The MTU the front-end announced.
    pub fn mtu(&self) -> Option<u64> {
        self.mtu
    }

    /// The vhost-user protocol features acknowledged.
    pub fn acked_protocol(&self) -> u64 {
        self.acked_protocol
    }

    /// Entries of ring `i` as the front-end set them (0: not set).
    pub fn ring_size(&self, i: usize) -> u16 {
        self.vrings.get(i).map_or(0, |v| v.num)
    }
}

mod requests;
mod spread;
