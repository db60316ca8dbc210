//! Spreading, the device's part: a queue pair lent out of its device to
//! be served by another worker, and taken back (see
//! `port/vhost_user/spread.rs`, and `pool/spread.rs` for the whole).

use super::{feature, rx_queue, tx_queue, Device};

impl Device {
    /// True when pair `k`'s two queues are running and enabled.
    pub fn pair_ready(&self, k: usize) -> bool {
        self.ready(rx_queue(k)) && self.ready(tx_queue(k))
    }

    /// Moves pair `k`'s two vrings (rings, kick and call descriptors,
    /// enable state) out into a one-pair device with the same negotiated
    /// features, memory and dirty log: its pair 0 is this device's pair
    /// `k`. This device no longer has the pair (not ready, not watched)
    /// until [`Device::take_back_pair`].
    pub fn lend_pair(&mut self, k: usize) -> Device {
        let mut d = Device {
            offered: self.offered & !feature::MQ,
            acked_features: self.acked_features,
            acked_protocol: self.acked_protocol,
            pairs: 1,
            mem: self.mem.clone(),
            mtu: self.mtu,
            log: self.log.clone(),
            max_memory: self.max_memory,
            ..Device::default()
        };
        d.vrings[0] = std::mem::take(&mut self.vrings[rx_queue(k)]);
        d.vrings[1] = std::mem::take(&mut self.vrings[tx_queue(k)]);
        d
    }

    /// Puts back as pair `k` what [`Device::lend_pair`] moved out (with
    /// the ring state it reached).
    pub fn take_back_pair(&mut self, k: usize, mut d: Device) {
        self.vrings[rx_queue(k)] = std::mem::take(&mut d.vrings[0]);
        self.vrings[tx_queue(k)] = std::mem::take(&mut d.vrings[1]);
        self.retired.append(&mut d.retired);
    }
}
