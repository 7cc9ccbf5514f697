//! Taking `sslmode` and `sslrootcert` out of a connection string, which the
//! `postgres` driver would refuse (`verify-ca`, `verify-full`) or not know.

/// A connection URL with `sslmode` and `sslrootcert` taken out.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SplitUrl {
    pub(super) rest: String,
    pub(super) sslmode: Option<String>,
    pub(super) sslrootcert: Option<String>,
}

/// Takes `sslmode` and `sslrootcert` out of a URL (`postgres://...?k=v&...`)
/// or a `key=value` connection string; a later occurrence wins, as in libpq.
pub(super) fn split_url(url: &str) -> Result<SplitUrl, String> {
    let mut split = SplitUrl {
        rest: String::new(),
        sslmode: None,
        sslrootcert: None,
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            split.rest = url.to_owned();
            return Ok(split);
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .map(|s| s.into_owned())
                    .map_err(|_| format!("parameter {s:?} is not UTF-8 once decoded"))
            };
            match decode(key)?.as_str() {
                "sslmode" => split.sslmode = Some(decode(value)?),
                "sslrootcert" => split.sslrootcert = Some(decode(value)?),
                _ => kept.push(pair),
            }
        }
        split.rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
    } else {
        let mut kept = Vec::new();
        for (key, value, raw) in key_values(url)? {
            match key.as_str() {
                "sslmode" => split.sslmode = Some(value),
                "sslrootcert" => split.sslrootcert = Some(value),
                _ => kept.push(raw),
            }
        }
        split.rest = kept.join(" ");
    }
    Ok(split)
}

/// The pairs of a `key=value` connection string: key, unquoted value, and
/// the pair as written. Values may be single-quoted; `\` escapes a character.
fn key_values(s: &str) -> Result<Vec<(String, String, &str)>, String> {
    let mut pairs = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            return Ok(pairs);
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(format!("expected `=` after {key:?}"));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        let mut closed = !quoted;
        while let Some((_, c)) = chars.peek().copied() {
            if !quoted && c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '\\' => match chars.next() {
                    Some((_, escaped)) => value.push(escaped),
                    None => return Err(format!("the value of {key:?} ends in `\\`")),
                },
                '\'' if quoted => {
                    closed = true;
                    break;
                }
                c => value.push(c),
            }
        }
        if !closed {
            return Err(format!("the value of {key:?} has no closing quote"));
        }
        let end = chars.peek().map_or(s.len(), |&(i, _)| i);
        pairs.push((key, value, &s[start..end]));
    }
}
