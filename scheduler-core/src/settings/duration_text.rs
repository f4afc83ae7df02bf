//! Durations written as text with a unit (`"500ms"`, `"10s"`, `"5m"`, `"2h"`), in settings files,
//! environment overrides and on the command line; serde support for the settings' durations.
//!
//! The text is humantime's, which also reads combinations and longer names (`"1h 30m"`,
//! `"2 days"`). humantime-serde would save the two serde functions below, but its errors would
//! lose the hint naming the forms to write.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// A duration's text could not be read.
#[derive(Debug, thiserror::Error)]
#[error("duration {text:?} must be an integer followed by ms, s, m or h")]
pub struct DurationTextError {
    /// The text, trimmed.
    pub text: String,
    /// Where humantime stopped, and why.
    #[source]
    pub source: humantime::DurationError,
}

/// Parses a number and its unit, such as `"500ms"`, `"10s"`, `"5m"` or `"2h"`.
pub fn parse(text: &str) -> Result<Duration, DurationTextError> {
    let text = text.trim();
    humantime::parse_duration(text).map_err(|source| DurationTextError {
        text: text.to_string(),
        source,
    })
}

/// Formats so that [`parse`] reads the same duration back (`"90s"` as `"1m 30s"`).
pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// Serde serializer.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// Serde deserializer.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_read_as_before() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("250ms", Duration::from_millis(250)),
            ("0s", Duration::ZERO),
            ("10s", Duration::from_secs(10)),
            ("30s", Duration::from_secs(30)),
            ("90s", Duration::from_secs(90)),
            ("5m", Duration::from_secs(300)),
            ("2h", Duration::from_secs(7200)),
            (" 10s ", Duration::from_secs(10)),
            ("10 s", Duration::from_secs(10)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text).ok(), Some(expected), "{text:?}");
        }
    }

    #[test]
    fn durations_round_trip_through_text() {
        for text in ["250ms", "10s", "5m", "2h", "0s", "90s", "1h 30m 5s 20ms"] {
            let d = parse(text).expect("a duration");
            assert_eq!(parse(&format(d)).ok(), Some(d), "{text:?}");
        }
        assert_eq!(format(Duration::from_secs(7200)), "2h");
        assert_eq!(format(Duration::from_millis(500)), "500ms");
    }

    #[test]
    fn bad_text_names_the_forms_to_write_and_keeps_the_cause() {
        for text in ["ten seconds", "-1s", "5 fortnights", "10", "", "s"] {
            let error = parse(text).expect_err(text);
            assert!(
                error
                    .to_string()
                    .ends_with("must be an integer followed by ms, s, m or h"),
                "{error}"
            );
            assert!(std::error::Error::source(&error).is_some());
        }
    }
}
