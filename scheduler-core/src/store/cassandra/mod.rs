//! The Cassandra (or ScyllaDB) session every table's implementation runs on (each table's is in
//! its own module of `store`): [`CassandraStore`], the statements' cache, and [`Inner::run`],
//! through which every statement runs and is counted. The schema (created and migrated), the
//! core tables' statements and the decoding of rows are in the submodules.
//!
//! The CQL stays within what Cassandra 2.1 and modern Cassandra/ScyllaDB both accept: no
//! clustering-range deletes, no unset values, and clustering slices written as tuples on both
//! bounds (`(a, b, c) > (?, ?, ?) AND (a) < (?)`), since 2.1 refuses to mix tuple and single-column
//! relations.

use std::sync::Arc;

use futures::TryStreamExt;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;

use super::{StoreError, StoreResult};
use crate::settings::{CassandraSettings, SerialConsistencyLevel};

pub(in crate::store) mod levels;
pub(in crate::store) mod rows;
mod schema;
pub(in crate::store) mod statements;
pub use levels::StoreLevels;
use rows::query_error;
pub use schema::{Migration, META_KEYSPACE, SCHEMA_VERSION};

/// Who holds the migration lock: this process, and a random part so two stores of one process
/// differ.
fn migration_holder() -> String {
    format!("pid {} #{:08x}", std::process::id(), fastrand::u32(..))
}

/// Cassandra-backed store. Cheap to clone; clones share the session and statements.
#[derive(Clone)]
pub struct CassandraStore {
    pub(in crate::store) inner: Arc<Inner>,
}

/// A table's prepared statements (in the table's own module), prepared once per session, when
/// the table is first used.
pub(in crate::store) trait TableStatements: Send + Sync + Sized + 'static {
    /// Prepares them ([`Preparing`] says on what).
    fn prepare(on: &Preparing<'_>) -> impl std::future::Future<Output = StoreResult<Self>> + Send;
}

/// What a table's statements are prepared on: the session, the keyspace of the tables, and the
/// level claims of a partition run at (`CassandraSettings::ownership_serial_consistency`).
pub(in crate::store) struct Preparing<'a> {
    session: &'a Session,
    pub(in crate::store) keyspace: &'a str,
    pub(in crate::store) ownership: SerialConsistencyLevel,
}

impl Preparing<'_> {
    /// Prepares `cql`; a failure names `operation`.
    pub(in crate::store) async fn prepare(
        &self,
        operation: &'static str,
        cql: String,
    ) -> StoreResult<PreparedStatement> {
        (self.session.prepare(cql).await).map_err(|e| StoreError::query(operation, e))
    }
}

/// Rows of several tables written in one request: an unlogged batch, for rows that share a
/// partition key (so the same replicas, where Cassandra applies them as one mutation). Each
/// table adds its own rows (`store/finish.rs` is the example).
pub(in crate::store) struct Writes {
    batch: scylla::statement::batch::Batch,
    values: Vec<Box<dyn SerializeRow + Send + Sync>>,
}

impl Writes {
    /// No row yet.
    pub(in crate::store) fn new() -> Writes {
        Writes {
            batch: scylla::statement::batch::Batch::new(
                scylla::statement::batch::BatchType::Unlogged,
            ),
            values: Vec::new(),
        }
    }

    /// Adds `statement` with `values`.
    pub(in crate::store) fn add(
        &mut self,
        statement: &PreparedStatement,
        values: impl SerializeRow + Send + Sync + 'static,
    ) {
        self.batch.append_statement(statement.clone());
        self.values.push(Box::new(values));
    }
}

pub(in crate::store) struct Inner {
    pub(in crate::store) session: Session,
    keyspace: String,
    /// The level ownership claims run at.
    ownership: SerialConsistencyLevel,
    /// Tables' statements prepared so far, by type ([`TableStatements`]).
    prepared: std::sync::Mutex<
        std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    >,
    /// Tables' state shared by every use of the session, by type ([`Inner::shared`]).
    shared: std::sync::Mutex<
        std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>,
    >,
    /// How long statuses are kept: identities are kept as long after their task's time.
    pub(in crate::store) status_ttl: std::time::Duration,
    /// Statements run and rows written or read so far, by operation.
    counts: std::sync::Mutex<std::collections::BTreeMap<&'static str, Counted>>,
}

/// What one operation's statements did (see [`CassandraStore::statements_run`]).
#[derive(Debug, Clone, Copy, Default)]
struct Counted {
    statements: u64,
    rows: u64,
}

impl CassandraStore {
    /// How many statements this store has run, by operation (e.g. "task insert"; a batch is
    /// one): what a task costs in Cassandra, counted rather than assumed.
    pub fn statements_run(&self) -> Vec<(&'static str, u64)> {
        self.counted(|c| c.statements)
    }

    /// How many rows this store's statements have written (each row of a batch; one for a
    /// write of one row or a partition) or read (the rows returned), by operation.
    pub fn rows_run(&self) -> Vec<(&'static str, u64)> {
        self.counted(|c| c.rows)
    }

    fn counted(&self, pick: fn(&Counted) -> u64) -> Vec<(&'static str, u64)> {
        let counts = (self.inner.counts.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        counts.iter().map(|(op, n)| (*op, pick(n))).collect()
    }
}

impl Inner {
    /// A table's state shared by every use of the session (the finishes waiting for a batch of
    /// their bucket, `store/finish.rs`), made on first use.
    pub(in crate::store) fn shared<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut shared = (self.shared.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = shared
            .entry(std::any::TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        // Always the type it is filed under.
        Arc::clone(entry).downcast::<T>().unwrap_or_default()
    }

    /// The prepared statements of a table ([`TableStatements`]), prepared on first use.
    pub(in crate::store) async fn statements<T: TableStatements>(&self) -> StoreResult<Arc<T>> {
        let lock = || {
            self.prepared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let found = lock().get(&std::any::TypeId::of::<T>()).cloned();
        let prepared = match found {
            Some(found) => found,
            None => {
                // (Two first uses at once may both prepare: the statements are the same.)
                let on = Preparing {
                    session: &self.session,
                    keyspace: &self.keyspace,
                    ownership: self.ownership,
                };
                let prepared = Arc::new(T::prepare(&on).await?);
                let mut cached = lock();
                let entry = cached.entry(std::any::TypeId::of::<T>());
                Arc::clone(entry.or_insert(prepared))
            }
        };
        prepared.downcast::<T>().map_err(|_| {
            let wrong = std::io::Error::other("a table's statements cached under another type");
            StoreError::query("statement preparation", wrong)
        })
    }

    /// Runs `statement` with `values`; a failure names `operation`.
    pub(in crate::store) async fn run(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        operation: &'static str,
    ) -> StoreResult<QueryResult> {
        self.count(operation, 0);
        let result = self.session.execute_unpaged(statement, values).await;
        let result = result.map_err(query_error(operation))?;
        // A read counts the rows it returned; a write, the row it wrote.
        let rows = match result.is_rows() {
            true => (result.clone().into_rows_result()).map_or(0, |rows| rows.rows_num()),
            false => 1,
        };
        self.count_rows(operation, rows);
        Ok(result)
    }

    /// Counts a statement of `operation`, and `rows` rows it wrote (see
    /// [`CassandraStore::statements_run`], [`CassandraStore::rows_run`]).
    fn count(&self, operation: &'static str, rows: usize) {
        self.add(operation, 1, rows);
    }

    /// Counts `rows` rows a statement of `operation` wrote or read, once it answered.
    fn count_rows(&self, operation: &'static str, rows: usize) {
        self.add(operation, 0, rows);
    }

    fn add(&self, operation: &'static str, statements: u64, rows: usize) {
        let mut counts = (self.counts.lock()).unwrap_or_else(std::sync::PoisonError::into_inner);
        let counted = counts.entry(operation).or_default();
        counted.statements += statements;
        counted.rows += u64::try_from(rows).unwrap_or(u64::MAX);
    }

    /// Runs `batch` with `values` (one row of values per statement); a failure names
    /// `operation`. Counted once in [`CassandraStore::statements_run`], whatever its statements,
    /// and a row per statement in [`CassandraStore::rows_run`].
    pub(in crate::store) async fn run_batch(
        &self,
        batch: &scylla::statement::batch::Batch,
        values: impl scylla::serialize::batch::BatchValues,
        operation: &'static str,
    ) -> StoreResult<QueryResult> {
        // Its rows are counted as sent: a batch of one partition is applied whole or not at all.
        self.count(operation, batch.statements.len());
        self.session
            .batch(batch, values)
            .await
            .map_err(query_error(operation))
    }

    /// Runs `writes` as one request; a failure names `operation`.
    pub(in crate::store) async fn run_writes(
        &self,
        writes: Writes,
        operation: &'static str,
    ) -> StoreResult<()> {
        let Writes { batch, values } = writes;
        self.run_batch(&batch, values, operation).await.map(|_| ())
    }

    /// Runs `statement` with `values` a page at a time (the statement's page size), every row
    /// decoded as `R`: a read that may return more rows than one response should carry. A
    /// failure names `operation`; a row that does not decode is a corrupt `what` row. Counted
    /// once in [`CassandraStore::statements_run`], whatever its pages.
    pub(in crate::store) async fn run_paged<R>(
        &self,
        statement: &PreparedStatement,
        values: impl SerializeRow,
        operation: &'static str,
        what: &'static str,
    ) -> StoreResult<Vec<R>>
    where
        R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>,
    {
        use scylla::errors::NextRowError;
        self.count(operation, 0);
        let corrupt = |reason: String| StoreError::Corrupt { what, reason };
        let pager = self
            .session
            .execute_iter(statement.clone(), values)
            .await
            .map_err(|e| StoreError::query(operation, e))?;
        let mut rows = pager
            .rows_stream::<R>()
            .map_err(|e| corrupt(e.to_string()))?;
        let mut decoded = Vec::new();
        loop {
            match rows.try_next().await {
                Ok(Some(row)) => decoded.push(row),
                Ok(None) => {
                    self.count_rows(operation, decoded.len());
                    return Ok(decoded);
                }
                Err(e @ NextRowError::RowDeserializationError(_)) => {
                    return Err(corrupt(e.to_string()))
                }
                Err(e) => return Err(StoreError::query(operation, e)),
            }
        }
    }
}

impl CassandraStore {
    /// Connects, checks that the keyspace is at this release's schema version (migrating it
    /// first with `auto_migrate`) and sets the retention. Each table prepares its statements
    /// when it is first used.
    pub async fn connect(settings: &CassandraSettings) -> StoreResult<CassandraStore> {
        let session = Self::session(settings).await?;
        schema::check_or_migrate(&session, settings, &migration_holder()).await?;
        let inner = Inner {
            session,
            keyspace: settings.keyspace.clone(),
            ownership: settings.ownership_serial_consistency,
            prepared: Default::default(),
            shared: Default::default(),
            status_ttl: settings.status_ttl,
            counts: Default::default(),
        };
        Ok(CassandraStore {
            inner: Arc::new(inner),
        })
    }

    /// Brings the keyspace to this release's schema version (`scheduler migrate`): creates the
    /// keyspace and tables, applies what an older keyspace lacks and records the version, under
    /// a lock so that concurrent migrations wait for each other. A no-op on a current keyspace.
    pub async fn migrate(settings: &CassandraSettings) -> StoreResult<Migration> {
        let session = Self::session(settings).await?;
        schema::migrate(&session, settings, &migration_holder()).await
    }

    async fn session(settings: &CassandraSettings) -> StoreResult<Session> {
        let mut builder = SessionBuilder::new()
            .known_nodes(&settings.contact_points)
            .fetch_schema_metadata(settings.fetch_schema_metadata)
            // Full schema metadata is only meaningful when schema metadata is fetched at all.
            .fetch_full_schema_metadata(settings.fetch_schema_metadata)
            .connection_timeout(std::time::Duration::from_secs(5))
            .default_execution_profile_handle(
                ExecutionProfile::builder()
                    .consistency(levels::consistency(settings.consistency))
                    .serial_consistency(Some(levels::serial(settings.serial_consistency)))
                    .request_timeout(Some(settings.request_timeout))
                    .build()
                    .into_handle(),
            );
        if let (Some(user), Some(password)) = (&settings.username, &settings.password) {
            builder = builder.user(user, password);
        }
        builder.build().await.map_err(|e| StoreError::Connect {
            contact_points: settings.contact_points.join(","),
            source: std::sync::Arc::new(e),
        })
    }
}
