//! Frames from a VXLAN port: datagrams read in batches and switched in
//! place from the port's receive slots, each inner frame's source learned
//! behind the VTEP that sent it.

use super::VxlanPort;
use crate::datapath::FrameCtx;
use crate::port::{Port, Switch};
use crate::vhost_user::buffers::Src;
use crate::wire::virtio_net;
use std::time::Instant;

impl VxlanPort {
    /// Up to `budget` datagrams from slot `i`'s VXLAN port. The receive
    /// half is taken out of the port while its frames are forwarded.
    pub(crate) fn receive_from<S: Switch>(
        sw: &mut S,
        i: usize,
        now: Instant,
        budget: usize,
    ) -> usize {
        let mut n = 0;
        while n < budget {
            let taken = match sw.port_mut(i) {
                Some(Port::Vxlan(v)) => v.take_rx(budget - n),
                _ => None,
            };
            let Some(mut rx) = taken else { break };
            let mut got = 0;
            while let Some(r) = rx.next_frame() {
                got += 1;
                match r {
                    Ok(f) => {
                        let b = rx.frame(&f);
                        let cx = FrameCtx {
                            from_vtep: Some(f.from),
                            ..FrameCtx::new(i, now)
                        };
                        sw.forward(
                            cx,
                            Src::Local(b),
                            b.len() as u64,
                            virtio_net::HEADER_LEN,
                            None,
                        );
                    }
                    Err(reason) => sw.drop_from(i, reason),
                }
            }
            if let Some(Port::Vxlan(v)) = sw.port_mut(i) {
                v.put_rx(rx);
            }
            n += got;
            if got == 0 {
                break;
            }
        }
        n
    }
}
