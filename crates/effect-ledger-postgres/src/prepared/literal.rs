//! The arguments of an `EXECUTE` as SQL literals.
//!
//! PostgreSQL takes no bound parameters in a utility statement
//! (`EXECUTE name($1)` fails with "there is no parameter $1"), so the
//! arguments of a prepared statement are written into the `EXECUTE` text.
//! Each value is encoded by the driver exactly as it would be bound, and
//! its binary form is written back as a literal of the parameter's type:
//! the server reads a literal with the type's input function, which gives
//! back the same value. Text is quoted as libpq's `PQescapeLiteral` does
//! (quotes doubled, and `E'...'` with backslashes doubled when it holds
//! one), so it reads the same whatever `standard_conforming_strings` says.
//! A type or value this module does not know is [`Unrenderable`], and the
//! call runs unnamed instead.

use std::fmt::Write as _;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql, Type};

/// A value that cannot be written as a literal here.
#[derive(Debug)]
pub(super) struct Unrenderable;

/// Writes `EXECUTE name(literal, ...)` for `params` into `out`.
pub(super) fn execute(
    out: &mut String,
    name: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<(), Unrenderable> {
    out.clear();
    out.push_str("EXECUTE ");
    out.push_str(name);
    let mut buf = BytesMut::new();
    for (at, (value, ty)) in params.iter().enumerate() {
        out.push_str(if at == 0 { "(" } else { ", " });
        buf.clear();
        match value.to_sql_checked(ty, &mut buf) {
            Ok(IsNull::Yes) => out.push_str("NULL"),
            Ok(IsNull::No) => literal(out, ty, &buf)?,
            Err(_) => return Err(Unrenderable),
        }
    }
    if !params.is_empty() {
        out.push(')');
    }
    Ok(())
}

/// One non-null value in its binary form `raw`, as a literal of `ty`.
fn literal(out: &mut String, ty: &Type, raw: &[u8]) -> Result<(), Unrenderable> {
    match *ty {
        Type::TEXT | Type::VARCHAR => quoted(out, text(raw)?),
        Type::BOOL => match raw {
            [0] => out.push_str("false"),
            [1] => out.push_str("true"),
            _ => return Err(Unrenderable),
        },
        Type::INT4 => {
            let n = i32::from_be_bytes(raw.try_into().map_err(|_| Unrenderable)?);
            let _ = write!(out, "'{n}'");
        }
        Type::INT8 => {
            let n = i64::from_be_bytes(raw.try_into().map_err(|_| Unrenderable)?);
            let _ = write!(out, "'{n}'");
        }
        Type::FLOAT8 => {
            let x = f64::from_be_bytes(raw.try_into().map_err(|_| Unrenderable)?);
            // `{:?}` is the shortest text that reads back as the same
            // double; the server's float8in reads it exactly.
            if x.is_nan() {
                out.push_str("'NaN'");
            } else if x.is_infinite() {
                out.push_str(if x > 0.0 { "'Infinity'" } else { "'-Infinity'" });
            } else {
                let _ = write!(out, "'{x:?}'");
            }
        }
        Type::TEXT_ARRAY => text_array(out, raw)?,
        _ => return Err(Unrenderable),
    }
    Ok(())
}

/// Text as the server stores it: UTF-8, without NUL (which would also end
/// the statement's text on the wire).
fn text(raw: &[u8]) -> Result<&str, Unrenderable> {
    let text = std::str::from_utf8(raw).map_err(|_| Unrenderable)?;
    if text.contains('\0') {
        return Err(Unrenderable);
    }
    Ok(text)
}

fn quoted(out: &mut String, text: &str) {
    if text.contains('\\') {
        out.push_str("E'");
    } else {
        out.push('\'');
    }
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// A one-dimensional `text[]` in the binary array format: dimensions,
/// null flag, element type, then per dimension its length and lower bound,
/// then each element's length (-1 for NULL) and bytes.
fn text_array(out: &mut String, raw: &[u8]) -> Result<(), Unrenderable> {
    let mut rest = raw;
    let dimensions = int(&mut rest)?;
    let _has_nulls = int(&mut rest)?;
    let element = int(&mut rest)?;
    if u32::from_be_bytes(element.to_be_bytes()) != Type::TEXT.oid() {
        return Err(Unrenderable);
    }
    if dimensions == 0 {
        return empty(out, rest);
    }
    let (length, lower) = (int(&mut rest)?, int(&mut rest)?);
    if dimensions != 1 || lower != 1 || length < 0 {
        return Err(Unrenderable);
    }
    if length == 0 {
        return empty(out, rest);
    }
    out.push_str("ARRAY[");
    for at in 0..length {
        if at > 0 {
            out.push_str(", ");
        }
        let len = int(&mut rest)?;
        if len < 0 {
            out.push_str("NULL");
            continue;
        }
        let len = usize::try_from(len).map_err(|_| Unrenderable)?;
        let element = rest.get(..len).ok_or(Unrenderable)?;
        rest = &rest[len..];
        quoted(out, text(element)?);
    }
    out.push_str("]::text[]");
    if rest.is_empty() {
        Ok(())
    } else {
        Err(Unrenderable)
    }
}

fn empty(out: &mut String, rest: &[u8]) -> Result<(), Unrenderable> {
    if !rest.is_empty() {
        return Err(Unrenderable);
    }
    out.push_str("'{}'");
    Ok(())
}

/// The next big-endian `int4` of `rest`.
fn int(rest: &mut &[u8]) -> Result<i32, Unrenderable> {
    let (head, tail) = rest.split_first_chunk::<4>().ok_or(Unrenderable)?;
    *rest = tail;
    Ok(i32::from_be_bytes(*head))
}
