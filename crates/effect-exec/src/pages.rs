//! [`Pages`]: a listing read a page at a time while its operations are
//! worked on, so a pass holds a page per listing, never the whole ledger.
//!
//! A listing is ordered newest update first, and working on an operation
//! moves it to the front (or out of the listing). A cursor on an operation
//! already worked on would therefore jump back to the front and list the
//! others again. So the last operation of each full page is held back,
//! untouched, as the cursor of the next page, and handed out only once that
//! page is read. Every operation the listing held when its first page was
//! read, and that nobody else changed meanwhile, is handed out exactly once;
//! one that this pass moved into the listing (or another writer changed)
//! sorts in front of the cursor and waits for the next pass.

use std::collections::VecDeque;

use effect_core::{EffectLedger, EffectRecord, LedgerErrorKind, ListQuery};

use crate::error::ExecError;

/// The default page size of a [`RecoveryWorker`](crate::RecoveryWorker)'s
/// and a [`Sweeper`](crate::Sweeper)'s listings.
pub const DEFAULT_PAGE_SIZE: usize = 250;

/// One listing, read page by page.
pub(crate) struct Pages<'a> {
    ledger: &'a dyn EffectLedger,
    query: ListQuery,
    page: VecDeque<EffectRecord>,
    /// The last operation of the last full page, not handed out yet: the
    /// cursor of the next page.
    held: Option<EffectRecord>,
    /// Pages read so far.
    pub(crate) read: u64,
}

impl<'a> Pages<'a> {
    /// Reads the first page of `query` now.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] when the ledger cannot list it.
    pub(crate) fn first(ledger: &'a dyn EffectLedger, query: ListQuery) -> Result<Self, ExecError> {
        let page = ledger
            .list(&query)
            .map_err(|source| ExecError::ledger("(listing operations)", source))?;
        let mut pages = Pages {
            ledger,
            query,
            page: VecDeque::new(),
            held: None,
            read: 1,
        };
        pages.take(page);
        Ok(pages)
    }

    /// The next operation of the listing, `None` at its end.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] when the next page cannot be read; the listing
    /// then ends for this pass.
    pub(crate) fn next_record(&mut self) -> Result<Option<EffectRecord>, ExecError> {
        if let Some(record) = self.page.pop_front() {
            return Ok(Some(record));
        }
        let Some(held) = self.held.take() else {
            return Ok(None);
        };
        let query = self.query.clone().after(held.operation_id.clone());
        match self.ledger.list(&query) {
            Ok(page) => {
                self.read += 1;
                self.take(page);
            }
            // The cursor left the ledger (pruned meanwhile): the rest of
            // the listing waits for the next pass.
            Err(err) if err.kind() == LedgerErrorKind::InvalidInput => {
                tracing::info!(cursor = held.operation_id, error = %err, "listing cursor gone; the rest waits for the next pass");
            }
            Err(source) => return Err(ExecError::ledger("(listing operations)", source)),
        }
        Ok(Some(held))
    }

    fn take(&mut self, mut page: Vec<EffectRecord>) {
        if page.len() >= self.query.limit {
            self.held = page.pop();
        }
        self.page.extend(page);
    }
}
