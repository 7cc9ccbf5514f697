use serde::Serialize;
use serde_json::{Value, json};

use super::*;
use effect_core::Redaction;
use effect_core::RequestFingerprint;
use effect_core::canonical::to_json_value;
use effect_core::secret::{REDACTED, Secret, reveal};

#[derive(Serialize)]
struct Capture {
    invoice_id: String,
    card: Secret<Card>,
    note: String,
}

#[derive(Serialize)]
struct Card {
    number: String,
    cvv: u32,
}

fn capture(number: &str) -> Capture {
    Capture {
        invoice_id: "INV-1".into(),
        card: Secret::new(Card {
            number: number.into(),
            cvv: 737,
        }),
        note: "leave at door".into(),
    }
}

/// The revealed and redacted arguments, as the executor will derive them.
fn pair<T: Serialize>(args: &T, redaction: &Redaction) -> (Value, Value) {
    let revealed = reveal(|| to_json_value(args)).expect("storable");
    let redacted = redaction.apply(&to_json_value(args).expect("storable"));
    (revealed, redacted)
}

#[test]
fn the_redactor_collects_the_leaves_of_every_redacted_place() {
    let (revealed, redacted) = pair(&capture("4111111111111111"), &Redaction::default());
    let redactor = Redactor::new(&revealed, &redacted);
    assert_eq!(redactor.len(), 2, "{redactor:?}");
    assert_eq!(format!("{redactor:?}"), "Redactor { secrets: 2 }");

    let out = redactor.scrub_value(&json!({
        "message": "card 4111111111111111 declined (cvv 737)",
        "cvv": 737,
        "cvv_text": "737",
        "amount": 737.5,
        "4111111111111111": {"nested": ["x4111111111111111x"]},
        "ok": true,
    }));
    assert_eq!(
        out,
        json!({
            // A 3-digit secret is not searched for inside text.
            "message": "card [redacted] declined (cvv 737)",
            "cvv": REDACTED,
            "cvv_text": REDACTED,
            "amount": 737.5,
            REDACTED: {"nested": ["x[redacted]x"]},
            "ok": true,
        })
    );
    assert!(!out.to_string().contains("4111111111111111"));
}

#[test]
fn path_redaction_and_secrets_combine() {
    let redaction = Redaction::new(["/note"]).expect("valid paths");
    let (revealed, redacted) = pair(&capture("4111111111111111"), &redaction);
    assert_eq!(
        redacted,
        json!({"invoice_id": "INV-1", "card": REDACTED, "note": REDACTED})
    );
    let redactor = Redactor::new(&revealed, &redacted);
    assert_eq!(redactor.len(), 3);
    assert_eq!(
        redactor.scrub_str("leave at door, card 4111111111111111"),
        "[redacted], card [redacted]"
    );
}

#[test]
fn scrubbing_replaces_the_longest_secret_and_never_rescans() {
    let revealed = json!({"a": "abcd", "b": "abcdefgh", "c": "dac]"});
    let redacted = json!({"a": REDACTED, "b": REDACTED, "c": REDACTED});
    let redactor = Redactor::new(&revealed, &redacted);
    assert_eq!(
        redactor.scrub_str("xabcdefghx abcd"),
        "x[redacted]x [redacted]"
    );
    // The marker that replaced one secret is not searched for another.
    assert_eq!(redactor.scrub_str("abcd"), REDACTED);
    assert_eq!(redactor.scrub_str("nothing here"), "nothing here");
}

#[test]
fn no_secrets_means_nothing_changes() {
    let args = json!({"invoice_id": "INV-1", "note": REDACTED});
    // The caller's own argument is the marker text: no secret is behind it.
    let redactor = Redactor::new(&args, &args);
    assert!(redactor.is_empty());
    let evidence = json!({"invoice_id": "INV-1"});
    assert_eq!(redactor.scrub_value(&evidence), evidence);
    assert_eq!(fingerprint_view(&args, &args, None), args);
}

#[test]
fn the_fingerprint_view_changes_with_the_secret_and_hides_it() {
    let none = Redaction::default();
    let (revealed_a, redacted_a) = pair(&capture("4111111111111111"), &none);
    let (revealed_b, redacted_b) = pair(&capture("4242424242424242"), &none);
    assert_eq!(redacted_a, redacted_b);

    let key = FingerprintKey::from_bytes([3; 32]);
    for key in [None, Some(&key)] {
        let view_a = fingerprint_view(&revealed_a, &redacted_a, key);
        let view_b = fingerprint_view(&revealed_b, &redacted_b, key);
        assert_ne!(view_a, view_b, "keyed: {}", key.is_some());
        assert_ne!(
            RequestFingerprint::of_value(&view_a),
            RequestFingerprint::of_value(&view_b)
        );
        // The same arguments give the same view: a retry is no conflict.
        assert_eq!(view_a, fingerprint_view(&revealed_a, &redacted_a, key));
        let text = view_a.to_string();
        assert!(
            !text.contains("4111111111111111") && !text.contains("737"),
            "{text}"
        );
        assert_eq!(view_a["invoice_id"], "INV-1");
        assert!(
            view_a["card"][SECRET_DIGEST]
                .as_str()
                .is_some_and(|h| h.len() == 64)
        );
    }
    // Keyed and unkeyed digests differ, and so do two keys.
    let unkeyed = fingerprint_view(&revealed_a, &redacted_a, None);
    let keyed = fingerprint_view(&revealed_a, &redacted_a, Some(&key));
    let other = FingerprintKey::from_bytes([4; 32]);
    assert_ne!(unkeyed, keyed);
    assert_ne!(
        keyed,
        fingerprint_view(&revealed_a, &redacted_a, Some(&other))
    );
}

#[test]
fn protected_fields_report_redacted_and_sealed_places() -> Result<(), Box<dyn std::error::Error>> {
    let keyring = Keyring::new("k1", SealingKey::from_bytes([5; 32]))?;
    let stored = json!({
        "args": {"card": REDACTED, "items": [{"sku": "x"}, {"sku": REDACTED}]},
        "output": keyring.seal(&json!({"receipt": "r-1"}), "op-1")?,
        "a/b": REDACTED,
        "plain": "text",
    });
    let fields = protected_fields(&stored);
    let summary: Vec<(String, String)> = fields
        .iter()
        .map(|field| {
            let shown = match &field.protection {
                Protection::Redacted => "redacted".to_owned(),
                Protection::Sealed(info) => info.to_string(),
            };
            (field.pointer.clone(), shown)
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("/args/card".to_owned(), "redacted".to_owned()),
            ("/args/items/1/sku".to_owned(), "redacted".to_owned()),
            ("/a~1b".to_owned(), "redacted".to_owned()),
            ("/output".to_owned(), "sealed (key k1)".to_owned()),
        ]
    );
    assert!(protected_fields(&json!({"plain": 1})).is_empty());
    Ok(())
}
