//! The machines of a stored run in the report: where each configuration's
//! far hosts ran, and each machine's clock against the controller's.

use std::fmt::Write;

use crate::outcome::BedDescription;

/// An HTML table of the machines the testbeds used (empty without any).
pub fn html(testbeds: &[BedDescription], escape: impl Fn(&str) -> String) -> String {
    let mut h = String::new();
    if testbeds.iter().all(|b| b.machines.is_empty()) {
        return h;
    }
    h.push_str("<details open><summary>Machines and clocks</summary><table><tr><th class=\"l\">configuration</th><th class=\"l\">machine</th><th class=\"l\">reached at</th><th>clock offset (µs)</th><th>± (µs)</th><th>best round trip (µs)</th><th class=\"l\">one-way figures</th></tr>\n");
    for b in testbeds {
        for m in &b.machines {
            let (offset, plus, rtt, one_way) = match &m.clock {
                Some(c) => (
                    format!("{:.1}", c.offset_ns as f64 / 1e3),
                    format!("{:.1}", c.uncertainty_ns as f64 / 1e3),
                    format!("{:.1}", c.rtt_ns as f64 / 1e3),
                    format!(
                        "refused below {:.1} µs (the offset's uncertainty, {} exchanges)",
                        c.uncertainty_ns as f64 / 1e3,
                        c.samples
                    ),
                ),
                None => (
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "refused: no clock measured".into(),
                ),
            };
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{offset}</td><td>{plus}</td><td>{rtt}</td><td class=\"l\">{}</td></tr>",
                escape(&b.configuration),
                escape(&m.name),
                escape(&format!(
                    "ssh {} ({} on {}, from {}; vnio copied from {})",
                    m.ssh, m.address, m.interface, m.local_address, m.binary
                )),
                escape(&one_way)
            );
        }
    }
    h.push_str("</table><p>Round trips are timed on this machine's clock alone; a one-way figure between two machines needs their clock offset, and is refused when it is not larger than the offset's uncertainty.</p></details>\n");
    h
}
