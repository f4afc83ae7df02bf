//! CPU time spent by the processes a benchmark runs on, read from `/proc/<pid>/stat` (user and
//! system time of every thread of the process): the node, which in the throughput scenario is
//! the bench process itself and so includes the client producing the tasks; the Kafka broker,
//! Cassandra and the CQL bridge, found by the stack's pid files (`.stack/run/*.pid`). The
//! figure is CPU seconds over a phase divided by the tasks it ran: the fair cost comparison on
//! one machine, beside the peer's (its worker process and PostgreSQL's, which `peer-bench`
//! measures the same way).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A process whose CPU time is measured, by name.
#[derive(Debug, Clone)]
pub struct Measured {
    /// What it is, as the report names it.
    pub name: &'static str,
    /// Its process id, if it was found.
    pub pid: Option<u32>,
}

/// CPU seconds each measured process had used at one moment (`None`: not readable).
#[derive(Debug, Clone)]
pub struct CpuSnapshot(Vec<(&'static str, Option<f64>)>);

/// Cassandra's name among the measured processes.
pub const CASSANDRA: &str = "Cassandra";

/// The process id of the measured process named `name`, if it was found.
pub fn pid_of(processes: &[Measured], name: &str) -> Option<u32> {
    (processes.iter().find(|p| p.name == name)).and_then(|p| p.pid)
}

/// The bench process (the node and the producing client) and the stack's services.
pub fn stack_processes() -> Vec<Measured> {
    let run = stack_dir().join("run");
    let from_file = |service: &str| -> Option<u32> {
        let text = std::fs::read_to_string(run.join(format!("{service}.pid"))).ok()?;
        text.trim().parse().ok()
    };
    vec![
        Measured {
            name: "node and client (bench process)",
            pid: Some(std::process::id()),
        },
        Measured {
            name: "Kafka broker",
            pid: from_file("kafka"),
        },
        Measured {
            name: CASSANDRA,
            pid: from_file("cassandra"),
        },
        Measured {
            name: "CQL bridge",
            pid: from_file("bridge"),
        },
    ]
}

/// The stack's directory: `STACK_DIR` as `dev/stack` reads it, else `.stack` in the repository.
fn stack_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STACK_DIR") {
        return PathBuf::from(dir);
    }
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    bench.parent().unwrap_or(bench).join(".stack")
}

/// Clock ticks per second of `/proc`'s times (`getconf CLK_TCK`; 100 on Linux everywhere).
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

/// User plus system CPU seconds of process `pid` so far.
fn cpu_seconds(pid: u32, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|t| t as f64 / ticks)
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line, in ticks. The command name
/// (field 2) is in parentheses and may hold spaces: fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `fields[0]` is field 3 (the state).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

impl CpuSnapshot {
    /// The CPU seconds each of `processes` has used so far.
    pub fn take(processes: &[Measured]) -> CpuSnapshot {
        let ticks = ticks_per_second();
        CpuSnapshot(
            processes
                .iter()
                .map(|p| (p.name, p.pid.and_then(|pid| cpu_seconds(pid, ticks))))
                .collect(),
        )
    }

    /// Milliseconds of CPU per task each process spent since `before`, over `tasks` tasks, and
    /// their total (a process unreadable at either end is left out of both).
    pub fn per_task_since(&self, before: &CpuSnapshot, tasks: usize) -> Vec<(String, f64)> {
        let tasks = tasks.max(1) as f64;
        let mut per: Vec<(String, f64)> = self
            .0
            .iter()
            .zip(&before.0)
            .filter_map(|((name, after), (_, before))| {
                let spent = (*after)? - (*before)?;
                Some((name.to_string(), spent * 1000.0 / tasks))
            })
            .collect();
        let total = per.iter().map(|(_, ms)| ms).sum();
        per.push(("total".to_string(), total));
        per
    }
}

/// CPU seconds of one process's threads so far, by what they do (`thread_kind`): which part of
/// Cassandra (serving requests, compaction, garbage collection, ...) its CPU goes to. A thread
/// that ends between two snapshots takes its time with it, so the kinds may sum to less than
/// the process.
#[derive(Debug, Clone, Default)]
pub struct ThreadSnapshot(BTreeMap<&'static str, f64>);

impl ThreadSnapshot {
    /// The CPU seconds of `pid`'s threads by kind (empty if it is not readable).
    pub fn take(pid: Option<u32>) -> ThreadSnapshot {
        let mut kinds = BTreeMap::new();
        let Some(pid) = pid else {
            return ThreadSnapshot(kinds);
        };
        let ticks = ticks_per_second();
        let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return ThreadSnapshot(kinds);
        };
        for thread in threads.flatten() {
            let path = thread.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            if let Some(t) = parse_stat(&stat) {
                *kinds.entry(thread_kind(comm.trim())).or_insert(0.0) += t as f64 / ticks;
            }
        }
        ThreadSnapshot(kinds)
    }

    /// Milliseconds of CPU per task each kind spent since `before`, over `tasks` tasks, most
    /// first.
    pub fn per_task_since(&self, before: &ThreadSnapshot, tasks: usize) -> Vec<(String, f64)> {
        let tasks = tasks.max(1) as f64;
        let mut per: Vec<(String, f64)> = (self.0.iter())
            .map(|(kind, after)| {
                let spent = after - before.0.get(kind).copied().unwrap_or(0.0);
                (kind.to_string(), spent.max(0.0) * 1000.0 / tasks)
            })
            .filter(|(_, ms)| *ms > 0.0)
            .collect();
        per.sort_by(|a, b| b.1.total_cmp(&a.1));
        per
    }
}

/// What a JVM thread of Cassandra does, from its name as Linux keeps it (15 characters:
/// "SharedPool-Work" for "SharedPool-Worker-12").
fn thread_kind(name: &str) -> &'static str {
    const KINDS: [(&str, &str); 9] = [
        ("SharedPool-Work", "requests"),
        ("Native-Transpor", "requests"),
        ("nioEventLoopGro", "network"),
        ("CompactionExecu", "compaction"),
        ("MemtableFlushWr", "memtable flush"),
        ("MemtablePostFlu", "memtable flush"),
        ("PERIODIC-COMMIT", "commit log"),
        ("COMMIT-LOG-ALLO", "commit log"),
        ("CompilerThre", "JIT compiler"),
    ];
    const GC: [&str; 5] = [
        "GC Thread",
        "G1 ",
        "VM Thread",
        "GC task",
        "Concurrent Mark",
    ];
    if let Some((_, kind)) = KINDS.iter().find(|(prefix, _)| name.contains(prefix)) {
        return kind;
    }
    if GC.iter().any(|prefix| name.starts_with(prefix)) {
        return "garbage collection";
    }
    "other"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_user_and_system_ticks_whatever_its_command_name() {
        let line = "4242 (java (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 1234 567 0 0 20 0 \
                    80 0 12345 0 0";
        assert_eq!(parse_stat(line), Some(1234 + 567));
        assert_eq!(parse_stat("4242 (short) S 1"), None);
    }

    #[test]
    fn cpu_per_task_is_each_process_delta_over_the_tasks_and_their_total() {
        let before = CpuSnapshot(vec![("a", Some(1.0)), ("b", Some(2.0)), ("c", None)]);
        let after = CpuSnapshot(vec![("a", Some(3.0)), ("b", Some(2.5)), ("c", Some(9.0))]);
        let per = after.per_task_since(&before, 1000);
        let names: Vec<&str> = per.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "total"]);
        assert!((per[0].1 - 2.0).abs() < 1e-9 && (per[2].1 - 2.5).abs() < 1e-9);
        // This process is readable, and spends something.
        let me = stack_processes();
        assert!(CpuSnapshot::take(&me[..1]).0[0].1.is_some());
    }

    #[test]
    fn threads_are_grouped_by_what_they_do_and_their_cpu_is_per_task_most_first() {
        assert_eq!(thread_kind("SharedPool-Work"), "requests");
        assert_eq!(thread_kind("C2 CompilerThre"), "JIT compiler");
        assert_eq!(thread_kind("GC Thread#3"), "garbage collection");
        assert_eq!(thread_kind("G1 Conc#0"), "garbage collection");
        assert_eq!(thread_kind("GossipTasks:1"), "other");
        let before = ThreadSnapshot(BTreeMap::from([("requests", 1.0), ("compaction", 1.0)]));
        let after = ThreadSnapshot(BTreeMap::from([
            ("requests", 2.0),
            ("compaction", 4.0),
            ("other", 0.5),
        ]));
        let per = after.per_task_since(&before, 1000);
        assert_eq!(
            per,
            [
                ("compaction".to_string(), 3.0),
                ("requests".to_string(), 1.0),
                ("other".to_string(), 0.5)
            ]
        );
        // This process's threads are readable.
        assert!(!ThreadSnapshot::take(Some(std::process::id())).0.is_empty());
    }
}
