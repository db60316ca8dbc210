//! The switch's uplink policies with real Linux guests (QEMU, TCG here),
//! reaching a namespace's kernel across an uplink port on a veth pair
//! (uplink with 3 receive queues and a small egress capacity):
//! - guest a's first NIC on a direct-mode port (bound 1:1 to an uplink
//!   receive queue, never switched);
//! - guest b on a switched port with its own uplink receive queue
//!   (NetQueue), share 300 and a small egress limit (Network I/O Control),
//!   and a non-default transmit busy-poll budget (asynchronous transmit);
//! - guest a's second NIC on a switched port with share 100 and no limit,
//!   left on the shared queue (the queues ran out).
//!
//! Each guest pings the namespace and sends it TCP streams checked byte for
//! byte (b and a's second NIC at the same time, contending for the link),
//! while the switch's counters show each policy acting: a's direct frames on
//! its own queue and never in the FDB; b's frames held back (its limit),
//! a's switched frames held back with no limit of their own (the link's
//! scheduler), both streams through; b's queue taking the namespace's
//! answers; b kicking once per ping without a busy-poll budget and not at
//! all with an endless one. Nothing is timed. Without root, QEMU or the
//! guests' static vnio: one "skip:" line.

use std::net::{IpAddr, TcpListener};
use std::time::{Duration, Instant};

use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_switch::stats::UplinkQueueSnapshot;
use vnio_switch::worker::PortInfo;
use vnio_vm::exec::exec;
use vnio_vm::state::VmDir;
use vnio_vm::testkit::*;

/// b's egress limit: far below what even a TCG guest's TCP sends, so the
/// limiter must hold frames back (counted, never timed).
const LIMIT_MBPS: u64 = 2;
/// The uplink's egress capacity the shares divide: below what a TCG guest's
/// TCP sends, so a port without a limit is held by the link's scheduler.
const CAPACITY_MBPS: u64 = 4;
/// b's transmit busy-poll budget as configured (the switch's default here
/// is its `idle_polls`, 4).
const TX_BUDGET: u32 = 1000;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn port<'a>(list: &'a [PortInfo], name: &str) -> &'a PortInfo {
    list.iter().find(|p| p.name == name).unwrap()
}

#[test]
fn uplink_policies_carry_real_guest_traffic() {
    let Some(kit) = Kit::get("uplink policies with real guests") else {
        return;
    };
    bounded(Duration::from_secs(600), move || {
        let started = Instant::now();
        let n = run_id();
        let work = Dir::new("uplinkpol");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let far_side = FarSide::create(n);
        let (far, far2) = (format!("10.{n}.6.1"), format!("10.{n}.7.1"));
        let mut a = vhost_user_guest(&format!("ua{n}"), &sock("pa"), &format!("10.{n}.6.11"));
        a.nics.push(
            format!("vhost-user:{},ip=10.{n}.7.11/24", sock("pc").display())
                .parse()
                .unwrap(),
        );
        let b = vhost_user_guest(&format!("ub{n}"), &sock("pb"), &format!("10.{n}.6.12"));
        let (a_mac, b_mac) = (a.mac(0).to_string(), b.mac(0).to_string());
        let sw = uplink_switch(&work, &far_side.va, &a_mac);

        // Both guests boot at once.
        let mut guard = Guard::default();
        let la = kit.launch(&a, &mut guard);
        let lb = kit.launch(&b, &mut guard);
        println!("accel: {} ({})", la.state.accel.accel, la.state.accel.why);
        wait_booted(&[&la, &lb]);
        policies_configured(&sw);
        all_reach_the_namespace(&la.dir, &lb.dir, &far, &far2);
        let ns = &far_side.ns;
        let qa = direct_port_carries_a(&sw, &la.dir, ns, &far, &a_mac);
        b_and_a_contend_for_the_link(&sw, (&la.dir, &lb.dir), ns, (&far, &far2), qa, &b_mac);
        kicks_follow_the_tx_budget(&sw, &lb.dir, &far);
        ports_served_cleanly(&sw);
        drop(guard);
        drop(sw);
        println!(
            "uplink policies: {:.0} s from start to the guests' stop",
            started.elapsed().as_secs_f64()
        );
    });
}

/// The far side: a namespace holding one end of a veth (`vb`, with two
/// subnets: a's second NIC is on the other one, so each of a's NICs
/// carries its own subnet's traffic); the switch's uplink is the other end
/// (`va`). Both go with the namespace, on every exit, panics included (the
/// veth first).
struct FarSide {
    _veth: vnio_topo::Link,
    ns: vnio_topo::Netns,
    va: String,
}

impl FarSide {
    fn create(n: u8) -> FarSide {
        let ns = vnio_topo::Netns::create(&format!("vnio-upol{n}")).expect("netns");
        let (va, vb) = (format!("vnupa{n}"), format!("vnupb{n}"));
        let mut root = vnio_topo::Handle::root().unwrap();
        let _ = root.delete_if_exists(&va);
        let veth = root.add_veth(&va, &vb, Some(&ns)).expect("veth");
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{va}/disable_ipv6"), "1");
        root.set_up(&va).unwrap();
        let (far, far2) = (format!("10.{n}.6.1"), format!("10.{n}.7.1"));
        {
            let mut inside = ns.handle().unwrap();
            inside.add_address(&vb, ip(&far), 24).unwrap();
            inside.add_address(&vb, ip(&far2), 24).unwrap();
            inside.set_up(&vb).unwrap();
        }
        FarSide {
            _veth: veth,
            ns,
            va,
        }
    }
}

/// The switch: uplink `up` on `va` (3 queues, a small capacity), a's
/// direct port pa (MAC `a_mac`), b's switched port pb with its queue,
/// share, limit and transmit budget, a's second NIC's port pc.
fn uplink_switch(work: &Dir, va: &str, a_mac: &str) -> Switch {
    let sock = |p: &str| work.join(&format!("{p}.sock"));
    // Queue 0 is shared; a's direct binding takes one of the others and
    // b (uplink_queue auto) the last.
    let mut up = PortSpec::uplink("up", va);
    up.kind.uplink_mut().unwrap().queues = std::num::NonZeroUsize::new(3).unwrap();
    up.kind.uplink_mut().unwrap().capacity_mbps = Some(CAPACITY_MBPS);
    let mut pa = PortSpec::vhost_user("pa", sock("pa"), SocketMode::Server);
    pa.mac = Some(a_mac.to_string());
    pa.kind.vhost_user_mut().unwrap().direct = Some("up".into());
    // b's MAC is not configured: its queue takes the address the switch
    // learns from b's first frame.
    let mut pb = PortSpec::vhost_user("pb", sock("pb"), SocketMode::Server);
    pb.egress.share = Some(300);
    pb.egress.limit_mbps = Some(LIMIT_MBPS);
    pb.tx_poll_budget = Some(TX_BUDGET);
    // a's second NIC: the default share (100), no limit; added last, it
    // finds no queue left and shares queue 0.
    let pc = PortSpec::vhost_user("pc", sock("pc"), SocketMode::Server);
    Switch::start(Config {
        switch: SwitchConfig {
            control: sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![up, pa, pb, pc],
    })
    .expect("switch")
}

/// The policies as the switch reports them.
fn policies_configured(sw: &Switch) {
    let list = sw.handle().list().unwrap();
    let (pa, pb, pc, upi) = (
        port(&list, "pa"),
        port(&list, "pb"),
        port(&list, "pc"),
        port(&list, "up"),
    );
    println!(
        "up: capacity {:?} Mbit/s; pb: share {:?} limit {:?} Mbit/s, tx_poll_budget {}; pc: share {:?} limit {:?}; pa: direct on up",
        upi.egress.capacity_mbps,
        pb.egress.settings.share,
        pb.egress.settings.limit_mbps,
        pb.policy.tx_poll_budget,
        pc.egress.settings.share,
        pc.egress.settings.limit_mbps
    );
    assert_eq!(upi.egress.capacity_mbps, Some(CAPACITY_MBPS));
    assert_eq!(pb.egress.settings.limit_mbps, Some(LIMIT_MBPS));
    assert_eq!(pb.egress.settings.share, Some(300));
    assert_eq!(pc.egress.settings.limit_mbps, None);
    assert_eq!(pb.policy.tx_poll_budget, TX_BUDGET);
    assert_eq!(
        pa.egress.settings.limit_mbps, None,
        "a direct port has no QoS"
    );
}

/// a answers ARP only where it has the address; a, a's second NIC and b
/// ping the namespace.
fn all_reach_the_namespace(a: &VmDir, b: &VmDir, far: &str, far2: &str) {
    let t = Duration::from_secs(120);
    // a answers ARP only on the NIC that has the address asked for: a
    // request flooded to its switched NIC must not pull the direct
    // NIC's traffic onto the switched path.
    let out = exec(a, &sh("echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore"), t).unwrap();
    assert!(out.success(), "arp_ignore in a: {out:?}");
    // All reach the namespace's kernel: a's ARP request leaves
    // directly, the namespace's reply comes back on a's queue.
    for (l, who, to) in [(a, "a", far), (a, "a's 2nd NIC", far2), (b, "b", far)] {
        let out = exec(l, &sh(&format!("ping -c 3 -W 5 {to}")), t).unwrap();
        assert!(out.success(), "ping {who} -> namespace: {}", out.stdout);
    }
}

/// A listener in the namespace at `at`:`port`.
fn listen(ns: &vnio_topo::Netns, at: &str, port: u16) -> TcpListener {
    let addr = format!("{at}:{port}");
    ns.run(move || TcpListener::bind(addr))
        .unwrap()
        .expect("a listener in the namespace")
}

/// The uplink queue `owner` owns in the port list `list`.
fn queue_of(list: &[PortInfo], owner: &str) -> UplinkQueueSnapshot {
    port(list, "up")
        .stats
        .uplink_queues
        .iter()
        .find(|q| q.owner.as_deref() == Some(owner))
        .cloned()
        .unwrap_or_else(|| panic!("no uplink queue owned by {owner}: {list:?}"))
}

/// a: 1 MiB over the direct port, on its own uplink queue, never learned.
/// Returns that queue.
fn direct_port_carries_a(
    sw: &Switch,
    a: &VmDir,
    ns: &vnio_topo::Netns,
    far: &str,
    a_mac: &str,
) -> UplinkQueueSnapshot {
    // a: 1 MiB over the direct port.
    let before = sw.handle().list().unwrap();
    tcp_to_listener(
        a,
        listen(ns, far, 5001),
        1024,
        "1 MiB a -> namespace (direct port)",
    );
    let after = sw.handle().list().unwrap();
    let queue_of = |list: &[PortInfo], owner: &str| {
        port(list, "up")
            .stats
            .uplink_queues
            .iter()
            .find(|q| q.owner.as_deref() == Some(owner))
            .cloned()
            .unwrap_or_else(|| panic!("no uplink queue owned by {owner}: {list:?}"))
    };
    let qa0 = queue_of(&before, "pa");
    let qa = queue_of(&after, "pa");
    let (pa0, pa1) = (port(&before, "pa"), port(&after, "pa"));
    println!(
        "direct: pa sent {} frames, got {}; its uplink queue {} ({}) took {} frames from the namespace; egress waits {}",
        pa1.stats.tx.packets - pa0.stats.tx.packets,
        pa1.stats.rx.packets - pa0.stats.rx.packets,
        qa.queue,
        qa.mac.as_deref().unwrap_or("?"),
        qa.packets - qa0.packets,
        pa1.stats.tx.egress_waits
    );
    assert_ne!(qa.queue, 0, "a direct port has a queue of its own");
    assert_eq!(qa.mac.as_deref(), Some(a_mac));
    // The namespace's ACKs came on a's queue and went to a as they were.
    assert!(qa.packets - qa0.packets > 10, "{qa:?}");
    assert!(pa1.stats.rx.packets - pa0.stats.rx.packets >= qa.packets - qa0.packets);
    assert!(pa1.stats.tx.bytes - pa0.stats.tx.bytes > 1024 * 1024);
    assert_eq!(pa1.stats.tx.egress_waits, 0, "no QoS on the direct path");
    let fdb = sw.handle().fdb().unwrap();
    assert!(
        fdb.iter().all(|e| e.mac.to_string() != a_mac),
        "the direct port is never switched, so never learned: {fdb:?}"
    );
    qa
}

/// b and a's switched NIC at once, contending for the link: each held
/// back (b by its limit, pc by the link), neither dropped; b's own queue
/// (not `qa`) takes the namespace's answers, pc has none.
fn b_and_a_contend_for_the_link(
    sw: &Switch,
    (a, b): (&VmDir, &VmDir),
    ns: &vnio_topo::Netns,
    (far, far2): (&str, &str),
    qa: UplinkQueueSnapshot,
    b_mac: &str,
) {
    // b and a's switched NIC at once: 512 KiB each, contending for the
    // link; b at most LIMIT_MBPS, pc with no limit of its own.
    let before = sw.handle().list().unwrap();
    let (lbd, lad) = (b.clone(), a.clone());
    let (lis_b, lis_c) = (listen(ns, far, 5002), listen(ns, far2, 5003));
    let from_b = std::thread::spawn(move || {
        tcp_to_listener(
            &lbd,
            lis_b,
            512,
            "512 KiB b -> namespace (own queue, share 300, egress limit)",
        )
    });
    tcp_to_listener(
        &lad,
        lis_c,
        512,
        "512 KiB a's 2nd NIC -> namespace (shared queue, share 100)",
    );
    from_b.join().expect("b's transfer");
    let after = sw.handle().list().unwrap();
    let delta = |name: &str| {
        let (p0, p1) = (&port(&before, name).stats.tx, &port(&after, name).stats.tx);
        (
            p1.packets - p0.packets,
            p1.bytes - p0.bytes,
            p1.egress_waits - p0.egress_waits,
            p1.notifications_received - p0.notifications_received,
        )
    };
    let (b_frames, b_bytes, b_waits, b_kicks) = delta("pb");
    let (c_frames, c_bytes, c_waits, _) = delta("pc");
    println!(
        "egress: pb (share 300, limit {LIMIT_MBPS} Mbit/s) sent {b_frames} frames, {b_bytes} bytes, held back {b_waits} times; pc (share 100, no limit) sent {c_frames} frames, {c_bytes} bytes, held back {c_waits} times by the link ({CAPACITY_MBPS} Mbit/s)"
    );
    println!(
        "async tx: pb sent {b_frames} frames with {b_kicks} kicks (busy-poll budget {TX_BUDGET})"
    );
    assert!(
        b_waits > 0,
        "b's limit held its frames: {:?}",
        port(&after, "pb").stats.tx
    );
    assert!(
        c_waits > 0,
        "the link's scheduler held pc, which has no limit: {:?}",
        port(&after, "pc").stats.tx
    );
    assert!(
        b_bytes > 512 * 1024 && c_bytes > 512 * 1024,
        "both were scheduled"
    );
    for name in ["pb", "pc"] {
        assert_eq!(
            port(&after, name).stats.tx.drops["ring_full"],
            0,
            "{name}: held, not dropped"
        );
    }
    let qb0 = queue_of(&before, "pb");
    let qb = queue_of(&after, "pb");
    let queues = &port(&after, "up").stats.uplink_queues;
    println!(
        "netqueue: pb owns uplink queue {} ({}), which took {} frames from the namespace; pc has none: shared queue 0 has taken {} frames in all; owners {:?}",
        qb.queue,
        qb.mac.as_deref().unwrap_or("?"),
        qb.packets - qb0.packets,
        queues[0].packets,
        queues.iter().map(|q| (q.queue, q.owner.clone())).collect::<Vec<_>>()
    );
    assert!(qb.queue != 0 && qb.queue != qa.queue, "{qb:?}");
    assert_eq!(
        qb.mac.as_deref(),
        Some(b_mac),
        "b's queue takes the address learned from b"
    );
    assert!(
        qb.packets - qb0.packets > 10,
        "the namespace's ACKs came on b's queue"
    );
    assert!(
        queues.iter().all(|q| q.owner.as_deref() != Some("pc")),
        "no queue left for pc"
    );
    assert!(fdb_has(sw, b_mac), "b is switched: the FDB learned it");
}

/// Kicks b's pings cost with a transmit busy-poll budget of 0 and an
/// endless one; then the configured budget again.
fn kicks_follow_the_tx_budget(sw: &Switch, b: &VmDir, far: &str) {
    let t = Duration::from_secs(120);
    // Asynchronous transmit: with no busy-poll budget the queue asks for
    // a kick as soon as it is found empty, so each of 5 pings 300 ms
    // apart is kicked (kicks the worker finds together count once: a
    // host that stalls the switch for 300 ms merges some); with an
    // endless budget the worker keeps polling and the guest sends them
    // without one (at most the first, if the queue was armed when the
    // budget changed).
    let kicks_with = |budget: u32| {
        let info = sw
            .handle()
            .set_port(
                "pb",
                PolicyUpdate {
                    tx_poll_budget: Some(budget),
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(info.policy.tx_poll_budget, budget);
        // Let the queue settle into the budget's state.
        std::thread::sleep(Duration::from_millis(300));
        let k0 = port(&sw.handle().list().unwrap(), "pb")
            .stats
            .tx
            .notifications_received;
        let out = exec(b, &sh(&format!("ping -c 5 -i 0.3 -W 5 {far}")), t).unwrap();
        assert!(out.success(), "ping b -> namespace: {}", out.stdout);
        port(&sw.handle().list().unwrap(), "pb")
            .stats
            .tx
            .notifications_received
            - k0
    };
    let kicked = kicks_with(0);
    let polled = kicks_with(u32::MAX);
    // Back to the configured budget: the worker may sleep again.
    sw.handle()
        .set_port(
            "pb",
            PolicyUpdate {
                tx_poll_budget: Some(TX_BUDGET),
                ..Default::default()
            },
        )
        .unwrap();
    println!("tx busy-poll: 5 pings from b cost {kicked} kicks with budget 0, {polled} with an endless budget");
    assert!(kicked >= 3, "budget 0: every ping after a pause is kicked");
    assert!(polled <= 1, "an endless budget: polled, not kicked");
}

/// No port was reset, nothing malformed, a and b connected once.
fn ports_served_cleanly(sw: &Switch) {
    let list = sw.handle().list().unwrap();
    for p in &list {
        assert_eq!(p.stats.resets, 0, "{}: {:?}", p.name, p.stats);
        assert_eq!(p.stats.tx.drops["malformed"], 0, "{}", p.name);
    }
    for name in ["pa", "pb"] {
        assert_eq!(port(&list, name).stats.connections, 1, "{name}");
    }
}

fn fdb_has(sw: &Switch, mac: &str) -> bool {
    sw.handle()
        .fdb()
        .unwrap()
        .iter()
        .any(|e| e.mac.to_string() == mac)
}
