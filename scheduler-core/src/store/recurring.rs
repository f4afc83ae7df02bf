//! Recurring schedules (`recurring_schedules`): each schedule's definition, whether it is
//! paused, the revision its tick chain carries, and where the chain stands; and what each fire
//! did (`schedule_fires`, kept for the status retention). The definitions live in one small
//! partition, like the suspensions, so a listing is one single-partition query.
//!
//! The whole table in one place: its rows and [`RecurringStore`], its statements and implementation on
//! Cassandra (`cassandra`), its in-memory twin (`memory`).
//!
//! Over 500 lines: two tables whole in one place: their rows and trait, their statements and
//! Cassandra implementation, their in-memory twin.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::StoreResult;
use crate::schedule_spec::ScheduleSpec;

/// A recurring schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRecord {
    /// The definition.
    pub spec: ScheduleSpec,
    /// Paused: its chain stops at its next tick; a resume starts a new one.
    pub paused: bool,
    /// Changes on every create and resume; a tick of another revision is of a superseded chain
    /// and ends it.
    pub revision: i64,
    /// When it was first created.
    pub created_at: DateTime<Utc>,
    /// When it was last created, paused or resumed.
    pub updated_at: DateTime<Utc>,
    /// The fire time of the chain's pending tick.
    pub next_fire: Option<DateTime<Utc>>,
    /// The fire time of the last run enqueued.
    pub last_fire: Option<DateTime<Utc>>,
}

/// What one fire (or one late tick's passed-over fire times) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireOutcome {
    /// A run was enqueued, due at `run_time`.
    Enqueued {
        /// When the run is due (the fire time plus its jitter).
        run_time: DateTime<Utc>,
    },
    /// Skipped: the previous run had not finished (overlap `skip`).
    SkippedOverlap,
    /// Passed over by the catch-up policy: `count` fire times from this one to `last`.
    Missed {
        /// How many.
        count: u64,
        /// The last of them.
        last: DateTime<Utc>,
    },
}

impl FireOutcome {
    /// The stored spelling of the outcome.
    pub fn as_str(&self) -> &'static str {
        match self {
            FireOutcome::Enqueued { .. } => "enqueued",
            FireOutcome::SkippedOverlap => "skippedOverlap",
            FireOutcome::Missed { .. } => "missed",
        }
    }
}

/// A fire, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireRecord {
    /// The fire time.
    pub fire_time: DateTime<Utc>,
    /// What it did.
    pub outcome: FireOutcome,
    /// When the tick recorded it.
    pub recorded_at: DateTime<Utc>,
}

/// The recurring schedules of a keyspace.
pub trait RecurringStore: Send + Sync + 'static {
    /// Every schedule, by id.
    fn recurring_schedules(&self) -> BoxFuture<'static, StoreResult<Vec<ScheduleRecord>>>;

    /// The schedule `id`, if it exists.
    fn recurring_schedule(
        &self,
        id: String,
    ) -> BoxFuture<'static, StoreResult<Option<ScheduleRecord>>>;

    /// Writes the whole schedule (created again: overwritten).
    fn put_recurring_schedule(&self, record: ScheduleRecord)
        -> BoxFuture<'static, StoreResult<()>>;

    /// Records where the schedule's chain stands: the last run enqueued and the pending tick.
    fn record_tick(
        &self,
        id: String,
        last_fire: Option<DateTime<Utc>>,
        next_fire: Option<DateTime<Utc>>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// Deletes the schedule (its chain ends at its next tick) and its fires.
    fn delete_recurring_schedule(&self, id: String) -> BoxFuture<'static, StoreResult<()>>;

    /// Records what a tick's fires did, all or none (one single-partition batch; a fire
    /// recorded again is overwritten).
    fn record_fires(
        &self,
        id: String,
        fires: Vec<FireRecord>,
    ) -> BoxFuture<'static, StoreResult<()>>;

    /// The schedule's last `limit` fires, newest first.
    fn fires(&self, id: String, limit: usize) -> BoxFuture<'static, StoreResult<Vec<FireRecord>>>;
}

/// [`RecurringStore`] on Cassandra: `recurring_schedules`, one small partition (`shard` 0) with a
/// row per schedule, written without a TTL (a schedule lasts until it is deleted); and
/// `schedule_fires`, a partition per schedule with a row per fire, newest first, kept for the
/// status retention (the table's `default_time_to_live`). A tick's fires are written as one
/// unlogged batch: in one partition, all or none.
///
/// A tick updates only its schedule's chain position, so a tick of a schedule deleted meanwhile
/// leaves a row without a definition: both reads skip such rows, as if it were not there.
#[cfg(feature = "node")]
mod cassandra {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;
    use futures::FutureExt;
    use scylla::serialize::row::SerializeRow;
    use scylla::statement::batch::{Batch, BatchType};
    use scylla::statement::prepared::PreparedStatement;

    use crate::store::cassandra::rows::{first_row_of, limit_value, rows_of};

    use crate::schedule_spec::ScheduleSpec;
    use crate::store::cassandra::statements::read_by_key;
    use crate::store::cassandra::{CassandraStore, Preparing, TableStatements};
    use crate::store::{
        FireOutcome, FireRecord, RecurringStore, ScheduleRecord, StoreError, StoreResult,
    };

    /// The one partition every schedule is in.
    const SHARD: i32 = 0;

    /// A `recurring_schedules` row: id, definition, paused, revision, created_at, updated_at,
    /// next_fire, last_fire (all but the id null in a row only a tick wrote).
    type ScheduleRow = (
        String,
        Option<String>,
        Option<bool>,
        Option<i64>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    );

    /// A `schedule_fires` row: fire_time, outcome, run_time, missed_count, missed_last, recorded_at.
    type FireRow = (
        DateTime<Utc>,
        Option<String>,
        Option<DateTime<Utc>>,
        Option<i64>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    );

    fn corrupt(what: &'static str) -> impl Fn(String) -> StoreError {
        move |reason| StoreError::Corrupt { what, reason }
    }

    /// The schedule a row holds, `None` for a row without a definition (a tick's, after a delete);
    /// a definition that does not parse, or a column every write sets that is null, is corrupt.
    fn schedule_from_row(row: ScheduleRow) -> StoreResult<Option<ScheduleRecord>> {
        let (id, definition, paused, revision, created_at, updated_at, next_fire, last_fire) = row;
        let corrupt = corrupt("recurring schedule");
        let Some(definition) = definition else {
            return Ok(None);
        };
        let spec: ScheduleSpec = serde_json::from_str(&definition)
            .map_err(|e| corrupt(format!("{id}: definition: {e}")))?;
        if spec.id != id {
            return Err(corrupt(format!("{id}: the definition is of {:?}", spec.id)));
        }
        let missing = |column: &str| corrupt(format!("{id} has no {column}"));
        Ok(Some(ScheduleRecord {
            paused: paused.ok_or_else(|| missing("paused"))?,
            revision: revision.ok_or_else(|| missing("revision"))?,
            created_at: created_at.ok_or_else(|| missing("created_at"))?,
            updated_at: updated_at.ok_or_else(|| missing("updated_at"))?,
            next_fire,
            last_fire,
            spec,
        }))
    }

    /// The fire a row holds; an unknown outcome, or one without its columns, is corrupt.
    fn fire_from_row(row: FireRow) -> StoreResult<FireRecord> {
        let (fire_time, outcome, run_time, missed_count, missed_last, recorded_at) = row;
        let corrupt = corrupt("schedule fire");
        let missing = |column: &str| corrupt(format!("the fire of {fire_time} has no {column}"));
        let outcome = match outcome.as_deref() {
            Some("enqueued") => FireOutcome::Enqueued {
                run_time: run_time.ok_or_else(|| missing("run_time"))?,
            },
            Some("skippedOverlap") => FireOutcome::SkippedOverlap,
            Some("missed") => {
                let count = missed_count.ok_or_else(|| missing("missed_count"))?;
                FireOutcome::Missed {
                    count: u64::try_from(count)
                        .map_err(|_| corrupt(format!("the fire of {fire_time}: {count} missed")))?,
                    last: missed_last.ok_or_else(|| missing("missed_last"))?,
                }
            }
            Some(other) => {
                return Err(corrupt(format!(
                    "the fire of {fire_time}: unknown outcome {other:?}"
                )))
            }
            None => return Err(missing("outcome")),
        };
        Ok(FireRecord {
            fire_time,
            outcome,
            recorded_at: recorded_at.ok_or_else(|| missing("recorded_at"))?,
        })
    }

    /// The values of one fire's row, whatever its statement's columns.
    type FireValues = Box<dyn SerializeRow + Send + Sync>;

    /// The insert of a fire's row and its values: each outcome writes only its own columns (no
    /// null cells; a read looks only at the columns of the outcome it finds).
    fn fire_insert<'a>(
        statements: &'a RecurringStatements,
        id: &str,
        fire: FireRecord,
    ) -> StoreResult<(&'a PreparedStatement, FireValues)> {
        let (id, outcome) = (id.to_string(), fire.outcome.as_str());
        let (fire_time, recorded_at) = (fire.fire_time, fire.recorded_at);
        Ok(match fire.outcome {
            FireOutcome::Enqueued { run_time } => (
                &statements.insert_enqueued,
                Box::new((id, fire_time, outcome, recorded_at, run_time)),
            ),
            FireOutcome::SkippedOverlap => (
                &statements.insert_skipped,
                Box::new((id, fire_time, outcome, recorded_at)),
            ),
            FireOutcome::Missed { count, last } => {
                let count = i64::try_from(count).map_err(|_| {
                    StoreError::refused(
                        "fire write",
                        format!("{count} missed fire times is beyond the column's range"),
                    )
                })?;
                (
                    &statements.insert_missed,
                    Box::new((id, fire_time, outcome, recorded_at, count, last)),
                )
            }
        })
    }

    impl RecurringStore for CassandraStore {
        fn recurring_schedules(&self) -> BoxFuture<'static, StoreResult<Vec<ScheduleRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // In clustering order: by id.
                let rows = inner
                    .run_paged::<ScheduleRow>(
                        &inner.statements::<RecurringStatements>().await?.select_all,
                        (SHARD,),
                        "schedules read",
                        "recurring schedule",
                    )
                    .await?;
                let mut schedules = Vec::with_capacity(rows.len());
                for row in rows {
                    schedules.extend(schedule_from_row(row)?);
                }
                Ok(schedules)
            }
            .boxed()
        }

        fn recurring_schedule(
            &self,
            id: String,
        ) -> BoxFuture<'static, StoreResult<Option<ScheduleRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // The id without its last character: a lower bound below the id, never equal to it.
                let below = id.char_indices().last().map_or("", |(at, _)| &id[..at]);
                let result = inner
                    .run(
                        &inner.statements::<RecurringStatements>().await?.select_one,
                        (SHARD, below, &id),
                        "schedules read",
                    )
                    .await?;
                // The read runs down from the id: a row of another id is a neighbour.
                match first_row_of::<ScheduleRow>(result, "recurring schedule")? {
                    Some(row) if row.0 == id => schedule_from_row(row),
                    _ => Ok(None),
                }
            }
            .boxed()
        }

        fn put_recurring_schedule(
            &self,
            record: ScheduleRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let definition = serde_json::to_string(&record.spec)
                    .map_err(|e| StoreError::query("schedule write", e))?;
                // Every column, the chain's position null when it has none: an overwrite clears it.
                let values = (
                    SHARD,
                    &record.spec.id,
                    definition,
                    record.paused,
                    record.revision,
                    record.created_at,
                    record.updated_at,
                    record.next_fire,
                    record.last_fire,
                );
                inner
                    .run(
                        &inner.statements::<RecurringStatements>().await?.insert,
                        values,
                        "schedule write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn record_tick(
            &self,
            id: String,
            last_fire: Option<DateTime<Utc>>,
            next_fire: Option<DateTime<Utc>>,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // An update, not a read and a write: on a schedule deleted meanwhile it leaves a row
                // without a definition, which reads as no schedule.
                let values = (last_fire, next_fire, SHARD, id);
                inner
                    .run(
                        &inner.statements::<RecurringStatements>().await?.set_tick,
                        values,
                        "schedule write",
                    )
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn delete_recurring_schedule(&self, id: String) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                let statements = inner.statements::<RecurringStatements>().await?;
                let values = (SHARD, &id);
                inner
                    .run(&statements.delete, values, "schedule delete")
                    .await?;
                // One partition tombstone for every fire it had.
                inner
                    .run(&statements.delete_fires, (&id,), "schedule delete")
                    .await?;
                Ok(())
            }
            .boxed()
        }

        fn record_fires(
            &self,
            id: String,
            fires: Vec<FireRecord>,
        ) -> BoxFuture<'static, StoreResult<()>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // The last of each fire time, as if written one after the other: the writes of one
                // batch share a timestamp, and of two values of a cell the greater would win.
                let fires: BTreeMap<_, _> = fires.into_iter().map(|f| (f.fire_time, f)).collect();
                if fires.is_empty() {
                    return Ok(());
                }
                // Unlogged: every row is in the schedule's partition, so the batch is one mutation,
                // applied whole or not at all, without the batch log.
                let mut batch = Batch::new(BatchType::Unlogged);
                let mut values = Vec::with_capacity(fires.len());
                let statements = inner.statements::<RecurringStatements>().await?;
                for fire in fires.into_values() {
                    let (statement, row) = fire_insert(&statements, &id, fire)?;
                    batch.append_statement(statement.clone());
                    values.push(row);
                }
                inner.run_batch(&batch, values, "fire write").await?;
                Ok(())
            }
            .boxed()
        }

        fn fires(
            &self,
            id: String,
            limit: usize,
        ) -> BoxFuture<'static, StoreResult<Vec<FireRecord>>> {
            let inner = Arc::clone(&self.inner);
            async move {
                // Cassandra refuses `LIMIT 0`.
                if limit == 0 {
                    return Ok(Vec::new());
                }
                let result = inner
                    .run(
                        &inner
                            .statements::<RecurringStatements>()
                            .await?
                            .select_fires,
                        (id, limit_value(limit)),
                        "fires read",
                    )
                    .await?;
                rows_of::<FireRow>(result, "schedule fire")?
                    .into_iter()
                    .map(fire_from_row)
                    .collect()
            }
            .boxed()
        }
    }

    /// The statements of `recurring_schedules` (one partition, `shard` 0) and `schedule_fires` (a
    /// partition per schedule, newest fire first).
    struct RecurringStatements {
        /// Every schedule, paged.
        select_all: PreparedStatement,
        select_one: PreparedStatement,
        /// Every column, the chain's position written null when it has none (an overwrite clears it).
        insert: PreparedStatement,
        /// The chain's position only (on a deleted schedule, a row without a definition).
        set_tick: PreparedStatement,
        delete: PreparedStatement,
        /// The schedule's whole `schedule_fires` partition.
        delete_fires: PreparedStatement,
        /// A fire, by outcome: each writes only its outcome's columns (no null cells), and a read
        /// looks only at the columns of the outcome it finds.
        insert_enqueued: PreparedStatement,
        insert_skipped: PreparedStatement,
        insert_missed: PreparedStatement,
        select_fires: PreparedStatement,
    }

    /// Rows read per page of the schedules' partition: a definition carries its runs' data.
    const SCHEDULE_PAGE: i32 = 500;

    const SCHEDULE_COLUMNS: &str =
        "id, definition, paused, revision, created_at, updated_at, next_fire, last_fire";

    impl TableStatements for RecurringStatements {
        async fn prepare(on: &Preparing<'_>) -> StoreResult<Self> {
            let ks = on.keyspace;
            let prepare = |cql: String| on.prepare("prepare recurring schedule statement", cql);
            let mut select_all = prepare(format!(
                "SELECT {SCHEDULE_COLUMNS} FROM {ks}.recurring_schedules WHERE shard = ?"
            ))
            .await?;
            select_all.set_page_size(SCHEDULE_PAGE);
            let insert_fire = |columns: &str, values: &str| {
                prepare(format!(
                    "INSERT INTO {ks}.schedule_fires (schedule_id, fire_time, outcome, recorded_at\
                     {columns}) VALUES (?, ?, ?, ?{values})"
                ))
            };
            Ok(RecurringStatements {
                select_all,
                select_one: prepare(format!(
                    "SELECT {SCHEDULE_COLUMNS} FROM {ks}.recurring_schedules WHERE {}",
                    read_by_key("shard = ? AND id >= ?", "id", "id")
                ))
                .await?,
                insert: prepare(format!(
                    "INSERT INTO {ks}.recurring_schedules (shard, {SCHEDULE_COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ))
                .await?,
                set_tick: prepare(format!(
                    "UPDATE {ks}.recurring_schedules SET last_fire = ?, next_fire = ? \
                     WHERE shard = ? AND id = ?"
                ))
                .await?,
                delete: prepare(format!(
                    "DELETE FROM {ks}.recurring_schedules WHERE shard = ? AND id = ?"
                ))
                .await?,
                delete_fires: prepare(format!(
                    "DELETE FROM {ks}.schedule_fires WHERE schedule_id = ?"
                ))
                .await?,
                insert_enqueued: insert_fire(", run_time", ", ?").await?,
                insert_skipped: insert_fire("", "").await?,
                insert_missed: insert_fire(", missed_count, missed_last", ", ?, ?").await?,
                select_fires: prepare(format!(
                    "SELECT fire_time, outcome, run_time, missed_count, missed_last, recorded_at \
                     FROM {ks}.schedule_fires WHERE schedule_id = ? LIMIT ?"
                ))
                .await?,
            })
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn row(id: &str, definition: Option<&str>) -> ScheduleRow {
            let at = Some(Utc::now());
            let definition = definition.map(str::to_string);
            (
                id.into(),
                definition,
                Some(false),
                Some(1),
                at,
                at,
                None,
                None,
            )
        }

        #[test]
        fn rows_without_a_definition_are_no_schedule_and_bad_definitions_are_corrupt() {
            assert_eq!(schedule_from_row(row("a", None)).ok(), Some(None));
            let good = r#"{"id":"a","every":"1m","taskType":"t"}"#;
            let read = schedule_from_row(row("a", Some(good))).map(|r| r.map(|r| r.spec.id));
            assert_eq!(read.ok(), Some(Some("a".to_string())));
            for (bad, says) in [
                (row("a", Some("{not json")), "a: definition:"),
                (row("b", Some(good)), "the definition is of \"a\""),
                (
                    (
                        "a".into(),
                        Some(good.into()),
                        None,
                        Some(1),
                        None,
                        None,
                        None,
                        None,
                    ),
                    "has no paused",
                ),
            ] {
                match schedule_from_row(bad) {
                    Err(StoreError::Corrupt { what, reason }) => {
                        assert_eq!(what, "recurring schedule");
                        assert!(reason.contains(says), "{reason}");
                    }
                    other => panic!("not corrupt: {other:?}"),
                }
            }
        }

        #[test]
        fn fire_rows_of_an_unknown_outcome_or_without_their_columns_are_corrupt() {
            let at = Utc::now();
            let fire = |outcome: &str| (at, Some(outcome.to_string()), None, None, None, Some(at));
            assert_eq!(
                fire_from_row(fire("skippedOverlap"))
                    .map(|f| f.outcome)
                    .ok(),
                Some(FireOutcome::SkippedOverlap)
            );
            for (bad, says) in [
                (fire("late"), "unknown outcome \"late\""),
                (fire("enqueued"), "has no run_time"),
                (fire("missed"), "has no missed_count"),
                ((at, None, None, None, None, Some(at)), "has no outcome"),
            ] {
                match fire_from_row(bad) {
                    Err(StoreError::Corrupt { what, reason }) => {
                        assert_eq!(what, "schedule fire");
                        assert!(reason.contains(says), "{reason}");
                    }
                    other => panic!("not corrupt: {other:?}"),
                }
            }
        }
    }
}

/// `recurring` in memory, for unit tests, the simulation and the testing kit.
#[cfg(any(test, feature = "testing"))]
mod memory {
    use chrono::{DateTime, Utc};
    use futures::future::BoxFuture;

    use super::{FireRecord, RecurringStore, ScheduleRecord};
    use crate::store::memory::MemoryStore;
    use crate::store::StoreResult;

    /// The tables' rows: schedules by id, their fires by schedule and fire time.
    #[derive(Default)]
    struct Rows {
        schedules: std::collections::BTreeMap<String, ScheduleRecord>,
        fires: std::collections::BTreeMap<(String, DateTime<Utc>), FireRecord>,
    }

    impl RecurringStore for MemoryStore {
        fn recurring_schedules(&self) -> BoxFuture<'static, StoreResult<Vec<ScheduleRecord>>> {
            self.run("schedules read", |s| {
                s.table::<Rows>().schedules.values().cloned().collect()
            })
        }

        fn recurring_schedule(
            &self,
            id: String,
        ) -> BoxFuture<'static, StoreResult<Option<ScheduleRecord>>> {
            self.run("schedules read", move |s| {
                s.table::<Rows>().schedules.get(&id).cloned()
            })
        }

        fn put_recurring_schedule(
            &self,
            record: ScheduleRecord,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("schedule write", move |s| {
                s.table::<Rows>()
                    .schedules
                    .insert(record.spec.id.clone(), record);
            })
        }

        fn record_tick(
            &self,
            id: String,
            last_fire: Option<DateTime<Utc>>,
            next_fire: Option<DateTime<Utc>>,
        ) -> BoxFuture<'static, StoreResult<()>> {
            // Cassandra's update of a deleted row leaves a row without a definition, which reads
            // as no schedule: here, nothing.
            self.run("schedule write", move |s| {
                if let Some(record) = s.table::<Rows>().schedules.get_mut(&id) {
                    record.last_fire = last_fire;
                    record.next_fire = next_fire;
                }
            })
        }

        fn delete_recurring_schedule(&self, id: String) -> BoxFuture<'static, StoreResult<()>> {
            self.run("schedule write", move |s| {
                let rows = s.table::<Rows>();
                rows.schedules.remove(&id);
                rows.fires.retain(|(of, _), _| *of != id);
            })
        }

        fn record_fires(
            &self,
            id: String,
            fires: Vec<FireRecord>,
        ) -> BoxFuture<'static, StoreResult<()>> {
            self.run("fire write", move |s| {
                for fire in fires {
                    s.table::<Rows>()
                        .fires
                        .insert((id.clone(), fire.fire_time), fire);
                }
            })
        }

        fn fires(
            &self,
            id: String,
            limit: usize,
        ) -> BoxFuture<'static, StoreResult<Vec<FireRecord>>> {
            self.run("fires read", move |s| {
                let of_id = s
                    .table::<Rows>()
                    .fires
                    .range((id.clone(), DateTime::<Utc>::MIN_UTC)..);
                let mut fires: Vec<FireRecord> = of_id
                    .take_while(|((of, _), _)| *of == id)
                    .map(|(_, f)| f.clone())
                    .collect();
                fires.reverse();
                fires.truncate(limit);
                fires
            })
        }
    }
}
