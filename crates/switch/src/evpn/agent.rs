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
const WAIT_MS: i32 = 50;

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
        if !spec.evpn {
            return None;
        }
        let vid = match spec.trunk.is_empty() {
            true => spec.vlan.unwrap_or(crate::vlan::DEFAULT_VID),
            false => spec.native_vlan?,
        };
        Some(Self {
            name: spec.name.clone(),
            id: PortId(0),
            vid,
            vni: spec.vni?,
            local: spec.local?,
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
    let (mut now, mut sent) = (Routes::default(), Routes::default());
    // While a dump runs, the routes it (and the events meanwhile) bring.
    let mut fresh = Some(Routes::default());
    let mut redump = watch.dump().is_err();
    let mut announced = Announced::default();
    let mut next_announce = Instant::now();
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
            }
        }
        if fresh.is_none() && now != sent {
            let changes = sent.changes(&now);
            match workers.evpn(&port.name, changes) {
                Ok(()) => sent = now.clone(),
                Err(e) => log::warn!("evpn {}: routes not installed: {e}", port.name),
            }
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
