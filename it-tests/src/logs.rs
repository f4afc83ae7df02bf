//! The process's log lines (WARN and above), captured for tests that check what was logged.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The captured log of this test binary. Cheap to clone.
#[derive(Clone)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The lines logged at ERROR so far.
    pub fn errors(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .map(str::to_string)
            .collect()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures the log of this test binary from now on (the first call installs the subscriber).
pub fn captured() -> CapturedLogs {
    static LOGS: OnceLock<CapturedLogs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = CapturedLogs(Arc::new(Mutex::new(Vec::new())));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || sink.clone())
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        logs
    })
    .clone()
}
