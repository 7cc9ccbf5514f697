//! `{name}` templates: the operation id, the key and the lookup URLs a user
//! describes on the command line, filled from the call's arguments.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// What stays as it is in a URL's path segment or query value.
const URL_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A template such as `invoice:{invoice_id}:capture`: `{name}` is the
/// top-level argument `name` (a string, a number or a boolean), `{key}` the
/// provider key where the template allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    /// Percent-encode what is filled in (a URL).
    url: bool,
}

impl Template {
    /// A template for an identity (nothing encoded).
    pub fn plain(text: &str) -> Result<Self, String> {
        Template::checked(text, false)
    }

    /// A template for a URL: what is filled in is percent-encoded.
    pub fn url(text: &str) -> Result<Self, String> {
        Template::checked(text, true)
    }

    fn checked(text: &str, url: bool) -> Result<Self, String> {
        let template = Template {
            text: text.to_owned(),
            url,
        };
        template.render_with(|_| Some(String::new()))?;
        Ok(template)
    }

    /// The names the template uses.
    pub fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let _ = self.render_with(|name| {
            names.push(name.to_owned());
            Some(String::new())
        });
        names
    }

    /// Fills the template from `arguments` and `key`.
    pub fn render(&self, arguments: &Value, key: Option<&str>) -> Result<String, String> {
        self.render_with(|name| match (name, key) {
            ("key", Some(key)) => Some(key.to_owned()),
            _ => match &arguments[name] {
                Value::String(text) => Some(text.clone()),
                Value::Number(number) => Some(number.to_string()),
                Value::Bool(flag) => Some(flag.to_string()),
                _ => None,
            },
        })
    }

    fn render_with(&self, mut value: impl FnMut(&str) -> Option<String>) -> Result<String, String> {
        let mut out = String::with_capacity(self.text.len());
        let mut rest = self.text.as_str();
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("template {:?} has an unclosed '{{'", self.text))?;
            let name = &after[..end];
            if name.is_empty() {
                return Err(format!("template {:?} has an empty '{{}}'", self.text));
            }
            let filled = value(name).ok_or_else(|| {
                format!(
                    "template {:?}: the arguments have no {name:?} to fill in",
                    self.text
                )
            })?;
            if self.url {
                out.extend(utf8_percent_encode(&filled, URL_VALUE));
            } else {
                out.push_str(&filled);
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// How many effects a count answer says: a number, an array's length, or
/// an object's `count` (a number) or `data` (an array, as a list endpoint
/// answers).
pub fn count_of(answer: &Value) -> Result<usize, String> {
    let counted = match answer {
        Value::Number(n) => n.as_u64(),
        Value::Array(items) => Some(items.len() as u64),
        Value::Object(fields) => match (fields.get("count"), fields.get("data")) {
            (Some(Value::Number(n)), _) => n.as_u64(),
            (_, Some(Value::Array(items))) => Some(items.len() as u64),
            _ => None,
        },
        _ => None,
    };
    counted
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            "the count answer is neither a number, an array, nor an object with `count` or `data`"
                .to_owned()
        })
}

#[cfg(test)]
mod tests;
