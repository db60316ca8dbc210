//! vnio's switch's busy share beside a pair's probed rate iterations:
//! its workers' counters (`Request::Perf`, answered by the switch's
//! control thread from the workers' atomics, the workers not involved)
//! read at the measured window's start and once a second after, from a
//! thread of its own on the client's CPUs. Two readings a second apart
//! give that second's figures ([`per_second`]): whether the switch's
//! workers were busy nearly all of it (the switch's own time per frame
//! sets the rate) or waited for frames (the endpoints set it).
//!
//! Started before the warm-up, like the line probe, so connecting and
//! making the thread stay out of the window; told the window's start
//! when it begins ([`SwitchBusy::window`]), so each reading falls on one
//! of the window's whole seconds; finished with the window's start and
//! length, as the probe is, so second `s` of the figures is second `s` of
//! the window's per-second rates.

use std::path::Path;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vnio_measure::switch_seconds::SwitchSecond;
use vnio_switch::control::{Client, Request};
use vnio_switch::perf::PerfSnapshot;

/// Between two readings: one request a second at most, since the
/// switch's control thread answers it on the switch's CPU.
const PERIOD: Duration = Duration::from_secs(1);
/// How long after its instant a reading may be answered and still mark
/// it: a reading later than that would shift its seconds' figures, so
/// those seconds have none.
const LATE: Duration = Duration::from_millis(50);

/// The workers' counters read once.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    /// When the request was sent, from the sampler's start.
    asked: Duration,
    /// When its answer came.
    answered: Duration,
    /// Each worker's counters.
    workers: Vec<PerfSnapshot>,
}

/// What the sampler's thread is told.
enum Tell {
    /// The measured window began at this instant.
    Window(Instant),
    /// The window's last whole second ends at this reading (its index
    /// from the window's start): take it, then stop.
    Last(u64),
}

/// What the sampler's thread gives back.
#[derive(Default)]
struct Sampled {
    readings: Vec<Reading>,
    /// The first request that failed, if one did.
    error: Option<String>,
}

/// The switch's counters read beside one iteration.
pub(super) struct SwitchBusy {
    started: Instant,
    tell: Sender<Tell>,
    thread: JoinHandle<Sampled>,
}

impl SwitchBusy {
    /// Connects to the switch's control socket `control` and starts the
    /// sampler's thread, pinned to `cpus` (the client's: never the
    /// switch's); it reads nothing until told the window's start.
    pub(super) fn start(control: &Path, cpus: &[usize]) -> Result<SwitchBusy, String> {
        let client = Client::connect(control).map_err(|e| format!("the switch's counters: {e}"))?;
        let (tell, told) = channel();
        let started = Instant::now();
        let (cpus, path) = (cpus.to_vec(), control.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("switch-busy".into())
            .spawn(move || match crate::testbed::pin_self(&cpus) {
                Ok(()) => sample(Some(client), &path, started, &told),
                Err(e) => Sampled {
                    readings: Vec::new(),
                    error: Some(format!("the switch's counters: {e}")),
                },
            })
            .map_err(|e| format!("the switch's counters: {e}"))?;
        Ok(SwitchBusy {
            started,
            tell,
            thread,
        })
    }

    /// The measured window begins at `window`: a reading then and one
    /// each second after.
    pub(super) fn window(&self, window: Instant) {
        let _ = self.tell.send(Tell::Window(window));
    }

    /// Waits for the reading that ends the last whole second of the
    /// window that began at `window` and lasted `length` (at most
    /// [`LATE`] after it), stops the thread and gives each whole second's
    /// figures, with the first failed request's reason.
    pub(super) fn finish(
        self,
        window: Instant,
        length: Duration,
    ) -> (Vec<Option<SwitchSecond>>, Option<String>) {
        let seconds = length.as_secs();
        let _ = self.tell.send(Tell::Last(seconds));
        let sampled = self.thread.join().unwrap_or_else(|_| Sampled {
            readings: Vec::new(),
            error: Some("the switch's counters: the sampler's thread panicked".into()),
        });
        let from = window.saturating_duration_since(self.started);
        (
            per_second(&sampled.readings, from, seconds as usize),
            sampled.error,
        )
    }
}

/// The sampler's thread: once told the window's start, reads the
/// counters at each of its whole seconds until told the last one. A
/// reading whose instant has passed by more than [`LATE`] before the
/// thread got to it is not taken (its seconds have no figures either
/// way, and a request a second stays the most).
fn sample(
    mut client: Option<Client>,
    control: &Path,
    started: Instant,
    told: &Receiver<Tell>,
) -> Sampled {
    let mut out = Sampled::default();
    let window = match told.recv() {
        Ok(Tell::Window(w)) => w,
        _ => return out,
    };
    let mut last = u64::MAX;
    let mut k = 0u64;
    while k <= last {
        let due = window + PERIOD * k as u32;
        while let Some(wait) = due.checked_duration_since(Instant::now()) {
            match told.recv_timeout(wait) {
                Ok(Tell::Last(n)) => last = n,
                Ok(Tell::Window(_)) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return out,
            }
            if k > last {
                return out;
            }
        }
        let asked = Instant::now();
        if asked <= due + LATE {
            match read(&mut client, control) {
                Ok(workers) => out.readings.push(Reading {
                    asked: asked - started,
                    answered: started.elapsed(),
                    workers,
                }),
                Err(e) => {
                    out.error.get_or_insert(e);
                    // Out of step with its answers, or gone: the next
                    // reading connects again.
                    client = None;
                }
            }
        }
        k += 1;
    }
    out
}

/// The workers' counters, connecting first when `client` is none.
fn read(client: &mut Option<Client>, control: &Path) -> Result<Vec<PerfSnapshot>, String> {
    let why = |e: &dyn std::fmt::Display| format!("the switch's counters: {e}");
    if client.is_none() {
        *client = Some(Client::connect(control).map_err(|e| why(&e))?);
    }
    let c = client
        .as_mut()
        .ok_or("the switch's counters: no connection")?;
    let v = c.request(&Request::Perf).map_err(|e| why(&e))?;
    serde_json::from_value(v).map_err(|e| why(&e))
}

/// The reading that marks instant `at` (from the sampler's start): sent
/// at or after it and answered within [`LATE`] of it.
fn reading_at(readings: &[Reading], at: Duration) -> Option<&Reading> {
    readings
        .iter()
        .find(|r| r.asked >= at && r.answered <= at + LATE)
}

/// The figures of each of `seconds` whole seconds from `from` (offsets
/// from the sampler's start): second `s` from the readings that mark
/// `from + s` and `from + s + 1`; none for a second either is missing
/// from (not taken, failed, or late).
fn per_second(readings: &[Reading], from: Duration, seconds: usize) -> Vec<Option<SwitchSecond>> {
    let mark = |s: usize| reading_at(readings, from + PERIOD * s as u32);
    (0..seconds)
        .map(|s| {
            let (a, b) = (mark(s)?, mark(s + 1)?);
            between(&a.workers, &b.workers)
        })
        .collect()
}

/// The figures of the interval between two readings of the workers,
/// summed over the workers that forwarded frames in it (over all, when
/// none did); none when no worker is in both.
fn between(earlier: &[PerfSnapshot], later: &[PerfSnapshot]) -> Option<SwitchSecond> {
    let spans: Vec<PerfSnapshot> = later
        .iter()
        .filter_map(|l| {
            let e = earlier.iter().find(|e| e.worker == l.worker)?;
            Some(l.since(e))
        })
        .collect();
    if spans.is_empty() {
        return None;
    }
    let forwarding = spans.iter().any(|s| s.frames > 0);
    let counted = spans.iter().filter(|s| !forwarding || s.frames > 0);
    let (mut cycles, mut busy, mut busy_ns, mut rounds, mut frames) = (0u64, 0u64, 0.0, 0u64, 0u64);
    for s in counted {
        cycles += s.cycles;
        busy += s.busy_cycles;
        busy_ns += s.busy_cycles as f64 / s.figures().ticks_per_ns;
        rounds += s.busy_rounds;
        frames += s.frames;
    }
    Some(SwitchSecond {
        busy: (busy as f64 / cycles.max(1) as f64).min(1.0),
        frames,
        frames_per_busy_round: (rounds > 0).then(|| frames as f64 / rounds as f64),
        busy_ns_per_frame: (frames > 0).then(|| busy_ns / frames as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worker `worker`'s counters: `cycles` ticks in `nanos` ns, of which
    /// `busy` in `rounds` rounds that moved `frames` frames.
    fn counters(
        worker: u32,
        cycles: u64,
        nanos: u64,
        busy: u64,
        rounds: u64,
        frames: u64,
    ) -> PerfSnapshot {
        PerfSnapshot {
            worker,
            cycles,
            nanos,
            busy_cycles: busy,
            idle_cycles: cycles - busy,
            busy_rounds: rounds,
            idle_rounds: 7,
            frames,
            ..Default::default()
        }
    }

    fn at(asked_ms: u64, answered_ms: u64, workers: Vec<PerfSnapshot>) -> Reading {
        Reading {
            asked: Duration::from_millis(asked_ms),
            answered: Duration::from_millis(answered_ms),
            workers,
        }
    }

    #[test]
    fn a_second_counts_the_workers_that_forwarded() {
        // Worker 0 polls without frames; worker 1 forwards: 2 ticks a ns,
        // 1600 of 2000 ticks busy over 40 rounds and 800 frames.
        let earlier = [
            counters(0, 500, 250, 0, 0, 0),
            counters(1, 1000, 500, 100, 10, 100),
        ];
        let later = [
            counters(0, 2500, 1250, 0, 0, 0),
            counters(1, 3000, 1500, 1700, 50, 900),
        ];
        let s = between(&earlier, &later).unwrap();
        assert_eq!(s.frames, 800);
        assert!((s.busy - 0.8).abs() < 1e-9, "{s:?}");
        assert_eq!(s.frames_per_busy_round, Some(20.0));
        assert_eq!(s.busy_ns_per_frame, Some(1.0));
        // Both forwarding: summed over both.
        let later = [
            counters(0, 2500, 1250, 400, 20, 200),
            counters(1, 3000, 1500, 1700, 50, 900),
        ];
        let s = between(&earlier, &later).unwrap();
        assert_eq!(s.frames, 1000);
        assert!((s.busy - 2000.0 / 4000.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.frames_per_busy_round, Some(1000.0 / 60.0));
        assert_eq!(s.busy_ns_per_frame, Some(1000.0 / 1000.0));
    }

    #[test]
    fn a_second_without_frames_or_common_workers() {
        let earlier = [counters(0, 500, 250, 0, 0, 0)];
        let idle = between(&earlier, &[counters(0, 2500, 1250, 0, 0, 0)]).unwrap();
        assert_eq!(idle.busy, 0.0);
        assert_eq!(idle.frames, 0);
        assert_eq!(idle.frames_per_busy_round, None);
        assert_eq!(idle.busy_ns_per_frame, None);
        assert_eq!(between(&earlier, &[counters(3, 2500, 1250, 0, 0, 0)]), None);
        assert_eq!(between(&[], &[]), None);
    }

    #[test]
    fn readings_align_with_the_windows_whole_seconds() {
        // A window from 0.3 s, 4 whole seconds. Readings: at 0.3 s, at
        // 1.3 s, at 2.3 s answered late, at 3.3 s, none at 4.3 s but one
        // sent before its instant, which does not mark it either.
        let w = |k: u64| counters(1, 2000 * k, 1000 * k, 1500 * k, 30 * k, 600 * k);
        let readings = [
            at(300, 301, vec![w(0)]),
            at(1300, 1302, vec![w(1)]),
            at(2300, 2300 + LATE.as_millis() as u64 + 1, vec![w(2)]),
            at(3301, 3340, vec![w(3)]),
            at(4290, 4301, vec![w(4)]),
        ];
        let s = per_second(&readings, Duration::from_millis(300), 4);
        assert_eq!(s.len(), 4, "one entry per whole second");
        let first = s[0].unwrap();
        assert!((first.busy - 0.75).abs() < 1e-9, "{first:?}");
        assert_eq!(first.frames, 600);
        assert_eq!(first.frames_per_busy_round, Some(20.0));
        assert_eq!(first.busy_ns_per_frame, Some(1.25));
        assert_eq!(&s[1..], &[None, None, None]);
        // Shorter windows take what they have; none reads nothing.
        assert_eq!(
            per_second(&readings, Duration::from_millis(300), 1),
            vec![Some(first)]
        );
        assert!(per_second(&readings, Duration::ZERO, 0).is_empty());
        assert_eq!(per_second(&[], Duration::ZERO, 2), vec![None, None]);
    }
}
