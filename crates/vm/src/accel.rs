//! KVM or TCG. `/dev/kvm` existing is not enough: some hosts expose a KVM
//! device that cannot run a stock guest kernel (a PVM host, nested setups
//! without the needed features). `--accel auto` therefore boots the image
//! once with `-accel kvm` and watches the serial console for the init
//! script's probe marker; the verdict is cached per host kernel, KVM
//! device, QEMU and guest kernel.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cmdline::probe_cmdline;
use crate::error::{Context, Error, Result};
use crate::image::Image;
use crate::init::PROBE_MARKER;
use crate::spec::AccelChoice;

/// The accelerator a VM runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualisation.
    Kvm,
    /// QEMU's binary translator (slow but runs anywhere).
    Tcg,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        })
    }
}

/// Which accelerator, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccelDecision {
    /// The accelerator.
    pub accel: Accel,
    /// Why (shown to the user and kept in the VM's state).
    pub why: String,
}

/// A cached probe verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Verdict {
    kvm_works: bool,
    detail: String,
}

/// How long a KVM boot to init may take (a stock kernel needs ~1 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The QEMU program used everywhere.
pub const QEMU: &str = "qemu-system-x86_64";

/// QEMU's version line, or why QEMU cannot run.
pub fn qemu_version() -> Result<String> {
    let out = Command::new(QEMU).arg("--version").output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Missing(format!("{QEMU} not found (Debian package qemu-system-x86)"))
        } else {
            Error::Io {
                what: format!("running {QEMU} --version"),
                source: e,
            }
        }
    })?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

/// Whether /dev/kvm can be opened for reading and writing, or why not.
fn kvm_device() -> std::result::Result<(), String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err("no /dev/kvm on this host".into())
        }
        Err(e) => Err(format!("cannot open /dev/kvm: {e}")),
    }
}

/// The probe cache key: host kernel, KVM module identity, QEMU, guest kernel.
fn probe_key(image: &Image, qemu: &str) -> String {
    let mut h = Sha256::new();
    let uts = nix::sys::utsname::uname().ok();
    if let Some(u) = uts {
        h.update(u.release().as_encoded_bytes());
        h.update(u.version().as_encoded_bytes());
    }
    for p in [
        "/sys/module/kvm/parameters",
        "/sys/module/kvm_intel",
        "/sys/module/kvm_amd",
    ] {
        h.update(p);
        h.update([u8::from(Path::new(p).exists())]);
    }
    h.update(qemu);
    h.update(&image.manifest.key);
    let full: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    full[..16].to_string()
}

fn cache_file(cache: &Path, key: &str) -> PathBuf {
    cache.join("accel").join(format!("{key}.json"))
}

/// Decides the accelerator. `auto` probes (or reads the cached verdict);
/// `refresh` ignores the cache.
pub fn decide(
    choice: AccelChoice,
    image: &Image,
    cache: &Path,
    refresh: bool,
) -> Result<AccelDecision> {
    match choice {
        AccelChoice::Tcg => Ok(AccelDecision {
            accel: Accel::Tcg,
            why: "requested (--accel tcg)".into(),
        }),
        AccelChoice::Kvm => match kvm_device() {
            Ok(()) => Ok(AccelDecision {
                accel: Accel::Kvm,
                why: "requested (--accel kvm)".into(),
            }),
            Err(why) => Err(Error::Missing(format!("--accel kvm: {why}"))),
        },
        AccelChoice::Auto => {
            if let Err(why) = kvm_device() {
                return Ok(AccelDecision {
                    accel: Accel::Tcg,
                    why,
                });
            }
            let qemu = qemu_version()?;
            let key = probe_key(image, &qemu);
            let file = cache_file(cache, &key);
            let cached = if refresh {
                None
            } else {
                std::fs::read_to_string(&file)
                    .ok()
                    .and_then(|t| serde_json::from_str::<Verdict>(&t).ok())
            };
            let (verdict, from_cache) = match cached {
                Some(v) => (v, true),
                None => {
                    let v = probe(image)?;
                    if let Some(parent) = file.parent() {
                        let _ = std::fs::create_dir_all(parent);
                    }
                    let _ = std::fs::write(
                        &file,
                        serde_json::to_string(&v).expect("verdict serialises"),
                    );
                    (v, false)
                }
            };
            let when = if from_cache { " (cached probe)" } else { "" };
            Ok(if verdict.kvm_works {
                AccelDecision {
                    accel: Accel::Kvm,
                    why: format!(
                        "KVM booted a stock guest kernel to init{when}: {}",
                        verdict.detail
                    ),
                }
            } else {
                AccelDecision {
                    accel: Accel::Tcg,
                    why: format!(
                        "/dev/kvm cannot run a stock guest{when}: {}",
                        verdict.detail
                    ),
                }
            })
        }
    }
}

/// Boots the image under KVM until init prints its probe marker.
fn probe(image: &Image) -> Result<Verdict> {
    let dir = std::env::temp_dir().join(format!("vnio-kvm-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
    let serial = dir.join("serial.log");
    let started = Instant::now();
    let child = Command::new(QEMU)
        .args([
            "-machine",
            "q35,accel=kvm",
            "-cpu",
            "host",
            "-m",
            "256M",
            "-smp",
            "1",
        ])
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", serial.display()))
        .arg("-kernel")
        .arg(&image.kernel)
        .arg("-initrd")
        .arg(&image.initrd)
        .args(["-append", &probe_cmdline()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Error::Io {
                what: format!("starting the KVM probe ({QEMU})"),
                source: e,
            });
        }
    };
    let verdict = loop {
        let console = std::fs::read_to_string(&serial).unwrap_or_default();
        if console.contains(PROBE_MARKER) {
            break Verdict {
                kvm_works: true,
                detail: format!("init reached in {:.1} s", started.elapsed().as_secs_f64()),
            };
        }
        if let Ok(Some(status)) = child.try_wait() {
            // It may have printed the marker and powered off since the read above.
            if std::fs::read_to_string(&serial)
                .unwrap_or_default()
                .contains(PROBE_MARKER)
            {
                continue;
            }
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            let first = err
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no error output")
                .to_string();
            break Verdict {
                kvm_works: false,
                detail: format!("the probe guest's QEMU exited ({status}) before init: {first}"),
            };
        }
        if started.elapsed() > PROBE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let last = console
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("nothing on the console")
                .to_string();
            break Verdict {
                kvm_works: false,
                detail: format!(
                    "the probe guest did not reach init within {} s (last console line: {last})",
                    PROBE_TIMEOUT.as_secs()
                ),
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(verdict)
}
