//! The switch process: worker threads owning the data path (the shared one,
//! and one per latency-high port, see [`crate::pool`]), and a control
//! thread serving the Unix control socket. [`Switch::start`] is what
//! `vnio switch --config` runs; tests start it in-process.

use crate::access::Access;
use crate::config::{Config, PortSpec};
use crate::control::{ControlError, Request, Response};
use crate::events::{EventQueue, Kind};
use crate::events_hub::Hub;
use crate::pool::Workers;
use crate::serve::{self, ClientLimits, Clients, LineError};
use crate::sockpath;
use crate::state::PortState;
use crate::stats;
use crate::worker::{PortInfo, WorkerError};
use crate::PortId;
use std::io::BufReader;
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
    /// Who may use the control socket could not be set up.
    #[error(transparent)]
    Access(#[from] crate::access::AccessError),
    /// The metrics address could not be bound.
    #[error("cannot listen for metrics on {0}")]
    Metrics(std::net::SocketAddr, #[source] std::io::Error),
}

/// The control plane's handle on the workers (cheap to clone; every
/// request takes the registry's lock, which no worker ever takes).
#[derive(Clone)]
pub struct WorkerHandle {
    workers: Arc<Mutex<Workers>>,
    /// Where the control plane's own changes are said (`crate::events`).
    events: Arc<EventQueue>,
}

impl WorkerHandle {
    fn with<T>(&self, f: impl FnOnce(&mut Workers) -> T) -> T {
        let mut w = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut w)
    }

    /// Adds a port.
    pub fn add_port(&self, spec: PortSpec) -> Result<PortInfo, ControlError> {
        let info = self.with(|w| w.add_port(spec))?;
        self.events
            .push(PortId(info.id), &info.name, || Kind::PortAdded);
        Ok(info)
    }

    /// Removes a port.
    pub fn del_port(&self, name: &str) -> Result<(), ControlError> {
        let id = self.with(|w| {
            let id = w
                .port_id(name)
                .ok_or_else(|| WorkerError::NoPort(name.to_string()))?;
            w.del_port(name).map(|()| id)
        })?;
        self.events.push(id, name, || Kind::PortRemoved);
        Ok(())
    }

    /// Changes a port's latency policies.
    pub fn set_port(
        &self,
        name: &str,
        set: crate::config::PolicyUpdate,
    ) -> Result<PortInfo, ControlError> {
        let info = self.with(|w| w.set_port(name, set))?;
        self.events
            .push(PortId(info.id), &info.name, || Kind::PortChanged);
        Ok(info)
    }

    /// Lists ports with their counters.
    pub fn list(&self) -> Result<Vec<PortInfo>, ControlError> {
        self.with(|w| w.list()).map_err(ControlError::from)
    }

    /// The FDB.
    pub fn fdb(&self) -> Result<Vec<crate::fdb::FdbEntry>, ControlError> {
        self.with(|w| w.fdb()).map_err(ControlError::from)
    }

    /// Hands EVPN's changes for port `name` to its worker.
    pub fn evpn(
        &self,
        name: &str,
        changes: Vec<crate::evpn::Change>,
    ) -> Result<(), crate::worker::WorkerError> {
        self.with(|w| w.evpn(name, changes))
    }

    /// Every worker's time accounting.
    pub fn perf(&self) -> Vec<crate::perf::PerfSnapshot> {
        self.with(|w| w.perf())
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
    /// The fan-out of events to subscribers (`crate::events_hub`).
    events: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    control_path: PathBuf,
    /// One per EVPN port of the configuration (see [`crate::evpn`]).
    evpn: Vec<crate::evpn::agent::Agent>,
}

/// Locks the process's pages into memory when `cfg.lock_memory` asks
/// (`crate::sys::memlock`), saying in one line what it did; returns the
/// bytes the process has locked then (`VmLck`). For a process that is the
/// switch, before [`Switch::start`]: a test or tool that runs a switch
/// beside other work keeps its own pages as they are.
pub fn lock_memory(cfg: &crate::config::SwitchConfig) -> Option<u64> {
    if !cfg.lock_memory {
        return crate::sys::memlock::locked_bytes();
    }
    match crate::sys::memlock::lock_current() {
        Ok(bytes) => {
            log::info!(
                "memory locked: {} MiB (the program, its libraries and heap)",
                bytes.unwrap_or(0) >> 20
            );
            bytes
        }
        Err(e) => {
            log::warn!(
                "memory not locked ([switch] lock_memory): {e}; a page the kernel drops \
                 under memory pressure stalls the worker that needs it \
                 (give CAP_IPC_LOCK or raise RLIMIT_MEMLOCK)"
            );
            crate::sys::memlock::locked_bytes()
        }
    }
}

impl Switch {
    /// Starts the worker, adds the configured ports, and serves the control socket.
    pub fn start(config: Config) -> Result<Self, StartError> {
        Self::start_with_limits(config, ClientLimits::default())
    }

    /// [`Switch::start`] with other bounds on the control and metrics clients.
    pub fn start_with_limits(config: Config, limits: ClientLimits) -> Result<Self, StartError> {
        // Before any worker pins itself: the watchdog keeps this thread's CPUs.
        crate::sys::watchdog::start();
        let access = Access::new(config.switch.control_group.as_deref())?;
        let events = Arc::new(EventQueue::new(crate::events::QUEUE));
        let handle = WorkerHandle {
            workers: Arc::new(Mutex::new(Workers::start(
                config.switch.clone(),
                events.clone(),
            )?)),
            events: events.clone(),
        };
        let hub = Arc::new(Hub::new(events, limits.subscribers, limits.events_buffer));
        let stop = Arc::new(AtomicBool::new(false));
        let path = config.switch.control.clone();
        let mut sw = Self {
            handle: handle.clone(),
            control: None,
            metrics: None,
            metrics_addr: None,
            events: None,
            stop: stop.clone(),
            control_path: path.clone(),
            evpn: Vec::new(),
        };
        // The operator's own ports: their sockets may be anywhere.
        let config_ports: Vec<String> = config.ports.iter().map(|p| p.name.clone()).collect();
        for p in config.ports {
            let name = p.name.clone();
            let evpn = crate::evpn::agent::Port::of(&p);
            let info = sw
                .handle
                .add_port(p)
                .map_err(|e| StartError::Port(name.clone(), e.to_string()))?;
            if let Some(mut port) = evpn {
                port.id = PortId(info.id);
                let agent = crate::evpn::agent::Agent::start(port, sw.handle.clone())
                    .map_err(|e| StartError::Port(name, e))?;
                sw.evpn.push(agent);
            }
        }
        let state = restore(&sw.handle, &config.switch.state_path(), &config_ports);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let control_err = |e| StartError::Control(path.clone(), e);
        sockpath::remove_stale(&path).map_err(control_err)?;
        let listener = UnixListener::bind(&path).map_err(control_err)?;
        access.restrict(&path)?;
        listener.set_nonblocking(true)?;
        let (h, st, rate) = (handle.clone(), stop.clone(), config.switch.drop_event_rate);
        let fan_out = hub.clone();
        sw.events = Some(
            std::thread::Builder::new()
                .name("vnio-switch-events".into())
                .spawn(move || fan_out.run(&h, &st, rate))?,
        );
        let server = Arc::new(ControlServer {
            handle,
            hub,
            stop,
            access,
            socket_dir: config.switch.socket_dir(),
            limits,
            state: Mutex::new(state),
            config_ports,
        });
        let control = std::thread::Builder::new()
            .name("vnio-switch-control".into())
            .spawn(move || serve_control(listener, server))?;
        sw.control = Some(control);
        if let Some(addr) = config.switch.metrics_listen {
            let l = std::net::TcpListener::bind(addr).map_err(|e| StartError::Metrics(addr, e))?;
            l.set_nonblocking(true)?;
            sw.metrics_addr = Some(l.local_addr()?);
            let (h, st) = (sw.handle.clone(), sw.stop.clone());
            sw.metrics = Some(
                std::thread::Builder::new()
                    .name("vnio-switch-metrics".into())
                    .spawn(move || serve_metrics(l, h, st, limits))?,
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
        if let Some(e) = self.events.take() {
            let _ = e.join();
        }
        self.evpn.clear();
        self.handle.stop();
        let _ = sockpath::remove_stale(&self.control_path);
    }
}

/// What serving a control client needs.
struct ControlServer {
    handle: WorkerHandle,
    /// Where `{"op":"events"}` clients go.
    hub: Arc<Hub>,
    stop: Arc<AtomicBool>,
    access: Access,
    /// Where clients' ports may have their sockets.
    socket_dir: PathBuf,
    limits: ClientLimits,
    /// The ports added over the control socket, recorded for a restart.
    state: Mutex<PortState>,
    /// The config file's ports (never recorded: they are the config's).
    config_ports: Vec<String>,
}

/// Adds back the ports recorded by an earlier run of the switch (see
/// [`crate::state`]); one that cannot be (its namespace or socket
/// directory gone, its name now the config's) is logged and forgotten.
fn restore(handle: &WorkerHandle, path: &Path, config_ports: &[String]) -> PortState {
    let (mut state, err) = PortState::load(path);
    if let Some(e) = err {
        log::error!("{}", crate::error_chain(&e));
    }
    let mut kept = Vec::new();
    for p in state.ports() {
        if config_ports.contains(&p.name) {
            log::warn!(
                "port {}: recorded in {} but now in the config file: the config's is kept",
                p.name,
                path.display()
            );
            continue;
        }
        match handle.add_port(p.clone()) {
            Ok(_) => {
                log::info!("port {} restored", p.name);
                kept.push(p.clone());
            }
            Err(e) => log::warn!("port {}: not restored, forgotten: {e}", p.name),
        }
    }
    if kept.len() != state.ports().len() {
        if let Err(e) = state.replace(kept) {
            log::error!("cannot write the port state {}: {e}", path.display());
        }
    }
    state
}

fn serve_control(listener: UnixListener, server: Arc<ControlServer>) {
    let mut clients = Clients::new(server.limits.max_clients);
    while !server.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                // Blocking, with short timeouts: the client's thread looks
                // at the stop flag and its own deadlines between them.
                if s.set_nonblocking(false).is_err()
                    || s.set_read_timeout(Some(serve::POLL)).is_err()
                    || s.set_write_timeout(Some(serve::POLL)).is_err()
                {
                    continue;
                }
                if let Err(r) = server.access.check(&s) {
                    log::warn!("control socket: refused {r}");
                    refuse(s, ControlError::Denied(r.to_string()), &server.stop);
                    continue;
                }
                if !clients.has_room() {
                    let why = format!(
                        "too many control clients ({} at once); try again later",
                        server.limits.max_clients
                    );
                    log::warn!("control socket: refused a client: {why}");
                    refuse(s, ControlError::Busy(why), &server.stop);
                    continue;
                }
                let sv = server.clone();
                if let Err(e) = clients.spawn("vnio-switch-client", move || serve_client(s, &sv)) {
                    log::error!("control socket: cannot serve a client: {e}");
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
    clients.join_all();
}

/// Tells a client why it is refused, in one line, and closes.
fn refuse(mut s: UnixStream, why: ControlError, stop: &AtomicBool) {
    let _ = serve::write_within(
        &mut s,
        &response_line(&Response::err(why)),
        serve::POLL,
        stop,
    );
}

fn response_line(r: &Response) -> Vec<u8> {
    let mut out = serde_json::to_vec(r)
        .unwrap_or_else(|_| br#"{"ok":false,"error":"unserializable"}"#.to_vec());
    out.push(b'\n');
    out
}

/// Answers every HTTP request on `listener` with the Prometheus text, each
/// client on its own thread, so that one that does not read delays nobody.
fn serve_metrics(
    listener: std::net::TcpListener,
    handle: WorkerHandle,
    stop: Arc<AtomicBool>,
    limits: ClientLimits,
) {
    let mut clients = Clients::new(limits.max_clients);
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                // Full: closed at once, a scraper tries again at its next interval.
                if !clients.has_room() {
                    continue;
                }
                let (h, st) = (handle.clone(), stop.clone());
                let _ = clients.spawn("vnio-switch-metrics-client", move || {
                    answer_metrics(s, &h, &st, limits)
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    clients.join_all();
}

fn answer_metrics(
    mut s: std::net::TcpStream,
    handle: &WorkerHandle,
    stop: &AtomicBool,
    limits: ClientLimits,
) {
    use std::io::Read;
    if s.set_nonblocking(false).is_err()
        || s.set_read_timeout(Some(Duration::from_millis(500)))
            .is_err()
        || s.set_write_timeout(Some(serve::POLL)).is_err()
    {
        return;
    }
    // The request itself does not matter: read what came, answer.
    let mut req = [0u8; 1024];
    let _ = s.read(&mut req);
    let body = match handle.list() {
        Ok(l) => metrics_text(l) + &crate::perf::prometheus(&handle.perf()),
        Err(e) => format!("# error: {e}\n"),
    };
    let head = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = serve::write_within(&mut s, (head + &body).as_bytes(), limits.write, stop);
}

/// Serves one client's requests until it leaves, errs, idles or the switch stops.
fn serve_client(s: UnixStream, server: &ControlServer) {
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    let mut line = Vec::new();
    let ControlServer { stop, limits, .. } = server;
    loop {
        line.clear();
        let resp = match serve::read_line(&mut r, &mut line, limits.max_line, limits.idle, stop) {
            // The connection becomes a stream of events served by the
            // fan-out: this client's place (and thread) is free again.
            Ok(()) if matches!(serde_json::from_slice(&line), Ok(Request::Events)) => {
                let ok = response_line(&Response::ok(serde_json::Value::Null));
                match w.try_clone() {
                    Ok(s) => match server.hub.subscribe(s, ok) {
                        Ok(()) => return,
                        Err(e) => Response::err(ControlError::Busy(e)),
                    },
                    Err(e) => Response::err(ControlError::Io(e.to_string())),
                }
            }
            Ok(()) => request(server, &line),
            // Told why, then closed: the rest of an over-long line is not read.
            Err(e @ (LineError::TooLong(_) | LineError::Idle(_))) => {
                let _ = serve::write_within(
                    &mut w,
                    &response_line(&Response::err(e.to_string())),
                    serve::POLL,
                    stop,
                );
                return;
            }
            Err(_) => return,
        };
        if serve::write_within(&mut w, &response_line(&resp), limits.write, stop).is_err() {
            return;
        }
    }
}

/// One request line from a client.
fn request(server: &ControlServer, line: &[u8]) -> Response {
    match serde_json::from_slice::<Request>(line) {
        Ok(Request::Shutdown) => {
            server.stop.store(true, Ordering::SeqCst);
            Response::ok(serde_json::Value::Null)
        }
        Ok(Request::PortAdd { mut port }) => {
            if port.kind.vxlan().is_some_and(|v| v.evpn) {
                return Response::err(format!(
                    "port {}: an `evpn` vxlan port is set in the configuration file (its FRR shadow starts with the switch)",
                    port.name
                ));
            }
            // A client's port binds where the client says, as the switch:
            // only inside the socket directory.
            if let Some(v) = port.kind.vhost_user_mut() {
                match sockpath::confine(&server.socket_dir, &v.socket) {
                    Ok(p) => v.socket = p,
                    Err(e) => return Response::err(crate::error_chain(&e)),
                }
            }
            let mut state = server.state.lock().unwrap_or_else(|p| p.into_inner());
            let r = answer(&server.handle, Request::PortAdd { port: port.clone() });
            if r.ok && !server.config_ports.contains(&port.name) {
                let name = port.name.clone();
                if let Err(e) = state.add(port) {
                    log::error!(
                        "port {name}: cannot record it in {} (it will not be restored after a restart): {e}",
                        state.path().display()
                    );
                }
            }
            r
        }
        Ok(Request::PortDel { name }) => {
            let mut state = server.state.lock().unwrap_or_else(|p| p.into_inner());
            let r = answer(&server.handle, Request::PortDel { name: name.clone() });
            // Forgotten whether or not the port was there: a record whose
            // port could not be restored goes too.
            match state.remove(&name) {
                Ok(true) if !r.ok => Response::ok(serde_json::Value::Null),
                Ok(_) => r,
                Err(e) => {
                    log::error!(
                        "port {name}: cannot forget it in {}: {e}",
                        state.path().display()
                    );
                    r
                }
            }
        }
        Ok(Request::PortSet { name, set }) => {
            let mut state = server.state.lock().unwrap_or_else(|p| p.into_inner());
            let r = answer(
                &server.handle,
                Request::PortSet {
                    name: name.clone(),
                    set: set.clone(),
                },
            );
            if r.ok {
                if let Err(e) = state.set(&name, &set) {
                    log::error!(
                        "port {name}: cannot record the change in {}: {e}",
                        state.path().display()
                    );
                }
            }
            r
        }
        Ok(req) => answer(&server.handle, req),
        Err(e) => Response::err(format!("bad request: {e}")),
    }
}

/// Answers one request through the worker.
pub fn answer(handle: &WorkerHandle, req: Request) -> Response {
    let to_json = |v: Result<serde_json::Value, ControlError>| match v {
        Ok(v) => Response::ok(v),
        Err(e) => Response::err(e),
    };
    let j = |x: Result<serde_json::Value, serde_json::Error>| {
        x.map_err(|e| ControlError::Io(e.to_string()))
    };
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
                return Err(WorkerError::NoPort(n.to_string()).into());
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
        Request::Metrics => to_json(handle.list().map(|l| {
            serde_json::Value::String(metrics_text(l) + &crate::perf::prometheus(&handle.perf()))
        })),
        Request::Perf => to_json(j(serde_json::to_value(handle.perf()))),
        Request::Events => Response::err("events are streamed on the control socket only"),
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
