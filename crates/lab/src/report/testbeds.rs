//! The testbeds of a stored scenario as they were built: each
//! configuration's wire, hosts (kind, address, interface, namespace,
//! machine, guest) and notes, as one collapsed table of the report.

use std::fmt::Write;

use super::escape;
use crate::outcome::BedDescription;

/// The table, appended to `h`.
pub(super) fn html(h: &mut String, testbeds: &[BedDescription]) {
    h.push_str("<details><summary>Testbeds as built</summary><table><tr><th class=\"l\">configuration</th><th class=\"l\">wire</th><th class=\"l\">hosts</th><th class=\"l\">notes</th></tr>\n");
    for b in testbeds {
        let hosts: Vec<String> = b
            .hosts
            .iter()
            .map(|d| {
                format!(
                    "{} ({}, {}{}{}{})",
                    d.name,
                    d.kind.as_str(),
                    d.addr,
                    d.ifname
                        .as_ref()
                        .map(|i| format!(" on {i}"))
                        .unwrap_or_default(),
                    d.netns
                        .as_ref()
                        .map(|n| format!(", netns {n}"))
                        .into_iter()
                        .chain(d.machine.as_ref().map(|m| format!(", on machine {m}")))
                        .collect::<String>(),
                    d.guest
                        .as_ref()
                        .map(|g| format!(
                            ", {} guest on {}, agent ready {:.1} s after QEMU started",
                            g.accel.to_uppercase(),
                            g.nic,
                            g.ready_s
                        ))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            escape(&b.configuration),
            b.wire.as_str(),
            escape(&hosts.join("; ")),
            escape(&b.notes.join("; "))
        );
    }
    h.push_str("</table></details>\n");
}
