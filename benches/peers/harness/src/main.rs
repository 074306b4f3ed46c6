//! benches/peers: Portcullis over HTTP against node-oidc-provider, the MCP
//! TypeScript SDK's auth router and a bare hyper floor, each load run
//! against each server in turn within the same run, three runs (medians).
//! Run it through `bash benches/peers/run.sh`, which installs the peers and
//! builds the binaries; the options:
//!
//!   --quick              1 run, 1 s per load after 1 s of warm-up,
//!                        25 codes per connection
//!   --runs N             runs (default 3)
//!   --secs S             seconds per timed load (default 5)
//!   --warmup S           seconds of the same load before it, not measured
//!                        (default 2; quick 1)
//!   --conns N            connections of the loads that do not fix theirs (32)
//!   --codes N            codes per connection for the code exchange (150)
//!   --loads a,b          only these loads (rotate1, rotate32, code,
//!                        register, bearer, metadata; rotate64, against
//!                        Portcullis alone, only when named)
//!   --targets a,b        only these servers (pc-disk, pc-tmpfs, oidc, sdk,
//!                        floor)
//!   --client-threads N   the load generator's runtime threads (default 2)
//!   --seed-db FILE       start Portcullis on a copy of this redb file and
//!                        its `FILE.keys` (a population of grants made by
//!                        `portcullis-axum`'s `seed_grants` example; see
//!                        benches/peers/scale.sh)
//!   --portcullis BIN --floor BIN --peers-dir DIR --work DIR --node NODE
//!
//! Server CPU per request is `utime + stime` of the server's process over
//! the timed load, divided by its requests; context switches per request
//! are summed over the server's threads (src/procfs.rs). The load
//! generator runs on the same machine and takes its share of the cores:
//! requests per second are what this machine does with both, CPU per
//! request is the server's own.

mod client;
mod flows;
mod loads;
mod procfs;
mod report;
mod servers;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use loads::{Load, Shape};
use servers::{Bins, Kind};

struct Config {
    runs: usize,
    shape: Shape,
    loads: Vec<Load>,
    targets: Vec<Kind>,
    client_threads: usize,
    quick: bool,
    bins: Bins,
}

fn usage(msg: &str) -> ! {
    eprintln!("peers: {msg}\n(see the comment at the top of benches/peers/harness/src/main.rs)");
    std::process::exit(2);
}

fn parse() -> Config {
    let mut args = std::env::args().skip(1);
    let quick = std::env::args().any(|a| a == "--quick");
    let mut cfg = Config {
        runs: if quick { 1 } else { 3 },
        shape: Shape {
            secs: if quick { 1.0 } else { 5.0 },
            warmup: if quick { 1.0 } else { 2.0 },
            conns: 32,
            codes_per_conn: if quick { 25 } else { 150 },
        },
        loads: Load::ALL.to_vec(),
        targets: Kind::ALL.to_vec(),
        client_threads: 2,
        quick,
        bins: Bins {
            portcullis: PathBuf::from("target/release/portcullis"),
            floor: PathBuf::from("target/release/floor"),
            node: "node".to_owned(),
            peers_dir: PathBuf::from("benches/peers"),
            work: std::env::temp_dir().join("portcullis-peers"),
            tmpfs: None,
            seed_db: None,
        },
    };
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        let number = |v: String| -> f64 {
            v.parse()
                .ok()
                .filter(|x: &f64| *x > 0.0)
                .unwrap_or_else(|| usage(&format!("{a}: not a positive number: {v}")))
        };
        match a.as_str() {
            "--quick" => {}
            "--runs" => cfg.runs = number(value()) as usize,
            "--secs" => cfg.shape.secs = number(value()),
            "--warmup" => cfg.shape.warmup = number(value()),
            "--conns" => cfg.shape.conns = number(value()) as usize,
            "--codes" => cfg.shape.codes_per_conn = number(value()) as usize,
            "--client-threads" => cfg.client_threads = number(value()) as usize,
            "--loads" => {
                cfg.loads = value()
                    .split(',')
                    .map(|l| {
                        Load::parse(l.trim()).unwrap_or_else(|| usage(&format!("unknown load {l}")))
                    })
                    .collect();
            }
            "--targets" => {
                cfg.targets = value()
                    .split(',')
                    .map(|k| {
                        Kind::parse(k.trim())
                            .unwrap_or_else(|| usage(&format!("unknown server {k}")))
                    })
                    .collect();
            }
            "--portcullis" => cfg.bins.portcullis = value().into(),
            "--floor" => cfg.bins.floor = value().into(),
            "--peers-dir" => cfg.bins.peers_dir = value().into(),
            "--work" => cfg.bins.work = value().into(),
            "--node" => cfg.bins.node = value(),
            "--seed-db" => cfg.bins.seed_db = Some(value().into()),
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    cfg
}

fn main() -> ExitCode {
    let mut cfg = parse();
    if let Err(e) = std::fs::create_dir_all(&cfg.bins.work) {
        usage(&format!("{}: {e}", cfg.bins.work.display()));
    }
    let shm = PathBuf::from("/dev/shm");
    if procfs::fs_type(&shm) == "tmpfs" {
        cfg.bins.tmpfs = Some(shm);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.client_threads)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&cfg)) {
        Ok(clean) => {
            if clean {
                ExitCode::SUCCESS
            } else {
                eprintln!("peers: some requests failed (see the errors column)");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("peers: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every run; prints the report. `Ok(false)` when requests failed.
async fn run(cfg: &Config) -> Result<bool, String> {
    let clk = procfs::clock_ticks();
    let bins = &cfg.bins;
    let version = |p: &str| servers::node_package_version(&bins.peers_dir, p);
    let node_version = std::process::Command::new(&bins.node)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "?".to_owned(), |s| s.trim().to_owned());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let mut header = String::new();
    let _ = std::fmt::Write::write_fmt(
        &mut header,
        format_args!(
            "# benches/peers: Portcullis against its peers over HTTP\n\n\
             mode: {} ({} run(s), {} s per timed load after {} s of warm-up, {} connections, {} codes per connection for the code exchange)\n\
             machine: {cpus} CPUs; the load generator ({} threads) runs on it too\n\
             peers: node-oidc-provider {}, @modelcontextprotocol/sdk {}, jose {}, express {}; node {node_version}\n\
             Portcullis: {} (RUST_LOG={}); disk: {} ({}); tmpfs: {}\n",
            if cfg.quick { "quick" } else { "full" },
            cfg.runs,
            cfg.shape.secs,
            cfg.shape.warmup,
            cfg.shape.conns,
            cfg.shape.codes_per_conn,
            cfg.client_threads,
            version("oidc-provider"),
            version("@modelcontextprotocol/sdk"),
            version("jose"),
            version("express"),
            bins.portcullis.display(),
            std::env::var("PEERS_PORTCULLIS_LOG").unwrap_or_else(|_| "warn".to_owned()),
            bins.work.display(),
            procfs::fs_type(&bins.work),
            bins.tmpfs.as_ref().map_or_else(
                || "none (skipped)".to_owned(),
                |p| format!("{} (tmpfs)", p.display())
            ),
        ),
    );
    eprint!("{header}");

    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| cfg.targets.contains(k))
        .filter(|k| cfg.loads.iter().any(|l| l.targets().contains(k)))
        .filter(|k| *k != Kind::PcTmpfs || bins.tmpfs.is_some())
        .collect();
    let mut results = report::Results::new();
    let mut loadavgs = Vec::new();
    for run in 0..cfg.runs {
        let at_start = procfs::loadavg();
        eprintln!(
            "\nrun {} of {} (load average {at_start})",
            run + 1,
            cfg.runs
        );
        let mut running = Vec::new();
        for &kind in &kinds {
            running.push(servers::start(kind, bins, run + 1).await?);
        }
        for (li, &load) in cfg.loads.iter().enumerate() {
            let mut order: Vec<&servers::Server> = load
                .targets()
                .iter()
                .filter_map(|k| running.iter().find(|s| s.target.kind == *k))
                .collect();
            // Alternate: each run and load starts with another server.
            let len = order.len();
            order.rotate_left((run + li) % len.max(1));
            for server in order {
                let kind = server.target.kind;
                let sample = loads::measure(&server.target, load, cfg.shape)
                    .await
                    .map_err(|e| format!("{} on {}: {e}", load.name(), kind.name()))?;
                eprintln!(
                    "  {:<9} {:<9} {:>9.0} req/s {:>8.1} µs CPU/req {:>6.2} switches/req  ({} requests in {:.2} s{})",
                    load.name(),
                    kind.name(),
                    sample.rps(),
                    sample.cpu_us(clk),
                    sample.switches(),
                    sample.ok,
                    sample.secs,
                    match &sample.first_error {
                        Some(e) => format!(", {} errors, first: {e}", sample.errors),
                        None => String::new(),
                    }
                );
                let _ = std::io::stderr().flush();
                results
                    .entry((load, kind))
                    .or_insert_with(|| vec![None; cfg.runs])[run] = Some(sample);
            }
        }
        drop(running);
        loadavgs.push(format!(
            "run {}: {at_start} → {}",
            run + 1,
            procfs::loadavg()
        ));
    }

    let clean = results.values().flatten().flatten().all(|s| s.errors == 0);
    let mut stdout = std::io::stdout();
    let _ = write!(
        stdout,
        "{header}load average (1, 5, 15 min) at each run's start → end: {}\n{}",
        loadavgs.join("; "),
        report::render(&results, &cfg.loads, cfg.runs, clk)
    );
    let _ = stdout.flush();
    Ok(clean)
}
