//! What runs beside a pair's rate iterations when the scenario asks for
//! the line probe (knob `placement_probe`): the probe between the
//! switch's and the client's CPUs, and on vnio's switch the reading of its
//! workers' counters ([`super::switch_busy`]). Both are started before the
//! warm-up, so making and pinning their threads does not fall in the
//! measured window, and read over that window second by second, aligned
//! with the iteration's per-second rates.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use vnio_measure::placement::{LineProbe, LineRoundTrips};
use vnio_measure::switch_seconds::SwitchSecond;

use super::switch_busy::SwitchBusy;
use crate::testbed::Testbed;

/// What to run beside each rate iteration of a point.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    /// The switch's and the client's CPUs, the probe's.
    cpus: [usize; 2],
    /// The client's CPUs, where the counters' reader runs.
    client_cpus: Vec<usize>,
    /// vnio's switch's control socket; none on other wires.
    control: Option<PathBuf>,
}

impl Watch {
    /// What `bed`'s knobs ask for; none without the probe.
    pub(super) fn of(bed: &Testbed) -> Option<Watch> {
        let knobs = &bed.description().knobs;
        Some(Watch {
            cpus: knobs.probe_cpus()?,
            client_cpus: knobs.client_cpus.clone().unwrap_or_default(),
            control: bed.switch_control(),
        })
    }

    /// Starts what runs beside one iteration. One that cannot start is
    /// left out, saying why in `errors`: the rate is measured all the
    /// same.
    pub(super) fn start(&self, errors: &mut Vec<String>) -> Beside {
        let probe = LineProbe::start(self.cpus[0], self.cpus[1])
            .map_err(|e| {
                errors.push(format!(
                    "placement probe between CPUs {} and {}: {e}",
                    self.cpus[0], self.cpus[1]
                ))
            })
            .ok();
        let busy = self.control.as_ref().and_then(|sock| {
            SwitchBusy::start(sock, &self.client_cpus)
                .map_err(|e| errors.push(e))
                .ok()
        });
        Beside {
            probe,
            cpus: self.cpus,
            busy,
        }
    }
}

/// What runs beside one iteration.
pub(super) struct Beside {
    probe: Option<LineProbe>,
    cpus: [usize; 2],
    busy: Option<SwitchBusy>,
}

/// What was seen beside one iteration's measured window.
pub(super) struct Seen {
    pub line_round_trip: Option<LineRoundTrips>,
    pub switch_seconds: Option<Vec<Option<SwitchSecond>>>,
}

impl Beside {
    /// The measured window begins at `window` (the counters are read then
    /// and each second after).
    pub(super) fn window(&self, window: Instant) {
        if let Some(b) = &self.busy {
            b.window(window);
        }
    }

    /// Stops both and keeps what they saw over the measured window that
    /// began at `window` and lasted `length`; a failed reading of the
    /// switch's counters says why in `errors`.
    pub(super) fn finish(
        self,
        window: Instant,
        length: Duration,
        errors: &mut Vec<String>,
    ) -> Seen {
        let line_round_trip = self.probe.map(|probe| {
            let from = window.saturating_duration_since(probe.started());
            let samples = probe.stop();
            LineRoundTrips::over(self.cpus, &samples, from, length)
        });
        let switch_seconds = self.busy.map(|b| {
            let (seconds, error) = b.finish(window, length);
            errors.extend(error);
            seconds
        });
        Seen {
            line_round_trip,
            switch_seconds,
        }
    }
}
