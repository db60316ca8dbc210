//! Ports added over the control socket survive the switch: a real `vnio
//! switch` gets ports at run time, is SIGKILLed, started again with the
//! same config, and has them back with their settings; `port del` then a
//! restart: gone. A tap in another network namespace keeps its addresses
//! across the restart. A corrupt state file is kept aside and the switch
//! starts with its config's ports.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;
use vnio_switch::config::{PolicyUpdate, PortSpec};
use vnio_switch::control::{Client, Request};
use vnio_switch::port::SocketMode;

fn config(dir: &Path) -> PathBuf {
    let d = dir.display();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/ctl.sock\"\n\
             [[port]]\nname = \"cfg\"\nkind = \"vhost-user\"\nsocket = \"{d}/cfg.sock\"\n"
        ),
    )
    .unwrap();
    cfg
}

/// Starts the switch and waits for its control socket to answer.
fn start(cfg: &Path, ctl: &Path) -> (Reaped, Client) {
    let _ = std::fs::remove_file(ctl);
    let child = start_switch(cfg);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = Client::connect(ctl) {
            if c.request(&Request::PortList).is_ok() {
                return (child, c);
            }
        }
        assert!(Instant::now() < until, "the switch did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(mut sw: Reaped) {
    sw.0.kill().unwrap();
    sw.0.wait().unwrap();
}

/// name -> the port's listing.
fn ports(c: &mut Client) -> serde_json::Map<String, serde_json::Value> {
    let l = c.request(&Request::PortList).unwrap();
    l.as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn ports_added_at_run_time_come_back_after_a_kill() {
    let t = Tmp::new("persist-kill");
    let dir = t.0.clone();
    let (cfg, ctl) = (config(&dir), dir.join("ctl.sock"));
    let (sw, mut c) = start(&cfg, &ctl);
    let mut vm1 = PortSpec::vhost_user("vm1", dir.join("vm1.sock"), SocketMode::Server);
    vm1.vlan = Some(7);
    vm1.mac = Some("02:00:00:00:00:07".into());
    vm1.kind.vhost_user_mut().unwrap().queues = std::num::NonZeroUsize::new(2).unwrap();
    let vm2 = PortSpec::vhost_user("vm2", dir.join("vm2.sock"), SocketMode::Server);
    for p in [vm1, vm2] {
        c.request(&Request::PortAdd { port: p }).unwrap();
    }
    c.request(&Request::PortSet {
        name: "vm1".into(),
        set: PolicyUpdate {
            lro: Some(false),
            egress: vnio_switch::config::EgressSettings {
                share: Some(300),
                ..Default::default()
            },
            ..Default::default()
        },
    })
    .unwrap();
    let before = ports(&mut c);
    assert_eq!(before.len(), 3);
    kill(sw);

    let (sw, mut c) = start(&cfg, &ctl);
    let after = ports(&mut c);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    let v = &after["vm1"];
    assert_eq!(v["vlan"], before["vm1"]["vlan"], "{v}");
    assert_eq!(v["policy"]["lro"], false, "{v}");
    assert_eq!(v["policy"], before["vm1"]["policy"], "{v}");
    assert_eq!(v["mode"], "server");
    assert!(dir.join("vm1.sock").exists(), "the socket is bound again");
    let state = std::fs::read_to_string(dir.join("ctl.state")).unwrap();
    assert!(!state.contains("\"cfg\""), "config ports are not recorded");

    c.request(&Request::PortDel { name: "vm1".into() }).unwrap();
    // A graceful stop keeps the records too.
    c.request(&Request::Shutdown).unwrap();
    drop(sw);
    let (sw, mut c) = start(&cfg, &ctl);
    let after = ports(&mut c);
    assert_eq!(after.keys().collect::<Vec<_>>(), ["cfg", "vm2"]);
    kill(sw);
}

#[test]
fn a_corrupt_state_file_is_kept_aside() {
    let t = Tmp::new("persist-bad");
    let dir = t.0.clone();
    let (cfg, ctl) = (config(&dir), dir.join("ctl.sock"));
    std::fs::write(dir.join("ctl.state"), "{\"version\": 1, \"ports\": [tru").unwrap();
    let (sw, mut c) = start(&cfg, &ctl);
    assert_eq!(ports(&mut c).keys().collect::<Vec<_>>(), ["cfg"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("ctl.state.bad")).unwrap(),
        "{\"version\": 1, \"ports\": [tru"
    );
    // And the switch records again from scratch.
    c.request(&Request::PortAdd {
        port: PortSpec::vhost_user("x", dir.join("x.sock"), SocketMode::Server),
    })
    .unwrap();
    kill(sw);
    let (sw, mut c) = start(&cfg, &ctl);
    assert_eq!(ports(&mut c).keys().collect::<Vec<_>>(), ["cfg", "x"]);
    kill(sw);
}

fn ip(args: &[&str]) -> String {
    let o = Command::new("ip").args(args).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A tap port in a pod's namespace keeps its interface, address and all,
/// while the switch is down, and goes with `port del`.
#[test]
fn a_tap_in_a_namespace_survives_the_switch() {
    if !is_root() {
        println!("skip: needs root (network namespaces)");
        return;
    }
    let t = Tmp::new("persist-netns");
    let dir = t.0.clone();
    let ns = format!("vnio-persist-{}", std::process::id());
    struct Ns(String);
    impl Drop for Ns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    let _ns = Ns(ns.clone());
    let (cfg, ctl) = (config(&dir), dir.join("ctl.sock"));
    let (sw, mut c) = start(&cfg, &ctl);
    let mut tap = PortSpec::tap("pod1", "eth0");
    tap.kind.tap_mut().unwrap().netns = Some(PathBuf::from(format!("/run/netns/{ns}")));
    c.request(&Request::PortAdd { port: tap }).unwrap();
    let ipn = |a: &[&str]| {
        let mut v = vec!["-n", &ns];
        v.extend_from_slice(a);
        ip(&v)
    };
    ipn(&["addr", "add", "10.9.0.1/24", "dev", "eth0"]);
    ipn(&["link", "set", "eth0", "up"]);
    assert!(ipn(&["addr", "show", "eth0"]).contains("10.9.0.1/24"));
    kill(sw);
    assert!(
        ipn(&["addr", "show", "eth0"]).contains("10.9.0.1/24"),
        "the tap and its address stay while the switch is down"
    );
    let (sw, mut c) = start(&cfg, &ctl);
    let p = ports(&mut c);
    assert_eq!(p["pod1"]["kind"], "tap", "{p:?}");
    assert!(ipn(&["addr", "show", "eth0"]).contains("10.9.0.1/24"));
    c.request(&Request::PortDel {
        name: "pod1".into(),
    })
    .unwrap();
    assert_eq!(
        ipn(&["link", "show", "eth0"]),
        "",
        "port del removes the tap"
    );
    kill(sw);
}
