//! Serde support for durations written as text with a unit (`"250ms"`, `"10s"`, `"5m"`, `"2h"`).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Parses `"<integer><unit>"` with unit `ms`, `s`, `m` or `h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} must be an integer followed by ms, s, m or h"))?;
    let secs = |mult: u64| n.checked_mul(mult).map(Duration::from_secs);
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        _ => None,
    }
    .ok_or_else(|| format!("duration {text:?} must be an integer followed by ms, s, m or h"))
}

/// Formats with the largest unit that represents the duration exactly.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
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
    fn durations_round_trip_through_text() {
        for text in ["250ms", "10s", "5m", "2h", "0s", "90s"] {
            let d = parse(text).unwrap();
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
        assert_eq!(format(Duration::from_secs(90)), "90s");
        assert!(parse("5 minutes").is_err());
        assert!(parse("-1s").is_err());
    }
}
