//! Unit tests of `translate.rs`.

use super::*;

const LOCAL_QUERY: &str =
    "SELECT host_id, rpc_address, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'";

fn translator() -> Translator {
    Translator::new(Shared::new(Ipv4Addr::new(127, 0, 0, 9)))
}

fn request(opcode: u8, stream: i16, body: Vec<u8>) -> Frame {
    Frame {
        version: 4,
        flags: 0,
        stream,
        opcode,
        body,
    }
}

fn response(stream: i16, body: Vec<u8>) -> Frame {
    Frame {
        version: 0x83,
        flags: 0,
        stream,
        opcode: opcode::RESULT,
        body,
    }
}

fn up(t: &Translator, mut frame: Frame) -> Frame {
    t.request(&mut frame).unwrap();
    frame
}

fn down(t: &Translator, mut frame: Frame) -> Frame {
    t.response(&mut frame).unwrap();
    frame
}

fn long_string_body(s: &str) -> Vec<u8> {
    let mut b = Vec::new();
    put_long_string(&mut b, s);
    b
}

/// Rows metadata with a global table spec and text columns.
fn rows_metadata(flags: i32, names: &[&str]) -> Vec<u8> {
    let mut b = Vec::new();
    put_int(&mut b, flags | METADATA_GLOBAL_TABLES_SPEC);
    put_int(&mut b, names.len() as i32);
    put_string(&mut b, "system");
    put_string(&mut b, "local");
    for n in names {
        put_string(&mut b, n);
        b.extend_from_slice(&0x000Du16.to_be_bytes());
    }
    b
}

fn read_column_names(r: &mut BodyReader<'_>) -> Vec<String> {
    let flags = r.int().unwrap();
    let count = r.int().unwrap();
    assert_eq!(
        flags & METADATA_GLOBAL_TABLES_SPEC,
        METADATA_GLOBAL_TABLES_SPEC
    );
    r.string().unwrap();
    r.string().unwrap();
    (0..count)
        .map(|_| {
            let name = r.string().unwrap().to_string();
            r.skip_type_option().unwrap();
            name
        })
        .collect()
}

#[test]
fn version_bytes_are_flipped_both_ways() {
    let t = translator();
    assert_eq!(up(&t, request(0x05, 1, vec![])).version, 3);
    let supported = Frame {
        version: 0x83,
        flags: 0,
        stream: 1,
        opcode: 0x06,
        body: vec![],
    };
    assert_eq!(down(&t, supported).version, 0x84);
}

#[test]
fn startup_cql_version_is_lowered_and_other_options_kept() {
    let mut body = 2u16.to_be_bytes().to_vec();
    put_string(&mut body, "DRIVER_NAME");
    put_string(&mut body, "x");
    put_string(&mut body, "CQL_VERSION");
    put_string(&mut body, "4.0.0");
    let out = up(&translator(), request(opcode::STARTUP, 0, body));
    let mut r = BodyReader::new(&out.body);
    assert_eq!(r.short().unwrap(), 2);
    assert_eq!(
        (r.string().unwrap(), r.string().unwrap()),
        ("DRIVER_NAME", "x")
    );
    assert_eq!(
        (r.string().unwrap(), r.string().unwrap()),
        ("CQL_VERSION", "3.0.0")
    );
    assert!(r.rest().is_empty());
}

#[test]
fn rpc_address_is_stripped_only_from_system_local_selects() {
    assert_eq!(
        strip_rpc_address_from_local_query(LOCAL_QUERY),
        Some((
            "SELECT host_id, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'".into(),
            1
        ))
    );
    assert_eq!(
        strip_rpc_address_from_local_query("SELECT host_id, rpc_address FROM system.peers"),
        None
    );
    assert_eq!(
        strip_rpc_address_from_local_query("SELECT host_id FROM system.local WHERE key='local'"),
        None
    );
    assert_eq!(
        strip_rpc_address_from_local_query("INSERT INTO t (a) VALUES (1)"),
        None
    );
}

#[test]
fn prepared_result_gains_pk_count_and_other_statements_are_untouched() {
    let t = translator();
    up(
        &t,
        request(
            opcode::PREPARE,
            3,
            long_string_body("SELECT a FROM ks.t WHERE k = ?"),
        ),
    );
    let mut body = Vec::new();
    put_int(&mut body, RESULT_KIND_PREPARED);
    body.extend_from_slice(&[0, 2, 0xAA, 0xBB]);
    // bound-variable metadata: one column k of type int, per-column table spec
    put_int(&mut body, 0);
    put_int(&mut body, 1);
    put_string(&mut body, "ks");
    put_string(&mut body, "t");
    put_string(&mut body, "k");
    body.extend_from_slice(&0x0009u16.to_be_bytes());
    let result_metadata = rows_metadata(0, &["a"]);
    body.extend_from_slice(&result_metadata);
    let out = down(&t, response(3, body));

    let mut r = BodyReader::new(&out.body);
    assert_eq!(r.int().unwrap(), RESULT_KIND_PREPARED);
    assert_eq!(r.short_bytes().unwrap(), &[0xAA, 0xBB]);
    assert_eq!(
        (r.int().unwrap(), r.int().unwrap(), r.int().unwrap()),
        (0, 1, 0)
    );
    assert_eq!(
        (
            r.string().unwrap(),
            r.string().unwrap(),
            r.string().unwrap()
        ),
        ("ks", "t", "k")
    );
    r.skip_type_option().unwrap();
    assert_eq!(r.rest(), result_metadata.as_slice());
}

#[test]
fn topology_statement_results_gain_rpc_address_through_prepare_and_execute() {
    let t = translator();
    let prepared_up = up(
        &t,
        request(opcode::PREPARE, 7, long_string_body(LOCAL_QUERY)),
    );
    let mut r = BodyReader::new(&prepared_up.body);
    assert!(!r.long_string().unwrap().contains("rpc_address"));

    let server_columns = ["host_id", "data_center", "rack", "tokens", "cluster_name"];
    let mut prepared = Vec::new();
    put_int(&mut prepared, RESULT_KIND_PREPARED);
    prepared.extend_from_slice(&[0, 1, 0x42]);
    put_int(&mut prepared, 0);
    put_int(&mut prepared, 0);
    prepared.extend_from_slice(&rows_metadata(0, &server_columns));
    let patched = down(&t, response(7, prepared));
    let mut r = BodyReader::new(&patched.body);
    r.int().unwrap();
    r.short_bytes().unwrap();
    assert_eq!(
        (r.int().unwrap(), r.int().unwrap(), r.int().unwrap()),
        (0, 0, 0)
    );
    assert_eq!(
        read_column_names(&mut r),
        [
            "host_id",
            "rpc_address",
            "data_center",
            "rack",
            "tokens",
            "cluster_name"
        ]
    );

    // EXECUTE of that id, on another stream: the rows gain the value at index 1.
    let mut execute = vec![0, 1, 0x42];
    execute.extend_from_slice(&[0, 1, 0]);
    up(&t, request(opcode::EXECUTE, 9, execute));
    let mut rows = Vec::new();
    put_int(&mut rows, RESULT_KIND_ROWS);
    rows.extend_from_slice(&rows_metadata(0, &server_columns));
    put_int(&mut rows, 1);
    for (i, _) in server_columns.iter().enumerate() {
        put_int(&mut rows, 1);
        rows.push(i as u8);
    }
    let patched = down(&t, response(9, rows));
    let mut r = BodyReader::new(&patched.body);
    assert_eq!(r.int().unwrap(), RESULT_KIND_ROWS);
    assert_eq!(read_column_names(&mut r).len(), 6);
    assert_eq!(r.int().unwrap(), 1);
    let values: Vec<Vec<u8>> = (0..6)
        .map(|_| r.bytes().unwrap().unwrap().to_vec())
        .collect();
    assert_eq!(
        values,
        [
            vec![0],
            vec![127, 0, 0, 9],
            vec![1],
            vec![2],
            vec![3],
            vec![4]
        ]
    );
    assert!(r.rest().is_empty());
}

#[test]
fn rows_without_metadata_still_gain_the_value() {
    let t = translator();
    up(&t, request(opcode::QUERY, 2, long_string_body(LOCAL_QUERY)));
    let mut rows = Vec::new();
    put_int(&mut rows, RESULT_KIND_ROWS);
    put_int(&mut rows, METADATA_NO_METADATA);
    put_int(&mut rows, 2);
    put_int(&mut rows, 1);
    put_int(&mut rows, -1);
    put_int(&mut rows, -1);
    let patched = down(&t, response(2, rows));
    let mut r = BodyReader::new(&patched.body);
    r.int().unwrap();
    assert_eq!(
        (r.int().unwrap(), r.int().unwrap(), r.int().unwrap()),
        (METADATA_NO_METADATA, 3, 1)
    );
    assert_eq!(r.bytes().unwrap(), None);
    assert_eq!(r.bytes().unwrap(), Some(&[127, 0, 0, 9][..]));
    assert_eq!(r.bytes().unwrap(), None);
}

#[test]
fn a_response_on_a_reused_stream_is_not_patched_twice() {
    let t = translator();
    up(&t, request(opcode::QUERY, 2, long_string_body(LOCAL_QUERY)));
    let mut rows = Vec::new();
    put_int(&mut rows, RESULT_KIND_ROWS);
    put_int(&mut rows, METADATA_NO_METADATA);
    put_int(&mut rows, 1);
    put_int(&mut rows, 0);
    down(&t, response(2, rows.clone()));
    let again = down(&t, response(2, rows.clone()));
    assert_eq!(again.body, rows);
}
