//! Return routability for UDP data sessions. The test key proves a datagram
//! comes from the client that set the test up, but not that the source
//! address is its own: a client could declare (`data_from`) or forge a third
//! party's address and have the agent reflect 64 KiB answers or an hour-long
//! stream there. So before the agent sends an address anything bigger than
//! what it received from it, the address must echo a cookie the agent sent
//! there, as DTLS and QUIC do:
//!
//! ```text
//! client  [key | HELLO  | 0]       (24 bytes)  -> agent
//! agent   [key | COOKIE | cookie]  (24 bytes)  -> the hello's source address
//! client  [key | COOKIE | cookie]              -> agent
//! agent   [key | PROVEN | cookie]              -> that address; data may flow
//! ```
//!
//! The cookie is a keyed hash (SipHash, keyed at random per agent process by
//! std's `RandomState`) of the test key, session and address: nobody who does
//! not receive the agent's datagrams at that address can produce it, and the
//! agent keeps no state for addresses that never answer.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use crate::path::Datagrams;
use crate::proto::{UDP_COOKIE_LEN, UDP_COOKIE_SEQ, UDP_HEADER, UDP_HELLO_SEQ};
use crate::session::{now, Ended};

/// The agent's cookie secret.
pub struct Cookies {
    secret: RandomState,
}

impl Default for Cookies {
    fn default() -> Self {
        Cookies {
            secret: RandomState::new(),
        }
    }
}

impl Cookies {
    /// The cookie of session `index` of test `key` at address `peer`.
    pub fn of(&self, key: u64, index: usize, peer: SocketAddr) -> u64 {
        self.secret.hash_one((key, index, peer))
    }
}

/// A hello, cookie or acknowledgement datagram.
pub fn datagram(key: u64, seq: u64, cookie: u64) -> [u8; UDP_COOKIE_LEN] {
    let mut d = [0u8; UDP_COOKIE_LEN];
    d[..8].copy_from_slice(&key.to_be_bytes());
    d[8..16].copy_from_slice(&seq.to_be_bytes());
    d[16..].copy_from_slice(&cookie.to_be_bytes());
    d
}

/// The cookie a handshake datagram carries.
pub fn cookie_in(d: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(
        d.get(UDP_HEADER..UDP_COOKIE_LEN)?.try_into().ok()?,
    ))
}

/// How often the client repeats its hello or echo while nothing comes back.
const RESEND: Duration = Duration::from_millis(100);
/// How long a client waits for its address to be proven.
pub const PROVE_WITHIN: Duration = Duration::from_secs(5);

/// The client side: proves this session's address to the agent's UDP data
/// socket. Returns once the agent acknowledges (or data arrives, which only
/// follows a proof); `over` ends the wait early.
pub fn prove<D: Datagrams>(s: &mut D, key: u64, over: impl Fn() -> bool) -> Result<(), Ended> {
    let give_up = now() + PROVE_WITHIN.as_nanos() as u64;
    let mut out = datagram(key, UDP_HELLO_SEQ, 0);
    let mut buf = vec![0u8; 65_536];
    let mut last_sent: Option<u64> = None;
    loop {
        let t = now();
        if over() {
            return Err(Ended::Stopped);
        }
        if t > give_up {
            return Err(Ended::Failed(format!(
                "the agent did not confirm this session's address within {} s \
                 (its cookie never came back here: a firewall or NAT between us?)",
                PROVE_WITHIN.as_secs()
            )));
        }
        let resend = match last_sent {
            None => true,
            Some(l) => t - l > RESEND.as_nanos() as u64,
        };
        if resend {
            match s.send(&out) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(Ended::Closed),
                Err(e) => return Err(Ended::Failed(format!("UDP send: {e}"))),
            }
            last_sent = Some(t);
        }
        let n = match s.recv_wait(&mut buf) {
            Ok(Some((n, _))) => n,
            Ok(None) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(Ended::Closed),
            Err(e) => return Err(Ended::Failed(format!("UDP receive: {e}"))),
        };
        if n < UDP_HEADER || buf[..8] != key.to_be_bytes() {
            continue;
        }
        match u64::from_be_bytes(buf[8..16].try_into().unwrap_or_default()) {
            UDP_COOKIE_SEQ => {
                if let Some(c) = cookie_in(&buf[..n]) {
                    out = datagram(key, UDP_COOKIE_SEQ, c);
                    last_sent = None;
                }
            }
            UDP_HELLO_SEQ => {}
            // The acknowledgement, or data that follows it.
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_depend_on_secret_key_session_and_address() {
        let (a, b) = (Cookies::default(), Cookies::default());
        let p: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let q: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        assert_eq!(a.of(1, 0, p), a.of(1, 0, p));
        assert_ne!(a.of(1, 0, p), a.of(1, 0, q));
        assert_ne!(a.of(1, 0, p), a.of(2, 0, p));
        assert_ne!(a.of(1, 0, p), a.of(1, 1, p));
        assert_ne!(a.of(1, 0, p), b.of(1, 0, p), "keyed per agent");
        let d = datagram(7, UDP_COOKIE_SEQ, 99);
        assert_eq!(cookie_in(&d), Some(99));
        assert_eq!(cookie_in(&d[..20]), None);
    }
}
