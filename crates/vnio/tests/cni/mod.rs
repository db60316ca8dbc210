//! What the CNI tests share: a live `vnio switch`, a CNI bin directory
//! with `vnio` installed as `vnio-cni` beside the reference plugins,
//! network configurations, namespaces made with `ip netns`, and
//! containernetworking's `cnitool` to drive it all as a runtime does.

#![allow(dead_code)]

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use vnio_switch::control::{Client, Request};

pub const VNIO: &str = env!("CARGO_BIN_EXE_vnio");

/// Where the reference plugins are (Debian's containernetworking-plugins, or upstream's).
const PLUGIN_DIRS: [&str; 2] = ["/usr/lib/cni", "/opt/cni/bin"];

/// cnitool: $VNIO_CNITOOL, else on PATH.
pub fn cnitool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VNIO_CNITOOL") {
        return Some(PathBuf::from(p));
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("cnitool"))
            .find(|p| p.is_file())
    })
}

fn plugin_dir() -> Option<&'static str> {
    PLUGIN_DIRS
        .into_iter()
        .find(|d| Path::new(d).join("host-local").is_file())
}

/// The tools, or why the test skips.
pub fn ready() -> Option<(PathBuf, &'static str)> {
    if !is_root() {
        return None;
    }
    let Some(tool) = cnitool() else {
        println!("skip: no cnitool (scripts/setup --e2e builds it)");
        return None;
    };
    Some((tool, plugins()?))
}

/// Root, or a skip line.
fn is_root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        println!("skip: needs root (network namespaces, taps)");
    }
    root
}

/// The reference plugins' directory, or a skip line.
fn plugins() -> Option<&'static str> {
    let dir = plugin_dir();
    if dir.is_none() {
        println!("skip: no host-local IPAM plugin (Debian's containernetworking-plugins)");
    }
    dir
}

/// Kills the switch when dropped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One test's world: its directory (switch config, control socket, the
/// plugin's records, IPAM leases, socket directories), the switch, and
/// the namespaces it made.
pub struct World {
    pub dir: PathBuf,
    pub tool: PathBuf,
    pub cni_path: String,
    pub switch: Option<Reaped>,
    pub netns: Vec<String>,
    /// The reference plugins' directory (host-local, loopback).
    pub plugins: &'static str,
    tag: String,
}

impl World {
    /// A world named `tag`, with networks `<tag>-tap` (subnet 10.`net`.0.0/16)
    /// and `<tag>-vu` (vhost-user, 10.`net+1`.0.0/16).
    pub fn new(tag: &str, net: u8) -> Option<Self> {
        let (tool, plugins) = ready()?;
        Some(Self::make(tag, net, tool, plugins))
    }

    /// As [`World::new`] for a runtime that runs the plugins itself:
    /// no cnitool needed (`tool` is empty).
    pub fn without_cnitool(tag: &str, net: u8) -> Option<Self> {
        if !is_root() {
            return None;
        }
        Some(Self::make(tag, net, PathBuf::new(), plugins()?))
    }

    fn make(tag: &str, net: u8, tool: PathBuf, plugins: &'static str) -> Self {
        let dir = std::env::temp_dir().join(format!("vnio-cni-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["bin", "net.d", "cache"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::os::unix::fs::symlink(VNIO, dir.join("bin/vnio-cni")).unwrap();
        let d = dir.display();
        std::fs::write(
            dir.join("switch.toml"),
            format!("[switch]\ncontrol = \"{d}/ctl.sock\"\n"),
        )
        .unwrap();
        let ipam = |n: u8| {
            format!(
                r#"{{"type":"host-local","ranges":[[{{"subnet":"10.{n}.0.0/16"}}]],"dataDir":"{d}/ipam","routes":[{{"dst":"0.0.0.0/0"}}]}}"#
            )
        };
        std::fs::write(
            dir.join(format!("net.d/10-{tag}-tap.conflist")),
            format!(
                r#"{{"cniVersion":"1.1.0","name":"{tag}-tap","plugins":[{{"type":"vnio-cni","control":"{d}/ctl.sock","kind":"tap","mtu":1400,"dataDir":"{d}/data","ipam":{}}}]}}"#,
                ipam(net)
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("net.d/20-{tag}-vu.conflist")),
            format!(
                r#"{{"cniVersion":"1.1.0","name":"{tag}-vu","plugins":[{{"type":"vnio-cni","control":"{d}/ctl.sock","kind":"vhost-user","mode":"server","queues":1,"socketDir":"{d}/pods","dataDir":"{d}/data","capabilities":{{"CNIDeviceInfoFile":true}},"ipam":{}}}]}}"#,
                ipam(net + 1)
            ),
        )
        .unwrap();
        let mut w = Self {
            cni_path: format!("{d}/bin:{plugins}"),
            dir,
            tool,
            switch: None,
            netns: Vec::new(),
            plugins,
            tag: tag.to_string(),
        };
        w.start_switch();
        w
    }

    pub fn control(&self) -> PathBuf {
        self.dir.join("ctl.sock")
    }

    /// Starts the switch (again) and waits until it answers.
    pub fn start_switch(&mut self) {
        let log = std::fs::File::create(self.dir.join("switch.log")).unwrap();
        self.switch = Some(Reaped(
            Command::new(VNIO)
                .args(["switch", "--config"])
                .arg(self.dir.join("switch.toml"))
                .stderr(log)
                .spawn()
                .unwrap(),
        ));
        let until = Instant::now() + Duration::from_secs(10);
        while self.ports_or_none().is_none() {
            assert!(Instant::now() < until, "the switch does not answer");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the switch.
    pub fn kill_switch(&mut self) {
        if let Some(mut s) = self.switch.take() {
            s.0.kill().unwrap();
            s.0.wait().unwrap();
        }
    }

    fn ports_or_none(&self) -> Option<Vec<serde_json::Value>> {
        let mut c = Client::connect(&self.control()).ok()?;
        let l = c.request(&Request::PortList).ok()?;
        l.as_array().cloned()
    }

    /// The switch's ports.
    pub fn ports(&self) -> Vec<serde_json::Value> {
        self.ports_or_none().expect("the switch answers")
    }

    /// A namespace `<tag>-<i>`, made with `ip netns add`; its path.
    pub fn netns(&mut self, i: usize) -> String {
        let name = format!("vc{}-{}-{i}", std::process::id() % 100000, self.tag);
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap()
            .success();
        assert!(ok, "ip netns add {name}");
        self.netns.push(name.clone());
        format!("/run/netns/{name}")
    }

    /// cnitool `cmd` on network `net` for namespace `netns`, with `cap_args` as CAP_ARGS.
    pub fn cnitool(&self, cmd: &str, net: &str, netns: &str, cap_args: Option<&str>) -> Output {
        let mut c = Command::new(&self.tool);
        c.args([cmd, net, netns])
            .env("NETCONFPATH", self.dir.join("net.d"))
            .env("CNI_PATH", &self.cni_path)
            .env("CNI_CACHE_DIR", self.dir.join("cache"))
            .stdin(Stdio::null());
        if let Some(a) = cap_args {
            c.env("CAP_ARGS", a);
        }
        c.output().unwrap()
    }

    /// As [`World::cnitool`], asserting success; stdout parsed when it has JSON.
    pub fn ok(
        &self,
        cmd: &str,
        net: &str,
        netns: &str,
        cap_args: Option<&str>,
    ) -> serde_json::Value {
        let o = self.cnitool(cmd, net, netns, cap_args);
        assert!(
            o.status.success(),
            "cnitool {cmd} {net} {netns}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// The network's name for `kind` ("tap" or "vu").
    pub fn net(&self, kind: &str) -> String {
        format!("{}-{kind}", self.tag)
    }

    /// Files left under `sub` of the world's directory (records, leases, sockets).
    pub fn files(&self, sub: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.dir.join(sub)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                } else {
                    out.push(e.path().display().to_string());
                }
            }
        }
        out
    }

    /// The plugin's attachment records.
    pub fn records(&self) -> Vec<String> {
        self.files("data")
            .into_iter()
            .filter(|f| f.ends_with(".json"))
            .collect()
    }

    /// IPAM leases held (host-local's files named by address).
    pub fn leases(&self) -> Vec<String> {
        self.files("ipam")
            .into_iter()
            .filter(|f| {
                f.rsplit('/')
                    .next()
                    .is_some_and(|n| n.parse::<std::net::IpAddr>().is_ok())
            })
            .collect()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.kill_switch();
        for n in &self.netns {
            let _ = Command::new("ip")
                .args(["netns", "del", n])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `f` on a thread inside the namespace at `netns`; sockets it opens stay there.
pub fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> T + Send) -> T {
    let file = std::fs::File::open(netns).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
        .join()
        .unwrap()
    })
}

/// The address (without prefix) of an ADD result's first IP.
pub fn ip_of(result: &serde_json::Value) -> std::net::Ipv4Addr {
    let a = result["ips"][0]["address"].as_str().expect("an address");
    a.split('/').next().unwrap().parse().unwrap()
}

/// ICMP echo from inside `netns` to `target` with `vnio ping` for `secs`:
/// (sent, lost).
pub fn ping(netns: &str, target: std::net::Ipv4Addr, dur: &str) -> (u64, u64) {
    let name = netns.rsplit('/').next().unwrap();
    let o = Command::new("ip")
        .args(["netns", "exec", name, VNIO, "ping", "-t"])
        .arg(target.to_string())
        .args(["-i", "10ms", "-d", dur, "--warmup", "50ms"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("all "))
        .unwrap_or_else(|| {
            panic!(
                "no result row: {text}{}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
    let cols: Vec<&str> = row.split_whitespace().collect();
    let n = |s: &str| s.parse::<f64>().unwrap_or(0.0) as u64;
    (n(cols[1]), n(cols[cols.len() - 1]))
}
