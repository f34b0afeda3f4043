//! Every log line of the calling test binary (debug level, Pingora's `log` output included),
//! captured once per binary, so tests can check that no credential is ever logged.

use std::sync::{Arc, Mutex, OnceLock};

/// Installs the capturing subscriber (once per test binary) and returns its buffer.
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        buf
    })
    .clone()
}

/// What was logged so far, as text.
pub fn captured_text() -> String {
    String::from_utf8_lossy(&captured_logs().lock().expect("log buffer")).into_owned()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut b) = self.0.lock() {
            b.extend_from_slice(data);
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
