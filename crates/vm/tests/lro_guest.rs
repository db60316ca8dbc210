//! A benchmark, not run by default: what software LRO changes for real guests.
//! Two Linux guests (TCG here, KVM where the host has it) on the switch, a
//! on a port without offloads (its kernel sends MTU segments it checksummed
//! itself), b on a port with TSO receive. Rounds alternate LRO off and on
//! for b's port; each sends the same file from a to b over TCP and measures
//! the CPU time of both QEMUs (all their threads: the guests' drivers,
//! stacks and processes, as this host runs them), the frames b's port
//! delivered and the segments merged. The received file's md5 must match
//! the sent one every round; nothing about time is asserted (the pass/fail
//! test of the same thing is `switch_policies.rs`).
//!
//! `crates/switch/bench/lro-guest.sh [MIB] [ROUNDS]` runs it with the
//! environment (`VNIO_LRO_GUEST_MIB`, default 32; `VNIO_LRO_GUEST_ROUNDS`,
//! default 5; the file and its copy live in the 256 MiB guests' memory, so
//! at most 64). Without root, QEMU or the guests' static vnio: one "skip:"
//! line.

mod common;

use std::time::{Duration, Instant};

use common::*;
use vnio_switch::config::{Config, PolicyUpdate, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::exec::exec;

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// CPU time of every thread of process `pid`, in nanoseconds (schedstat:
/// exact, where /proc/PID/stat counts ticks).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark: minutes of TCG guests; crates/switch/bench/lro-guest.sh runs it"]
fn lro_with_real_guests_frames_and_cpu() {
    let Some(kit) = Kit::get("LRO with real guests") else {
        return;
    };
    let mib = env("VNIO_LRO_GUEST_MIB", 32);
    assert!(
        mib <= 64,
        "VNIO_LRO_GUEST_MIB={mib}: at most 64 (the guests have 256 MiB)"
    );
    let rounds = env("VNIO_LRO_GUEST_ROUNDS", 5);
    bounded(Duration::from_secs(3600), move || {
        let n = run_id();
        let work = Dir::new("lro-guest");
        let sock = |p: &str| work.join(&format!("{p}.sock"));
        let mut p1 = PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server);
        p1.offloads = Some(false);
        let p2 = PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server);
        let sw = Switch::start(Config {
            switch: SwitchConfig {
                control: sock("control"),
                ..SwitchConfig::default()
            },
            ports: vec![p1, p2],
        })
        .expect("switch");
        let (a_ip, b_ip) = (format!("10.{n}.8.11"), format!("10.{n}.8.12"));
        let a = vhost_user_guest(&format!("lroa{n}"), &sock("p1"), &a_ip);
        let b = vhost_user_guest(&format!("lrob{n}"), &sock("p2"), &b_ip);
        let mut guard = Guard::default();
        let la = kit.launch(&a, &mut guard);
        let lb = kit.launch(&b, &mut guard);
        let t = Duration::from_secs(600);
        wait_booted(&[&la, &lb]);
        let (qa, qb) = (la.child.id(), lb.child.id());
        let out = exec(&la.dir, &sh(&format!("ping -c 3 -W 5 {b_ip}")), t).unwrap();
        assert!(out.success(), "ping a -> b: {}", out.stdout);
        let make = format!(
            "dd if=/dev/urandom of=/tmp/out bs=1M count={mib} 2>/dev/null && md5sum < /tmp/out"
        );
        let out = exec(&la.dir, &sh(&make), t).unwrap();
        assert!(out.success(), "{out:?}");
        let sent = out.stdout.split_whitespace().next().unwrap().to_string();
        let bytes = u64::from(mib) << 20;
        let p2 = || {
            sw.handle()
                .list()
                .unwrap()
                .into_iter()
                .find(|p| p.name == "p2")
                .unwrap()
        };
        // What each guest costs idle (a TCG guest's timer ticks are not
        // free): each round's window includes some idle time (b's completion
        // check runs once a second), so the CPU is also shown beyond idle.
        let (ia0, ib0, it) = (cpu_ns(qa), cpu_ns(qb), Instant::now());
        std::thread::sleep(Duration::from_secs(5));
        let s = it.elapsed().as_secs_f64();
        let idle_ms = |c0: u64, c1: u64| (c1 - c0) as f64 / 1e6 / s;
        let (idle_a, idle_b) = (idle_ms(ia0, cpu_ns(qa)), idle_ms(ib0, cpu_ns(qb)));
        let accel = &lb.state.accel.accel;
        println!(
            "# {mib} MiB a -> b per round, {rounds} rounds alternating LRO off/on on b's port \
             (coalescing {}); a's port without offloads; {accel} guests idle at a {idle_a:.1}, b {idle_b:.1} ms CPU/s",
            p2().policy.coalesce
        );
        // Per setting and round: frames per MiB; CPU ms per MiB of b, of
        // a+b, the same beyond idle; seconds.
        let mut res: [Vec<[f64; 6]>; 2] = [Vec::new(), Vec::new()];
        let mut tcp = 6000;
        for _ in 0..rounds {
            for on in [false, true] {
                sw.handle()
                    .set_port(
                        "p2",
                        PolicyUpdate {
                            lro: Some(on),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                tcp += 1;
                let file = format!("/tmp/recv{tcp}");
                // busybox nc stops at the end of its stdin: a pipe that stays open.
                let listen =
                    format!("(sleep 900 | nc -l -p {tcp} > {file} 2>/dev/null) > /dev/null 2>&1 &");
                let out = exec(&lb.dir, &sh(&listen), t).unwrap();
                assert!(out.success(), "listener: {out:?}");
                std::thread::sleep(Duration::from_millis(500));
                let (q0, a0, b0, t0) = (p2().stats.rx, cpu_ns(qa), cpu_ns(qb), Instant::now());
                let out =
                    exec(&la.dir, &sh(&format!("nc -w 5 {b_ip} {tcp} < /tmp/out")), t).unwrap();
                assert!(out.success(), "sending: {out:?}");
                // Checked once a second: a light loop in a TCG guest (the
                // seconds are coarse, the CPU time is not).
                let wait = format!(
                    "n=0; while [ \"$(wc -c < {file})\" -lt {bytes} ] && [ $n -lt 600 ]; do sleep 1; n=$((n+1)); done"
                );
                let out = exec(&lb.dir, &sh(&wait), t).unwrap();
                assert!(out.success(), "{out:?}");
                let (q1, a1, b1, secs) = (
                    p2().stats.rx,
                    cpu_ns(qa),
                    cpu_ns(qb),
                    t0.elapsed().as_secs_f64(),
                );
                let out = exec(
                    &lb.dir,
                    &sh(&format!("md5sum < {file}; wc -c < {file}; rm {file}")),
                    t,
                )
                .unwrap();
                let got: Vec<&str> = out.stdout.split_whitespace().collect();
                assert_eq!(
                    (got.first().copied(), got.last().copied()),
                    (Some(sent.as_str()), Some(bytes.to_string().as_str())),
                    "LRO {on}: the file arrived intact"
                );
                let per = |ns: u64| ns as f64 / 1e6 / f64::from(mib);
                let frames = (q1.packets - q0.packets) as f64 / f64::from(mib);
                let (cb, ca) = (per(b1 - b0), per(a1 - a0));
                let idle = |ms_s: f64| ms_s * secs / f64::from(mib);
                let (nb, na) = (cb - idle(idle_b), ca - idle(idle_a));
                println!(
                    "LRO {:<3}  {frames:>6.1} frames/MiB  {:>5} merged  CPU ms/MiB: b {cb:>6.1} a {ca:>6.1}, \
                     beyond idle b {nb:>6.1} a {na:>6.1}  {secs:>5.1} s  md5 ok",
                    if on { "on" } else { "off" },
                    q1.lro_merged - q0.lro_merged,
                );
                res[usize::from(on)].push([frames, cb, ca + cb, nb, na + nb, secs]);
            }
        }
        let med = |k: usize, i: usize| median(res[k].iter().map(|x| x[i]).collect());
        // Rounds pair an off with the on right after it: the ratio per
        // round, then the median (the host's load moves between rounds).
        let ratio = |i: usize| {
            median(
                res[0]
                    .iter()
                    .zip(&res[1])
                    .map(|(off, on)| on[i] / off[i])
                    .collect(),
            )
        };
        println!(
            "medians off -> on: frames/MiB {:.1} -> {:.1}; CPU ms/MiB b {:.1} -> {:.1}, a+b {:.1} -> {:.1}; \
             beyond idle b {:.1} -> {:.1}, a+b {:.1} -> {:.1}",
            med(0, 0),
            med(1, 0),
            med(0, 1),
            med(1, 1),
            med(0, 2),
            med(1, 2),
            med(0, 3),
            med(1, 3),
            med(0, 4),
            med(1, 4),
        );
        println!(
            "on/off per round (median): frames {:.3}; CPU per MiB b {:.2}, a+b {:.2}; beyond idle b {:.2}, \
             a+b {:.2}; time {:.2} (to within b's 1 s check)",
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3),
            ratio(4),
            ratio(5)
        );
        drop(guard);
        drop(sw);
    });
}
