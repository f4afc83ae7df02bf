//! The figures the dashboard shows beside the status API's (stale tasks, suspended tasks) and
//! its charts' samples (executions, execution delay) are read from the node's `/metrics` text,
//! the very answer a Prometheus scrape gets, so the two cannot disagree. This is a reader of the
//! lines `prometheus-client` writes: `name{label="value",...} value`, label values with `\\`,
//! `\"` and `\n` escaped; comments (`# HELP`, `# TYPE`, `# EOF`) skipped.

use std::collections::BTreeMap;

use crate::store::PartitionId;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    /// The series' name (`scheduler_executions_total`).
    pub(crate) name: String,
    /// Its labels, in the order written.
    pub(crate) labels: Vec<(String, String)>,
    /// Its value.
    pub(crate) value: f64,
}

impl Line {
    /// The value of label `name`.
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the line is of `queue`: labelled with it, or not labelled with any queue (a node
    /// serving the default queue alone labels nothing).
    pub(crate) fn of_queue(&self, queue: &str) -> bool {
        self.label("queue").is_none_or(|q| q == queue)
    }
}

/// Every sample line of `text`; lines that are not samples are skipped.
pub(crate) fn parse(text: &str) -> Vec<Line> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Line> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"")?;
            let (value, after) = label_value(after)?;
            labels.push((key.trim().to_string(), value));
            rest = after;
        }
    }
    // A timestamp may follow the value.
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Line {
        name,
        labels,
        value,
    })
}

/// A label value up to its closing quote, unescaped, and what follows the quote.
fn label_value(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

/// The sum over every partition's series of `name` in `queue`, by the value of `label`.
pub(crate) fn sum_by(lines: &[Line], name: &str, queue: &str, label: &str) -> Vec<(String, f64)> {
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.name == name && l.of_queue(queue)) {
        if let Some(value) = line.label(label) {
            *sums.entry(value.to_string()).or_default() += line.value;
        }
    }
    sums.into_iter().collect()
}

/// The value of gauge `name` of `queue` per partition.
pub(crate) fn per_partition(lines: &[Line], name: &str, queue: &str) -> BTreeMap<PartitionId, i64> {
    lines
        .iter()
        .filter(|l| l.name == name && l.of_queue(queue))
        .filter_map(|l| Some((l.label("partition")?.parse().ok()?, l.value as i64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_with_their_labels_and_comments_are_skipped() {
        let text = "# HELP x Some help\n# TYPE x counter\n\
                    scheduler_executions_total{partition=\"0\",outcome=\"completed\"} 5\n\
                    plain 2.5\n\
                    tricky{task_type=\"a\\\"b,c}\\\\d\\ne\",le=\"+Inf\"} 7 1700000000\n\
                    # EOF\n";
        let lines = parse(text);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].name, "scheduler_executions_total");
        assert_eq!(lines[0].label("outcome"), Some("completed"));
        assert_eq!(lines[0].value, 5.0);
        assert_eq!((lines[1].name.as_str(), lines[1].value), ("plain", 2.5));
        assert_eq!(lines[2].label("task_type"), Some("a\"b,c}\\d\ne"));
        assert_eq!(lines[2].label("le"), Some("+Inf"));
        assert_eq!(lines[2].value, 7.0);
    }

    #[test]
    fn sums_and_gauges_keep_to_their_queue() {
        let text = "s_total{queue=\"a\",partition=\"0\",outcome=\"completed\"} 2\n\
                    s_total{queue=\"a\",partition=\"1\",outcome=\"completed\"} 3\n\
                    s_total{queue=\"a\",partition=\"1\",outcome=\"failed\"} 1\n\
                    s_total{queue=\"b\",partition=\"0\",outcome=\"completed\"} 100\n\
                    g{queue=\"a\",partition=\"4\"} 9\n\
                    g{queue=\"b\",partition=\"4\"} 1\n";
        let lines = parse(text);
        assert_eq!(
            sum_by(&lines, "s_total", "a", "outcome"),
            [("completed".to_string(), 5.0), ("failed".to_string(), 1.0)]
        );
        assert_eq!(per_partition(&lines, "g", "a"), BTreeMap::from([(4, 9)]));
        // Unlabelled lines belong to the only queue.
        let lines = parse("g{partition=\"2\"} 3\n");
        assert_eq!(
            per_partition(&lines, "g", "default"),
            BTreeMap::from([(2, 3)])
        );
    }
}
