//! Per-key concurrency (`key_concurrency`): a key's calls at once stay within its limit on a
//! node, its other tasks wait at the executor's gate holding no slot, and other keys and
//! tasks without a key are not held up.

use super::*;

fn keyed(ordering_id: &str, at: DateTime<Utc>, key: &str) -> Task {
    task(ordering_id, at, "1").with_limit_key(key)
}

#[test]
fn a_keys_calls_at_once_stay_within_its_limit_and_hold_up_no_other_key() {
    run_paused(|| async {
        let settings = SchedulingSettings {
            key_concurrency: Some(2),
            ..SchedulingSettings::default()
        };
        let h = Harness::new(settings, Duration::from_secs(1), &[]);
        h.assign().await;
        // Twenty orderingIds of tenant a, due together; then b's and an unkeyed task.
        let a: Vec<Task> = (0..20)
            .map(|i| keyed(&format!("a-{i}"), t0(), "tenant-a"))
            .collect();
        let b = keyed("b-0", t0() + ms(10), "tenant-b");
        let free = task("free", t0() + ms(10), "1");
        let mut all = a.clone();
        all.extend([b.clone(), free.clone()]);
        h.enqueue(all).await;
        advance(Duration::from_secs(30)).await;
        assert_eq!(h.recorder.peak_of_limit_key("tenant-a"), 2);
        for t in a.iter().chain([&b, &free]) {
            assert_eq!(
                h.store.status_of(P, &t.key()).map(|s| s.status),
                Some(TaskStatus::Completed),
                "{}",
                t.key()
            );
        }
        // a's twenty calls of 1 s, two at a time, take ten seconds; b and the unkeyed task
        // are called at their time, not after them.
        let a_times: Vec<_> = a
            .iter()
            .flat_map(|t| h.recorder.call_times(&t.ordering_id))
            .collect();
        let last_a = a_times.iter().max().copied().expect("a ran");
        assert!(last_a >= t0() + ms(9_000), "{last_a}");
        for t in [&b, &free] {
            assert_eq!(
                h.recorder.call_times(&t.ordering_id),
                [t0() + ms(10)],
                "{} is not held up by tenant a",
                t.ordering_id
            );
        }
    });
}
