//! Per-vNIC uplink receive queues (the studies' NetQueue): an uplink has K
//! receive queues; queue 0 is the default, shared one, and each vNIC gets
//! a queue of its own while queues last, chosen by the destination MAC of
//! frames from the wire (the port's configured `mac`, or the first source
//! address learned on it). Frames for a vNIC with its own queue never wait
//! behind a neighbour's: a flood toward one vNIC fills only its queue.
//!
//! Pure logic: the table of who owns which queue, and the classic BPF
//! programs that make each queue's socket take exactly its frames (the
//! default queue takes every frame no other queue claims: broadcast,
//! multicast, unknown and shared destinations).

use crate::sys::packet::BpfInsn;
use crate::wire::EthernetAddress;
use crate::PortId;
use serde::{Deserialize, Serialize};

/// Which uplink receive queue a vNIC asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "RawRequest", into = "RawRequest")]
pub enum QueueRequest {
    /// Its own queue while queues last, else the shared one.
    #[default]
    Auto,
    /// Always the shared queue.
    Shared,
    /// Queue N (1 to K-1): refused when absent or taken.
    Index(usize),
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RawRequest {
    Name(String),
    Index(usize),
}

impl TryFrom<RawRequest> for QueueRequest {
    type Error = String;
    fn try_from(r: RawRequest) -> Result<Self, String> {
        match r {
            RawRequest::Index(0) => Ok(QueueRequest::Shared),
            RawRequest::Index(n) => Ok(QueueRequest::Index(n)),
            RawRequest::Name(s) => s.parse(),
        }
    }
}

impl From<QueueRequest> for RawRequest {
    fn from(q: QueueRequest) -> Self {
        match q {
            QueueRequest::Auto => RawRequest::Name("auto".into()),
            QueueRequest::Shared => RawRequest::Name("shared".into()),
            QueueRequest::Index(n) => RawRequest::Index(n),
        }
    }
}

impl std::str::FromStr for QueueRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(QueueRequest::Auto),
            "shared" => Ok(QueueRequest::Shared),
            n => match n.parse::<usize>() {
                Ok(0) => Ok(QueueRequest::Shared),
                Ok(n) => Ok(QueueRequest::Index(n)),
                Err(_) => Err(format!(
                    "uplink queue must be auto, shared or a queue number, not {s:?}"
                )),
            },
        }
    }
}

/// Why a queue request cannot be honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The uplink has no such queue.
    #[error("the uplink has queues 0-{last} (0 is shared); there is no queue {want}")]
    NoSuchQueue {
        /// Asked for.
        want: usize,
        /// Highest queue.
        last: usize,
    },
    /// Another port holds it.
    #[error("uplink queue {queue} is taken by port id {owner}")]
    Taken {
        /// The queue.
        queue: usize,
        /// Its owner.
        owner: PortId,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Member {
    port: PortId,
    req: QueueRequest,
    mac: Option<EthernetAddress>,
}

/// Who owns which receive queue of one uplink.
#[derive(Debug, Clone)]
pub struct QueueTable {
    /// Owner of each queue; index 0 (the shared queue) is never owned.
    owners: Vec<Option<PortId>>,
    /// Every vNIC, in the order it joined (earlier ones get queues first).
    members: Vec<Member>,
}

impl QueueTable {
    /// A table for an uplink with `queues` receive queues (at least 1).
    pub fn new(queues: usize) -> Self {
        Self {
            owners: vec![None; queues.max(1)],
            members: Vec::new(),
        }
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.owners.len()
    }

    /// Whether `req` could be honoured for a new port.
    pub fn check(&self, req: QueueRequest) -> Result<(), QueueError> {
        if let QueueRequest::Index(n) = req {
            let last = self.owners.len() - 1;
            if n > last {
                return Err(QueueError::NoSuchQueue { want: n, last });
            }
            if let Some(owner) = self.owners[n] {
                // An automatic owner gives way to a port that names the queue.
                let fixed = self
                    .members
                    .iter()
                    .any(|m| m.port == owner && m.req == QueueRequest::Index(n));
                if fixed {
                    return Err(QueueError::Taken { queue: n, owner });
                }
            }
        }
        Ok(())
    }

    /// Adds a vNIC; returns whether any queue's owner changed.
    pub fn join(
        &mut self,
        port: PortId,
        req: QueueRequest,
        mac: Option<EthernetAddress>,
    ) -> Result<bool, QueueError> {
        self.check(req)?;
        if self.members.iter().any(|m| m.port == port) {
            return Ok(false);
        }
        self.members.push(Member { port, req, mac });
        Ok(self.rebalance())
    }

    /// Removes a vNIC; its queue goes to the next one waiting.
    pub fn leave(&mut self, port: PortId) -> bool {
        let before = self.members.len();
        self.members.retain(|m| m.port != port);
        before != self.members.len() && self.rebalance()
    }

    /// Records a vNIC's MAC (configured or learned); true when it changed.
    pub fn set_mac(&mut self, port: PortId, mac: EthernetAddress) -> bool {
        match self.members.iter_mut().find(|m| m.port == port) {
            Some(m) if m.mac != Some(mac) => {
                m.mac = Some(mac);
                true
            }
            _ => false,
        }
    }

    /// A queue a port could be given outright: a free one, else one an
    /// automatic owner holds (it moves to another or to the shared queue).
    pub fn free_queue(&self) -> Option<usize> {
        let named = |p: PortId| {
            self.members
                .iter()
                .any(|m| m.port == p && matches!(m.req, QueueRequest::Index(_)))
        };
        (1..self.owners.len())
            .find(|&q| self.owners[q].is_none())
            .or_else(|| (1..self.owners.len()).find(|&q| self.owners[q].is_some_and(|p| !named(p))))
    }

    /// The queue frames for `port` arrive on.
    pub fn queue_of(&self, port: PortId) -> usize {
        self.owners
            .iter()
            .position(|o| *o == Some(port))
            .unwrap_or(0)
    }

    /// The owner of queue `q` and its MAC (None for the shared queue or a free one).
    pub fn owner(&self, q: usize) -> Option<(PortId, Option<EthernetAddress>)> {
        let p = (*self.owners.get(q)?)?;
        let m = self.members.iter().find(|m| m.port == p)?;
        Some((p, m.mac))
    }

    /// Recomputes the owners: named queues first, then automatic requests
    /// in joining order onto the queues left. True when an owner changed.
    fn rebalance(&mut self) -> bool {
        let mut owners = vec![None; self.owners.len()];
        for m in &self.members {
            if let QueueRequest::Index(n) = m.req {
                if n < owners.len() && owners[n].is_none() {
                    owners[n] = Some(m.port);
                }
            }
        }
        // Automatic owners keep their queue when they can (a frame in
        // flight does not change queue for nothing).
        for (q, o) in self.owners.iter().enumerate().skip(1) {
            if let Some(p) = o {
                let auto = self
                    .members
                    .iter()
                    .any(|m| m.port == *p && m.req == QueueRequest::Auto);
                if auto && owners[q].is_none() {
                    owners[q] = Some(*p);
                }
            }
        }
        for m in &self.members {
            if m.req != QueueRequest::Auto || owners.contains(&Some(m.port)) {
                continue;
            }
            if let Some(free) = owners.iter().skip(1).position(Option::is_none) {
                owners[free + 1] = Some(m.port);
            }
        }
        let changed = owners != self.owners;
        self.owners = owners;
        changed
    }

    /// The filter program of queue `q`.
    pub fn program(&self, q: usize) -> Vec<BpfInsn> {
        if q == 0 {
            let mine: Vec<EthernetAddress> = (1..self.owners.len())
                .filter_map(|q| self.owner(q).and_then(|(_, mac)| mac))
                .collect();
            return bpf::all_but(&mine);
        }
        match self.owner(q) {
            Some((_, Some(mac))) => bpf::only(mac),
            _ => bpf::none(),
        }
    }
}

/// Classic BPF programs over the Ethernet header (a packet socket's filter
/// sees the frame from its destination MAC on).
pub mod bpf {
    use super::*;

    const LD_W_ABS: u16 = 0x20;
    const LD_H_ABS: u16 = 0x28;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    /// Keep the whole frame.
    const ACCEPT: u32 = u32::MAX;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> BpfInsn {
        BpfInsn { code, jt, jf, k }
    }

    fn halves(m: EthernetAddress) -> (u32, u32) {
        let b = m.0;
        (
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            u32::from(u16::from_be_bytes([b[4], b[5]])),
        )
    }

    /// Takes nothing (a queue whose owner's MAC is not known yet).
    pub fn none() -> Vec<BpfInsn> {
        vec![insn(RET_K, 0, 0, 0)]
    }

    /// Takes frames for `mac` only.
    pub fn only(mac: EthernetAddress) -> Vec<BpfInsn> {
        let (hi, lo) = halves(mac);
        vec![
            insn(LD_W_ABS, 0, 0, 0),
            insn(JEQ_K, 0, 3, hi),
            insn(LD_H_ABS, 0, 0, 4),
            insn(JEQ_K, 0, 1, lo),
            insn(RET_K, 0, 0, ACCEPT),
            insn(RET_K, 0, 0, 0),
        ]
    }

    /// Takes every frame except those for `macs` (short jumps only, so
    /// any number of addresses fits the 8-bit offsets).
    pub fn all_but(macs: &[EthernetAddress]) -> Vec<BpfInsn> {
        let mut p = Vec::with_capacity(macs.len() * 5 + 1);
        for &m in macs {
            let (hi, lo) = halves(m);
            p.push(insn(LD_W_ABS, 0, 0, 0));
            p.push(insn(JEQ_K, 0, 3, hi));
            p.push(insn(LD_H_ABS, 0, 0, 4));
            p.push(insn(JEQ_K, 0, 1, lo));
            p.push(insn(RET_K, 0, 0, 0));
        }
        p.push(insn(RET_K, 0, 0, ACCEPT));
        p
    }

    /// Runs a program of the shapes above on a frame (tests; the kernel
    /// runs the real thing): whether it takes the frame.
    pub fn accepts(prog: &[BpfInsn], frame: &[u8]) -> bool {
        let (mut a, mut pc) = (0u32, 0usize);
        while let Some(i) = prog.get(pc) {
            match i.code {
                LD_W_ABS => {
                    let k = i.k as usize;
                    let Some(b) = frame.get(k..k + 4) else {
                        return false;
                    };
                    a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                }
                LD_H_ABS => {
                    let k = i.k as usize;
                    let Some(b) = frame.get(k..k + 2) else {
                        return false;
                    };
                    a = u32::from(u16::from_be_bytes([b[0], b[1]]));
                }
                JEQ_K => {
                    pc += usize::from(if a == i.k { i.jt } else { i.jf });
                }
                RET_K => return i.k != 0,
                _ => return false,
            }
            pc += 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    fn frame_to(m: EthernetAddress) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&m.0);
        f
    }

    #[test]
    fn requests_parse() {
        assert_eq!("auto".parse(), Ok(QueueRequest::Auto));
        assert_eq!("shared".parse(), Ok(QueueRequest::Shared));
        assert_eq!("0".parse(), Ok(QueueRequest::Shared));
        assert_eq!("3".parse(), Ok(QueueRequest::Index(3)));
        assert!("x".parse::<QueueRequest>().is_err());
        let j: QueueRequest = serde_json::from_str("2").unwrap();
        assert_eq!(j, QueueRequest::Index(2));
        let j: QueueRequest = serde_json::from_str("\"auto\"").unwrap();
        assert_eq!(j, QueueRequest::Auto);
        assert_eq!(serde_json::to_string(&QueueRequest::Index(2)).unwrap(), "2");
    }

    #[test]
    fn queues_go_in_joining_order_while_they_last() {
        let mut t = QueueTable::new(3);
        for p in 1..=4 {
            t.join(PortId(p), QueueRequest::Auto, Some(mac(p as u8)))
                .unwrap();
        }
        assert_eq!(t.queue_of(PortId(1)), 1);
        assert_eq!(t.queue_of(PortId(2)), 2);
        assert_eq!(t.queue_of(PortId(3)), 0, "queues ran out: shared");
        assert_eq!(t.queue_of(PortId(4)), 0);
        // A leaving owner's queue goes to the first one waiting.
        assert!(t.leave(PortId(1)));
        assert_eq!(t.queue_of(PortId(3)), 1);
        assert_eq!(t.queue_of(PortId(2)), 2, "others keep theirs");
    }

    #[test]
    fn shared_and_named_requests() {
        let mut t = QueueTable::new(4);
        t.join(PortId(1), QueueRequest::Shared, Some(mac(1)))
            .unwrap();
        t.join(PortId(2), QueueRequest::Auto, Some(mac(2))).unwrap();
        assert_eq!(t.queue_of(PortId(1)), 0);
        assert_eq!(t.queue_of(PortId(2)), 1);
        // Naming an automatic owner's queue moves it elsewhere.
        t.join(PortId(3), QueueRequest::Index(1), Some(mac(3)))
            .unwrap();
        assert_eq!(t.queue_of(PortId(3)), 1);
        assert_eq!(t.queue_of(PortId(2)), 2);
        assert_eq!(
            t.check(QueueRequest::Index(1)),
            Err(QueueError::Taken {
                queue: 1,
                owner: PortId(3)
            })
        );
        assert_eq!(
            t.join(PortId(4), QueueRequest::Index(4), None),
            Err(QueueError::NoSuchQueue { want: 4, last: 3 })
        );
        assert!(
            t.check(QueueRequest::Index(2)).is_ok(),
            "auto owner gives way"
        );
    }

    #[test]
    fn a_flood_for_a_neighbour_lands_only_in_its_queue() {
        let mut t = QueueTable::new(3);
        t.join(PortId(1), QueueRequest::Auto, Some(mac(1))).unwrap();
        t.join(PortId(2), QueueRequest::Auto, None).unwrap();
        t.join(PortId(3), QueueRequest::Auto, Some(mac(3))).unwrap();
        let progs: Vec<_> = (0..3).map(|q| t.program(q)).collect();
        let takers = |m: EthernetAddress| -> Vec<usize> {
            (0..3)
                .filter(|&q| bpf::accepts(&progs[q], &frame_to(m)))
                .collect()
        };
        assert_eq!(takers(mac(1)), vec![1]);
        // Port 2 owns queue 2 but its MAC is unknown: its frames (and port 3's,
        // which found no queue) go to the shared queue until it is learned.
        assert_eq!(takers(mac(2)), vec![0]);
        assert_eq!(takers(mac(3)), vec![0]);
        assert_eq!(takers(EthernetAddress([0xff; 6])), vec![0]);
        assert!(t.set_mac(PortId(2), mac(2)));
        assert!(!t.set_mac(PortId(2), mac(2)));
        assert!(bpf::accepts(&t.program(2), &frame_to(mac(2))));
        assert!(!bpf::accepts(&t.program(0), &frame_to(mac(2))));
        // Runts are never taken.
        assert!(!bpf::accepts(&t.program(1), &[2, 0, 0]));
    }

    #[test]
    fn the_default_program_scales() {
        let macs: Vec<_> = (0..200u8).map(mac).collect();
        let p = bpf::all_but(&macs);
        assert!(!bpf::accepts(&p, &frame_to(mac(150))));
        assert!(bpf::accepts(
            &p,
            &frame_to(EthernetAddress([2, 0, 0, 0, 1, 0]))
        ));
    }
}
