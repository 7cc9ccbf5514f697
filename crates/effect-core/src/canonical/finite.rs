//! A serializer that only looks for non-finite floats and excessive nesting,
//! remembering where they are.
//!
//! serde_json writes NaN and infinities as `null`, which would silently change
//! what is fingerprinted or stored; this pass rejects them first. It also stops
//! at [`MAX_DEPTH`]: serializing is recursive, so this pass must refuse a deep
//! input before serde_json (or anything else) recurses all the way down it.
//!
//! Every call checks a value, and nearly every value passes: the first pass
//! records no path (and so allocates nothing). Only when it finds something
//! does a second pass walk the value again, naming where.

use serde::ser::{self, Serialize};

use super::MAX_DEPTH;
use crate::error::CanonicalError;

pub(super) fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), CanonicalError> {
    let found = match value.serialize(&mut Checker::new(false)) {
        Ok(()) => return Ok(()),
        Err(found @ Found::Custom(_)) => found,
        // Again, naming the place. A value that serializes differently the
        // second time is reported without one.
        Err(found) => match value.serialize(&mut Checker::new(true)) {
            Ok(()) | Err(Found::Custom(_)) => found,
            Err(named) => named,
        },
    };
    match found {
        Found::NonFinite(path) => Err(CanonicalError::NonFinite { path }),
        Found::TooDeep(path) => Err(CanonicalError::TooDeep {
            path,
            limit: MAX_DEPTH,
        }),
        // The value's own error: report it rather than let serde_json recurse
        // into a value this pass did not finish checking.
        Found::Custom(message) => Err(CanonicalError::Serialize {
            source: <serde_json::Error as ser::Error>::custom(message),
        }),
    }
}

struct Checker {
    /// Where the current value is, when recording.
    path: Vec<String>,
    /// Whether to record the path: only the pass that names a finding does.
    record: bool,
    /// JSON arrays and objects open around the current value.
    depth: usize,
    /// `Some` and newtype wrappers around it: invisible in JSON, but each one
    /// is a recursive call, so a self-referential type is bounded too.
    wrappers: usize,
}

#[derive(Debug)]
enum Found {
    NonFinite(String),
    TooDeep(String),
    Custom(String),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::NonFinite(path) => write!(f, "non-finite number at {path}"),
            Found::TooDeep(path) => write!(f, "nested too deep at {path}"),
            Found::Custom(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Found::Custom(msg.to_string())
    }
}

impl Checker {
    fn new(record: bool) -> Self {
        Checker {
            path: Vec::new(),
            record,
            depth: 0,
            wrappers: 0,
        }
    }

    fn float(&self, finite: bool) -> Result<(), Found> {
        if finite {
            Ok(())
        } else {
            Err(Found::NonFinite(self.render_path()))
        }
    }

    fn render_path(&self) -> String {
        if self.path.is_empty() {
            "/".to_owned()
        } else {
            format!("/{}", self.path.join("/"))
        }
    }

    fn wrapped<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        if self.wrappers >= 4 * MAX_DEPTH {
            return Err(Found::TooDeep(self.render_path()));
        }
        self.wrappers += 1;
        let result = value.serialize(&mut *self);
        self.wrappers -= 1;
        result
    }

    /// Opens `levels` JSON containers (two for an enum variant holding a
    /// sequence or fields: serde_json writes `{"Variant": [...]}`).
    fn open(&mut self, levels: usize) -> Result<Compound<'_>, Found> {
        if self.depth + levels > MAX_DEPTH {
            return Err(Found::TooDeep(self.render_path()));
        }
        self.depth += levels;
        Ok(Compound {
            checker: self,
            index: 0,
            key: String::new(),
            levels,
        })
    }

    /// Checks `value`, one step below the current one: the step's name is
    /// only worked out when the path is recorded.
    fn nested<T: Serialize + ?Sized>(
        &mut self,
        segment: impl FnOnce() -> String,
        value: &T,
    ) -> Result<(), Found> {
        if !self.record {
            return value.serialize(&mut *self);
        }
        self.path.push(segment());
        let result = value.serialize(&mut *self);
        self.path.pop();
        result
    }
}

/// State of a compound value: the next index, or the key just seen.
struct Compound<'a> {
    checker: &'a mut Checker,
    index: usize,
    key: String,
    /// How many levels `end` closes.
    levels: usize,
}

macro_rules! accept {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, _v: $ty) -> Result<(), Found> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for &'a mut Checker {
    type Ok = ();
    type Error = Found;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    accept!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
    );

    fn serialize_f32(self, v: f32) -> Result<(), Found> {
        self.float(v.is_finite())
    }

    fn serialize_f64(self, v: f64) -> Result<(), Found> {
        self.float(v.is_finite())
    }

    fn serialize_none(self) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Found> {
        self.wrapped(value)
    }

    fn serialize_unit(self) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Found> {
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.wrapped(value)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        // serde_json writes `{"Variant": value}`: one object around the value.
        if self.depth + 1 > MAX_DEPTH {
            return Err(Found::TooDeep(self.render_path()));
        }
        self.depth += 1;
        let result = self.nested(|| variant.to_owned(), value);
        self.depth -= 1;
        result
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, Found> {
        self.open(1)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Compound<'a>, Found> {
        self.open(1)
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Found> {
        self.open(1)
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Found> {
        self.open(2)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a>, Found> {
        self.open(1)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Found> {
        self.open(1)
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Found> {
        self.open(2)
    }
}

impl Compound<'_> {
    fn close(self) -> Result<(), Found> {
        self.checker.depth -= self.levels;
        Ok(())
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let index = self.index;
        self.index += 1;
        self.checker.nested(|| index.to_string(), value)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Found> {
        self.checker.nested(|| key.to_owned(), value)
    }
}

macro_rules! seq_like {
    ($($trait:ident :: $method:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Found;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
                self.element(value)
            }
            fn end(self) -> Result<(), Found> {
                self.close()
            }
        }
    )*};
}

seq_like!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field,
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Found;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Found> {
        // Keys are recorded for the path; a non-string key is serde_json's
        // error to report. Check the key first, so that converting it is bounded.
        self.checker.wrapped(key)?;
        if !self.checker.record {
            return Ok(());
        }
        self.key = serde_json::to_value(key)
            .ok()
            .and_then(|k| k.as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let key = std::mem::take(&mut self.key);
        self.field(&key, value)
    }

    fn end(self) -> Result<(), Found> {
        self.close()
    }
}

macro_rules! struct_like {
    ($($trait:ident),* $(,)?) => {$(
        impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Found;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Found> {
                self.field(key, value)
            }
            fn end(self) -> Result<(), Found> {
                self.close()
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);
