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

    /// `<prefix>-<claim number>`, written into one buffer (one per claim).
    pub(crate) fn next(&self) -> String {
        let claim = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        let mut rest = claim;
        loop {
            start -= 1;
            // A remainder below ten: the cast cannot truncate.
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        let mut token = String::with_capacity(self.prefix.len() + 1 + digits.len() - start);
        token.push_str(&self.prefix);
        token.push('-');
        token.extend(digits[start..].iter().map(|&digit| char::from(digit)));
        token
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
        assert_eq!(a1, format!("{prefix}-1"));
        assert_eq!(a2, format!("{prefix}-2"));
        // Past one digit, and at the counter's end.
        for _ in 2..1234 {
            a.next();
        }
        assert_eq!(a.next(), format!("{prefix}-1235"));
        a.counter.store(u64::MAX - 1, Ordering::Relaxed);
        assert_eq!(a.next(), format!("{prefix}-{}", u64::MAX));
        assert_eq!(prefix.len(), 32);
        assert!(prefix.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
