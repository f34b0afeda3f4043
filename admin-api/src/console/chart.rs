//! Server-rendered SVG bar charts (no script, no chart library): one column per period, stacked
//! by series. The numbers stay in the tables beside each chart; the chart is their picture.
//!
//! Bounds (checked by the property test below): every segment lies inside the chart area, the
//! segments of a column stack from the bottom without gap or overlap, a column never exceeds
//! [`HEIGHT`], the largest column fills it exactly, and a period without spend still shows a
//! 1-unit stub so every period is visible.

use money::NanoUsd;

/// Chart area height in SVG units.
pub(crate) const HEIGHT: u32 = 120;
/// Width of one period's slot in SVG units (the bar takes 4/5 of it).
pub(crate) const SLOT: u32 = 40;
/// At most this many series are drawn apart; the rest are summed into the last one ("Other").
pub(crate) const SERIES: usize = 6;

/// One stacked part of a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub y: u32,
    pub height: u32,
    /// Index of the series (its colour class `s{series}`).
    pub series: usize,
}

/// One period's column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Column {
    pub x: u32,
    /// Empty for a period without spend (drawn as a stub).
    pub segments: Vec<Segment>,
    /// What a screen reader or a hover says: the period and its figure.
    pub label: String,
}

/// A whole chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chart {
    pub columns: Vec<Column>,
    /// The names of the first and the last period, shown under the axis.
    pub ticks: Option<(String, String)>,
}

impl Chart {
    /// Width of the drawing in SVG units.
    pub fn width(&self) -> usize {
        self.columns.len() * SLOT as usize
    }

    /// Width of one bar in SVG units.
    pub fn bar(&self) -> u32 {
        SLOT * 4 / 5
    }

    /// Height of the stub drawn for an empty period.
    pub fn stub_y(&self) -> u32 {
        HEIGHT - 1
    }
}

/// Stacks `columns` (label, one value per series; negative values count as zero), scaled so the
/// largest column's total fills the chart.
pub(crate) fn stacked(columns: &[(String, Vec<NanoUsd>)]) -> Chart {
    let total = |values: &[NanoUsd]| -> u128 {
        values
            .iter()
            .map(|v| u128::from(v.nanos().max(0).unsigned_abs()))
            .sum()
    };
    let max = columns.iter().map(|(_, v)| total(v)).max().unwrap_or(0);
    let scale = |cum: u128| -> u32 {
        // cum ≤ max, so the quotient is ≤ HEIGHT.
        (cum * u128::from(HEIGHT))
            .checked_div(max)
            .unwrap_or(0)
            .min(u128::from(HEIGHT)) as u32
    };
    let columns = columns
        .iter()
        .enumerate()
        .map(|(i, (label, values))| {
            let mut segments = Vec::new();
            let mut cum = 0u128;
            let mut top = 0u32;
            for (series, v) in values.iter().enumerate() {
                cum += u128::from(v.nanos().max(0).unsigned_abs());
                let next = scale(cum);
                if next > top {
                    segments.push(Segment {
                        y: HEIGHT - next,
                        height: next - top,
                        series,
                    });
                    top = next;
                }
            }
            Column {
                x: u32::try_from(i).unwrap_or(u32::MAX / SLOT) * SLOT + SLOT / 10,
                segments,
                label: label.clone(),
            }
        })
        .collect();
    Chart {
        columns,
        ticks: None,
    }
}

/// The one-series chart of daily spend (the overview's).
pub(crate) fn daily(days: &[(chrono::NaiveDate, NanoUsd, i64)]) -> Chart {
    let columns: Vec<_> = days
        .iter()
        .map(|(d, cost, _)| {
            (
                format!(
                    "{}: {} USD (exactly {})",
                    d.format("%b %-d"),
                    super::amount::readable(cost.nanos()),
                    cost.to_decimal_usd()
                ),
                vec![*cost],
            )
        })
        .collect();
    let mut chart = stacked(&columns);
    if let (Some(first), Some(last)) = (days.first(), days.last()) {
        let name = |d: &chrono::NaiveDate| d.format("%b %-d").to_string();
        chart.ticks = Some((name(&first.0), name(&last.0)));
    }
    chart
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the figures (none, zeros, huge, negative corrections), every segment stays
        /// inside the chart, a column's segments stack from the bottom without gap or overlap,
        /// and the largest column fills the chart.
        #[test]
        fn segments_stay_inside_the_chart(
            columns in proptest::collection::vec(
                proptest::collection::vec(any::<i64>(), 0..=SERIES),
                0..40,
            )
        ) {
            let input: Vec<_> = columns
                .iter()
                .map(|v| (String::new(), v.iter().map(|n| NanoUsd::from_nanos(*n)).collect()))
                .collect();
            let chart = stacked(&input);
            prop_assert_eq!(chart.columns.len(), columns.len());
            let mut tallest = 0;
            for (c, values) in chart.columns.iter().zip(&columns) {
                let mut bottom = HEIGHT;
                for s in &c.segments {
                    prop_assert!(s.height >= 1);
                    prop_assert_eq!(s.y + s.height, bottom, "stacked without gap or overlap");
                    prop_assert!(s.series < values.len());
                    bottom = s.y;
                }
                let height = HEIGHT - bottom;
                prop_assert!(height <= HEIGHT);
                if values.iter().all(|v| *v <= 0) {
                    prop_assert!(c.segments.is_empty(), "no spend: a stub only");
                }
                tallest = tallest.max(height);
            }
            let any = columns.iter().any(|v| v.iter().any(|n| *n > 0));
            prop_assert_eq!(tallest == HEIGHT, any);
        }
    }

    #[test]
    fn one_series_days() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap();
        let chart = daily(&[
            (day, NanoUsd::from_nanos(500_000_000), 1),
            (day, NanoUsd::ZERO, 0),
            (day, NanoUsd::from_nanos(1_000_000_000), 2),
        ]);
        let heights: Vec<u32> = chart
            .columns
            .iter()
            .map(|c| c.segments.iter().map(|s| s.height).sum())
            .collect();
        assert_eq!(heights, vec![HEIGHT / 2, 0, HEIGHT]);
        assert_eq!(chart.columns[0].label, "Jan 1: 0.50 USD (exactly 0.5)");
        assert_eq!(chart.width(), 3 * SLOT as usize);
    }
}
