//! One front-end connection: a non-blocking Unix stream that assembles
//! whole vhost-user messages (header, body, attached descriptors) without
//! ever blocking the worker, so a front-end that stalls mid-message costs
//! nobody but itself.

use super::protocol::{Header, ProtocolError, HEADER_LEN, MAX_BODY};
use crate::sys::scm;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

/// Why a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The front-end closed the connection.
    #[error("front-end disconnected")]
    Closed,
    /// The front-end closed the connection in the middle of a message.
    #[error("front-end disconnected after {0} bytes of a message")]
    Truncated(usize),
    /// The socket failed.
    #[error("socket error")]
    Io(#[from] io::Error),
    /// The front-end sent something that is not a valid message.
    #[error("invalid message")]
    Protocol(#[from] ProtocolError),
}

/// A message assembled from the stream.
#[derive(Debug)]
pub struct Message {
    /// Its header.
    pub header: Header,
    /// Its body (`header.size` bytes).
    pub body: Vec<u8>,
    /// Descriptors that came with it.
    pub fds: Vec<File>,
}

/// A front-end connection.
#[derive(Debug)]
pub struct Connection {
    sock: UnixStream,
    buf: Box<[u8; HEADER_LEN + MAX_BODY]>,
    filled: usize,
    header: Option<Header>,
    fds: Vec<File>,
}

impl Connection {
    /// Wraps a connected stream (made non-blocking here).
    pub fn new(sock: UnixStream) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        Ok(Self {
            sock,
            buf: Box::new([0; HEADER_LEN + MAX_BODY]),
            filled: 0,
            header: None,
            fds: Vec::new(),
        })
    }

    /// Reads what is available; returns a message once one is complete,
    /// `Ok(None)` when more bytes are needed.
    pub fn poll_message(&mut self) -> Result<Option<Message>, ConnError> {
        loop {
            let want = match self.header {
                None => HEADER_LEN,
                Some(h) => HEADER_LEN + h.size as usize,
            };
            if self.filled == want {
                if let Some(h) = self.header.take() {
                    let body = self.buf[HEADER_LEN..want].to_vec();
                    self.filled = 0;
                    return Ok(Some(Message {
                        header: h,
                        body,
                        fds: std::mem::take(&mut self.fds),
                    }));
                }
                let mut hb = [0u8; HEADER_LEN];
                hb.copy_from_slice(&self.buf[..HEADER_LEN]);
                self.header = Some(Header::parse(&hb)?);
                continue;
            }
            match scm::recv_with_fds(&self.sock, &mut self.buf[self.filled..want], &mut self.fds) {
                Ok(0) if self.filled > 0 => return Err(ConnError::Truncated(self.filled)),
                Ok(0) => return Err(ConnError::Closed),
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    return Err(ConnError::Closed)
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends a reply (small; a full socket buffer means the front-end is not reading: an error).
    pub fn send(&self, bytes: &[u8]) -> Result<(), ConnError> {
        let n = scm::send_with_fds(&self.sock, bytes, &[])?;
        if n != bytes.len() {
            return Err(ConnError::Io(io::Error::new(
                io::ErrorKind::WriteZero,
                "short reply write",
            )));
        }
        Ok(())
    }
}

impl AsRawFd for Connection {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vhost_user::protocol::{code, encode_request};
    use std::io::Write;

    #[test]
    fn assembles_messages_split_anywhere() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut c = Connection::new(b).unwrap();
        let m = encode_request(code::SET_FEATURES, 0, &7u64.to_le_bytes());
        a.write_all(&m[..5]).unwrap();
        assert!(c.poll_message().unwrap().is_none());
        a.write_all(&m[5..15]).unwrap();
        assert!(c.poll_message().unwrap().is_none());
        a.write_all(&m[15..]).unwrap();
        let got = c.poll_message().unwrap().unwrap();
        assert_eq!(got.header.request, code::SET_FEATURES);
        assert_eq!(got.body, 7u64.to_le_bytes());
        drop(a);
        assert!(matches!(c.poll_message(), Err(ConnError::Closed)));
    }

    #[test]
    fn garbage_header_is_an_error() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut c = Connection::new(b).unwrap();
        a.write_all(&[0xff; 12]).unwrap();
        assert!(matches!(c.poll_message(), Err(ConnError::Protocol(_))));
    }
}
