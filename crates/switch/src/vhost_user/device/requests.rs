//! How the device applies each front-end request: features, memory and
//! the dirty log here, one vring's state in [`Device::handle_vring`].
//! Separate from the device's state (`mod.rs`): the protocol's verbs, one
//! small step each.

use super::{check_eventfd, protocol_feature, Device, DeviceError, Reply, MAX_QUEUE_SIZE};
use crate::vhost_user::log::{DirtyLog, LogBounds};
use crate::vhost_user::memory::GuestMem;
use crate::vhost_user::protocol::{MemoryRegion, Request};
use crate::vhost_user::queue::ActiveQueue;
use std::fs::File;
use std::sync::Arc;

impl Device {
    /// Applies one request.
    pub fn handle(&mut self, req: Request) -> Result<Reply, DeviceError> {
        Ok(match req {
            Request::GetFeatures => Reply::U64(self.offered),
            Request::SetFeatures(f) => self.set_features(f)?,
            Request::SetOwner => Reply::Ack,
            Request::SendRarp(mac) => {
                if self.acked_protocol & protocol_feature::RARP == 0 {
                    return Err(DeviceError::NotNegotiated {
                        request: "SEND_RARP",
                        feature: "VHOST_USER_PROTOCOL_F_RARP",
                    });
                }
                self.announce = Some(mac);
                Reply::Ack
            }
            Request::SetLogBase { size, offset, fd } => self.set_log_base(size, offset, fd)?,
            Request::SetLogFd(fd) => {
                self.log_fd = Some(fd);
                Reply::Ack
            }
            Request::ResetOwner | Request::ResetDevice => {
                let mut kicks = Vec::new();
                self.retire(&mut kicks);
                self.retired = kicks;
                Reply::Ack
            }
            Request::SetMemTable(table) => self.set_mem_table(table)?,
            Request::GetProtocolFeatures => Reply::U64(self.protocol_offered()),
            Request::SetProtocolFeatures(f) => {
                self.acked_protocol = f & self.protocol_offered();
                Reply::Ack
            }
            Request::GetQueueNum => Reply::U64(self.pairs as u64),
            Request::GetMaxMemSlots => Reply::U64(crate::vhost_user::protocol::MAX_REGIONS as u64),
            Request::NetSetMtu(mtu) => {
                self.mtu = Some(mtu);
                Reply::Ack
            }
            Request::Unsupported(_) => Reply::Nack,
            vring @ (Request::SetVringNum { .. }
            | Request::SetVringAddr(_)
            | Request::SetVringBase { .. }
            | Request::GetVringBase { .. }
            | Request::SetVringKick { .. }
            | Request::SetVringCall { .. }
            | Request::SetVringErr { .. }
            | Request::SetVringEnable { .. }) => self.handle_vring(vring)?,
        })
    }

    fn set_features(&mut self, f: u64) -> Result<Reply, DeviceError> {
        if f & !self.offered != 0 {
            return Err(DeviceError::Features(f));
        }
        self.acked_features = f;
        let ev = self.event_idx();
        for v in &mut self.vrings {
            if let Some(q) = &mut v.active {
                q.set_event_idx(ev);
            }
        }
        self.apply_log();
        Ok(Reply::Ack)
    }

    fn set_log_base(&mut self, size: u64, offset: u64, fd: File) -> Result<Reply, DeviceError> {
        let mem_end = self.mem.as_ref().map_or(0, |m| {
            m.regions()
                .iter()
                .map(|r| r.guest_phys_addr.saturating_add(r.memory_size))
                .max()
                .unwrap_or(0)
        });
        // The log replaces the one mapped: only guest memory counts
        // against the cap beside it.
        let bounds = LogBounds {
            mem_end,
            left: self.max_memory.saturating_sub(self.mem_total()),
        };
        // The old log is unmapped off the worker (`crate::reaper`).
        crate::reaper::retire(self.log.take());
        let log = DirtyLog::map(fd, size, offset, bounds)?;
        self.log = Some(Arc::new(log));
        self.apply_log();
        // QEMU waits for a reply to SET_LOG_BASE, asked or not.
        Ok(Reply::U64(0))
    }

    fn set_mem_table(&mut self, table: Vec<(MemoryRegion, File)>) -> Result<Reply, DeviceError> {
        // The dirty log's mapping counts against the same cap.
        let logged = self.log.as_ref().map_or(0, |l| l.mapped());
        let cap = self.max_memory.saturating_sub(logged);
        let mem = Arc::new(GuestMem::from_table(table, cap)?);
        // The old memory is held here while the queues let go of it, then
        // unmapped off the worker (`crate::reaper`).
        let old = self.mem.replace(mem);
        let mut started = Ok(());
        // Running queues continue on the new memory from where they are.
        for i in 0..self.num_queues() {
            if let Some(q) = self.vrings[i].active.take() {
                self.vrings[i].base = q.stop_state();
                started = started.and_then(|()| self.try_start(i));
            }
        }
        crate::reaper::retire(old);
        started.map(|()| Reply::Ack)
    }

    /// Applies one request about a single vring ([`Device::handle`] sends
    /// nothing else here).
    fn handle_vring(&mut self, req: Request) -> Result<Reply, DeviceError> {
        Ok(match req {
            Request::SetVringNum { index, num } => {
                let i = self.queue_index(index)?;
                if num == 0 || !num.is_power_of_two() || num > u32::from(MAX_QUEUE_SIZE) {
                    return Err(DeviceError::QueueSize(num));
                }
                self.vrings[i].num = num as u16;
                Reply::Ack
            }
            Request::SetVringAddr(a) => {
                let i = self.queue_index(a.index)?;
                self.vrings[i].addr = Some(a);
                // A running ring follows (QEMU re-sends the addresses with
                // the log flag when a migration starts).
                if let Some(q) = self.vrings[i].active.take() {
                    self.vrings[i].base = q.stop_state();
                    self.try_start(i)?;
                }
                Reply::Ack
            }
            Request::SetVringBase { index, num } => {
                let i = self.queue_index(index)?;
                self.vrings[i].base = num;
                Reply::Ack
            }
            Request::GetVringBase { index } => {
                let i = self.queue_index(index)?;
                let v = &mut self.vrings[i];
                if let Some(q) = v.active.take() {
                    v.base = q.stop_state();
                }
                // The ring is stopped until the next SET_VRING_KICK.
                self.retired.extend(v.kick.take());
                v.kick_set = false;
                Reply::VringState(index, v.base)
            }
            Request::SetVringKick { index, fd } => {
                let i = self.queue_index(u32::from(index))?;
                check_eventfd(fd.as_ref(), i, "kick")?;
                let old = std::mem::replace(&mut self.vrings[i].kick, fd);
                self.retired.extend(old);
                self.vrings[i].kick_set = true;
                self.try_start(i)?;
                Reply::Ack
            }
            Request::SetVringCall { index, fd } => {
                let i = self.queue_index(u32::from(index))?;
                check_eventfd(fd.as_ref(), i, "call")?;
                self.vrings[i].call = fd;
                if self.vrings[i].active.is_some() {
                    let q = self.vrings[i].active.take().map(ActiveQueue::stop_state);
                    self.vrings[i].base = q.unwrap_or(self.vrings[i].base);
                    self.try_start(i)?;
                }
                Reply::Ack
            }
            Request::SetVringErr { index, .. } => {
                self.queue_index(u32::from(index))?;
                Reply::Ack
            }
            Request::SetVringEnable { index, enable } => {
                let i = self.queue_index(index)?;
                self.vrings[i].enabled = Some(enable);
                Reply::Ack
            }
            _ => Reply::Nack,
        })
    }
}
