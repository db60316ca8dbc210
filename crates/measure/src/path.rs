//! The path a UDP session's datagrams take: a kernel socket, or a path that
//! bypasses the kernel, such as the switch's poll-mode endpoint on a
//! vhost-user port (`vnio rr --via vhost-user:...`).
//!
//! The rr loops are written once, generic over [`Datagrams`]; the kernel
//! socket is one implementation (inlined, so the kernel path costs what it
//! did before), and anything the CLI plugs in through [`PathOpener`] is
//! another.

use std::io::{self, ErrorKind};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;

use nix::poll::PollFlags;
use nix::sys::socket::{recv, MsgFlags};

/// One session's datagram path to the agent's data port.
pub trait Datagrams {
    /// Sends one datagram. A full transmit queue is `WouldBlock` (the
    /// datagram is lost, as a full socket buffer would lose it).
    fn send(&mut self, payload: &[u8]) -> io::Result<()>;
    /// Waits a short while (at most ~50 ms) for one datagram from the
    /// agent: its length and, when the path stamps arrivals, the
    /// CLOCK_REALTIME receive instant. `Ok(None)`: nothing came.
    fn recv_wait(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<u64>)>>;
    /// Returns one datagram if one is ready, without waiting.
    fn recv_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Idles until about `next_due` (monotonic ns) or until data arrives;
    /// may return early.
    fn idle_until(&mut self, next_due: u64);
}

/// A datagram path that is not a kernel socket.
pub type BoxedPath = Box<dyn Datagrams + Send>;

impl<D: Datagrams + ?Sized> Datagrams for Box<D> {
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        (**self).send(payload)
    }
    fn recv_wait(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<u64>)>> {
        (**self).recv_wait(buf)
    }
    fn recv_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        (**self).recv_now(buf)
    }
    fn idle_until(&mut self, next_due: u64) {
        (**self).idle_until(next_due)
    }
}

/// Opens the paths of a run: one per session, called in the session's own
/// thread before the agreed start instant.
pub trait PathOpener: Send + Sync {
    /// Opens session `index`'s path to the agent's data socket `agent`.
    fn open(&self, index: usize, agent: SocketAddr) -> Result<BoxedPath, String>;
    /// The source address the agent will see (it accepts data only from it).
    fn source(&self) -> IpAddr;
    /// How many sessions it can carry.
    fn sessions(&self) -> usize;
    /// One line for the result document, e.g. "vhost-user:/run/sw/p1 as 10.0.0.5".
    fn describe(&self) -> String;
}

/// A run's non-kernel path, as kept in the workload parameters.
#[derive(Clone)]
pub struct Via(pub Arc<dyn PathOpener>);

impl std::fmt::Debug for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.describe())
    }
}

impl serde::Serialize for Via {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.describe())
    }
}

/// The kernel path: a connected UDP socket (blocking with a short receive
/// timeout), optionally with software receive timestamps.
pub struct KernelUdp {
    pub socket: UdpSocket,
    pub stamped: bool,
}

impl Datagrams for KernelUdp {
    #[inline]
    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.socket.send(payload).map(|_| ())
    }

    #[inline]
    fn recv_wait(&mut self, buf: &mut [u8]) -> io::Result<Option<(usize, Option<u64>)>> {
        let got = if self.stamped {
            crate::rr::recv_stamped(&self.socket, buf)
        } else {
            self.socket.recv(buf).map(|n| (n, None))
        };
        match got {
            Ok(x) => Ok(Some(x)),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    #[inline]
    fn recv_now(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use std::os::fd::AsRawFd;
        match recv(self.socket.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => Ok(Some(n)),
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn idle_until(&mut self, next_due: u64) {
        crate::rr::poll_wait(
            self.socket.as_fd(),
            PollFlags::POLLIN,
            next_due,
            crate::rr::SEND_SPIN_NS,
        );
    }
}
