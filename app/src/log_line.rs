//! The plain log line, written without `tracing_subscriber`'s general formatter (issue 44).
//!
//! Same text as `tracing_subscriber::fmt`'s default (full) format without colours —
//! `2026-11-29T05:42:11.135891Z  INFO proxy::money::settle: request settled request_id=… route="chat_completions" status=200 …`
//! — so people and tools that read the lines see no difference, at a fifth of the cost: the
//! general formatter wrote every piece through `core::fmt` with colour wrappers that paint
//! nothing, formatted the date anew for every line and each number through the formatting
//! machinery (about 20 k instructions of a 220 k chat call; README "Performance"). Here the date
//! is formatted once a second per thread, numbers with `itoa`, strings written directly.
//!
//! Events inside a span, and `log` records from Pingora, go to the general formatter: their
//! layout (span names and fields, the `log` record's target) is its own, and neither is on the
//! request path.

use std::cell::Cell;
use std::fmt::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The plain line's formatter; [`FormatEvent`] for `tracing_subscriber::fmt().event_format`.
pub struct PlainLine {
    /// For events in a span and `log` records.
    general: Format<Full>,
}

impl PlainLine {
    pub fn new() -> PlainLine {
        PlainLine {
            general: Format::default().with_ansi(false),
        }
    }
}

impl<S, N> FormatEvent<S, N> for PlainLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let in_span = ctx
            .event_scope()
            .is_some_and(|scope| scope.from_root().next().is_some());
        if in_span || meta.fields().field("log.target").is_some() {
            return self.general.format_event(ctx, writer, event);
        }
        write_timestamp(&mut writer)?;
        writer.write_str(level_text(meta.level()))?;
        writer.write_char(' ')?;
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        let mut fields = Fields {
            out: &mut writer,
            first: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_char('\n')
    }
}

/// The level as the general format pads it (five characters, right-aligned).
fn level_text(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        Level::ERROR => "ERROR",
    }
}

thread_local! {
    /// The second last formatted on this thread and its text (`2026-11-29T05:42:11`).
    static SECOND: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
}

/// `2026-11-29T05:42:11.135891Z ` (UTC, microseconds), as `tracing_subscriber`'s `SystemTime`.
fn write_timestamp(w: &mut Writer<'_>) -> fmt::Result {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return w.write_str("<unknown time> ");
    };
    let secs = now.as_secs();
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        text = second_text(secs);
        SECOND.set((secs, text));
    }
    // The cached text is ASCII digits and separators.
    w.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)?;
    let mut frac = *b".000000Z ";
    let mut micros = now.subsec_micros();
    for slot in frac[1..7].iter_mut().rev() {
        *slot = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    w.write_str(std::str::from_utf8(&frac).map_err(|_| fmt::Error)?)
}

/// `YYYY-MM-DDTHH:MM:SS` of a Unix second (the proleptic Gregorian calendar, years 1970–9999).
fn second_text(secs: u64) -> [u8; 19] {
    let (year, month, day) = civil_date(secs / 86_400);
    let rem = secs % 86_400;
    let mut out = *b"0000-00-00T00:00:00";
    let mut put = |at: usize, width: usize, mut n: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(0, 4, year.min(9999));
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    out
}

/// Year, month, day of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes an event's fields as the general format does: the message as it is (terminal escapes
/// made visible), then `name=value` each, separated by spaces; strings quoted and escaped
/// (`Debug`), numbers and `%` values as they display.
struct Fields<'w, 'a> {
    out: &'w mut Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    /// The separator and `name=` (a raw identifier's `r#` dropped).
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::replace(&mut self.first, false) {
            self.out.write_char(' ')?;
        }
        let name = field.name();
        self.out
            .write_str(name.strip_prefix("r#").unwrap_or(name))?;
        self.out.write_char('=')
    }

    fn record_with(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.result = self.name(field).and_then(|()| write(self.out));
    }

    fn message(&mut self, text: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        if !std::mem::replace(&mut self.first, false) {
            self.result = self.out.write_char(' ');
        }
        let mut escaping = Escaping(self.out);
        self.result = self.result.and_then(|()| escaping.write_fmt(text));
    }
}

impl Visit for Fields<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            return self.message(format_args!("{value}"));
        }
        self.record_with(field, |w| {
            if value
                .bytes()
                .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
            {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            } else {
                write!(w, "{value:?}")
            }
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_with(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_with(field, |w| w.write_str(itoa::Buffer::new().format(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record_with(field, |w| w.write_str(if value { "true" } else { "false" }));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let name = field.name();
        self.record_with(field, |w| {
            Escaping(w).write_fmt(format_args!("{value}"))?;
            let Some(mut source) = value.source() else {
                return Ok(());
            };
            write!(w, " {name}.sources=[")?;
            let mut first = true;
            loop {
                if !std::mem::replace(&mut first, false) {
                    w.write_str(", ")?;
                }
                Escaping(w).write_fmt(format_args!("{source}"))?;
                match source.source() {
                    Some(next) => source = next,
                    None => break,
                }
            }
            w.write_char(']')
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            return self.message(format_args!("{value:?}"));
        }
        self.record_with(field, |w| write!(w, "{value:?}"));
    }
}

/// Makes terminal escapes in a message visible, as the general format does (ESC, BEL, BS, FF,
/// DEL and the C1 controls written as their escapes).
struct Escaping<'w, 'a>(&'w mut Writer<'a>);

impl Write for Escaping<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = rest.find(|c: char| {
            matches!(
                c,
                '\x1b' | '\x07' | '\x08' | '\x0c' | '\x7f' | '\u{80}'..='\u{9f}'
            )
        }) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\u{80}'..='\u{9f}' => write!(self.0, "\\u{{{:x}}}", c as u32)?,
                _ => write!(self.0, "\\x{:02x}", c as u32)?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The lines of `log` under the plain formatter and under the general one (no colours).
    fn both(log: impl Fn()) -> (String, String) {
        let capture = |plain: bool| {
            let buf = Arc::new(Mutex::new(Vec::new()));
            let sink = buf.clone();
            let builder = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(Level::DEBUG)
                .with_writer(move || Sink(sink.clone()));
            if plain {
                tracing::subscriber::with_default(
                    builder.event_format(PlainLine::new()).finish(),
                    &log,
                );
            } else {
                tracing::subscriber::with_default(builder.finish(), &log);
            }
            let bytes = buf.lock().unwrap().clone();
            String::from_utf8(bytes).unwrap()
        };
        (capture(true), capture(false))
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Everything after the timestamp (the two lines were written microseconds apart).
    fn untimed(text: &str) -> Vec<&str> {
        text.lines().map(|l| l.split_once(' ').unwrap().1).collect()
    }

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer failed")
        }
    }
    impl fmt::Display for Inner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("inner \x1b[31mcause")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    impl std::error::Error for Inner {}

    #[test]
    fn lines_read_as_the_general_formats() {
        let (plain, general) = both(|| {
            let id = "01a225d33e0b75f287d89dc673838d57".to_string();
            tracing::info!(request_id = %id, route = "chat_completions", status = 200u16, org_id = -3i64, big = u64::MAX, ok = true, measurement = ?Some(1), "request settled");
            tracing::warn!(
                r#type = "a \"quoted\"\tword",
                "no \x1b[2Jescape \u{85} here"
            );
            tracing::error!(
                error = &Outer(Inner) as &(dyn std::error::Error + 'static),
                "failed"
            );
            tracing::debug!(only = 1, "");
            tracing::info!(without = "message");
            let span = tracing::info_span!("call", id = 7);
            span.in_scope(|| tracing::info!(inside = true, "in a span"));
        });
        assert_eq!(
            untimed(&plain),
            untimed(&general),
            "plain:\n{plain}\ngeneral:\n{general}"
        );
        assert_eq!(plain.lines().count(), 6);
    }

    #[test]
    fn the_timestamp_reads_as_the_general_formats() {
        let (plain, general) = both(|| tracing::info!("tick"));
        let (p, g) = (&plain[..27], &general[..27]);
        assert_eq!(p.len(), g.len());
        assert_eq!(p.as_bytes()[26], b'Z', "{p}");
        // The same second, or the next one when the two ran across a tick.
        assert!(p[..17] == g[..17], "{p} / {g}");
    }

    #[test]
    fn dates_are_the_calendars() {
        assert_eq!(&second_text(0), b"1970-01-01T00:00:00");
        assert_eq!(&second_text(951_782_400), b"2000-02-29T00:00:00");
        assert_eq!(&second_text(1_795_843_331), b"2026-11-28T05:22:11");
        assert_eq!(&second_text(4_102_444_799), b"2099-12-31T23:59:59");
    }
}
