//! `scheduler node` against the dev stack, stopped as a service manager stops it (SIGTERM): it
//! drains, commits and leaves its group, says so line by line, exits 0, and writes plain text
//! (no colour escapes) when its stderr is not a terminal.

mod common;

use std::time::{Duration, Instant};

use common::NodeProcess;

#[test]
fn sigterm_drains_commits_leaves_the_group_and_says_so_in_plain_text() {
    let mut node = NodeProcess::start("signals", &[]);
    node.wait_for("node running");
    // Owning its partitions: the drain has trees to stop.
    node.wait_for("partition claimed");
    node.terminate();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = node.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 60 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = node.log();
    assert_eq!(status.code(), Some(0), "{status:?}; stderr:\n{text}");
    for said in [
        "SIGTERM",
        "offsets committed",
        "partition trees drained",
        "left the consumer group",
        "scheduler: stopped",
    ] {
        assert!(text.contains(said), "no {said:?} in:\n{text}");
    }
    assert!(
        !text.contains('\u{1b}'),
        "colour escapes in a file:\n{text}"
    );
    let _ = std::fs::remove_dir_all(node.dir());
}
