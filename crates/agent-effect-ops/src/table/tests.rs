use super::*;

#[test]
fn cells_escape_control_characters() {
    // A stored error could try to recolour or rewrite the operator's terminal.
    assert_eq!(
        cell(Some("timeout\u{1b}[2J\r\nfake line")),
        "timeout\\u{1b}[2J\\r\\nfake line"
    );
    assert_eq!(cell(Some("zürich")), "zürich");
    assert_eq!(cell(None), "-");
    assert_eq!(cell(Some("")), "-");
}

#[test]
fn columns_align_by_characters_not_bytes() {
    let rows = vec![
        vec!["zürich".to_owned(), "1".to_owned()],
        vec!["b".to_owned(), "22".to_owned()],
    ];
    assert_eq!(
        columns(&["ID", "N"], &rows),
        "ID      N\nzürich  1\nb       22\n"
    );
}

#[test]
fn columns_align_wide_characters_by_display_width() {
    let rows = vec![
        vec!["東京".to_owned(), "1".to_owned()],
        vec!["ab".to_owned(), "2".to_owned()],
    ];
    // 東京 takes four terminal columns.
    assert_eq!(columns(&["ID", "N"], &rows), "ID    N\n東京  1\nab    2\n");
}

#[test]
fn ages_read_as_durations() {
    assert_eq!(age_words(28_930_695), "334 days");
    assert_eq!(age_words(86_400 * 8 + 5), "8 days");
    assert_eq!(age_words(3_600), "1 hour");
    assert_eq!(age_words(125), "2 minutes");
    assert_eq!(age_words(0), "0 seconds");
}
