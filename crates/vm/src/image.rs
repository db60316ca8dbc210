//! The guest image: a Debian kernel (extracted from its package, never
//! installed on the host) and an initramfs holding busybox, the NIC and
//! console modules in dependency order, a static `vnio` and the init
//! script. Cached under a key that hashes every input, so a build with
//! unchanged inputs is instant and a changed input gives a new image.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cpio::Cpio;
use crate::debian::{self, PackageRef};
use crate::elf::{self, Linkage};
use crate::error::{Context, Error, Result};
use crate::init::INIT;
use crate::modules::{module_name, ModuleDeps};
use crate::tool::run;

/// The Rust target of the guest's `vnio`.
pub const GUEST_TARGET: &str = "x86_64-unknown-linux-musl";
/// The cargo profile of the guest's `vnio` (release without debug info,
/// stripped: the binary is copied into every guest's memory).
pub const GUEST_PROFILE: &str = "guest";
/// Modules the guest loads (with what modules.dep says they need): the
/// PCI transport, the paravirtual NIC, the console ports of the command
/// channel, and QEMU's emulated e1000 for comparison.
pub const WANTED_MODULES: &[&str] = &["virtio_pci", "virtio_net", "virtio_console", "e1000"];
/// The metapackage that names the current Debian kernel.
pub const KERNEL_PACKAGE: &str = "linux-image-amd64";

/// Bumped when the layout changes in a way the inputs do not show.
const FORMAT: u32 = 1;

/// What to build from.
#[derive(Debug, Clone)]
pub struct ImageOptions {
    /// Cache root ([`cache_root`]).
    pub cache: PathBuf,
    /// Kernel metapackage or versioned package to resolve with apt.
    pub kernel_package: String,
    /// A local kernel `.deb` instead of apt.
    pub kernel_deb: Option<PathBuf>,
    /// A static busybox instead of the host's `/bin/busybox` or the
    /// `busybox-static` package.
    pub busybox: Option<PathBuf>,
    /// The static `vnio` to put in the guest ([`find_guest_vnio`] when absent).
    pub vnio: Option<PathBuf>,
}

impl ImageOptions {
    /// Defaults: the default cache, `linux-image-amd64`, everything found.
    pub fn new() -> Self {
        Self {
            cache: cache_root(),
            kernel_package: KERNEL_PACKAGE.into(),
            kernel_deb: None,
            busybox: None,
            vnio: None,
        }
    }
}

impl Default for ImageOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// What an image was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The cache key (hash of all inputs).
    pub key: String,
    /// The kernel package.
    pub kernel_package: PackageRef,
    /// The kernel release (`uname -r` in the guest).
    pub kernel_release: String,
    /// Where busybox came from.
    pub busybox: String,
    /// The `vnio` binary used.
    pub vnio: PathBuf,
    /// Its SHA-256.
    pub vnio_sha256: String,
    /// Modules in load order.
    pub modules: Vec<String>,
    /// Size of the kernel.
    pub kernel_bytes: u64,
    /// Size of the initramfs.
    pub initrd_bytes: u64,
}

/// A built image.
#[derive(Debug, Clone)]
pub struct Image {
    /// Its cache directory.
    pub dir: PathBuf,
    /// The kernel (bzImage).
    pub kernel: PathBuf,
    /// The initramfs (newc cpio).
    pub initrd: PathBuf,
    /// What it holds.
    pub manifest: Manifest,
}

/// The result of [`build`].
#[derive(Debug, Clone)]
pub struct Built {
    /// The image.
    pub image: Image,
    /// True when nothing changed and the cached image was reused.
    pub cached: bool,
}

/// Where images, packages and probe results are cached: `$VNIO_CACHE_DIR`,
/// else `/var/cache/vnio` as root, else `$XDG_CACHE_HOME/vnio` or
/// `~/.cache/vnio`.
pub fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("VNIO_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/cache/vnio");
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("vnio");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/vnio"),
        None => std::env::temp_dir().join("vnio-cache"),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).ctx(|| format!("reading {}", path.display()))
}

fn require_static(path: &Path, bytes: &[u8], what: &str) -> Result<()> {
    match elf::linkage(bytes) {
        Ok(Linkage::Static) => Ok(()),
        Ok(Linkage::Dynamic) => Err(Error::Invalid(format!(
            "{what} {} is dynamically linked; the guest has no libc (use a static build)",
            path.display()
        ))),
        Err(e) => Err(Error::Invalid(format!("{what} {}: {e}", path.display()))),
    }
}

fn is_static(path: &Path) -> bool {
    std::fs::read(path)
        .ok()
        .is_some_and(|b| elf::linkage(&b) == Ok(Linkage::Static))
}

/// The static `vnio` for guests: `explicit`, else `$VNIO_GUEST_VNIO`, else
/// this program if it is static, else the guest build next to this
/// program in a cargo target directory
/// (`TARGET/x86_64-unknown-linux-musl/guest/vnio`).
pub fn find_guest_vnio(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        require_static(p, &read(p)?, "vnio")?;
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("VNIO_GUEST_VNIO") {
        let p = PathBuf::from(p);
        require_static(&p, &read(&p)?, "vnio ($VNIO_GUEST_VNIO)")?;
        return Ok(p);
    }
    let exe = std::env::current_exe().ctx(|| "finding this program".into())?;
    let mut candidates = Vec::new();
    if exe.file_name().is_some_and(|n| n == "vnio") {
        candidates.push(exe.clone());
    }
    // TARGET/PROFILE/vnio or TARGET/PROFILE/deps/test-binary.
    for up in [2, 3] {
        if let Some(target) = exe.ancestors().nth(up) {
            candidates.push(target.join(GUEST_TARGET).join(GUEST_PROFILE).join("vnio"));
            candidates.push(target.join(GUEST_TARGET).join("release").join("vnio"));
        }
    }
    candidates
        .into_iter()
        .find(|p| is_static(p))
        .ok_or_else(|| {
            Error::Missing(format!(
                "no static vnio for the guest: build it with `cargo build -p vnio --profile {GUEST_PROFILE} --target {GUEST_TARGET}` (scripts/setup --e2e does), or pass --vnio PATH"
            ))
        })
}

/// Busybox: (bytes, where from).
fn find_busybox(opts: &ImageOptions) -> Result<(Vec<u8>, String)> {
    if let Some(p) = &opts.busybox {
        let b = read(p)?;
        require_static(p, &b, "busybox")?;
        return Ok((b, p.display().to_string()));
    }
    for p in ["/bin/busybox", "/usr/bin/busybox"] {
        let p = Path::new(p);
        if is_static(p) {
            return Ok((read(p)?, format!("host {}", p.display())));
        }
    }
    // No static busybox on the host: take it from its package.
    let pkg = debian::resolve("busybox-static")?;
    let deb = debian::download(&pkg, &opts.cache.join("debs"))?;
    let root = opts.cache.join("pkgs").join(deb_stem(&deb));
    debian::extract(&deb, &root)?;
    for rel in ["bin/busybox", "usr/bin/busybox"] {
        let p = root.join(rel);
        if p.exists() {
            let b = read(&p)?;
            require_static(&p, &b, "busybox")?;
            return Ok((b, format!("{pkg} (extracted)")));
        }
    }
    Err(Error::Invalid(format!("{pkg} holds no bin/busybox")))
}

fn deb_stem(deb: &Path) -> String {
    deb.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The cache key: every input that changes the image.
fn key(kernel: &PackageRef, busybox: &[u8], vnio_sha: &str) -> String {
    let mut h = Sha256::new();
    h.update(format!("vnio-image {FORMAT}\n"));
    h.update(format!("kernel {} {}\n", kernel.name, kernel.version));
    h.update(format!("busybox {}\n", sha256_hex(busybox)));
    h.update(format!("vnio {vnio_sha}\n"));
    h.update(format!("modules {}\n", WANTED_MODULES.join(",")));
    h.update(INIT);
    let full: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    full[..16].to_string()
}

/// The unpacked kernel package: (release, modules directory, kernel image).
fn locate_kernel(root: &Path) -> Result<(String, PathBuf, PathBuf)> {
    let boot = root.join("boot");
    let vmlinuz = std::fs::read_dir(&boot)
        .ctx(|| format!("reading {} (is this a kernel package?)", boot.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .ok_or_else(|| Error::Invalid(format!("no boot/vmlinuz-* in {}", root.display())))?;
    let release = vmlinuz
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.trim_start_matches("vmlinuz-").to_string())
        .unwrap_or_default();
    for base in ["lib/modules", "usr/lib/modules"] {
        let dir = root.join(base).join(&release);
        if dir.is_dir() {
            return Ok((release, dir, vmlinuz));
        }
    }
    Err(Error::Invalid(format!(
        "no lib/modules/{release} in {}",
        root.display()
    )))
}

/// `modules.dep` is written by depmod at install time, not shipped: run
/// depmod on the unpacked tree.
fn ensure_modules_dep(moddir: &Path, release: &str) -> Result<()> {
    if moddir.join("modules.dep").exists() {
        return Ok(());
    }
    // depmod -b BASE reads BASE/lib/modules/RELEASE.
    let base = moddir
        .ancestors()
        .nth(3)
        .ok_or_else(|| Error::Invalid(format!("odd modules path {}", moddir.display())))?;
    run(
        Command::new("depmod").arg("-b").arg(base).arg(release),
        &format!("computing module dependencies of {release}"),
        "kmod",
    )?;
    Ok(())
}

/// A module's bytes, decompressed (busybox insmod takes plain modules).
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".ko.xz") {
        Some(("xz", "xz-utils"))
    } else if name.ends_with(".ko.zst") {
        Some(("zstd", "zstd"))
    } else if name.ends_with(".ko.gz") {
        Some(("gzip", "gzip"))
    } else {
        None
    };
    match tool {
        None => read(path),
        Some((program, package)) => Ok(run(
            Command::new(program).arg("-dc").arg(path),
            &format!("decompressing {}", path.display()),
            package,
        )?
        .stdout),
    }
}

fn images(cache: &Path) -> PathBuf {
    cache.join("images")
}

/// Loads the image in `dir`.
pub fn load(dir: &Path) -> Result<Image> {
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .ctx(|| format!("reading {}/manifest.json", dir.display()))?;
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::Invalid(format!("{}/manifest.json: {e}", dir.display())))?;
    let image = Image {
        dir: dir.to_path_buf(),
        kernel: dir.join("vmlinuz"),
        initrd: dir.join("initrd.img"),
        manifest,
    };
    if !image.kernel.exists() || !image.initrd.exists() {
        return Err(Error::Missing(format!(
            "image {} is incomplete",
            dir.display()
        )));
    }
    Ok(image)
}

/// The most recently built image in `cache`.
pub fn current(cache: &Path) -> Result<Image> {
    let pointer = images(cache).join("current");
    let key = std::fs::read_to_string(&pointer).map_err(|_| {
        Error::Missing(format!(
            "no guest image in {}: run `vnio vm image build`",
            cache.display()
        ))
    })?;
    load(&images(cache).join(key.trim()))
}

fn set_current(cache: &Path, key: &str) -> Result<()> {
    let dir = images(cache);
    let tmp = dir.join(unique(".current"));
    std::fs::write(&tmp, key).ctx(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join("current")).ctx(|| format!("updating {}/current", dir.display()))
}

/// A name no other build (thread or process) uses at the same time.
pub(crate) fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// Builds the image (or finds it cached) and makes it the current one.
/// Builds sharing a cache take turns (a lock file), so two at once find
/// each other's packages and image instead of racing on them.
pub fn build(opts: &ImageOptions) -> Result<Built> {
    let _lock = lock_cache(&opts.cache)?;
    let vnio = find_guest_vnio(opts.vnio.as_deref())?;
    let vnio_bytes = read(&vnio)?;
    let vnio_sha = sha256_hex(&vnio_bytes);
    let (busybox, busybox_from) = find_busybox(opts)?;
    let kernel_pkg = match &opts.kernel_deb {
        Some(deb) => debian::describe_deb(deb)?,
        None => debian::resolve_kernel(&opts.kernel_package)?,
    };
    let key = key(&kernel_pkg, &busybox, &vnio_sha);
    let dir = images(&opts.cache).join(&key);
    if let Ok(image) = load(&dir) {
        set_current(&opts.cache, &key)?;
        return Ok(Built {
            image,
            cached: true,
        });
    }

    let deb = match &opts.kernel_deb {
        Some(deb) => deb.clone(),
        None => debian::download(&kernel_pkg, &opts.cache.join("debs"))?,
    };
    let root = opts.cache.join("pkgs").join(deb_stem(&deb));
    debian::extract(&deb, &root)?;
    let (release, moddir, vmlinuz) = locate_kernel(&root)?;
    let order = module_order(&moddir, &release)?;
    let initrd = initramfs(&busybox, &vnio_bytes, &release, &moddir, &order)?;

    let kernel_bytes = std::fs::metadata(&vmlinuz)
        .ctx(|| format!("reading {}", vmlinuz.display()))?
        .len();
    let manifest = Manifest {
        key: key.clone(),
        kernel_package: kernel_pkg,
        kernel_release: release,
        busybox: busybox_from,
        vnio: vnio.clone(),
        vnio_sha256: vnio_sha,
        modules: order.iter().map(|p| module_name(p)).collect(),
        kernel_bytes,
        initrd_bytes: initrd.len() as u64,
    };
    write_image(&opts.cache, &dir, &vmlinuz, &initrd, &manifest)?;
    set_current(&opts.cache, &key)?;
    Ok(Built {
        image: load(&dir)?,
        cached: false,
    })
}

/// Takes the cache's build lock (held until the result is dropped).
fn lock_cache(cache: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    std::fs::create_dir_all(cache).ctx(|| format!("creating {}", cache.display()))?;
    let lock_path = cache.join("build.lock");
    let lock =
        std::fs::File::create(&lock_path).ctx(|| format!("creating {}", lock_path.display()))?;
    nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| Error::Io {
        what: format!("locking {}", lock_path.display()),
        source: e.into(),
    })
}

/// The modules the guest needs from kernel `release`'s `moddir`, in the
/// order to load them (their paths under `moddir`).
fn module_order(moddir: &Path, release: &str) -> Result<Vec<String>> {
    ensure_modules_dep(moddir, release)?;
    let read_text = |name: &str| {
        let p = moddir.join(name);
        std::fs::read_to_string(&p).ctx(|| format!("reading {}", p.display()))
    };
    let deps = ModuleDeps::parse(
        &read_text("modules.dep")?,
        &read_text("modules.builtin").unwrap_or_default(),
    );
    deps.load_order(WANTED_MODULES)
        .map_err(|e| Error::Invalid(format!("kernel {release}: {e}")))
}

/// The initramfs: the directories, the console, init, busybox, vnio, and
/// the modules in `order` with the list init loads them by.
fn initramfs(
    busybox: &[u8],
    vnio: &[u8],
    release: &str,
    moddir: &Path,
    order: &[String],
) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    for d in [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "root",
        "etc",
        "etc/vnio",
        "lib",
        "lib/modules",
    ] {
        c.dir(d);
    }
    // The console must exist before devtmpfs is mounted: the kernel opens
    // it as init's stdin/stdout.
    c.char_device("dev/console", 0o600, 5, 1);
    c.file("init", 0o755, INIT.as_bytes());
    c.file("bin/busybox", 0o755, busybox);
    c.symlink("bin/sh", "busybox");
    c.file("bin/vnio", 0o755, vnio);
    c.dir(&format!("lib/modules/{release}"));
    let mut list = String::new();
    for rel in order {
        // Flat and decompressed: /lib/modules/RELEASE/NAME.ko (the kernel's
        // unpacker makes no parent directories, and the list gives the order).
        let file = format!("{}.ko", module_name(rel));
        c.file(
            &format!("lib/modules/{release}/{file}"),
            0o644,
            &module_bytes(&moddir.join(rel))?,
        );
        list.push_str(&format!("{release}/{file}\n"));
    }
    c.file("etc/vnio/modules", 0o644, list.as_bytes());
    Ok(c.finish())
}

/// Writes the image into `dir` of `cache`: aside and renamed, so a crash
/// never leaves a half image.
fn write_image(
    cache: &Path,
    dir: &Path,
    vmlinuz: &Path,
    initrd: &[u8],
    manifest: &Manifest,
) -> Result<()> {
    let tmp = images(cache).join(unique(&format!(".build-{}", manifest.key)));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    let write = || -> Result<()> {
        std::fs::copy(vmlinuz, tmp.join("vmlinuz")).ctx(|| "copying the kernel".into())?;
        std::fs::write(tmp.join("initrd.img"), initrd).ctx(|| "writing the initramfs".into())?;
        let json = serde_json::to_string_pretty(manifest).expect("manifest serialises");
        std::fs::write(tmp.join("manifest.json"), json).ctx(|| "writing the manifest".into())
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if std::fs::rename(&tmp, dir).is_err() {
        // Another build of the same inputs finished first: same image.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(v: &str) -> PackageRef {
        PackageRef {
            name: "linux-image-6.1.0-56-amd64".into(),
            version: v.into(),
        }
    }

    #[test]
    fn the_key_follows_every_input() {
        let k = key(&pkg("1"), b"bb", "v");
        assert_eq!(k, key(&pkg("1"), b"bb", "v"));
        assert_eq!(k.len(), 16);
        assert_ne!(k, key(&pkg("2"), b"bb", "v"));
        assert_ne!(k, key(&pkg("1"), b"bb2", "v"));
        assert_ne!(k, key(&pkg("1"), b"bb", "w"));
    }

    #[test]
    fn a_missing_image_says_how_to_build_one() {
        let err = current(Path::new("/nonexistent/vnio-cache")).unwrap_err();
        assert!(err.to_string().contains("vnio vm image build"), "{err}");
    }
}
