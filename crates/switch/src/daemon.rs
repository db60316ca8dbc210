//! The switch process: worker threads owning the data path (the shared one,
//! and one per latency-high port, see [`crate::workers`]), and a control
//! thread serving the Unix control socket. [`Switch::start`] is what
//! `vnio switch --config` runs; tests start it in-process.

use crate::config::{Config, PortSpec};
use crate::control::{Request, Response};
use crate::stats;
use crate::worker::PortInfo;
use crate::workers::Workers;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Why the switch could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Threads, sockets or eventfds could not be created.
    #[error("cannot start the switch")]
    Io(#[from] std::io::Error),
    /// The control socket could not be bound.
    #[error("cannot listen on the control socket {0}")]
    Control(PathBuf, #[source] std::io::Error),
    /// A configured port could not be added.
    #[error("port {0}: {1}")]
    Port(String, String),
    /// The metrics address could not be bound.
    #[error("cannot listen for metrics on {0}")]
    Metrics(std::net::SocketAddr, #[source] std::io::Error),
}

/// The control plane's handle on the workers (cheap to clone; every
/// request takes the registry's lock, which no worker ever takes).
#[derive(Clone)]
pub struct WorkerHandle {
    workers: Arc<Mutex<Workers>>,
}

impl WorkerHandle {
    fn with<T>(&self, f: impl FnOnce(&mut Workers) -> T) -> T {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut w)
    }

    /// Adds a port.
    pub fn add_port(&self, spec: PortSpec) -> Result<PortInfo, String> {
        self.with(|w| w.add_port(spec))
    }

    /// Removes a port.
    pub fn del_port(&self, name: &str) -> Result<(), String> {
        self.with(|w| w.del_port(name))
    }

    /// Changes a port's latency policies.
    pub fn set_port(
        &self,
        name: &str,
        set: crate::config::PolicyUpdate,
    ) -> Result<PortInfo, String> {
        self.with(|w| w.set_port(name, set))
    }

    /// Lists ports with their counters.
    pub fn list(&self) -> Result<Vec<PortInfo>, String> {
        self.with(|w| w.list())
    }

    /// The FDB.
    pub fn fdb(&self) -> Result<Vec<crate::fdb::FdbEntry>, String> {
        self.with(|w| w.fdb())
    }

    fn stop(&self) {
        self.with(|w| w.stop());
    }
}

/// A running switch.
pub struct Switch {
    handle: WorkerHandle,
    control: Option<JoinHandle<()>>,
    metrics: Option<JoinHandle<()>>,
    metrics_addr: Option<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
    control_path: PathBuf,
}

impl Switch {
    /// Starts the worker, adds the configured ports, and serves the control socket.
    pub fn start(config: Config) -> Result<Self, StartError> {
        // Before any worker pins itself: the watchdog keeps this thread's CPUs.
        crate::sys::watchdog::start();
        let handle = WorkerHandle {
            workers: Arc::new(Mutex::new(Workers::start(config.switch.clone())?)),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let path = config.switch.control.clone();
        let mut sw = Self {
            handle: handle.clone(),
            control: None,
            metrics: None,
            metrics_addr: None,
            stop: stop.clone(),
            control_path: path.clone(),
        };
        for p in config.ports {
            let name = p.name.clone();
            sw.handle
                .add_port(p)
                .map_err(|e| StartError::Port(name, e))?;
        }
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(&path);
        let listener =
            UnixListener::bind(&path).map_err(|e| StartError::Control(path.clone(), e))?;
        listener.set_nonblocking(true)?;
        let control = std::thread::Builder::new()
            .name("vnio-switch-control".into())
            .spawn(move || serve_control(listener, handle, stop))?;
        sw.control = Some(control);
        if let Some(addr) = config.switch.metrics_listen {
            let l = std::net::TcpListener::bind(addr).map_err(|e| StartError::Metrics(addr, e))?;
            l.set_nonblocking(true)?;
            sw.metrics_addr = Some(l.local_addr()?);
            let (h, st) = (sw.handle.clone(), sw.stop.clone());
            sw.metrics = Some(
                std::thread::Builder::new()
                    .name("vnio-switch-metrics".into())
                    .spawn(move || serve_metrics(l, h, st))?,
            );
        }
        Ok(sw)
    }

    /// Where the Prometheus endpoint listens, when configured.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr
    }

    /// The handle the control socket uses.
    pub fn handle(&self) -> &WorkerHandle {
        &self.handle
    }

    /// Blocks until a `shutdown` request arrives.
    pub fn wait(mut self) {
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
    }

    /// The control socket path.
    pub fn control_path(&self) -> &Path {
        &self.control_path
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(c) = self.control.take() {
            let _ = c.join();
        }
        if let Some(m) = self.metrics.take() {
            let _ = m.join();
        }
        self.handle.stop();
        let _ = std::fs::remove_file(&self.control_path);
    }
}

fn serve_control(listener: UnixListener, handle: WorkerHandle, stop: Arc<AtomicBool>) {
    let mut clients = Vec::<JoinHandle<()>>::new();
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                let (h, st) = (handle.clone(), stop.clone());
                if let Ok(t) = std::thread::Builder::new()
                    .name("vnio-switch-client".into())
                    .spawn(move || serve_client(s, h, st))
                {
                    clients.push(t);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                log::error!("control socket: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    for t in clients {
        let _ = t.join();
    }
}

/// Answers every HTTP request on `listener` with the Prometheus text.
fn serve_metrics(listener: std::net::TcpListener, handle: WorkerHandle, stop: Arc<AtomicBool>) {
    use std::io::Read;
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                // The request itself does not matter: read what came, answer.
                let mut req = [0u8; 1024];
                let _ = s.read(&mut req);
                let body = match handle.list() {
                    Ok(l) => metrics_text(l),
                    Err(e) => format!("# error: {e}\n"),
                };
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s
                    .write_all(head.as_bytes())
                    .and_then(|_| s.write_all(body.as_bytes()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn serve_client(s: UnixStream, handle: WorkerHandle, stop: Arc<AtomicBool>) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    let mut line = String::new();
    while !stop.load(Ordering::SeqCst) {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        let resp = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Shutdown) => {
                stop.store(true, Ordering::SeqCst);
                Response::ok(serde_json::Value::Null)
            }
            Ok(req) => answer(&handle, req),
            Err(e) => Response::err(format!("bad request: {e}")),
        };
        let mut out = serde_json::to_string(&resp)
            .unwrap_or_else(|_| r#"{"ok":false,"error":"unserializable"}"#.into());
        out.push('\n');
        if w.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

/// Answers one request through the worker.
pub fn answer(handle: &WorkerHandle, req: Request) -> Response {
    let to_json = |v: Result<serde_json::Value, String>| match v {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(e),
    };
    let j = |x: Result<serde_json::Value, serde_json::Error>| x.map_err(|e| e.to_string());
    match req {
        Request::PortAdd { port } => to_json(
            handle
                .add_port(port)
                .and_then(|i| j(serde_json::to_value(i))),
        ),
        Request::PortDel { name } => {
            to_json(handle.del_port(&name).map(|_| serde_json::Value::Null))
        }
        Request::PortSet { name, set } => to_json(
            handle
                .set_port(&name, set)
                .and_then(|i| j(serde_json::to_value(i))),
        ),
        Request::PortList => to_json(handle.list().and_then(|l| j(serde_json::to_value(l)))),
        Request::Stats { name } => to_json(handle.list().and_then(|l| {
            let l: Vec<_> = l
                .into_iter()
                .filter(|p| name.as_ref().map_or(true, |n| *n == p.name))
                .collect();
            if let (Some(n), true) = (&name, l.is_empty()) {
                return Err(format!("no port {n}"));
            }
            // Counters, with the policies in force next to them.
            let m: serde_json::Map<String, serde_json::Value> = l
                .into_iter()
                .map(|p| {
                    let mut v = serde_json::to_value(p.stats).unwrap_or_default();
                    if let Some(o) = v.as_object_mut() {
                        o.insert(
                            "policy".into(),
                            serde_json::to_value(p.policy).unwrap_or_default(),
                        );
                    }
                    (p.name, v)
                })
                .collect();
            Ok(serde_json::Value::Object(m))
        })),
        Request::Fdb => to_json(handle.fdb().and_then(|f| j(serde_json::to_value(f)))),
        Request::Metrics => to_json(
            handle
                .list()
                .map(|l| serde_json::Value::String(metrics_text(l))),
        ),
        Request::Shutdown => Response::ok(serde_json::Value::Null),
    }
}

/// The Prometheus text: counters, then each port's policies as an info
/// metric (labels carry the values) and its transmit busy-poll budget.
fn metrics_text(ports: Vec<PortInfo>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP vnio_switch_port_policy_info The latency policies in force on a port.\n# TYPE vnio_switch_port_policy_info gauge"
    );
    for p in &ports {
        let _ = writeln!(
            out,
            "vnio_switch_port_policy_info{{port=\"{}\",coalesce=\"{}\",lro=\"{}\",latency=\"{}\",core=\"{}\"}} 1",
            p.name,
            p.policy.coalesce,
            if p.policy.lro { "on" } else { "off" },
            p.policy.latency,
            p.policy.core.map(|c| c.to_string()).unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "# HELP vnio_switch_port_tx_poll_budget Empty rounds a port's transmit queue is polled before its guest kicks again.\n# TYPE vnio_switch_port_tx_poll_budget gauge"
    );
    for p in &ports {
        let _ = writeln!(
            out,
            "vnio_switch_port_tx_poll_budget{{port=\"{}\"}} {}",
            p.name, p.policy.tx_poll_budget
        );
    }
    let rows: Vec<_> = ports.into_iter().map(|p| (p.name, p.stats)).collect();
    stats::prometheus(&rows) + &out
}
