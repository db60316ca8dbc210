//! The switch's latency policies with real Linux guests (QEMU, TCG here):
//! guest a on a port without offloads (its kernel sends MTU-sized,
//! checksummed segments) that is latency-high (its own busy-polling worker
//! on a dedicated core; on a one-CPU host static coalescing instead), guest
//! b on a port with static then adaptive interrupt coalescing and LRO (a's
//! segments reach b's kernel as GSO frames; 1 MiB with LRO on, then the
//! same with LRO turned off live, compared in frames delivered to b). Ping,
//! and TCP transfers both ways whose md5 must match, while each policy is
//! shown active in the switch's counters. Without root, QEMU or the guests'
//! static vnio: one "skip:" line.

use std::time::Duration;

use vnio_switch::config::{Config, Latency, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_switch::port_info::PortInfo;
use vnio_vm::exec::exec;
use vnio_vm::state::VmDir;
use vnio_vm::testkit::*;

fn onoff(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

#[test]
fn latency_policies_carry_real_guest_traffic() {
    let Some(kit) = Kit::get("switch latency policies with real guests") else {
        return;
    };
    bounded(Duration::from_secs(900), move || {
        let n = run_id();
        let work = Dir::new("policies");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get());
        let sw = policy_switch(&work, cpus);
        let (a_ip, b_ip) = (format!("10.{n}.9.11"), format!("10.{n}.9.12"));
        let a = vhost_user_guest(&format!("pa{n}"), &sock("p1"), &a_ip);
        let b = vhost_user_guest(&format!("pb{n}"), &sock("p2"), &b_ip);
        let mut guard = Guard::default();
        let la = kit.launch(&a, &mut guard);
        let lb = kit.launch(&b, &mut guard);
        let t = Duration::from_secs(120);
        wait_booted(&[&la, &lb]);
        policies_in_force(&sw, cpus);
        let out = exec(&la.dir, &sh(&format!("ping -c 3 -W 5 {b_ip}")), t).unwrap();
        assert!(out.success(), "ping a -> b: {}", out.stdout);
        lro_on_then_off(&sw, &la.dir, &lb.dir, &b_ip);
        adaptive_both_ways(&sw, &la.dir, &lb.dir, &a_ip, &b_ip);
        ports_served_cleanly(&sw);
        drop(guard);
        drop(sw);
    });
}

/// p1 without offloads, latency-high (static coalescing on a one-CPU
/// host); p2 with static coalescing.
fn policy_switch(work: &Dir, cpus: usize) -> Switch {
    let sock = |p: &str| work.join(&format!("{p}.sock"));
    let mut p1 = PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server);
    p1.kind.vhost_user_mut().unwrap().offloads = false;
    if cpus >= 2 {
        p1.latency = Latency::High;
    } else {
        p1.coalesce = Some("static:4:100".parse().unwrap());
    }
    let mut p2 = PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server);
    p2.coalesce = Some("static:8:200".parse().unwrap());
    Switch::start(Config {
        switch: SwitchConfig {
            control: sock("control"),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![p1, p2],
    })
    .expect("switch")
}

/// Port `name` as the switch lists it now.
fn port(sw: &Switch, name: &str) -> PortInfo {
    sw.handle()
        .list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

/// The policies as the switch reports them; a dedicated worker serves p1
/// where there are cores for one.
fn policies_in_force(sw: &Switch, cpus: usize) {
    let p1 = port(sw, "p1");
    println!(
        "p1: latency {} core {:?} coalesce {} offloads off; p2: coalesce {} lro {}",
        p1.policy.latency,
        p1.policy.core,
        p1.policy.coalesce,
        port(sw, "p2").policy.coalesce,
        port(sw, "p2").policy.lro
    );
    if cpus >= 2 {
        assert!(p1.policy.core.is_some(), "a dedicated worker serves p1");
    }
}

/// 1 MiB a -> b with LRO on, then off; LRO on delivers fewer frames.
fn lro_on_then_off(sw: &Switch, a: &VmDir, b: &VmDir, b_ip: &str) {
    // a -> b under static coalescing, LRO on then off (live): a's MTU
    // segments merged for b, then delivered one by one; the same bytes.
    let mut frames = [0u64; 2];
    for (on, tcp) in [(true, 5001), (false, 5004)] {
        sw.handle()
            .set_port(
                "p2",
                PolicyUpdate {
                    lro: Some(on),
                    ..Default::default()
                },
            )
            .unwrap();
        let q0 = port(sw, "p2").stats.rx;
        tcp_transfer(
            a,
            b,
            b_ip,
            tcp,
            1024,
            &format!("1 MiB a -> b (static coalescing, LRO {})", onoff(on)),
        );
        let q = port(sw, "p2").stats.rx;
        let (got, merged) = (q.packets - q0.packets, q.lro_merged - q0.lro_merged);
        println!(
            "p2, 1 MiB with LRO {}: {got} frames, {merged} segments merged by LRO, calls sent {} coalesced {} declined {}",
            onoff(on),
            q.notifications_sent - q0.notifications_sent,
            q.notifications_coalesced - q0.notifications_coalesced,
            q.notifications_suppressed - q0.notifications_suppressed
        );
        if on {
            assert!(merged > 0, "LRO merged a's segments: {q:?}");
            assert!(
                q.notifications_coalesced > q0.notifications_coalesced,
                "static coalescing held calls: {q:?}"
            );
        } else {
            assert_eq!(merged, 0, "LRO off merges nothing: {q:?}");
        }
        frames[usize::from(on)] = got;
    }
    // Counts, not timings: how much merges depends on how the TCG sender
    // bunches its segments, but with LRO on b gets fewer frames.
    println!(
        "frames per MiB to b: LRO off {} -> on {} ({:.2}x fewer)",
        frames[0],
        frames[1],
        frames[0] as f64 / frames[1].max(1) as f64
    );
    assert!(
        frames[1] < frames[0],
        "LRO on delivers fewer frames than off: {frames:?}"
    );
    sw.handle()
        .set_port(
            "p2",
            PolicyUpdate {
                lro: Some(true),
                ..Default::default()
            },
        )
        .unwrap();
}

/// Adaptive coalescing on p2, live; then 512 KiB each way.
fn adaptive_both_ways(sw: &Switch, a: &VmDir, b: &VmDir, a_ip: &str, b_ip: &str) {
    // Adaptive coalescing, live; then b -> a (b's TSO frames segmented for a).
    sw.handle()
        .set_port(
            "p2",
            PolicyUpdate {
                coalesce: Some("adaptive".parse().unwrap()),
                ..Default::default()
            },
        )
        .unwrap();
    tcp_transfer(
        a,
        b,
        b_ip,
        5002,
        512,
        "512 KiB a -> b (adaptive coalescing, LRO)",
    );
    tcp_transfer(
        b,
        a,
        a_ip,
        5003,
        512,
        "512 KiB b -> a (to the latency-high port without offloads)",
    );
}

/// No port was reset or reconnected, nothing malformed; b's TSO frames
/// were segmented for a.
fn ports_served_cleanly(sw: &Switch) {
    for name in ["p1", "p2"] {
        let p = port(sw, name);
        assert_eq!(p.stats.resets, 0, "{name}: {:?}", p.stats);
        assert_eq!(p.stats.connections, 1, "{name}");
        assert_eq!(p.stats.tx.drops["malformed"], 0, "{name}");
    }
    let p1 = port(sw, "p1");
    assert!(
        p1.stats.rx.sw_segmented > 0,
        "b's TSO frames were cut for a: {:?}",
        p1.stats.rx
    );
    println!(
        "p1 got {} frames ({} GSO frames segmented by the switch); p2 coalescing now {}",
        p1.stats.rx.packets,
        p1.stats.rx.sw_segmented,
        port(sw, "p2").policy.coalesce
    );
}
