//! Minimal Linux guests for end-to-end tests: the host's Debian kernel, an
//! initramfs written here (busybox, the virtio-net modules, an init script),
//! QEMU with shared memfd memory and a vhost-user NIC. Everything is found
//! on the host; `Guest::available()` says why a test must skip.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A newc cpio archive, written by hand (no cpio binary needed).
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            ino: 1,
        }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.ino += 1;
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
        self.out.extend_from_slice(data);
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, 0o100000 | mode, data);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

/// What the host offers for guests.
pub struct GuestKit {
    pub kernel: PathBuf,
    pub modules: Vec<PathBuf>,
    pub busybox: PathBuf,
}

fn newest(dir: &str, prefix: &str) -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    v.sort();
    v.pop()
}

impl GuestKit {
    /// The kit, or why there is none.
    pub fn find() -> Result<Self, String> {
        if Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .is_err()
        {
            return Err("qemu-system-x86_64 not installed (Debian qemu-system-x86)".into());
        }
        let kernel =
            newest("/boot", "vmlinuz-").ok_or("no /boot/vmlinuz-* (Debian linux-image-amd64)")?;
        let version = kernel
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches("vmlinuz-")
            .to_string();
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("no busybox (Debian busybox-static)")?;
        let moddir = PathBuf::from(format!("/lib/modules/{version}"));
        let dep = std::fs::read_to_string(moddir.join("modules.dep"))
            .map_err(|e| format!("modules.dep: {e}"))?;
        // virtio_net and what it needs, dependencies first.
        let mut order: Vec<String> = Vec::new();
        fn visit(m: &str, dep: &str, order: &mut Vec<String>) {
            if order.iter().any(|x| x == m) {
                return;
            }
            if let Some(line) = dep
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k == m))
            {
                for d in line.split(':').nth(1).unwrap_or("").split_whitespace() {
                    visit(d, dep, order);
                }
                order.push(m.to_string());
            }
        }
        for wanted in ["virtio_net", "virtio_pci"] {
            if let Some(line) = dep.lines().find(|l| {
                l.split(':')
                    .next()
                    .is_some_and(|k| k.contains(&format!("/{wanted}.ko")))
            }) {
                let key = line.split(':').next().unwrap().to_string();
                visit(&key, &dep, &mut order);
            }
        }
        let modules = order.iter().map(|m| moddir.join(m)).collect();
        Ok(Self {
            kernel,
            modules,
            busybox,
        })
    }

    /// Writes an initramfs whose init runs `script` after networking is up.
    pub fn initramfs(&self, path: &Path, script: &str) {
        let mut c = Cpio::new();
        for d in ["bin", "sbin", "proc", "sys", "dev", "tmp", "lib", "etc"] {
            c.dir(d);
        }
        c.file("bin/busybox", 0o755, &std::fs::read(&self.busybox).unwrap());
        let mut init = String::from(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nmount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n",
        );
        for (i, m) in self.modules.iter().enumerate() {
            let name = m.file_name().unwrap().to_str().unwrap();
            let data = std::fs::read(m).unwrap();
            let (file, data) = if name.ends_with(".xz") || name.ends_with(".zst") {
                // Decompress on the host: busybox's insmod wants plain modules.
                let tool = if name.ends_with(".xz") { "xz" } else { "zstd" };
                let out = Command::new(tool).args(["-dc"]).arg(m).output().unwrap();
                (format!("lib/m{i}.ko"), out.stdout)
            } else {
                (format!("lib/m{i}.ko"), data)
            };
            c.file(&file, 0o644, &data);
            init.push_str(&format!("insmod /{file} 2>/dev/null\n"));
        }
        init.push_str("ip link set lo up\nip link set eth0 up\n");
        init.push_str(script);
        init.push_str("\necho VNIO-DONE\npoweroff -f\n");
        c.file("init", 0o755, init.as_bytes());
        File::create(path).unwrap().write_all(&c.finish()).unwrap();
    }
}

/// A running guest; killed on drop.
pub struct Guest {
    child: Child,
    pub console: PathBuf,
}

impl Guest {
    pub fn start(kit: &GuestKit, initrd: &Path, sock: &Path, mac: &str, console: &Path) -> Self {
        Self::start_with(kit, initrd, sock, mac, console, "")
    }

    /// Like [`Guest::start`], with extra virtio-net-pci properties
    /// (`device_opts`, e.g. ",guest_tso4=off").
    pub fn start_with(
        kit: &GuestKit,
        initrd: &Path,
        sock: &Path,
        mac: &str,
        console: &Path,
        device_opts: &str,
    ) -> Self {
        // `timeout` bounds QEMU's life even if the test process dies without killing it.
        let child = Command::new("timeout")
            .args(["300", "qemu-system-x86_64"])
            .args([
                "-machine",
                "q35,accel=tcg",
                "-cpu",
                "max",
                "-m",
                "256",
                "-smp",
                "1",
                "-nodefaults",
                "-display",
                "none",
                "-no-reboot",
            ])
            .args(["-serial", &format!("file:{}", console.display())])
            .arg("-kernel")
            .arg(&kit.kernel)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", "console=ttyS0 quiet panic=-1"])
            .args([
                "-object",
                "memory-backend-memfd,id=mem,size=256M,share=on",
                "-numa",
                "node,memdev=mem",
            ])
            .args(["-chardev", &format!("socket,id=c0,path={}", sock.display())])
            .args(["-netdev", "vhost-user,id=n0,chardev=c0"])
            .args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={mac},vectors=0{device_opts}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self {
            child,
            console: console.to_owned(),
        }
    }

    /// Waits until the console shows `marker`; returns the console text.
    pub fn wait_for(&mut self, marker: &str, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let text = std::fs::read_to_string(&self.console).unwrap_or_default();
            if text.contains(marker) {
                return Ok(text);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!(
                    "qemu exited ({status}) before {marker:?}: {err}\nconsole:\n{text}"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no {marker:?} within {timeout:?}; console:\n{text}"
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // SIGTERM to `timeout`, which passes it on to QEMU (SIGKILL would orphan QEMU).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
