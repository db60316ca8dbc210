//! A TCP stream between two poll-mode endpoints (the switch's
//! `endpoint::tcp_stream`): the sender's fully checksummed MTU segments,
//! window-limited, toward a receiver that negotiated TSO receive and
//! mergeable buffers and sleeps on its call eventfd between NAPI-like
//! polls, so the switch's software LRO (knob `lro`) has segments to merge.
//! Every byte is checked; a byte not as sent fails the point. Operations
//! are the frames the receiver got: with `gbps`, frames per MiB.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vnio_measure::cpu::{Cost, CpuTime};
use vnio_measure::env::Environment;
use vnio_measure::result::{Document, Iteration, Measured};
use vnio_switch::endpoint::tcp_stream::{self, Flow, QUEUE};
use vnio_switch::endpoint::Endpoint;
use vnio_switch::vhost_user::device::feature;

use super::End;
use crate::scenario::RunSpec;
use crate::testbed::{endpoints_listen, BedHost, Testbed};

/// Run a TCP stream point from `from` to `to`.
pub(super) fn stream(
    bed: &Testbed,
    from: &BedHost,
    to: &BedHost,
    run: &RunSpec,
    stop: &Arc<AtomicBool>,
) -> Result<Document, String> {
    let (a, b) = (End::of(bed, from)?, End::of(bed, to)?);
    let listen = endpoints_listen(bed.description().wire);
    let params = serde_json::json!({
        "kind": "pair-tcp-stream",
        "mss": tcp_stream::MSS,
        "window": tcp_stream::WINDOW,
        "queue": QUEUE,
        "checksums": "full",
        "duration_s": run.duration.as_secs_f64(),
        "warmup_s": run.warmup.as_secs_f64(),
        "iterations": run.iterations,
        "tx": a.sock,
        "rx": b.sock,
    });
    let mut doc = Document::new(
        "stream",
        params,
        vec![to.addr.to_string()],
        Environment::capture(250),
    );
    // The receiver first (OVS connects to the sockets in turn); it takes
    // TSO and checksum offload, the sender offers none (it checksums).
    let mut rx = b.open_with(listen, |c| {
        c.offloads = feature::GUEST_CSUM | feature::GUEST_TSO4;
        c.queue_size = QUEUE;
    })?;
    let mut tx = a.open_with(listen, |c| {
        c.offloads = 0;
        c.queue_size = QUEUE;
    })?;
    announce(&mut tx, &mut rx, &a, &b)?;
    let flow = Flow {
        src: a.mac,
        dst: b.mac,
        partial: false,
    };
    for index in 0..run.iterations.max(1) as usize {
        if stop.load(Ordering::Relaxed) {
            doc.interrupted = true;
            break;
        }
        tcp_stream::run(&mut tx, &mut rx, &flow, run.warmup, stop);
        let s = tcp_stream::run(&mut tx, &mut rx, &flow, run.duration, stop);
        drain(&mut tx, &mut rx);
        if s.bad > 0 {
            return Err(format!(
                "{} bytes arrived not as sent (iteration {})",
                s.bad,
                index + 1
            ));
        }
        let merged = Measured {
            target: "all".into(),
            ops: s.frames,
            ops_per_s: s.frames as f64 / s.secs.max(1e-9),
            bytes: s.bytes,
            gbps: s.bytes as f64 * 8.0 / s.secs.max(1e-9) / 1e9,
            sent: s.bytes + s.lost,
            lost: s.lost,
            loss_pct: if s.bytes + s.lost == 0 {
                0.0
            } else {
                100.0 * s.lost as f64 / (s.bytes + s.lost) as f64
            },
            ..Default::default()
        };
        // Both threads are the endpoints' (a guest's driver and stack).
        let cpu = CpuTime {
            user_ns: s.rx_cpu_ns + s.tx_cpu_ns,
            sys_ns: 0,
        };
        doc.iterations.push(Iteration {
            index,
            seconds: s.secs,
            per_target: vec![merged.clone()],
            client_cost: Cost::new(cpu, s.frames, s.bytes),
            merged,
            ..Default::default()
        });
    }
    doc.conclude();
    Ok(doc)
}

/// Each endpoint says where its MAC is, so the stream is switched, not
/// flooded; what comes back is drained.
fn announce(tx: &mut Endpoint, rx: &mut Endpoint, a: &End, b: &End) -> Result<(), String> {
    for (e, mac) in [(&mut *tx, a.mac), (&mut *rx, b.mac)] {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[6..12].copy_from_slice(&mac.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        e.send_frame(&f)
            .map_err(|e| format!("announcing {mac}: {e}"))?;
    }
    std::thread::sleep(Duration::from_millis(50));
    drain(tx, rx);
    Ok(())
}

/// Nothing of one run may reach the next (an aggregate waits 50 µs at most).
fn drain(tx: &mut Endpoint, rx: &mut Endpoint) {
    std::thread::sleep(Duration::from_millis(2));
    let mut buf = vec![0u8; 70_000];
    while tx.poll_recv(&mut buf).is_some() || rx.poll_recv(&mut buf).is_some() {}
}
