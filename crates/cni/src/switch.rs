//! The switch's control socket, as the plugin uses it: one connection per
//! request, retried while the switch says it is busy (it serves 16
//! clients at once; a hundred pods starting together queue here) or is
//! restarting, then "try again later" (code 11) for the runtime to retry.

use crate::error::{CniError, SWITCH_REFUSED, TRY_AGAIN};
use std::path::Path;
use std::time::{Duration, Instant};
use vnio_switch::control::{Client, ClientError, Request};

/// How long a busy or restarting switch is waited for.
const PATIENCE: Duration = Duration::from_secs(15);

/// Sends `req`; the switch's answer, or why there is none.
pub fn call(control: &Path, req: &Request) -> Result<serde_json::Value, CniError> {
    let until = Instant::now() + PATIENCE;
    let mut pause = Duration::from_millis(5);
    loop {
        let r = Client::connect(control).and_then(|mut c| c.request(req));
        let retry = match &r {
            Ok(_) => false,
            Err(ClientError::Refused(m)) => m.starts_with("too many control clients"),
            Err(ClientError::Io { .. }) => true,
            Err(ClientError::Json(_)) => false,
        };
        if !retry || Instant::now() + pause >= until {
            return r.map_err(|e| match e {
                ClientError::Refused(m) => CniError::new(SWITCH_REFUSED, format!("switch: {m}")),
                e => CniError::new(TRY_AGAIN, "the vnio switch does not answer")
                    .details(vnio_switch::error_chain(&e)),
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Asks once, without waiting: STATUS's question.
pub fn answers(control: &Path) -> Result<(), CniError> {
    Client::connect(control)
        .and_then(|mut c| c.request(&Request::PortList))
        .map(drop)
        .map_err(|e| {
            CniError::new(
                crate::error::NOT_AVAILABLE,
                format!("the vnio switch at {} does not answer", control.display()),
            )
            .details(vnio_switch::error_chain(&e))
        })
}

/// The switch's listing of port `name`, if it has one.
pub fn port(control: &Path, name: &str) -> Result<Option<serde_json::Value>, CniError> {
    let l = call(control, &Request::PortList)?;
    Ok(l.as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .cloned())
}

/// Removes port `name`; one that is not there is fine.
pub fn del(control: &Path, name: &str) -> Result<(), CniError> {
    match call(control, &Request::PortDel { name: name.into() }) {
        Ok(_) => Ok(()),
        Err(e) if e.code == SWITCH_REFUSED && e.msg.contains(&format!("no port {name}")) => Ok(()),
        Err(e) => Err(e),
    }
}
