//! The Python side of HF chat templates: what transformers' Jinja environment adds or does
//! differently from minijinja's defaults (`utils/chat_template_utils.py`).
//!
//! - `tojson` is `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//!   sort_keys=False)`: no HTML escaping, `", "` / `": "` separators, keys in insertion order.
//! - `{{ x }}` writes `str(x)`: `None`, `True`, `False`, and lists / dicts in Python's repr
//!   (`['a', 1]`, `{'k': None}`), where minijinja would write `none`, `true` and JSON.
//! - `strftime_now(fmt)` formats the render's clock with C `strftime` specifiers.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Output, State, Value};

/// Bytes of created text per fuel unit charged (minijinja charges one fuel per 64 bytes).
const BYTES_PER_FUEL: usize = 64;

/// How `tojson` lays out its output: `json.dumps`'s options.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

impl JsonStyle {
    /// The options of `tojson(...)`, checked: an unknown keyword is an error naming it.
    fn from_kwargs(kwargs: &Kwargs) -> Result<Self, Error> {
        let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
        let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
        let indent = match kwargs.get::<Option<Value>>("indent")? {
            None => None,
            Some(v) if v.is_none() => None,
            Some(v) => match (v.as_i64(), v.as_str()) {
                (Some(n), _) => Some(" ".repeat(usize::try_from(n).unwrap_or(0).min(64))),
                (None, Some(s)) => Some(s.to_string()),
                _ => return Err(invalid(format!("tojson: indent must be an integer or a string, not {}", v.kind()))),
            },
        };
        let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
            Some(v) if !v.is_none() => {
                let parts: Vec<Value> = v.try_iter()?.collect();
                match parts.as_slice() {
                    [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                        (a.as_str().unwrap_or_default().to_string(), b.as_str().unwrap_or_default().to_string())
                    }
                    _ => return Err(invalid("tojson: separators must be a pair of strings")),
                }
            }
            _ => (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string()),
        };
        kwargs.assert_all_used()?;
        Ok(JsonStyle { ensure_ascii, indent, item_sep, key_sep, sort_keys })
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !(' '..='~').contains(&c)) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{u:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    /// A line break plus the indentation of `depth`, when indenting.
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    /// `items` as a JSON array (`keys` none) or object, each item written by `write`.
    fn container(
        &self,
        open: char,
        close: char,
        n: usize,
        depth: usize,
        out: &mut String,
        mut write: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            self.newline(depth + 1, out);
            write(i, out)?;
        }
        self.newline(depth, out);
        out.push(close);
        Ok(())
    }

    fn value(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
        if depth > 512 {
            return Err(invalid("tojson: value nested deeper than 512"));
        }
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => number(v, true, out),
            ValueKind::String => self.string(v.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container('[', ']', items.len(), depth, out, |i, out| self.value(&items[i], depth + 1, out))?;
            }
            ValueKind::Map => {
                let mut items: Vec<(String, Value)> = Vec::new();
                for k in v.try_iter()? {
                    let key = match k.kind() {
                        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
                        ValueKind::Number | ValueKind::Bool | ValueKind::None => {
                            let mut s = String::new();
                            // json.dumps turns True / None keys into "true" / "null".
                            if k.kind() == ValueKind::Number {
                                number(&k, true, &mut s)
                            } else {
                                s.push_str(if k.is_none() {
                                    "null"
                                } else if k.is_true() {
                                    "true"
                                } else {
                                    "false"
                                })
                            }
                            s
                        }
                        kind => return Err(invalid(format!("tojson: keys must be str, int, float, bool or None, not {kind}"))),
                    };
                    let val = v.get_item(&k)?;
                    items.push((key, val));
                }
                if self.sort_keys {
                    items.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.container('{', '}', items.len(), depth, out, |i, out| {
                    self.string(&items[i].0, out);
                    out.push_str(&self.key_sep);
                    self.value(&items[i].1, depth + 1, out)
                })?;
            }
            kind => return Err(invalid(format!("tojson: object of type {kind} is not JSON serializable"))),
        }
        Ok(())
    }
}

/// A number as Python writes it: `repr` of an int or float (`1.0`, `1e+20`, `inf`), or in JSON
/// (`Infinity`, `NaN`).
fn number(v: &Value, json: bool, out: &mut String) {
    if let Some(i) = v.as_i64().filter(|_| v.is_integer()) {
        let _ = write!(out, "{i}");
        return;
    }
    let Ok(f) = f64::try_from(v.clone()) else {
        let _ = write!(out, "{v}");
        return;
    };
    if f.is_nan() {
        out.push_str(if json { "NaN" } else { "nan" });
    } else if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        out.push_str(if f < 0.0 { "-" } else { "" });
        out.push_str(s);
    } else if f != 0.0 && (f.abs() >= 1e16 || f.abs() < 1e-4) {
        // Python's repr switches to exponent form outside [1e-4, 1e16): `1e+20`, `1.5e-05`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let _ = write!(out, "{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else {
        let _ = write!(out, "{f:?}");
    }
}

/// transformers' `tojson` filter.
pub fn tojson(state: &State, value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let style = JsonStyle::from_kwargs(&kwargs)?;
    if value.is_undefined() {
        return Err(invalid("tojson: object of type Undefined is not JSON serializable"));
    }
    let mut out = String::new();
    style.value(value, 0, &mut out)?;
    state.consume_fuel((out.len() / BYTES_PER_FUEL) as u64)?;
    Ok(Value::from(out))
}

/// Python's `repr` of a string: single quotes unless the text has `'` and no `"`.
fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str(v)` (`repr` inside containers, where strings get quotes).
fn python_str(v: &Value, inner: bool, depth: usize, out: &mut String) -> Result<(), Error> {
    if depth > 512 {
        return Err(invalid("value nested deeper than 512"));
    }
    match v.kind() {
        ValueKind::Undefined if !inner => {}
        ValueKind::None | ValueKind::Undefined => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => number(v, false, out),
        ValueKind::String if inner => repr_str(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                out.push_str(if i > 0 { ", " } else { "" });
                python_str(&item, true, depth + 1, out)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter()?.enumerate() {
                out.push_str(if i > 0 { ", " } else { "" });
                python_str(&k, true, depth + 1, out)?;
                out.push_str(": ");
                python_str(&v.get_item(&k)?, true, depth + 1, out)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
    Ok(())
}

/// The formatter of `{{ ... }}`: Python's `str` of the value.
pub fn format(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    let mut s = String::new();
    python_str(value, false, 0, &mut s)?;
    if matches!(value.kind(), ValueKind::Seq | ValueKind::Map) {
        state.consume_fuel((s.len() / BYTES_PER_FUEL) as u64)?;
    }
    out.write_str(&s).map_err(Error::from)
}

/// `strftime_now(fmt)` at `now` (UTC): C `strftime` specifiers as Python's `datetime.strftime`.
pub fn strftime(now: chrono::DateTime<chrono::Utc>, fmt: &str) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item> = StrftimeItems::new(fmt).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(invalid(format!("strftime_now: unsupported format {fmt:?}")));
    }
    let mut s = String::new();
    write!(s, "{}", now.format_with_items(items.into_iter())).map_err(|_| invalid(format!("strftime_now: cannot format {fmt:?}")))?;
    Ok(s)
}

/// Jinja2's `is iterable`: Python's `iter()` takes it (strings, lists, dicts, and Jinja's
/// Undefined), where minijinja also counts none.
pub fn is_iterable(v: &Value) -> bool {
    match v.kind() {
        ValueKind::Undefined | ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => true,
        ValueKind::Plain => v.try_iter().is_ok(),
        _ => false,
    }
}

/// Jinja2's `is sequence`: the value has `len()` and `[]` (strings, lists, dicts, Undefined),
/// where minijinja counts lists only.
pub fn is_sequence(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Undefined | ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map)
}

/// Jinja2's `is number`: Python's `numbers.Number`, which takes `True` and `False` too.
pub fn is_number(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Number | ValueKind::Bool)
}

/// `source` with transformers' `{% generation %}` ... `{% endgeneration %}` (its
/// `AssistantTracker` extension, which marks the assistant's tokens and renders the body
/// unchanged) written as `{% if true %}` ... `{% endif %}`: a block tag like it, so `trim_blocks`,
/// `lstrip_blocks` and `-` / `+` act on it the same way. Text outside tags is left alone.
pub fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        let (before, tag) = rest.split_at(at);
        out.push_str(before);
        let inner = &tag[2..];
        let body = inner.strip_prefix(['-', '+']).unwrap_or(inner);
        let name_at = body.len() - body.trim_start().len();
        let name: String = body[name_at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let after = body[name_at + name.len()..].trim_start();
        let after = after.strip_prefix(['-', '+']).unwrap_or(after);
        let replacement = match name.as_str() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) if after.starts_with("%}") => {
                let head = 2 + (inner.len() - body.len()) + name_at;
                out.push_str(&tag[..head]);
                out.push_str(r);
                rest = &tag[head + name.len()..];
            }
            _ => {
                out.push_str("{%");
                rest = inner;
            }
        }
    }
    out.push_str(rest);
    out
}
