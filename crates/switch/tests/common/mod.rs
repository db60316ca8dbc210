//! Shared helpers: a switch in a private temporary directory, endpoints,
//! and a hand-driven front-end ([`raw`], from the `vnio-switch-testkit`
//! crate the examples share).

#![allow(dead_code)]

pub mod frr;
pub mod testpmd;
pub mod underlay;

// Each test uses some of them.
#[allow(unused_imports)]
pub use vnio_switch_testkit::{attacks, mac, packed, raw};

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::daemon::Switch;
use vnio_switch::datapath::{Datapath, Port};
use vnio_switch::endpoint::{Endpoint, EndpointConfig};
use vnio_switch::port::vhost_user::VhostUserPort;
use vnio_switch::port::SocketMode;
use vnio_switch::port::Watch;
use vnio_switch::wire::Ipv4Address;

pub const T: Duration = Duration::from_secs(5);

pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "vnio-sw-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    pub fn sock(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.sock"))
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn ip(n: u8) -> Ipv4Address {
    Ipv4Address([10, 0, 0, n])
}

/// A switch with server-mode vhost-user ports `p1..=pN`.
pub fn switch(dir: &Dir, ports: usize) -> Switch {
    switch_tuned(dir, ports, |_| {})
}

/// As [`switch`], with the switch-wide settings changed by `tune`.
pub fn switch_tuned(dir: &Dir, ports: usize, tune: impl FnOnce(&mut SwitchConfig)) -> Switch {
    let mut sw = SwitchConfig {
        control: dir.sock("control"),
        idle_polls: 4,
        ..SwitchConfig::default()
    };
    tune(&mut sw);
    let cfg = Config {
        switch: sw,
        ports: (1..=ports)
            .map(|i| {
                PortSpec::vhost_user(
                    &format!("p{i}"),
                    dir.sock(&format!("p{i}")),
                    SocketMode::Server,
                )
            })
            .collect(),
    };
    Switch::start(cfg).unwrap()
}

pub fn endpoint(dir: &Dir, port: usize, n: u8) -> Endpoint {
    Endpoint::connect(
        &dir.sock(&format!("p{port}")),
        EndpointConfig::new(mac(n), ip(n)),
    )
    .unwrap()
}

/// A [`Datapath`] with vhost-user ports `p1..=pN` driven by the calling
/// thread (no worker: the test passes time in and polls when it wants),
/// with an endpoint on each port (`mac(i)`, `ip(i)`).
pub fn driven(dir: &Dir, ports: usize) -> (Datapath, Vec<Endpoint>) {
    driven_with(dir, ports, |_| {})
}

/// [`driven`] with each endpoint's configuration adjusted by `set`.
pub fn driven_with(
    dir: &Dir,
    ports: usize,
    set: impl Fn(&mut EndpointConfig) + Send + 'static,
) -> (Datapath, Vec<Endpoint>) {
    let sw = SwitchConfig::default();
    let mut dp = Datapath::new(sw.fdb());
    for i in 1..=ports {
        let name = format!("p{i}");
        let spec = PortSpec::vhost_user(&name, dir.sock(&name), SocketMode::Server);
        let port = VhostUserPort::new(&dir.sock(&name), SocketMode::Server).unwrap();
        dp.add(
            vnio_switch::PortId(i as u32),
            name,
            spec.policy().unwrap(),
            spec.policies(&sw),
            Port::VhostUser(port),
        );
    }
    // The endpoints' handshakes wait for answers: they connect on a helper
    // thread while this one serves the ports.
    let socks: Vec<_> = (1..=ports).map(|i| dir.sock(&format!("p{i}"))).collect();
    let connect = std::thread::spawn(move || {
        socks
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let n = i as u8 + 1;
                let mut cfg = EndpointConfig::new(mac(n), ip(n));
                set(&mut cfg);
                Endpoint::connect(s, cfg).unwrap()
            })
            .collect::<Vec<_>>()
    });
    let running = |dp: &Datapath| {
        dp.table().slots().all(|(_, s)| {
            matches!(&s.port, Port::VhostUser(p) if p.device.ready(0) && p.device.ready(1))
        })
    };
    let deadline = std::time::Instant::now() + T;
    // The last requests need no answer: the endpoints may be done before
    // the switch has read them.
    while !connect.is_finished() || !running(&dp) {
        assert!(
            std::time::Instant::now() < deadline,
            "endpoints did not connect"
        );
        let now = std::time::Instant::now();
        for slot in 0..ports {
            dp.on_event(slot, Watch::Listener, now);
            dp.on_event(slot, Watch::Connection, now);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    (dp, connect.join().unwrap())
}

/// Port `name` as the switch lists it (counters, state).
pub fn port(sw: &vnio_switch::daemon::WorkerHandle, name: &str) -> vnio_switch::worker::PortInfo {
    sw.list()
        .unwrap()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap()
}

/// Waits up to [`T`] for `f` to hold, naming `what` when it does not.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `f` on a thread and fails the test if it does not finish within `limit`.
pub fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("test step exceeded its time limit")
}

/// A veth pair `<tag>a<n>` / `<tag>b<n>` (`n` from the process id, so
/// parallel test binaries do not collide), both ends up with IPv6 off (no
/// router solicitations among the test's frames). The pair goes when the
/// returned link drops. Root only.
pub fn veth_up(tag: &str) -> (vnio_lab::Link, String, String) {
    let n = std::process::id() % 1000;
    let (a, b) = (format!("{tag}a{n}"), format!("{tag}b{n}"));
    let mut h = vnio_lab::Handle::root().unwrap();
    let veth = h.add_veth(&a, &b, None).unwrap();
    for i in [&a, &b] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{i}/disable_ipv6"), "1");
        h.set_up(i).unwrap();
    }
    (veth, a, b)
}

/// An Ethernet frame of 60 bytes from `src` to `dst` with this EtherType.
pub fn frame(dst: [u8; 6], src: u8, ethertype: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&mac(src).0);
    f[12..14].copy_from_slice(&ethertype.to_be_bytes());
    f
}
