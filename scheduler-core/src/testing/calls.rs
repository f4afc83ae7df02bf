//! What ran: each user handler is wrapped ([`Recorded`]) so that its calls are written to a
//! [`Journal`] as they end, and a drive reports them as [`Run`]s, with what became of each task
//! as the engine recorded it (its dead letter, its attempt's error).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use scheduler_client::{Task, TaskKey};

use crate::clock::Clock;
use crate::handler::{GroupOutcome, TaskContext, TaskError, TaskHandler};
use crate::store::{AttemptRecord, DeadLetter, DeadReason};

/// A call of a handler that ended during [`super::TestEngine::advance`] or
/// [`super::TestEngine::run_due`].
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The task, as the handler got it (a group's join has `join_of` set).
    pub task: Task,
    /// The attempt: 1 for the first.
    pub attempt: u32,
    /// When the handler was called, by the engine's clock.
    pub at: DateTime<Utc>,
    /// How the call ended, and what became of the task.
    pub outcome: Outcome,
}

impl Run {
    /// The task's key.
    pub fn key(&self) -> TaskKey {
        self.task.key()
    }
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler succeeded: the task completed.
    Completed,
    /// The call failed (an error, a timeout, a panic) and the task will be tried again after
    /// its backoff.
    Retrying {
        /// What went wrong.
        error: String,
    },
    /// The call failed and the task became a dead letter: it was invalid, or its retries ran
    /// out.
    DeadLettered {
        /// Which of the two.
        reason: DeadReason,
        /// The last error.
        error: String,
    },
}

/// A call of a user's handler as the kit saw it: the handler returned (`Some` result), or the
/// call ended without returning (`None`: it timed out or panicked).
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) task: Task,
    pub(super) attempt: u32,
    pub(super) at: DateTime<Utc>,
    pub(super) result: Option<Result<(), TaskError>>,
}

/// The calls that ended since the kit last took them, in the order they ended.
#[derive(Default)]
pub(super) struct Journal(Mutex<Vec<Call>>);

impl Journal {
    pub(super) fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn push(&self, call: Call) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }
}

/// A user's handler, its calls written to the journal.
pub(super) struct Recorded<E> {
    pub(super) handler: E,
    pub(super) journal: Arc<Journal>,
    pub(super) clock: Arc<dyn Clock>,
}

/// Writes its call to the journal when dropped: with the result once the handler returned,
/// without one if the call was dropped first (a timeout, a panic).
struct Ongoing<'a> {
    journal: &'a Journal,
    call: Option<Call>,
}

impl Ongoing<'_> {
    fn returned(mut self, result: &Result<(), TaskError>) {
        if let Some(call) = self.call.as_mut() {
            call.result = Some(result.clone());
        }
    }
}

impl Drop for Ongoing<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.journal.push(call);
        }
    }
}

impl<E> Recorded<E> {
    fn begin(&self, task: &Task, ctx: &TaskContext) -> Ongoing<'_> {
        Ongoing {
            journal: &self.journal,
            call: Some(Call {
                task: task.clone(),
                attempt: ctx.attempt(),
                at: self.clock.now(),
                result: None,
            }),
        }
    }
}

impl<E: TaskHandler> TaskHandler for Recorded<E> {
    async fn execute(&self, task: &Task, ctx: &TaskContext) -> Result<(), TaskError> {
        let ongoing = self.begin(task, ctx);
        let result = self.handler.execute(task, ctx).await;
        ongoing.returned(&result);
        result
    }

    fn dead_lettered(&self, letter: &DeadLetter) -> impl Future<Output = ()> + Send {
        self.handler.dead_lettered(letter)
    }

    async fn group_finished(
        &self,
        task: &Task,
        group: &GroupOutcome,
        ctx: &TaskContext,
    ) -> Result<(), TaskError> {
        let ongoing = self.begin(task, ctx);
        let result = self.handler.group_finished(task, group, ctx).await;
        ongoing.returned(&result);
        result
    }
}

/// The calls in `journal` as runs: a call that failed is a dead letter if the engine made its
/// task one at that attempt (`letters`), else it is retried; a call that did not return failed
/// with the error the engine recorded for its attempt (`attempts`, of its task).
pub(super) fn runs(
    calls: Vec<Call>,
    letters: &BTreeMap<TaskKey, DeadLetter>,
    attempts: impl Fn(&TaskKey) -> Vec<AttemptRecord>,
) -> Vec<Run> {
    calls
        .into_iter()
        .map(|call| {
            let key = call.task.key();
            let outcome = match call.result {
                Some(Ok(())) => Outcome::Completed,
                failed => match letters.get(&key).filter(|l| l.attempts == call.attempt) {
                    Some(letter) => Outcome::DeadLettered {
                        reason: letter.reason,
                        error: letter.last_error.clone(),
                    },
                    None => Outcome::Retrying {
                        error: match failed {
                            Some(Err(e)) => e.reason().to_string(),
                            _ => (attempts(&key).into_iter().rev())
                                .filter(|a| a.attempt == call.attempt)
                                .find_map(|a| a.error)
                                .unwrap_or_else(|| "the call did not return".into()),
                        },
                    },
                },
            };
            Run {
                task: call.task,
                attempt: call.attempt,
                at: call.at,
                outcome,
            }
        })
        .collect()
}
