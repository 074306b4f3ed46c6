//! The loads: what each worker repeats, how its tokens are got first, and
//! one measurement (a load against one server, bracketed by `/proc`
//! readings of the server).

use std::time::{Duration, Instant};

use crate::client::{Conn, Result};
use crate::flows::{self, Agent};
use crate::procfs::Usage;
use crate::servers::{Kind, Target};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Load {
    /// Refresh-token rotation on one grant: one connection, each refresh
    /// presenting the token the previous one returned.
    Rotate1,
    /// The same on 32 grants at once (32 connections, one grant each).
    Rotate32,
    /// The same on 64 grants, against Portcullis alone (on disk and on
    /// tmpfs): issue 42's group-commit bar, durable on disk at least 0.7×
    /// the rate on tmpfs at 64 callers. Not in the default run.
    Rotate64,
    /// Code exchange: codes got beforehand (sign-in and consent, not
    /// measured), then exchanged, a fixed number of them.
    Code,
    /// Dynamic client registration.
    Register,
    /// A bearer-checked MCP call (JSON-RPC `ping`).
    Bearer,
    /// The authorization server metadata document.
    Metadata,
}

impl Load {
    pub const ALL: [Self; 6] = [
        Self::Rotate1,
        Self::Rotate32,
        Self::Code,
        Self::Register,
        Self::Bearer,
        Self::Metadata,
    ];

    /// Loads run only when named (`--loads`).
    pub const ON_REQUEST: [Self; 1] = [Self::Rotate64];

    pub fn name(self) -> &'static str {
        match self {
            Self::Rotate1 => "rotate1",
            Self::Rotate32 => "rotate32",
            Self::Rotate64 => "rotate64",
            Self::Code => "code",
            Self::Register => "register",
            Self::Bearer => "bearer",
            Self::Metadata => "metadata",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Rotate1 => "refresh rotation, 1 grant",
            Self::Rotate32 => "refresh rotation, 32 grants",
            Self::Rotate64 => "refresh rotation, 64 grants",
            Self::Code => "code exchange",
            Self::Register => "registration",
            Self::Bearer => "bearer-checked MCP ping",
            Self::Metadata => "metadata GET",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::ON_REQUEST)
            .find(|l| l.name() == s)
    }

    /// The servers this load runs against. Portcullis on tmpfs where the
    /// load writes (a durable commit per request).
    pub fn targets(self) -> &'static [Kind] {
        match self {
            Self::Rotate1 | Self::Rotate32 | Self::Code => {
                &[Kind::PcDisk, Kind::PcTmpfs, Kind::Oidc, Kind::Sdk]
            }
            Self::Rotate64 => &[Kind::PcDisk, Kind::PcTmpfs],
            Self::Register => &[Kind::PcDisk, Kind::Oidc, Kind::Sdk],
            Self::Bearer | Self::Metadata => &[Kind::PcDisk, Kind::Oidc, Kind::Sdk, Kind::Floor],
        }
    }

    pub fn connections(self, conns: usize) -> usize {
        match self {
            Self::Rotate1 => 1,
            Self::Rotate32 => 32,
            Self::Rotate64 => 64,
            _ => conns,
        }
    }
}

/// How long and how wide.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Duration of each timed load.
    pub secs: f64,
    /// Seconds of the same load just before, not measured: the node peers'
    /// JIT compiles the path (a cold second costs them up to 1.6× the CPU
    /// per request of a warm one), the Rust servers' caches fill. The code
    /// exchange warms up on a quarter more codes instead.
    pub warmup: f64,
    /// Connections of the loads that do not fix their own.
    pub conns: usize,
    /// Codes per connection for the code exchange (a count, not a time:
    /// each code costs a sign-in and consent first).
    pub codes_per_conn: usize,
}

/// One measurement.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub ok: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub secs: f64,
    pub server: Usage,
    /// The load generator's own CPU ticks over the load.
    pub client_ticks: u64,
}

impl Sample {
    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.secs
    }

    /// Server CPU per request in microseconds.
    pub fn cpu_us(&self, clk_tck: f64) -> f64 {
        self.server.ticks as f64 / clk_tck * 1e6 / self.ok.max(1) as f64
    }

    pub fn client_cpu_us(&self, clk_tck: f64) -> f64 {
        self.client_ticks as f64 / clk_tck * 1e6 / self.ok.max(1) as f64
    }

    pub fn switches(&self) -> f64 {
        self.server.switches as f64 / self.ok.max(1) as f64
    }
}

/// What a worker holds for its requests.
enum Work {
    Rotate { agent: Agent, refresh: String },
    Codes { agent: Agent, codes: Vec<String> },
    Register,
    Bearer { access: String },
    Metadata,
}

/// Tokens first, then the load: warm-up, then the measured phase between
/// two readings of the server's `/proc`.
pub async fn measure(server: &Target, load: Load, shape: Shape) -> Result<Sample> {
    let n = load.connections(shape.conns);
    // The bearer load: one grant's access token on every connection.
    let shared_access = if load == Load::Bearer && server.kind != Kind::Floor {
        let mut conn = Conn::open(server.addr).await?;
        Some(Agent::login(&mut conn, server, "bench").await?.1.access)
    } else {
        None
    };
    let warm_codes = shape.codes_per_conn.div_ceil(4);
    // The workers' setups run together (each on its own connection).
    let setups: Vec<_> = (0..n)
        .map(|i| {
            let server = server.clone();
            let access = shared_access.clone();
            let codes = shape.codes_per_conn + warm_codes;
            tokio::spawn(async move { setup(&server, load, codes, i, access).await })
        })
        .collect();
    let mut workers = Vec::with_capacity(n);
    for h in setups {
        workers.push(h.await.map_err(|e| format!("setup task: {e}"))??);
    }

    let (workers, warm) = phase(server, workers, shape.warmup, warm_codes).await?;
    if warm.errors > 0 {
        return Err(format!(
            "warm-up: {} errors, first: {}",
            warm.errors,
            warm.first_error.unwrap_or_default()
        ));
    }
    let before = Usage::read(server.pid)?;
    let own_before = Usage::own()?;
    let (_, mut sample) = phase(server, workers, shape.secs, shape.codes_per_conn).await?;
    let after = Usage::read(server.pid)?;
    let own_after = Usage::own()?;
    sample.server = after.since(before);
    sample.client_ticks = own_after.since(own_before).ticks;
    Ok(sample)
}

/// Every worker for `secs` (the code exchange: `codes` codes each); the
/// workers back, and the counts (server usage not filled in).
async fn phase(
    server: &Target,
    workers: Vec<(Conn, Work)>,
    secs: f64,
    codes: usize,
) -> Result<(Vec<(Conn, Work)>, Sample)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|(conn, work)| tokio::spawn(run_worker(conn, server.clone(), work, deadline, codes)))
        .collect();
    let mut sample = Sample::default();
    let mut back = Vec::with_capacity(tasks.len());
    let mut last = start;
    for t in tasks {
        let w = t.await.map_err(|e| format!("load task: {e}"))?;
        sample.ok += w.ok;
        sample.errors += w.errors;
        if sample.first_error.is_none() {
            sample.first_error = w.first_error;
        }
        last = last.max(w.end);
        back.push((w.conn, w.work));
    }
    sample.secs = (last - start).as_secs_f64();
    Ok((back, sample))
}

/// One worker's connection and what it needs: its grant, its codes.
async fn setup(
    server: &Target,
    load: Load,
    codes_per_conn: usize,
    i: usize,
    access: Option<String>,
) -> Result<(Conn, Work)> {
    let mut conn = Conn::open(server.addr).await?;
    let user = format!("bench{i}");
    let work = match load {
        Load::Rotate1 | Load::Rotate32 | Load::Rotate64 => {
            let (agent, tokens) = Agent::login(&mut conn, server, &user).await?;
            Work::Rotate {
                agent,
                refresh: tokens.refresh,
            }
        }
        Load::Code => {
            let agent = Agent::new(&mut conn, server, &user).await?;
            let mut codes = Vec::with_capacity(codes_per_conn);
            for _ in 0..codes_per_conn {
                codes.push(agent.code(&mut conn, server).await?);
            }
            Work::Codes { agent, codes }
        }
        Load::Register => Work::Register,
        Load::Bearer => Work::Bearer {
            access: access.unwrap_or_default(),
        },
        Load::Metadata => Work::Metadata,
    };
    Ok((conn, work))
}

/// A worker after a phase.
struct Done {
    conn: Conn,
    work: Work,
    ok: u64,
    errors: u64,
    first_error: Option<String>,
    end: Instant,
}

/// One worker's loop: until the deadline (the code exchange: until it has
/// spent `codes` codes). A rotation chain that breaks ends its worker.
async fn run_worker(
    mut conn: Conn,
    server: Target,
    mut work: Work,
    deadline: Instant,
    mut codes: usize,
) -> Done {
    let server = &server;
    let mut ok = 0;
    let mut errors = 0;
    let mut first_error: Option<String> = None;
    loop {
        let result = match &mut work {
            Work::Codes { agent, codes: left } => {
                if codes == 0 {
                    break;
                }
                codes -= 1;
                let Some(code) = left.pop() else { break };
                agent.exchange(&mut conn, server, &code).await.map(|_| ())
            }
            _ if Instant::now() >= deadline => break,
            Work::Rotate { agent, refresh } => {
                match agent.refresh(&mut conn, server, refresh).await {
                    Ok(tokens) => {
                        *refresh = tokens.refresh;
                        Ok(())
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(format!("{e} ({})", agent.user()));
                        break;
                    }
                }
            }
            Work::Register => flows::registration(&mut conn, server).await,
            Work::Bearer { access } => flows::ping(&mut conn, server, access).await,
            Work::Metadata => flows::metadata(&mut conn, server).await,
        };
        match result {
            Ok(()) => ok += 1,
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    Done {
        conn,
        work,
        ok,
        errors,
        first_error,
        end: Instant::now(),
    }
}
