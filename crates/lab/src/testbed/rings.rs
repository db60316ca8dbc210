//! The virtqueue layout vnio's switch serves on the poll-mode hosts'
//! ports (knob `virtqueue`), read from its control socket while a pair
//! runs. A front-end asked for packed rings falls back to split ones
//! without a word when the back-end does not offer them, so a run records
//! the layout the switch says it served, not the one asked for, and a
//! point served another layout than asked fails ([`mismatch`]).

use std::time::{Duration, Instant};

use vnio_switch::control::{Client, Request};
use vnio_switch::worker::{PortInfo, VirtqueueInfo};

use super::{BedHost, Testbed};
use crate::scenario::Virtqueue;

/// How long the switch may take to run queues a front-end has started
/// (its worker handles the last vhost-user messages between rounds).
const RUNNING: Duration = Duration::from_secs(2);

/// The layout served on one host's port; None when the switch does not
/// say (a `switch_binary` older than the field).
pub type Served = (String, Option<VirtqueueInfo>);

impl Testbed {
    /// The layout vnio's switch serves on each of `hosts`' ports, once
    /// their queues run; None on other wires (the anchor switches are not
    /// asked: their layout is the one the endpoints offered, as DPDK's
    /// vhost library serves both).
    pub fn switch_virtqueues(&self, hosts: &[&BedHost]) -> Option<Result<Vec<Served>, String>> {
        let sock = self.switch_control()?;
        Some(read_virtqueues(&sock, hosts))
    }
}

fn read_virtqueues(sock: &std::path::Path, hosts: &[&BedHost]) -> Result<Vec<Served>, String> {
    let mut client = Client::connect(sock).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + RUNNING;
    loop {
        let list = client
            .request(&Request::PortList)
            .map_err(|e| e.to_string())?;
        let ports: Vec<PortInfo> =
            serde_json::from_value(list).map_err(|e| format!("port list: {e}"))?;
        let mut served = Vec::new();
        let mut waiting = Vec::new();
        for h in hosts {
            let socket = h.vhost_user.as_ref().map(|v| v.0.display().to_string());
            let Some(port) = ports
                .iter()
                .find(|p| socket.is_some() && p.socket == socket)
            else {
                return Err(format!("no port of the switch is host {}'s", h.name));
            };
            if port.running {
                served.push((h.name.clone(), port.virtqueue));
            } else {
                waiting.push(h.name.as_str());
            }
        }
        if waiting.is_empty() {
            return Ok(served);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the queues of {}'s port did not run within {} s",
                waiting.join(", "),
                RUNNING.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why `served` is not the layout `asked` for (None: it is, or the switch
/// does not say): one line. Packed is asked with IN_ORDER; a split ring's
/// order is the front-end's business (DPDK's asks for it by default).
pub fn mismatch(asked: Virtqueue, served: &[Served]) -> Option<String> {
    let want_packed = asked == Virtqueue::Packed;
    served.iter().find_map(|(host, v)| {
        let v = (*v)?;
        let ok = v.packed == want_packed && (!want_packed || v.in_order);
        (!ok).then(|| {
            format!(
                "virtqueue = {:?} was asked, but the switch serves host {host}'s port {v} rings",
                asked.as_str()
            )
        })
    })
}

/// `a packed in-order, b packed in-order`, for the point's record.
pub fn describe(served: &[Served]) -> serde_json::Value {
    served
        .iter()
        .map(|(host, v)| {
            let layout = v.map_or_else(|| "not said".to_owned(), |v| v.to_string());
            (host.clone(), serde_json::Value::String(layout))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Memory for the DPDK endpoint program on hugepages (`-m`, MiB): the 16384-mbuf pool
/// (about 40 MiB) and the rings, with room to spare.
pub const HUGE_MB: u64 = 128;
/// What the DPDK endpoint program's devices offer, for the testbed's notes.
pub fn virtqueue_offered(virtqueue: Virtqueue) -> &'static str {
    match virtqueue {
        Virtqueue::Split => "split virtqueues",
        Virtqueue::Packed => "packed virtqueues in order (packed_vq=1,in_order=1)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(packed: bool, in_order: bool) -> Vec<Served> {
        ["a", "b"]
            .map(|h| (h.to_owned(), Some(VirtqueueInfo { packed, in_order })))
            .to_vec()
    }

    #[test]
    fn a_layout_other_than_asked_is_one_line_naming_the_host() {
        assert_eq!(mismatch(Virtqueue::Packed, &served(true, true)), None);
        assert_eq!(mismatch(Virtqueue::Split, &served(false, true)), None);
        assert_eq!(mismatch(Virtqueue::Split, &served(false, false)), None);
        assert_eq!(
            mismatch(Virtqueue::Packed, &served(false, true)).as_deref(),
            Some("virtqueue = \"packed\" was asked, but the switch serves host a's port split in-order rings")
        );
        let e = mismatch(Virtqueue::Packed, &served(true, false)).unwrap();
        assert!(e.contains("packed rings"), "{e}");
        assert!(mismatch(Virtqueue::Split, &served(true, true)).is_some());
        // A switch that does not say is not taken for a wrong one.
        assert_eq!(mismatch(Virtqueue::Packed, &[("a".to_owned(), None)]), None);
    }

    #[test]
    fn the_record_names_each_hosts_layout() {
        let mut s = served(true, true);
        s[1].1 = None;
        assert_eq!(
            describe(&s),
            serde_json::json!({ "a": "packed in-order", "b": "not said" })
        );
    }
}
