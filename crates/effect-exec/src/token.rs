//! Owner tokens: who holds a dispatch lease.

use std::sync::atomic::{AtomicU64, Ordering};

/// Owner tokens of one executor: a random prefix, then a claim counter.
///
/// The prefix is a UUID v4, 122 random bits from the operating system.
/// A prefix derived from the process id and the time would collide between
/// containers (every process is pid 1) started in the same instant, and a
/// shared PostgreSQL ledger would then let one host finalize another's
/// dispatch.
#[derive(Debug)]
pub(crate) struct TokenSource {
    prefix: String,
    counter: AtomicU64,
}

impl TokenSource {
    pub(crate) fn new() -> Self {
        TokenSource {
            prefix: uuid::Uuid::new_v4().simple().to_string(),
            counter: AtomicU64::new(0),
        }
    }

    pub(crate) fn next(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.counter.fetch_add(1, Ordering::Relaxed) + 1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_per_source_and_unique_per_claim() {
        let a = TokenSource::new();
        let b = TokenSource::new();
        let (a1, a2, b1) = (a.next(), a.next(), b.next());
        assert_ne!(a1, a2);
        assert_ne!(a1, b1, "two executors never share a prefix");
        let prefix = a1.split('-').next().unwrap_or_default();
        assert_eq!(prefix.len(), 32);
        assert!(prefix.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
