//! A private containerd with its CRI plugin, driven with crictl as a
//! kubelet drives it: its own root, state, sockets and configuration under
//! the test's directory (the host's /etc/containerd and /etc/cni are not
//! read), the pods' cgroups under a parent of their own. Dropping it
//! removes the pods, stops containerd and clears what may be left however
//! the test ended: pod and shim processes, mounts, namespaces, cgroups.

#![allow(dead_code)]

pub mod image;
mod leftovers;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Whether `tool` is on PATH.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()))
}

/// containerd, ctr, crictl, runc and a C compiler, or a skip line.
pub fn tools_ready() -> bool {
    let missing: Vec<&str> = ["containerd", "ctr", "crictl", "runc", "cc"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect();
    if !missing.is_empty() {
        println!(
            "skip: no {} (scripts/setup --e2e installs containerd, runc and crictl)",
            missing.join(", ")
        );
    }
    missing.is_empty()
}

/// A pod sandbox made through the CRI.
#[derive(Debug, Clone)]
pub struct Pod {
    /// The sandbox's ID (the plugin's CNI_CONTAINERID).
    pub id: String,
    /// Its network namespace (a path under /var/run/netns).
    pub netns: String,
    /// The address the CRI reports for it.
    pub ip: Ipv4Addr,
}

impl Pod {
    /// The namespace's name, for `ip -n` and `ip netns exec`.
    pub fn netns_name(&self) -> &str {
        self.netns.rsplit('/').next().unwrap()
    }
}

/// The running containerd.
pub struct Containerd {
    /// Its root, state, sockets, configuration and log.
    pub dir: PathBuf,
    child: Option<Child>,
    /// The pods' cgroup parent.
    cgroup: String,
    /// The sandboxes made, whose leftovers go when containerd could not remove them.
    made: Vec<Pod>,
    /// /run/containerd was there before (a host's containerd): left alone.
    run_dir_existed: bool,
}

impl Containerd {
    /// Starts containerd under `dir` with the CNI plugins of `bin_dir`, the
    /// network configurations of `conf_dir` and the sandbox image
    /// [`image::PAUSE_IMAGE`]; returns once the CRI says the network is ready.
    pub fn start(dir: &Path, bin_dir: &Path, conf_dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let d = dir.display();
        let snapshotter = snapshotter(dir);
        std::fs::write(
            dir.join("config.toml"),
            format!(
                r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{d}/c.sock"
[ttrpc]
  address = "{d}/c.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{image}"
  disable_apparmor = true
  enable_selinux = false
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
"#,
                image = image::PAUSE_IMAGE,
                bin = bin_dir.display(),
                conf = conf_dir.display(),
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("crictl.yaml"),
            format!("runtime-endpoint: unix://{d}/c.sock\nimage-endpoint: unix://{d}/c.sock\ntimeout: 60\n"),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let run_dir_existed = Path::new("/run/containerd").exists();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut c = Self {
            dir: dir.to_path_buf(),
            child: Some(child),
            cgroup: format!("/vnio-cri-{}", std::process::id()),
            made: Vec::new(),
            run_dir_existed,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while !c.network_ready() {
            assert!(
                Instant::now() < until,
                "containerd's CRI is not ready: {}",
                c.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn network_ready(&mut self) -> bool {
        if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
            panic!("containerd exited ({st}): {}", self.log_tail());
        }
        let o = self.crictl(&["info"]);
        let info: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        info["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "NetworkReady" && c["status"] == true)
        })
    }

    /// The end of containerd's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `crictl args`.
    pub fn crictl(&self, args: &[&str]) -> Output {
        Command::new("crictl")
            .arg("--config")
            .arg(self.dir.join("crictl.yaml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `crictl args`, asserting success: its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.crictl(args);
        assert!(
            o.status.success(),
            "crictl {args:?}: {}{}\ncontainerd: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
            self.log_tail()
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// Imports an image archive into the CRI's namespace, unpacked for its snapshotter.
    pub fn import(&self, archive: &Path) {
        let o = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("c.sock"))
            .args(["--namespace", "k8s.io", "images", "import", "--snapshotter"])
            .arg(snapshotter(&self.dir))
            .arg(archive)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ctr images import: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// `crictl runp` of a pod `name`, then `crictl inspectp` for its
    /// namespace and address.
    pub fn run_pod(&mut self, name: &str) -> Pod {
        let spec = serde_json::json!({
            "metadata": { "name": name, "namespace": "vnio-test", "uid": format!("uid-{name}"), "attempt": 0 },
            "hostname": name,
            "linux": { "cgroup_parent": self.cgroup },
        });
        let path = self.dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let id = self.ok(&["runp", path.to_str().unwrap()]);
        let info: serde_json::Value =
            serde_json::from_str(&self.ok(&["inspectp", &id])).expect("inspectp's JSON");
        let netns = info["info"]["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["type"] == "network"))
            .and_then(|n| n["path"].as_str())
            .unwrap_or_else(|| panic!("pod {name} has no network namespace: {info}"))
            .to_string();
        let ip = info["status"]["network"]["ip"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("pod {name} has no address: {info}"));
        let pod = Pod { id, netns, ip };
        self.made.push(pod.clone());
        pod
    }

    /// The sandboxes the CRI lists.
    pub fn pods(&self) -> Vec<String> {
        self.ok(&["pods", "-q"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Stops containerd with SIGTERM (SIGKILL after 10 s); whether it exited
    /// by itself, cleanly.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(st)) => return st.success(),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }
}

/// overlayfs, unless the directory is itself on overlayfs (a container's
/// root), where the upper directory cannot be: then native (copies).
fn snapshotter(dir: &Path) -> &'static str {
    let o = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir)
        .output();
    let fs = o
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if fs == "overlayfs" {
        "native"
    } else {
        "overlayfs"
    }
}
