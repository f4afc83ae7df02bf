//! The annotated `scheduler.toml` at the repository's root (the README's walkthrough): it
//! loads, it names every setting there is, and the values it shows commented out are the
//! defaults, so the file stays true as settings are added or their defaults change.

use scheduler_core::settings::{QueueSettings, Settings, TypeLimits};
use serde_json::Value;

const FILE: &str = include_str!("../../scheduler.toml");

fn load(text: &str) -> Settings {
    Settings::from_toml_with_env(text, Vec::<(String, String)>::new())
        .unwrap_or_else(|e| panic!("scheduler.toml does not load: {e}\n{text}"))
}

/// The keys of `value`'s object and of the objects nested in it.
fn keys(value: &Value, into: &mut Vec<String>) {
    if let Some(object) = value.as_object() {
        for (key, inner) in object {
            into.push(key.clone());
            keys(inner, into);
        }
    }
}

#[test]
fn it_sets_only_what_the_local_stack_needs() {
    let mut expected = Settings::default();
    expected.kafka.bootstrap_servers = "127.0.0.1:19092".into();
    expected.kafka.create_topic_partitions = Some(6);
    expected.cassandra.contact_points = vec!["127.0.0.1:19042".into()];
    expected.cassandra.fetch_schema_metadata = false;
    expected.cassandra.auto_migrate = true;
    assert_eq!(load(FILE), expected);
}

#[test]
fn it_names_every_setting() {
    let mut names = Vec::new();
    keys(
        &serde_json::to_value(Settings::default()).expect("JSON"),
        &mut names,
    );
    keys(
        &serde_json::to_value(QueueSettings::default()).expect("JSON"),
        &mut names,
    );
    keys(
        &serde_json::to_value(TypeLimits::default()).expect("JSON"),
        &mut names,
    );
    assert!(names.len() > 40, "{names:?}");
    for name in names {
        let named = FILE.lines().any(|line| {
            let line = line.trim_start_matches('#').trim_start();
            line.starts_with(&format!("{name} ="))
                || line == format!("[{name}]")
                || line == format!("[[{name}]]")
                || line.starts_with(&format!("[scheduling.{name}."))
        });
        assert!(named, "scheduler.toml does not show the setting {name}");
    }
}

#[test]
fn the_values_shown_commented_out_are_the_defaults() {
    // Uncomment every `# key = value` of the default queue's sections, but the examples of
    // settings that are unset by default (marked `default: unset` or `default: none`).
    let mut uncommented = 0;
    let mut text = String::new();
    for line in FILE.lines() {
        if line.starts_with("# [scheduling.task_types") || line.starts_with("# [[queues]]") {
            break;
        }
        let setting = line.strip_prefix("# ").filter(|rest| {
            rest.split_once(" = ")
                .is_some_and(|(key, _)| key.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                && !rest.contains("default: unset")
                && !rest.contains("default: none")
        });
        match setting {
            Some(setting) => {
                uncommented += 1;
                text.push_str(setting);
            }
            None => text.push_str(line),
        }
        text.push('\n');
    }
    assert!(uncommented > 25, "{uncommented} settings uncommented");
    assert_eq!(
        load(&text),
        load(FILE),
        "a commented-out value is not the default"
    );
}
