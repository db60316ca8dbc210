//! `vnio cni` driven by containernetworking's cnitool (libcni, as a
//! runtime drives plugins), with the reference host-local IPAM plugin, a
//! live `vnio switch` and namespaces made with `ip netns`: pods ping each
//! other and move TCP data through the switch; a vhost-user pod gets its
//! socket and device-info file and a poll-mode endpoint on it answers a
//! tap pod's pings; ADD twice, DEL twice, DEL after the namespace went;
//! CHECK, GC and STATUS; the switch SIGKILLed and restarted under pods;
//! 100 pods added and deleted concurrently leave nothing behind.
//! Skips without root, cnitool or host-local (CI installs them).

mod cni;

use cni::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// An echo server inside `netns` on port 7000; returns when it listens.
fn echo_server(netns: &str, ip: Ipv4Addr) -> std::thread::JoinHandle<()> {
    let l = in_netns(netns, || TcpListener::bind((ip, 7000)).unwrap());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    })
}

/// A TCP connection from inside `netns` to `to`:7000.
fn connect(netns: &str, to: Ipv4Addr) -> TcpStream {
    let s = in_netns(netns, || {
        TcpStream::connect_timeout(&SocketAddr::from((to, 7000)), Duration::from_secs(5))
    })
    .expect("connects through the switch");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends `data` and reads it back in step; true when all came back equal.
fn echo(s: &mut TcpStream, data: &[u8]) -> bool {
    let mut back = vec![0u8; data.len()];
    for (chunk, out) in data.chunks(32 << 10).zip(back.chunks_mut(32 << 10)) {
        if s.write_all(chunk).is_err() || s.read_exact(out).is_err() {
            return false;
        }
    }
    back == data
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn tap_pods_ping_and_move_tcp_data_then_leave_nothing() {
    let Some(mut w) = World::new("tcp", 61) else {
        return;
    };
    let (a, b) = (w.netns(0), w.netns(1));
    let net = w.net("tap");
    let ra = w.ok("add", &net, &a, None);
    let rb = w.ok("add", &net, &b, None);
    assert_eq!(ra["interfaces"][0]["name"], "eth0");
    assert_eq!(ra["interfaces"][0]["mtu"], 1400);
    assert_eq!(ra["interfaces"][0]["sandbox"], a.as_str());
    let (ipa, ipb) = (ip_of(&ra), ip_of(&rb));
    assert_eq!(w.ports().len(), 2);
    w.ok("check", &net, &a, None);

    // Repeated ADD: the same answer, still one port.
    let again = w.ok("add", &net, &a, None);
    assert_eq!(ip_of(&again), ipa);
    assert_eq!(w.ports().len(), 2);

    let (sent, lost) = ping(&a, ipb, "300ms");
    assert!(sent > 10 && lost == 0, "ping: {sent} sent, {lost} lost");
    let _srv = echo_server(&b, ipb);
    let mut s = connect(&a, ipb);
    let data = pattern(8 << 20, 7);
    assert!(
        echo(&mut s, &data),
        "8 MiB through the switch and back, equal"
    );
    drop(s);

    w.ok("del", &net, &a, None);
    // b's namespace is gone before its DEL (the runtime removed it first).
    let b_name = b.rsplit('/').next().unwrap();
    assert!(Command::new("ip")
        .args(["netns", "del", b_name])
        .status()
        .unwrap()
        .success());
    w.ok("del", &net, &b, None);
    // DEL again, of something gone: fine.
    w.ok("del", &net, &a, None);
    w.ok("del", &net, &b, None);
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
    let tap = Command::new("ip").args(["-br", "link"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&tap.stdout).contains("eth0@"),
        "no tap moved back to the host"
    );
    let links = Command::new("ip")
        .args(["-n", a.rsplit('/').next().unwrap(), "-br", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains("eth0"), "the tap is gone: {links}");
}

#[test]
fn a_vhost_user_pod_gets_its_socket_and_device_info() {
    let Some(mut w) = World::new("vu", 63) else {
        return;
    };
    let (vm, pod) = (w.netns(0), w.netns(1));
    let info = w.dir.join("devinfo/vm.json");
    let cap = format!(r#"{{"CNIDeviceInfoFile":"{}"}}"#, info.display());
    let r = w.ok("add", &w.net("vu"), &vm, Some(&cap));
    let sock = r["interfaces"][0]["socketPath"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(sock.len() < 108, "{sock}");
    assert!(sock.starts_with(&w.dir.join("pods").display().to_string()));
    let di: serde_json::Value = serde_json::from_slice(&std::fs::read(&info).unwrap()).unwrap();
    assert_eq!(di["type"], "vhost-user");
    assert_eq!(di["version"], "1.1.0");
    assert_eq!(
        di["vhost-user"]["mode"], "client",
        "the pod dials the switch"
    );
    assert_eq!(di["vhost-user"]["path"], sock.as_str());
    w.ok("check", &w.net("vu"), &vm, Some(&cap));

    // A poll-mode endpoint (as a VM in the pod would) on the socket, with
    // the address IPAM gave, answers a tap pod's pings.
    let vm_ip = ip_of(&r);
    w.ok("add", &w.net("tap"), &pod, None);
    let ep_cfg = vnio_switch::endpoint::EndpointConfig::new(
        vnio_switch::wire::EthernetAddress([2, 0, 0, 0, 0, 0x63]),
        vnio_switch::wire::Ipv4Address(vm_ip.octets()),
    );
    let mut ep = vnio_switch::endpoint::Endpoint::connect(std::path::Path::new(&sock), ep_cfg)
        .expect("the endpoint connects to the pod's socket");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        ep.serve(Duration::from_secs(30), &|| {
            st.load(std::sync::atomic::Ordering::SeqCst)
        })
    });
    // Both networks share the switch (VLAN 1): 10.64/16 reaches 10.63/16 only on-link.
    let name = pod.rsplit('/').next().unwrap();
    let ok = Command::new("ip")
        .args(["-n", name, "route", "add", "10.64.0.0/16", "dev", "eth0"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let (sent, lost) = ping(&pod, vm_ip, "300ms");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    server.join().unwrap().unwrap();
    assert!(sent > 10 && lost == 0, "ping: {sent} sent, {lost} lost");

    // DEL with the namespace already gone.
    let _ = Command::new("ip")
        .args(["netns", "del", vm.rsplit('/').next().unwrap()])
        .status();
    w.ok("del", &w.net("vu"), &vm, Some(&cap));
    w.ok("del", &w.net("tap"), &pod, None);
    assert!(!std::path::Path::new(&sock).exists());
    assert!(!info.exists(), "the device-info file goes with DEL");
    assert_eq!(w.files("pods"), Vec::<String>::new());
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
}

#[test]
fn gc_removes_what_is_not_valid_and_status_tells_whether_the_switch_answers() {
    let Some(mut w) = World::new("gc", 65) else {
        return;
    };
    let (a, b) = (w.netns(0), w.netns(1));
    let net = w.net("tap");
    w.ok("add", &net, &a, None);
    w.ok("add", &net, &b, None);
    w.ok("status", &net, &a, None);
    // The plugin itself with one valid attachment: b's (cnitool names the
    // container after the namespace's path; the record says which).
    let recs: Vec<serde_json::Value> = w
        .records()
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .collect();
    let b_rec = recs.iter().find(|r| r["netns"] == b.as_str()).unwrap();
    let conf = std::fs::read_to_string(w.dir.join(format!("net.d/10-{net}.conflist"))).unwrap();
    let conf: serde_json::Value = serde_json::from_str(&conf).unwrap();
    let mut plugin = conf["plugins"][0].clone();
    plugin["cniVersion"] = "1.1.0".into();
    plugin["name"] = net.clone().into();
    plugin["cni.dev/valid-attachments"] = serde_json::json!([
        {"containerID": b_rec["container_id"], "ifname": "eth0"}
    ]);
    let mut gc = Command::new(w.dir.join("bin/vnio-cni"))
        .env("CNI_COMMAND", "GC")
        .env("CNI_PATH", &w.cni_path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    gc.stdin
        .take()
        .unwrap()
        .write_all(plugin.to_string().as_bytes())
        .unwrap();
    let out = gc.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let ports = w.ports();
    assert_eq!(ports.len(), 1, "a's port collected");
    assert_eq!(w.leases().len(), 1, "a's lease released");

    // STATUS with the switch down: code 50.
    w.kill_switch();
    let o = w.cnitool("status", &net, &a, None);
    assert!(!o.status.success());
    let text = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("does not answer"), "{text}");
    w.start_switch();
    // cnitool's GC: nothing it cached is valid any more.
    w.ok("gc", &net, &a, None);
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
}

#[test]
fn a_switch_restart_under_pods_brings_every_port_back() {
    let Some(mut w) = World::new("restart", 67) else {
        return;
    };
    let net = w.net("tap");
    let pods: Vec<String> = (0..4).map(|i| w.netns(i)).collect();
    let ips: Vec<Ipv4Addr> = pods
        .iter()
        .map(|p| ip_of(&w.ok("add", &net, p, None)))
        .collect();
    let _srv = echo_server(&pods[1], ips[1]);
    let mut s = connect(&pods[0], ips[1]);
    assert!(echo(&mut s, &pattern(1 << 20, 3)));
    let before: Vec<String> = w
        .ports()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();

    w.kill_switch();
    let t0 = Instant::now();
    w.start_switch();
    let after: Vec<String> = w
        .ports()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(after, before, "every port is back");
    // The connection made before the kill carries data again.
    let data = pattern(64 << 10, 5);
    assert!(echo(&mut s, &data), "the old connection resumes");
    let resumed = t0.elapsed();
    println!(
        "traffic resumed {:.0} ms after the restart began ({} ports back)",
        resumed.as_secs_f64() * 1000.0,
        after.len()
    );
    assert!(resumed < Duration::from_secs(2), "resumed in {resumed:?}");
    w.ok("check", &net, &pods[2], None);
    drop(s);
    for p in &pods {
        w.ok("del", &net, p, None);
    }
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// 100 pods added at once, then deleted at once: every ADD answers, every
/// port exists, and afterwards no port, tap, record or lease is left.
#[test]
fn a_hundred_pods_come_and_go_concurrently() {
    let Some(mut w) = World::new("many", 69) else {
        return;
    };
    let net = w.net("tap");
    let pods: Vec<String> = (0..100).map(|i| w.netns(i)).collect();
    let w = &w;
    let timed = |cmd: &'static str| {
        let mut times: Vec<Duration> = std::thread::scope(|s| {
            let hs: Vec<_> = pods
                .iter()
                .map(|p| {
                    let net = net.clone();
                    s.spawn(move || {
                        let t = Instant::now();
                        w.ok(cmd, &net, p, None);
                        t.elapsed()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        times.sort();
        println!(
            "{cmd} x100 concurrently: p50 {:.0} ms, p99 {:.0} ms",
            pct(&times, 0.5),
            pct(&times, 0.99)
        );
    };
    let t0 = Instant::now();
    timed("add");
    println!("100 ADDs in {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(w.ports().len(), 100);
    assert_eq!(w.leases().len(), 100);
    let t0 = Instant::now();
    timed("del");
    println!("100 DELs in {:.1} s", t0.elapsed().as_secs_f64());
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
    let state = std::fs::read_to_string(w.dir.join("ctl.state")).unwrap();
    assert!(!state.contains("cni-"), "no state record left: {state}");
    for p in &pods {
        let name = p.rsplit('/').next().unwrap();
        let o = Command::new("ip")
            .args(["-n", name, "-br", "link"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("eth0"),
            "{name} keeps no tap"
        );
    }
}
