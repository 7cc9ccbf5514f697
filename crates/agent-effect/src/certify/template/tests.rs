use serde_json::json;

use super::*;

#[test]
fn templates_fill_in_arguments_and_the_key() {
    let args = json!({"invoice_id": "INV 1/2", "amount": 5, "nested": {"a": 1}});
    let id = Template::plain("invoice:{invoice_id}:{amount}").unwrap();
    assert_eq!(id.render(&args, None).unwrap(), "invoice:INV 1/2:5");
    let url = Template::url("http://h/v1/charges/by-key/{key}?i={invoice_id}").unwrap();
    assert_eq!(
        url.render(&args, Some("capture:INV")).unwrap(),
        "http://h/v1/charges/by-key/capture%3AINV?i=INV%201%2F2"
    );
    assert_eq!(url.names(), ["key", "invoice_id"]);
    assert!(
        id.render(&json!({}), None)
            .unwrap_err()
            .contains("\"invoice_id\"")
    );
    assert!(
        Template::plain("x:{nested}")
            .unwrap()
            .render(&args, None)
            .is_err()
    );
    assert!(Template::plain("x:{oops").is_err());
    assert!(Template::plain("x:{}").is_err());
}

#[test]
fn counts_are_read_from_numbers_arrays_and_lists() {
    assert_eq!(count_of(&json!(2)), Ok(2));
    assert_eq!(count_of(&json!([1, 2, 3])), Ok(3));
    assert_eq!(count_of(&json!({"count": 1})), Ok(1));
    assert_eq!(
        count_of(&json!({"object": "list", "data": [{}, {}]})),
        Ok(2)
    );
    assert!(count_of(&json!({"found": true})).is_err());
    assert!(count_of(&json!(-1)).is_err());
}
