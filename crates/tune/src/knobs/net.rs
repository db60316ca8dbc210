//! Network: NIC interrupt coalescing and offloads (ethtool ioctl), busy
//! polling, per-device NAPI settings, RPS/XPS. `vnio tune` never changes a
//! network interface: NIC knobs are reported with the command to run.

use super::change;
use crate::host::{Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Status, Targets};

/// Interfaces backed by a device (physical or virtio), not `lo`, bridges,
/// tunnels or ifb.
pub fn nics(host: &Host) -> Result<Vec<String>, Unread> {
    let all = host.list("/sys/class/net")?;
    Ok(all
        .into_iter()
        .filter(|n| n != "lo" && host.exists(&format!("/sys/class/net/{n}/device")))
        .collect())
}

fn no_nic() -> Assessment {
    Assessment::not_visible("no network interface backed by a device")
}

/// The worst of several statuses (differs > unreadable > not visible > ok).
fn worst(a: Status, b: Status) -> Status {
    let rank = |s| match s {
        Status::Differs => 4,
        Status::Unreadable => 3,
        Status::NotVisible => 2,
        Status::Info => 1,
        Status::Ok => 0,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

fn probe_status(e: &std::io::Error) -> (Status, String) {
    if matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL)
    ) {
        return (Status::NotVisible, "the driver does not report it".into());
    }
    match e.kind() {
        std::io::ErrorKind::Unsupported => (Status::NotVisible, e.to_string()),
        std::io::ErrorKind::PermissionDenied => {
            (Status::Unreadable, format!("permission denied ({e})"))
        }
        _ => (Status::Unreadable, e.to_string()),
    }
}

fn coalescing(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let ifs = nics(host)?;
    if ifs.is_empty() {
        return Ok(no_nic());
    }
    let mut status = Status::Ok;
    let mut parts = Vec::new();
    for ifname in &ifs {
        match host.probe().coalesce(ifname) {
            Ok(c) => {
                let good = match p {
                    Profile::Latency => c.rx_usecs == 0 && !c.adaptive_rx && c.rx_frames <= 1,
                    Profile::Throughput => c.adaptive_rx || c.rx_usecs > 0 || c.rx_frames > 1,
                    Profile::Balanced => true,
                };
                status = worst(status, if good { Status::Ok } else { Status::Differs });
                parts.push(format!(
                    "{ifname}: rx-usecs {} rx-frames {} adaptive-rx {} tx-usecs {} tx-frames {}",
                    c.rx_usecs,
                    c.rx_frames,
                    if c.adaptive_rx { "on" } else { "off" },
                    c.tx_usecs,
                    c.tx_frames
                ));
            }
            Err(e) => {
                let (s, what) = probe_status(&e);
                status = worst(status, s);
                parts.push(format!("{ifname}: {what}"));
            }
        }
    }
    Ok(Assessment::new(status, parts.join("; ")))
}

fn offloads(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let ifs = nics(host)?;
    if ifs.is_empty() {
        return Ok(no_nic());
    }
    let onoff = |v: Option<bool>| match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    };
    let mut status = Status::Ok;
    let mut parts = Vec::new();
    for ifname in &ifs {
        match host.probe().offloads(ifname) {
            Ok(o) => {
                let good = match p {
                    Profile::Latency => o.lro != Some(true),
                    Profile::Throughput => o.gro != Some(false),
                    Profile::Balanced => true,
                };
                status = worst(status, if good { Status::Ok } else { Status::Differs });
                parts.push(format!(
                    "{ifname}: lro {} gro {}",
                    onoff(o.lro),
                    onoff(o.gro)
                ));
            }
            Err(e) => {
                let (s, what) = probe_status(&e);
                status = worst(status, s);
                parts.push(format!("{ifname}: {what}"));
            }
        }
    }
    Ok(Assessment::new(status, parts.join("; ")))
}

fn busy_poll(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const POLL: &str = "/proc/sys/net/core/busy_poll";
    const READ: &str = "/proc/sys/net/core/busy_read";
    let poll: u64 = host.parse(POLL)?;
    let read: u64 = host.parse(READ)?;
    let want = if p == Profile::Latency { 50 } else { 0 };
    let mut a = Assessment::judge(
        poll == want && read == want,
        format!("busy_poll={poll} busy_read={read}"),
    );
    if poll != want {
        a = a.change(change(POLL, want.to_string(), poll.to_string()));
    }
    if read != want {
        a = a.change(change(READ, want.to_string(), read.to_string()));
    }
    Ok(a)
}

fn napi(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let ifs = nics(host)?;
    if ifs.is_empty() {
        return Ok(no_nic());
    }
    let mut parts = Vec::new();
    let mut good = true;
    for ifname in &ifs {
        let base = format!("/sys/class/net/{ifname}");
        let defer: u64 = match host.parse(&format!("{base}/napi_defer_hard_irqs")) {
            Ok(v) => v,
            Err(u) if u.kind == UnreadKind::Missing => {
                parts.push(format!(
                    "{ifname}: no napi_defer_hard_irqs (kernel older than 5.11)"
                ));
                continue;
            }
            Err(u) => return Err(u),
        };
        let flush: u64 = host.parse(&format!("{base}/gro_flush_timeout"))?;
        if p == Profile::Latency && (defer != 0 || flush != 0) {
            good = false;
        }
        parts.push(format!(
            "{ifname}: napi_defer_hard_irqs {defer} gro_flush_timeout {flush}"
        ));
    }
    Ok(Assessment::judge(good, parts.join("; ")))
}

fn rps_xps(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let ifs = nics(host)?;
    if ifs.is_empty() {
        return Ok(no_nic());
    }
    let mut parts = Vec::new();
    for ifname in &ifs {
        let qdir = format!("/sys/class/net/{ifname}/queues");
        let queues = host.list(&qdir)?;
        let rx: Vec<&String> = queues.iter().filter(|q| q.starts_with("rx-")).collect();
        let tx: Vec<&String> = queues.iter().filter(|q| q.starts_with("tx-")).collect();
        let mut rps_on = 0;
        for q in &rx {
            let mask = host.read(&format!("{qdir}/{q}/rps_cpus"))?;
            let digits: String = mask.chars().filter(|c| *c != ',').collect();
            if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(Unread::garbage(
                    &format!("{qdir}/{q}/rps_cpus"),
                    format!(
                        "expected a hex CPU mask, found {}",
                        crate::host::excerpt(&mask)
                    ),
                ));
            }
            if digits.chars().any(|c| c != '0') {
                rps_on += 1;
            }
        }
        let mut xps_on = 0;
        for q in &tx {
            if host
                .read(&format!("{qdir}/{q}/xps_cpus"))
                .is_ok_and(|m| m.chars().any(|c| c.is_ascii_hexdigit() && c != '0'))
            {
                xps_on += 1;
            }
        }
        parts.push(format!(
            "{ifname}: {} rx queues ({rps_on} with RPS), {} tx queues ({xps_on} with XPS)",
            rx.len(),
            tx.len()
        ));
    }
    Ok(Assessment::info(parts.join("; ")))
}

fn tcp_fastopen(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const TFO: &str = "/proc/sys/net/ipv4/tcp_fastopen";
    let v: u64 = host.parse(TFO)?;
    let word = match v & 3 {
        0 => "off",
        1 => "client",
        2 => "server",
        _ => "client and server",
    };
    let good = p != Profile::Latency || v & 3 == 3;
    let a = Assessment::judge(good, format!("tcp_fastopen={v} ({word})"));
    Ok(if good {
        a
    } else {
        a.change(change(TFO, (v | 3).to_string(), v.to_string()))
    })
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "net.coalescing",
        title: "NIC interrupt coalescing (ethtool -c)",
        layer: Layer::Host,
        reads: "SIOCETHTOOL ETHTOOL_GCOALESCE on each interface with a device (/sys/class/net/*/device)",
        targets: Targets {
            latency: "rx-usecs 0, rx-frames 0 or 1, adaptive-rx off",
            throughput: "adaptive-rx on or rx-usecs > 0",
            balanced: "any (driver default)",
        },
        why: "The NIC (or vNIC) holds the interrupt for a received packet until a timer or a frame count: the wait is added to latency.",
        tradeoff: "One interrupt per packet: more CPU at high packet rates; may disable hardware LRO.",
        apply: ApplyKind::Manual,
        how: "ethtool -C <if> adaptive-rx off rx-usecs 0 rx-frames 1 (vnio tune never changes an interface)",
        revert: "ethtool -C <if> with the values shown by this audit",
        volatile: false,
        assess: coalescing,
    },
    Knob {
        id: "net.offloads",
        title: "Receive offloads: LRO and GRO (ethtool -k)",
        layer: Layer::Guest,
        reads: "SIOCETHTOOL ETHTOOL_GFLAGS (LRO) and ETHTOOL_GGRO (GRO)",
        targets: Targets {
            latency: "LRO off (GRO may stay on: it flushes at the end of each NAPI poll)",
            throughput: "GRO on, LRO on where the NIC has it",
            balanced: "any (driver default)",
        },
        why: "LRO holds segments to merge them and upsets delayed ACKs: time added to TCP request-response.",
        tradeoff: "Without aggregation, bulk TCP costs more CPU per byte.",
        apply: ApplyKind::Manual,
        how: "ethtool -K <if> lro off",
        revert: "ethtool -K <if> lro on",
        volatile: false,
        assess: offloads,
    },
    Knob {
        id: "net.busy-poll",
        title: "Socket busy polling (net.core.busy_poll, busy_read)",
        layer: Layer::Guest,
        reads: "/proc/sys/net/core/busy_poll, busy_read",
        targets: Targets {
            latency: "busy_poll=50 busy_read=50 (us)",
            throughput: "0 (off)",
            balanced: "0 (off)",
        },
        why: "A blocking receive polls the device queue for up to this long instead of sleeping until the interrupt.",
        tradeoff: "The waiting thread spins: one core busy per waiting socket.",
        apply: ApplyKind::Runtime,
        how: "sysctl -w net.core.busy_poll=50 net.core.busy_read=50",
        revert: "write the former values back (journaled)",
        volatile: false,
        assess: busy_poll,
    },
    Knob {
        id: "net.napi",
        title: "Per-device NAPI: napi_defer_hard_irqs, gro_flush_timeout",
        layer: Layer::Guest,
        reads: "/sys/class/net/*/napi_defer_hard_irqs, gro_flush_timeout",
        targets: Targets {
            latency: "0 and 0 (interrupt at once), unless busy polling with SO_PREFER_BUSY_POLL",
            throughput: "any (deferral cuts interrupts)",
            balanced: "any",
        },
        why: "Deferring hard IRQs and GRO flushes batches packets under a timer: good for rate, bad for the first packet.",
        tradeoff: "More interrupts.",
        apply: ApplyKind::Manual,
        how: "echo 0 > /sys/class/net/<if>/napi_defer_hard_irqs; echo 0 > /sys/class/net/<if>/gro_flush_timeout",
        revert: "write the values shown by this audit back",
        volatile: false,
        assess: napi,
    },
    Knob {
        id: "net.rps-xps",
        title: "Receive/transmit packet steering (RPS, XPS)",
        layer: Layer::Guest,
        reads: "/sys/class/net/*/queues/rx-*/rps_cpus, tx-*/xps_cpus",
        targets: Targets {
            latency: "RPS off when the NIC has a queue per consumer core (RPS adds an IPI hop); XPS matching the queues",
            throughput: "RPS spread when the NIC has fewer queues than cores",
            balanced: "any",
        },
        why: "RPS hands each packet to another core by IPI: spreads load, adds a hop.",
        tradeoff: "Without RPS, one queue's packets are processed on one core.",
        apply: ApplyKind::Manual,
        how: "write a hex CPU mask to /sys/class/net/<if>/queues/rx-*/rps_cpus (0 = off)",
        revert: "write the former mask back",
        volatile: false,
        assess: rps_xps,
    },
    Knob {
        id: "net.tcp-fastopen",
        title: "TCP Fast Open (net.ipv4.tcp_fastopen)",
        layer: Layer::Guest,
        reads: "/proc/sys/net/ipv4/tcp_fastopen",
        targets: Targets {
            latency: "3 (client and server)",
            throughput: "any",
            balanced: "any",
        },
        why: "Data in the SYN saves a round trip on each new connection (only for applications that ask for it).",
        tradeoff: "A SYN with data may be replayed: only idempotent first requests should use it.",
        apply: ApplyKind::Runtime,
        how: "sysctl -w net.ipv4.tcp_fastopen=3",
        revert: "write the former value back (journaled)",
        volatile: false,
        assess: tcp_fastopen,
    },
];
