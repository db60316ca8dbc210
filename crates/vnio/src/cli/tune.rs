//! `vnio tune`: renders what `vnio_tune` computes.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use vnio_tune::apply::{RevertAction, RevertReport};
use vnio_tune::journal::{EntryState, Journal};
use vnio_tune::{Audit, Finding, Host, Profile, TuneError};

/// Arguments of `vnio tune`.
#[derive(Parser)]
pub struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Read (and write) files under DIR instead of / (for tests and for
    /// inspecting a copy of another machine's /proc and /sys).
    #[arg(long, value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Read every knob and compare it with a profile (read-only). Exit code:
    /// 0 nothing differs, 2 something differs, 1 error.
    Audit {
        /// latency, throughput or balanced.
        #[arg(long, default_value = "latency")]
        profile: Profile,
        /// Show why, trade-off, how and notes for every knob.
        #[arg(long, short)]
        verbose: bool,
        /// Leave these knobs out (ids, comma-separated), e.g. what a CI
        /// machine cannot change.
        #[arg(long, value_name = "ID,...", value_delimiter = ',')]
        skip: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Describe knobs: what, why, trade-off, target per profile, how.
    Explain {
        /// A knob id (all knobs when absent).
        knob: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make the runtime changes of a profile, journaling each before it is
    /// made. Exit code: 0 all applied, 1 a write failed or error.
    Apply {
        /// latency, throughput or balanced.
        #[arg(long)]
        profile: Profile,
        /// Show what would change, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Leave these knobs untouched (ids, comma-separated).
        #[arg(long, value_name = "ID,...", value_delimiter = ',')]
        skip: Vec<String>,
        /// Journal file [env: VNIO_TUNE_JOURNAL; default /var/lib/vnio/tune-journal.json].
        #[arg(long, value_name = "PATH")]
        journal: Option<PathBuf>,
        #[command(flatten)]
        common: Common,
    },
    /// Restore every journaled change, audit again and show what (if
    /// anything) is left changed. Exit code: 0 all restored, 2 something
    /// remains changed, 1 error.
    Revert {
        /// Journal file [env: VNIO_TUNE_JOURNAL; default /var/lib/vnio/tune-journal.json].
        #[arg(long, value_name = "PATH")]
        journal: Option<PathBuf>,
        /// Read and write files under DIR (default: the root the journal was made under).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Probes: clock read cost, wake-up lateness, loopback UDP round trip.
    Measure {
        /// Seconds for the wake-up probe and for the round-trip probe, each.
        #[arg(long, default_value_t = 2.0)]
        duration: f64,
        /// Wake-up period in microseconds.
        #[arg(long, default_value_t = 1000)]
        interval_us: u64,
        /// UDP payload in bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Run the wake-up probe as SCHED_FIFO with this priority (1-99;
        /// needs root), as `cyclictest -p` does.
        #[arg(long, value_name = "PRIO", value_parser = clap::value_parser!(i32).range(1..=99))]
        fifo: Option<i32>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Hold a PM QoS CPU latency request (/dev/cpu_dma_latency) while this
    /// process runs; it ends when the process does.
    HoldPmQos {
        /// Exit latency limit in microseconds.
        #[arg(long, default_value_t = 1)]
        latency_us: i32,
        /// Hold for this many seconds, then exit (default: until killed).
        #[arg(long = "for", value_name = "SECS")]
        hold_for: Option<f64>,
    },
}

/// Runs `vnio tune`; returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    // `vnio tune audit | head` ends quietly, as C tools do.
    vnio_tune::sys::default_sigpipe();
    match args.command {
        Cmd::Audit {
            profile,
            verbose,
            skip,
            common,
        } => {
            vnio_tune::knobs::check_ids(&skip).map_err(anyhow::Error::msg)?;
            let host = Host::with_root(&common.root);
            let audit = vnio_tune::audit::audit_skipping(&host, profile, &skip);
            if common.json {
                println!("{}", serde_json::to_string_pretty(&audit)?);
            } else {
                print_audit(&audit, verbose);
            }
            Ok(audit.exit_code())
        }
        Cmd::Explain { knob, json } => explain(knob.as_deref(), json),
        Cmd::Apply {
            profile,
            dry_run,
            skip,
            journal,
            common,
        } => {
            vnio_tune::knobs::check_ids(&skip).map_err(anyhow::Error::msg)?;
            let host = Host::with_root(&common.root);
            let path = journal.unwrap_or_else(vnio_tune::journal::default_path);
            let report = vnio_tune::apply::apply_skipping(&host, profile, &path, dry_run, &skip)?;
            if common.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_apply(&report, profile, dry_run);
            }
            Ok(if report.failures() > 0 { 1 } else { 0 })
        }
        Cmd::Revert {
            journal,
            root,
            json,
        } => revert(journal, root, json),
        Cmd::Measure {
            duration,
            interval_us,
            size,
            fifo,
            json,
        } => {
            anyhow::ensure!(
                duration > 0.0 && duration <= 600.0,
                "--duration must be in (0, 600] seconds"
            );
            let opts = vnio_tune::measure::MeasureOptions {
                duration: Duration::from_secs_f64(duration),
                interval: Duration::from_micros(interval_us),
                size,
                fifo,
            };
            let m = vnio_tune::measure::measure(opts)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
            } else {
                print_measurement(&m);
            }
            Ok(0)
        }
        Cmd::HoldPmQos {
            latency_us,
            hold_for,
        } => hold_pm_qos(latency_us, hold_for),
    }
}

/// What `apply` changed (or would), its journal and what it left alone.
fn print_apply(report: &vnio_tune::apply::ApplyReport, profile: Profile, dry_run: bool) {
    let verb = if dry_run { "would change" } else { "changed" };
    if report.entries.is_empty() {
        println!(
            "nothing to change at runtime for profile {}",
            profile.name()
        );
    }
    for e in &report.entries {
        let state = match &e.state {
            EntryState::Pending => String::new(),
            EntryState::Applied { read_back } => format!("  (reads {read_back})"),
            EntryState::Failed { error } => format!("  FAILED: {error}"),
        };
        println!(
            "{verb} {:<18} {}: {:?} -> {:?}{state}",
            e.knob,
            e.path,
            e.before.trim(),
            e.to
        );
    }
    if let Some(j) = &report.journal {
        println!(
            "journal: {} (undo with `vnio tune revert --journal {}`)",
            j.display(),
            j.display()
        );
    }
    if !report.not_applied.is_empty() {
        println!("\nnot applied (differ from the profile, change by hand):");
        for n in &report.not_applied {
            println!("  {:<18} [{}] {}", n.knob, kind_name(n.kind), n.how);
        }
    }
}

/// `vnio tune revert`: undoes the journal's changes, on the root it
/// names unless `--root` says otherwise.
fn revert(journal: Option<PathBuf>, root: Option<PathBuf>, json: bool) -> anyhow::Result<i32> {
    let path = journal.unwrap_or_else(vnio_tune::journal::default_path);
    let root = match root {
        Some(r) => r,
        None => match Journal::load(&path) {
            Ok(j) => PathBuf::from(j.root),
            Err(TuneError::NoJournal(p)) => {
                println!("no journal at {}: nothing to revert", p.display());
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        },
    };
    let report = vnio_tune::apply::revert(&Host::with_root(root), &path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_revert(&report);
    }
    Ok(if report.clean() { 0 } else { 2 })
}

/// The clock read cost, wake-up lateness and loopback UDP round trips.
fn print_measurement(m: &vnio_tune::measure::Measurement) {
    let us = |ns: u64| ns as f64 / 1000.0;
    println!(
        "clock read     {:.1} ns per clock_gettime(CLOCK_MONOTONIC) (median of {} batches of {})",
        m.clock.median_ns, m.clock.batches, m.clock.reads_per_batch
    );
    let w = &m.wakeup.lateness;
    println!(
        "wake-up        lateness p50 {:.1} us  p99 {:.1} us  max {:.1} us  ({} wake-ups, every {} us, {})",
        us(w.p50_ns),
        us(w.p99_ns),
        us(w.max_ns),
        w.samples,
        m.wakeup.interval_us,
        m.wakeup.fifo_priority.map_or("normal priority".to_string(), |p| format!("SCHED_FIFO {p}"))
    );
    let r = &m.udp_rr.rtt;
    println!(
        "udp rr (lo)    rtt p50 {:.1} us  p99 {:.1} us  max {:.1} us  ({} round trips of {} B, {} lost)",
        us(r.p50_ns),
        us(r.p99_ns),
        us(r.max_ns),
        r.samples,
        m.udp_rr.size,
        m.udp_rr.lost
    );
}

/// `vnio tune hold-pm-qos`: holds the request for `hold_for` seconds, or
/// until killed.
fn hold_pm_qos(latency_us: i32, hold_for: Option<f64>) -> anyhow::Result<i32> {
    let host = Host::live();
    let hold = vnio_tune::pmqos::hold(&host, latency_us)?;
    eprintln!(
        "holding a PM QoS CPU latency request of {} us; it ends when this process exits",
        hold.latency_us
    );
    match hold_for {
        Some(s) => std::thread::sleep(Duration::from_secs_f64(s.max(0.0))),
        None => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
    }
    drop(hold);
    Ok(0)
}

fn kind_name(k: vnio_tune::ApplyKind) -> &'static str {
    match k {
        vnio_tune::ApplyKind::Runtime => "runtime",
        vnio_tune::ApplyKind::Reboot => "needs reboot",
        vnio_tune::ApplyKind::Process => "held by a process",
        vnio_tune::ApplyKind::Manual => "manual",
        vnio_tune::ApplyKind::None => "none",
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n.saturating_sub(3)).collect();
        format!("{t}...")
    }
}

fn print_audit(audit: &Audit, verbose: bool) {
    println!(
        "vnio tune audit: profile {}, root {}, euid {}{}",
        audit.profile.name(),
        audit.root,
        audit.euid,
        match audit.virtualized {
            Some(true) => ", virtualized",
            Some(false) => ", bare metal",
            None => "",
        }
    );
    println!(
        "{:<11} {:<24} {:<10} {:<62} RECOMMENDED",
        "STATUS", "KNOB", "LAYER", "CURRENT"
    );
    for f in &audit.findings {
        print_finding(f, verbose);
    }
    let s = &audit.summary;
    println!(
        "\n{} ok, {} differ, {} info, {} not visible, {} unreadable{}",
        s.ok,
        s.differs,
        s.info,
        s.not_visible,
        s.unreadable,
        if audit.euid != 0 {
            " (not root: some knobs cannot be read)"
        } else {
            ""
        }
    );
}

fn print_finding(f: &Finding, verbose: bool) {
    let (cur, rec) = if verbose {
        (f.current.clone(), f.recommended.clone())
    } else {
        (clip(&f.current, 62), clip(&f.recommended, 60))
    };
    println!(
        "{:<11} {:<24} {:<10} {:<62} {}",
        f.status.name(),
        f.id,
        f.layer.name(),
        cur,
        rec
    );
    if verbose {
        println!("            why: {}", f.why);
        println!("            trade-off: {}", f.tradeoff);
        println!(
            "            apply [{}]: {}",
            kind_name(f.apply.kind),
            f.apply.how
        );
        for n in &f.notes {
            println!("            note: {n}");
        }
        for c in &f.changes {
            println!(
                "            change: {} <- {:?} (restore {:?})",
                c.path, c.to, c.restore
            );
        }
    }
}

fn explain(id: Option<&str>, json: bool) -> anyhow::Result<i32> {
    let knobs: Vec<&vnio_tune::Knob> = match id {
        Some(id) => match vnio_tune::knobs::find(id) {
            Some(k) => vec![k],
            None => {
                let ids: Vec<&str> = vnio_tune::knobs::catalogue().iter().map(|k| k.id).collect();
                anyhow::bail!("no knob {id:?}; knobs: {}", ids.join(", "));
            }
        },
        None => vnio_tune::knobs::catalogue(),
    };
    if json {
        let v: Vec<serde_json::Value> = knobs
            .iter()
            .map(|k| {
                serde_json::json!({
                    "id": k.id, "title": k.title, "layer": k.layer,
                    "reads": k.reads,
                    "recommended": {"latency": k.targets.latency, "throughput": k.targets.throughput, "balanced": k.targets.balanced},
                    "why": k.why, "tradeoff": k.tradeoff,
                    "apply": {"kind": k.apply, "how": k.how, "revert": k.revert},
                    "volatile": k.volatile,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    for k in knobs {
        println!("{} ({}): {}", k.id, k.layer.name(), k.title);
        println!("  reads:      {}", k.reads);
        println!("  why:        {}", k.why);
        println!("  trade-off:  {}", k.tradeoff);
        for p in Profile::ALL {
            println!("  {:<11} {}", format!("{}:", p.name()), k.targets.get(p));
        }
        println!("  apply:      [{}] {}", kind_name(k.apply), k.how);
        println!("  revert:     {}", k.revert);
        println!();
    }
    Ok(0)
}

fn print_revert(r: &RevertReport) {
    for (e, action) in &r.entries {
        let what = match action {
            RevertAction::Restored => "restored".to_string(),
            RevertAction::Unchanged => "unchanged".to_string(),
            RevertAction::Failed(why) => format!("FAILED: {why}"),
        };
        println!("{:<18} {}: {:?} {what}", e.knob, e.path, e.before.trim());
    }
    if r.clean() {
        println!("re-audit: every knob reads as before apply; nothing left changed");
        if let Some(a) = &r.archived {
            println!("journal moved to {}", a.display());
        }
    } else {
        println!(
            "re-audit: left changed (journal kept at {} for another try):",
            r.journal.display()
        );
        for d in &r.remaining {
            println!("  {d}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("tune").chain(v.iter().copied()))
            .expect("arguments parse")
    }

    #[test]
    fn bad_arguments_are_refused() {
        let e = Args::try_parse_from(["tune", "audit", "--profile", "fast"])
            .err()
            .expect("bad profile");
        assert!(e.to_string().contains("unknown profile \"fast\""), "{e}");
        assert!(
            Args::try_parse_from(["tune", "apply"]).is_err(),
            "apply needs --profile"
        );
        assert!(run(args(&["explain", "no.such-knob"])).is_err());
        assert!(run(args(&["measure", "--duration", "0"])).is_err());
    }

    /// `vnio tune apply --profile latency --root R --journal J EXTRA...`.
    fn apply(r: &str, j: &str, extra: &[&str]) -> anyhow::Result<i32> {
        let mut a = vec!["apply", "--profile", "latency", "--root", r, "--journal", j];
        a.extend_from_slice(extra);
        run(args(&a))
    }

    #[test]
    fn audit_apply_revert_exit_codes_on_a_fake_root() {
        let root = std::env::temp_dir().join(format!("vnio-cli-tune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let core = root.join("proc/sys/net/core");
        std::fs::create_dir_all(&core).expect("mkdir");
        std::fs::write(core.join("busy_poll"), "0\n").expect("write");
        std::fs::write(core.join("busy_read"), "0\n").expect("write");
        let r = root.to_str().expect("utf-8 path");
        let journal = root.join("journal.json");
        let j = journal.to_str().expect("utf-8 path");

        assert_eq!(
            run(args(&["audit", "--root", r, "--json"])).expect("audit"),
            2,
            "busy polling off differs"
        );
        assert_eq!(
            run(args(&[
                "audit",
                "--root",
                r,
                "--skip",
                "net.busy-poll,mem.thp"
            ]))
            .expect("audit"),
            0,
            "nothing else differs"
        );
        assert!(run(args(&["audit", "--root", r, "--skip", "no.such"])).is_err());
        assert_eq!(
            apply(r, j, &["--skip", "net.busy-poll"]).expect("apply nothing"),
            0
        );
        assert!(!journal.exists(), "nothing applied, no journal");
        assert_eq!(apply(r, j, &["--dry-run"]).expect("dry"), 0);
        assert!(!journal.exists());
        assert_eq!(apply(r, j, &[]).expect("apply"), 0);
        assert_eq!(
            std::fs::read_to_string(core.join("busy_poll")).expect("read"),
            "50"
        );
        assert_eq!(
            run(args(&["audit", "--root", r])).expect("audit"),
            0,
            "nothing differs after apply"
        );
        assert!(apply(r, j, &[]).is_err(), "journal exists");
        assert_eq!(run(args(&["revert", "--journal", j])).expect("revert"), 0);
        assert_eq!(
            std::fs::read_to_string(core.join("busy_poll")).expect("read"),
            "0\n"
        );
        assert_eq!(
            run(args(&["revert", "--journal", j])).expect("nothing to revert"),
            0
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
