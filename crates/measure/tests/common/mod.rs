//! Shared helpers for the measure integration tests: a real agent on loopback.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use vnio_measure::agent::{Agent, AgentConfig};
use vnio_measure::budget::Budget;
use vnio_measure::proto::Limits;
use vnio_measure::run::Common;

pub struct TestAgent {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl TestAgent {
    pub fn start(token: Option<&str>, limits: Limits) -> TestAgent {
        let mut c = config();
        c.token = token.map(String::from);
        c.limits = limits;
        Self::with(c)
    }

    pub fn with(config: AgentConfig) -> TestAgent {
        let agent = Agent::bind(config).unwrap();
        let addr = agent.local_addr();
        let stop = agent.stop_flag();
        let handle = std::thread::spawn(move || agent.serve().unwrap());
        TestAgent {
            addr,
            stop,
            handle: Some(handle),
        }
    }

    pub fn default() -> TestAgent {
        Self::start(None, Limits::default())
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// An agent's configuration on a free loopback port, with the defaults.
pub fn config() -> AgentConfig {
    AgentConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: None,
        limits: Limits::default(),
        max_clients: 16,
        idle: Duration::from_secs(30),
        budget: Budget::default(),
    }
}

pub fn common(targets: &[SocketAddr], sessions: u32, ms: u64) -> Common {
    Common {
        targets: targets.iter().map(|a| a.to_string()).collect(),
        token: None,
        sessions,
        duration: Duration::from_millis(ms),
        warmup: Duration::from_millis(100),
        iterations: 1,
        cpus: vec![],
        agent_cpus: vec![],
        busy_poll_us: None,
        plain_echo: false,
        ci_goal: None,
    }
}

pub fn no_stop() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

pub fn quiet(_: &str) {}

/// Threads of this process, from /proc.
pub fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Open descriptors of this process.
pub fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}
