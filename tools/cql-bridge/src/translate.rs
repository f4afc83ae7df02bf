//! The v4 ↔ v3 translation. Protocol v3 and v4 share the frame header and nearly every message;
//! the differences a v4-only driver trips over against Cassandra 2.1 are:
//!
//! * the version byte (`0x04`/`0x84` against `0x03`/`0x83`);
//! * STARTUP's `CQL_VERSION`, which 2.1 wants as a 3.x version;
//! * PREPARED results, whose v4 metadata carries the partition-key index count and indexes;
//! * the driver's topology query selects `rpc_address` from `system.local`, a column 2.1 lacks.
//!
//! The last one is answered by stripping the column from the statement on the way up and
//! inserting it, holding the bridge's own address, into the result metadata and rows on the way
//! down, so that the driver connects back through the bridge.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::frame::{
    opcode, put_int, put_long_string, put_string, BodyReader, Frame, FrameError, FLAG_COMPRESSION,
    FLAG_TRACING, RESPONSE_BIT,
};

/// Protocol version the client (driver) speaks.
const CLIENT_VERSION: u8 = 4;
/// Protocol version the server (Cassandra 2.1) speaks.
const SERVER_VERSION: u8 = 3;
/// `CQL_VERSION` sent to the server in STARTUP.
const SERVER_CQL_VERSION: &str = "3.0.0";

const RESULT_KIND_ROWS: i32 = 0x0002;
const RESULT_KIND_PREPARED: i32 = 0x0004;
const METADATA_GLOBAL_TABLES_SPEC: i32 = 0x0001;
const METADATA_HAS_MORE_PAGES: i32 = 0x0002;
const METADATA_NO_METADATA: i32 = 0x0004;
const TYPE_INET: u16 = 0x0010;

/// A column the server lacks, to be inserted into results: where, under which name, with which value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ColumnInsert {
    index: usize,
    name: &'static str,
    keyspace: &'static str,
    table: &'static str,
    value: [u8; 4],
}

/// What a request in flight needs done to its response.
#[derive(Debug, Clone)]
enum Pending {
    /// A PREPARE whose statement had a column stripped: patch the result metadata, remember the id.
    Prepare(ColumnInsert),
    /// A QUERY or EXECUTE of such a statement: patch the rows.
    Rows(ColumnInsert),
}

/// State shared by all connections: prepared statements whose results need a column inserted.
/// Prepared ids are server-wide, so a statement prepared on one connection may run on another.
#[derive(Debug)]
pub struct Shared {
    advertised_ip: Ipv4Addr,
    patched_statements: Mutex<HashMap<Vec<u8>, ColumnInsert>>,
}

impl Shared {
    /// Shared state that reports `advertised_ip` as the node's `rpc_address`.
    pub fn new(advertised_ip: Ipv4Addr) -> Arc<Self> {
        Arc::new(Shared {
            advertised_ip,
            patched_statements: Mutex::new(HashMap::new()),
        })
    }
}

/// Translates the frames of one client connection in both directions.
#[derive(Debug)]
pub struct Translator {
    shared: Arc<Shared>,
    pending: Mutex<HashMap<i16, Pending>>,
}

impl Translator {
    /// A translator for a new connection.
    pub fn new(shared: Arc<Shared>) -> Self {
        Translator {
            shared,
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// Turns a v4 request into the v3 request Cassandra 2.1 understands. On error the frame keeps
    /// its original body (only the version byte may have changed).
    pub fn request(&self, frame: &mut Frame) -> Result<(), FrameError> {
        if frame.version != CLIENT_VERSION {
            // Not v4 (e.g. a version probe): let the server answer it as it sees fit.
            return Ok(());
        }
        frame.version = SERVER_VERSION;
        if frame.flags & FLAG_COMPRESSION != 0 {
            return Err(FrameError::Malformed(
                "compressed frames are not supported by the bridge",
            ));
        }
        match frame.opcode {
            opcode::STARTUP => frame.body = rewrite_startup(&frame.body)?,
            opcode::PREPARE | opcode::QUERY => {
                let mut r = BodyReader::new(&frame.body);
                let query = r.long_string()?;
                if let Some((stripped, index)) = strip_rpc_address_from_local_query(query) {
                    let insert = self.rpc_address_insert(index);
                    let mut body = Vec::with_capacity(frame.body.len());
                    put_long_string(&mut body, &stripped);
                    body.extend_from_slice(r.rest());
                    frame.body = body;
                    let pending = if frame.opcode == opcode::PREPARE {
                        Pending::Prepare(insert)
                    } else {
                        Pending::Rows(insert)
                    };
                    self.pending().insert(frame.stream, pending);
                }
            }
            opcode::EXECUTE => {
                let id = BodyReader::new(&frame.body).short_bytes()?;
                let patched = self
                    .shared
                    .patched_statements
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(id)
                    .cloned();
                if let Some(insert) = patched {
                    self.pending().insert(frame.stream, Pending::Rows(insert));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Turns a v3 response into the v4 response the driver expects. On error the frame keeps its
    /// original body (only the version byte may have changed).
    pub fn response(&self, frame: &mut Frame) -> Result<(), FrameError> {
        if frame.version != (SERVER_VERSION | RESPONSE_BIT) {
            return Ok(());
        }
        frame.version = CLIENT_VERSION | RESPONSE_BIT;
        let pending = if frame.stream >= 0 {
            self.pending().remove(&frame.stream)
        } else {
            None
        };
        if frame.opcode != opcode::RESULT || frame.flags & FLAG_COMPRESSION != 0 {
            return Ok(());
        }
        let mut r = BodyReader::new(&frame.body);
        let mut out = Vec::with_capacity(frame.body.len() + 64);
        if frame.flags & FLAG_TRACING != 0 {
            out.extend_from_slice(r.take(16)?);
        }
        let kind = r.int()?;
        put_int(&mut out, kind);
        match (kind, pending) {
            (RESULT_KIND_PREPARED, pending) => {
                let id = r.short_bytes()?;
                out.extend_from_slice(&(id.len() as u16).to_be_bytes());
                out.extend_from_slice(id);
                copy_prepared_metadata_adding_pk_indexes(&mut r, &mut out)?;
                let insert = match pending {
                    Some(Pending::Prepare(insert)) => Some(insert),
                    _ => None,
                };
                copy_result_metadata(&mut r, &mut out, insert.as_ref())?;
                if let Some(insert) = insert {
                    self.shared
                        .patched_statements
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(id.to_vec(), insert);
                }
            }
            (RESULT_KIND_ROWS, Some(Pending::Rows(insert))) => {
                let columns = copy_result_metadata(&mut r, &mut out, Some(&insert))?;
                copy_rows_inserting_value(&mut r, &mut out, columns, &insert)?;
            }
            _ => return Ok(()),
        }
        out.extend_from_slice(r.rest());
        frame.body = out;
        Ok(())
    }

    fn rpc_address_insert(&self, index: usize) -> ColumnInsert {
        ColumnInsert {
            index,
            name: "rpc_address",
            keyspace: "system",
            table: "local",
            value: self.shared.advertised_ip.octets(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<i16, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Rewrites STARTUP's `[string map]` so that `CQL_VERSION` names a version 2.1 accepts.
fn rewrite_startup(body: &[u8]) -> Result<Vec<u8>, FrameError> {
    let mut r = BodyReader::new(body);
    let count = r.short()?;
    let mut out = Vec::with_capacity(body.len());
    out.extend_from_slice(&count.to_be_bytes());
    for _ in 0..count {
        let key = r.string()?;
        let value = r.string()?;
        put_string(&mut out, key);
        put_string(
            &mut out,
            if key == "CQL_VERSION" {
                SERVER_CQL_VERSION
            } else {
                value
            },
        );
    }
    out.extend_from_slice(r.rest());
    Ok(out)
}

/// For `SELECT a, rpc_address, b FROM system.local ...` returns the statement without
/// `rpc_address` and the column's position in the select list; `None` for any other statement.
fn strip_rpc_address_from_local_query(query: &str) -> Option<(String, usize)> {
    let trimmed = query.trim_start();
    let lower = trimmed.to_ascii_lowercase();
    if !lower.starts_with("select ") {
        return None;
    }
    let from_at = lower.find(" from ")?;
    let source = trimmed[from_at + " from ".len()..].trim_start();
    if !source.to_ascii_lowercase().starts_with("system.local") {
        return None;
    }
    let columns: Vec<&str> = trimmed["select ".len()..from_at]
        .split(',')
        .map(str::trim)
        .collect();
    let index = columns
        .iter()
        .position(|c| c.eq_ignore_ascii_case("rpc_address"))?;
    let kept: Vec<&str> = columns
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, c)| *c)
        .collect();
    if kept.is_empty() {
        return None;
    }
    Some((format!("SELECT {} FROM {}", kept.join(", "), source), index))
}

/// Copies v3 prepared-statement metadata, adding v4's partition-key index count (zero: the
/// bridge does not know the keys, so the driver routes without token awareness).
fn copy_prepared_metadata_adding_pk_indexes(
    r: &mut BodyReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let flags = r.int()?;
    let columns = column_count(r.int()?)?;
    put_int(out, flags);
    put_int(out, columns as i32);
    put_int(out, 0);
    let start = r.position();
    let global = flags & METADATA_GLOBAL_TABLES_SPEC != 0;
    if global {
        r.string()?;
        r.string()?;
    }
    for _ in 0..columns {
        skip_column_spec(r, global)?;
    }
    out.extend_from_slice(r.since(start));
    Ok(())
}

/// Copies rows or result metadata, inserting the column spec of `insert` if given. Returns the
/// number of columns the server sent.
fn copy_result_metadata(
    r: &mut BodyReader<'_>,
    out: &mut Vec<u8>,
    insert: Option<&ColumnInsert>,
) -> Result<usize, FrameError> {
    let flags = r.int()?;
    let columns = column_count(r.int()?)?;
    put_int(out, flags);
    put_int(out, (columns + usize::from(insert.is_some())) as i32);
    if flags & METADATA_HAS_MORE_PAGES != 0 {
        let start = r.position();
        r.bytes()?;
        out.extend_from_slice(r.since(start));
    }
    if flags & METADATA_NO_METADATA != 0 {
        return Ok(columns);
    }
    let global = flags & METADATA_GLOBAL_TABLES_SPEC != 0;
    if global {
        let start = r.position();
        r.string()?;
        r.string()?;
        out.extend_from_slice(r.since(start));
    }
    for i in 0..=columns {
        if let Some(insert) = insert.filter(|ins| ins.index.min(columns) == i) {
            if !global {
                put_string(out, insert.keyspace);
                put_string(out, insert.table);
            }
            put_string(out, insert.name);
            out.extend_from_slice(&TYPE_INET.to_be_bytes());
        }
        if i < columns {
            let start = r.position();
            skip_column_spec(r, global)?;
            out.extend_from_slice(r.since(start));
        }
    }
    Ok(columns)
}

/// Copies the rows of a ROWS result, inserting `insert`'s value into every row.
fn copy_rows_inserting_value(
    r: &mut BodyReader<'_>,
    out: &mut Vec<u8>,
    columns: usize,
    insert: &ColumnInsert,
) -> Result<(), FrameError> {
    let rows = r.int()?;
    put_int(out, rows);
    for _ in 0..rows {
        for i in 0..=columns {
            if insert.index.min(columns) == i {
                put_int(out, insert.value.len() as i32);
                out.extend_from_slice(&insert.value);
            }
            if i < columns {
                let start = r.position();
                r.bytes()?;
                out.extend_from_slice(r.since(start));
            }
        }
    }
    Ok(())
}

fn skip_column_spec(r: &mut BodyReader<'_>, global: bool) -> Result<(), FrameError> {
    if !global {
        r.string()?;
        r.string()?;
    }
    r.string()?;
    r.skip_type_option()
}

fn column_count(count: i32) -> Result<usize, FrameError> {
    usize::try_from(count).map_err(|_| FrameError::Malformed("negative column count"))
}

#[cfg(test)]
mod tests;
