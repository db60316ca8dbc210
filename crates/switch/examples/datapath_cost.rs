//! The forwarding loop's own cost per frame, without the cache misses of a
//! second core: one thread drives a [`Datapath`] and both poll-mode
//! endpoints (port a sends bursts, the datapath forwards, port b drains),
//! so every line stays in this core's caches. What is left is instructions:
//! the number to watch when changing the per-frame path (the anchor harness
//! measures the real thing, across cores; see docs/switch.md, and the
//! current counts in docs/results.md).
//!
//! `cargo run --release -p vnio-switch --example datapath_cost [-- FRAME_LEN [SECONDS [ROUNDS [bounce|swap]]]]`
//!
//! With `bounce`, the anchor harness's `lat` topology instead: one frame at
//! a time, sent back by b unchanged, so a's address moves between the two
//! ports on every frame (and b's is never learned). With `swap`, the same
//! round trip with b answering from its own address (as the lab's
//! endpoints do): every frame's decision is remembered.
//!
//! Prints the median over ROUNDS (default 5) of nanoseconds per frame spent
//! in the switch's polling rounds, and for the whole loop with the endpoints;
//! and the loop's CPU time per frame (this thread's CPU clock: time the
//! thread was not scheduled does not count, so a busy host shifts it less;
//! the endpoints' share is the same from one build of the switch to the next,
//! so two builds compare by it).

use std::path::Path;
use std::time::{Duration, Instant};
use vnio_switch::config::{PortSpec, SwitchConfig};
use vnio_switch::datapath::{Datapath, Port};
use vnio_switch::endpoint::rate::{rate_step, BURST};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::fdb::Fdb;
use vnio_switch::port::vhost_user::VhostUserPort;
use vnio_switch::port::{SocketMode, Watch};
use vnio_switch::wire::{EthernetAddress, Ipv4Address};
use vnio_switch::PortId;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Args {
        len,
        secs,
        rounds,
        round_trip,
        swap,
    } = Args::parse()?;
    let dir = std::env::temp_dir().join(format!("vnio-dpcost-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut dp = two_ports(&dir)?;
    let (ma, mb) = ("02:00:00:00:00:01".parse()?, "02:00:00:00:00:02".parse()?);
    let (mut a, mut b) = connect(&mut dp, &dir, ma, mb)?;

    let mut ab = vec![0x11u8; len];
    ab[..6].copy_from_slice(&mb.0);
    ab[6..12].copy_from_slice(&ma.0);
    ab[12..14].copy_from_slice(&[0x88, 0xb5]);
    let mut ba = ab.clone();
    ba[..6].copy_from_slice(&ma.0);
    ba[6..12].copy_from_slice(&mb.0);
    if !round_trip || swap {
        // b's address is learned: frames go to it, not flooded.
        b.send_frame(&ba)?;
    }
    let back = if swap { &ba } else { &ab };
    let burst: Vec<&[u8]> = vec![&ab; BURST];

    let mut total = Vec::new();
    let mut switch = Vec::new();
    let mut cpu = Vec::new();
    let mut frames = 0u64;
    // The switch's clock advances 1 us per polling round, a busy worker's
    // pace, whatever the loop's own speed: what the switch does per frame
    // (a remembered decision holds for MEMO_HOLD) is then the same at full
    // speed and under callgrind, fifty times slower.
    let clock0 = Instant::now();
    let mut polls = 0u64;
    for _ in 0..rounds {
        let (mut got, mut in_switch) = (0u64, Duration::ZERO);
        let t0 = Instant::now();
        let c0 = thread_cpu();
        let end = t0 + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            for _ in 0..8 {
                if round_trip {
                    // A round trip: a's frame to b, and back (two frames).
                    if b.drain(1) == 1 {
                        got += 1;
                        b.send_frame(back)?;
                    }
                    got += a.drain(1) as u64;
                    a.send_frame(&ab)?;
                } else {
                    // The lab's rate loop: a burst out of a, what reached b counted.
                    got += rate_step(&mut a, &mut b, &burst).1 as u64;
                }
                polls += 1;
                let t = Instant::now();
                dp.poll(clock0 + Duration::from_micros(polls), 64);
                in_switch += t.elapsed();
            }
        }
        frames += got;
        let got = got.max(1) as f64;
        total.push(t0.elapsed().as_nanos() as f64 / got);
        cpu.push((thread_cpu() - c0).as_nanos() as f64 / got);
        switch.push(in_switch.as_nanos() as f64 / got);
    }
    total.sort_by(f64::total_cmp);
    switch.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    println!(
        "{len} B, median of {rounds} rounds of {secs} s: {:.1} ns per frame in the switch (min {:.1}, max {:.1}), {:.1} with the endpoints; loop CPU time {:.1} ns per frame (min {:.1}); {frames} frames",
        switch[rounds / 2],
        switch[0],
        switch[rounds - 1],
        total[rounds / 2],
        cpu[rounds / 2],
        cpu[0],
    );
    drop(dp);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The command line: `[FRAME_LEN [SECONDS [ROUNDS [bounce|swap]]]]`.
struct Args {
    len: usize,
    secs: f64,
    rounds: usize,
    round_trip: bool,
    swap: bool,
}

impl Args {
    fn parse() -> Result<Args, Box<dyn std::error::Error>> {
        let mut args = std::env::args().skip(1);
        let len: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
        let secs: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1.0);
        let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
        let (round_trip, swap) = match args.next().as_deref() {
            None => (false, false),
            Some("bounce") => (true, false),
            Some("swap") => (true, true),
            Some(other) => return Err(format!("unknown mode {other:?} (bounce, swap)").into()),
        };
        Ok(Args {
            len,
            secs,
            rounds,
            round_trip,
            swap,
        })
    }
}

/// A datapath with two vhost-user ports, a and b, listening in `dir`.
fn two_ports(dir: &Path) -> Result<Datapath, Box<dyn std::error::Error>> {
    let sw = SwitchConfig::default();
    let mut dp = Datapath::new(Fdb::new(sw.fdb_capacity, sw.aging()));
    for (n, name) in ["a", "b"].iter().enumerate() {
        let spec = PortSpec::vhost_user(name, dir.join(format!("{name}.sock")), SocketMode::Server);
        let port = Port::VhostUser(VhostUserPort::new(
            &dir.join(format!("{name}.sock")),
            SocketMode::Server,
        )?);
        dp.add(
            PortId(n as u32),
            name.to_string(),
            spec.policy()?,
            spec.policies(&sw),
            port,
        );
    }
    Ok(dp)
}

/// Connects an endpoint to each port, serving the switch's side until both
/// ports' queues run.
fn connect(
    dp: &mut Datapath,
    dir: &Path,
    ma: EthernetAddress,
    mb: EthernetAddress,
) -> Result<(Endpoint, Endpoint), Box<dyn std::error::Error>> {
    // The endpoints' handshakes wait for answers: a helper thread connects
    // them while this one serves the switch's side.
    let d = dir.to_path_buf();
    let connect = std::thread::spawn(move || {
        let a = Endpoint::connect(
            &d.join("a.sock"),
            EndpointConfig::new(ma, Ipv4Address([10, 0, 0, 1])),
        );
        let b = Endpoint::connect(
            &d.join("b.sock"),
            EndpointConfig::new(mb, Ipv4Address([10, 0, 0, 2])),
        );
        (a, b)
    });
    let running = |dp: &Datapath| {
        dp.table().slots().all(|(_, s)| matches!(&s.port, Port::VhostUser(p) if p.device.ready(0) && p.device.ready(1)))
    };
    // The last requests need no answer: the endpoints may be done before
    // the switch has read them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !connect.is_finished() || !running(dp) {
        if Instant::now() > deadline {
            return Err("the endpoints did not connect".into());
        }
        let now = Instant::now();
        for slot in 0..2 {
            dp.on_event(slot, Watch::Listener, now);
            dp.on_event(slot, Watch::Connection, now);
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let (a, b) = connect.join().map_err(|_| "connect thread panicked")?;
    Ok((a?, b?))
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
