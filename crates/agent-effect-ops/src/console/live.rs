//! Live refresh: one poller follows the ledger's event cursor
//! (`events_after`) and every `/live` stream (server-sent events) is told
//! the newest sequence, so pages refresh within a second of a transition
//! written by any process or host.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use effect_core::EffectLedger;
use futures_util::Stream;
use tokio::sync::watch;

use crate::console::Console;

/// How often the poller asks the ledger for new events.
const POLL: Duration = Duration::from_millis(250);

/// The highest event sequence in the ledger (0 for none), found with
/// `events_after(n, 1)` probes: O(log n) index reads, never a scan.
pub(crate) fn head(ledger: &dyn EffectLedger) -> anyhow::Result<u64> {
    let exists_after =
        |n: u64| -> anyhow::Result<bool> { Ok(!ledger.events_after(n, 1)?.is_empty()) };
    if !exists_after(0)? {
        return Ok(0);
    }
    // Gallop to a bound with nothing after it, then bisect.
    let mut low = 0;
    let mut high = 1;
    while exists_after(high)? {
        low = high;
        high = high.saturating_mul(2);
        if high == u64::MAX {
            break;
        }
    }
    // Invariant: something after `low`, nothing after `high`.
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if exists_after(middle)? {
            low = middle;
        } else {
            high = middle;
        }
    }
    Ok(high)
}

/// The receiver of the newest sequence (`None` until the poller's first
/// read), starting the poller on first use.
pub(crate) fn subscribe(console: &Console) -> watch::Receiver<Option<u64>> {
    let inner = &console.inner;
    let sender = inner.live.get_or_init(|| {
        let (sender, _) = watch::channel(None);
        let poller = console.clone();
        let tx = sender.clone();
        tokio::spawn(async move { poll(poller, tx).await });
        sender
    });
    sender.subscribe()
}

async fn poll(console: Console, sender: watch::Sender<Option<u64>>) {
    let mut after = None;
    loop {
        let last = after;
        let read = console
            .read(move |console| {
                let ledger = console.inner.opened.ledger();
                let mut head = match last {
                    Some(head) => head,
                    None => return head(ledger).map(Some),
                };
                loop {
                    let page = ledger.events_after(head, 1000)?;
                    match page.last() {
                        Some(event) => head = event.sequence,
                        None => break,
                    }
                    if page.len() < 1000 {
                        break;
                    }
                }
                Ok(Some(head))
            })
            .await;
        // A failed read is retried on the next tick; the pages say so
        // themselves when they cannot read the ledger.
        if let Ok(Some(head)) = read {
            if after.is_none_or(|seen| head > seen) {
                sender.send_replace(Some(head));
            }
            after = Some(head);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `/live`: an event `ledger` carrying the newest sequence, first on
/// connecting (so a page reconnecting after a drop refreshes what it may
/// have missed) and then after each change.
pub(crate) fn stream(
    console: &Console,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let mut receiver = subscribe(console);
    receiver.mark_changed();
    let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let sequence = loop {
            receiver.changed().await.ok()?;
            if let Some(sequence) = *receiver.borrow_and_update() {
                break sequence;
            }
        };
        Some((
            Ok(Event::default().event("ledger").data(sequence.to_string())),
            receiver,
        ))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
