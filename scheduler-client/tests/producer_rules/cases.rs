// The cases of `scheduler-client/tests/producer_rules.json`, for the test of every producer: the
// Rust client's and the decoder's (`scheduler-client/tests/producer_rules.rs`), HTTP enqueue's
// (scheduler-core, `admin::enqueue`) and the Python producer's (`it-tests`), which `include!`
// this file. So: no inner attributes, and only serde_json, chrono and scheduler_client.

/// One case: a wire-format record, and whether producers and the node's decoder take it.
// Each harness reads the fields it checks.
#[allow(dead_code)]
#[derive(Debug)]
pub struct RuleCase {
    /// What the case shows.
    pub name: String,
    /// The record's JSON text, as in the file (integers beyond 64 bits kept), its `$now±N`
    /// times resolved.
    pub record: String,
    /// Whether every producer sends it.
    pub producers_accept: bool,
    /// Whether the node's decoder takes it.
    pub decoder_accept: bool,
    /// The reason a refusing decoder parks it with, when the case names one.
    pub reason: Option<String>,
}

/// The grace window the cases assume, and the cases, with `now` as their `$now`.
pub fn producer_rule_cases(
    now: chrono::DateTime<chrono::Utc>,
) -> (std::time::Duration, Vec<RuleCase>) {
    use serde_json::value::RawValue;
    use std::collections::BTreeMap;

    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scheduler-client/tests/producer_rules.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let file: BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let field = |name: &str| {
        file.get(name)
            .unwrap_or_else(|| panic!("{path} has no {name}"))
            .get()
    };
    let grace_ms: u64 = serde_json::from_str(field("graceMs")).expect("graceMs is a number");
    let raw_cases: Vec<BTreeMap<String, Box<RawValue>>> =
        serde_json::from_str(field("cases")).expect("cases is a list of objects");
    let cases = raw_cases
        .iter()
        .map(|case| {
            let text = |key: &str| -> Option<String> {
                case.get(key).map(|raw| {
                    serde_json::from_str(raw.get())
                        .unwrap_or_else(|e| panic!("{key} is not a string: {e}"))
                })
            };
            let name = text("name").expect("every case has a name");
            let accepts = |value: Option<String>| match value.as_deref() {
                Some("accept") => true,
                Some("refuse") => false,
                other => panic!("{name}: {other:?} is neither accept nor refuse"),
            };
            let producers_accept = accepts(text("producers"));
            let decoder_accept = match text("decoder") {
                None => producers_accept,
                some => accepts(some),
            };
            let record = case
                .get("record")
                .unwrap_or_else(|| panic!("{name} has no record"))
                .get();
            RuleCase {
                record: resolve_now(record, now),
                producers_accept,
                decoder_accept,
                reason: text("reason"),
                name,
            }
        })
        .collect();
    (std::time::Duration::from_millis(grace_ms), cases)
}

/// `record` with each `"$now+N"` / `"$now-N"` (milliseconds) replaced by that time.
fn resolve_now(record: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let mut out = String::new();
    let mut rest = record;
    while let Some(at) = rest.find("\"$now") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 5..];
        let end = after.find('"').expect("a closing quote");
        let offset: i64 = after[..end]
            .trim_start_matches('+')
            .parse()
            .unwrap_or_else(|e| panic!("$now{}: {e}", &after[..end]));
        let time = now + chrono::TimeDelta::milliseconds(offset);
        out.push_str(&format!(
            "\"{}\"",
            scheduler_client::wire::format_time(time)
        ));
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}
