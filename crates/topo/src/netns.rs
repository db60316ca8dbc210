//! Named network namespaces, created and removed the way `ip netns` does.
//!
//! A namespace is created by a helper thread that calls
//! `unshare(CLONE_NEWNET)` and bind-mounts its own namespace file
//! (`/proc/thread-self/ns/net`) onto `/run/netns/NAME`; the mount keeps the
//! namespace alive after the thread exits. `/run/netns` is made a shared
//! mount point first, as iproute2 does, so mounts made here propagate to
//! other mount namespaces and `ip netns exec NAME ...` works for humans too.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;

use crate::error::{Context, Error, Result};
use crate::handle::Handle;
use crate::journal::{Entry, Journal};
use crate::names::check_netns_name;
use crate::sys;

/// Where named namespaces live (the iproute2 convention).
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// A named network namespace owned by this process: deleted (unmounted and
/// unlinked) on drop or by [`Netns::delete`].
///
/// The namespace itself disappears, with every interface in it, once the
/// last reference goes: the mount, this handle's fd, any socket opened
/// inside it, any thread or process still in it.
#[derive(Debug)]
pub struct Netns {
    name: String,
    fd: Arc<OwnedFd>,
    journal: Journal,
    armed: bool,
}

impl Netns {
    /// Create the namespace `name` with `lo` up, journaled in the default
    /// journal ([`Journal::default`]).
    pub fn create(name: &str) -> Result<Netns> {
        Netns::create_with_journal(name, &Journal::default())
    }

    /// Create the namespace `name` with `lo` up, journaled in `journal`.
    ///
    /// Fails if a namespace of that name already exists.
    pub fn create_with_journal(name: &str, journal: &Journal) -> Result<Netns> {
        check_netns_name(name)?;
        let what = || format!("creating netns {name}");
        let entry = Entry::Netns(name.to_owned());
        journal.record(&entry)?;
        let fd = match make(name) {
            Ok(fd) => fd,
            Err(e) => {
                // Nothing of ours exists; the entry must not make `clean`
                // remove a namespace someone else owns under that name.
                let _ = journal.forget(&entry);
                return Err(Error::os(what(), e));
            }
        };
        let ns = Netns {
            name: name.to_owned(),
            fd: Arc::new(fd),
            journal: journal.clone(),
            armed: true,
        };
        // On failure `ns` is dropped here, which removes the namespace.
        ns.handle()?.set_up("lo")?;
        Ok(ns)
    }

    /// The namespace's name (the file name under `/run/netns`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file, `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_RUN_DIR).join(&self.name)
    }

    /// A netlink handle operating inside this namespace.
    pub fn handle(&self) -> Result<Handle> {
        Handle::in_netns(self)
    }

    /// A command whose child joins this namespace (setns in `pre_exec`)
    /// before it execs `program`. Only the network namespace changes: the
    /// child keeps this process's mount namespace, so its `/sys/class/net`
    /// still shows the root namespace's view (unlike `ip netns exec`).
    ///
    /// The command holds a reference to the namespace's fd until it is
    /// dropped, so it can spawn even after this `Netns` is gone.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        sys::setns_before_exec(&mut cmd, Arc::clone(&self.fd));
        cmd
    }

    /// Run `f` on a fresh thread that joined this namespace, wait for it and
    /// return its result. Sockets opened in `f` belong to this namespace for
    /// their whole life, so they can be returned and used from any thread.
    /// A panic in `f` is propagated to the caller.
    pub fn run<F, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let fd = self.fd.as_fd();
        let joined = std::thread::scope(|s| {
            s.spawn(move || join(fd).map(|()| f()))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        joined.what(|| format!("entering netns {}", self.name))
    }

    /// Start `f` on a new thread that joined this namespace (e.g. a server
    /// loop) and return its handle once the thread is inside the namespace.
    pub fn spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let fd = Arc::clone(&self.fd);
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("netns-{}", self.name))
            .spawn(move || {
                let entered = join(fd.as_fd());
                drop(fd);
                let ok = entered.is_ok();
                let _ = tx.send(entered);
                if !ok {
                    // The caller gets the error from the channel; this
                    // thread's result is never looked at.
                    std::panic::resume_unwind(Box::new("setns failed"));
                }
                f()
            })
            .what(|| format!("spawning a thread for netns {}", self.name))?;
        match rx.recv() {
            Ok(Ok(())) => Ok(thread),
            Ok(Err(e)) => Err(Error::os(format!("entering netns {}", self.name), e)),
            Err(_) => Err(Error::os(
                format!("entering netns {}", self.name),
                io::Error::other("thread exited early"),
            )),
        }
    }

    /// Set a per-namespace sysctl (`net.*`), e.g.
    /// `set_sysctl("net.ipv4.ip_forward", "1")`. The value is written from a
    /// thread inside the namespace, which is what `/proc/sys/net` resolves
    /// against.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<()> {
        let what = || format!("setting {key}={value} in netns {}", self.name);
        if !key.starts_with("net.") || key.contains('/') || key.split('.').any(str::is_empty) {
            return Err(Error::os(
                what(),
                io::Error::new(io::ErrorKind::InvalidInput, "not a net.* sysctl key"),
            ));
        }
        let path = Path::new("/proc/sys").join(key.replace('.', "/"));
        let value = value.to_owned();
        self.run(move || std::fs::write(path, value))?.what(what)
    }

    /// Read a per-namespace sysctl (`net.*`), trimmed.
    pub fn sysctl(&self, key: &str) -> Result<String> {
        let what = || format!("reading {key} in netns {}", self.name);
        if !key.starts_with("net.") || key.contains('/') || key.split('.').any(str::is_empty) {
            return Err(Error::os(
                what(),
                io::Error::new(io::ErrorKind::InvalidInput, "not a net.* sysctl key"),
            ));
        }
        let path = Path::new("/proc/sys").join(key.replace('.', "/"));
        let text = self
            .run(move || std::fs::read_to_string(path))?
            .what(what)?;
        Ok(text.trim().to_owned())
    }

    /// The namespace's fd (for setns, or `IFLA_NET_NS_FD`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Delete the namespace now and report failures (dropping does the same
    /// silently).
    pub fn delete(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        if !self.armed {
            return Ok(());
        }
        self.armed = false;
        remove_named(&self.name)?;
        let _ = self.journal.forget(&Entry::Netns(self.name.clone()));
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Join the namespace `fd` on the calling thread.
pub(crate) fn join(fd: BorrowedFd<'_>) -> io::Result<()> {
    nix::sched::setns(fd, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
}

/// Open `/run/netns/NAME` if it exists.
pub(crate) fn open_named(name: &str) -> io::Result<OwnedFd> {
    File::open(Path::new(NETNS_RUN_DIR).join(name)).map(OwnedFd::from)
}

/// True if `/run/netns/NAME` exists.
pub fn exists(name: &str) -> bool {
    check_netns_name(name).is_ok() && Path::new(NETNS_RUN_DIR).join(name).exists()
}

/// Remove the named namespace: unmount and unlink `/run/netns/NAME`.
/// Returns whether it existed.
pub(crate) fn remove_named(name: &str) -> Result<bool> {
    check_netns_name(name)?;
    let path = Path::new(NETNS_RUN_DIR).join(name);
    let what = || format!("deleting netns {name}");
    match umount2(&path, MntFlags::MNT_DETACH) {
        // EINVAL: not a mount point (half-created); ENOENT: already gone.
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(e).what(what),
    }
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).what(what),
    }
}

/// Serialises the shared-mount setup within this process.
static RUN_DIR_LOCK: Mutex<()> = Mutex::new(());

/// Make sure `/run/netns` exists and is a shared mount point.
fn prepare_run_dir() -> io::Result<()> {
    let _guard = RUN_DIR_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(NETNS_RUN_DIR)?;
    let mut bound = false;
    loop {
        let shared = mount(
            None::<&str>,
            NETNS_RUN_DIR,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        );
        match shared {
            Ok(()) => return Ok(()),
            // Not a mount point yet: bind it onto itself, then retry once.
            Err(Errno::EINVAL) if !bound => {
                mount(
                    Some(NETNS_RUN_DIR),
                    NETNS_RUN_DIR,
                    Some("none"),
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )?;
                bound = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Create the namespace and its mount; return an fd to it.
fn make(name: &str) -> io::Result<OwnedFd> {
    prepare_run_dir()?;
    let path = Path::new(NETNS_RUN_DIR).join(name);
    // The mount point: an empty file, created exclusively so an existing
    // namespace of that name is never replaced.
    let placeholder = nix::fcntl::open(
        &path,
        OFlag::O_RDONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    drop(placeholder);
    let mounted = std::thread::scope(|s| {
        s.spawn(|| -> io::Result<()> {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET)?;
            mount(
                Some("/proc/thread-self/ns/net"),
                &path,
                Some("none"),
                MsFlags::MS_BIND,
                None::<&str>,
            )?;
            Ok(())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("netns helper thread panicked")))
    });
    let opened = mounted.and_then(|()| File::open(&path).map(OwnedFd::from));
    match opened {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let _ = umount2(&path, MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}
