//! The time slice the node's I/O threads ask of Linux (`scheduling.thread_slice`).
//!
//! Linux 6.12 and later schedule ordinary threads by their earliest eligible virtual deadline
//! (EEVDF): a thread's deadline is its slice ahead, so a thread with a short slice, once woken,
//! runs ahead of the longer-sliced threads it competes with, where a default slice would wait
//! for the running one's turn to end. It gets no larger share of the CPU: it runs in shorter
//! turns, sooner. A task's call waits on these threads for its time, and the threads it competes
//! with first are the node's own busy ones (the actors', the consumer's, librdkafka's): on a
//! saturated machine the slice cut the share of a steady tenant's calls over 9 ms late by a
//! third (BENCHMARKS.md, "A short time slice for the node's I/O threads"). Where the kernel
//! groups threads by session or cgroup, another group's threads still take their group's turn.
//! Any user may ask; earlier kernels accept the request and ignore it. libc has the call's
//! number, not a wrapper, and no kept crate sets a slice, so the call is made here.

use std::time::Duration;

/// Asks for `slice` as the calling thread's time slice (zero: leave the kernel's default).
#[cfg(target_os = "linux")]
pub(super) fn ask(slice: Duration) -> std::io::Result<()> {
    if slice.is_zero() {
        return Ok(());
    }
    let attr = SchedAttr {
        size: SCHED_ATTR_SIZE,
        // SCHED_OTHER, nice and priority unchanged: only the slice.
        runtime: u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX),
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a `struct sched_attr` of the size it states, alive for the call; pid 0
    // names the calling thread, and the kernel only reads the struct.
    let done = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    match done {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Elsewhere the request has no meaning: the thread keeps its system's scheduling.
#[cfg(not(target_os = "linux"))]
pub(super) fn ask(_slice: Duration) -> std::io::Result<()> {
    Ok(())
}

/// The time slice of thread `tid` (0: the calling thread), as the kernel reports it (6.12 and
/// later; zero before).
#[cfg(all(test, target_os = "linux"))]
pub(super) fn of(tid: libc::pid_t) -> std::io::Result<Duration> {
    let mut attr = SchedAttr::default();
    // SAFETY: the kernel writes at most `SCHED_ATTR_SIZE` bytes into `attr`, which has them.
    let done = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut SchedAttr,
            SCHED_ATTR_SIZE,
            0,
        )
    };
    match done {
        0 => Ok(Duration::from_nanos(attr.runtime)),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Whether this kernel takes a thread's slice (6.12 or later), from its release.
#[cfg(all(test, target_os = "linux"))]
pub(super) fn kernel_takes_slices() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) >= (6, 12)
}

/// `struct sched_attr` (linux/sched/types.h), its first version: 48 bytes, which every kernel
/// since 3.14 reads.
#[cfg(target_os = "linux")]
#[derive(Default)]
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    /// For SCHED_OTHER, the slice in nanoseconds (clamped to 0.1-100 ms by the kernel).
    runtime: u64,
    deadline: u64,
    period: u64,
}

#[cfg(target_os = "linux")]
const SCHED_ATTR_SIZE: u32 = std::mem::size_of::<SchedAttr>() as u32;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A thread that asks for a slice has it (on a kernel that takes slices), and one that
    /// asks for none keeps the kernel's default.
    #[test]
    fn a_thread_that_asks_for_a_slice_has_it() {
        let asked = std::thread::spawn(|| {
            ask(Duration::from_micros(100))?;
            of(0)
        });
        let left = std::thread::spawn(|| {
            ask(Duration::ZERO)?;
            of(0)
        });
        let (asked, left) = (
            asked
                .join()
                .expect("the thread runs")
                .expect("the kernel answers"),
            left.join()
                .expect("the thread runs")
                .expect("the kernel answers"),
        );
        if kernel_takes_slices() {
            assert_eq!(asked, Duration::from_micros(100));
            assert!(
                left > Duration::from_micros(100),
                "the default slice: {left:?}"
            );
        }
    }
}
