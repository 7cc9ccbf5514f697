use serde_json::json;

use super::*;

/// What the conversion every output went through before gives.
fn converted<O: Serialize>(output: &O) -> Result<Value, CanonicalError> {
    to_json_value(output)
}

fn deep(levels: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..levels {
        value = json!([value]);
    }
    value
}

#[test]
fn a_value_output_is_taken_as_the_conversion_gives_it() {
    for value in [
        json!({"ok": 1, "b": [1.5, -0.0, "ü", null]}),
        json!(null),
        deep(effect_core::canonical::MAX_DEPTH),
    ] {
        let expected = converted(&value).map_err(|err| err.to_string());
        assert_eq!(output_value(value).map_err(|err| err.to_string()), expected);
    }
    // Too deep: the same error, with the same path.
    let too_deep = json!({"a": deep(70), "b": deep(80)});
    let expected = converted(&too_deep).map_err(|err| err.to_string());
    assert!(expected.is_err());
    assert_eq!(
        output_value(too_deep).map_err(|err| err.to_string()),
        expected
    );
}

#[test]
fn other_outputs_are_converted() {
    #[derive(Serialize)]
    struct Receipt {
        id: &'static str,
        amount: f64,
    }
    let receipt = Receipt {
        id: "r-1",
        amount: 2.5,
    };
    assert_eq!(
        output_value(receipt).map_err(|err| err.to_string()),
        Ok(json!({"id": "r-1", "amount": 2.5}))
    );
    let refused = output_value(vec![1.0, f64::NAN]).map_err(|err| err.to_string());
    assert_eq!(
        refused,
        converted(&vec![1.0, f64::NAN]).map_err(|err| err.to_string())
    );
    assert!(refused.is_err());
}
