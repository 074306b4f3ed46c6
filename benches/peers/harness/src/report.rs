//! The tables: medians over the runs, and ratios (each run's ratio, the
//! median over runs: the servers of one ratio were measured side by side
//! in the same run). Then machine-readable `RATIO` and `SWITCHES` lines for
//! benches/peers/guard.sh.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::loads::{Load, Sample};
use crate::servers::Kind;

/// Every sample: per load and server, one per run (`None` where a run did
/// not measure it).
pub type Results = BTreeMap<(Load, Kind), Vec<Option<Sample>>>;

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

pub fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::PcDisk => "Portcullis, redb on disk",
        Kind::PcTmpfs => "Portcullis, redb on tmpfs",
        Kind::Oidc => "node-oidc-provider",
        Kind::Sdk => "MCP TS SDK auth router",
        Kind::Floor => "bare hyper floor",
    }
}

fn fmt_num(x: Option<f64>) -> String {
    match x {
        None => "–".to_owned(),
        Some(x) if x >= 1000.0 => {
            // Thin grouping for thousands: 12 345.
            let s = format!("{x:.0}");
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(' ');
                }
                out.push(c);
            }
            out
        }
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) if x >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
    }
}

fn fmt_ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}×"))
}

/// Per-run values of `f` over the samples of (load, kind), medianed.
fn med(results: &Results, load: Load, kind: Kind, f: impl Fn(&Sample) -> f64) -> Option<f64> {
    let v = results.get(&(load, kind))?;
    median(v.iter().flatten().map(f).collect())
}

/// Each run's ratio f(a) / f(b), medianed over the runs that measured both.
fn ratio(
    results: &Results,
    load: Load,
    a: Kind,
    b: Kind,
    f: impl Fn(&Sample) -> f64,
) -> Option<f64> {
    let (va, vb) = (results.get(&(load, a))?, results.get(&(load, b))?);
    median(
        va.iter()
            .zip(vb)
            .filter_map(|(x, y)| Some(f(x.as_ref()?) / f(y.as_ref()?)))
            .collect(),
    )
}

/// The whole report.
pub fn render(results: &Results, loads: &[Load], runs: usize, clk: f64) -> String {
    let mut out = String::new();
    let cpu = |s: &Sample| s.cpu_us(clk);
    let rps = |s: &Sample| s.rps();

    let _ = writeln!(out, "\n## Medians of {runs} run(s)\n");
    let _ = writeln!(
        out,
        "| load | server | req/s | server CPU µs/req | context switches/req | load generator CPU µs/req | errors |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    for &load in loads {
        for &kind in load.targets() {
            let Some(v) = results.get(&(load, kind)) else {
                continue;
            };
            let errors: u64 = v.iter().flatten().map(|s| s.errors).sum();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                load.label(),
                label(kind),
                fmt_num(med(results, load, kind, rps)),
                fmt_num(med(results, load, kind, cpu)),
                fmt_num(med(results, load, kind, Sample::switches)),
                fmt_num(med(results, load, kind, |s| s.client_cpu_us(clk))),
                errors,
            );
        }
    }

    let _ = writeln!(
        out,
        "\n## Ratios (each run's ratio, median over the runs)\n"
    );
    let _ = writeln!(
        out,
        "req/s: Portcullis ÷ peer (above 1: Portcullis serves more). CPU: peer ÷ Portcullis, server CPU per request (above 1: Portcullis spends less). Floor: Portcullis ÷ bare hyper, server CPU per request (1 would be a bare server).\n"
    );
    let _ = writeln!(
        out,
        "| load | Portcullis | vs node-oidc-provider, req/s | CPU | vs MCP TS SDK, req/s | CPU | CPU ÷ floor |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
    let mut machine = String::new();
    for &load in loads {
        for &pc in &[Kind::PcDisk, Kind::PcTmpfs] {
            if !results.contains_key(&(load, pc)) {
                continue;
            }
            let r_oidc = ratio(results, load, pc, Kind::Oidc, rps);
            let c_oidc = ratio(results, load, Kind::Oidc, pc, cpu);
            let r_sdk = ratio(results, load, pc, Kind::Sdk, rps);
            let c_sdk = ratio(results, load, Kind::Sdk, pc, cpu);
            let floor = ratio(results, load, pc, Kind::Floor, cpu);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                load.label(),
                if pc == Kind::PcDisk { "disk" } else { "tmpfs" },
                fmt_ratio(r_oidc),
                fmt_ratio(c_oidc),
                fmt_ratio(r_sdk),
                fmt_ratio(c_sdk),
                fmt_ratio(floor),
            );
            let name = format!("{}.{}", load.name(), pc.name());
            for (what, v) in [
                ("rps_vs_oidc", r_oidc),
                ("cpu_vs_oidc", c_oidc),
                ("rps_vs_sdk", r_sdk),
                ("cpu_vs_sdk", c_sdk),
                ("cpu_over_floor", floor),
            ] {
                if let Some(v) = v {
                    let _ = writeln!(machine, "RATIO {name}.{what} {v:.3}");
                }
            }
            if let Some(s) = med(results, load, pc, Sample::switches) {
                let _ = writeln!(machine, "SWITCHES {name} {s:.2}");
            }
        }
    }
    let _ = write!(out, "\n{machine}");
    out
}
