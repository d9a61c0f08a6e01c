//! Partial JSON scanning for tool-call parsers: where a JSON value that may still be arriving
//! ends, and the fields of an object read so far. Values are located, not built: a call's
//! `arguments` is the model's own text of the value, so every streamed piece of it is a prefix
//! of the final string. Whole values are checked with `serde_json` when the reply ends.

use std::ops::Range;

/// Where a value starting at the beginning of a text ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The value ends at this byte offset (exclusive).
    Complete(usize),
    /// The text ends inside the value.
    Partial,
    /// The text does not start a JSON value here (or breaks its structure).
    Invalid,
}

/// The extent of the JSON value at the start of `s` (no leading whitespace). Structure only:
/// brackets and strings are matched, scalars run to the next delimiter; `serde_json` checks the
/// value itself later.
pub fn value_extent(s: &str) -> Extent {
    let b = s.as_bytes();
    match b.first() {
        None => Extent::Partial,
        Some(b'{' | b'[') => {
            let mut stack: Vec<u8> = Vec::new();
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'{' => stack.push(b'}'),
                    b'[' => stack.push(b']'),
                    c @ (b'}' | b']') => {
                        if stack.pop() != Some(c) {
                            return Extent::Invalid;
                        }
                        if stack.is_empty() {
                            return Extent::Complete(i + 1);
                        }
                    }
                    b'"' => match string_end(&b[i..]) {
                        Some(n) => i += n - 1,
                        None => return Extent::Partial,
                    },
                    _ => {}
                }
                i += 1;
            }
            Extent::Partial
        }
        Some(b'"') => string_end(b).map_or(Extent::Partial, Extent::Complete),
        Some(c) if c.is_ascii_alphanumeric() || *c == b'-' => {
            match b.iter().position(|c| !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.'))) {
                Some(n) => Extent::Complete(n),
                None => Extent::Partial,
            }
        }
        Some(_) => Extent::Invalid,
    }
}

/// The length of the JSON string at the start of `b` (quotes included), if it is closed.
fn string_end(b: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Bytes of leading JSON whitespace in `s`.
pub fn ws(s: &str) -> usize {
    s.len() - s.trim_start_matches([' ', '\t', '\n', '\r']).len()
}

/// A field of an object read so far: its key and where its value lies in the scanned text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub key: String,
    pub value: Range<usize>,
    /// The value is whole (its extent is known).
    pub complete: bool,
}

/// What [`object_fields`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Object {
    pub fields: Vec<Field>,
    /// Just past the closing brace, once it has come.
    pub end: Option<usize>,
    /// The text is not an object (or breaks its structure).
    pub invalid: bool,
}

impl Object {
    pub fn get(&self, key: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.key == key)
    }
}

/// The fields of the object at the start of `s` (which must start with `{`), as far as the text
/// goes: a value still arriving is the last field, not complete.
pub fn object_fields(s: &str) -> Object {
    let mut o = Object::default();
    if !s.starts_with('{') {
        o.invalid = true;
        return o;
    }
    let mut at = 1;
    loop {
        at += ws(&s[at..]);
        let rest = &s[at..];
        if rest.is_empty() {
            return o;
        }
        if rest.starts_with('}') {
            o.end = Some(at + 1);
            return o;
        }
        if !o.fields.is_empty() {
            if !rest.starts_with(',') {
                o.invalid = true;
                return o;
            }
            at += 1;
            at += ws(&s[at..]);
        }
        let Some(klen) = s[at..].starts_with('"').then(|| string_end(&s.as_bytes()[at..])) else {
            o.invalid = !s[at..].is_empty();
            return o;
        };
        let Some(klen) = klen else { return o };
        let Ok(key) = serde_json::from_str::<String>(&s[at..at + klen]) else {
            o.invalid = true;
            return o;
        };
        at += klen;
        at += ws(&s[at..]);
        if s[at..].is_empty() {
            return o;
        }
        if !s[at..].starts_with(':') {
            o.invalid = true;
            return o;
        }
        at += 1;
        at += ws(&s[at..]);
        match value_extent(&s[at..]) {
            Extent::Complete(n) => {
                o.fields.push(Field { key, value: at..at + n, complete: true });
                at += n;
            }
            Extent::Partial => {
                if at < s.len() {
                    o.fields.push(Field { key, value: at..s.len(), complete: false });
                }
                return o;
            }
            Extent::Invalid => {
                o.invalid = true;
                return o;
            }
        }
    }
}

/// The string a complete JSON string value holds (`None` for any other value).
pub fn string_value(raw: &str) -> Option<String> {
    serde_json::from_str::<String>(raw).ok()
}

/// Whether `raw` is one whole JSON object.
pub fn is_object(raw: &str) -> bool {
    matches!(serde_json::from_str::<serde_json::Value>(raw), Ok(serde_json::Value::Object(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents() {
        assert_eq!(value_extent(r#"{"a": "}"} x"#), Extent::Complete(10));
        assert_eq!(value_extent(r#"{"a": "\"}"#), Extent::Partial);
        assert_eq!(value_extent(r#"[1, {"b": 2}]"#), Extent::Complete(13));
        assert_eq!(value_extent("12,"), Extent::Complete(2));
        assert_eq!(value_extent("12"), Extent::Partial);
        assert_eq!(value_extent("{]"), Extent::Invalid);
        assert_eq!(value_extent("<"), Extent::Invalid);
    }

    #[test]
    fn fields_so_far() {
        let o = object_fields(r#"{"name": "f", "arguments": {"x": [1, "#);
        assert_eq!(o.fields.len(), 2);
        assert!(o.fields[0].complete && !o.fields[1].complete);
        assert_eq!(o.end, None);
        let o = object_fields(r#"{"name": "f"} tail"#);
        assert_eq!(o.end, Some(13));
        assert!(object_fields(r#"{"a" 1}"#).invalid);
    }
}
