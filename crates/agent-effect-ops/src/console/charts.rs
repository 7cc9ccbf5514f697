//! Charts over a period of the event history, rendered server-side as SVG
//! with plotters: transitions per bucket by outcome, quarantine and
//! reconciliation rates, and the time from claim to confirmation.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use effect_core::{EffectLedger, LedgerEvent, event as e};
use plotters::prelude::*;

use crate::timestamp::parse_unix_micros;

/// The most events a chart reads: a longer period is cut at its end.
const MAX_EVENTS: usize = 200_000;
/// Buckets per chart.
const BUCKETS: usize = 60;

/// A chosen period, from the query string (`1h`, `6h`, `24h`, `7d`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Period {
    pub(crate) name: &'static str,
    pub(crate) length: Duration,
}

impl Period {
    pub(crate) const ALL: [Period; 4] = [
        Period {
            name: "1h",
            length: Duration::from_secs(3600),
        },
        Period {
            name: "6h",
            length: Duration::from_secs(6 * 3600),
        },
        Period {
            name: "24h",
            length: Duration::from_secs(86_400),
        },
        Period {
            name: "7d",
            length: Duration::from_secs(7 * 86_400),
        },
    ];

    pub(crate) fn parse(text: Option<&str>) -> Period {
        Period::ALL
            .into_iter()
            .find(|p| Some(p.name) == text)
            .unwrap_or(Period::ALL[0])
    }
}

/// Per bucket, what the charts plot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// The bucket's length in seconds.
    pub(crate) bucket_seconds: u64,
    pub(crate) confirmed: Vec<u64>,
    pub(crate) rejected: Vec<u64>,
    pub(crate) outcome_unknown: Vec<u64>,
    pub(crate) quarantined: Vec<u64>,
    pub(crate) dispatched: Vec<u64>,
    /// Uncertain outcomes settled without an operator.
    pub(crate) reconciled: Vec<u64>,
    /// Mean seconds from a dispatch claim to its confirmation, per bucket
    /// of the confirmation.
    pub(crate) claim_to_confirm: Vec<Option<f64>>,
    /// Events read.
    pub(crate) events: usize,
}

/// Reads the events of the period ending at `now` and counts them per bucket.
pub(crate) fn read(
    ledger: &dyn EffectLedger,
    period: Period,
    now: SystemTime,
) -> anyhow::Result<Series> {
    let end = micros(now);
    let start = end - i128::try_from(period.length.as_micros()).unwrap_or(i128::MAX);
    let bucket = (end - start) / BUCKETS as i128;
    let mut series = Series {
        bucket_seconds: u64::try_from(bucket / 1_000_000).unwrap_or(0),
        confirmed: vec![0; BUCKETS],
        rejected: vec![0; BUCKETS],
        outcome_unknown: vec![0; BUCKETS],
        quarantined: vec![0; BUCKETS],
        dispatched: vec![0; BUCKETS],
        reconciled: vec![0; BUCKETS],
        claim_to_confirm: vec![None; BUCKETS],
        events: 0,
    };
    let mut after = first_at_or_after(ledger, start)?;
    let mut last_type: HashMap<String, String> = HashMap::new();
    let mut claimed_at: HashMap<String, i128> = HashMap::new();
    let mut waits: Vec<(f64, u32)> = vec![(0.0, 0); BUCKETS];
    'read: loop {
        let page = ledger.events_after(after, 1000)?;
        for event in &page {
            after = event.sequence;
            series.events += 1;
            if series.events > MAX_EVENTS {
                break 'read;
            }
            let Some(at) = parse_unix_micros(&event.timestamp) else {
                continue;
            };
            if at < start || at > end {
                continue;
            }
            let index = usize::try_from((at - start) / bucket.max(1))
                .unwrap_or(0)
                .min(BUCKETS - 1);
            count(
                &mut series,
                event,
                index,
                at,
                &mut last_type,
                &mut claimed_at,
                &mut waits,
            );
        }
        if page.len() < 1000 {
            break;
        }
    }
    series.claim_to_confirm = waits
        .into_iter()
        .map(|(sum, n)| (n > 0).then(|| sum / f64::from(n)))
        .collect();
    Ok(series)
}

fn count(
    series: &mut Series,
    event: &LedgerEvent,
    index: usize,
    at: i128,
    last_type: &mut HashMap<String, String>,
    claimed_at: &mut HashMap<String, i128>,
    waits: &mut [(f64, u32)],
) {
    let previous = last_type.insert(event.operation_id.clone(), event.event_type.clone());
    let was_uncertain = matches!(previous.as_deref(), Some(e::OUTCOME_UNKNOWN));
    match event.event_type.as_str() {
        e::DISPATCHED => {
            series.dispatched[index] += 1;
            claimed_at.insert(event.operation_id.clone(), at);
        }
        e::CONFIRMED | e::MANUALLY_CONFIRMED => {
            series.confirmed[index] += 1;
            if was_uncertain && event.event_type == e::CONFIRMED {
                series.reconciled[index] += 1;
            }
            if let Some(claimed) = claimed_at.remove(&event.operation_id) {
                let seconds = (at - claimed) as f64 / 1e6;
                waits[index].0 += seconds;
                waits[index].1 += 1;
            }
        }
        e::REJECTED | e::MANUALLY_REJECTED | e::APPROVAL_DENIED => {
            series.rejected[index] += 1;
            if was_uncertain && event.event_type == e::REJECTED {
                series.reconciled[index] += 1;
            }
        }
        e::RETRY_AUTHORIZED if was_uncertain => series.reconciled[index] += 1,
        e::OUTCOME_UNKNOWN => series.outcome_unknown[index] += 1,
        e::QUARANTINED => series.quarantined[index] += 1,
        _ => {}
    }
}

/// The sequence to read after so as to start at the first event stamped at
/// or after `start`: a bisection over the cursor (timestamps follow the
/// sequence closely; a writer's skew moves the start by a few events).
fn first_at_or_after(ledger: &dyn EffectLedger, start: i128) -> anyhow::Result<u64> {
    let head = crate::console::live::head(ledger)?;
    let (mut low, mut high) = (0_u64, head);
    while low < high {
        let middle = low + (high - low) / 2;
        match ledger.events_after(middle, 1)?.first() {
            Some(event) if parse_unix_micros(&event.timestamp).is_some_and(|at| at < start) => {
                low = event.sequence.min(high);
            }
            _ => high = middle,
        }
    }
    Ok(low)
}

fn micros(at: SystemTime) -> i128 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i128::try_from(d.as_micros()).unwrap_or(i128::MAX))
        .unwrap_or(0)
}

/// The charts, by name.
pub(crate) const CHARTS: [(&str, &str); 3] = [
    ("transitions", "Transitions per bucket, by outcome"),
    ("rates", "Quarantine and reconciliation rates (%)"),
    (
        "claim-to-confirm",
        "Mean seconds from claim to confirmation",
    ),
];

/// One chart as an SVG document.
pub(crate) fn svg(name: &str, series: &Series) -> Option<String> {
    let mut out = String::new();
    let x = format!(
        "buckets of {}, oldest left",
        crate::console::pages::age(series.bucket_seconds)
    );
    let drawn = match name {
        "transitions" => lines(
            &mut out,
            &x,
            &[
                ("confirmed", &as_f64(&series.confirmed), GREEN),
                ("rejected", &as_f64(&series.rejected), BLACK),
                ("outcome unknown", &as_f64(&series.outcome_unknown), MAGENTA),
                ("quarantined", &as_f64(&series.quarantined), RED),
            ],
        ),
        "rates" => {
            let rate = |part: &[u64], whole: &[u64]| -> Vec<f64> {
                part.iter()
                    .zip(whole)
                    .map(|(p, w)| {
                        if *w == 0 {
                            0.0
                        } else {
                            100.0 * *p as f64 / *w as f64
                        }
                    })
                    .collect()
            };
            lines(
                &mut out,
                &x,
                &[
                    (
                        "quarantined per dispatch",
                        &rate(&series.quarantined, &series.dispatched),
                        RED,
                    ),
                    (
                        "uncertain outcomes reconciled",
                        &rate(&series.reconciled, &series.outcome_unknown),
                        BLUE,
                    ),
                ],
            )
        }
        "claim-to-confirm" => lines(
            &mut out,
            &x,
            &[(
                "seconds",
                &series
                    .claim_to_confirm
                    .iter()
                    .map(|v| v.unwrap_or(0.0))
                    .collect::<Vec<_>>(),
                BLUE,
            )],
        ),
        _ => return None,
    };
    drawn.ok().map(|()| out)
}

fn as_f64(values: &[u64]) -> Vec<f64> {
    values.iter().map(|v| *v as f64).collect()
}

/// A line chart of `series` over the buckets, as SVG into `out`.
fn lines(
    out: &mut String,
    x_desc: &str,
    series: &[(&str, &Vec<f64>, RGBColor)],
) -> Result<(), Box<dyn std::error::Error>> {
    let top = series
        .iter()
        .flat_map(|(_, values, _)| values.iter().copied())
        .fold(1.0_f64, f64::max)
        * 1.1;
    let root = SVGBackend::with_string(out, (760, 260)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .margin(10)
        .x_label_area_size(24)
        .y_label_area_size(44)
        .build_cartesian_2d(0..BUCKETS, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .light_line_style(WHITE)
        .draw()?;
    for (label, values, color) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(
                values.iter().enumerate().map(|(i, v)| (i, *v)),
                color.stroke_width(2),
            ))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
