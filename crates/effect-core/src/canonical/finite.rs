//! A serializer that only looks for non-finite floats, remembering where they are.
//!
//! serde_json writes NaN and infinities as `null`, which would silently change
//! what is fingerprinted or stored; this pass rejects them first.

use serde::ser::{self, Serialize};

use crate::error::CanonicalError;

pub(super) fn check<T: Serialize + ?Sized>(value: &T) -> Result<(), CanonicalError> {
    let mut checker = Checker { path: Vec::new() };
    match value.serialize(&mut checker) {
        Ok(()) => Ok(()),
        Err(Found::NonFinite(path)) => Err(CanonicalError::NonFinite { path }),
        // Anything else is left for serde_json to report with its own message.
        Err(Found::Custom) => Ok(()),
    }
}

struct Checker {
    path: Vec<String>,
}

#[derive(Debug)]
enum Found {
    NonFinite(String),
    Custom,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::NonFinite(path) => write!(f, "non-finite number at {path}"),
            Found::Custom => f.write_str("serialization error"),
        }
    }
}

impl std::error::Error for Found {}

impl ser::Error for Found {
    fn custom<T: std::fmt::Display>(_msg: T) -> Self {
        Found::Custom
    }
}

impl Checker {
    fn float(&self, finite: bool) -> Result<(), Found> {
        if finite {
            Ok(())
        } else if self.path.is_empty() {
            Err(Found::NonFinite("/".to_owned()))
        } else {
            Err(Found::NonFinite(format!("/{}", self.path.join("/"))))
        }
    }

    fn nested<T: Serialize + ?Sized>(&mut self, segment: String, value: &T) -> Result<(), Found> {
        self.path.push(segment);
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
        value.serialize(self)
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
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Found> {
        self.nested(variant.to_owned(), value)
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_tuple(self, _len: usize) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound<'a>, Found> {
        Ok(Compound::new(self))
    }
}

impl<'a> Compound<'a> {
    fn new(checker: &'a mut Checker) -> Self {
        Compound {
            checker,
            index: 0,
            key: String::new(),
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Found> {
        let segment = self.index.to_string();
        self.index += 1;
        self.checker.nested(segment, value)
    }

    fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Found> {
        self.checker.nested(key.to_owned(), value)
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
                Ok(())
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
        // Keys are recorded for the path; a non-string key is serde_json's error to report.
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
        Ok(())
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
                Ok(())
            }
        }
    )*};
}

struct_like!(SerializeStruct, SerializeStructVariant);
