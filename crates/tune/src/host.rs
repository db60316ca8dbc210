//! The machine as `vnio-tune` sees it: every file read and write goes through
//! [`Host`], which maps `/proc/...` to `<root>/proc/...`, so tests run on fake
//! trees; everything that is not a file (ioctls, cpuid, the clock) goes
//! through a [`Probe`], which tests replace with a [`FixedProbe`].

use std::fmt;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use crate::error::TuneError;
use crate::sys::{Coalesce, KvmCpuid, Offloads};

/// Why a file could not give a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnreadKind {
    /// The file does not exist here.
    Missing,
    /// Permission denied (not root, or a locked-down kernel).
    Denied,
    /// The content is not what the kernel writes there.
    Garbage(String),
    /// Any other I/O error.
    Io(String),
}

/// A file that could not give a value, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// Logical path (as on the host).
    pub path: String,
    /// Why.
    pub kind: UnreadKind,
}

impl Unread {
    /// A garbage reading of `path`.
    pub fn garbage(path: &str, what: impl Into<String>) -> Self {
        Unread {
            path: path.to_string(),
            kind: UnreadKind::Garbage(what.into()),
        }
    }
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            UnreadKind::Missing => write!(f, "{}: absent", self.path),
            UnreadKind::Denied => write!(f, "{}: permission denied (needs root)", self.path),
            UnreadKind::Garbage(what) => write!(f, "{}: {}", self.path, what),
            UnreadKind::Io(e) => write!(f, "{}: {}", self.path, e),
        }
    }
}

/// Shows at most 40 characters of a garbage value.
pub fn excerpt(s: &str) -> String {
    let t: String = s.chars().take(40).collect();
    if t.len() < s.len() {
        format!("{t:?}...")
    } else {
        format!("{t:?}")
    }
}

/// What a [`Host`] asks the system beyond files.
pub trait Probe: Send + Sync {
    /// Effective user id.
    fn euid(&self) -> u32;
    /// NIC interrupt coalescing (ethtool ioctl).
    fn coalesce(&self, ifname: &str) -> io::Result<Coalesce>;
    /// NIC receive offloads (ethtool ioctl).
    fn offloads(&self, ifname: &str) -> io::Result<Offloads>;
    /// Legacy iptables entries and built-in hooks of one table.
    fn iptables_entries(&self, ipv6: bool, table: &str) -> io::Result<(u32, u32)>;
    /// Number of nftables rules (only asked when nf_tables is loaded, so
    /// that asking does not load it).
    fn nft_rules(&self) -> io::Result<u64>;
    /// KVM CPUID leaves, if a hypervisor is present.
    fn kvm_cpuid(&self) -> Option<KvmCpuid>;
    /// Median cost of one `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
    fn clock_read_ns(&self) -> f64;
    /// Waits between two samples of a counter (no wait on a fake machine).
    fn pause(&self, d: std::time::Duration);
}

/// The real system.
#[derive(Debug, Default, Clone, Copy)]
pub struct LiveProbe;

impl Probe for LiveProbe {
    fn euid(&self) -> u32 {
        crate::sys::euid()
    }
    fn coalesce(&self, ifname: &str) -> io::Result<Coalesce> {
        crate::sys::ethtool_coalesce(ifname)
    }
    fn offloads(&self, ifname: &str) -> io::Result<Offloads> {
        crate::sys::ethtool_offloads(ifname)
    }
    fn iptables_entries(&self, ipv6: bool, table: &str) -> io::Result<(u32, u32)> {
        crate::sys::iptables_entries(ipv6, table)
    }
    fn nft_rules(&self) -> io::Result<u64> {
        let nft = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
            .iter()
            .map(Path::new)
            .find(|p| p.exists())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "nft is not installed"))?;
        let out = std::process::Command::new(nft)
            .args(["-j", "list", "ruleset"])
            .output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(io::Error::other(format!(
                "nft: {}",
                err.lines().next().unwrap_or("failed")
            )));
        }
        count_nft_rules(&out.stdout)
    }
    fn kvm_cpuid(&self) -> Option<KvmCpuid> {
        crate::sys::kvm_cpuid()
    }
    fn clock_read_ns(&self) -> f64 {
        crate::measure::clock_cost(50, 2_000).median_ns
    }
    fn pause(&self, d: std::time::Duration) {
        std::thread::sleep(d);
    }
}

/// A probe with fixed answers, for fake roots: `None` answers
/// "not supported".
#[derive(Debug, Clone, Default)]
pub struct FixedProbe {
    /// Effective user id to report.
    pub euid: u32,
    /// Coalescing of every interface.
    pub coalesce: Option<Coalesce>,
    /// Offloads of every interface.
    pub offloads: Option<Offloads>,
    /// Entries and hooks of every iptables table.
    pub iptables: Option<(u32, u32)>,
    /// nftables rule count.
    pub nft_rules: Option<u64>,
    /// KVM CPUID answer.
    pub kvm: Option<KvmCpuid>,
    /// Clock read cost.
    pub clock_ns: f64,
}

fn unsupported() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "not probed under a fake root")
}

impl Probe for FixedProbe {
    fn euid(&self) -> u32 {
        self.euid
    }
    fn coalesce(&self, _ifname: &str) -> io::Result<Coalesce> {
        self.coalesce.ok_or_else(unsupported)
    }
    fn offloads(&self, _ifname: &str) -> io::Result<Offloads> {
        self.offloads.ok_or_else(unsupported)
    }
    fn iptables_entries(&self, _ipv6: bool, _table: &str) -> io::Result<(u32, u32)> {
        self.iptables.ok_or_else(unsupported)
    }
    fn nft_rules(&self) -> io::Result<u64> {
        self.nft_rules.ok_or_else(unsupported)
    }
    fn kvm_cpuid(&self) -> Option<KvmCpuid> {
        self.kvm.clone()
    }
    fn clock_read_ns(&self) -> f64 {
        self.clock_ns
    }
    fn pause(&self, _d: std::time::Duration) {}
}

/// Counts the `rule` objects of `nft -j list ruleset` output.
pub fn count_nft_rules(json: &[u8]) -> io::Result<u64> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| bad(format!("nft output: {e}")))?;
    let items = v
        .get("nftables")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| bad("nft output has no nftables array".into()))?;
    Ok(items.iter().filter(|i| i.get("rule").is_some()).count() as u64)
}

/// The machine: a root directory for files and a probe for the rest.
#[derive(Clone)]
pub struct Host {
    root: PathBuf,
    probe: Arc<dyn Probe>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// This machine, as it is.
    pub fn live() -> Self {
        Host {
            root: PathBuf::from("/"),
            probe: Arc::new(LiveProbe),
        }
    }

    /// Files under `root`; the live probe if `root` is `/`, else a probe
    /// that answers "not probed" (and the caller's euid).
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        if root == Path::new("/") {
            return Host::live();
        }
        let probe = FixedProbe {
            euid: crate::sys::euid(),
            clock_ns: f64::NAN,
            ..FixedProbe::default()
        };
        Host {
            root,
            probe: Arc::new(probe),
        }
    }

    /// Files under `root`, system queries through `probe`.
    pub fn new(root: impl Into<PathBuf>, probe: Arc<dyn Probe>) -> Self {
        Host {
            root: root.into(),
            probe,
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when this is the live machine (root `/`).
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The probe.
    pub fn probe(&self) -> &dyn Probe {
        self.probe.as_ref()
    }

    /// The real path of a logical one (`/proc/x` becomes `<root>/proc/x`).
    pub fn path(&self, logical: &str) -> PathBuf {
        self.root.join(logical.trim_start_matches('/'))
    }

    fn unread(logical: &str, e: &io::Error) -> Unread {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => UnreadKind::Missing,
            io::ErrorKind::PermissionDenied => UnreadKind::Denied,
            io::ErrorKind::InvalidData => UnreadKind::Garbage("not UTF-8 text".into()),
            _ => UnreadKind::Io(e.to_string()),
        };
        Unread {
            path: logical.to_string(),
            kind,
        }
    }

    /// Whether the file or directory exists.
    pub fn exists(&self, logical: &str) -> bool {
        self.path(logical).exists()
    }

    /// Raw bytes of a file.
    pub fn read_bytes(&self, logical: &str) -> Result<Vec<u8>, Unread> {
        std::fs::read(self.path(logical)).map_err(|e| Self::unread(logical, &e))
    }

    /// Exact text of a file (for journaling).
    pub fn read_raw(&self, logical: &str) -> Result<String, Unread> {
        std::fs::read_to_string(self.path(logical)).map_err(|e| Self::unread(logical, &e))
    }

    /// Text of a file, trimmed.
    pub fn read(&self, logical: &str) -> Result<String, Unread> {
        self.read_raw(logical).map(|s| s.trim().to_string())
    }

    /// Text of a file parsed as `T`; garbage says what was found.
    pub fn parse<T: FromStr>(&self, logical: &str) -> Result<T, Unread> {
        let s = self.read(logical)?;
        s.parse::<T>().map_err(|_| {
            Unread::garbage(
                logical,
                format!("expected {}, found {}", type_word::<T>(), excerpt(&s)),
            )
        })
    }

    /// Names in a directory, sorted.
    pub fn list(&self, logical: &str) -> Result<Vec<String>, Unread> {
        let rd = std::fs::read_dir(self.path(logical)).map_err(|e| Self::unread(logical, &e))?;
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort_by(|a, b| natural_cmp(a, b));
        Ok(names)
    }

    /// Target of a symbolic link.
    pub fn read_link(&self, logical: &str) -> Result<String, Unread> {
        std::fs::read_link(self.path(logical))
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| Self::unread(logical, &e))
    }

    /// Whether a knob file can be written here: `Err` says why not when no
    /// one could (a 0444 parameter, a read-only mount); a file that only
    /// root may write counts as writable (apply checks for root itself).
    pub fn writable(&self, logical: &str) -> Result<(), String> {
        let path = self.path(logical);
        let meta = std::fs::metadata(&path).map_err(|e| e.to_string())?;
        if meta.permissions().mode() & 0o222 == 0 {
            return Err("a read-only parameter".into());
        }
        match crate::sys::access_write(&path) {
            Err(e) if e.raw_os_error() == Some(libc::EROFS) => Err("on a read-only mount".into()),
            _ => Ok(()),
        }
    }

    /// Writes a value to a knob file (no truncation games: sysfs and procfs
    /// take one write).
    pub fn write(&self, logical: &str, value: &str) -> Result<(), TuneError> {
        use std::io::Write;
        let wrap = |source| TuneError::Write {
            path: logical.to_string(),
            value: value.to_string(),
            source,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(logical))
            .map_err(wrap)?;
        f.write_all(value.as_bytes()).map_err(wrap)
    }
}

fn type_word<T>() -> &'static str {
    let n = std::any::type_name::<T>();
    if n.starts_with('u') {
        "an unsigned integer"
    } else if n.starts_with('i') {
        "an integer"
    } else if n.starts_with('f') {
        "a number"
    } else {
        "a value"
    }
}

/// Orders `cpu2` before `cpu10`.
pub fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |s: &str| {
        let i = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
        let (p, n) = s.split_at(i);
        (p.to_string(), n.parse::<u64>().ok(), n.to_string())
    };
    split(a).cmp(&split(b))
}

/// The selected word of a sysfs choice file.
///
/// ```
/// use vnio_tune::host::bracketed;
/// assert_eq!(bracketed("always [madvise] never"), Some("madvise"));
/// assert_eq!(bracketed("always madvise never"), None);
/// assert_eq!(bracketed("[unclosed"), None);
/// ```
pub fn bracketed(s: &str) -> Option<&str> {
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(&s[start + 1..end])
}

/// Parses a CPU list such as `0-3,8,10-11`; `None` for garbage.
///
/// ```
/// use vnio_tune::host::parse_cpu_list;
/// assert_eq!(parse_cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
/// assert_eq!(parse_cpu_list(""), Some(vec![]));
/// assert_eq!(parse_cpu_list("3-1"), None);
/// assert_eq!(parse_cpu_list("0-4294967295"), None);
/// assert_eq!(parse_cpu_list("x"), None);
/// ```
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() || s == "(null)" {
        return Some(out);
    }
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}
