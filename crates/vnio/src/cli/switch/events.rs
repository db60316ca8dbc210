//! `vnio switch events`: the switch's events as they happen, one line each
//! (or the switch's JSON lines with `--json`), until the switch closes the
//! stream or Ctrl-C ends the command.

use std::io::Write;
use vnio_switch::control::Client;
use vnio_switch::events::{EventLine, Streamed, What};

/// VIRTIO_F_RING_PACKED.
const RING_PACKED: u64 = 1 << 34;

/// Streams events to stdout.
pub fn run(client: Client, json: bool) -> anyhow::Result<()> {
    let mut events = client.events()?;
    let mut out = std::io::stdout().lock();
    while let Some(s) = events.next_event()? {
        let line = if json {
            serde_json::to_string(&s)?
        } else {
            human(&s)
        };
        // A closed stdout (a pipe's reader gone) ends the command quietly.
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

/// One line for a person: UTC time of day, number, port, what happened.
fn human(s: &Streamed) -> String {
    let e = match s {
        Streamed::Lost { lost } => return format!("({lost} events lost: read too slowly)"),
        Streamed::Event(e) => e,
    };
    format!("{} #{} {}: {}", clock(e), e.seq, e.port, what(e))
}

fn clock(e: &EventLine) -> String {
    let ms = e.wall_ns / 1_000_000;
    let day = ms % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    )
}

fn what(e: &EventLine) -> String {
    match &e.what {
        What::Connected => "front-end connected".into(),
        What::Negotiated {
            features,
            protocol_features,
            queue_pairs,
            ring_size,
        } => format!(
            "negotiated features {features:#x}, protocol features {protocol_features:#x}, \
             {queue_pairs} queue pair(s), {} rings of {ring_size}",
            if features & RING_PACKED != 0 {
                "packed"
            } else {
                "split"
            }
        ),
        What::Reset { reason } => format!("reset: {reason}"),
        What::Disconnected => "front-end disconnected".into(),
        What::Queue { queue, enabled } => format!(
            "{} queue {} {}",
            if queue % 2 == 0 {
                "receive"
            } else {
                "transmit"
            },
            queue / 2,
            if *enabled { "started" } else { "stopped" }
        ),
        What::Link { up } => format!("carrier {}", if *up { "up" } else { "down" }),
        What::PortAdded => "port added".into(),
        What::PortRemoved => "port removed".into(),
        What::PortChanged => "port's policies changed".into(),
        What::MacFlap { mac, from } => {
            format!("address {mac} flapped: {from} took it, it stays here")
        }
        What::MacMoved { mac, vid, from } => {
            format!("address {mac} (VLAN {vid}) moved here from {from}")
        }
        What::Drops {
            reason,
            per_sec,
            threshold,
            above,
        } => {
            if *above {
                format!("{reason} drops at {per_sec}/s, above {threshold}/s")
            } else {
                format!("{reason} drops back at {per_sec}/s (at most {threshold}/s)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_name_what_happened() {
        let e: Streamed = serde_json::from_str(
            r#"{"seq":3,"wall_ns":3723004000000,"mono_ns":1,"port":"vm1","port_id":1,"event":"queue","queue":1,"enabled":true}"#,
        )
        .unwrap();
        assert_eq!(human(&e), "01:02:03.004 #3 vm1: transmit queue 0 started");
        assert_eq!(
            human(&Streamed::Lost { lost: 5 }),
            "(5 events lost: read too slowly)"
        );
    }
}
