//! `GET /api/v1/partitions`: who owns each partition of the queue, read from the ownership
//! table every claim writes (`partition_owners`), so one node's answer covers the cluster.

use std::sync::{Arc, PoisonError};

use axum::extract::State;
use axum::Json;
use scheduler_client::wire;

use super::api::{PartitionOwnerView, PartitionsResponse};
use super::state::{store_error, AdminState, ApiError};

/// `GET /api/v1/partitions`
pub(super) async fn list(
    State(state): State<Arc<AdminState>>,
) -> Result<Json<PartitionsResponse>, ApiError> {
    let claims: std::collections::BTreeMap<_, _> = (state.store.owners().await)
        .map_err(store_error)?
        .into_iter()
        .map(|c| (c.partition, c))
        .collect();
    let owned = state
        .owned
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // Every partition of the topic, claimed or not; a row of a partition beyond the topic's
    // count (a topic recreated smaller) is not one of the queue's partitions any more.
    let partitions = (0..state.partition_count as i32)
        .map(|partition| {
            let claim = claims.get(&partition);
            PartitionOwnerView {
                partition,
                owner: claim.and_then(|c| c.owner.clone()),
                epoch: claim.map_or(0, |c| c.epoch),
                claimed_at: claim.and_then(|c| c.claimed_at).map(wire::format_time),
                owned_here: owned.contains(&partition),
            }
        })
        .collect();
    Ok(Json(PartitionsResponse {
        node_id: state.node_id.clone(),
        partitions,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{Method, StatusCode};
    use chrono::{TimeZone, Utc};

    use crate::admin::api::{PartitionOwnerView, PartitionsResponse};
    use crate::admin::router;
    use crate::admin::test_app::{call, state};
    use crate::store::memory::MemoryStore;
    use crate::store::OwnershipStore;

    #[tokio::test]
    async fn every_partition_is_listed_with_its_last_claimer_and_whether_it_runs_here() {
        let store = Arc::new(MemoryStore::new());
        let at = Utc
            .with_ymd_and_hms(2026, 11, 24, 6, 0, 0)
            .single()
            .expect("a time");
        for (partition, node) in [(0, "n"), (2, "other"), (2, "n"), (3, "other")] {
            (store.claim_partition(partition, node.into(), at).await).expect("claimed");
        }
        let state = state(Arc::clone(&store));
        state.owned.lock().expect("not poisoned").extend([0, 2]);
        let app = router(vec![Arc::new(state)]);
        let (status, body) = call(&app, Method::GET, None, "/api/v1/partitions").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let answer: PartitionsResponse = serde_json::from_str(&body).expect("the answer");
        let view = |partition, owner: Option<&str>, epoch, owned_here| PartitionOwnerView {
            partition,
            owner: owner.map(str::to_string),
            epoch,
            claimed_at: owner.map(|_| "2026-11-24T06:00:00.000Z".to_string()),
            owned_here,
        };
        assert_eq!(answer.node_id, "n");
        assert_eq!(
            answer.partitions,
            [
                view(0, Some("n"), 1, true),
                view(1, None, 0, false),
                view(2, Some("n"), 2, true),
                view(3, Some("other"), 1, false),
            ]
        );
    }
}
