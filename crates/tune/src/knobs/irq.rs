//! Interrupt placement: IRQ affinity of NIC queues and irqbalance.

use crate::host::{Host, Unread};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

/// IRQ number to action names, from `/proc/interrupts`.
pub fn irq_names(host: &Host) -> Result<Vec<(u32, String)>, Unread> {
    let text = host.read("/proc/interrupts")?;
    let mut out = Vec::new();
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .map(|h| h.split_whitespace().count())
        .unwrap_or(0);
    for line in lines {
        let Some((num, rest)) = line.trim_start().split_once(':') else {
            continue;
        };
        let Ok(irq) = num.trim().parse::<u32>() else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // counts per CPU, then the chip, the hwirq/edge words, then names.
        let name = fields
            .iter()
            .skip(ncpu)
            .skip(2)
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        out.push((irq, name));
    }
    Ok(out)
}

/// Whether an IRQ name looks like a NIC queue.
pub fn is_nic_irq(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    (n.contains("virtio") && (n.contains("input") || n.contains("output")))
        || [
            "eth", "ens", "enp", "eno", "mlx", "ixgbe", "i40e", "ice", "bnxt", "-rx-", "-tx-",
            "txrx",
        ]
        .iter()
        .any(|k| n.contains(k))
}

/// Names of running processes (`comm`), from `/proc/*/comm`.
pub fn running(host: &Host, comm: &str) -> Result<Vec<u32>, Unread> {
    let mut out = Vec::new();
    for pid in host
        .list("/proc")?
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
    {
        if host
            .read(&format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c == comm)
        {
            out.push(pid);
        }
    }
    Ok(out)
}

fn affinity(host: &Host, _p: Profile) -> Result<Assessment, Unread> {
    let default = host.read("/proc/irq/default_smp_affinity")?;
    let mut nic = Vec::new();
    for (irq, name) in irq_names(host)? {
        if !is_nic_irq(&name) {
            continue;
        }
        let aff = host
            .read(&format!("/proc/irq/{irq}/smp_affinity_list"))
            .unwrap_or_else(|u| format!("unreadable ({u})"));
        nic.push(format!("{irq} {name} -> {aff}"));
    }
    let current = if nic.is_empty() {
        format!("default_smp_affinity {default}; no NIC queue interrupts seen")
    } else {
        format!(
            "default_smp_affinity {default}; {} NIC queue interrupts",
            nic.len()
        )
    };
    let mut a = Assessment::info(current);
    for ifname in crate::knobs::net::nics(host).unwrap_or_default() {
        if let Ok(node) = host.read(&format!("/sys/class/net/{ifname}/device/numa_node")) {
            let where_ = if node == "-1" {
                "no NUMA node reported".to_string()
            } else {
                format!("NUMA node {node}")
            };
            a = a.note(format!(
                "{ifname}: {where_}: keep its IRQs and consumers on that node's cores"
            ));
        }
    }
    for n in nic {
        a = a.note(n);
    }
    Ok(a)
}

fn irqbalance(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let pids = running(host, "irqbalance")?;
    let on = !pids.is_empty();
    let current = if on {
        format!("running (pid {})", pids[0])
    } else {
        "not running".to_string()
    };
    Ok(match p {
        Profile::Latency => Assessment::judge(!on, current)
            .note("or keep it and ban the latency cores: IRQBALANCE_BANNED_CPULIST"),
        Profile::Throughput => Assessment::judge(on, current),
        Profile::Balanced => Assessment::ok(current),
    })
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "irq.affinity",
        title: "IRQ affinity of NIC queues",
        layer: Layer::Host,
        reads: "/proc/interrupts, /proc/irq/*/smp_affinity_list, /proc/irq/default_smp_affinity",
        targets: Targets {
            latency: "each NIC queue's IRQ on the core (or its SMT sibling) that runs the consuming thread",
            throughput: "NIC queue IRQs spread over the cores of the NIC's NUMA node",
            balanced: "any",
        },
        why: "An interrupt taken on another core than the consumer adds an IPI or a cache-line transfer per packet.",
        tradeoff: "Pinning by hand must follow every change of threads and queues.",
        apply: ApplyKind::Manual,
        how: "write a CPU list to /proc/irq/<n>/smp_affinity_list (with irqbalance stopped or banned from those cores)",
        revert: "write the former list back, or restart irqbalance",
        volatile: false,
        assess: affinity,
    },
    Knob {
        id: "irq.irqbalance",
        title: "irqbalance daemon",
        layer: Layer::Host,
        reads: "/proc/*/comm",
        targets: Targets {
            latency: "not running (or with the latency cores banned)",
            throughput: "running",
            balanced: "any",
        },
        why: "irqbalance moves interrupts every few seconds: a moved NIC IRQ lands away from its consumer.",
        tradeoff: "Without it, interrupt load stays where the kernel first put it.",
        apply: ApplyKind::Manual,
        how: "systemctl stop irqbalance (or IRQBALANCE_BANNED_CPULIST=<cpus>)",
        revert: "systemctl start irqbalance",
        volatile: false,
        assess: irqbalance,
    },
];
