//! A minimal stderr logger for the daemon (one line per record, with the
//! time since start), installed by `vnio switch --config`.

pub use log::LevelFilter;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

struct Stderr {
    start: Instant,
    level: log::LevelFilter,
}

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= self.level
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let t = self.start.elapsed();
            let _ = writeln!(
                std::io::stderr(),
                "[{:>6}.{:03}] {:<5} {}",
                t.as_secs(),
                t.subsec_millis(),
                r.level(),
                r.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: OnceLock<Stderr> = OnceLock::new();

/// Installs the logger at `level` (no effect when a logger is already set).
pub fn init(level: log::LevelFilter) {
    let l = LOGGER.get_or_init(|| Stderr {
        start: Instant::now(),
        level,
    });
    if log::set_logger(l).is_ok() {
        log::set_max_level(level);
    }
}
