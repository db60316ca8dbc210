//! What a containerd and its pods may leave on the host, found and
//! cleared: sandbox mounts under its directory, its shims, the processes
//! and cgroups under the pods' cgroup parent, their namespaces, runc's
//! state and libcni's cached results of its sandboxes. The test
//! asserts on them; dropping [`Containerd`] clears them however it ended.

use super::Containerd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// runc's state directory for the CRI's namespace (the shim's default).
const RUNC_ROOT: &str = "/run/containerd/runc/k8s.io";

/// Where libcni caches each attachment's result (`<network>-<sandbox>-<ifname>`).
const LIBCNI_CACHE: &str = "/var/lib/cni/results";

impl Containerd {
    /// Mount points under the directory (the sandboxes' rootfs and shm).
    pub fn mounts(&self) -> Vec<String> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let under = format!("{}/", self.dir.display());
        info.lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&under))
            .map(str::to_string)
            .collect()
    }

    /// This containerd's shims (the processes naming its socket).
    pub fn shims(&self) -> Vec<i32> {
        let sock = self.dir.join("c.sock").display().to_string();
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            let named = args.contains(&sock.as_bytes());
            if named && args[0].ends_with(b"containerd-shim-runc-v2") {
                out.push(pid);
            }
        }
        out
    }

    /// The pods' cgroup directories, deepest first, in every hierarchy.
    fn cgroups(&self) -> Vec<PathBuf> {
        let mut roots = vec![PathBuf::from("/sys/fs/cgroup")];
        for e in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            roots.push(e.path());
        }
        let mut out = Vec::new();
        let mut stack: Vec<PathBuf> = roots
            .iter()
            .map(|r| r.join(self.cgroup.trim_start_matches('/')))
            .filter(|p| p.is_dir())
            .collect();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
            out.push(d);
        }
        out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        out
    }

    /// Processes in the pods' cgroups.
    pub fn pod_processes(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .cgroups()
            .iter()
            .flat_map(|d| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| l.parse().ok())
                    .collect::<Vec<i32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

fn kill_all(pids: &[i32]) {
    for &p in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("containerd's log, its end:\n{}", self.log_tail());
        }
        if self.child.is_some() {
            // As a kubelet would: every sandbox stopped (CNI DEL) and removed.
            let _ = self.crictl(&["rmp", "--all", "--force"]);
        }
        self.stop();
        // Whatever outlived containerd: pods' processes, shims.
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let left: Vec<i32> = self
                .pod_processes()
                .into_iter()
                .chain(self.shims())
                .collect();
            if left.is_empty() || Instant::now() > until {
                break;
            }
            kill_all(&left);
            std::thread::sleep(Duration::from_millis(50));
        }
        for m in self.mounts().iter().rev() {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
        // A shim killed leaves its socket; its bundle says which.
        let bundles = self.dir.join("state/io.containerd.runtime.v2.task/k8s.io");
        for e in std::fs::read_dir(bundles).into_iter().flatten().flatten() {
            let addr = std::fs::read_to_string(e.path().join("address")).unwrap_or_default();
            if let Some(sock) = addr.trim().strip_prefix("unix://") {
                if sock.starts_with("/run/containerd/s/") {
                    let _ = std::fs::remove_file(sock);
                }
            }
        }
        for p in &self.made {
            if Path::new(&p.netns).exists() {
                let _ = Command::new("ip")
                    .args(["netns", "del", p.netns_name()])
                    .stderr(Stdio::null())
                    .status();
            }
            // runc's state and libcni's cached results, had containerd no chance to remove them.
            let _ = std::fs::remove_dir_all(Path::new(RUNC_ROOT).join(&p.id));
            let infix = format!("-{}-", p.id);
            for e in std::fs::read_dir(LIBCNI_CACHE)
                .into_iter()
                .flatten()
                .flatten()
            {
                if e.file_name().to_string_lossy().contains(&infix) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        for d in self.cgroups() {
            let _ = std::fs::remove_dir(d);
        }
        if !self.run_dir_existed {
            // Made by this containerd's shims and runc; only empty directories go.
            for d in ["runc/k8s.io", "runc", "s", ""] {
                let _ = std::fs::remove_dir(Path::new("/run/containerd").join(d));
            }
        }
    }
}
