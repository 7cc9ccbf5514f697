//! The server's timeline: which history of the database a connection writes
//! to. PostgreSQL starts a new timeline when a standby is promoted, so the
//! promoted server is on a later timeline than the primary it replaced. A
//! ledger remembers the latest timeline its connections found, counts the
//! changes (failovers it lived through), and refuses a new connection to a
//! server on an earlier one: a primary that was failed over from and is
//! still reachable (not fenced, or the address moved back), whose writes the
//! promoted server will never have.
//!
//! The timeline is read from the name of the WAL segment being written
//! (`pg_walfile_name(pg_current_wal_lsn())`, whose first eight hex digits
//! are the timeline), which any role may call. A standby (in recovery) has
//! no current WAL position and is not checked.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The query a new connection runs: the WAL segment's name, or NULL on a standby.
pub(crate) const TIMELINE_QUERY: &str = "SELECT CASE WHEN pg_is_in_recovery() THEN NULL \
     ELSE pg_walfile_name(pg_current_wal_lsn()) END";

/// What a ledger's connections saw of the server's timelines.
#[derive(Debug, Default)]
pub(crate) struct Timelines {
    /// The latest timeline seen (0: none yet).
    latest: AtomicU32,
    changes: AtomicU64,
    refused: AtomicU64,
}

/// A new connection reached a server on an earlier timeline than the ledger
/// already wrote on.
#[derive(Debug, thiserror::Error)]
#[error(
    "the server is on timeline {found}, behind timeline {latest} this ledger already used: \
     it is a primary that was failed over from; fence it and point the ledger at the promoted server"
)]
pub(crate) struct StaleServer {
    pub(crate) found: u32,
    pub(crate) latest: u32,
}

impl Timelines {
    /// Admits a connection to a server on `timeline`, or refuses it.
    pub(crate) fn admit(&self, timeline: u32) -> Result<(), StaleServer> {
        let latest = self.latest.fetch_max(timeline, Ordering::SeqCst);
        if timeline < latest {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(StaleServer {
                found: timeline,
                latest,
            });
        }
        if latest != 0 && timeline > latest {
            self.changes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The latest timeline seen, if any.
    pub(crate) fn latest(&self) -> Option<u32> {
        Some(self.latest.load(Ordering::SeqCst)).filter(|t| *t != 0)
    }

    /// How many times a connection found a later timeline than the ones before.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// How many connections were refused for an earlier timeline.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

/// The timeline in a WAL segment's name (`0000000F000000000000001F` is 15).
pub(crate) fn parse(walfile: &str) -> Option<u32> {
    u32::from_str_radix(walfile.get(..8)?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeline_is_the_segment_names_first_eight_hex_digits() {
        assert_eq!(parse("0000000F000000000000001F"), Some(15));
        assert_eq!(parse("000000010000000000000003"), Some(1));
        assert_eq!(parse("0000000"), None);
        assert_eq!(parse("zzzzzzzz0000000000000003"), None);
    }

    #[test]
    fn a_later_timeline_is_a_change_and_an_earlier_one_is_refused() {
        let timelines = Timelines::default();
        assert_eq!(timelines.latest(), None);
        assert!(timelines.admit(1).is_ok());
        assert!(timelines.admit(1).is_ok(), "the same server again");
        assert_eq!(timelines.changes(), 0, "the first timeline is no change");
        assert!(timelines.admit(2).is_ok(), "a promoted server");
        assert_eq!((timelines.latest(), timelines.changes()), (Some(2), 1));
        let stale = timelines.admit(1).expect_err("the old primary is refused");
        assert_eq!((stale.found, stale.latest), (1, 2));
        assert!(stale.to_string().contains("timeline 1, behind timeline 2"));
        assert_eq!((timelines.latest(), timelines.refused()), (Some(2), 1));
    }
}
