//! Traffic control on an interface's egress: netem (delay, jitter, loss) and
//! an htb rate limit, as the root qdisc, through rtnetlink.
//!
//! The kernel's option structures (`struct tc_netem_qopt`, `tc_htb_glob`,
//! `tc_htb_opt` in `linux/pkt_sched.h`) are encoded here by hand: the
//! netlink crate has no typed netem or htb options.

use std::io;
use std::time::Duration;

use netlink_packet_core::{DefaultNla, NLM_F_CREATE, NLM_F_REPLACE};
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage};
use netlink_packet_route::RouteNetlinkMessage;

use crate::error::{Error, Result};
use crate::handle::Handle;

const TCA_OPTIONS: u16 = 2;
const TCA_NETEM_LATENCY64: u16 = 10;
const TCA_NETEM_JITTER64: u16 = 11;
const TCA_HTB_PARMS: u16 = 1;
const TCA_HTB_INIT: u16 = 2;
const TCA_HTB_RATE64: u16 = 6;
const TCA_HTB_CEIL64: u16 = 7;
/// Packet-scheduler clock ticks are 64 ns (PSCHED_SHIFT = 6).
const PSCHED_TICK_NS: u64 = 64;
const TC_LINKLAYER_ETHERNET: u8 = 1;
/// The htb handle used for the root qdisc (1:) and its one class (1:1).
const HTB_MAJOR: u16 = 1;
const HTB_CLASS: u16 = 1;

/// netem settings: every packet leaving the interface is delayed by
/// `delay` ± `jitter` and dropped with probability `loss_percent` / 100.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Netem {
    /// Added one-way delay.
    pub delay: Duration,
    /// Random variation of the delay (uniform).
    pub jitter: Duration,
    /// Random loss, 0.0 to 100.0.
    pub loss_percent: f64,
    /// Queue length in packets (0 = netem's default, 1000).
    pub limit: u32,
}

/// An htb rate limit on the whole interface: one class, which is also the
/// default class, shaping to `rate` with bursts up to `ceil`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Guaranteed rate in bits per second.
    pub rate_bps: u64,
    /// Ceiling in bits per second (>= rate; equal to it for a hard limit).
    pub ceil_bps: u64,
}

impl RateLimit {
    /// A hard limit: rate and ceiling both `bps`.
    pub fn hard(bps: u64) -> RateLimit {
        RateLimit {
            rate_bps: bps,
            ceil_bps: bps,
        }
    }
}

/// A queueing discipline as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QdiscState {
    /// Kind, e.g. `htb`, `netem`, `noqueue`, `pfifo_fast`.
    pub kind: String,
    /// Handle as (major, minor).
    pub handle: (u16, u16),
    /// True if attached at the root of the interface's egress.
    pub root: bool,
}

impl Handle {
    /// Replace the root qdisc of `name` with netem.
    pub fn set_netem(&mut self, name: &str, netem: &Netem) -> Result<()> {
        if !(0.0..=100.0).contains(&netem.loss_percent) {
            return Err(Error::os(
                format!("setting netem on {name} in {}", self.place),
                io::Error::new(io::ErrorKind::InvalidInput, "loss must be 0 to 100 %"),
            ));
        }
        let index = self.index(name)?;
        // Handle 0: the kernel picks one.
        let message = qdisc_message(index, TcHandle::UNSPEC, "netem", netem_options(netem));
        self.tc_request(
            RouteNetlinkMessage::NewQueueDiscipline(message),
            NLM_F_CREATE | NLM_F_REPLACE,
            "netem",
            format!("setting netem on {name} in {}", self.place),
        )
    }

    /// Replace the root qdisc of `name` with an htb rate limit.
    pub fn set_rate_limit(&mut self, name: &str, limit: RateLimit) -> Result<()> {
        let what = format!("setting rate limit on {name} in {}", self.place);
        if limit.rate_bps < 8 || limit.ceil_bps < limit.rate_bps {
            return Err(Error::os(
                what,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "rate must be at least 8 bit/s and ceil at least rate",
                ),
            ));
        }
        let index = self.index(name)?;
        let qdisc = qdisc_message(
            index,
            TcHandle {
                major: HTB_MAJOR,
                minor: 0,
            },
            "htb",
            nla(TCA_HTB_INIT, &htb_glob(HTB_CLASS)),
        );
        self.tc_request(
            RouteNetlinkMessage::NewQueueDiscipline(qdisc),
            NLM_F_CREATE | NLM_F_REPLACE,
            "htb",
            what.clone(),
        )?;
        let mut class = TcMessage::default();
        class.header.index = index as i32;
        class.header.handle = TcHandle {
            major: HTB_MAJOR,
            minor: HTB_CLASS,
        };
        class.header.parent = TcHandle {
            major: HTB_MAJOR,
            minor: 0,
        };
        class.attributes.push(TcAttribute::Kind("htb".into()));
        class.attributes.push(TcAttribute::Other(DefaultNla::new(
            TCA_OPTIONS,
            htb_class_options(limit),
        )));
        self.tc_request(
            RouteNetlinkMessage::NewTrafficClass(class),
            NLM_F_CREATE | NLM_F_REPLACE,
            "htb",
            what,
        )
    }

    /// Remove the root qdisc of `name`, restoring the kernel's default.
    /// Not an error if there was nothing to remove.
    pub fn clear_qdisc(&mut self, name: &str) -> Result<()> {
        let index = self.index(name)?;
        let mut message = TcMessage::default();
        message.header.index = index as i32;
        message.header.parent = TcHandle::ROOT;
        match self
            .rtnl
            .request(RouteNetlinkMessage::DelQueueDiscipline(message), 0)
        {
            Ok(_) => Ok(()),
            // ENOENT: no qdisc of ours; EINVAL: the default one, not deletable.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EINVAL)) => Ok(()),
            Err(e) => Err(Error::os(
                format!("removing qdisc from {name} in {}", self.place),
                e,
            )),
        }
    }

    /// The qdiscs attached to `name`.
    pub fn qdiscs(&mut self, name: &str) -> Result<Vec<QdiscState>> {
        let index = self.index(name)?;
        let replies = self
            .rtnl
            .dump(RouteNetlinkMessage::GetQueueDiscipline(TcMessage::default()))
            .map_err(|e| Error::os(format!("listing qdiscs in {}", self.place), e))?;
        let mut out = Vec::new();
        for reply in replies {
            let RouteNetlinkMessage::NewQueueDiscipline(message) = reply else {
                continue;
            };
            if message.header.index != index as i32 {
                continue;
            }
            let kind = message.attributes.iter().find_map(|a| match a {
                TcAttribute::Kind(kind) => Some(kind.clone()),
                _ => None,
            });
            out.push(QdiscState {
                kind: kind.unwrap_or_default(),
                handle: (message.header.handle.major, message.header.handle.minor),
                root: message.header.parent == TcHandle::ROOT,
            });
        }
        Ok(out)
    }

    fn tc_request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
        kind: &str,
        what: String,
    ) -> Result<()> {
        match self.rtnl.request(message, flags) {
            Ok(_) => Ok(()),
            // The kernel answers ENOENT for a qdisc kind it does not have
            // (module absent or not built): say so.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(Error::os(
                what,
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "qdisc {kind} is not available in this kernel (CONFIG_NET_SCH_{})",
                        kind.to_uppercase()
                    ),
                ),
            )),
            Err(e) => Err(Error::os(what, e)),
        }
    }
}

fn qdisc_message(index: u32, handle: TcHandle, kind: &str, options: Vec<u8>) -> TcMessage {
    let mut message = TcMessage::default();
    message.header.index = index as i32;
    message.header.handle = handle;
    message.header.parent = TcHandle::ROOT;
    message.attributes.push(TcAttribute::Kind(kind.to_owned()));
    message
        .attributes
        .push(TcAttribute::Other(DefaultNla::new(TCA_OPTIONS, options)));
    message
}

/// One netlink attribute: length, type, payload, padding to 4 bytes.
fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut out = Vec::with_capacity((len + 3) & !3);
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize((len + 3) & !3, 0);
    out
}

fn ticks(d: Duration) -> u32 {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    u32::try_from(ns / PSCHED_TICK_NS).unwrap_or(u32::MAX)
}

fn nanos_i64(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// TCA_OPTIONS for netem: `struct tc_netem_qopt` followed by the 64-bit
/// latency and jitter attributes (nanoseconds, which take precedence).
fn netem_options(netem: &Netem) -> Vec<u8> {
    let loss = (netem.loss_percent / 100.0 * f64::from(u32::MAX)).round() as u32;
    let limit = if netem.limit == 0 { 1000 } else { netem.limit };
    let mut out = Vec::with_capacity(48);
    for field in [
        ticks(netem.delay),  // latency
        limit,               // limit
        loss,                // loss
        0,                   // gap
        0,                   // duplicate
        ticks(netem.jitter), // jitter
    ] {
        out.extend_from_slice(&field.to_ne_bytes());
    }
    out.extend(nla(
        TCA_NETEM_LATENCY64,
        &nanos_i64(netem.delay).to_ne_bytes(),
    ));
    out.extend(nla(
        TCA_NETEM_JITTER64,
        &nanos_i64(netem.jitter).to_ne_bytes(),
    ));
    out
}

/// `struct tc_htb_glob`: version 3, rate2quantum 10, default class.
fn htb_glob(default_class: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    for field in [3u32, 10, u32::from(default_class), 0, 0] {
        out.extend_from_slice(&field.to_ne_bytes());
    }
    out
}

/// `struct tc_ratespec` for `bytes_per_sec` (saturated; the 64-bit
/// attribute carries the real value above 4 GB/s).
fn ratespec(bytes_per_sec: u64) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[1] = TC_LINKLAYER_ETHERNET;
    let rate = u32::try_from(bytes_per_sec).unwrap_or(u32::MAX);
    out[8..12].copy_from_slice(&rate.to_ne_bytes());
    out
}

/// Bucket size in ticks: enough for 4 ms at `bytes_per_sec` and at least one
/// full-size frame.
fn buffer_ticks(bytes_per_sec: u64) -> u32 {
    let burst = (bytes_per_sec / 250).max(1600);
    let ns = burst.saturating_mul(1_000_000_000) / bytes_per_sec.max(1);
    u32::try_from(ns / PSCHED_TICK_NS).unwrap_or(u32::MAX)
}

/// TCA_OPTIONS for the htb class: `struct tc_htb_opt` plus 64-bit rates.
fn htb_class_options(limit: RateLimit) -> Vec<u8> {
    let rate = limit.rate_bps / 8;
    let ceil = limit.ceil_bps / 8;
    let mut opt = Vec::with_capacity(44);
    opt.extend_from_slice(&ratespec(rate));
    opt.extend_from_slice(&ratespec(ceil));
    for field in [buffer_ticks(rate), buffer_ticks(ceil), 0, 0, 0] {
        // buffer, cbuffer, quantum (0: derived from rate2quantum), level, prio
        opt.extend_from_slice(&field.to_ne_bytes());
    }
    let mut out = nla(TCA_HTB_PARMS, &opt);
    out.extend(nla(TCA_HTB_RATE64, &rate.to_ne_bytes()));
    out.extend(nla(TCA_HTB_CEIL64, &ceil.to_ne_bytes()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
    }

    #[test]
    fn nla_is_padded() {
        let a = nla(7, &[1, 2, 3]);
        assert_eq!(a.len(), 8);
        assert_eq!(u16::from_ne_bytes([a[0], a[1]]), 7);
        assert_eq!(u16::from_ne_bytes([a[2], a[3]]), 7);
        assert_eq!(&a[4..], &[1, 2, 3, 0]);
    }

    #[test]
    fn netem_layout() {
        let o = netem_options(&Netem {
            delay: Duration::from_micros(640),
            jitter: Duration::from_micros(64),
            loss_percent: 50.0,
            limit: 0,
        });
        assert_eq!(o.len(), 24 + 12 + 12);
        assert_eq!(u32_at(&o, 0), 10_000); // 640 us in 64 ns ticks
        assert_eq!(u32_at(&o, 4), 1000);
        assert_eq!(u32_at(&o, 8), u32::MAX / 2 + 1);
        assert_eq!(u32_at(&o, 20), 1000);
        assert_eq!(u16::from_ne_bytes([o[26], o[27]]), TCA_NETEM_LATENCY64);
        assert_eq!(i64::from_ne_bytes(o[28..36].try_into().unwrap()), 640_000);
    }

    #[test]
    fn htb_layout() {
        let o = htb_class_options(RateLimit::hard(80_000_000));
        assert_eq!(u16::from_ne_bytes([o[0], o[1]]), 4 + 44);
        assert_eq!(u16::from_ne_bytes([o[2], o[3]]), TCA_HTB_PARMS);
        let opt = &o[4..48];
        assert_eq!(opt[1], TC_LINKLAYER_ETHERNET);
        assert_eq!(u32_at(opt, 8), 10_000_000);
        assert_eq!(u32_at(opt, 20), 10_000_000);
        // 40 kB at 10 MB/s = 4 ms = 62500 ticks.
        assert_eq!(u32_at(opt, 24), 62_500);
        assert_eq!(htb_glob(1).len(), 20);
        assert_eq!(u32_at(&htb_glob(1), 8), 1);
    }
}
