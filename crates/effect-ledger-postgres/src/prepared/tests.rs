//! Statement names and the literals of an `EXECUTE`.

use postgres::types::{ToSql, Type};

use super::*;
use crate::schema::Schema;

fn prepared() -> Prepared {
    let schema = Schema::new("effect_ledger").expect("a valid schema name");
    Prepared::new(Statements::new(&schema), true)
}

/// The `EXECUTE` text for `params`, or `None` when they have no literals.
fn check(params: &[(&(dyn ToSql + Sync), Type)], expected: Option<&str>) {
    let mut out = String::new();
    let rendered = literal::execute(&mut out, "p", params).ok().map(|()| out);
    assert_eq!(rendered.as_deref(), expected);
}

#[test]
fn every_statement_has_its_own_place_and_name() {
    for (at, stmt) in Stmt::ALL.iter().enumerate() {
        assert_eq!(*stmt as usize, at, "{stmt:?} is at its place");
    }
    let mut names: Vec<&str> = Stmt::ALL.iter().map(|s| s.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Stmt::ALL.len());
    assert!(u32::try_from(Stmt::ALL.len()).is_ok_and(|n| n <= u32::BITS));
}

#[test]
fn every_ledger_has_names_of_its_own() {
    let (a, b) = (prepared(), prepared());
    let get = &a.names[Stmt::Get as usize];
    assert_ne!(get, &b.names[Stmt::Get as usize]);
    let nonce = get
        .strip_prefix("effect_")
        .and_then(|rest| rest.strip_suffix("_get"))
        .unwrap_or_default();
    assert_eq!(nonce.len(), 32);
    assert!(nonce.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(
        a.names.iter().all(|n| n.len() <= 63),
        "names fit NAMEDATALEN"
    );
}

#[test]
fn text_is_quoted_as_libpq_does() {
    check(&[], Some("EXECUTE p"));
    check(&[(&"plain", Type::TEXT)], Some("EXECUTE p('plain')"));
    check(&[(&"it's", Type::TEXT)], Some("EXECUTE p('it''s')"));
    check(
        &[(&r"a\'b", Type::TEXT), (&"ü", Type::TEXT)],
        Some(r"EXECUTE p(E'a\\''b', 'ü')"),
    );
    check(&[(&None::<String>, Type::TEXT)], Some("EXECUTE p(NULL)"));
}

#[test]
fn numbers_and_flags_are_written_to_read_back_the_same() {
    check(
        &[
            (&-7i32, Type::INT4),
            (&i64::MIN, Type::INT8),
            (&true, Type::BOOL),
            (&0.1f64, Type::FLOAT8),
            (&1e300f64, Type::FLOAT8),
            (&f64::NEG_INFINITY, Type::FLOAT8),
        ],
        Some("EXECUTE p('-7', '-9223372036854775808', true, '0.1', '1e300', '-Infinity')"),
    );
}

#[test]
fn text_arrays_are_written_element_by_element() {
    let empty: Vec<String> = Vec::new();
    let some = vec!["a".to_owned(), "b'".to_owned()];
    let nulls = vec![Some("a"), None];
    check(&[(&empty, Type::TEXT_ARRAY)], Some("EXECUTE p('{}')"));
    check(
        &[(&some, Type::TEXT_ARRAY), (&nulls, Type::TEXT_ARRAY)],
        Some("EXECUTE p(ARRAY['a', 'b''']::text[], ARRAY['a', NULL]::text[])"),
    );
}

#[test]
fn what_has_no_literal_runs_unnamed() {
    check(&[(&"nul\0", Type::TEXT)], None);
    check(&[(&1i64, Type::TEXT)], None);
    check(&[(&vec![1u8], Type::BYTEA)], None);
}
