//! A hostile vhost-user front-end for a live switch (the soak,
//! `scripts/soak`): connects to a port's socket again and
//! again and runs every case of the hostile-frontend suite in turn
//! (hostile chains, a short or truncated memory file, call and kick
//! descriptors that block or are not eventfds, a front-end draining its own
//! kicks), with blocking and non-blocking eventfds, each followed by a
//! well-behaved front-end that must complete its handshake and have a
//! frame taken. Prints one line per round; exits non-zero when the switch
//! did not answer as the suite expects.
//!
//! ```sh
//! cargo run --release -p vnio-switch --example hostile_frontend -- /run/vnio/p1.sock 600
//! ```

use std::path::Path;
use std::time::{Duration, Instant};
use vnio_switch_testkit::attacks::{clear_nonblock, frame, Expect, CHAINS, DESCRIPTORS};
use vnio_switch_testkit::raw::{Order, RawFrontend};

/// A well-behaved front-end: the handshake completes and a frame is taken
/// off its transmit ring.
fn healthy(path: &Path, blocking: bool) -> Result<RawFrontend, String> {
    let mut h = RawFrontend::connect_with(path, blocking);
    if blocking {
        clear_nonblock(&h);
    }
    h.handshake(Order::Standard);
    h.send_frame(&frame(0xee));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !h.tx_reaped() {
        if Instant::now() > deadline {
            return Err("a well-behaved front-end's frame was not taken".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(h)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), secs) = (args.get(1), args.get(2)) else {
        eprintln!("usage: hostile_frontend SOCKET [SECONDS]");
        std::process::exit(2);
    };
    let path = Path::new(path);
    let secs: u64 = secs.and_then(|s| s.parse().ok()).unwrap_or(60);
    let until = Instant::now() + Duration::from_secs(secs);
    let chains = CHAINS.iter().map(|&(w, a)| (w, a, Expect::Reset));
    let cases: Vec<_> = chains.chain(DESCRIPTORS.iter().copied()).collect();
    let mut round = 0u64;
    while Instant::now() < until {
        round += 1;
        let t = Instant::now();
        for &(what, attack, expect) in &cases {
            for blocking in [false, true] {
                let r = healthy(path, blocking).and_then(|mut h| {
                    attack(&mut h);
                    match expect {
                        Expect::Reset if !h.closed(Duration::from_secs(5)) => {
                            Err("the port was not reset".to_string())
                        }
                        _ => Ok(()),
                    }
                });
                if let Err(e) = r {
                    eprintln!("hostile_frontend: {what} (blocking {blocking}): {e}");
                    std::process::exit(1);
                }
            }
        }
        println!(
            "hostile_frontend: round {round}: {} cases x 2 in {:?}",
            cases.len(),
            t.elapsed()
        );
    }
}
