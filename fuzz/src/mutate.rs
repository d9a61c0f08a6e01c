//! Mutations: byte-level havoc (bit flips, boundary values, deletions, insertions, splices,
//! truncation), integer fields overwritten with boundary values, and JSON-aware edits (values
//! swapped, replaced with edge cases, keys dropped or added, subtrees spliced).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

/// Integers that sit on a boundary somewhere: zero, one, sign bits, all ones of each width.
pub const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    16,
    24,
    31,
    32,
    33,
    64,
    127,
    128,
    255,
    256,
    1023,
    4096,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    1 << 40,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// A seeded source of mutations. The same seed gives the same sequence of mutants.
pub struct Mutator {
    rng: ChaCha8Rng,
    /// Tokens of the input's format, inserted or substituted as whole pieces.
    dict: &'static [&'static str],
}

impl Mutator {
    pub fn new(seed: u64, dict: &'static [&'static str]) -> Self {
        Mutator { rng: ChaCha8Rng::seed_from_u64(seed), dict }
    }

    /// Use `dict` for token insertions from now on (each target sets its own).
    pub fn set_dict(&mut self, dict: &'static [&'static str]) {
        self.dict = dict;
    }

    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    /// A uniform index below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.rng.random_range(0..n.max(1))
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u32) -> bool {
        self.rng.random_ratio(1, n.max(1))
    }

    /// A boundary value, sometimes moved by one, or `near` (a value already in the input)
    /// doubled, halved or moved by a little.
    pub fn boundary(&mut self, near: u64) -> u64 {
        let base = match self.below(4) {
            0 => near,
            _ => INTERESTING[self.below(INTERESTING.len())],
        };
        match self.below(6) {
            0 => base.wrapping_add(1),
            1 => base.wrapping_sub(1),
            2 if base == near => near.wrapping_mul(2),
            3 if base == near => near / 2,
            _ => base,
        }
    }

    fn dict_token(&mut self) -> Option<&'static str> {
        (!self.dict.is_empty()).then(|| self.dict[self.below(self.dict.len())])
    }

    /// Overwrite the `width`-byte little-endian integer at `at` (which must fit) with a
    /// boundary value.
    pub fn overwrite_int(&mut self, data: &mut [u8], at: usize, width: usize) {
        let mut cur = [0u8; 8];
        cur[..width].copy_from_slice(&data[at..at + width]);
        let v = self.boundary(u64::from_le_bytes(cur));
        data[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }

    /// One to four random byte-level edits of `data`, `corpus` giving pieces to splice in.
    pub fn havoc(&mut self, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        let rounds = 1 + self.below(4);
        for _ in 0..rounds {
            self.havoc_once(data, corpus);
        }
    }

    fn havoc_once(&mut self, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
        let len = data.len();
        match self.below(12) {
            0 if len > 0 => {
                let i = self.below(len);
                data[i] ^= 1 << self.below(8);
            }
            1 if len > 0 => {
                let i = self.below(len);
                data[i] = self.rng.random();
            }
            2 if len > 0 => {
                let i = self.below(len);
                data[i] = [0u8, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'}', b'%', b'0'][self.below(10)];
            }
            3 if len >= 8 => {
                let width = [2, 4, 8][self.below(3)];
                let at = self.below(len - width + 1);
                self.overwrite_int(data, at, width);
            }
            4 if len > 0 => {
                // Delete a range: mostly short, sometimes most of the input.
                let at = self.below(len);
                let n = 1 + if self.one_in(8) { self.below(len - at) } else { self.below((len - at).min(16)) };
                data.drain(at..at + n);
            }
            5 => {
                let at = self.below(len + 1);
                let n = 1 + self.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.random()).collect();
                data.splice(at..at, bytes);
            }
            6 if len > 0 => {
                // Copy a piece of the input somewhere else in it.
                let from = self.below(len);
                let n = 1 + self.below((len - from).min(64));
                let piece = data[from..from + n].to_vec();
                let at = self.below(len + 1);
                data.splice(at..at, piece);
            }
            7 if len > 0 => {
                let at = self.below(len);
                data.truncate(at);
            }
            8 if !corpus.is_empty() => {
                // Splice: this input's head, another input's tail.
                let other = &corpus[self.below(corpus.len())];
                let at = self.below(len + 1);
                let from = self.below(other.len() + 1);
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            9 | 10 => {
                if let Some(tok) = self.dict_token() {
                    let at = self.below(len + 1);
                    if self.one_in(2) || len == 0 {
                        data.splice(at..at, tok.bytes());
                    } else {
                        let end = (at + tok.len()).min(len);
                        data.splice(at..end, tok.bytes());
                    }
                }
            }
            _ if len > 0 => {
                let i = self.below(len);
                data[i] = data[i].wrapping_add(self.rng.random_range(1..=35) as u8).wrapping_sub(18);
            }
            _ => data.push(self.rng.random()),
        }
    }

    /// A JSON value that sits on an edge: empty and huge strings, extreme numbers, wrong types.
    pub fn edge_value(&mut self) -> Value {
        match self.below(14) {
            0 => Value::Null,
            1 => Value::Bool(self.one_in(2)),
            2 => Value::from(-1),
            3 => Value::from(self.boundary(0)),
            4 => Value::from(i64::MIN),
            5 => Value::from([1e308, -1e308, 0.5, -0.0, 1e-45, 3.4e38, 4294967296.5][self.below(7)]),
            6 => Value::from(""),
            7 => Value::from("a".repeat(1 + self.below(4096))),
            8 => Value::Array(vec![]),
            9 => Value::Object(serde_json::Map::new()),
            10 => Value::from("\u{0}\u{ffff}\u{10ffff}é\n"),
            _ => match self.dict_token() {
                Some(t) => Value::from(t),
                None => Value::from("x"),
            },
        }
    }

    /// One JSON-aware edit of `v`; `donors` are other documents to take subtrees from.
    pub fn json(&mut self, v: &mut Value, donors: &[Value]) {
        let n = count_nodes(v);
        let k = self.below(n);
        let donor = match donors.len() {
            0 => None,
            d => {
                let doc = &donors[self.below(d)];
                let i = self.below(count_nodes(doc));
                nth_node(doc, i).cloned()
            }
        };
        let op = self.below(8);
        let fresh = self.edge_value();
        let Some(node) = nth_node_mut(v, k) else { return };
        match (op, node) {
            (0 | 1, node) => *node = fresh,
            (2, node) => {
                if let Some(d) = donor {
                    *node = d;
                }
            }
            (3, Value::Object(map)) if !map.is_empty() => {
                let key = map.keys().nth(self.rng.random_range(0..map.len())).cloned().unwrap_or_default();
                map.remove(&key);
            }
            (3, Value::Array(a)) if !a.is_empty() => {
                let i = self.below(a.len());
                a.remove(i);
            }
            (4, Value::Object(map)) => {
                let key = self.dict_token().unwrap_or("x").to_string();
                map.insert(key, fresh);
            }
            (4, Value::Array(a)) => {
                let i = self.below(a.len() + 1);
                let item = if a.is_empty() || self.one_in(2) { fresh } else { a[self.below(a.len())].clone() };
                a.insert(i, item);
            }
            (5, Value::String(s)) => {
                let mut b = s.clone().into_bytes();
                self.havoc(&mut b, &[]);
                *s = String::from_utf8_lossy(&b).into_owned();
            }
            (5, node) if node.is_number() => {
                let near = node.as_u64().unwrap_or(0);
                *node = Value::from(self.boundary(near));
            }
            (6, Value::Array(a)) if a.len() > 1 => {
                let (i, j) = (self.below(a.len()), self.below(a.len()));
                a.swap(i, j);
            }
            (7, Value::Object(map)) if map.len() > 1 => {
                // Swap the values of two keys.
                let keys: Vec<String> = map.keys().cloned().collect();
                let (a, b) = (&keys[self.below(keys.len())], &keys[self.below(keys.len())]);
                let va = map.get(a).cloned().unwrap_or(Value::Null);
                let vb = map.insert(b.clone(), va).unwrap_or(Value::Null);
                map.insert(a.clone(), vb);
            }
            (_, node) => *node = fresh,
        }
    }

    /// Mutate `data` as JSON when it parses (sometimes followed by byte havoc), else as bytes.
    pub fn json_or_bytes(&mut self, data: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
        let parsed: Option<Value> = if self.one_in(4) { None } else { serde_json::from_slice(data).ok() };
        let Some(mut v) = parsed else {
            let mut out = data.to_vec();
            self.havoc(&mut out, corpus);
            return out;
        };
        let donors: Vec<Value> =
            if corpus.is_empty() { vec![] } else { serde_json::from_slice(&corpus[self.below(corpus.len())]).ok().into_iter().collect() };
        for _ in 0..1 + self.below(3) {
            self.json(&mut v, &donors);
        }
        let mut out = if self.one_in(2) { serde_json::to_vec(&v) } else { serde_json::to_vec_pretty(&v) }.unwrap_or_default();
        if self.one_in(8) {
            self.havoc(&mut out, corpus);
        }
        out
    }
}

/// Nodes of `v` in pre-order (the root included).
pub fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        Value::Object(m) => m.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// The `k`-th node of `v` in pre-order.
fn nth_node(v: &Value, k: usize) -> Option<&Value> {
    if k == 0 {
        return Some(v);
    }
    let mut k = k - 1;
    let children: Box<dyn Iterator<Item = &Value>> = match v {
        Value::Array(a) => Box::new(a.iter()),
        Value::Object(m) => Box::new(m.values()),
        _ => return None,
    };
    for c in children {
        let n = count_nodes(c);
        if k < n {
            return nth_node(c, k);
        }
        k -= n;
    }
    None
}

/// The `k`-th node of `v` in pre-order, mutable.
fn nth_node_mut(v: &mut Value, k: usize) -> Option<&mut Value> {
    if k == 0 {
        return Some(v);
    }
    let mut k = k - 1;
    let children: Box<dyn Iterator<Item = &mut Value>> = match v {
        Value::Array(a) => Box::new(a.iter_mut()),
        Value::Object(m) => Box::new(m.values_mut()),
        _ => return None,
    };
    for c in children {
        let n = count_nodes(c);
        if k < n {
            return nth_node_mut(c, k);
        }
        k -= n;
    }
    None
}
