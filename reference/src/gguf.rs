//! GGUF v2/v3 reader (memory-mapped) and a small writer used by tests and tools.
//!
//! File layout (all little-endian):
//! ```text
//! magic "GGUF" | version u32 | n_tensors u64 | n_kv u64
//! n_kv × (key: string, type: u32, value)            string = u64 len + UTF-8 bytes
//! n_tensors × (name: string, n_dims u32, dims u64 × n_dims (ne0 = fastest), type u32, offset u64)
//! padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
//! ```
//! Every count and length read from the header is checked against the bytes that remain
//! before anything is allocated, so a lying header yields an error, never a huge allocation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::dequant::GgmlType;
use crate::error::{Error, Result};

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// More dimensions than this is certainly a corrupt file.
const MAX_DIMS: u32 = 8;
/// ggml type id of MXFP4 (`GGML_TYPE_MXFP4`: GPT-OSS's experts), 32 values in 17 bytes
/// ([`crate::quant::mxfp4::from_ggml`] has the layout). Not a [`GgmlType`], which callers match
/// exhaustively: such tensors are listed in [`GgufFile::mxfp4_tensors`], read raw with
/// [`GgufFile::mxfp4_info`] / [`GgufFile::tensor_bytes_at`] and dequantized by
/// [`GgufFile::tensor_f32`] like any other.
pub const GGML_TYPE_MXFP4: u32 = 39;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    fn type_id(&self) -> u32 {
        match self {
            Value::U8(_) => 0,
            Value::I8(_) => 1,
            Value::U16(_) => 2,
            Value::I16(_) => 3,
            Value::U32(_) => 4,
            Value::I32(_) => 5,
            Value::F32(_) => 6,
            Value::Bool(_) => 7,
            Value::String(_) => 8,
            Value::Array(_) => 9,
            Value::U64(_) => 10,
            Value::I64(_) => 11,
            Value::F64(_) => 12,
        }
    }
    /// Any integer type as u64 (negative values are `None`).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's header entry.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// Row-major shape (outermost first), i.e. ggml's `ne` reversed: a weight `[out, in]`.
    pub shape: Vec<usize>,
    pub ty: GgmlType,
    /// Absolute byte range in the file.
    pub start: usize,
    pub len: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A tensor stored as ggml MXFP4 ([`GGML_TYPE_MXFP4`]).
#[derive(Debug, Clone)]
pub struct Mxfp4TensorInfo {
    pub name: String,
    /// Row-major shape (outermost first); the last dimension is a multiple of 32.
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: usize,
    pub len: usize,
}

/// An opened GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    /// Tensors of type [`GGML_TYPE_MXFP4`] (not in `tensors`).
    pub mxfp4_tensors: Vec<Mxfp4TensorInfo>,
    /// Hand out tensors holding NaN or ±Inf (`--allow-nonfinite`); by default loading one is an
    /// error naming it ([`crate::finite`]).
    pub allow_nonfinite: bool,
    index: BTreeMap<String, usize>,
    mxfp4_index: BTreeMap<String, usize>,
    mmap: Mmap,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn err(&self, what: &str) -> Error {
        Error::format(self.path, format!("{what} (at byte {} of {})", self.pos, self.buf.len()))
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err(&format!("truncated while reading {what}: need {n} bytes")));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }
    /// A count that must leave at least `min_each` bytes per item in the file.
    fn count(&mut self, min_each: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let fits = (n as u128) * (min_each.max(1) as u128) <= self.remaining() as u128;
        if !fits {
            return Err(self.err(&format!("{what} = {n} cannot fit in the file")));
        }
        Ok(n as usize)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.count(1, &format!("{what} length"))?;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| self.err(&format!("{what} is not UTF-8")))
    }
    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.arr::<1>(key)?[0]),
            1 => Value::I8(self.arr::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.arr(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.arr(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.arr(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.arr(key)?)),
            7 => match self.arr::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.err(&format!("key `{key}`: bool byte {b}"))),
            },
            8 => Value::String(self.string(key)?),
            9 => {
                if depth > 2 {
                    return Err(self.err(&format!("key `{key}`: arrays nested too deep")));
                }
                let ety = self.u32(key)?;
                let min = match ety {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8..=12 => 8,
                    _ => return Err(self.err(&format!("key `{key}`: unknown array element type {ety}"))),
                };
                let n = self.count(min, &format!("key `{key}` array count"))?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.value(ety, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.arr(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.arr(key)?)),
            t => return Err(self.err(&format!("key `{key}`: unknown value type {t}"))),
        })
    }
}

impl GgufFile {
    /// Open and validate a GGUF file: header, metadata, tensor table and every tensor's byte range.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        crate::loader::require_regular_file(&path)?;
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < 24 {
            return Err(Error::format(&path, format!("file is {len} bytes: too short for a GGUF header")));
        }
        // SAFETY: the file is opened read-only; tandem never writes model files while they are mapped.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let (version, metadata, tensors, mxfp4_tensors) = parse(&mmap, &path)?;
        let mut index = BTreeMap::new();
        for (i, t) in tensors.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(Error::tensor(&path, &t.name, "appears twice in the tensor table"));
            }
        }
        let mut mxfp4_index = BTreeMap::new();
        for (i, t) in mxfp4_tensors.iter().enumerate() {
            if index.contains_key(&t.name) || mxfp4_index.insert(t.name.clone(), i).is_some() {
                return Err(Error::tensor(&path, &t.name, "appears twice in the tensor table"));
            }
        }
        Ok(GgufFile { path, version, metadata, tensors, mxfp4_tensors, allow_nonfinite: false, index, mxfp4_index, mmap })
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }
    fn key_err(&self, key: &str, msg: &str) -> Error {
        Error::key(&self.path, key, msg)
    }
    /// An error about metadata key `key` of this file.
    pub fn key_error(&self, key: &str, msg: impl Into<String>) -> Error {
        Error::key(&self.path, key, msg)
    }
    pub fn req(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| self.key_err(key, "missing"))
    }
    pub fn u64(&self, key: &str) -> Result<u64> {
        self.req(key)?.as_u64().ok_or_else(|| self.key_err(key, "not a non-negative integer"))
    }
    pub fn f64(&self, key: &str) -> Result<f64> {
        self.req(key)?.as_f64().ok_or_else(|| self.key_err(key, "not a number"))
    }
    pub fn str(&self, key: &str) -> Result<&str> {
        self.req(key)?.as_str().ok_or_else(|| self.key_err(key, "not a string"))
    }
    pub fn array(&self, key: &str) -> Result<&[Value]> {
        self.req(key)?.as_array().ok_or_else(|| self.key_err(key, "not an array"))
    }
    pub fn str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key)?.iter().map(|v| v.as_str().ok_or_else(|| self.key_err(key, "array element is not a string"))).collect()
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }
    /// Raw bytes of a tensor (range validated at open).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        &self.mmap[info.start..info.start + info.len]
    }
    /// An MXFP4 ([`GGML_TYPE_MXFP4`]) tensor's header entry.
    pub fn mxfp4_info(&self, name: &str) -> Option<&Mxfp4TensorInfo> {
        self.mxfp4_index.get(name).map(|&i| &self.mxfp4_tensors[i])
    }
    /// Raw bytes of the absolute range `start .. start + len` (an MXFP4 tensor's, validated at open).
    pub fn tensor_bytes_at(&self, start: usize, len: usize) -> &[u8] {
        &self.mmap[start..start + len]
    }
    /// Dequantize a tensor to f32, checking its row-major shape against `want` (if given).
    pub fn tensor_f32(&self, name: &str, want: Option<&[usize]>) -> Result<(Vec<usize>, Vec<f32>)> {
        if let Some(m) = self.mxfp4_info(name) {
            if let Some(w) = want.filter(|w| *w != m.shape) {
                return Err(Error::tensor(&self.path, name, format!("shape {:?}, expected {:?}", m.shape, w)));
            }
            let in_dim = m.shape.last().copied().unwrap_or(0);
            let rows = m.shape.iter().product::<usize>() / in_dim.max(1);
            let w = crate::quant::mxfp4::from_ggml(name, rows, in_dim, self.tensor_bytes_at(m.start, m.len))
                .map_err(|e| Error::tensor(&self.path, name, e.to_string()))?;
            return Ok((m.shape.clone(), crate::quant::mxfp4::dequant(&w)));
        }
        let info = self.tensor_info(name).ok_or_else(|| Error::tensor(&self.path, name, "missing"))?;
        if let Some(w) = want {
            if info.shape != w {
                return Err(Error::tensor(&self.path, name, format!("shape {:?}, expected {:?}", info.shape, w)));
            }
        }
        let bytes = self.tensor_bytes(info);
        self.check_finite(name, crate::weights::RawDtype::of(info.ty), bytes)?;
        let out = crate::dequant::dequantize_par(info.ty, bytes);
        Ok((info.shape.clone(), out))
    }

    /// An error naming tensor `name` if its stored `bytes` hold a NaN or infinity (unless
    /// [`GgufFile::allow_nonfinite`]).
    pub fn check_finite(&self, name: &str, dtype: crate::weights::RawDtype, bytes: &[u8]) -> Result<()> {
        if self.allow_nonfinite {
            return Ok(());
        }
        crate::finite::check(&self.path, name, dtype, bytes)
    }
}

type Parsed = (u32, BTreeMap<String, Value>, Vec<TensorInfo>, Vec<Mxfp4TensorInfo>);

fn parse(buf: &[u8], path: &Path) -> Result<Parsed> {
    let mut c = Cursor { buf, pos: 0, path };
    let magic = c.take(4, "magic")?;
    if magic != MAGIC {
        return Err(Error::format(path, format!("bad magic {magic:02x?}: not a GGUF file")));
    }
    let version = c.u32("version")?;
    if !(2..=3).contains(&version) {
        return Err(Error::format(path, format!("GGUF version {version} is not supported (2 and 3 are)")));
    }
    // Minimum sizes: a tensor entry is >= 8+4+4+8 bytes, a kv >= 8+4+1.
    let n_tensors = c.count(24, "tensor count")?;
    let n_kv = c.count(13, "metadata count")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let ty = c.u32(&key)?;
        let v = c.value(ty, &key, 0)?;
        // Last-wins would let a second copy of a key silently override the first.
        if metadata.contains_key(&key) {
            return Err(Error::key(path, key, "appears twice in the metadata"));
        }
        metadata.insert(key, v);
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => match v.as_u64() {
            Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
            _ => return Err(Error::key(path, "general.alignment", format!("{v:?} is not a power of two"))),
        },
    };
    let mut raw = Vec::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = c.string("tensor name")?;
        let n_dims = c.u32(&name)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(Error::tensor(path, &name, format!("{n_dims} dimensions")));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(c.u64(&name)?);
        }
        let ty_id = c.u32(&name)?;
        let offset = c.u64(&name)?;
        raw.push((name, ne, ty_id, offset));
    }
    let data_start = (c.pos as u64).div_ceil(alignment) * alignment;
    let file_len = buf.len() as u64;
    let mut tensors = Vec::with_capacity(raw.len());
    let mut mxfp4_tensors = Vec::new();
    for (name, ne, ty_id, offset) in raw {
        // (type, elements per block, bytes per block, name); `None` type: MXFP4.
        let (ty, block_elems, block_bytes, ty_name) = match GgmlType::from_id(ty_id) {
            Some(t) => (Some(t), t.block_elems(), t.block_bytes(), t.name()),
            None if ty_id == GGML_TYPE_MXFP4 => (None, crate::quant::mxfp4::BLOCK, crate::quant::mxfp4::GGML_BLOCK_BYTES, "MXFP4"),
            None => return Err(Error::tensor(path, &name, crate::ggml::unsupported_type(ty_id))),
        };
        // ggml quantizes row by row: a row (ne0) must be a whole number of blocks.
        if ne[0] % block_elems as u64 != 0 {
            return Err(Error::tensor(path, &name, format!("rows of {} elements are not a whole number of {ty_name} blocks", ne[0])));
        }
        let numel = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let bytes = numel
            .and_then(|n| (n / block_elems as u64).checked_mul(block_bytes as u64))
            .ok_or_else(|| Error::tensor(path, &name, format!("dims {ne:?} are not a whole number of {ty_name} blocks")))?;
        let start = data_start.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(bytes));
        match (start, end) {
            (Some(s), Some(e)) if e <= file_len => {
                if offset % alignment != 0 {
                    return Err(Error::tensor(path, &name, format!("offset {offset} is not aligned to {alignment}")));
                }
                let shape = ne.iter().rev().map(|&d| d as usize).collect();
                let (start, len) = (s as usize, bytes as usize);
                match ty {
                    Some(ty) => tensors.push(TensorInfo { name, shape, ty, start, len }),
                    None => mxfp4_tensors.push(Mxfp4TensorInfo { name, shape, start, len }),
                }
            }
            _ => {
                return Err(Error::tensor(
                    path,
                    &name,
                    format!("data [{offset}+{bytes}) runs past the end of the file ({file_len} bytes): truncated?"),
                ))
            }
        }
    }
    Ok((version, metadata, tensors, mxfp4_tensors))
}

/// Builds GGUF v3 files: used by tests (round trips, corrupt files) and `tandem` tools.
#[derive(Default)]
pub struct GgufWriter {
    kv: Vec<(String, Value)>,
    /// (name, row-major shape, ggml type id, bytes)
    tensors: Vec<(String, Vec<usize>, u32, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn kv(&mut self, key: &str, v: Value) -> &mut Self {
        self.kv.push((key.to_string(), v));
        self
    }
    /// Add a tensor with row-major `shape` from f32 data, stored as `ty`.
    pub fn tensor(&mut self, name: &str, shape: &[usize], ty: GgmlType, data: &[f32]) -> &mut Self {
        let bytes = crate::dequant::quantize(ty, data);
        self.tensors.push((name.to_string(), shape.to_vec(), ty.id(), bytes));
        self
    }
    /// Add a tensor with row-major `shape` from bytes already in ggml type `type_id` (e.g.
    /// [`GGML_TYPE_MXFP4`] from [`crate::quant::mxfp4::to_ggml`]); the bytes are not checked.
    pub fn tensor_raw(&mut self, name: &str, shape: &[usize], type_id: u32, bytes: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), shape.to_vec(), type_id, bytes));
        self
    }
    fn put_str(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    fn put_value(out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::U8(x) => out.push(*x),
            Value::I8(x) => out.push(*x as u8),
            Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::Bool(x) => out.push(*x as u8),
            Value::String(s) => Self::put_str(out, s),
            Value::Array(a) => {
                let ety = a.first().map_or(4, Value::type_id);
                out.extend_from_slice(&ety.to_le_bytes());
                out.extend_from_slice(&(a.len() as u64).to_le_bytes());
                a.iter().for_each(|x| Self::put_value(out, x));
            }
            Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        }
    }
    /// Arrays must hold one element type (GGUF stores it once per array).
    fn check_array(key: &str, v: &Value) -> Result<()> {
        if let Value::Array(a) = v {
            if let Some(first) = a.first() {
                if a.iter().any(|x| x.type_id() != first.type_id()) {
                    return Err(Error::Input(format!("GGUF key `{key}`: array mixes element types")));
                }
            }
            a.iter().try_for_each(|x| Self::check_array(key, x))?;
        }
        Ok(())
    }
    /// Serialize to bytes; fails on an array that mixes element types.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        for (k, v) in &self.kv {
            Self::check_array(k, v)?;
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kv.len() as u64).to_le_bytes());
        for (k, v) in &self.kv {
            Self::put_str(&mut out, k);
            out.extend_from_slice(&v.type_id().to_le_bytes());
            Self::put_value(&mut out, v);
        }
        let align = DEFAULT_ALIGNMENT as usize;
        let mut offset = 0usize;
        for (name, shape, ty, bytes) in &self.tensors {
            Self::put_str(&mut out, name);
            out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            shape.iter().rev().for_each(|&d| out.extend_from_slice(&(d as u64).to_le_bytes()));
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += bytes.len().div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        for (_, _, _, bytes) in &self.tensors {
            out.extend_from_slice(bytes);
            out.resize(out.len().div_ceil(align) * align, 0);
        }
        Ok(out)
    }
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        std::fs::write(path.as_ref(), self.to_bytes()?).map_err(|e| Error::io(path.as_ref(), e))
    }
}
