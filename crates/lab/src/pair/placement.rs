//! The line probe beside a pair's rate iterations (knob
//! `placement_probe`): started before the warm-up, so making and pinning
//! its threads does not fall in the measured window, and read over that
//! window second by second, aligned with the iteration's per-second rates.

use std::time::{Duration, Instant};

use vnio_measure::placement::{LineProbe, LineRoundTrips};

/// A probe running beside one iteration.
pub(super) struct Beside {
    probe: LineProbe,
    cpus: [usize; 2],
}

impl Beside {
    /// Starts the probe between `cpus` (the switch's and the client's).
    pub(super) fn start(cpus: [usize; 2]) -> Result<Beside, String> {
        let probe = LineProbe::start(cpus[0], cpus[1]).map_err(|e| {
            format!(
                "placement probe between CPUs {} and {}: {e}",
                cpus[0], cpus[1]
            )
        })?;
        Ok(Beside { probe, cpus })
    }

    /// Stops the probe and keeps what it saw over the measured window
    /// that began at `window` and lasted `length`.
    pub(super) fn finish(self, window: Instant, length: Duration) -> LineRoundTrips {
        let from = window.saturating_duration_since(self.probe.started());
        let samples = self.probe.stop();
        LineRoundTrips::over(self.cpus, &samples, from, length)
    }
}
