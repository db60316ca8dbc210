//! Dropping off the workers what is slow to drop: a front-end's guest
//! memory and dirty log. Unmapping tens of GiB (page tables torn down, a
//! TLB shootdown on every core the worker ran on) takes milliseconds; on a
//! worker that is a pause in every other port's forwarding. A worker hands
//! such a value to [`retire`] and goes on; one thread, started on first
//! use, drops what it is given, in order.
//!
//! What is retired must not be needed again by name: a socket path, a tap
//! interface (a re-added port of the same name would race its own past).
//! Only mappings and the descriptors behind them come here.

use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

type Gone = Box<dyn Send>;

/// The reaper's thread name.
pub const THREAD: &str = "vnio-reaper";

static REAPER: OnceLock<Option<Sender<Gone>>> = OnceLock::new();

/// Drops `t` on the reaper's thread (inline when it could not start, which
/// is said once).
pub fn retire<T: Send + 'static>(t: T) {
    match REAPER.get_or_init(start) {
        Some(tx) => {
            if let Err(back) = tx.send(Box::new(t)) {
                drop(back.0);
            }
        }
        None => drop(t),
    }
}

/// Returns once everything retired before the call is dropped.
pub fn flush() {
    let (tx, rx) = channel::<()>();
    retire(Signal(tx));
    let _ = rx.recv();
}

/// Says it was dropped.
struct Signal(Sender<()>);

impl Drop for Signal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

fn start() -> Option<Sender<Gone>> {
    let (tx, rx) = channel::<Gone>();
    let spawned = std::thread::Builder::new()
        .name(THREAD.into())
        .spawn(move || rx.into_iter().for_each(drop));
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            log::warn!("switch: no {THREAD} thread ({e}): guest memory is unmapped on the workers");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Where(Arc<Mutex<Option<String>>>);

    impl Drop for Where {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            *self.0.lock().unwrap() = name;
        }
    }

    #[test]
    fn what_is_retired_is_dropped_on_the_reaper_in_order() {
        let seen = Arc::new(Mutex::new(None));
        retire(Where(seen.clone()));
        flush();
        assert_eq!(seen.lock().unwrap().as_deref(), Some(THREAD));
    }
}
