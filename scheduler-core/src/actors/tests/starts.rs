//! A tree's start: its start-up reads are bounded, and the consumer never waits on a tree for
//! longer than `persist_timeout`, whatever the store does.

use super::*;

/// A tree whose start-up reads fail for good (Cassandra refusing a read past its tombstone
/// threshold, say) answered no batch at all: its start retried inside the mailbox and the
/// consumer thread waited for ever, polling no partition. Now each batch is answered within
/// `persist_timeout` (refused: it is polled again), and once the store answers the tree starts.
#[test]
fn a_tree_whose_start_up_reads_fail_answers_each_batch_within_the_persist_timeout() {
    run_paused(|| async {
        let settings = SchedulingSettings::default();
        let limit = settings.persist_timeout;
        let h = Harness::new(settings, Duration::ZERO, &[]);
        h.store.fail_op("deferred cancels read", usize::MAX);
        h.assign().await;
        let batch = || PolledTasks {
            tasks: vec![h.enqueued(task("o", t0() + ms(100), "1"))],
            ..PolledTasks::default()
        };
        for _ in 0..3 {
            let asked = tokio::time::Instant::now();
            let reply = tokio::time::timeout(limit * 3, h.offer(batch())).await;
            let waited = asked.elapsed();
            let reply = reply.expect("the batch is answered");
            assert!(reply.persisted.is_empty(), "{reply:?}");
            assert!(waited <= limit, "answered after {waited:?}");
            advance(Duration::from_secs(1)).await;
        }
        // The store answers again: the tree starts, and the batch polled again runs.
        h.store.fail_op("deferred cancels read", 0);
        advance(Duration::from_secs(15)).await;
        h.process(batch()).await;
        advance(Duration::from_secs(1)).await;
        assert_eq!(h.recorder.call_times("o").len(), 1);
    });
}

/// Past Cassandra's tombstone threshold a read fails. Every task that retried and then
/// finished left a tombstone in the partition's retrying tasks, which a new tree read whole as
/// it started: past the threshold no tree of the partition could start again. Now no start-up
/// read walks what finished tasks left.
#[test]
fn a_new_tree_starts_however_many_tasks_retried_and_finished_before() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            backoff_factor: Duration::from_millis(100),
            ..SchedulingSettings::default()
        };
        let flaky: Vec<(String, Behaviour)> = (0..150)
            .map(|i| (format!("f{i}"), Behaviour::FailTimes(1)))
            .collect();
        let flaky: Vec<(&str, Behaviour)> = flaky.iter().map(|(o, b)| (o.as_str(), *b)).collect();
        let h = Harness::new(settings, Duration::ZERO, &flaky);
        h.store.set_tombstone_failure_threshold(100);
        h.assign().await;
        let tasks: Vec<Task> = (0..150)
            .map(|i| task(&format!("f{i}"), t0() + ms(i), "1"))
            .collect();
        h.enqueue(tasks).await;
        advance(Duration::from_secs(60)).await;
        assert_eq!(
            h.recorder.calls().len(),
            300,
            "each failed once, then succeeded"
        );
        h.topic.send(RevokePartitions).await.expect("revoke");
        h.assign().await;
        h.enqueue(vec![task("new", t0() + ms(70_000), "1")]).await;
        advance(Duration::from_secs(20)).await;
        assert_eq!(
            h.recorder.call_times("new").len(),
            1,
            "the new tree runs tasks"
        );
    });
}

/// What a test's actors log, as text (set as the thread's subscriber while it lives).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut logs = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        logs.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A load asked of a tree that has not started yet (its claim and start-up reads not done)
/// was refused as a failed Cassandra statement: "Cassandra schedule load failed: the partition
/// is stopping", borrowing the store's words for a state of the tree, and the wrong state. It
/// says that the tree is still starting, and no store error is reported.
#[test]
fn a_load_asked_before_the_tree_started_says_so_and_blames_no_store() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.store.fail_op("deferred cancels read", 3);
        h.assign().await;
        advance(Duration::from_secs(30)).await;
        h.enqueue(vec![task("o", t0() + ms(31_000), "1")]).await;
        advance(Duration::from_secs(5)).await;
        assert_eq!(h.recorder.call_times("o").len(), 1, "the tree started");
    });
    let text = String::from_utf8_lossy(&logs.0.lock().expect("logs")).into_owned();
    let loads: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("schedule load failed"))
        .collect();
    assert!(
        !loads.is_empty(),
        "the controller asks before the start is done: {text}"
    );
    for line in loads {
        assert!(line.contains("still starting"), "{line}");
        assert!(!line.contains("Cassandra"), "{line}");
    }
}
