//! Pod sandboxes made through containerd's CRI plugin (the path a kubelet
//! takes) get their network from `vnio cni` and a live `vnio switch`:
//! a private containerd (its own root, state, sockets and configuration;
//! CNI plugins `vnio-cni`, host-local and loopback; a vnio tap network) runs
//! two pods with crictl, on a pause image built here (nothing pulled). Each
//! pod's namespace has the tap with its IPAM address, the switch a port per
//! pod; the pods ping each other through the switch and its port counters
//! grow; `crictl stopp` and `rmp` leave no port, tap, lease, record, mount,
//! namespace or process. Skips without root, containerd, crictl, runc or
//! the reference plugins (scripts/setup --e2e installs them).

mod cni;
mod cri;

use cni::*;
use cri::{Containerd, Pod};
use std::process::Command;
use std::time::{Duration, Instant};
use vnio_switch::control::{Client, Request};

/// Frames the switch counted on each port (`tx` from the pod, `rx` to it).
fn counters(w: &World) -> serde_json::Value {
    let mut c = Client::connect(&w.control()).unwrap();
    c.request(&Request::Stats { name: None }).unwrap()
}

fn frames(stats: &serde_json::Value, port: &str, dir: &str) -> u64 {
    stats[port][dir]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {dir} packets of {port}: {stats}"))
}

/// `ip -d -j addr show dev eth0` inside the pod's namespace.
fn eth0(pod: &Pod) -> serde_json::Value {
    let o = Command::new("ip")
        .args([
            "-n",
            pod.netns_name(),
            "-d",
            "-j",
            "addr",
            "show",
            "dev",
            "eth0",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "pod {}: no eth0: {}",
        pod.id,
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0].clone()
}

/// The plugin's switch port for the pod.
fn port_of(net: &str, pod: &Pod) -> String {
    vnio_cni::record::port_name(net, &pod.id, "eth0")
}

/// libcni's cached ADD result for the pod (the host's cache: containerd's
/// CRI does not configure another).
fn cached_result(net: &str, pod: &Pod) -> std::path::PathBuf {
    std::path::Path::new("/var/lib/cni/results").join(format!("{net}-{}-eth0", pod.id))
}

fn port_names(w: &World) -> Vec<String> {
    let mut n: Vec<String> = w
        .ports()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[test]
fn containerd_cri_pods_get_their_network_from_vnio() {
    if !cri::tools_ready() {
        return;
    }
    let Some(w) = World::without_cnitool("cri", 73) else {
        return;
    };
    let start = Instant::now();
    let net = "cri-tap";
    let (bin, conf) = plugin_dirs(&w, net);
    let mut c = Containerd::start(&w.dir.join("ctrd"), &bin, &conf);
    c.import(&cri::image::pause_archive(&w.dir));
    let up = start.elapsed();

    let pods = [c.run_pod("vnio-a"), c.run_pod("vnio-b")];
    let ran = start.elapsed();
    let ports: Vec<String> = pods.iter().map(|p| port_of(net, p)).collect();
    check_attached(&w, net, &pods, &ports);
    check_traffic(&w, &pods, &ports);
    remove_and_check(&w, &mut c, net, &pods, &ports);
    println!(
        "containerd CRI: up with the image {:.1} s, two pods {:.1} s, all {:.1} s",
        up.as_secs_f64(),
        (ran - up).as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
}

/// The CRI's plugin directory (vnio's plugin, host-local, loopback) and
/// its configuration directory with one vnio tap network, `net`.
fn plugin_dirs(w: &World, net: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let d = w.dir.clone();
    let (bin, conf) = (d.join("cri-bin"), d.join("cri-net.d"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&conf).unwrap();
    std::os::unix::fs::symlink(VNIO, bin.join("vnio-cni")).unwrap();
    for p in ["host-local", "loopback"] {
        std::os::unix::fs::symlink(std::path::Path::new(w.plugins).join(p), bin.join(p)).unwrap();
    }
    // containerd 1.6's libcni reads configurations up to 1.0.0.
    std::fs::write(
        conf.join("10-vnio.conflist"),
        format!(
            r#"{{"cniVersion":"1.0.0","name":"{net}","plugins":[{{"type":"vnio-cni","control":"{0}/ctl.sock","kind":"tap","mtu":1400,"dataDir":"{0}/data","ipam":{{"type":"host-local","ranges":[[{{"subnet":"10.73.0.0/16"}}]],"dataDir":"{0}/ipam"}}}}]}}"#,
            d.display()
        ),
    )
    .unwrap();
    (bin, conf)
}

/// A port, a lease, a record and a cached result per pod, and each pod's
/// eth0 the switch's tap with IPAM's address.
fn check_attached(w: &World, net: &str, pods: &[Pod], ports: &[String]) {
    let mut want = ports.to_vec();
    want.sort();
    assert_eq!(port_names(w), want, "a switch port per pod");
    let leases = w.leases();
    assert_eq!(leases.len(), 2, "a lease per pod: {leases:?}");
    assert_eq!(w.records().len(), 2, "a record per pod");
    for p in pods {
        assert!(
            p.ip.octets()[..2] == [10, 73],
            "pod {}: the CRI's address is IPAM's: {}",
            p.id,
            p.ip
        );
        let lease = leases
            .iter()
            .find(|l| l.ends_with(&format!("/{}", p.ip)))
            .unwrap_or_else(|| panic!("no lease of {}: {leases:?}", p.ip));
        let holder = std::fs::read_to_string(lease).unwrap();
        assert!(
            holder.starts_with(&p.id),
            "the lease of {} is the pod's: {holder}",
            p.ip
        );
        assert!(
            cached_result(net, p).is_file(),
            "libcni cached {}'s result",
            p.id
        );
        let e = eth0(p);
        assert_eq!(
            e["linkinfo"]["info_kind"], "tun",
            "eth0 is the switch's tap: {e}"
        );
        assert_eq!(e["linkinfo"]["info_data"]["type"], "tap", "{e}");
        assert_eq!(e["mtu"], 1400, "{e}");
        assert!(
            e["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
            "{e}"
        );
        let addrs = e["addr_info"].as_array().unwrap();
        assert!(
            addrs
                .iter()
                .any(|a| a["local"] == p.ip.to_string() && a["prefixlen"] == 16),
            "eth0 has {}/16: {e}",
            p.ip
        );
    }
}

/// Both ways through the switch; its counters grow by at least the pings.
fn check_traffic(w: &World, pods: &[Pod], ports: &[String]) {
    let before = counters(w);
    for (from, to) in [(&pods[0], &pods[1]), (&pods[1], &pods[0])] {
        let (sent, lost) = ping(&from.netns, to.ip, "300ms");
        assert!(
            sent > 10 && lost == 0,
            "ping {} -> {}: {sent} sent, {lost} lost",
            from.ip,
            to.ip
        );
    }
    let after = counters(w);
    for port in ports {
        for dir in ["tx", "rx"] {
            let (b, a) = (frames(&before, port, dir), frames(&after, port, dir));
            assert!(a >= b + 20, "{port} {dir}: {b} then {a} frames");
        }
    }
}

/// StopPodSandbox: CNI DEL, the namespace goes; RemovePodSandbox: the
/// rest. Then nothing is left, and containerd stops cleanly.
fn remove_and_check(w: &World, c: &mut Containerd, net: &str, pods: &[Pod], ports: &[String]) {
    for (i, p) in pods.iter().enumerate() {
        c.ok(&["stopp", &p.id]);
        assert!(
            !port_names(w).contains(&ports[i]),
            "pod {}'s port is gone",
            p.id
        );
        assert!(
            !std::path::Path::new(&p.netns).exists(),
            "pod {}'s namespace (and tap) is gone",
            p.id
        );
        assert!(
            w.leases()
                .iter()
                .all(|l| !l.ends_with(&format!("/{}", p.ip))),
            "{}'s lease is gone",
            p.ip
        );
        c.ok(&["rmp", &p.id]);
    }
    assert_eq!(c.pods(), Vec::<String>::new());
    assert_eq!(w.ports().len(), 0);
    assert_eq!(w.leases(), Vec::<String>::new());
    assert_eq!(w.records(), Vec::<String>::new());
    for p in pods {
        let cached = cached_result(net, p);
        assert!(!cached.exists(), "{} is gone", cached.display());
    }
    assert_eq!(c.mounts(), Vec::<String>::new(), "no sandbox mount left");
    assert_eq!(c.pod_processes(), Vec::<i32>::new(), "no pod process left");
    let until = Instant::now() + Duration::from_secs(10);
    while !c.shims().is_empty() {
        assert!(Instant::now() < until, "the shims exit: {:?}", c.shims());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(c.stop(), "containerd stops cleanly on SIGTERM");
    assert_eq!(c.mounts(), Vec::<String>::new());
}
