use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::{
    EffectLedger, EffectLedgerExt, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    MemoryLedger, NewOperation, RequestFingerprint, Transition, TransitionOutcome, WriteDurability,
};

use super::{EXPORT_PAGE, export};
use crate::cli::{Format, Since};
use crate::printer::Printer;

/// A memory ledger that counts the pages of events read from it.
#[derive(Debug)]
struct Counted {
    inner: MemoryLedger,
    pages: Arc<AtomicUsize>,
}

impl EffectLedger for Counted {
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.inner.apply_with(operation_id, transition, durability)
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        self.inner.get(operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        self.inner.list(query)
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.inner.events(operation_id)
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        self.pages.fetch_add(1, Ordering::SeqCst);
        self.inner.events_after(after, limit)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        self.inner.stats()
    }
}

/// Output that records how many pages had been read at each write.
struct Watched {
    text: Rc<RefCell<Vec<u8>>>,
    pages_at_write: Rc<RefCell<Vec<usize>>>,
    pages: Arc<AtomicUsize>,
}

impl Write for Watched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.borrow_mut().extend_from_slice(buf);
        self.pages_at_write
            .borrow_mut()
            .push(self.pages.load(Ordering::SeqCst));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A ledger of `operations` prepared operations, one event each.
fn ledger(operations: usize) -> Counted {
    let inner = MemoryLedger::new();
    for i in 0..operations {
        let op = NewOperation::new(
            "capture_payment",
            "1",
            RequestFingerprint::of_value(&serde_json::json!({ "i": i })),
        );
        inner.prepare(&format!("op-{i:05}"), &op).unwrap();
    }
    Counted {
        inner,
        pages: Arc::default(),
    }
}

/// Exports `ledger` in `format`: the text, and how many pages had been read
/// at each write.
fn run(ledger: &Counted, format: Format) -> (String, Vec<usize>) {
    let text = Rc::default();
    let pages_at_write = Rc::default();
    let mut out = Watched {
        text: Rc::clone(&text),
        pages_at_write: Rc::clone(&pages_at_write),
        pages: Arc::clone(&ledger.pages),
    };
    ledger.pages.store(0, Ordering::SeqCst);
    let mut printer = Printer::new(&mut out, format);
    export(ledger, Since::Sequence(0), &mut printer).unwrap();
    let text = String::from_utf8(text.take()).unwrap();
    (text, pages_at_write.take())
}

#[test]
fn export_writes_each_page_before_it_reads_the_next() {
    let events = 2 * EXPORT_PAGE + 500;
    let ledger = ledger(events);

    let (json, writes) = run(&ledger, Format::Json);
    let sequences: Vec<u64> = json
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).unwrap()["sequence"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sequences.len(), events, "every event once");
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "in sequence order"
    );
    // Three pages, each written as soon as it was read.
    assert_eq!(ledger.pages.load(Ordering::SeqCst), 3);
    assert_eq!(writes, [1, 2, 3]);

    let (table, writes) = run(&ledger, Format::Table);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + events, "one header, one line per event");
    assert!(lines[0].starts_with("SEQUENCE"), "{}", lines[0]);
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("SEQUENCE")).count(),
        1
    );
    assert_eq!(writes, [1, 2, 3]);
}

#[test]
fn an_empty_export_says_so_as_a_table_and_writes_nothing_as_json() {
    let ledger = ledger(0);
    assert_eq!(run(&ledger, Format::Json).0, "");
    assert_eq!(run(&ledger, Format::Table).0, "no events\n");
    // A ledger of exactly one page reads a second, empty one.
    let ledger = self::ledger(EXPORT_PAGE);
    let (json, writes) = run(&ledger, Format::Json);
    assert_eq!(json.lines().count(), EXPORT_PAGE);
    assert_eq!(writes, [1]);
    assert_eq!(ledger.pages.load(Ordering::SeqCst), 2);
}
