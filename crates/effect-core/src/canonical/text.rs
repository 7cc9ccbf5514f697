//! Writing canonical JSON text, and measuring depth, with an explicit stack.
//!
//! A `Value` a caller built can be nested arbitrarily deep; recursing over it
//! would overflow the stack long before its memory runs out. (The writer
//! recurses through the first 16 levels and the depth check's first look
//! through at most [`MAX_DEPTH`]: both bounded.)

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::MAX_DEPTH;
use crate::error::CanonicalError;

/// How numbers are written; everything else is the same in both styles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NumberStyle {
    /// As serde_json writes them (`0.00001`, `1e16`).
    Serde,
    /// As Python's `float.__repr__` writes them (`1e-05`, `1e+16`).
    Python,
}

/// An array or object being written: what is left of it, and whether an
/// item was written yet.
enum Frame<'a> {
    Array(std::slice::Iter<'a, Value>, bool),
    /// An object whose map iterates in key order already (serde_json's
    /// default map, a `BTreeMap`): written as it iterates.
    Sorted(serde_json::map::Iter<'a>, bool),
    /// An object whose keys had to be sorted first.
    Object(std::vec::IntoIter<(&'a String, &'a Value)>, bool),
}

/// How many levels the writer recurses before it continues a value's
/// deeper parts with an explicit stack: enough for every common value,
/// which is then written without allocating a stack.
const RECURSION_LIMIT: usize = 16;

/// Writes the canonical text of `value` to `out`; true when it holds a
/// float, the only thing the two number styles write differently.
pub(crate) fn write(value: &Value, style: NumberStyle, out: &mut String) -> bool {
    write_nested(value, style, out, 0)
}

/// [`write`] for a value inside `depth` arrays and objects: recursing
/// while `depth` is below [`RECURSION_LIMIT`], with [`write_stacked`] below that.
fn write_nested(value: &Value, style: NumberStyle, out: &mut String, depth: usize) -> bool {
    if depth >= RECURSION_LIMIT {
        return write_stacked(value, style, out);
    }
    let mut floats = false;
    match value {
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                floats |= write_nested(item, style, out, depth + 1);
            }
            out.push(']');
        }
        Value::Object(map) => floats = write_object(map, style, out, depth),
        Value::String(text) => write_string(text, out),
        Value::Number(number) => floats = write_number(number, style, out),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Null => out.push_str("null"),
    }
    floats
}

/// Writes the object `map`, inside `depth` arrays and objects (below
/// [`RECURSION_LIMIT`]); true when it holds a float.
pub(super) fn write_object(
    map: &Map<String, Value>,
    style: NumberStyle,
    out: &mut String,
    depth: usize,
) -> bool {
    let mut floats = false;
    out.push('{');
    // As in `write_stacked`: sorted unless in order already.
    if map.keys().is_sorted() {
        for (index, (key, item)) in map.iter().enumerate() {
            floats |= write_member(index, key, item, style, out, depth);
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (index, (key, item)) in entries.into_iter().enumerate() {
            floats |= write_member(index, key, item, style, out, depth);
        }
    }
    out.push('}');
    floats
}

/// One member of an object inside `depth` levels, the `index`th written.
fn write_member(
    index: usize,
    key: &str,
    item: &Value,
    style: NumberStyle,
    out: &mut String,
    depth: usize,
) -> bool {
    if index > 0 {
        out.push(',');
    }
    write_string(key, out);
    out.push(':');
    write_nested(item, style, out, depth + 1)
}

/// [`write`] with an explicit stack, for any depth.
fn write_stacked(value: &Value, style: NumberStyle, out: &mut String) -> bool {
    let mut floats = false;
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut next = Some(value);
    loop {
        if let Some(value) = next.take() {
            match value {
                Value::Array(items) => {
                    out.push('[');
                    stack.push(Frame::Array(items.iter(), false));
                }
                Value::Object(map) => {
                    out.push('{');
                    // Sort explicitly unless the map is in order already:
                    // serde_json's map keeps insertion order when another
                    // crate in the build enables its `preserve_order`
                    // feature. Byte order of UTF-8 is code point order,
                    // which is how Python sorts `str` keys.
                    if map.keys().is_sorted() {
                        stack.push(Frame::Sorted(map.iter(), false));
                    } else {
                        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                        stack.push(Frame::Object(entries.into_iter(), false));
                    }
                }
                Value::String(text) => write_string(text, out),
                Value::Number(number) => floats |= write_number(number, style, out),
                Value::Bool(true) => out.push_str("true"),
                Value::Bool(false) => out.push_str("false"),
                Value::Null => out.push_str("null"),
            }
        }
        let Some(frame) = stack.last_mut() else {
            return floats;
        };
        let entry = match frame {
            Frame::Array(items, started) => match items.next() {
                Some(item) => {
                    if std::mem::replace(started, true) {
                        out.push(',');
                    }
                    next = Some(item);
                    continue;
                }
                None => {
                    out.push(']');
                    stack.pop();
                    continue;
                }
            },
            Frame::Sorted(entries, started) => entries.next().map(|entry| (entry, started)),
            Frame::Object(entries, started) => entries.next().map(|entry| (entry, started)),
        };
        match entry {
            Some(((key, item), started)) => {
                if std::mem::replace(started, true) {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                next = Some(item);
            }
            None => {
                out.push('}');
                stack.pop();
            }
        }
    }
}

/// One step of a path: an array index or an object key.
enum Segment<'a> {
    Index(usize),
    Key(&'a str),
}

pub(super) fn check_depth(value: &Value) -> Result<(), CanonicalError> {
    if !too_deep(value, 0) {
        return Ok(());
    }
    // Depth-first with an explicit stack: (node, containers around it, its step).
    let mut stack: Vec<(&Value, usize, Option<Segment<'_>>)> = vec![(value, 0, None)];
    let mut path: Vec<Segment<'_>> = Vec::new();
    while let Some((node, depth, segment)) = stack.pop() {
        path.truncate(depth.saturating_sub(1));
        path.extend(segment);
        let is_container = matches!(node, Value::Array(_) | Value::Object(_));
        if is_container && depth + 1 > MAX_DEPTH {
            return Err(CanonicalError::TooDeep {
                path: render(&path),
                limit: MAX_DEPTH,
            });
        }
        match node {
            Value::Array(items) => stack.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (item, depth + 1, Some(Segment::Index(i)))),
            ),
            Value::Object(map) => stack.extend(
                map.iter()
                    .map(|(key, item)| (item, depth + 1, Some(Segment::Key(key.as_str())))),
            ),
            _ => {}
        }
    }
    Ok(())
}

/// Whether `value`, inside `depth` arrays and objects, holds one past
/// [`MAX_DEPTH`]. It recurses, but never past the limit: the common check,
/// of a value that passes, allocates nothing.
fn too_deep(value: &Value, depth: usize) -> bool {
    match value {
        Value::Array(items) => {
            depth >= MAX_DEPTH || items.iter().any(|item| too_deep(item, depth + 1))
        }
        Value::Object(map) => {
            depth >= MAX_DEPTH || map.values().any(|item| too_deep(item, depth + 1))
        }
        _ => false,
    }
}

fn render(path: &[Segment<'_>]) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    let mut out = String::new();
    for segment in path {
        out.push('/');
        match segment {
            Segment::Index(i) => {
                let _ = write!(out, "{i}");
            }
            Segment::Key(key) => out.push_str(key),
        }
    }
    out
}

/// Python's `json` escaping with `ensure_ascii=False`, which is also serde_json's:
/// `"`, `\` and the C0 controls, short forms where JSON has them, all else as is.
fn write_string(text: &str, out: &mut String) {
    out.reserve(text.len() + 2);
    out.push('"');
    let mut rest = text;
    // Every byte that needs escaping is ASCII, so it is a whole character
    // and the text either side of it is valid UTF-8.
    while let Some(at) = first_to_escape(rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let byte = rest.as_bytes()[at];
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            control => {
                let _ = write!(out, "\\u{:04x}", u32::from(control));
            }
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Whether JSON escapes this byte: a quote, a backslash, a C0 control.
fn needs_escape(byte: &u8) -> bool {
    matches!(*byte, b'"' | b'\\' | 0..0x20)
}

/// The index of the first byte of `bytes` that JSON escapes. Eight bytes
/// are tested at once (the bit tricks of "Bit Twiddling Hacks", Sean Eron
/// Anderson: a lane below n, a lane equal to zero); a word that may hold
/// one is then searched byte by byte.
fn first_to_escape(bytes: &[u8]) -> Option<usize> {
    const LANES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut lanes = [0u8; 8];
        lanes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(lanes);
        let below_space = word.wrapping_sub(LANES * 0x20) & !word;
        let quote = word ^ (LANES * u64::from(b'"'));
        let quote = quote.wrapping_sub(LANES) & !quote;
        let backslash = word ^ (LANES * u64::from(b'\\'));
        let backslash = backslash.wrapping_sub(LANES) & !backslash;
        if (below_space | quote | backslash) & HIGH != 0
            && let Some(at) = chunk.iter().position(needs_escape)
        {
            return Some(offset + at);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(needs_escape)
        .map(|at| offset + at)
}

/// Writes `number`; true when it is a float.
fn write_number(number: &Number, style: NumberStyle, out: &mut String) -> bool {
    // Integers are written alike in both styles: their decimal digits, as
    // serde_json's Display writes them, without the formatting machinery.
    if let Some(unsigned) = number.as_u64() {
        write_u64(unsigned, out);
        return false;
    }
    if let Some(signed) = number.as_i64() {
        out.push('-');
        write_u64(signed.unsigned_abs(), out);
        return false;
    }
    match (style, number.as_f64()) {
        (NumberStyle::Python, Some(float)) if number.is_f64() => python_float(float, out),
        // serde_json's Display is its JSON text.
        _ => {
            let _ = write!(out, "{number}");
        }
    }
    true
}

/// The decimal digits of `value`.
pub(super) fn write_u64(mut value: u64, out: &mut String) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // A remainder below ten: the cast cannot truncate.
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
}

/// `float.__repr__`: the shortest digits that round-trip, in positional
/// notation when the decimal exponent is in -4..16, else `d.ddde±XX`.
pub(super) fn python_float(value: f64, out: &mut String) {
    let scientific = shortest_digits(value);
    let Some((mantissa, exponent)) = scientific.split_once('e') else {
        out.push_str(&scientific);
        return;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        out.push_str(&scientific);
        return;
    };
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if negative {
        out.push('-');
    }
    // Python's decpt: the value is 0.DIGITS times 10^decpt.
    let decpt = exponent + 1;
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', decpt.unsigned_abs() as usize));
        out.push_str(&digits);
    } else {
        let point = decpt.unsigned_abs() as usize;
        if digits.len() <= point {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', point - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    }
}

/// The shortest digits that round-trip, closest to the value, ties to an even
/// last digit (David Gay's `dtoa` mode 0, which Python uses), as `d.ddde-7`.
fn shortest_digits(value: f64) -> String {
    // Rust's `{:e}` finds the same shortest length, but breaks an exact tie
    // between two candidates of that length upward (1165452185658333.25 has
    // `…333.2` and `…333.3`; Python writes `.2`). The correctly rounded decimal
    // of that length (Rust's exact mode rounds half to even) is Python's choice
    // whenever it round-trips.
    let shortest = format!("{value:e}");
    let digits = shortest
        .split('e')
        .next()
        .map_or(0, |m| m.bytes().filter(u8::is_ascii_digit).count());
    let rounded = format!("{value:.*e}", digits.saturating_sub(1));
    if rounded != shortest && rounded.parse::<f64>().is_ok_and(|back| back == value) {
        rounded
    } else {
        shortest
    }
}
