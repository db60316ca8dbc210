//! Whether a transmit burst's buffers are asked for (prefetched) as they
//! are popped: the read-ahead, chosen by measuring it.
//!
//! Its sign depends on where the host runs the switch's core and the
//! guest's: reading ahead raises the rate when the two cores share a
//! cache, and may lower it when they do not (docs/switch.md, "The
//! transmit read-ahead"); the host moves the two between those placements
//! every few seconds to minutes. So the worker
//! measures: every period it runs a short trial, slices of busy rounds
//! alternately without and with the read-ahead, compares the median frames
//! per cycle of each setting's slices, and keeps the faster setting until
//! the next trial. A trial is a thirty-second of the period, so at most
//! half of that runs the slower setting.
//!
//! The cycles counted are all of a slice's, idle rounds' too: the rate, not
//! the switch's own cost per frame. The two differ where it matters: when
//! the cores do not share a cache, the read-ahead can make the switch's
//! busy time per frame lower yet leave it idle longer, the guest's side
//! slowed down; a trial on busy cycles would choose it there, and lose.

use serde::{Deserialize, Serialize};

/// The read-ahead setting (`[switch] read_ahead`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadAheadMode {
    /// Measured and chosen by each worker, again every period.
    #[default]
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

/// Busy rounds in one slice of a trial: several ring-fulls, so the
/// guest's side runs at the slice's pace.
const SLICE: u32 = 128;
/// Slices in a trial, alternating off and on (an even number).
const TRIAL_SLICES: u32 = 16;
/// Busy rounds between two trials: a trial is a thirty-second of the
/// period.
const PERIOD: u32 = 32 * SLICE * TRIAL_SLICES;

/// One worker's read-ahead choice.
#[derive(Debug, Clone)]
pub struct ReadAhead {
    mode: ReadAheadMode,
    /// What the next burst does.
    on: bool,
    /// Busy rounds left in the current slice (or until the next trial).
    left: u32,
    /// The trial's slice under way; `TRIAL_SLICES` between trials.
    slice: u32,
    /// Each slice's cycles (all rounds') and frames in the trial so far:
    /// even slices without, odd ones with.
    cost: [(u64, u64); TRIAL_SLICES as usize],
}

impl ReadAhead {
    /// A worker's choice under `mode`; `Auto` starts with a trial.
    pub fn new(mode: ReadAheadMode) -> Self {
        Self {
            mode,
            on: mode == ReadAheadMode::On,
            left: SLICE,
            slice: 0,
            cost: [(0, 0); TRIAL_SLICES as usize],
        }
    }

    /// Whether the next transmit burst is read ahead.
    #[inline]
    pub fn on(&self) -> bool {
        self.on
    }

    /// A polling round took `cycles` and moved `frames`: counted toward
    /// the trial, and the setting moved on when a slice's busy rounds end.
    #[inline]
    pub fn round(&mut self, cycles: u64, frames: usize) {
        if self.mode != ReadAheadMode::Auto {
            return;
        }
        if let Some(c) = self.cost.get_mut(self.slice as usize) {
            c.0 += cycles;
            c.1 += frames as u64;
        }
        if frames == 0 {
            return;
        }
        self.left -= 1;
        if self.left == 0 {
            self.next_slice();
        }
    }

    /// The end of a slice, of a trial or of the period after one.
    #[cold]
    fn next_slice(&mut self) {
        if self.slice + 1 < TRIAL_SLICES {
            self.slice += 1;
            self.on = self.slice % 2 == 1;
            self.left = SLICE;
        } else if self.slice + 1 == TRIAL_SLICES {
            self.on = median_cost(&self.cost, 1) < median_cost(&self.cost, 0);
            self.slice = TRIAL_SLICES;
            self.left = PERIOD;
        } else {
            self.slice = 0;
            self.on = false;
            self.left = SLICE;
            self.cost = [(0, 0); TRIAL_SLICES as usize];
        }
    }
}

/// The median cycles per frame (the inverse of the rate) of the trial's
/// slices `first`, `first + 2`, ...: a median, so that a slice the worker
/// lost to something else (an interrupt, another thread on its core) does
/// not decide. A slice without frames counts as the costliest.
fn median_cost(cost: &[(u64, u64); TRIAL_SLICES as usize], first: usize) -> u64 {
    let mut per = [0u64; TRIAL_SLICES as usize / 2];
    for (p, &(c, f)) in per.iter_mut().zip(cost.iter().skip(first).step_by(2)) {
        *p = c.saturating_mul(256).checked_div(f).unwrap_or(u64::MAX);
    }
    per.sort_unstable();
    per[per.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `rounds` busy rounds of 32 frames, costing `off` or `on`
    /// cycles a frame by the setting; returns how many ran with it on.
    fn run(ra: &mut ReadAhead, rounds: u32, off: u64, on: u64) -> u32 {
        let mut with = 0;
        for _ in 0..rounds {
            let per = if ra.on() { on } else { off };
            with += u32::from(ra.on());
            ra.round(per * 32, 32);
        }
        with
    }

    #[test]
    fn auto_keeps_what_costs_less_and_trials_again_each_period() {
        let trial = SLICE * TRIAL_SLICES;
        let mut ra = ReadAhead::new(ReadAheadMode::Auto);
        // The trial: half the rounds with, half without.
        assert_eq!(run(&mut ra, trial, 100, 80), trial / 2);
        // Cheaper with: the whole period with.
        assert_eq!(run(&mut ra, PERIOD, 100, 80), PERIOD);
        // The placement changes: the next trial finds it costlier, and
        // the period after it runs without.
        assert_eq!(run(&mut ra, trial, 100, 130), trial / 2);
        assert!(!ra.on());
        assert_eq!(run(&mut ra, PERIOD, 100, 130), 0);
    }

    #[test]
    fn idle_rounds_cost_but_end_no_slice_and_fixed_modes_never_change() {
        let mut ra = ReadAhead::new(ReadAheadMode::Auto);
        for _ in 0..10 * SLICE {
            ra.round(1_000, 0);
        }
        assert!(!ra.on(), "an idle worker stays in the trial's first slice");
        // With the read-ahead the switch's busy rounds cost less, but it
        // waits longer between them: fewer frames per cycle, so it stays off.
        let mut ra = ReadAhead::new(ReadAheadMode::Auto);
        for _ in 0..SLICE * TRIAL_SLICES {
            let (busy, idle) = if ra.on() { (80, 60) } else { (100, 10) };
            ra.round(busy * 32, 32);
            ra.round(idle * 32, 0);
        }
        assert!(!ra.on());
        for (mode, on) in [(ReadAheadMode::On, true), (ReadAheadMode::Off, false)] {
            let mut ra = ReadAhead::new(mode);
            assert_eq!(
                run(&mut ra, 3 * PERIOD, 100, 10),
                if on { 3 * PERIOD } else { 0 }
            );
        }
    }

    #[test]
    fn a_slice_lost_to_something_else_does_not_decide() {
        let mut ra = ReadAhead::new(ReadAheadMode::Auto);
        let mut slices_with = 0;
        for _ in 0..SLICE * TRIAL_SLICES {
            let was = (ra.on(), ra.slice);
            // One slice with the read-ahead lost most of its time (the
            // first round after it began waited 1000 times as long).
            let lost = was.0 && ra.left == SLICE && slices_with == 0;
            slices_with += u32::from(lost);
            let per = if was.0 { 80 } else { 100 };
            ra.round(per * 32, 32);
            if lost {
                ra.round(per * 32 * 1000, 0);
            }
        }
        assert!(ra.on(), "7 of 8 slices say it is cheaper");
    }

    #[test]
    fn a_tie_or_no_frames_with_it_stays_off() {
        let mut ra = ReadAhead::new(ReadAheadMode::Auto);
        run(&mut ra, SLICE * TRIAL_SLICES, 100, 100);
        assert!(!ra.on());
    }

    #[test]
    fn modes_read_from_toml_words() {
        #[derive(Deserialize)]
        struct T {
            m: ReadAheadMode,
        }
        for (w, m) in [
            ("auto", ReadAheadMode::Auto),
            ("on", ReadAheadMode::On),
            ("off", ReadAheadMode::Off),
        ] {
            let t: T = toml::from_str(&format!("m = \"{w}\"")).unwrap();
            assert_eq!(t.m, m);
        }
        assert!(toml::from_str::<T>("m = \"sometimes\"").is_err());
    }
}
