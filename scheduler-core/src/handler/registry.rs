//! [`Handlers`]: which [`TaskHandler`] runs each task type on a node. A node runs only the
//! types it has a handler for; a task of another type waits for a node that has one (see the
//! task lifecycle's `no_handler` wait).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use scheduler_client::Task;

use super::context::TaskContext;
use super::error::TaskError;
use super::task_handler::TaskHandler;
use crate::remote::{RemoteCall, RemoteWorkers};
use crate::store::DeadLetter;

/// Object-safe form of [`TaskHandler`], so the engine can hold any handler behind an `Arc`.
pub(crate) trait DynTaskHandler: Send + Sync + 'static {
    fn execute_boxed(&self, task: Task, ctx: TaskContext) -> BoxFuture<'_, Result<(), TaskError>>;
    fn dead_lettered_boxed(&self, letter: DeadLetter) -> BoxFuture<'_, ()>;
}

impl<E: TaskHandler> DynTaskHandler for E {
    /// A join's call (its context carries the finished group) goes to `group_finished`.
    fn execute_boxed(&self, task: Task, ctx: TaskContext) -> BoxFuture<'_, Result<(), TaskError>> {
        async move {
            match ctx.group() {
                Some(group) => self.group_finished(&task, group, &ctx).await,
                None => self.execute(&task, &ctx).await,
            }
        }
        .boxed()
    }

    fn dead_lettered_boxed(&self, letter: DeadLetter) -> BoxFuture<'_, ()> {
        async move { self.dead_lettered(&letter).await }.boxed()
    }
}

/// The handlers of a node, by task type, and optionally one for every other type; and the
/// node's remote workers, which run a type with no handler of its own while one of the type is
/// connected (before the handler of every other type).
#[derive(Clone, Default)]
pub struct Handlers {
    by_type: BTreeMap<String, Arc<dyn DynTaskHandler>>,
    fallback: Option<Arc<dyn DynTaskHandler>>,
    remote: Option<Arc<dyn DynTaskHandler>>,
    workers: Option<RemoteWorkers>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("types", &self.by_type.keys().collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .field("remote", &self.workers.is_some())
            .finish()
    }
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Handlers {
        Handlers::default()
    }

    /// With `handler` running the tasks of `task_type` (replacing an earlier one of that type).
    pub fn handler(mut self, task_type: impl Into<String>, handler: impl TaskHandler) -> Handlers {
        self.by_type.insert(task_type.into(), Arc::new(handler));
        self
    }

    /// With `handler` running the tasks of every type that has no handler of its own.
    pub fn fallback(mut self, handler: impl TaskHandler) -> Handlers {
        self.fallback = Some(Arc::new(handler));
        self
    }

    /// The task types with a handler of their own, in order.
    pub fn types(&self) -> Vec<String> {
        self.by_type.keys().cloned().collect()
    }

    /// Whether a handler runs every type.
    pub fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    /// Whether no handler is registered at all.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty() && self.fallback.is_none()
    }

    /// With `workers` running the types that have no handler of their own while one of the
    /// type is connected.
    pub fn remote(mut self, workers: RemoteWorkers) -> Handlers {
        self.remote = Some(Arc::new(RemoteCall::new(workers.clone())));
        self.workers = Some(workers);
        self
    }

    /// As [`Handlers::remote`], calling through `call` (the simulation wraps the
    /// [`RemoteCall`] to log its calls).
    #[cfg(test)]
    pub(crate) fn remote_through(
        mut self,
        workers: RemoteWorkers,
        call: impl TaskHandler,
    ) -> Handlers {
        self.remote = Some(Arc::new(call));
        self.workers = Some(workers);
        self
    }

    /// Whether remote workers may run tasks here.
    pub fn takes_remote_workers(&self) -> bool {
        self.workers.is_some()
    }

    /// The handler of `task_type`: its own, else a connected remote worker of it, else the
    /// handler of every other type.
    pub(crate) fn get(&self, task_type: &str) -> Option<&Arc<dyn DynTaskHandler>> {
        if let Some(handler) = self.by_type.get(task_type) {
            return Some(handler);
        }
        let remote = self.workers.as_ref().is_some_and(|w| w.serves(task_type));
        match &self.remote {
            Some(call) if remote => Some(call),
            _ => self.fallback.as_ref(),
        }
    }
}
