//! The world most of these tests run in: a store on a manual clock, the fake
//! provider, and the executor and recovery worker over them. A test file adds
//! the helpers only it uses in its own `impl World` block.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use effect_core::{EffectLedger, EffectStatus, ManualClock, MemoryLedger};
use effect_exec::{EffectExecutor, ExecutorOptions, RecoveryWorker};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};

use crate::provider::{FakeProvider, handler};

/// Where every world's clock starts, in seconds after the Unix epoch:
/// 2027-01-15 08:00 UTC, sixteen hours before a daily budget window rolls
/// over.
pub const START: u64 = 1_800_000_000;

pub struct World {
    /// The store's name, for assertion messages.
    pub store: &'static str,
    pub clock: Arc<ManualClock>,
    pub ledger: Arc<dyn EffectLedger>,
    pub provider: Arc<FakeProvider>,
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(START),
    ))
}

/// A memory ledger on its own manual clock.
pub fn memory() -> World {
    let clock = clock();
    World {
        store: "memory",
        ledger: Arc::new(MemoryLedger::with_clock(clock.clone())),
        clock,
        provider: FakeProvider::new(false),
    }
}

/// A temporary SQLite ledger on its own manual clock.
pub fn sqlite() -> World {
    let clock = clock();
    let temp =
        SqliteLedger::open_temporary_with(SqliteOptions::default().clock(clock.clone())).unwrap();
    World {
        store: "sqlite",
        ledger: Arc::new(temp),
        clock,
        provider: FakeProvider::new(false),
    }
}

/// Both stores: the behaviour must not depend on the store.
pub fn worlds() -> [World; 2] {
    [memory(), sqlite()]
}

impl World {
    /// An executor on the world's clock, sleeping on it too.
    pub fn executor(&self) -> EffectExecutor {
        EffectExecutor::with_clock(
            Arc::clone(&self.ledger),
            ExecutorOptions::default(),
            self.clock.clone(),
        )
        .with_sleeper(self.clock.clone())
    }

    /// A worker on this world's executor with the provider's handler for
    /// `contract`, taking prepared operations at once.
    pub fn worker(&self, contract: &effect_core::EffectContract) -> RecoveryWorker {
        RecoveryWorker::new(self.executor())
            .register(contract.clone(), handler(&self.provider))
            .unwrap()
            .min_age(Duration::ZERO)
    }

    pub fn status(&self, id: &str) -> EffectStatus {
        self.ledger.get(id).unwrap().unwrap().status
    }

    pub fn event_types(&self, id: &str) -> Vec<String> {
        crate::event_types(&self.ledger, id)
    }
}
