//! The project's Python: `dev/python` installs the examples' venv (idempotent) and names its
//! interpreter, so tests of the Python examples run from a clean checkout; a failed install
//! fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `dev/python` (creating the venv on first use) and returns the venv's interpreter.
pub fn install_python() -> PathBuf {
    let started = Instant::now();
    let output = Command::new(repo().join("dev/python"))
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("cannot run dev/python: {e}"));
    assert!(
        output.status.success(),
        "dev/python failed ({}); its output is above",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let python = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        python.is_file(),
        "dev/python printed no interpreter: {stdout:?}"
    );
    println!("dev/python took {:.1} s", started.elapsed().as_secs_f64());
    python
}
