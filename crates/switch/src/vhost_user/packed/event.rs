//! A packed ring's event suppression (virtio 1.1 §2.8.10): the driver's
//! area says when it wants a call, the device's area when it wants a kick.
//! Their DESC mode is EVENT_IDX's. Kept apart from the ring's chains
//! (`mod.rs`): they share only the positions.

use super::{
    PackedRing, EVENT_DESC, EVENT_DISABLE, EVENT_ENABLE, EVENT_FLAGS, EVENT_OFF_WRAP, WRAP_BIT,
};
use std::num::Wrapping;
use std::sync::atomic::{fence, Ordering};

impl PackedRing {
    /// Marks the device's event area, if logging.
    #[inline]
    fn log_device_event(&self) {
        if let Some(l) = &self.log {
            l.mark(self.device_event_gpa, 4);
        }
    }

    pub(in crate::vhost_user) fn notified(&mut self) {
        self.signalled = self.used;
    }

    /// The driver's event area: DISABLE never, ENABLE always, DESC (with
    /// EVENT_IDX) when the used position passed the one it names since
    /// the last call.
    pub(in crate::vhost_user) fn driver_wants_call(&self) -> bool {
        fence(Ordering::SeqCst);
        let flags = self
            .driver_event
            .load_u16(EVENT_FLAGS, Ordering::Relaxed)
            .unwrap_or(EVENT_ENABLE);
        if flags != EVENT_DESC || !self.features.event_idx {
            return flags != EVENT_DISABLE;
        }
        let off_wrap = self
            .driver_event
            .load_u16(EVENT_OFF_WRAP, Ordering::Relaxed)
            .unwrap_or(0);
        let size = self.size;
        let new = Wrapping(self.used.idx);
        let mut old = Wrapping(self.signalled.idx);
        if new <= old {
            // The used position wrapped since the last call.
            old -= Wrapping(size);
        }
        let mut event = Wrapping(off_wrap & !WRAP_BIT);
        if (off_wrap & WRAP_BIT != 0) != self.used.wrap {
            // The event lies in the previous lap.
            event -= Wrapping(size);
        }
        // vring_need_event: the event lies in [old, new).
        new - event - Wrapping(1) < new - old
    }

    pub(in crate::vhost_user) fn enable_notification(&mut self) -> bool {
        let r = if self.features.event_idx {
            self.device_event
                .store_u16(EVENT_OFF_WRAP, self.avail.encode(), Ordering::Relaxed)
                .and_then(|()| {
                    self.device_event
                        .store_u16(EVENT_FLAGS, EVENT_DESC, Ordering::Release)
                })
        } else {
            self.device_event
                .store_u16(EVENT_FLAGS, EVENT_ENABLE, Ordering::Relaxed)
        };
        self.log_device_event();
        fence(Ordering::SeqCst);
        r.is_none() || self.has_available().unwrap_or(true)
    }

    pub(in crate::vhost_user) fn set_event_idx(&mut self, on: bool) {
        self.features.event_idx = on;
    }

    pub(in crate::vhost_user) fn disable_notification(&mut self) {
        let _ = self
            .device_event
            .store_u16(EVENT_FLAGS, EVENT_DISABLE, Ordering::Relaxed);
        self.log_device_event();
    }
}
