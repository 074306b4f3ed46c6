//! What a server process spent, read from `/proc` before and after a load:
//! CPU time (`utime + stime` of `/proc/<pid>/stat`, every thread's, live or
//! exited) and context switches (`voluntary_ctxt_switches +
//! nonvoluntary_ctxt_switches` of each `/proc/<pid>/task/<tid>/status`,
//! summed over the threads alive at the reading: a thread that exits during
//! a load takes its switches since the first reading with it).

use std::fs;

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    /// `utime + stime` in clock ticks.
    pub ticks: u64,
    /// Voluntary and involuntary context switches over the threads.
    pub switches: u64,
}

impl Usage {
    pub fn read(pid: u32) -> Result<Self, String> {
        Ok(Self {
            ticks: cpu_ticks(&format!("/proc/{pid}/stat"))?,
            switches: switches(pid)?,
        })
    }

    /// Usage of this process (the load generator).
    pub fn own() -> Result<Self, String> {
        Ok(Self {
            ticks: cpu_ticks("/proc/self/stat")?,
            switches: 0,
        })
    }

    pub fn since(self, before: Self) -> Self {
        Self {
            ticks: self.ticks.saturating_sub(before.ticks),
            switches: self.switches.saturating_sub(before.switches),
        }
    }
}

fn cpu_ticks(path: &str) -> Result<u64, String> {
    let stat = fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    // The command name, in parentheses, may hold spaces: count fields after
    // its closing parenthesis. Fields 14 and 15 of proc(5) are utime and
    // stime; after the parenthesis the first field is the 3rd (state).
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{path}: no command name"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("{path}: field {n}"))
    };
    Ok(field(14)? + field(15)?)
}

fn switches(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0;
    for entry in fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let Ok(entry) = entry else { continue };
        // A thread may exit between the listing and the read.
        let Ok(status) = fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(total)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux unless it says
/// otherwise).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".to_owned())
}

/// The file system type a path lives on (the longest mount point that is
/// a prefix of it, from `/proc/self/mounts`).
pub fn fs_type(path: &std::path::Path) -> String {
    let path = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return "?".to_owned();
    };
    let mut best = (0, "?".to_owned());
    for line in mounts.lines() {
        let mut f = line.split_whitespace();
        let (Some(_), Some(point), Some(kind)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if path.starts_with(point) && point.len() >= best.0 {
            best = (point.len(), kind.to_owned());
        }
    }
    best.1
}
