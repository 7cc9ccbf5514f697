//! Property: over random fault schedules, the guarantee holds.

use proptest::prelude::*;

use effect_core::EffectStatus;

use crate::provider::{
    BOTH, FakeProvider, Fault, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, ProbeAnswer, Variant,
    contract, handler, invoice,
};
use crate::{executor, ledger};

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::None),
        Just(Fault::BeforeCommit),
        Just(Fault::AfterCommit),
        Just(Fault::Reject),
    ]
}

fn probe_answer() -> impl Strategy<Value = ProbeAnswer> {
    prop_oneof![
        Just(ProbeAnswer::Lookup),
        Just(ProbeAnswer::Pending),
        Just(ProbeAnswer::Unknown),
        Just(ProbeAnswer::Fail),
    ]
}

fn variant() -> impl Strategy<Value = (Variant, &'static str)> {
    prop_oneof![
        Just((PROBE_ONLY, "probe")),
        Just((GUARANTEED_ONLY, "guaranteed")),
        Just((BOTH, "both")),
        Just((NEITHER, "neither")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn at_most_one_effect_and_no_blind_retry(
        (variant, name) in variant(),
        faults in prop::collection::vec(fault(), 0..4),
        answers in prop::collection::vec(probe_answer(), 0..4),
        executions in 1usize..4,
    ) {
        // A guaranteed key is honest only against a provider that dedups by key.
        let provider = FakeProvider::new(variant.guaranteed)
            .script(&faults)
            .probe_script(&answers);
        let ledger = ledger();
        let exec = executor(&ledger);
        let c = contract(&provider, variant);
        let mut calls_when_uncertain = None;
        for _ in 0..executions {
            let result = exec.execute(&c, &invoice("P-1"), handler(&provider)).unwrap();
            if result.status == EffectStatus::Confirmed {
                prop_assert!(result.output.is_some(), "confirmed without a stored output");
            }
            if result.status.is_uncertain() && calls_when_uncertain.is_none() {
                calls_when_uncertain = Some(provider.handler_calls());
            }
        }
        prop_assert!(provider.committed() <= 1, "{name}: {} effects", provider.committed());
        if let (true, Some(calls)) = (name == "neither", calls_when_uncertain) {
            prop_assert_eq!(provider.handler_calls(), calls, "uncertain operation dispatched again");
        }
    }
}
