//! Process logging: `tracing` lines to stderr through a buffered writer (see [`init`]).
//!
//! `RUST_LOG` filters (default: the binary's own default); `TOLLGATE_LOG_FORMAT=json` writes one
//! JSON object a line. Lines are coloured only when stderr is a terminal.

use std::io::Write;
use std::sync::Arc;

/// Installs the global subscriber. `default_filter` applies when `RUST_LOG` is unset.
pub fn init(default_filter: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let out = BufferedStderr::start();
    // Colours only for a person at a terminal: a log file or a collector gets plain lines (the
    // escape codes cost a tenth of a chat call's instructions: README "Performance").
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(out);
    if std::env::var("TOLLGATE_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else if colours {
        builder.init();
    } else {
        // The same line as the general format's, written directly (`log_line.rs`).
        builder
            .event_format(crate::log_line::PlainLine::new())
            .init();
    }
}

/// Log lines go to stderr through a 64 KiB buffer flushed at least every second (and whenever it
/// fills), like nginx's `access_log … buffer=64k flush=1s`: one write per request line cost the
/// gateway a quarter of its CPU per request in the benchmark. Warnings and errors are flushed at
/// once (among them a usage event the stream refused, logged in full so it can be replayed), so a
/// crash loses at most the last second of info lines.
#[derive(Clone)]
struct BufferedStderr(Arc<std::sync::Mutex<std::io::BufWriter<std::io::Stderr>>>);

impl BufferedStderr {
    fn start() -> BufferedStderr {
        let out = BufferedStderr(Arc::new(std::sync::Mutex::new(
            std::io::BufWriter::with_capacity(64 * 1024, std::io::stderr()),
        )));
        let flusher = out.clone();
        let spawned = std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    flusher.flush_now();
                }
            });
        if spawned.is_err() {
            let _ = writeln!(
                std::io::stderr(),
                "tollgate: log flusher not started; logs may lag"
            );
        }
        out
    }

    fn flush_now(&self) {
        if let Ok(mut w) = self.0.lock() {
            let _ = w.flush();
        }
    }
}

/// One log line's writer: flushes on drop when the line is a warning or an error.
struct LogLine {
    out: BufferedStderr,
    urgent: bool,
}

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.out.0.lock() {
            Ok(mut w) => w.write(buf),
            Err(_) => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush_now();
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if self.urgent {
            self.out.flush_now();
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BufferedStderr {
    type Writer = LogLine;

    fn make_writer(&'a self) -> LogLine {
        LogLine {
            out: self.clone(),
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LogLine {
        LogLine {
            out: self.clone(),
            urgent: *meta.level() <= tracing::Level::WARN,
        }
    }
}
