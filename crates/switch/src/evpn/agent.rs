//! The control-plane thread of one EVPN port: follows FRR's routes on the
//! shadow `vxlan` device and hands the differences to the port's worker,
//! and keeps the shadow bridge's local addresses in line with the FDB.

use super::announce::Announced;
use super::netlink::{Neigh, Read, Watch};
use super::shadow::Shadow;
use super::Change;
use crate::daemon::WorkerHandle;
use crate::wire::EthernetAddress;
use crate::PortId;
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the local addresses are compared with the shadow bridge.
const ANNOUNCE_EVERY: Duration = Duration::from_millis(200);
/// Longest wait for netlink before the thread looks at the clock.
const WAIT_MS: u64 = 50;
/// Removals wait until netlink has been quiet this long, so that a burst
/// (zebra leaving takes every route away) is seen whole.
const QUIET: Duration = Duration::from_millis(300);
/// How often every route is handed to the worker again (pinning is
/// idempotent): a port reset flushes the port's FDB entries.
const RESYNC: Duration = Duration::from_secs(10);

/// What EVPN says about the VNI.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Routes {
    macs: BTreeMap<EthernetAddress, Ipv4Addr>,
    flood: BTreeSet<Ipv4Addr>,
}

impl Routes {
    fn apply(&mut self, n: Neigh) {
        let zero = n.mac == EthernetAddress([0; 6]);
        match (zero, n.added) {
            (true, true) => {
                self.flood.insert(n.vtep);
            }
            (true, false) => {
                self.flood.remove(&n.vtep);
            }
            (false, true) => {
                self.macs.insert(n.mac, n.vtep);
            }
            (false, false) => {
                if self.macs.get(&n.mac) == Some(&n.vtep) {
                    self.macs.remove(&n.mac);
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.macs.is_empty() && self.flood.is_empty()
    }

    /// `now` with what `self` has and `now` lacks: additions and moves
    /// without removals.
    fn with_removals_held(&self, now: &Routes) -> Routes {
        let mut t = now.clone();
        for (&mac, &vtep) in &self.macs {
            t.macs.entry(mac).or_insert(vtep);
        }
        t.flood.extend(self.flood.iter().copied());
        t
    }

    fn known(&self) -> BTreeSet<Ipv4Addr> {
        self.flood
            .iter()
            .chain(self.macs.values())
            .copied()
            .collect()
    }

    /// The changes that take a port from `self` to `to`.
    fn changes(&self, to: &Routes) -> Vec<Change> {
        let mut out = Vec::new();
        if self.flood != to.flood || self.known() != to.known() {
            out.push(Change::Vteps {
                flood: to.flood.iter().copied().collect(),
                known: to.known().into_iter().collect(),
            });
        }
        for (&mac, &vtep) in &self.macs {
            if !to.macs.contains_key(&mac) {
                out.push(Change::Unpin { mac, vtep });
            }
        }
        for (&mac, &vtep) in &to.macs {
            if self.macs.get(&mac) != Some(&vtep) {
                out.push(Change::Pin { mac, vtep });
            }
        }
        out
    }
}

/// What the worker was told, and when removals reach it.
#[derive(Debug, Default)]
struct Installed {
    sent: Routes,
    /// Every route went at once (FRR stopped, or lost its peers): the
    /// port forwards on the last routes until some come back.
    frozen: bool,
    /// The last failure to hand routes over, said once.
    failing: Option<String>,
    resynced: Option<Instant>,
}

impl Installed {
    /// Hands the worker what takes it from the routes it has to those
    /// `target` says.
    fn install(&mut self, target: Routes, workers: &WorkerHandle, name: &str) {
        let quiet_sync = !self.frozen && self.sent == target;
        if quiet_sync && self.resynced.map_or(true, |t| t.elapsed() >= RESYNC) {
            // Everything again, from nothing (no removals: none are due).
            self.sent = Routes::default();
            self.resynced = Some(Instant::now());
        }
        if target == self.sent {
            return;
        }
        match workers.evpn(name, self.sent.changes(&target)) {
            Ok(()) => self.failing = None,
            Err(e) => {
                let e = e.to_string();
                if self.failing.as_deref() != Some(e.as_str()) {
                    log::warn!("evpn {name}: routes not installed: {e}");
                }
                self.failing = Some(e);
            }
        }
        // Not retried until the routes change (or the next resync).
        self.sent = target;
    }

    /// The routes the worker should have, given `now` from the kernel;
    /// `quiet`: netlink has been quiet for [`QUIET`].
    fn target(&mut self, now: &Routes, quiet: bool, name: &str) -> Routes {
        if !quiet {
            return self.sent.with_removals_held(now);
        }
        if now.is_empty() && !self.sent.is_empty() {
            if !self.frozen {
                log::warn!(
                    "evpn {name}: every route was withdrawn at once (FRR stopped or lost its peers): forwarding on the last {} addresses and {} VTEPs",
                    self.sent.macs.len(),
                    self.sent.known().len()
                );
                self.frozen = true;
            }
            return self.sent.clone();
        }
        if self.frozen && !now.is_empty() {
            log::info!("evpn {name}: routes are back, following EVPN again");
            self.frozen = false;
        }
        now.clone()
    }
}

/// Which port, and where.
#[derive(Debug, Clone)]
pub struct Port {
    /// The port's name.
    pub name: String,
    /// Its id (FDB entries name it).
    pub id: PortId,
    /// The VLAN its frames are switched in.
    pub vid: u16,
    /// The VNI.
    pub vni: u32,
    /// Its outer address.
    pub local: Ipv4Addr,
}

impl Port {
    /// The EVPN port `spec` describes (its id still to be set), if it is one.
    pub fn of(spec: &crate::config::PortSpec) -> Option<Self> {
        let vx = spec.kind.vxlan().filter(|v| v.evpn)?;
        let vid = match spec.trunk.is_empty() {
            true => spec.vlan.unwrap_or(crate::vlan::DEFAULT_VID),
            false => spec.native_vlan?,
        };
        Some(Self {
            name: spec.name.clone(),
            id: PortId(0),
            vid,
            vni: vx.vni,
            local: vx.local,
        })
    }
}

/// A running agent; stops (and removes the shadow devices) when dropped.
pub struct Agent {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Agent {
    /// Makes the shadow devices and starts following FRR for `port`.
    pub fn start(port: Port, workers: WorkerHandle) -> Result<Self, String> {
        let shadow = Shadow::create(port.vni, port.local)?;
        let ifindex = crate::sys::netlink::ifindex(&shadow.vxlan)
            .map_err(|e| format!("no device {}: {e}", shadow.vxlan))?;
        let watch = Watch::open(ifindex)
            .map_err(|e| format!("cannot watch {} over netlink: {e}", shadow.vxlan))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("vnio-evpn-{}", port.vni))
            .spawn(move || run(port, shadow, watch, workers, &s))
            .map_err(|e| format!("cannot start the EVPN thread: {e}"))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(port: Port, shadow: Shadow, mut watch: Watch, workers: WorkerHandle, stop: &AtomicBool) {
    let mut now = Routes::default();
    let mut installed = Installed::default();
    // While a dump runs, the routes it (and the events meanwhile) bring.
    let mut fresh = Some(Routes::default());
    let mut redump = watch.dump().is_err();
    let mut announced = Announced::default();
    let (mut next_announce, mut last_event) = (Instant::now(), Instant::now());
    let mut reads = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        if redump {
            fresh = Some(Routes::default());
            redump = watch.dump().is_err();
        }
        watch.wait(WAIT_MS);
        loop {
            reads.clear();
            match watch.read(&mut reads) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    log::warn!(
                        "evpn {}: netlink lost routes ({e}): reading them again, forwarding on what was known",
                        port.name
                    );
                    redump = true;
                    break;
                }
            }
            for r in reads.drain(..) {
                match (r, fresh.as_mut()) {
                    (Read::Neigh(n), Some(f)) => f.apply(n),
                    (Read::Neigh(n), None) => now.apply(n),
                    (Read::DumpDone, _) => {
                        if let Some(f) = fresh.take() {
                            now = f;
                        }
                    }
                }
                last_event = Instant::now();
            }
        }
        if fresh.is_none() {
            let quiet = last_event.elapsed() >= QUIET;
            let target = installed.target(&now, quiet, &port.name);
            installed.install(target, &workers, &port.name);
        }
        if Instant::now() >= next_announce {
            next_announce = Instant::now() + ANNOUNCE_EVERY;
            if let Ok(fdb) = workers.fdb() {
                announced.sync(&shadow, &fdb, port.vid, port.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(added: bool, m: u8, vtep: u8) -> Neigh {
        Neigh {
            added,
            mac: EthernetAddress([if m == 0 { 0 } else { 2 }, 0, 0, 0, 0, m]),
            vtep: Ipv4Addr::new(10, 0, 0, vtep),
        }
    }

    #[test]
    fn removals_wait_for_quiet_and_a_total_withdrawal_is_not_followed() {
        let mut full = Routes::default();
        full.apply(n(true, 0, 2));
        full.apply(n(true, 1, 2));
        let mut i = Installed {
            sent: full.clone(),
            ..Installed::default()
        };
        let mut less = full.clone();
        less.apply(n(false, 1, 2));
        less.apply(n(true, 2, 3));
        // While events arrive, the new route goes in and the old one stays.
        let t = i.target(&less, false, "t");
        assert_eq!(t.macs.len(), 2);
        assert_eq!(i.target(&less, true, "t"), less);
        i.sent = less.clone();
        // Everything withdrawn: the last routes stay until some come back.
        assert_eq!(i.target(&Routes::default(), true, "t"), less);
        assert!(i.frozen);
        assert_eq!(i.target(&full, true, "t"), full);
        assert!(!i.frozen);
    }

    #[test]
    fn routes_become_pins_floods_and_withdrawals() {
        let mut r = Routes::default();
        r.apply(n(true, 0, 2));
        r.apply(n(true, 1, 2));
        r.apply(n(true, 2, 3));
        let c = Routes::default().changes(&r);
        assert_eq!(c.len(), 3);
        assert!(matches!(&c[0], Change::Vteps { flood, known }
            if flood == &[Ipv4Addr::new(10, 0, 0, 2)] && known.len() == 2));
        let before = r.clone();
        // A move to another VTEP is a replace; a stale withdrawal is ignored.
        r.apply(n(true, 1, 3));
        r.apply(n(false, 1, 2));
        r.apply(n(false, 2, 3));
        let c = before.changes(&r);
        assert!(c.contains(&Change::Pin {
            mac: n(true, 1, 3).mac,
            vtep: Ipv4Addr::new(10, 0, 0, 3)
        }));
        assert!(c.contains(&Change::Unpin {
            mac: n(true, 2, 3).mac,
            vtep: Ipv4Addr::new(10, 0, 0, 3)
        }));
    }
}
