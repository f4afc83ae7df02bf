use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use scheduler_client::Task;
use serde_json::json;
use tokio::sync::watch;

use super::registry::{ClaimEnd, CompletionRefused};
use super::*;
use crate::clock::TokioClock;
use crate::handler::{TaskContext, TaskError, TaskHandler};
use crate::lease::LeaseState;
use crate::outcome::StopReason;
use crate::settings::WorkersSettings;

fn t0() -> DateTime<Utc> {
    "2026-11-29T06:00:00Z"
        .parse::<DateTime<Utc>>()
        .expect("a time")
}

fn workers() -> RemoteWorkers {
    RemoteWorkers::new(
        WorkersSettings {
            enabled: true,
            claim_ttl: Duration::from_secs(30),
            max_wait: Duration::from_secs(20),
            worker_ttl: Duration::from_secs(10),
            types: vec!["resize".into()],
        },
        Arc::new(TokioClock::starting_at(t0())),
    )
}

fn resize(ordering_id: &str) -> Task {
    Task::new(
        ordering_id,
        t0(),
        "u1",
        json!({"width": 640})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
    .of_type("resize")
}

fn poll(worker: &str, wait_ms: u64) -> WorkerPoll {
    WorkerPoll {
        worker: worker.into(),
        types: vec!["resize".into()],
        capacity: 4,
        wait_ms: Some(wait_ms),
    }
}

/// A context whose tree can be stopped through the returned sender.
fn context() -> (TaskContext, watch::Sender<Option<StopReason>>) {
    let (stop, tree) = watch::channel(None);
    let (_, lease) = watch::channel(LeaseState::default());
    // (The lease's sender is dropped: its state stays as it is.)
    (TaskContext::new(3, 7, 2, tree, lease), stop)
}

/// Calls `task` through `workers` in a task of its own.
fn call(
    workers: &RemoteWorkers,
    task: Task,
    ctx: TaskContext,
) -> tokio::task::JoinHandle<(Result<(), TaskError>, TaskContext)> {
    let remote = RemoteCall::new(workers.clone());
    tokio::spawn(async move {
        let result = remote.execute(&task, &ctx).await;
        (result, ctx)
    })
}

#[tokio::test(start_paused = true)]
async fn a_worker_claims_an_offered_task_and_its_completion_is_the_calls_outcome() {
    let workers = workers();
    assert!(!workers.serves("resize"), "no worker yet");
    let (ctx, _stop) = context();
    let running = call(&workers, resize("o1"), ctx);
    let claims = workers.poll(poll("w1", 5_000)).await;
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(claim.task.ordering_id, "o1");
    assert_eq!(claim.task.task_data, json!({"width": 640}));
    assert_eq!((claim.attempt, claim.partition, claim.epoch), (2, 3, 7));
    assert_eq!(claim.ttl_ms, 30_000);
    assert!(workers.serves("resize"), "the worker polled just now");
    let result = json!({"done": true});
    workers
        .complete(
            &claim.claim_id,
            Completion::Success {
                result: Some(result.clone()),
            },
        )
        .expect("a live claim completes");
    let (outcome, ctx) = running.await.expect("the call");
    assert_eq!(outcome, Ok(()));
    assert_eq!(ctx.output_slot().take_result(), Some(result));
    // Once more: the claim ended.
    let again = workers.complete(&claim.claim_id, Completion::Success { result: None });
    assert_eq!(again, Err(CompletionRefused::Ended(ClaimEnd::Completed)));
    assert_eq!(workers.counts().completed, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_and_invalid_completions_are_the_calls_errors() {
    let workers = workers();
    for (completion, expected) in [
        (
            Completion::Retry {
                error: "busy".into(),
                retry_after_ms: Some(1_500),
            },
            TaskError::retry_after("busy", Duration::from_millis(1_500)),
        ),
        (
            Completion::Invalid {
                error: "no such image".into(),
            },
            TaskError::invalid("no such image"),
        ),
    ] {
        let (ctx, _stop) = context();
        let running = call(&workers, resize("o1"), ctx);
        let claims = workers.poll(poll("w1", 5_000)).await;
        workers
            .complete(&claims[0].claim_id, completion)
            .expect("live");
        let (outcome, _) = running.await.expect("the call");
        assert_eq!(outcome, Err(expected));
    }
}

#[tokio::test(start_paused = true)]
async fn a_claim_without_heartbeats_expires_and_its_late_completion_is_refused() {
    let workers = workers();
    let (ctx, _stop) = context();
    let running = call(&workers, resize("o1"), ctx);
    let claims = workers.poll(poll("w1", 5_000)).await;
    let claim_id = claims[0].claim_id.clone();
    // Heartbeats for a minute keep it live past its first expiry.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        workers
            .heartbeat(&claim_id)
            .expect("live while heartbeats come");
    }
    assert!(
        !running.is_finished(),
        "the call waits while the claim is live"
    );
    // Then the worker pauses past the claim's time to live.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let (outcome, _) = running.await.expect("the call");
    let Err(TaskError::Retry { reason, .. }) = outcome else {
        panic!("an expired claim is a retryable failure: {outcome:?}");
    };
    assert!(reason.contains("expired"), "{reason}");
    let late = workers.complete(&claim_id, Completion::Success { result: None });
    assert_eq!(late, Err(CompletionRefused::Ended(ClaimEnd::Expired)));
    assert_eq!(
        workers.heartbeat(&claim_id),
        Err(CompletionRefused::Ended(ClaimEnd::Expired))
    );
    assert!(
        workers.view().iter().all(|w| w.claims.is_empty()),
        "no live claim left"
    );
}

#[tokio::test(start_paused = true)]
async fn a_completion_after_the_expiry_is_refused_even_before_the_call_sees_it() {
    let workers = workers();
    let (ctx, _stop) = context();
    let running = call(&workers, resize("o1"), ctx);
    let claims = workers.poll(poll("w1", 5_000)).await;
    // The node's clock passes the expiry; the completion comes before the call's wait ends.
    tokio::time::advance(Duration::from_secs(30)).await;
    let late = workers.complete(&claims[0].claim_id, Completion::Success { result: None });
    assert_eq!(late, Err(CompletionRefused::Ended(ClaimEnd::Expired)));
    let (outcome, _) = running.await.expect("the call");
    assert!(
        matches!(outcome, Err(TaskError::Retry { .. })),
        "{outcome:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_claim_ends_with_its_tree_and_its_completion_is_refused() {
    let workers = workers();
    let (ctx, stop) = context();
    let running = call(&workers, resize("o1"), ctx);
    let claims = workers.poll(poll("w1", 5_000)).await;
    stop.send_replace(Some(StopReason::Revoked));
    let (outcome, _) = running.await.expect("the call");
    assert!(
        matches!(outcome, Err(TaskError::Retry { .. })),
        "{outcome:?}"
    );
    let late = workers.complete(&claims[0].claim_id, Completion::Success { result: None });
    let Err(CompletionRefused::Ended(ClaimEnd::CallEnded(why))) = late else {
        panic!("refused as ended with its tree: {late:?}");
    };
    assert!(why.contains("tree stopped"), "{why}");
    assert!(workers.heartbeat(&claims[0].claim_id).is_err());
}

#[tokio::test(start_paused = true)]
async fn a_call_that_ends_before_a_worker_claims_it_is_withdrawn() {
    let workers = workers();
    let (ctx, _stop) = context();
    let running = call(&workers, resize("o1"), ctx);
    tokio::task::yield_now().await;
    assert_eq!(workers.waiting().get("resize"), Some(&1));
    running.abort();
    let _ = running.await;
    assert!(workers.waiting().is_empty(), "withdrawn with its call");
    let claims = workers.poll(poll("w1", 1_000)).await;
    assert!(claims.is_empty(), "nothing to claim");
}

#[tokio::test(start_paused = true)]
async fn a_poll_waits_for_an_offer_of_its_types_within_its_wait() {
    let workers = workers();
    let polling = {
        let workers = workers.clone();
        tokio::spawn(async move { workers.poll(poll("w1", 10_000)).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        workers.serves("resize"),
        "a waiting poll is a connected worker"
    );
    assert!(!workers.serves("email"), "of its types only");
    let (ctx, _stop) = context();
    let _running = call(&workers, resize("o1"), ctx);
    let claims = polling.await.expect("the poll");
    assert_eq!(claims.len(), 1, "answered as the task was offered");
    // An empty answer once the wait is over; connected for the worker's time to live after.
    let empty = workers.poll(poll("w1", 3_000)).await;
    assert!(empty.is_empty());
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(
        !workers.serves("resize"),
        "gone once its time to live passed"
    );
}

#[tokio::test(start_paused = true)]
async fn a_poll_takes_at_most_its_capacity_oldest_first() {
    let workers = workers();
    let mut calls = Vec::new();
    for o in 0..5 {
        let (ctx, stop) = context();
        calls.push((call(&workers, resize(&format!("o{o}")), ctx), stop));
        tokio::task::yield_now().await;
    }
    let mut first = poll("w1", 0);
    first.capacity = 3;
    let claims = workers.poll(first).await;
    let claimed: Vec<&str> = claims.iter().map(|c| c.task.ordering_id.as_str()).collect();
    assert_eq!(claimed, ["o0", "o1", "o2"]);
    assert_eq!(workers.waiting().get("resize"), Some(&2));
    let view = workers.view();
    assert_eq!(view.len(), 1);
    assert_eq!(view[0].claims.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_join_of_a_remote_type_is_claimed_with_its_groups_outcome() {
    use crate::handler::DynTaskHandler;
    use crate::handler::GroupOutcome;
    use crate::store::{GroupKey, MemberOutcome, TaskStatus};
    let workers = workers();
    let (mut ctx, _stop) = context();
    let member = MemberOutcome {
        index: 1,
        key: resize("m1").key(),
        status: TaskStatus::Completed,
        error: None,
        result: Some(json!({"px": 3})),
        finished_at: t0(),
    };
    ctx.set_group(Arc::new(GroupOutcome {
        group: GroupKey {
            task_type: "resize".into(),
            id: "g1".into(),
        },
        total: Some(1),
        failed_by: None,
        members: vec![member],
        parent: None,
    }));
    let mut join = resize("o1");
    join.join_of = Some("g1".into());
    // As the engine calls a join: through `group_finished`.
    let remote: Arc<dyn DynTaskHandler> = Arc::new(RemoteCall::new(workers.clone()));
    let running = tokio::spawn(async move { remote.execute_boxed(join, ctx).await });
    let claims = workers.poll(poll("w1", 5_000)).await;
    assert_eq!(claims.len(), 1, "the join is offered to the worker");
    let group = claims[0]
        .group
        .as_ref()
        .expect("the join's claim has its group");
    assert_eq!((group.id.as_str(), group.total), ("g1", Some(1)));
    assert_eq!(group.members.len(), 1);
    assert_eq!(group.members[0].status, "completed");
    assert_eq!(group.members[0].result, Some(json!({"px": 3})));
    let id = claims[0].claim_id.clone();
    let done = Completion::Success { result: None };
    workers.complete(&id, done).expect("completes");
    assert_eq!(running.await.expect("the call"), Ok(()));
}
