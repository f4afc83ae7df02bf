//! Durations written as text with a unit (`"500ms"`, `"10s"`, `"5m"`, `"2h"`), in settings files,
//! environment overrides and on the command line; serde support for the settings' durations.
//!
//! The text is humantime's, which also reads combinations and longer names (`"1h 30m"`,
//! `"2 days"`), but not its months and years: `"5M"` would be five months where `"5m"` is five
//! minutes, a typo no setting here should survive. humantime-serde would save the two serde functions below, but its errors would
//! lose the hint naming the forms to write.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// A duration's text could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DurationTextError {
    /// Not a duration.
    #[error("duration {text:?} must be an integer followed by ms, s, m or h")]
    Unreadable {
        /// The text, trimmed.
        text: String,
        /// Where humantime stopped, and why.
        #[source]
        source: humantime::DurationError,
    },
    /// In months or years (`M` is months; minutes are `m`).
    #[error("duration {text:?}: months and years are not accepted (minutes are m, not M)")]
    MonthsOrYears {
        /// The text, trimmed.
        text: String,
    },
}

/// humantime's units for months and years.
const MONTHS_AND_YEARS: [&str; 8] = ["M", "month", "months", "y", "year", "years", "yr", "yrs"];

/// Parses a number and its unit, such as `"500ms"`, `"10s"`, `"5m"` or `"2h"`.
pub fn parse(text: &str) -> Result<Duration, DurationTextError> {
    let text = text.trim();
    let units = text.split(|c: char| !c.is_ascii_alphabetic());
    if units
        .into_iter()
        .any(|unit| MONTHS_AND_YEARS.contains(&unit))
    {
        return Err(DurationTextError::MonthsOrYears {
            text: text.to_string(),
        });
    }
    humantime::parse_duration(text).map_err(|source| DurationTextError::Unreadable {
        text: text.to_string(),
        source,
    })
}

/// Formats so that [`parse`] reads the same duration back (`"90s"` as `"1m 30s"`). From a
/// month on, in hours (humantime would write the months and years `parse` refuses).
pub fn format(d: Duration) -> String {
    const MONTH: u64 = 2_630_016;
    if d.as_secs() < MONTH {
        return humantime::format_duration(d).to_string();
    }
    let hours = d.as_secs() / 3600;
    let rest = d - Duration::from_secs(hours * 3600);
    if rest.is_zero() {
        format!("{hours}h")
    } else {
        format!("{hours}h {}", humantime::format_duration(rest))
    }
}

/// Serde serializer.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*d))
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
        for text in [
            "250ms",
            "10s",
            "5m",
            "2h",
            "0s",
            "90s",
            "1h 30m 5s 20ms",
            "40days",
            "4000h 5s",
        ] {
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

    #[test]
    fn months_and_years_are_refused_so_5_capital_m_is_not_five_months() {
        for text in ["5M", "1y", "2 months", "1year", "10m 1M"] {
            let error = parse(text).expect_err(text);
            assert!(error.to_string().contains("not accepted"), "{error}");
        }
        assert_eq!(parse("5m").ok(), Some(Duration::from_secs(300)));
    }
}
