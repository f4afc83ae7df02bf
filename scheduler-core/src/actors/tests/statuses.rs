//! The status check before a run: read in batches as tasks enter the tree, by key where the tree
//! does not know the answer (`known_statuses`).

use super::*;

#[test]
fn tasks_pushed_and_loaded_read_their_statuses_in_batches_not_one_by_one() {
    run_paused(|| async {
        let h = Harness::new(SchedulingSettings::default(), Duration::ZERO, &[]);
        h.assign().await;
        // 60 due now over 6 orderingIds (pushed as they are written), 60 due in two hours
        // (written ahead of the read cursor, loaded later).
        let now: Vec<Task> = (0..60)
            .map(|n| task(&format!("o{}", n % 6), t0() + ms(n), &n.to_string()))
            .collect();
        let later: Vec<Task> = (0..60)
            .map(|n| {
                task(
                    &format!("o{}", n % 6),
                    t0() + ms(7_200_000 + n),
                    &n.to_string(),
                )
            })
            .collect();
        h.enqueue(now.iter().chain(&later).cloned().collect()).await;
        advance(Duration::from_secs(7_300)).await;
        for t in now.iter().chain(&later) {
            let status = h.store.status_of(P, &t.key()).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{}", t.key());
        }
        assert_eq!(
            h.store.requests_of("status read"),
            0,
            "every status was known from a batch read"
        );
        let batches = h.store.requests_of("status batch read");
        assert!(
            (2..=6).contains(&batches),
            "{batches} batch reads for 120 tasks"
        );
    });
}

#[test]
fn a_key_that_finished_or_was_cancelled_is_not_run_when_its_record_comes_again() {
    run_paused(|| async {
        // Every call takes 2 s.
        let h = Harness::new(SchedulingSettings::default(), Duration::from_secs(2), &[]);
        h.assign().await;
        let (done, running, cancelled) = (
            task("a", t0(), "done"),
            task("b", t0(), "running"),
            task("c", t0() + ms(60_000), "cancelled"),
        );
        h.enqueue(vec![done.clone(), running.clone()]).await;
        advance(Duration::from_secs(3)).await;
        // `done` finished; `running`'s copy again while its first call runs (the batch read
        // finds no status yet); `cancelled` cancelled before it is ever scheduled.
        h.enqueue(vec![running.clone()]).await;
        h.cancel(vec![cancelled.key()]).await;
        advance(Duration::from_secs(3)).await;
        h.enqueue(vec![done.clone(), running.clone(), cancelled.clone()])
            .await;
        advance(Duration::from_secs(120)).await;
        assert_eq!(
            h.recorder.call_times("a").len(),
            1,
            "a finished key runs once"
        );
        assert_eq!(
            h.recorder.call_times("b").len(),
            1,
            "a finished key runs once"
        );
        assert!(
            h.recorder.call_times("c").is_empty(),
            "a cancelled key never runs"
        );
    });
}

/// A backlog for the executor's slots costs no store read per task: a checked task whose slot
/// comes late calls at once. (Until issue 33 a slot that came over 100 ms late read the task's
/// status again while held: with 64 slots and 20 ms reads that capped the executor near 3k
/// calls a second, which kept every slot late, a state the executor stayed in.)
#[test]
fn tasks_whose_slots_come_late_read_no_status_again_in_them() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            executor_concurrency: 2,
            ..SchedulingSettings::default()
        };
        // Every call takes 50 ms: 60 tasks due together wait up to 1.5 s for a slot.
        let h = Harness::new(settings, Duration::from_millis(50), &[]);
        h.assign().await;
        let due: Vec<Task> = (0..60)
            .map(|n| task(&format!("o{n}"), t0() + ms(1_000), "1"))
            .collect();
        h.enqueue(due.clone()).await;
        advance(Duration::from_secs(10)).await;
        for t in &due {
            assert_eq!(
                h.recorder.call_times(&t.ordering_id).len(),
                1,
                "{}",
                t.key()
            );
        }
        assert_eq!(
            h.store.requests_of("status read"),
            0,
            "no status read again for a slot that came late"
        );
    });
}

/// A key's flood far beyond its share of the tree's memory is deferred and read back a few at
/// a time: the tasks read back read their statuses in a batch per read-back, as a loaded page
/// does, not one by one as each runs (the noisy-neighbour bench at 200,000 measured 0.79
/// status reads by key per task of the flood, its largest Cassandra cost).
#[test]
fn deferred_tasks_read_back_read_their_statuses_in_batches_not_one_by_one() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            max_in_flight_tasks: 40,
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_millis(5), &[]);
        h.assign().await;
        // 400 of tenant a over 20 orderingIds, all due at 10 s: a tree holds 10 of them.
        let a = super::limits::tenant_a_batch_at_10s();
        h.enqueue(a.clone()).await;
        advance(Duration::from_secs(120)).await;
        for t in &a {
            let status = h.store.status_of(P, &t.key()).map(|s| s.status);
            assert_eq!(status, Some(TaskStatus::Completed), "{}", t.key());
        }
        assert!(
            h.store.deferred_rows_read() > 300,
            "most of a's tasks were deferred and read back"
        );
        let by_key = h.store.requests_of("status read");
        assert!(
            by_key <= 10,
            "{by_key} status reads by key for 400 tasks, most of them read back"
        );
    });
}

/// A buffer the test's log lines are written to.
#[derive(Clone, Default)]
struct LogLines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn each_finished_task_logs_one_info_line_with_its_key_outcome_attempt_and_duration() {
    let lines = LogLines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        run_paused(|| async {
            let h = Harness::new(
                SchedulingSettings::default(),
                Duration::from_millis(40),
                &[("flaky", Behaviour::FailTimes(1))],
            );
            h.assign().await;
            h.enqueue(vec![task("calm", t0(), "1"), task("flaky", t0(), "1")])
                .await;
            advance(Duration::from_secs(120)).await;
        });
    });
    let text = String::from_utf8(lines.0.lock().expect("lock").clone()).expect("utf-8");
    let finished: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("task finished"))
        .collect();
    assert_eq!(finished.len(), 2, "{text}");
    let calm = finished
        .iter()
        .find(|l| l.contains("calm/"))
        .expect("calm's line");
    assert!(calm.contains("INFO"), "{calm}");
    assert!(
        calm.contains("outcome=Completed attempt=1 duration_ms=40"),
        "{calm}"
    );
    let flaky = finished
        .iter()
        .find(|l| l.contains("flaky/"))
        .expect("flaky's line");
    assert!(flaky.contains("outcome=Completed attempt=2"), "{flaky}");
}
