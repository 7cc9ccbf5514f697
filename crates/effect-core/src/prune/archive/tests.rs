use std::path::PathBuf;

use super::*;

/// A fresh directory of this test process (core has no tempfile dependency).
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("effect-core-archive-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn line(id: &str) -> String {
    format!(
        "{{\"operation\":{{\"operation_id\":\"{id}\",\"status\":\"confirmed\",\"updated_at\":\"2026-01-01T00:00:00.000000+00:00\"}},\"events\":[]}}\n"
    )
}

fn ids(archive: &mut ArchiveFile) -> Result<Vec<String>, LedgerError> {
    let mut out = Vec::new();
    while let Some(key) = archive.previous()? {
        out.push(key.operation_id);
    }
    Ok(out)
}

#[test]
fn a_resumed_archive_names_its_lines_from_the_last_and_cuts_a_torn_one() -> Result<(), LedgerError>
{
    let dir = scratch("torn");
    let path = dir.join("a.jsonl");
    let mut archive = ArchiveFile::create(&path)?;
    archive.append(format!("{}{}", line("a"), line("b")).as_bytes())?;
    assert_eq!(archive.lines(), 2);
    drop(archive);
    // A crash while the third line was written.
    let torn = &line("c")[..20];
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(torn.as_bytes()))
        .expect("appending a torn line");
    let mut resumed = ArchiveFile::resume(&path)?;
    assert_eq!(ids(&mut resumed)?, ["b", "a"]);
    resumed.append(line("c").as_bytes())?;
    let text = std::fs::read_to_string(&path).expect("the archive");
    assert_eq!(text, format!("{}{}{}", line("a"), line("b"), line("c")));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn lines_longer_than_a_chunk_are_read_back_whole() -> Result<(), LedgerError> {
    let dir = scratch("long");
    let path = dir.join("a.jsonl");
    let long_id = "x".repeat(3 * CHUNK as usize);
    let mut archive = ArchiveFile::create(&path)?;
    archive.append(format!("{}{}{}", line("a"), line(&long_id), line("b")).as_bytes())?;
    drop(archive);
    let mut resumed = ArchiveFile::resume(&path)?;
    assert_eq!(
        ids(&mut resumed)?,
        ["b".to_owned(), long_id, "a".to_owned()]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn a_line_that_is_not_an_archived_operation_is_corrupt() -> Result<(), LedgerError> {
    let dir = scratch("corrupt");
    let path = dir.join("a.jsonl");
    std::fs::write(&path, format!("{}not json\n", line("a"))).expect("writing");
    let mut resumed = ArchiveFile::resume(&path)?;
    let err = resumed.previous().expect_err("not an archived operation");
    assert_eq!(err.kind(), crate::LedgerErrorKind::Corrupt);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
