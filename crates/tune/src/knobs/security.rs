//! Packet filtering and security modules on the packet path.

use crate::host::{Host, Unread, UnreadKind};
use crate::knob::{ApplyKind, Assessment, Knob, Layer, Profile, Targets};

fn table_names(host: &Host, path: &str) -> Result<Vec<String>, Unread> {
    match host.read(path) {
        Ok(s) => Ok(s
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()),
        Err(u) if u.kind == UnreadKind::Missing => Ok(Vec::new()),
        Err(u) => Err(u),
    }
}

fn firewall(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let v4 = table_names(host, "/proc/net/ip_tables_names")?;
    let v6 = table_names(host, "/proc/net/ip6_tables_names")?;
    let mut counted = 0u64;
    let mut notes = Vec::new();
    let mut uncounted = Vec::new();
    for (ipv6, tables) in [(false, &v4), (true, &v6)] {
        let cmd = if ipv6 { "ip6tables" } else { "iptables" };
        for t in tables {
            match host.probe().iptables_entries(ipv6, t) {
                Ok((entries, hooks)) => {
                    let rules = u64::from(entries).saturating_sub(u64::from(hooks) + 1);
                    counted += rules;
                    notes.push(format!(
                        "{cmd} {t}: {entries} entries, at most {rules} rules"
                    ));
                }
                Err(e) => uncounted.push(format!("{cmd} {t} ({e})")),
            }
        }
    }
    let nft_loaded = host.exists("/sys/module/nf_tables");
    if nft_loaded {
        match host.probe().nft_rules() {
            Ok(n) => {
                counted += n;
                notes.push(format!("nftables: {n} rules"));
            }
            Err(e) => uncounted.push(format!("nftables ({e})")),
        }
    }
    let current = if v4.is_empty() && v6.is_empty() && !nft_loaded {
        "no legacy iptables table in use, nf_tables not loaded".to_string()
    } else {
        format!(
            "legacy iptables tables: {}; nf_tables {}; at most {counted} rules counted",
            if v4.is_empty() && v6.is_empty() {
                "none".to_string()
            } else {
                [v4.join(","), v6.join(",")].join(" / ")
            },
            if nft_loaded { "loaded" } else { "not loaded" }
        )
    };
    let good = p == Profile::Balanced || counted == 0;
    let mut a = Assessment::judge(good, current);
    for n in notes {
        a = a.note(n);
    }
    if !uncounted.is_empty() {
        a = a.note(format!("not counted: {}", uncounted.join("; ")));
    }
    Ok(a)
}

fn conntrack(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    const COUNT: &str = "/proc/sys/net/netfilter/nf_conntrack_count";
    const MAX: &str = "/proc/sys/net/netfilter/nf_conntrack_max";
    let count: u64 = match host.parse(COUNT) {
        Ok(v) => v,
        Err(u) if u.kind == UnreadKind::Missing => {
            return Ok(Assessment::ok("conntrack not loaded"))
        }
        Err(u) => return Err(u),
    };
    let max: u64 = host.parse(MAX)?;
    let current = format!("{count} of {max} entries");
    let nearly_full = max > 0 && count * 10 > max * 8;
    Ok(match p {
        Profile::Latency => Assessment::judge(!nearly_full, current).note(
            "conntrack loaded: every packet is looked up; exempt latency flows with a notrack rule",
        ),
        _ => Assessment::judge(!nearly_full, current),
    })
}

fn lsm(host: &Host, p: Profile) -> Result<Assessment, Unread> {
    let mut parts = Vec::new();
    let mut enforcing = false;
    match host.read("/sys/fs/selinux/enforce") {
        Ok(v) if v == "1" => {
            enforcing = true;
            parts.push("SELinux enforcing".to_string());
        }
        Ok(v) if v == "0" => parts.push("SELinux permissive".to_string()),
        Ok(v) => {
            return Err(Unread::garbage(
                "/sys/fs/selinux/enforce",
                format!("expected 0 or 1, found {}", crate::host::excerpt(&v)),
            ))
        }
        Err(u) if u.kind == UnreadKind::Missing => parts.push("SELinux off".to_string()),
        Err(u) => return Err(u),
    }
    match host.read("/sys/module/apparmor/parameters/enabled") {
        Ok(v) if v == "Y" => {
            let profiles = host
                .read("/sys/kernel/security/apparmor/profiles")
                .map(|s| s.lines().filter(|l| l.contains("(enforce)")).count());
            match profiles {
                Ok(n) => {
                    enforcing |= n > 0;
                    parts.push(format!("AppArmor on, {n} profiles enforcing"));
                }
                Err(_) => parts.push("AppArmor on (profiles not readable)".to_string()),
            }
        }
        Ok(_) => parts.push("AppArmor off".to_string()),
        Err(u) if u.kind == UnreadKind::Missing => parts.push("AppArmor off".to_string()),
        Err(u) => return Err(u),
    }
    let avc = host.read("/sys/fs/selinux/avc/cache_threshold").ok();
    let lsms = host.read("/sys/kernel/security/lsm").ok();
    let good = p != Profile::Latency || !enforcing;
    let mut a = Assessment::judge(good, parts.join("; "));
    if let Some(t) = avc {
        a = a.note(format!(
            "SELinux AVC cache threshold {t} (tuned's network-latency sets 8192)"
        ));
    }
    if let Some(l) = lsms {
        a = a.note(format!("active LSMs: {l}"));
    }
    if enforcing {
        a = a.note("only relax a security module where the security policy allows it");
    }
    Ok(a)
}

/// The knobs of this area.
pub const KNOBS: &[Knob] = &[
    Knob {
        id: "sec.firewall",
        title: "Firewall rules on the packet path (iptables / nftables)",
        layer: Layer::Guest,
        reads: "/proc/net/ip{,6}_tables_names and IPT_SO_GET_INFO per table (root); nft -j list ruleset if nf_tables is loaded",
        targets: Targets {
            latency: "no rules (or as few as the security policy allows)",
            throughput: "no rules (or as few as the security policy allows)",
            balanced: "any",
        },
        why: "Every rule traversed is work per packet; the study measured guest iptables as a source of latency.",
        tradeoff: "Less filtering in this kernel: filter elsewhere.",
        apply: ApplyKind::Manual,
        how: "flush or stop the firewall service where the policy allows (iptables -F, nft flush ruleset)",
        revert: "restore the saved rule set (iptables-restore, nft -f)",
        volatile: false,
        assess: firewall,
    },
    Knob {
        id: "sec.conntrack",
        title: "Connection tracking (nf_conntrack count/max)",
        layer: Layer::Guest,
        reads: "/proc/sys/net/netfilter/nf_conntrack_count, nf_conntrack_max",
        targets: Targets {
            latency: "not loaded, or notrack for the latency flows; never near full",
            throughput: "never near full",
            balanced: "never near full",
        },
        why: "Conntrack looks up every packet and creates an entry per flow; a full table drops new flows.",
        tradeoff: "Without it, no stateful filtering or NAT for those flows.",
        apply: ApplyKind::Manual,
        how: "nft add rule ... notrack for the latency flows, or unload nf_conntrack; raise nf_conntrack_max if near full",
        revert: "remove the notrack rules",
        volatile: true,
        assess: conntrack,
    },
    Knob {
        id: "sec.lsm",
        title: "Security modules (SELinux, AppArmor)",
        layer: Layer::Guest,
        reads: "/sys/fs/selinux/enforce, /sys/module/apparmor/parameters/enabled, /sys/kernel/security/{apparmor/profiles,lsm}",
        targets: Targets {
            latency: "not enforcing on the latency path, only if the security policy allows",
            throughput: "any",
            balanced: "any",
        },
        why: "Security hooks check every socket operation; the study names SELinux as a source of latency.",
        tradeoff: "Less confinement: a security decision, not a tuning one.",
        apply: ApplyKind::Manual,
        how: "setenforce 0 / SELINUX=permissive; aa-complain <profile>",
        revert: "setenforce 1; aa-enforce <profile>",
        volatile: false,
        assess: lsm,
    },
];
