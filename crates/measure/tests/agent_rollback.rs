//! A test whose set-up fails half-way (here: out of descriptors after some
//! of its sessions started) stops and joins what it started and gives its
//! budget back. Alone in its binary: it lowers the process's descriptor limit.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use vnio_measure::client::Control;
use vnio_measure::clock;
use vnio_measure::proto::{TestSpec, Transport, Workload};

fn udp_echo(sessions: u32) -> TestSpec {
    TestSpec {
        workload: Workload::Echo {
            transport: Transport::Udp,
            request: 64,
            response: 64,
        },
        sessions,
        duration_ms: 3000,
        cpus: vec![],
        busy_poll_us: None,
        start_at_unix_ns: clock::realtime_ns(),
        data_from: None,
    }
}

#[test]
fn a_half_started_test_is_rolled_back() {
    let mut cfg = config();
    // Exactly one 16-session test fits: a leaked reservation would refuse the next.
    cfg.budget.threads = 16;
    cfg.budget.client_threads = 16;
    let agent = TestAgent::with(cfg);
    let mut c = Control::connect(agent.addr, None).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = threads();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    // Room for six of the sixteen session sockets.
    setrlimit(Resource::RLIMIT_NOFILE, fds() as u64 + 6, hard).unwrap();
    let e = c.start(&udp_echo(16)).err();
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let e = e.expect("the set-up runs out of descriptors");
    assert!(e.to_string().contains("cannot set up the test"), "{e}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        threads(),
        t0,
        "session threads of the failed set-up still run"
    );
    // Budget given back, connection still usable.
    c.start(&udp_echo(16)).unwrap();
    c.stop().unwrap();
}
