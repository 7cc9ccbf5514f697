use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Capture {
    invoice_id: String,
    card: Secret<Card>,
    cvv: Secret<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Card {
    number: String,
    expiry: String,
}

fn capture() -> Capture {
    Capture {
        invoice_id: "INV-1".into(),
        card: Secret::new(Card {
            number: "4111111111111111".into(),
            expiry: "12/30".into(),
        }),
        cvv: Secret::new(737),
    }
}

#[test]
fn secret_fields_serialize_as_the_marker_outside_reveal() -> Result<(), serde_json::Error> {
    let args = capture();
    let value = serde_json::to_value(&args)?;
    assert_eq!(
        value,
        json!({"invoice_id": "INV-1", "card": REDACTED, "cvv": REDACTED})
    );
    let text = serde_json::to_string(&args)?;
    assert!(!text.contains("4111"), "{text}");
    assert!(!text.contains("737"), "{text}");
    // The executor's own conversion redacts the same way.
    assert_eq!(crate::canonical::to_json_value(&args).ok(), Some(value));
    Ok(())
}

#[test]
fn secret_fields_serialize_as_their_value_inside_reveal() -> Result<(), serde_json::Error> {
    let args = capture();
    let value = reveal(|| serde_json::to_value(&args))?;
    assert_eq!(
        value,
        json!({
            "invoice_id": "INV-1",
            "card": {"number": "4111111111111111", "expiry": "12/30"},
            "cvv": 737,
        })
    );
    // And the revealed arguments deserialize back into the same value.
    assert_eq!(serde_json::from_value::<Capture>(value)?, args);
    assert!(!is_revealing());
    Ok(())
}

#[test]
fn nested_reveal_scopes_restore_the_outer_state() -> Result<(), serde_json::Error> {
    let secret = Secret::new("tok_4242");
    let (inner, after_inner) = reveal(|| {
        let inner = reveal(|| serde_json::to_string(&secret));
        (inner, serde_json::to_string(&secret))
    });
    assert_eq!(inner?, r#""tok_4242""#);
    // Closing the inner scope does not close the outer one.
    assert_eq!(after_inner?, r#""tok_4242""#);
    assert_eq!(serde_json::to_string(&secret)?, r#""[redacted]""#);
    Ok(())
}

#[test]
fn a_panic_inside_reveal_closes_the_scope() -> Result<(), serde_json::Error> {
    let secret = Secret::new("tok_4242");
    let unwound = std::panic::catch_unwind(|| {
        reveal(|| {
            assert!(is_revealing());
            panic!("handler failed while revealing");
        })
    });
    assert!(unwound.is_err());
    assert!(!is_revealing());
    assert_eq!(serde_json::to_string(&secret)?, r#""[redacted]""#);
    // A nested scope unwound through restores the outer one, not zero.
    reveal(|| {
        let inner = std::panic::catch_unwind(|| reveal(|| panic!("inner")));
        assert!(inner.is_err());
        assert!(is_revealing());
    });
    assert!(!is_revealing());
    Ok(())
}

#[test]
fn reveal_does_not_reach_other_threads() -> Result<(), Box<dyn std::error::Error>> {
    let secret = Secret::new(String::from("tok_4242"));
    let on_other_thread = reveal(|| {
        std::thread::scope(|scope| scope.spawn(|| serde_json::to_string(&secret)).join())
    });
    let on_other_thread = on_other_thread.map_err(|_| "thread panicked")??;
    assert_eq!(on_other_thread, r#""[redacted]""#);
    Ok(())
}

#[test]
fn deserializing_the_marker_is_refused_with_a_clear_message() {
    let stored = json!({"invoice_id": "INV-1", "card": REDACTED, "cvv": REDACTED});
    let err = serde_json::from_value::<Capture>(stored).unwrap_err();
    assert!(err.to_string().contains(REDACTED_SECRET_REFUSED), "{err}");

    // The same for a secret whose type is not a string.
    let err = serde_json::from_value::<Secret<u32>>(json!(REDACTED)).unwrap_err();
    assert_eq!(err.to_string(), REDACTED_SECRET_REFUSED);
    let err = serde_json::from_str::<Secret<String>>(r#""[redacted]""#).unwrap_err();
    assert!(err.to_string().contains(REDACTED_SECRET_REFUSED), "{err}");
}

#[test]
fn deserializing_a_real_value_keeps_the_inner_type_errors() -> Result<(), serde_json::Error> {
    let token: Secret<String> = serde_json::from_str(r#""tok_4242""#)?;
    assert_eq!(token.expose(), "tok_4242");
    let err = serde_json::from_value::<Secret<u32>>(json!("seven")).unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
    Ok(())
}

#[test]
fn debug_and_display_never_print_the_value() {
    let args = capture();
    let debug = format!("{args:?} {args:#?}");
    assert!(!debug.contains("4111") && !debug.contains("737"), "{debug}");
    assert!(debug.contains(REDACTED));
    assert_eq!(Secret::new(42).to_string(), REDACTED);
}

#[test]
fn clone_and_equality_follow_the_inner_value() {
    let a = Secret::new(String::from("tok_1"));
    assert_eq!(a.clone(), a);
    assert_ne!(a, Secret::from(String::from("tok_2")));
    assert_eq!(Secret::<u8>::default().into_inner(), 0);
}

#[test]
fn is_redacted_recognises_only_the_marker() {
    assert!(is_redacted(&json!("[redacted]")));
    assert!(!is_redacted(&json!("[REDACTED]")));
    assert!(!is_redacted(&json!(["[redacted]"])));
}
