//! The worker's port commands: adding a port (its kind opens it), removing it,
//! handing it to another worker and taking one over, and changing its
//! policies. Separate from the worker's loop: control-plane work, done
//! between polling rounds.

use super::{PortInfo, Worker, WorkerError};
use crate::config::{EgressSettings, PolicyUpdate, PortSpec};
use crate::datapath::Slot;
use std::time::Instant;
use vmm_sys_util::epoll::{ControlOperation, EpollEvent};

impl Worker {
    pub(super) fn add(
        &mut self,
        spec: &PortSpec,
        id: crate::PortId,
    ) -> Result<PortInfo, WorkerError> {
        let e = |e: &dyn std::error::Error| crate::error_chain(e);
        let policy = spec.policy().map_err(|x| e(&x))?;
        if self.dp.table().find(&spec.name).is_some() {
            return Err(WorkerError::Exists(spec.name.clone()));
        }
        let policies = spec.policies(&self.cfg);
        // Unprefixed, as the other refusals here: the caller names the port.
        self.dp.table().check_direct(&policy)?;
        self.dp
            .table()
            .check_cross(policy.cross_connect.as_deref())?;
        if spec.kind.is_vnic() && policy.direct.is_none() {
            self.dp.table().check_queue_request(policy.uplink_queue)?;
            self.dp
                .table()
                .check_reservation(policy.egress.reserve_bps.unwrap_or(0), None)?;
        }
        let port = spec.kind.open(spec, &self.cfg)?;
        let slot = self.dp.add(id, spec.name.clone(), policy, policies, port);
        if let (Some(s), Some(v)) = (self.dp.table().slot(slot), spec.kind.vhost_user()) {
            s.stats
                .queue_pairs
                .store(v.queues.get() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        // A client-mode port connects at once; other client ports may connect too.
        let mut changed = vec![slot];
        self.dp.tick(Instant::now(), &mut changed);
        for s in changed {
            self.sync(s);
        }
        log::info!("port {} added", spec.name);
        self.info(slot)
            .ok_or_else(|| WorkerError::NoPort(spec.name.clone()))
    }

    pub(super) fn del(&mut self, name: &str) -> Result<(), WorkerError> {
        let mut slot = self.detach(name)?;
        slot.port.release();
        log::info!("port {name} removed");
        Ok(())
    }

    /// Takes a port out of this worker (its descriptors unwatched).
    pub(super) fn detach(&mut self, name: &str) -> Result<Box<Slot>, WorkerError> {
        let slot = self
            .dp
            .table()
            .find(name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        if let Some(list) = self.registered.get_mut(slot) {
            for (fd, _) in list.drain(..) {
                let _ = self
                    .epoll
                    .ctl(ControlOperation::Delete, fd, EpollEvent::default());
            }
        }
        self.dp
            .remove(slot)
            .map(Box::new)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))
    }

    pub(super) fn attach(&mut self, s: Box<Slot>) -> PortInfo {
        let name = s.name.clone();
        let slot = self.dp.attach(*s);
        self.sync(slot);
        log::info!(
            "port {name} now served by {}",
            match self.dedicated {
                Some(c) => format!("a dedicated worker on core {c}"),
                None => "the shared worker".into(),
            }
        );
        self.info(slot)
            .unwrap_or_else(|| unreachable!("attached above"))
    }

    pub(super) fn set(&mut self, name: &str, u: &PolicyUpdate) -> Result<PortInfo, WorkerError> {
        let slot = self
            .dp
            .table()
            .find(name)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        let s = self
            .dp
            .table()
            .slot(slot)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        if u.egress.is_set() {
            if !s.is_vnic() {
                return Err(WorkerError::Refused(format!(
                    "port {name}: share, limit and reservation apply to vhost-user and tap ports"
                )));
            }
            let e = EgressSettings::from(s.policy.egress)
                .updated(&u.egress)
                .policy()
                .map_err(|w| WorkerError::Refused(format!("port {name}: {w}")))?;
            let id = s.id;
            self.dp
                .table()
                .check_reservation(e.reserve_bps.unwrap_or(0), Some(id))?;
            self.dp.table_mut().set_egress(slot, e);
            log::info!(
                "port {name}: egress share {}, limit {}, reservation {}",
                e.share,
                e.limit_bps
                    .map_or("none".into(), |b| format!("{} Mbit/s", b / 1_000_000)),
                e.reserve_bps
                    .map_or("none".into(), |b| format!("{} Mbit/s", b / 1_000_000))
            );
        }
        if let Some(l) = u.fdb_limit {
            self.dp.table_mut().set_fdb_limit(slot, l);
            log::info!("port {name}: fdb limit {l}");
        }
        let s = self
            .dp
            .table()
            .slot(slot)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
        let mut p = s.policies;
        p.apply(u);
        self.dp.table_mut().set_policies(slot, p);
        log::info!(
            "port {name}: coalesce {}, lro {}, latency {}, tx_poll_budget {}",
            p.effective_coalesce(),
            if p.effective_lro() { "on" } else { "off" },
            p.latency,
            p.tx_poll_budget
        );
        self.info(slot)
            .ok_or_else(|| WorkerError::NoPort(name.to_string()))
    }
}
