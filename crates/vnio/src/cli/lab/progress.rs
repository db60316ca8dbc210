//! The progress of `vnio lab run` on stderr: one bar over all points, the
//! point in progress, notes and failures above it, and each scenario's
//! results table on stdout when it ends.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use vnio_lab::report;
use vnio_lab::runner::{Event, Observer, Status};
use vnio_lab::session::Progress;
use vnio_lab::store::StoredScenario;

use super::render::text_table;

/// Progress bars on stderr; hidden when stderr is not a terminal.
pub struct Bars {
    pub bar: ProgressBar,
    scenario: std::sync::Mutex<String>,
    point: std::sync::Mutex<String>,
}

impl Bars {
    pub fn new(total: u64) -> Bars {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} points (eta {eta}) {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Bars {
            bar,
            scenario: Default::default(),
            point: Default::default(),
        }
    }

    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Observer for Bars {
    fn event(&self, e: Event<'_>) {
        let scenario = self.scenario.lock().map(|s| s.clone()).unwrap_or_default();
        match e {
            Event::Building { configuration } => {
                self.bar
                    .set_message(format!("{scenario}: building {configuration}"));
            }
            Event::PointStarted { point } => {
                let sweep = point
                    .sweep
                    .map(|(p, v)| format!(" @ {}", report::sweep_value(p, v)))
                    .unwrap_or_default();
                let label = format!(
                    "{scenario}: {} {}{sweep}",
                    point.configuration, point.workload.name
                );
                self.bar.set_message(label.clone());
                if let Ok(mut p) = self.point.lock() {
                    *p = label;
                }
            }
            Event::Progress(msg) => {
                let point = self.point.lock().map(|p| p.clone()).unwrap_or_default();
                self.bar.set_message(format!("{point} ({msg})"));
            }
            Event::PointFinished { outcome } => {
                self.bar.inc(1);
                if outcome.status == Status::Failed {
                    self.say(format!(
                        "vnio lab: {scenario}: {} {} failed: {}",
                        outcome.point.configuration,
                        outcome.point.workload.name,
                        outcome.error.as_deref().unwrap_or("?")
                    ));
                }
            }
            Event::TearingDown { configuration } => {
                self.bar
                    .set_message(format!("{scenario}: tearing down {configuration}"));
            }
            Event::Repeating {
                repetition,
                cap,
                points,
                why,
            } => {
                self.bar.inc_length(points as u64);
                self.say(format!(
                    "vnio lab: {scenario}: repetition {repetition} of at most {cap}: {why}"
                ));
            }
            Event::Note(line) => self.say(format!("vnio lab: {scenario}: {line}")),
        }
    }
}

impl Progress for Bars {
    fn note(&self, line: &str) {
        self.say(line.to_owned());
    }

    fn scenario_started(&self, name: &str) {
        if let Ok(mut s) = self.scenario.lock() {
            name.clone_into(&mut s);
        }
    }

    fn scenario_finished(&self, sc: &StoredScenario) {
        self.bar
            .suspend(|| print!("{}", text_table(&sc.name, &sc.title, &sc.points)));
    }
}
