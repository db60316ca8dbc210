//! Where a worker's time goes, one counter read per round: the round's
//! cost ([`WorkerPerf`]), the time its frames stayed in the switch
//! (`crate::dwell`), and the read-ahead choice made from those costs.

use super::read_ahead::{ReadAhead, ReadAheadMode};
use crate::perf::{clock, WorkerPerf};
use std::sync::Arc;

/// The data path's round clock.
pub(super) struct RoundClock {
    /// Where this worker's time goes (read by the control plane).
    pub(super) perf: Arc<WorkerPerf>,
    /// The counter when the last round ended, or the worker resumed
    /// polling ([`RoundClock::resume`]): a round's cost is the time since.
    mark: u64,
    /// The counter read that ended the last busy round's forwarding: it
    /// times that round's frames in the switch and ends its accounting.
    end: u64,
    /// Whether transmit bursts are read ahead (measured when `Auto`).
    read_ahead: ReadAhead,
    /// Whether each round's time in the switch is recorded.
    time_in_switch: bool,
}

impl RoundClock {
    pub(super) fn new() -> Self {
        Self {
            perf: Arc::default(),
            mark: clock(),
            end: 0,
            read_ahead: ReadAhead::new(ReadAheadMode::Off),
            time_in_switch: true,
        }
    }

    pub(super) fn set_read_ahead(&mut self, mode: ReadAheadMode) {
        self.read_ahead = ReadAhead::new(mode);
    }

    pub(super) fn set_time_in_switch(&mut self, on: bool) {
        self.time_in_switch = on;
    }

    /// Whether this round's transmit bursts are read ahead.
    #[inline]
    pub(super) fn read_ahead(&self) -> bool {
        self.read_ahead.on()
    }

    /// The worker is back from waiting for events and the work they
    /// brought: that time is not the next round's.
    pub(super) fn resume(&mut self) {
        self.mark = clock();
    }

    /// Every frame of a round that did `work` is published: they stayed in
    /// the switch at most since the round began. The cycles to record as
    /// their time in the switch (0: none, or not recorded). The counter is
    /// read for the round's accounting in any case.
    #[inline]
    pub(super) fn forwarded(&mut self, work: usize) -> u64 {
        if work == 0 {
            return 0;
        }
        self.end = clock();
        if self.time_in_switch {
            self.end.wrapping_sub(self.mark)
        } else {
            0
        }
    }

    /// Ends a round that did `work`: its cost counted, the read-ahead
    /// choice told.
    #[inline]
    pub(super) fn end_round(&mut self, work: usize) {
        // A busy round read the counter before its calls (`forwarded`).
        let end = if work > 0 { self.end } else { clock() };
        let cycles = end.wrapping_sub(self.mark);
        self.perf.round(cycles, work, self.read_ahead.on());
        self.read_ahead.round(cycles, work);
        self.mark = end;
    }
}
