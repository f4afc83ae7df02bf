//! Environment overrides: `SCHEDULER__<SECTION>__<KEY>=value` sets `<key>` of `[<section>]` in
//! the TOML tree before it is read into [`Settings`](super::Settings), so a value from the
//! environment is parsed and validated like one from the file.

use super::{SettingsError, ENV_PREFIX};

/// Applies the overrides among `env` (variables without the prefix are ignored) to `table`.
pub(super) fn apply_overrides(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), SettingsError> {
    for (name, value) in env {
        let Some(path) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let keys: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
        set_path(table, &keys, parse_env_value(&value))
            .map_err(|reason| SettingsError::Parse(format!("{name}: {reason}")))?;
    }
    Ok(())
}

fn parse_env_value(value: &str) -> toml::Value {
    // A bare TOML value parses as the right-hand side of an assignment.
    format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

fn set_path(table: &mut toml::Table, keys: &[String], value: toml::Value) -> Result<(), String> {
    match keys {
        [] => Err("empty setting name".into()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(inner) => set_path(inner, rest, value),
                _ => Err(format!("`{first}` is not a section")),
            }
        }
    }
}
