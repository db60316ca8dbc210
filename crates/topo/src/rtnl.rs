//! A synchronous route-netlink socket bound to one network namespace.
//!
//! A netlink socket belongs to the namespace it was created in for its whole
//! life, so a socket for another namespace is created on a short-lived
//! helper thread that joined that namespace first; the caller's threads never
//! change namespace.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::sched::CloneFlags;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

/// How long to wait for the kernel to answer one request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct Rtnl {
    socket: Socket,
    seq: u32,
}

impl Rtnl {
    /// A socket in the namespace referred to by `netns`, or in the calling
    /// thread's namespace when `None`.
    pub(crate) fn open(netns: Option<BorrowedFd<'_>>) -> io::Result<Rtnl> {
        let socket = match netns {
            None => new_socket()?,
            Some(fd) => std::thread::scope(|s| {
                s.spawn(move || -> io::Result<Socket> {
                    nix::sched::setns(fd, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                    new_socket()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("netlink helper thread panicked")))
            })?,
        };
        Ok(Rtnl { socket, seq: 0 })
    }

    /// Send a request that the kernel acknowledges; return the messages it
    /// sent before the acknowledgement (e.g. the answer to a `Get`).
    pub(crate) fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.send(message, NLM_F_REQUEST | NLM_F_ACK | flags)?;
        self.collect(seq, false)
    }

    /// Send a dump request and return every message of the dump.
    pub(crate) fn dump(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.send(message, NLM_F_REQUEST | NLM_F_DUMP)?;
        self.collect(seq, true)
    }

    fn send(&mut self, message: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        let sent = self.socket.send(&buf, 0)?;
        if sent != buf.len() {
            return Err(io::Error::other("short write on netlink socket"));
        }
        Ok(self.seq)
    }

    fn collect(&mut self, seq: u32, dump: bool) -> io::Result<Vec<RouteNetlinkMessage>> {
        let mut out = Vec::new();
        loop {
            let (buf, _) = self.socket.recv_from_full()?;
            let mut off = 0;
            while off + 4 <= buf.len() {
                let len = u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]])
                    as usize;
                if len < 16 || off + len > buf.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "truncated netlink message",
                    ));
                }
                let frame = &buf[off..off + len];
                off += (len + 3) & !3;
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(frame)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                if msg.header.sequence_number != seq {
                    continue; // a late answer to an earlier, abandoned request
                }
                match msg.payload {
                    NetlinkPayload::Error(err) => {
                        return match err.code {
                            None => Ok(out),
                            Some(_) => Err(err.to_io()),
                        };
                    }
                    NetlinkPayload::Done(_) if dump => return Ok(out),
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    _ => {}
                }
            }
        }
    }
}

fn new_socket() -> io::Result<Socket> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let timeout = TimeVal::new(REPLY_TIMEOUT.as_secs() as _, 0);
    setsockopt(&socket.as_fd(), sockopt::ReceiveTimeout, &timeout).map_err(io::Error::from)?;
    Ok(socket)
}
