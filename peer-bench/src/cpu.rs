//! CPU time of the peer's processes over a phase, read from `/proc/<pid>/stat` (user and system
//! time of every thread), as the engine's benchmark reads its own (`scheduler-bench/src/cpu.rs`,
//! a separate package): this process (the worker and the client enqueueing) and every
//! PostgreSQL process (the postmaster and its backends, by command name). A backend that exits
//! during the phase takes its time with it; the worker's pools keep theirs open throughout.

use std::collections::BTreeMap;

use serde_json::{json, Value};

const WORKER: &str = "worker and client (peer-bench process)";
const POSTGRES: &str = "PostgreSQL (every postgres process)";

/// CPU seconds of each process, by pid, at one moment; and which are PostgreSQL's.
pub struct CpuSnapshot {
    seconds: BTreeMap<u32, (bool, f64)>,
}

fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|ticks| *ticks > 0.0)
        .unwrap_or(100.0)
}

/// The command name and utime + stime (fields 2, 14 and 15) of a `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?;
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

impl CpuSnapshot {
    /// This process and every PostgreSQL process, now.
    pub fn take() -> CpuSnapshot {
        let ticks = ticks_per_second();
        let me = std::process::id();
        let mut seconds = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return CpuSnapshot { seconds };
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            if let Some((name, used)) = parse_stat(&stat) {
                if pid == me || name == "postgres" {
                    seconds.insert(pid, (name == "postgres", used as f64 / ticks));
                }
            }
        }
        CpuSnapshot { seconds }
    }

    /// CPU milliseconds per task of the worker and of PostgreSQL since this snapshot, over
    /// `tasks`, and their total.
    pub fn per_task_since(&self, tasks: usize) -> Value {
        let now = CpuSnapshot::take();
        let (mut worker, mut postgres) = (0.0, 0.0);
        for (pid, (is_postgres, after)) in &now.seconds {
            let before = self.seconds.get(pid).map_or(0.0, |(_, s)| *s);
            let spent = (after - before).max(0.0);
            match is_postgres {
                true => postgres += spent,
                false => worker += spent,
            }
        }
        let per = |s: f64| s * 1000.0 / tasks.max(1) as f64;
        json!({
            WORKER: per(worker),
            POSTGRES: per(postgres),
            "total": per(worker + postgres),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_and_user_and_system_ticks() {
        let line = "77 (postgres) S 1 77 77 0 -1 4194560 1000 0 0 0 300 45 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some(("postgres", 345)));
        assert_eq!(parse_stat("77 (postgres) S"), None);
    }
}
