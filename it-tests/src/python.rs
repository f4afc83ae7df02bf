//! The project's Python: `dev/python` installs a venv (idempotent) and names its interpreter,
//! so tests of the Python examples, and the OpenAPI contract test's schemathesis, run from a
//! clean checkout; a failed install fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `dev/python` (creating the producer's venv on first use) and returns the venv's
/// interpreter.
pub fn install_python() -> PathBuf {
    dev_python("producer")
}

/// Runs `dev/python schemathesis` (creating its venv on first use) and returns the venv's
/// interpreter: `python -m schemathesis.cli` runs it.
pub fn install_schemathesis() -> PathBuf {
    dev_python("schemathesis")
}

/// `dev/python set`'s interpreter, the install's progress on stderr.
fn dev_python(set: &str) -> PathBuf {
    let started = Instant::now();
    let output = Command::new(repo().join("dev/python"))
        .arg(set)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run dev/python: {e}"));
    assert!(
        output.status.success(),
        "dev/python {set} failed ({}); its output is above",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let python = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        python.is_file(),
        "dev/python printed no interpreter: {stdout:?}"
    );
    println!(
        "dev/python {set} took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    python
}
