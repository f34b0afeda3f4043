//! A statement written down: the CSV (exact decimals, text defused against spreadsheet
//! formulas) and the PDF (text lines in an embedded font that covers every name, issue 42).

use super::statements::*;
use money::NanoUsd;

/// An amount with all nine decimals (what the ledger holds, to the nano-dollar).
pub fn exact(n: NanoUsd) -> String {
    let nanos = i128::from(n.nanos());
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.abs();
    format!("{sign}{}.{:09}", abs / 1_000_000_000, abs % 1_000_000_000)
}

/// A CSV field (`text::csv_cell`: quoted when needed, formulas defused).
pub fn field(s: &str) -> String {
    crate::text::csv_cell(s)
}

/// The statement as CSV: one record per line, its kind in the first column (`statement`,
/// `opening_balance`, `movement`, `usage`, `usage_total`, `closing_balance`); amounts in USD with
/// nine decimals.
pub fn csv(s: &Statement) -> String {
    let mut out = String::new();
    let mut row = |cells: &[&str]| {
        let line: Vec<String> = cells.iter().map(|c| field(c)).collect();
        out.push_str(&line.join(","));
        out.push_str("\r\n");
    };
    row(&["record", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"]);
    row(&[
        "statement",
        s.kind,
        &s.subject_id.to_string(),
        &s.subject_name,
        &s.month.to_string(),
        if s.provisional {
            "provisional"
        } else {
            "closed"
        },
        &s.generated_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        s.balance_of,
    ]);
    row(&["opening_balance_usd", &exact(s.opening)]);
    row(&["movement", "at", "description", "reference", "amount_usd"]);
    for m in &s.movements {
        row(&[
            "movement",
            &m.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            &m.description,
            &m.reference,
            &exact(m.amount),
        ]);
    }
    row(&["movements_total_usd", &exact(s.movements_total())]);
    row(&[
        "usage",
        "model",
        "group",
        "requests",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "images",
        "seconds",
        "charged_usd",
        "wholesale_usd",
    ]);
    for u in &s.usage {
        row(&[
            "usage",
            &u.model,
            &u.group,
            &u.requests.to_string(),
            &u.input_tokens.to_string(),
            &u.output_tokens.to_string(),
            &u.cached_tokens.to_string(),
            &u.images.to_string(),
            &u.seconds.to_string(),
            &exact(u.charged),
            &exact(u.wholesale),
        ]);
    }
    row(&[
        "usage_total_usd",
        &exact(s.usage_charged()),
        &exact(s.usage_wholesale()),
    ]);
    row(&["usage_posted_usd", &exact(s.usage_posted)]);
    row(&["closing_balance_usd", &exact(s.closing)]);
    out
}

/// The statement's lines of text, as the PDF prints them (monospaced columns).
pub fn text_lines(s: &Statement) -> Vec<String> {
    let mut l = Vec::new();
    let title = if s.kind == "partner" {
        "Partner"
    } else {
        "Organization"
    };
    l.push(format!("Tollgate statement {}", s.month));
    l.push(format!(
        "{title}: {} (id {})",
        crate::text::cut_chars(&s.subject_name, 60),
        s.subject_id
    ));
    l.push(format!(
        "Status: {}   Generated: {}",
        if s.provisional {
            "PROVISIONAL (the month is not closed)"
        } else {
            "closed"
        },
        s.generated_at.format("%Y-%m-%d %H:%M UTC")
    ));
    l.push(String::new());
    l.push(format!(
        "Opening {} {:>28} USD",
        s.balance_of,
        exact(s.opening)
    ));
    l.push(String::new());
    movement_text(s, &mut l);
    usage_text(s, &mut l);
    l.push(String::new());
    if s.kind == "partner" {
        l.push(format!(
            "Usage owed at wholesale, posted this month {:>24} USD",
            exact(s.usage_posted)
        ));
        l.push("(owed separately: usage does not change the available funding)".into());
    } else {
        l.push(format!(
            "Usage taken off the balance this month {:>28} USD",
            exact(
                NanoUsd::ZERO
                    .checked_sub(s.usage_posted)
                    .unwrap_or(NanoUsd::ZERO)
            )
        ));
    }
    l.push(format!(
        "Closing {} {:>28} USD",
        s.balance_of,
        exact(s.closing)
    ));
    l
}

/// The statement's movements and their total.
fn movement_text(s: &Statement, l: &mut Vec<String>) {
    l.push("Movements".into());
    if s.movements.is_empty() {
        l.push("  none".into());
    }
    for m in &s.movements {
        let d = crate::text::cut_chars(&m.description, 46);
        l.push(format!(
            "  {}  {:<46} {:>20}",
            m.at.format("%Y-%m-%d"),
            d,
            exact(m.amount)
        ));
    }
    l.push(format!(
        "  {:<58} {:>20}",
        "Total movements",
        exact(s.movements_total())
    ));
    l.push(String::new());
}

/// The statement's usage by model and group, and its totals.
fn usage_text(s: &Statement, l: &mut Vec<String>) {
    l.push("Usage by model and group".into());
    l.push(format!(
        "  {:<26} {:<12} {:>7} {:>11} {:>11} {:>7}",
        "model", "group", "calls", "input", "output", "img/s"
    ));
    for u in &s.usage {
        let model = crate::text::cut_chars(&u.model, 26);
        let group = crate::text::cut_chars(&u.group, 12);
        l.push(format!(
            "  {:<26} {:<12} {:>7} {:>11} {:>11} {:>7}",
            model,
            group,
            u.requests,
            u.input_tokens,
            u.output_tokens,
            u.images + u.seconds
        ));
        let wholesale = if s.kind == "partner" {
            format!("   wholesale {}", exact(u.wholesale))
        } else {
            String::new()
        };
        l.push(format!("      charged {}{wholesale}", exact(u.charged)));
    }
    l.push(format!(
        "  {:<58} {:>20}",
        "Total usage charged",
        exact(s.usage_charged())
    ));
    if s.kind == "partner" {
        l.push(format!(
            "  {:<58} {:>20}",
            "Total usage at wholesale (owed, accrued)",
            exact(s.usage_wholesale())
        ));
    }
}

/// The embedded font of statements (DejaVu Sans Mono; its licence beside it).
pub const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSansMono.ttf");

/// The statement as a PDF (A4, the font embedded and subset).
pub fn pdf(s: &Statement) -> Result<Vec<u8>, StatementError> {
    use printpdf::{
        Mm, Op, ParsedFont, PdfDocument, PdfFontHandle, PdfPage, PdfSaveOptions, Point, Pt,
        TextItem,
    };
    let font = ParsedFont::from_bytes(FONT, 0, &mut Vec::new())
        .ok_or_else(|| StatementError::Render("the statement font could not be read"))?;
    let mut doc = PdfDocument::new(&format!("Tollgate statement {}", s.month));
    let font_id = doc.add_font(&font);
    let lines = text_lines(s);
    const PER_PAGE: usize = 60;
    let pages: Vec<PdfPage> = lines
        .chunks(PER_PAGE)
        .enumerate()
        .map(|(n, chunk)| {
            let mut ops = vec![
                Op::StartTextSection,
                Op::SetFont {
                    font: PdfFontHandle::External(font_id.clone()),
                    size: Pt(8.0),
                },
                Op::SetLineHeight { lh: Pt(12.0) },
                Op::SetTextCursor {
                    pos: Point::new(Mm(15.0), Mm(282.0)),
                },
            ];
            for line in chunk {
                ops.push(Op::ShowText {
                    items: vec![TextItem::Text(line.clone())],
                });
                ops.push(Op::AddLineBreak);
            }
            ops.push(Op::ShowText {
                items: vec![TextItem::Text(format!(
                    "page {} of {}",
                    n + 1,
                    lines.len().div_ceil(PER_PAGE)
                ))],
            });
            ops.push(Op::EndTextSection);
            PdfPage::new(Mm(210.0), Mm(297.0), ops)
        })
        .collect();
    Ok(doc
        .with_pages(pages)
        .save(&PdfSaveOptions::default(), &mut Vec::new()))
}
