//! Unit tests of handlers as a service writes them, with `scheduler_core::testing` (the
//! `testing` feature): the real engine in process, on a clock the test moves. No Kafka, no
//! Cassandra, no sleeping: each test runs in milliseconds, the same way every time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::TimeDelta;
use scheduler_client::{GroupMember, OnConflict, ScheduleError, Task, TaskData};
use scheduler_core::recurring::ScheduleSpec;
use scheduler_core::settings::{SchedulingSettings, TypeLimits};
use scheduler_core::store::{DeadLetter, DeadReason, SuspensionTarget, TaskStatus};
use scheduler_core::testing::{Outcome, TestEngine, TestingError};
use scheduler_core::{GroupOutcome, TaskContext, TaskError, TaskHandler};

fn data(json: serde_json::Value) -> TaskData {
    json.as_object().cloned().unwrap_or_default()
}

/// Sends an email; fails while the (pretend) mail server is down, refuses a task without an
/// address, and keeps what it sent and which tasks became dead letters.
#[derive(Clone, Default)]
struct SendEmail {
    /// Calls that fail before the server is "up" again.
    failures_left: Arc<AtomicU32>,
    sent: Arc<Mutex<Vec<String>>>,
    dead: Arc<Mutex<Vec<String>>>,
}

impl SendEmail {
    fn failing(times: u32) -> SendEmail {
        let handler = SendEmail::default();
        handler.failures_left.store(times, Ordering::SeqCst);
        handler
    }
}

impl TaskHandler for SendEmail {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        let Some(to) = task.task_data.get("to").and_then(|t| t.as_str()) else {
            return Err(TaskError::invalid("no recipient"));
        };
        let down = self
            .failures_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if down {
            return Err(TaskError::retry("mail server unavailable"));
        }
        self.sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(to.to_string());
        Ok(())
    }

    async fn dead_lettered(&self, letter: &DeadLetter) {
        let mut dead = self.dead.lock().unwrap_or_else(PoisonError::into_inner);
        dead.push(letter.task.uniqueness_key.clone());
    }
}

/// The retry policy of these tests: backoff from 10 s (each wait between half and all of
/// 10 s, 20 s, 40 s ...), three retries.
fn retrying_settings() -> SchedulingSettings {
    SchedulingSettings {
        backoff_factor: Duration::from_secs(10),
        max_backoff: Duration::from_secs(60),
        max_task_retries: 3,
        ..SchedulingSettings::default()
    }
}

fn email(engine: &TestEngine, key: &str) -> Task {
    Task::new(
        "customer-7",
        engine.now(),
        key,
        data(serde_json::json!({"to": "ann@example.com"})),
    )
    .of_type("email")
}

#[tokio::test]
async fn a_handler_that_succeeds_completes_its_task_at_its_time() {
    let handler = SendEmail::default();
    let engine = TestEngine::builder()
        .handler("email", handler.clone())
        .start()
        .await
        .expect("engine");
    let due = engine.now() + TimeDelta::seconds(30);
    let task = Task {
        scheduled_time: due,
        ..email(&engine, "welcome")
    };
    engine.schedule(task.clone()).expect("scheduled");

    assert!(
        engine.run_due().await.expect("ran").is_empty(),
        "not due yet"
    );
    assert!(engine
        .advance(Duration::from_millis(29_999))
        .await
        .expect("ran")
        .is_empty());
    let runs = engine.advance(Duration::from_millis(1)).await.expect("ran");

    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].key(), task.key());
    assert_eq!((runs[0].attempt, runs[0].at), (1, due));
    assert_eq!(runs[0].outcome, Outcome::Completed);
    let status = engine.status(&task.key()).expect("a final status");
    assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 1));
    assert_eq!(*handler.sent.lock().unwrap(), ["ann@example.com"]);
    assert!(engine.pending().is_empty());
}

#[tokio::test]
async fn a_handler_failing_twice_is_retried_after_its_backoff_and_then_completes() {
    let engine = TestEngine::builder()
        .handler("email", SendEmail::failing(2))
        .settings(retrying_settings())
        .start()
        .await
        .expect("engine");
    let start = engine.now();
    let task = email(&engine, "invoice");
    engine.schedule(task.clone()).expect("scheduled");

    let first = engine.run_due().await.expect("ran");
    assert_eq!(first.len(), 1);
    assert_eq!(
        first[0].outcome,
        Outcome::Retrying {
            error: "mail server unavailable".into()
        }
    );

    // The first retry waits between 5 and 10 s: not before, surely by then.
    assert!(engine
        .advance(Duration::from_millis(4_999))
        .await
        .expect("ran")
        .is_empty());
    let second = engine
        .advance(Duration::from_millis(5_001))
        .await
        .expect("ran");
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2);
    assert!(matches!(second[0].outcome, Outcome::Retrying { .. }));

    // The second waits between 10 and 20 s.
    let third = engine.advance(Duration::from_secs(20)).await.expect("ran");
    assert_eq!(third.len(), 1);
    assert_eq!(
        (third[0].attempt, &third[0].outcome),
        (3, &Outcome::Completed)
    );
    let waited = third[0].at - second[0].at;
    assert!(
        waited >= TimeDelta::seconds(10) && waited <= TimeDelta::seconds(20),
        "{waited}"
    );
    assert!(third[0].at - start <= TimeDelta::seconds(30));

    let status = engine.status(&task.key()).expect("a final status");
    assert_eq!((status.status, status.attempts), (TaskStatus::Completed, 3));
    let attempts: Vec<u32> = engine
        .attempts(&task.key())
        .iter()
        .map(|a| a.attempt)
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert!(engine.dead_letters().is_empty());
}

#[tokio::test]
async fn a_handler_that_keeps_failing_leaves_a_dead_letter_once_its_retries_run_out() {
    let handler = SendEmail::failing(u32::MAX);
    let engine = TestEngine::builder()
        .handler("email", handler.clone())
        .settings(retrying_settings())
        // This type's own policy: two retries.
        .limits(
            "email",
            TypeLimits {
                max_task_retries: Some(2),
                ..TypeLimits::default()
            },
        )
        .start()
        .await
        .expect("engine");
    let task = email(&engine, "reminder");
    let invalid =
        Task::new("customer-8", engine.now(), "no-address", TaskData::new()).of_type("email");
    engine.schedule(task.clone()).expect("scheduled");
    engine.schedule(invalid.clone()).expect("scheduled");

    let runs = engine.advance(Duration::from_secs(60)).await.expect("ran");

    let of = |key: &str| -> Vec<(u32, Outcome)> {
        runs.iter()
            .filter(|r| r.task.uniqueness_key == key)
            .map(|r| (r.attempt, r.outcome.clone()))
            .collect()
    };
    let unavailable = || Outcome::Retrying {
        error: "mail server unavailable".into(),
    };
    assert_eq!(
        of("reminder"),
        [
            (1, unavailable()),
            (2, unavailable()),
            (
                3,
                Outcome::DeadLettered {
                    reason: DeadReason::RetriesExhausted,
                    error: "mail server unavailable".into()
                }
            ),
        ]
    );
    assert_eq!(
        of("no-address"),
        [(
            1,
            Outcome::DeadLettered {
                reason: DeadReason::Invalid,
                error: "no recipient".into()
            }
        )]
    );
    assert_eq!(
        engine.status(&task.key()).map(|s| s.status),
        Some(TaskStatus::Failed)
    );
    assert_eq!(
        engine.status(&invalid.key()).map(|s| s.status),
        Some(TaskStatus::Dropped)
    );
    let mut letters: Vec<(String, DeadReason, u32)> = engine
        .dead_letters()
        .into_iter()
        .map(|l| (l.task.uniqueness_key, l.reason, l.attempts))
        .collect();
    letters.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        letters,
        [
            ("no-address".to_string(), DeadReason::Invalid, 1),
            ("reminder".to_string(), DeadReason::RetriesExhausted, 3),
        ]
    );
    // The handler's dead-letter hook heard of each once.
    let mut dead = handler.dead.lock().unwrap().clone();
    dead.sort();
    assert_eq!(dead, ["no-address", "reminder"]);
}

/// Reconciles one account; the group's join sums what every member found.
#[derive(Clone, Default)]
struct Reconcile {
    joins: Arc<Mutex<Vec<GroupOutcome>>>,
}

impl TaskHandler for Reconcile {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let found = task.task_data.get("balance").cloned().unwrap_or_default();
        ctx.set_result(found)
            .map_err(|e| TaskError::invalid(e.to_string()))
    }

    async fn group_finished(
        &self,
        _: &Task,
        group: &GroupOutcome,
        _: &TaskContext,
    ) -> Result<(), TaskError> {
        self.joins
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(group.clone());
        Ok(())
    }
}

#[tokio::test]
async fn a_group_is_joined_once_after_every_member_finished() {
    let handler = Reconcile::default();
    let engine = TestEngine::builder()
        .handler("recon", handler.clone())
        .start()
        .await
        .expect("engine");
    for (i, balance) in [(1, 10), (2, 20), (3, 12)] {
        let due = engine.now() + TimeDelta::seconds(i64::from(i));
        let task = Task::new(
            format!("account-{i}"),
            due,
            "recon-x",
            data(serde_json::json!({"balance": balance})),
        )
        .of_type("recon")
        .in_group(GroupMember::new("recon-x", i).of(3));
        engine.schedule(task).expect("scheduled");
    }

    let runs = engine.advance(Duration::from_secs(3)).await.expect("ran");

    let (members, joins): (Vec<_>, Vec<_>) = runs.iter().partition(|r| r.task.join_of.is_none());
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|r| r.outcome == Outcome::Completed));
    // The last member's outcome enqueued the join, which ran at once.
    assert_eq!(joins.len(), 1);
    assert_eq!(joins[0].task.join_of.as_deref(), Some("recon-x"));
    assert_eq!(joins[0].at, engine.now());
    let joined = handler.joins.lock().unwrap().clone();
    assert_eq!(joined.len(), 1);
    let balances: Vec<_> = joined[0].members.iter().map(|m| m.result.clone()).collect();
    assert_eq!(
        balances,
        [Some(10.into()), Some(20.into()), Some(12.into())]
    );
    assert!(joined[0]
        .members
        .iter()
        .all(|m| m.status == TaskStatus::Completed));
}

/// Counts the runs of a recurring report.
#[derive(Clone, Default)]
struct Report {
    runs: Arc<Mutex<Vec<chrono::DateTime<chrono::Utc>>>>,
}

impl TaskHandler for Report {
    async fn execute(&self, task: &Task, _: &TaskContext) -> Result<(), TaskError> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task.scheduled_time);
        Ok(())
    }
}

#[tokio::test]
async fn a_schedule_every_minute_fires_five_times_in_five_minutes() {
    let handler = Report::default();
    let engine = TestEngine::builder()
        .handler("report", handler.clone())
        .start()
        .await
        .expect("engine");
    let start = engine.now();
    let spec = ScheduleSpec::every(
        "hourly-totals",
        Duration::from_secs(60),
        "report",
        TaskData::new(),
    );
    engine.schedules().create(spec).await.expect("created");

    let runs = engine
        .advance(Duration::from_secs(5 * 60))
        .await
        .expect("ran");

    // The schedule's own ticks are the engine's: only the report's runs are listed.
    let times: Vec<_> = runs
        .iter()
        .map(|r| (r.task.task_type.as_str(), r.at))
        .collect();
    let minutes: Vec<_> = (1..=5)
        .map(|m| ("report", start + TimeDelta::minutes(m)))
        .collect();
    assert_eq!(times, minutes);
    assert!(runs.iter().all(|r| r.outcome == Outcome::Completed));
    assert_eq!(handler.runs.lock().unwrap().len(), 5);
    let fires = engine
        .schedules()
        .fires("hourly-totals", 10)
        .await
        .expect("fires");
    assert_eq!(fires.len(), 5);
    let next = engine.schedules().get("hourly-totals").await.expect("read");
    assert_eq!(
        next.and_then(|s| s.next_fire),
        Some(start + TimeDelta::minutes(6))
    );
}

/// Takes five seconds (of the engine's clock) per call.
#[derive(Clone, Default)]
struct Slow;

impl TaskHandler for Slow {
    async fn execute(&self, _: &Task, _: &TaskContext) -> Result<(), TaskError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(())
    }
}

#[tokio::test]
async fn tasks_of_one_ordering_id_run_one_at_a_time_in_schedule_order() {
    let engine = TestEngine::new(Slow).await.expect("engine");
    let start = engine.now();
    let at = |secs: i64| start + TimeDelta::seconds(secs);
    // Scheduled out of time order; "b" and "c" are due together and run in the order sent.
    for (ordering_id, key, due) in [
        ("order-1", "d", at(2)),
        ("order-1", "b", at(1)),
        ("order-1", "c", at(1)),
        ("order-1", "a", at(0)),
        ("order-2", "x", at(1)),
    ] {
        engine
            .schedule(Task::new(ordering_id, due, key, TaskData::new()))
            .expect("scheduled");
    }

    let runs = engine.advance(Duration::from_secs(60)).await.expect("ran");

    let started = |ordering_id: &str| -> Vec<(String, i64)> {
        runs.iter()
            .filter(|r| r.task.ordering_id == ordering_id)
            .map(|r| (r.task.uniqueness_key.clone(), (r.at - at(0)).num_seconds()))
            .collect()
    };
    // Each call starts once the one before it ended (5 s each).
    let expected = [("a", 0), ("b", 5), ("c", 10), ("d", 15)].map(|(k, s)| (k.to_string(), s));
    assert_eq!(started("order-1"), expected);
    // Another orderingId does not wait for them.
    assert_eq!(started("order-2"), [("x".to_string(), 1)]);
}

#[tokio::test]
async fn conflict_modes_cancels_and_suspensions_act_as_on_a_node() {
    let handler = SendEmail::default();
    let engine = TestEngine::builder()
        .handler("email", handler.clone())
        .start()
        .await
        .expect("engine");
    let start = engine.now();
    // A draft saved three times within 20 s, debounced: one email, with the last address, 30 s
    // after the last save.
    for (secs, to) in [
        (0, "a@example.com"),
        (10, "b@example.com"),
        (20, "c@example.com"),
    ] {
        engine
            .advance_to(start + TimeDelta::seconds(secs))
            .await
            .expect("ran");
        let debounce = OnConflict::Debounce {
            max_wait: Duration::from_secs(300),
        };
        let due = engine.now() + TimeDelta::seconds(30);
        let draft = Task::new(
            "customer-7",
            due,
            "draft-saved",
            data(serde_json::json!({"to": to})),
        )
        .of_type("email")
        .on_conflict(debounce);
        engine.schedule(draft).expect("scheduled");
    }
    // A reminder cancelled before its time never runs.
    let reminder = Task {
        scheduled_time: start + TimeDelta::seconds(40),
        ..email(&engine, "reminder")
    };
    engine.schedule(reminder.clone()).expect("scheduled");
    engine.cancel(&reminder.key()).expect("cancelled");

    let runs = engine
        .advance_to(start + TimeDelta::seconds(60))
        .await
        .expect("ran");

    let ran: Vec<_> = runs
        .iter()
        .map(|r| (r.task.uniqueness_key.as_str(), r.at - start))
        .collect();
    assert_eq!(ran, [("draft-saved", TimeDelta::seconds(50))]);
    assert_eq!(*handler.sent.lock().unwrap(), ["c@example.com"]);
    assert_eq!(
        engine.status(&reminder.key()).map(|s| s.status),
        Some(TaskStatus::Cancelled)
    );

    // Emails suspended: a due one waits, without an attempt, until they are resumed.
    let emails = SuspensionTarget::TaskType("email".into());
    engine
        .suspend(emails.clone(), Some("mail provider incident".into()))
        .await
        .expect("suspended");
    let held = email(&engine, "held");
    engine.schedule(held.clone()).expect("scheduled");
    assert!(engine
        .advance(Duration::from_secs(600))
        .await
        .expect("ran")
        .is_empty());
    assert_eq!(engine.pending(), [held.key()]);
    engine.resume(emails).await.expect("resumed");
    let resumed = engine.run_due().await.expect("ran");
    assert_eq!(
        resumed
            .iter()
            .map(|r| (r.key(), r.attempt))
            .collect::<Vec<_>>(),
        [(held.key(), 1)]
    );
    assert!(engine.pending().is_empty());
}

#[tokio::test]
async fn a_task_the_client_refuses_is_refused_with_the_clients_error() {
    let engine = TestEngine::new(Slow).await.expect("engine");
    let late = Task::new(
        "customer-7",
        engine.now() - TimeDelta::minutes(1),
        "late",
        TaskData::new(),
    );
    let unnamed = Task::new("", engine.now(), "unnamed", TaskData::new());

    assert!(matches!(
        engine.schedule(late),
        Err(TestingError::Rejected(
            ScheduleError::TooFarInThePast { .. }
        ))
    ));
    assert!(matches!(
        engine.schedule(unnamed),
        Err(TestingError::Rejected(ScheduleError::EmptyOrderingId))
    ));
    assert!(engine.run_due().await.expect("ran").is_empty());
}
