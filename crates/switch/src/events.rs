//! Events: what changes in the switch, as `vnio switch events` streams it
//! (docs/switch-control.md "Events").
//!
//! A worker says what happened in a small fixed-size [`Event`]: no
//! `String`, no allocation (a port's name and a reset's reason are copied
//! into inline buffers), pushed into the one bounded lock-free
//! [`EventQueue`] that every worker and the control plane share. A full
//! queue drops the event and counts it; nothing ever waits. Events are
//! rare (a connection, a reset, a flap), so one queue for all is enough.
//! The fan-out (`events_hub.rs`) drains the queue, numbers and renders
//! each event as a JSON line ([`Streamed`]) and hands it to every subscriber.

use crate::stats::DropReason;
use crate::PortId;
use crossbeam_queue::ArrayQueue;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Events the shared queue holds before it drops new ones (an event is
/// about 300 bytes; drained every 20 ms, that is 50,000 events a second).
pub const QUEUE: usize = 1024;
/// Longest port name (as `PortSpec` allows).
pub const NAME: usize = 64;
/// Longest reset reason carried (longer ones are cut; the log has them whole).
pub const REASON: usize = 192;

/// Text of at most `N` bytes held inline, cut at a character boundary.
#[derive(Clone, Copy)]
pub struct Text<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Text<N> {
    /// `s`, cut to fit.
    pub fn new(s: &str) -> Self {
        let mut t = Self {
            len: 0,
            buf: [0; N],
        };
        let _ = fmt::Write::write_str(&mut t, s);
        t
    }

    /// What `d` displays, cut to fit.
    pub fn display(d: &dyn fmt::Display) -> Self {
        let mut t = Self::new("");
        let _ = fmt::Write::write_fmt(&mut t, format_args!("{d}"));
        t
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> fmt::Write for Text<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut take = s.len().min(N - self.len);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        // Never an error: a cut text is still a text (an error would make
        // `write!` of a long reason fail half-way for nothing).
        Ok(())
    }
}

impl<const N: usize> fmt::Debug for Text<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A port's name, inline.
pub type Name = Text<NAME>;

/// What happened (the worker's side: fixed size, no heap).
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A vhost-user front-end connected.
    Connected,
    /// A front-end's first queue started: what it negotiated.
    Negotiated {
        /// Virtio features acknowledged.
        features: u64,
        /// vhost-user protocol features acknowledged.
        protocol_features: u64,
        /// Queue pairs offered.
        queue_pairs: u16,
        /// Entries of the first receive ring.
        ring_size: u16,
    },
    /// The port was reset after an error.
    Reset {
        /// Why (as logged, cut to [`REASON`] bytes).
        reason: Text<REASON>,
    },
    /// The front-end went away.
    Disconnected,
    /// A virtqueue started or stopped (even: receive, odd: transmit).
    Queue {
        /// Its index.
        queue: u16,
        /// Running now.
        enabled: bool,
    },
    /// An uplink's carrier.
    Link {
        /// Carrier up.
        up: bool,
    },
    /// A port was added.
    PortAdded,
    /// A port was removed.
    PortRemoved,
    /// A port's policies changed.
    PortChanged,
    /// An address flapped: the port that held it claimed it back from `from`.
    MacFlap {
        /// The address.
        mac: [u8; 6],
        /// The port that had taken it.
        from: Name,
    },
    /// An address moved to this port from `from`, where it was live (a VM
    /// migrated, a host moved; flaps are [`Kind::MacFlap`]).
    MacMoved {
        /// The address.
        mac: [u8; 6],
        /// Its VLAN.
        vid: u16,
        /// The port that held it.
        from: Name,
    },
    /// Drops of one reason went above (or back under) the configured rate.
    Drops {
        /// The reason.
        reason: DropReason,
        /// Drops per second over the last check.
        per_sec: u64,
        /// The configured rate.
        threshold: u64,
        /// Above it now (false: back at or under).
        above: bool,
    },
}

/// One event with its port and when it happened.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    /// Wall clock, ns since the Unix epoch.
    pub wall_ns: u64,
    /// CLOCK_MONOTONIC, ns.
    pub mono_ns: u64,
    /// The port.
    pub port: PortId,
    /// Its name.
    pub name: Name,
    /// What happened.
    pub kind: Kind,
}

impl Event {
    /// `kind` on `port` now.
    pub fn now(port: PortId, name: &str, kind: Kind) -> Self {
        let wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self {
            wall_ns,
            mono_ns: crate::sys::events_io::monotonic_ns(),
            port,
            name: Name::new(name),
            kind,
        }
    }
}

/// The bounded queue from the workers (and the control plane) to the fan-out.
pub struct EventQueue {
    q: ArrayQueue<Event>,
    /// Events dropped because the queue was full.
    dropped: AtomicU64,
}

impl EventQueue {
    /// A queue of `cap` events (allocated now, never again).
    pub fn new(cap: usize) -> Self {
        Self {
            q: ArrayQueue::new(cap.max(1)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues what `kind` builds, stamped now; never blocks. A full queue
    /// counts the event as dropped without building it.
    #[cold]
    pub fn push(&self, port: PortId, name: &str, kind: impl FnOnce() -> Kind) {
        if self.q.is_full() || self.q.push(Event::now(port, name, kind())).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The oldest event.
    pub fn pop(&self) -> Option<Event> {
        self.q.pop()
    }

    /// Events dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// One line of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Streamed {
    /// This many events were not delivered to this subscriber (it read
    /// too slowly, or the switch's queue was full) before the next line.
    Lost {
        /// How many.
        lost: u64,
    },
    /// An event.
    Event(EventLine),
}

/// An event as streamed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// Numbers the switch's events from 1 (a gap: events this subscriber lost).
    pub seq: u64,
    /// Wall clock, ns since the Unix epoch.
    pub wall_ns: u64,
    /// CLOCK_MONOTONIC, ns.
    pub mono_ns: u64,
    /// The port's name.
    pub port: String,
    /// The port's identity.
    pub port_id: u32,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// What happened, as streamed (`"event": "<name>"` and its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum What {
    /// See [`Kind::Connected`].
    Connected,
    /// See [`Kind::Negotiated`].
    Negotiated {
        /// Virtio features acknowledged.
        features: u64,
        /// vhost-user protocol features acknowledged.
        protocol_features: u64,
        /// Queue pairs offered.
        queue_pairs: u16,
        /// Entries of the first receive ring.
        ring_size: u16,
    },
    /// See [`Kind::Reset`].
    Reset {
        /// Why.
        reason: String,
    },
    /// See [`Kind::Disconnected`].
    Disconnected,
    /// See [`Kind::Queue`].
    Queue {
        /// Its index (even: receive, odd: transmit).
        queue: u16,
        /// Running now.
        enabled: bool,
    },
    /// See [`Kind::Link`].
    Link {
        /// Carrier up.
        up: bool,
    },
    /// See [`Kind::PortAdded`].
    PortAdded,
    /// See [`Kind::PortRemoved`].
    PortRemoved,
    /// See [`Kind::PortChanged`].
    PortChanged,
    /// See [`Kind::MacFlap`]: `port` claimed `mac` back from `from`.
    MacFlap {
        /// The address.
        mac: String,
        /// The port that had taken it.
        from: String,
    },
    /// See [`Kind::MacMoved`]: `mac` moved to `port` from `from`.
    MacMoved {
        /// The address.
        mac: String,
        /// Its VLAN.
        vid: u16,
        /// The port that held it.
        from: String,
    },
    /// See [`Kind::Drops`].
    Drops {
        /// The reason's counter name.
        reason: String,
        /// Drops per second over the last check.
        per_sec: u64,
        /// The configured rate (`drop_event_rate`).
        threshold: u64,
        /// Above it now (false: back at or under).
        above: bool,
    },
}

impl EventLine {
    /// Event `e`, numbered `seq`.
    pub fn new(seq: u64, e: &Event) -> Self {
        let what = match e.kind {
            Kind::Connected => What::Connected,
            Kind::Negotiated {
                features,
                protocol_features,
                queue_pairs,
                ring_size,
            } => What::Negotiated {
                features,
                protocol_features,
                queue_pairs,
                ring_size,
            },
            Kind::Reset { reason } => What::Reset {
                reason: reason.as_str().into(),
            },
            Kind::Disconnected => What::Disconnected,
            Kind::Queue { queue, enabled } => What::Queue { queue, enabled },
            Kind::Link { up } => What::Link { up },
            Kind::PortAdded => What::PortAdded,
            Kind::PortRemoved => What::PortRemoved,
            Kind::PortChanged => What::PortChanged,
            Kind::MacFlap { mac, from } => What::MacFlap {
                mac: crate::wire::EthernetAddress(mac).to_string(),
                from: from.as_str().into(),
            },
            Kind::MacMoved { mac, vid, from } => What::MacMoved {
                mac: crate::wire::EthernetAddress(mac).to_string(),
                vid,
                from: from.as_str().into(),
            },
            Kind::Drops {
                reason,
                per_sec,
                threshold,
                above,
            } => What::Drops {
                reason: reason.name().into(),
                per_sec,
                threshold,
                above,
            },
        };
        Self {
            seq,
            wall_ns: e.wall_ns,
            mono_ns: e.mono_ns,
            port: e.name.as_str().into(),
            port_id: e.port.0,
            what,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let t = Text::<5>::new("abcé€");
        assert_eq!(t.as_str(), "abcé");
        let t = Text::<8>::display(&format_args!("{}-{}", 12345, "xyz"));
        assert_eq!(t.as_str(), "12345-xy");
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let q = EventQueue::new(2);
        for _ in 0..5 {
            q.push(PortId(1), "p1", || Kind::Connected);
        }
        assert_eq!(q.dropped(), 3);
        assert!(q.pop().is_some() && q.pop().is_some() && q.pop().is_none());
    }

    #[test]
    fn wire_form() {
        let mut e = Event::now(
            PortId(3),
            "vm1",
            Kind::MacFlap {
                mac: [2, 0, 0, 0, 0, 1],
                from: Name::new("vm2"),
            },
        );
        e.wall_ns = 5;
        e.mono_ns = 6;
        let s = serde_json::to_string(&Streamed::Event(EventLine::new(7, &e))).unwrap();
        assert_eq!(
            s,
            r#"{"seq":7,"wall_ns":5,"mono_ns":6,"port":"vm1","port_id":3,"event":"mac_flap","mac":"02:00:00:00:00:01","from":"vm2"}"#
        );
        let back: Streamed = serde_json::from_str(&s).unwrap();
        assert!(matches!(back, Streamed::Event(l) if l.seq == 7));
        let lost: Streamed = serde_json::from_str(r#"{"lost":4}"#).unwrap();
        assert_eq!(lost, Streamed::Lost { lost: 4 });
    }
}
