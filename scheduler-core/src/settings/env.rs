//! Environment overrides: `SCHEDULER__<SECTION>__<KEY>=value` sets `<key>` of `[<section>]` in
//! the TOML tree before it is read into [`Settings`](super::Settings), so a value from the
//! environment is parsed and validated like one from the file.
//!
//! Hand-written rather than `envy`: envy reads flat structs only (no `[section]`s) and fills a
//! struct from the environment alone, where this lays the environment over the file's values.
//! It walks the variable's name, not a list of known keys, so a new setting needs no entry
//! here, and a misspelt one is refused like a misspelt file key (`unknown field`).

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

/// The value as TOML when it is a TOML value (numbers, booleans, arrays, quoted strings), else
/// the text itself as a string (`10.0.0.1:9092`, `2h`).
fn parse_env_value(value: &str) -> toml::Value {
    // A bare TOML value parses as the right-hand side of an assignment.
    format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

/// Sets `keys` (a section path, then the key) in `table`, creating sections as needed.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(file: &str, env: &[(&str, &str)]) -> Result<toml::Table, String> {
        let mut table: toml::Table = file.parse().map_err(|e| format!("{e}"))?;
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        apply_overrides(&mut table, env).map_err(|e| e.to_string())?;
        Ok(table)
    }

    #[test]
    fn a_value_is_toml_when_it_parses_as_toml_else_text() {
        let table = overlay(
            "[kafka]\ntopic = \"from-file\"",
            &[
                ("SCHEDULER__SCHEDULING__MAX_TASK_RETRIES", "5"),
                ("SCHEDULER__ADMIN__ENABLED", "false"),
                ("SCHEDULER__CASSANDRA__CONTACT_POINTS", r#"["a:1", "b:2"]"#),
                ("SCHEDULER__KAFKA__BOOTSTRAP_SERVERS", "10.0.0.1:9092"),
                ("SCHEDULER__SCHEDULING__LOOK_BACK_ON_RESTART", "2h"),
                ("SCHEDULER__ADMIN__TOKEN", r#""quoted""#),
                ("OTHER__KAFKA__TOPIC", "ignored"),
            ],
        )
        .expect("overlaid");
        let at = |section: &str, key: &str| table[section][key].clone();
        assert_eq!(
            at("scheduling", "max_task_retries"),
            toml::Value::Integer(5)
        );
        assert_eq!(at("admin", "enabled"), toml::Value::Boolean(false));
        assert_eq!(
            at("cassandra", "contact_points").as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(
            at("kafka", "bootstrap_servers").as_str(),
            Some("10.0.0.1:9092")
        );
        assert_eq!(
            at("scheduling", "look_back_on_restart").as_str(),
            Some("2h")
        );
        assert_eq!(at("admin", "token").as_str(), Some("quoted"));
        assert_eq!(at("kafka", "topic").as_str(), Some("from-file"));
    }

    #[test]
    fn a_variable_that_names_a_value_as_a_section_names_itself() {
        let error = overlay(
            "[kafka]\ntopic = \"t\"",
            &[("SCHEDULER__KAFKA__TOPIC__X", "1")],
        )
        .expect_err("topic is a value");
        assert_eq!(
            error,
            "invalid settings: SCHEDULER__KAFKA__TOPIC__X: `topic` is not a section"
        );
    }
}
