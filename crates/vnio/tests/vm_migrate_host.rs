//! `vnio vm migrate NAME --to HOST` end to end: HOST is machine m1 of
//! scripts/lab-machines (network namespace vnio-m1 with its own sshd,
//! sharing this file system), running its own vnio switch; the two switches
//! are joined by a VXLAN port each over the machines' 10.99.0.0/24 network.
//! Guest A stays here, guest B (TCG) moves to m1 over TLS (certificates
//! from `vnio vm tls init`) while A pings it every 10 ms and B streams to
//! A: at most 5% of the pings lost, the stream arrives with the sender's
//! md5, B answers afterwards from a QEMU in vnio-m1 booted from the image
//! copied into m1's cache (`--remote-cache`), `vnio vm list` and `stop` on
//! m1 see and remove it, and nothing is left on either side. A capture of
//! the underlay (tcpdump on vniom0) during the migration holds none of a
//! marker that fills a file in B's memory; as a control, A then moves with
//! `--insecure` and its marker is in that capture.
//!
//! Before that, each refused in one line, the guest running on here and
//! nothing left on m1: a migration without certificates (and without
//! `--insecure`), into a helper directory others can write, to an m1 whose
//! switch control socket is missing, to an unreachable m1, with
//! certificates of another CA on either end, and one whose destination
//! QEMU is killed while the guest's memory arrives; a binary planted under
//! the copy's name is replaced, never run. `vnio vm wait-agent` from a
//! namespace with no route of its own to the guests uses the command
//! channel at once.
//!
//! Needs root, sshd and ssh, tcpdump, QEMU and the guests' static vnio
//! (else one `skip:` line).

#[path = "../../vm/tests/common/mod.rs"]
mod common;
mod machines;
#[path = "vm_migrate_host/no_route.rs"]
mod no_route;
#[path = "vm_migrate_host/underlay.rs"]
mod underlay;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use machines::{ready_or_skip, Machines, MACHINES};
use no_route::agent_without_a_route;
use underlay::{occurrences, plant_marker, Capture};
use vnio_switch::config::{Config, PortSpec, SwitchConfig};
use vnio_switch::control::{Client, Request};
use vnio_switch::daemon::Switch;
use vnio_switch::port::SocketMode;
use vnio_vm::spec::VmSpec;
use vnio_vm::state::{State, VmDir};

const VNIO: &str = env!("CARGO_BIN_EXE_vnio");
/// The VNI joining the two switches.
const VNI: u32 = 4242;
/// This host's and m1's addresses on the machines' network (scripts/lab-machines).
const HERE: &str = "10.99.0.1";
const M1: &str = "10.99.0.2";

/// Kills and reaps a child when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ssh_config() -> String {
    format!("{MACHINES}/ssh_config")
}

/// `vnio ARGS` on m1, over SSH.
fn on_m1(args: &[&str]) -> Output {
    let script: Vec<String> = std::iter::once(VNIO)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect();
    Command::new("ssh")
        .args(["-F", &ssh_config(), "-o", "BatchMode=yes", "m1", "--"])
        .arg(script.join(" "))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// m1's vnio switch, in namespace vnio-m1, with its VXLAN port toward here.
fn m1_switch(dir: &Path) -> Reaped {
    let d = dir.display();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/control.sock\"\nidle_polls = 4\n\
             [[port]]\nname = \"vx\"\nkind = \"vxlan\"\nvni = {VNI}\nlocal = \"{M1}\"\nremotes = [\"{HERE}\"]\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("switch.log")).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", "vnio-m1", VNIO, "switch", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let sw = Reaped(child);
    let end = Instant::now() + Duration::from_secs(20);
    while !dir.join("control.sock").exists() {
        assert!(
            Instant::now() < end,
            "m1's switch did not start: {}",
            std::fs::read_to_string(dir.join("switch.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sw
}

/// The names of the ports of the switch at `control`.
fn ports(control: &Path) -> Vec<String> {
    let list = Client::connect(control)
        .unwrap()
        .request(&Request::PortList)
        .unwrap();
    let mut out: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    out.sort();
    out
}

/// Processes whose command line mentions `needle` (other than this one).
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmd = text(&cmd).replace('\0', " ");
        if cmd.contains(needle) && alive(pid.parse().unwrap()) {
            out.push(format!("{pid}: {cmd}"));
        }
    }
    out
}

/// The network namespace of `pid` (its inode).
fn netns_of(pid: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(pid).map(|m| m.ino()).unwrap_or(0)
}

/// Whether a TCP connection from this host to QEMU `pid` (not SSH's) is
/// established in its namespace: the migration stream.
fn stream_open(pid: u32) -> bool {
    // 10.99.0.1 as /proc/net/tcp prints it (little-endian hex).
    let here = "0100630A:";
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .any(|f| f.len() > 3 && f[3] == "01" && f[2].starts_with(here) && !f[1].ends_with(":0016"))
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `cmd` (a `vnio vm migrate --to`) to its end; asserts that its SSH
/// connection master and that one's directory (`vnio-migrate-PID-XXXXXX`,
/// made by mkdtemp) are gone.
fn finished(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let master = format!("vnio-migrate-{pid}-");
    let end = Instant::now() + Duration::from_secs(5);
    while !processes_with(&master).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(&master), Vec::<String>::new(), "SSH master");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&master))
        .collect();
    assert!(left.is_empty(), "control directory left: {left:?}");
    out
}

/// The directories every migration of this test uses: the certificates
/// (the same directory serves both sides: the file system is shared) and
/// vnio's copy on m1 (a name with a space, a quote, `$` and `;`).
struct Paths {
    tls: std::path::PathBuf,
    bin: std::path::PathBuf,
}

fn migrate_cmd(root: &Path, name: &str, remote_root: &Path, control: &Path) -> Command {
    let p = paths(remote_root);
    let mut c = Command::new(VNIO);
    c.arg("vm")
        .arg("--state-dir")
        .arg(root)
        .args(["migrate", name, "--to", "m1", "--ssh-config", &ssh_config()])
        .arg("--remote-state-dir")
        .arg(remote_root)
        .arg("--remote-control")
        .arg(control)
        .arg("--remote-bin-dir")
        .arg(&p.bin)
        .arg("--json")
        .stdin(Stdio::null());
    c
}

/// `migrate_cmd` over TLS with the test's certificates.
fn tls_cmd(root: &Path, name: &str, remote_root: &Path, control: &Path) -> Command {
    let mut c = migrate_cmd(root, name, remote_root, control);
    c.arg("--tls-dir").arg(paths(remote_root).tls);
    c
}

fn paths(remote_root: &Path) -> Paths {
    let m1 = remote_root.parent().unwrap();
    Paths {
        tls: m1.join("tls"),
        bin: m1.join("vnio bin 'q' $HOME; x"),
    }
}

/// The pid of the destination QEMU of a migration into `remote_root`, once it runs.
fn destination_qemu(remote_root: &Path, within: Duration) -> Option<u32> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        let found = processes_with(&remote_root.display().to_string())
            .into_iter()
            .find(|p| p.contains("qemu-system") && p.contains("-incoming"));
        if let Some(p) = found {
            return p.split(':').next()?.parse().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn a_guest_migrates_to_another_machine_under_ping_and_tcp() {
    if !ready_or_skip() {
        return;
    }
    if Command::new("tcpdump").arg("--version").output().is_err() {
        eprintln!("skip: no tcpdump (scripts/setup --e2e installs it)");
        return;
    }
    let Some(kit) = Kit::get("live migration to another machine") else {
        return;
    };
    let started = Instant::now();
    let _machines = Machines::up();
    bounded(Duration::from_secs(600), move || to_m1(kit));
    println!(
        "migration to m1: {:.0} s in all",
        started.elapsed().as_secs_f64()
    );
}

fn to_m1(kit: Kit) {
    let n = run_id();
    let work = Dir::new("tohost");
    let m1 = work.join("m1");
    std::fs::create_dir_all(&m1).unwrap();
    let remote_root = m1.join("vms");
    let m1_control = m1.join("control.sock");
    let sock = |p: &str| work.join(&format!("{p}.sock"));
    let control = sock("control");
    let _here = Switch::start(Config {
        switch: SwitchConfig {
            control: control.clone(),
            idle_polls: 4,
            ..SwitchConfig::default()
        },
        ports: vec![
            PortSpec::vhost_user("p1", sock("p1"), SocketMode::Server),
            PortSpec::vhost_user("p2", sock("p2"), SocketMode::Server),
            PortSpec::vxlan("vx", VNI, HERE.parse().unwrap(), &[M1.parse().unwrap()]),
        ],
    })
    .expect("this host's switch");
    let _m1_switch = m1_switch(&m1);

    let (a_ip, b_ip) = (format!("10.{n}.0.11"), format!("10.{n}.0.12"));
    let guest = |name: &str, p: &str, ip: &str| {
        let mut s = VmSpec::new(&format!("{name}{n}"));
        s.nics = vec![format!(
            "vhost-user:{},control={},ip={ip}/24",
            sock(p).display(),
            control.display()
        )
        .parse()
        .unwrap()];
        s
    };
    let mut guard = Guard::default();
    let la = kit.launch(&guest("ta", "p1", &a_ip), &mut guard);
    let lb = kit.launch(&guest("tb", "p2", &b_ip), &mut guard);
    wait_booted(&[&la, &lb]);
    let (a, b) = (la.dir.clone(), lb.dir.clone());
    let name = b.name();
    agent_without_a_route(&kit, &a, &a_ip, n);
    // The VXLAN path carries inner frames up to the underlay's MTU less 50.
    for g in [&a, &b] {
        run(g, "ip link set dev eth0 mtu 1450");
    }
    run(&a, &format!("ping -c 2 -W 5 {b_ip}"));
    let old_pid = State::load(&b).unwrap().pid.unwrap();
    let p = paths(&remote_root);

    // Refused: no certificates, and no --insecure. Nothing is tried.
    let t = Instant::now();
    let mut cmd = migrate_cmd(&kit.root.0, &name, &remote_root, &m1_control);
    cmd.arg("--tls-dir").arg(&p.tls);
    let out = finished(cmd);
    let err = text(&out.stderr);
    println!(
        "no certificates, refused in {:?}: {}",
        t.elapsed(),
        err.trim()
    );
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("has no ca-cert.pem, client-cert.pem, client-key.pem"),
        "{err}"
    );
    assert!(
        err.contains(&format!("vnio vm tls init {}", p.tls.display())),
        "the fix: {err}"
    );
    assert!(err.contains("--insecure"), "{err}");
    assert!(alive(old_pid));
    assert!(!p.bin.exists(), "nothing was tried on m1");
    let init = Command::new(VNIO)
        .args(["vm", "tls", "init"])
        .arg(&p.tls)
        .args(["--host", "m1", "--host", M1])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init.stderr));

    // Refused: vnio's copy would go into a directory anyone can write.
    std::fs::create_dir(&p.bin).unwrap();
    set_mode(&p.bin, 0o777);
    let out = finished(tls_cmd(&kit.root.0, &name, &remote_root, &m1_control));
    let err = text(&out.stderr);
    println!("world-writable helper directory: {}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1: ") && err.contains("mode 0777"), "{err}");
    assert!(
        std::fs::read_dir(&p.bin).unwrap().next().is_none(),
        "nothing copied"
    );
    assert!(alive(old_pid));
    // Private now, but a binary is planted under the copy's name: it is
    // replaced by the next migration, and never runs.
    set_mode(&p.bin, 0o700);
    let hash = vnio_vm::migrate::helper::sha256_file(Path::new(VNIO)).unwrap();
    let copy = vnio_vm::migrate::helper::copy_path(&p.bin.display().to_string(), &hash);
    let planted_ran = work.join("planted-ran");
    std::fs::write(
        &copy,
        format!("#!/bin/sh\ntouch '{}'\n", planted_ran.display()),
    )
    .unwrap();
    set_mode(Path::new(&copy), 0o700);

    // Refused: m1 has no switch at that control socket. The guest runs on
    // here, nothing is made on m1.
    let t = Instant::now();
    let out = finished(tls_cmd(
        &kit.root.0,
        &name,
        &remote_root,
        &m1.join("none.sock"),
    ));
    let err = text(&out.stderr);
    println!("refused in {:?}: {}", t.elapsed(), err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("no switch control socket at"), "{err}");
    assert!(err.contains("m1"), "names the host: {err}");
    assert!(alive(old_pid), "the guest runs on here");
    assert_eq!(State::load(&b).unwrap().pid, Some(old_pid));
    assert!(!remote_root.join(&name).exists(), "no state made on m1");
    assert_eq!(ports(&m1_control), ["vx"]);
    run(&a, &format!("ping -c 2 -W 5 {b_ip}"));
    assert!(!planted_ran.exists(), "the planted binary ran");
    assert_eq!(
        vnio_vm::migrate::helper::sha256_file(Path::new(&copy)).unwrap(),
        hash,
        "the planted binary was replaced by this vnio"
    );

    // Refused: m1 is not reachable (nothing listens on that SSH port).
    let mut cmd = tls_cmd(&kit.root.0, &name, &remote_root, &m1_control);
    cmd.args(["--ssh-option", "Port=2"]);
    let out = finished(cmd);
    let err = text(&out.stderr);
    println!("unreachable: {}", err.trim());
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1: probing"), "{err}");
    assert!(alive(old_pid));

    // Certificates of another CA, on either end: the handshake fails, in
    // one line; the guest runs on here, nothing is left on m1. First m1
    // shows a server certificate this host's CA did not sign; then this
    // host (trusting both CAs) shows a client certificate m1's CA did not
    // sign: m1 checks the source too (verify-peer).
    let other = m1.join("tls-other");
    let mixed = m1.join("tls-mixed");
    let init = Command::new(VNIO)
        .args(["vm", "tls", "init"])
        .arg(&other)
        .args(["--host", "m1", "--host", M1])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init.stderr));
    std::fs::create_dir(&mixed).unwrap();
    let both = [p.tls.join("ca-cert.pem"), other.join("ca-cert.pem")]
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<String>();
    std::fs::write(mixed.join("ca-cert.pem"), both).unwrap();
    for f in ["client-cert.pem", "client-key.pem"] {
        std::fs::copy(other.join(f), mixed.join(f)).unwrap();
    }
    for (here, there, what) in [
        (&p.tls, &other, "m1's certificate of another CA"),
        (&mixed, &p.tls, "a client certificate of another CA"),
    ] {
        let mut cmd = migrate_cmd(&kit.root.0, &name, &remote_root, &m1_control);
        cmd.arg("--tls-dir")
            .arg(here)
            .arg("--remote-tls-dir")
            .arg(there);
        let t = Instant::now();
        let out = finished(cmd);
        let err = text(&out.stderr);
        println!("{what}: refused in {:?}: {}", t.elapsed(), err.trim());
        assert!(!out.status.success(), "{what}: {}", text(&out.stdout));
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(err.contains("m1"), "names the host: {err}");
        assert!(!err.contains("object-add"), "the credentials loaded: {err}");
        assert!(alive(old_pid), "the guest runs on here");
        assert_eq!(State::load(&b).unwrap().pid, Some(old_pid));
        assert!(!remote_root.join(&name).exists(), "no state left on m1");
        assert_eq!(ports(&m1_control), ["vx"], "no port left on m1");
    }
    run(&a, &format!("ping -c 2 -W 5 {b_ip}"));

    // The destination QEMU dies mid-way: refused in one line, the guest
    // runs on here, nothing is left on m1. m1 gets its own image cache
    // (this file system is shared, so the same paths would do): the image
    // is copied there first, and kept (a cache, not the run's).
    let t = Instant::now();
    let cache = m1.join("cache");
    let image = cache.join("images").join(&kit.image.manifest.key);
    let mut cmd = tls_cmd(&kit.root.0, &name, &remote_root, &m1_control);
    cmd.arg("--remote-cache").arg(&cache);
    let run_it = std::thread::spawn(move || finished(cmd));
    let dst = destination_qemu(&remote_root, Duration::from_secs(60)).expect("a destination QEMU");
    // Once the migration stream is open, the guest's memory is arriving:
    // freeze the destination there (the transfer takes about a second at
    // least), then kill it.
    let end = Instant::now() + Duration::from_secs(60);
    while !stream_open(dst) {
        assert!(Instant::now() < end, "no migration stream to {dst}");
        std::thread::sleep(Duration::from_millis(2));
    }
    let pid = nix::unistd::Pid::from_raw(dst as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    let out = run_it.join().unwrap();
    let err = text(&out.stderr);
    println!(
        "destination killed, refused in {:?}: {}",
        t.elapsed(),
        err.trim()
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("m1"), "names the host: {err}");
    assert!(err.contains("QEMU"), "says QEMU failed: {err}");
    assert!(alive(old_pid), "the guest runs on here");
    assert_eq!(State::load(&b).unwrap().pid, Some(old_pid));
    assert!(!remote_root.join(&name).exists(), "no state left on m1");
    assert_eq!(ports(&m1_control), ["vx"], "no port left on m1");
    assert_eq!(ports(&control), ["p1", "p2", "vx"]);
    for f in ["vmlinuz", "initrd.img", "manifest.json"] {
        assert_eq!(
            std::fs::read(image.join(f)).unwrap(),
            std::fs::read(kit.image.dir.join(f)).unwrap(),
            "{f} copied whole"
        );
    }
    run(&a, &format!("ping -c 2 -W 5 {b_ip}"));

    // The migration over TLS, under ping and a paced TCP stream, the
    // underlay captured; B's memory holds the marker.
    let marker_b = format!("vnio-migration-marker-b-{}-{n}", std::process::id());
    plant_marker(&b, &marker_b);
    let traffic = Traffic::start(&a, &b, &a_ip, &b_ip);
    let capture = Capture::start(work.join("tls.pcap"));
    let mut cmd = tls_cmd(&kit.root.0, &name, &remote_root, &m1_control);
    cmd.arg("--remote-cache").arg(&cache);
    let t = Instant::now();
    let out = finished(cmd);
    let took = t.elapsed();
    let pcap = capture.stop();
    assert!(
        out.status.success(),
        "vnio vm migrate --to m1: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    println!(
        "migration to m1: total {} ms, downtime {} ms, {} bytes of RAM, {} ms in all; ports {}",
        m["total_ms"], m["downtime_ms"], m["ram_transferred"], m["wall_ms"], m["ports"]
    );
    println!("migration over TLS: {took:?} for the command");
    let sent = m["ram_transferred"].as_u64().unwrap();
    assert!(
        pcap.len() as u64 > sent,
        "the capture ({} bytes) holds the stream ({sent} bytes)",
        pcap.len()
    );
    assert_eq!(
        occurrences(&pcap, marker_b.as_bytes()),
        0,
        "B's memory crossed the underlay in clear"
    );
    assert_eq!(m["host"], "m1");
    assert_eq!(m["old_pid"], old_pid);
    let new_pid = m["new_pid"].as_u64().unwrap().to_string();
    assert!(m["total_ms"].as_u64().unwrap() > 0);
    assert_eq!(m["ports"], serde_json::json!([["p2", "p2-m1"]]));
    assert!(
        m.get("copied").is_none(),
        "m1's cache had the image, and the verified copy of vnio: {}",
        m["copied"]
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", m["new_pid"])).unwrap();
    assert!(
        text(&cmdline).contains(&format!("{}/vmlinuz", image.display())),
        "the destination boots from m1's cache"
    );
    // The guest now runs in a QEMU in m1's namespace; the source is gone.
    assert!(alive(new_pid.parse().unwrap()));
    assert_eq!(
        netns_of(&format!("/proc/{new_pid}/ns/net")),
        netns_of("/run/netns/vnio-m1"),
        "the new QEMU lives in vnio-m1"
    );
    assert!(!alive(old_pid), "the source QEMU is gone");
    assert!(!b.path().exists(), "the source's state is gone");
    assert_eq!(ports(&control), ["p1", "vx"], "the source's port is gone");
    assert_eq!(ports(&m1_control), ["p2-m1", "vx"]);
    let remote = VmDir::new(&remote_root, &name);
    traffic.check(&a, &remote);
    run(&a, &format!("ping -c 3 -W 5 {b_ip}"));

    // m1's vnio sees it, and stops it leaving nothing.
    let root = remote_root.display().to_string();
    let list = on_m1(&["vm", "--state-dir", &root, "list", "--json"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    assert!(
        text(&list.stdout).contains(&new_pid),
        "{}",
        text(&list.stdout)
    );
    let stop = on_m1(&["vm", "--state-dir", &root, "stop", &name]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert!(!alive(new_pid.parse().unwrap()));
    assert!(!remote.path().exists(), "m1's state is gone");
    assert_eq!(ports(&m1_control), ["vx"], "m1's port is gone");
    assert_eq!(
        processes_with(&remote_root.display().to_string()),
        Vec::<String>::new(),
        "nothing of the VM runs on m1"
    );
    assert!(
        std::fs::read_dir(&remote_root).map_or(true, |mut d| d.next().is_none()),
        "no state directory left on m1"
    );

    // The control: A moves with --insecure, and its marker is in clear on
    // the underlay (so the capture would have shown B's).
    let a_name = a.name();
    let marker_a = format!("vnio-migration-marker-a-{}-{n}", std::process::id());
    plant_marker(&a, &marker_a);
    let capture = Capture::start(work.join("insecure.pcap"));
    let mut cmd = migrate_cmd(&kit.root.0, &a_name, &remote_root, &m1_control);
    cmd.arg("--insecure");
    let out = finished(cmd);
    let pcap = capture.stop();
    assert!(out.status.success(), "--insecure: {}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--insecure: the guest's memory crosses the network in plain text"),
        "says so: {}",
        text(&out.stderr)
    );
    let seen = occurrences(&pcap, marker_a.as_bytes());
    println!("--insecure: A's marker {seen} times in the capture");
    assert!(
        seen > 0,
        "A's memory was not seen in clear: the capture proves nothing"
    );
    let stop = on_m1(&["vm", "--state-dir", &root, "stop", &a_name]);
    assert!(stop.status.success(), "{}", text(&stop.stderr));
    assert_eq!(ports(&m1_control), ["vx"], "m1's port is gone");
    drop(guard);
}
