//! How a command ends: its exit code, the message it prints on stderr, and the helpers that
//! print its answer on stdout.

use std::io::Write;

use serde::Serialize;

/// Exit code: a service failed or could not be reached.
pub const EXIT_FAILURE: i32 = 1;
/// Exit code: bad usage or input.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the task (or dead letter, job or schedule) does not exist.
pub const EXIT_NOT_FOUND: i32 = 3;

/// A failure with its exit code; `run` prints its message on stderr.
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl Failure {
    /// Bad usage or input: the caller's to fix.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// A service failed or could not be reached.
    pub(crate) fn service(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_FAILURE,
            message: message.into(),
        }
    }
}

/// What a command returns.
pub(crate) type Outcome = Result<(), Failure>;

/// An optional value as a table prints it: `-` when absent.
pub(crate) fn or_dash<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// `text` on one line: an error's (or a reason's) line breaks and tabs would break a table's
/// rows.
pub(crate) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Prints `answer` as one line of JSON with its keys sorted, as this command always printed
/// the API's answers (through a `serde_json::Value`, whose keys are sorted).
pub(crate) fn print_json(out: &mut dyn Write, answer: &impl Serialize) -> Outcome {
    let value = serde_json::to_value(answer)
        .map_err(|e| Failure::service(format!("cannot print the answer as JSON: {e}")))?;
    writeln!(out, "{value}").map_err(io_failure)
}

/// Writing to the output failed.
pub(crate) fn io_failure(e: std::io::Error) -> Failure {
    Failure::service(format!("cannot write output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_on_one_line() {
        assert_eq!(one_line("a\nb\tc"), "a b c");
    }
}
