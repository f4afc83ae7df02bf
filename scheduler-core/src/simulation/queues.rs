//! A second queue (`[[queues]]`): its own topic, consumer group, keyspace (a second in-memory
//! store: partitions of two topics share numbers, so queues never share tables) and limits
//! (one executor slot, fewer retries, a longer backoff, as a queue's overrides set them), served
//! by every node beside the default queue: one process, one pause, one actor system and one
//! executor for both, as in a node (`node/queue.rs`). Its tasks are plain tasks on orderingIds
//! of their own, drawn like the default queue's, floods included; cancels and duplicate
//! deliveries reach them as they reach any task. A node routes a task to a queue by its type;
//! the simulation routes by orderingId, which the engine never reads to route. Every check of
//! the default queue's tasks holds for the queue's too, read from its own store (its retries
//! cover every plan's failures, so each plan ends as it does in the default queue); store
//! errors and latency reach both keyspaces, as both live in one cluster.

use super::*;

/// The default queue and the second one.
pub(super) const QUEUES: usize = 2;

/// The second queue's orderingIds (`qq0`, `qq1`, ...).
const QUEUE_ORDERING_PREFIX: &str = "qq";
const QUEUE_ORDERING_IDS: usize = 4;

/// The queue whose topic takes the records of `ordering_id`.
pub(super) fn queue_of(ordering_id: &str) -> usize {
    usize::from(ordering_id.starts_with(QUEUE_ORDERING_PREFIX))
}

/// The log slot of `partition` of `queue`'s topic (the world keeps every topic's partitions
/// in one list).
pub(super) fn slot(queue: usize, partition: PartitionId) -> usize {
    queue * PARTITIONS as usize + partition as usize
}

/// The queue and partition of log slot `slot`.
pub(super) fn of_slot(slot: usize) -> (usize, PartitionId) {
    let per = PARTITIONS as usize;
    (slot / per, (slot % per) as PartitionId)
}

/// The most tasks a tree of `queue` may hold in memory.
pub(super) fn max_in_flight(queue: usize) -> usize {
    match queue {
        0 => settings().max_in_flight_tasks,
        _ => queue_settings().max_in_flight_tasks,
    }
}

/// The second queue's limits: its overrides of the default queue's.
fn queue_settings() -> SchedulingSettings {
    SchedulingSettings {
        executor_concurrency: 1,
        max_in_flight_tasks: 8,
        max_task_retries: 2,
        backoff_factor: Duration::from_millis(400),
        max_backoff: Duration::from_secs(2),
        ..settings()
    }
}

impl World {
    /// Each queue's store (its keyspace), the default queue's first.
    pub(super) fn keyspaces(&self) -> [&MemoryStore; QUEUES] {
        [&self.store, &self.queue_store]
    }

    /// The store of the queue that takes the records of `ordering_id`.
    pub(super) fn keyspace_of(&self, ordering_id: &str) -> &MemoryStore {
        self.keyspaces()[queue_of(ordering_id)]
    }

    /// Every status stored, in every queue.
    pub(super) fn all_statuses(&self) -> Vec<((PartitionId, TaskKey), StatusRecord)> {
        (self.keyspaces().iter())
            .flat_map(|store| store.statuses())
            .collect()
    }

    /// Every dead letter, in every queue.
    pub(super) fn all_dead_letters(&self) -> BTreeMap<TaskKey, crate::store::DeadLetter> {
        (self.keyspaces().iter())
            .flat_map(|store| store.all_dead_letters())
            .collect()
    }

    /// The second queue's tree of node `id`: its own store (through the node's pause), call
    /// pool and limits; the node's clock, executor and suspensions watch.
    pub(super) fn start_queue_tree(
        &self,
        id: usize,
        pause: &Pause,
        clock: Arc<PausableClock>,
    ) -> (Addr<TopicSupervisor>, InFlightGauges) {
        let settings = queue_settings();
        let store = Arc::new(self.queue_store.with_gate(Arc::new(pause.clone())));
        let executor = SimExecutor {
            node: id,
            shared: Arc::clone(&self.shared),
            pause: pause.clone(),
        };
        let handlers = crate::handler::Handlers::new().fallback(executor);
        self.start_tree(id, store, handlers, clock, settings)
    }

    /// A task of the second queue, at times a flood of them.
    pub(super) fn produce_queued(&mut self) {
        let now = self.now();
        let tasks = match self.rng.u32(0..20) {
            0 => 12,
            _ => 1,
        };
        for _ in 0..tasks {
            let o = format!(
                "{QUEUE_ORDERING_PREFIX}{}",
                self.rng.usize(0..QUEUE_ORDERING_IDS)
            );
            let at = now + TimeDelta::milliseconds(self.rng.i64(-500..6_000));
            self.produce_task(&o, at, 1);
        }
    }
}
