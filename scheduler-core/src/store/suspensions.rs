//! Suspensions (`suspensions`): what an operator suspended (an orderingId, a task type, or a
//! group), kept in one small Cassandra partition per keyspace that every node polls. A
//! suspended task waits, pending, without an attempt, until its suspension is lifted.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use scheduler_client::Task;
use serde::{Deserialize, Serialize};

use super::StoreResult;

/// What a suspension holds back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "target", rename_all = "camelCase")]
pub enum SuspensionTarget {
    /// Every task of this orderingId.
    OrderingId(String),
    /// Every task of this type.
    TaskType(String),
    /// Every member of this group (its join type and id): a job's buckets.
    Group {
        /// The type that joins the group.
        task_type: String,
        /// The group's id.
        id: String,
    },
}

impl SuspensionTarget {
    /// The stored spelling of the kind.
    pub fn kind(&self) -> &'static str {
        match self {
            SuspensionTarget::OrderingId(_) => "orderingId",
            SuspensionTarget::TaskType(_) => "taskType",
            SuspensionTarget::Group { .. } => "group",
        }
    }

    /// The stored target: the orderingId, the type, or `<type>/<id>` for a group.
    pub fn target(&self) -> String {
        match self {
            SuspensionTarget::OrderingId(id) | SuspensionTarget::TaskType(id) => id.clone(),
            SuspensionTarget::Group { task_type, id } => format!("{task_type}/{id}"),
        }
    }

    /// The target of a stored kind and target; `None` for an unknown kind or a group without
    /// its type.
    pub fn parse(kind: &str, target: &str) -> Option<SuspensionTarget> {
        match kind {
            "orderingId" => Some(SuspensionTarget::OrderingId(target.to_string())),
            "taskType" => Some(SuspensionTarget::TaskType(target.to_string())),
            "group" => {
                let (task_type, id) = target.split_once('/')?;
                Some(SuspensionTarget::Group {
                    task_type: task_type.to_string(),
                    id: id.to_string(),
                })
            }
            _ => None,
        }
    }
}

impl SuspensionTarget {
    /// Every target that would hold `task` back: its orderingId, its type, and the group it is a
    /// member of (named by its join type).
    pub fn all_of(task: &Task) -> Vec<SuspensionTarget> {
        let mut targets = vec![
            SuspensionTarget::OrderingId(task.ordering_id.clone()),
            SuspensionTarget::TaskType(task.task_type.clone()),
        ];
        if let Some(member) = &task.group {
            targets.push(SuspensionTarget::Group {
                task_type: member
                    .join_type
                    .clone()
                    .unwrap_or_else(|| task.task_type.clone()),
                id: member.id.clone(),
            });
        }
        targets
    }
}

impl std::fmt::Display for SuspensionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind(), self.target())
    }
}

/// A suspension, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suspension {
    /// What it holds back.
    pub target: SuspensionTarget,
    /// When it was recorded.
    pub since: DateTime<Utc>,
    /// Why, as the operator said.
    pub reason: Option<String>,
}

/// The suspensions in force, as a node last read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Suspensions(std::collections::BTreeMap<SuspensionTarget, Suspension>);

impl Suspensions {
    /// The set of `suspensions`.
    pub fn new(suspensions: Vec<Suspension>) -> Suspensions {
        Suspensions(
            suspensions
                .into_iter()
                .map(|s| (s.target.clone(), s))
                .collect(),
        )
    }

    /// The suspension that holds `task` back, if one does: of its orderingId, its type, or the
    /// group it is a member of.
    pub fn of(&self, task: &Task) -> Option<&Suspension> {
        if self.0.is_empty() {
            return None;
        }
        self.holding(&SuspensionTarget::all_of(task))
    }

    /// The suspension of one of `targets`, if one holds it.
    pub fn holding(&self, targets: &[SuspensionTarget]) -> Option<&Suspension> {
        targets.iter().find_map(|target| self.0.get(target))
    }

    /// Every suspension, by target.
    pub fn all(&self) -> impl Iterator<Item = &Suspension> {
        self.0.values()
    }
}

/// The suspensions of a keyspace.
pub trait SuspensionStore: Send + Sync + 'static {
    /// Every suspension in force.
    fn suspensions(&self) -> BoxFuture<'static, StoreResult<Vec<Suspension>>>;

    /// Records a suspension (again: overwritten).
    fn suspend(&self, suspension: Suspension) -> BoxFuture<'static, StoreResult<()>>;

    /// Lifts the suspension of `target`, if any.
    fn resume(&self, target: SuspensionTarget) -> BoxFuture<'static, StoreResult<()>>;
}
