//! The remote workers' metrics, read from the registry whenever `/metrics` is scraped.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::RemoteWorkers;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    task_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabel {
    end: &'static str,
}

/// The gauges and counters of a node's remote workers.
pub struct RemoteMetrics {
    workers: RemoteWorkers,
    connected: Family<TypeLabel, Gauge>,
    claims: Family<TypeLabel, Gauge>,
    waiting: Family<TypeLabel, Gauge>,
    ends: Family<EndLabel, Counter>,
    refused: Counter,
}

impl RemoteMetrics {
    /// The metrics of `workers`, registered in `registry`.
    pub fn register(workers: RemoteWorkers, registry: &mut Registry) -> RemoteMetrics {
        let metrics = RemoteMetrics {
            workers,
            connected: Family::default(),
            claims: Family::default(),
            waiting: Family::default(),
            ends: Family::default(),
            refused: Counter::default(),
        };
        registry.register(
            "scheduler_remote_workers",
            "Remote workers connected (polling, or polled within [workers] worker_ttl), by task type",
            metrics.connected.clone(),
        );
        registry.register(
            "scheduler_remote_claims",
            "Live claims of remote workers, by task type",
            metrics.claims.clone(),
        );
        registry.register(
            "scheduler_remote_tasks_waiting",
            "Due tasks offered to remote workers and not claimed yet, by task type",
            metrics.waiting.clone(),
        );
        registry.register(
            "scheduler_remote_claim_ends",
            "Claims of remote workers by how they ended: claimed (begun), completed, expired (no heartbeat), ended_with_call (the tree stopped or the call timed out)",
            metrics.ends.clone(),
        );
        registry.register(
            "scheduler_remote_refusals",
            "Heartbeats and completions refused because their claim had ended (nothing recorded)",
            metrics.refused.clone(),
        );
        metrics
    }

    /// Reads the registry now.
    pub fn refresh(&self) {
        let (view, waiting, counts) = (
            self.workers.view(),
            self.workers.waiting(),
            self.workers.counts(),
        );
        self.connected.clear();
        self.claims.clear();
        self.waiting.clear();
        for worker in &view {
            for task_type in &worker.types {
                let label = TypeLabel {
                    task_type: task_type.clone(),
                };
                self.connected.get_or_create(&label).inc();
            }
            for claim in &worker.claims {
                let label = TypeLabel {
                    task_type: claim.task_type.clone(),
                };
                self.claims.get_or_create(&label).inc();
            }
        }
        for (task_type, n) in waiting {
            (self.waiting.get_or_create(&TypeLabel { task_type })).set(n as i64);
        }
        for (end, count) in [
            ("claimed", counts.claimed),
            ("completed", counts.completed),
            ("expired", counts.expired),
            ("ended_with_call", counts.ended_with_call),
        ] {
            let counter = self.ends.get_or_create(&EndLabel { end });
            // The registry's counts only grow: the counter catches up with them.
            counter.inc_by(count.saturating_sub(counter.get()));
        }
        self.refused
            .inc_by(counts.refused.saturating_sub(self.refused.get()));
    }
}

impl std::fmt::Debug for RemoteMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMetrics").finish_non_exhaustive()
    }
}
