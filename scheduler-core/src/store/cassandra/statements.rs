//! What the tables' statements share: the clause of a read of one row by its key.

/// The clause of a read of one row by its key: `prefix`, equalities on the partition key and the
/// clustering columns before `last` (and, where `last` is the only clustering column, a lower
/// bound on it), then `last` up to the key's, newest first, one row. Its values are the key's,
/// in order (with the lower bound before `last`'s value).
///
/// Cassandra 2.1.0 answers a slice whose lower bound is exactly a deleted row's key, as
/// `… AND last = ?` is, with the row, once the row and its tombstone sit in different sstables
/// or memtables (`it-tests/tests/read_after_delete.rs`). This read's lower bound is the key's
/// prefix, which it never equals; it runs down from the key and takes one row: the key's or,
/// when that is gone, a neighbour below it, which the caller drops by comparing `last`. It steps
/// over the tombstones of the rows between them at most (design.md, "Reads by key").
pub(in crate::store) fn read_by_key(prefix: &str, last: &str, clustering_columns: &str) -> String {
    let descending = clustering_columns
        .split(',')
        .map(|column| format!("{} DESC", column.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{prefix} AND {last} <= ? ORDER BY {descending} LIMIT 1")
}
