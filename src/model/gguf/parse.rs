//! Parsing of the GGUF header, metadata and tensor infos from a byte slice, with every length checked.
//!
//! Layout (GGUF spec, versions 2 and 3, little-endian): magic `GGUF`, u32 version, u64 tensor count, u64 metadata
//! count, the metadata key/value pairs, the tensor infos, padding to `general.alignment`, then the tensor data.
//! Nothing here can read out of bounds (every read goes through [`Cursor::take`]) or allocate more than the file
//! could hold: each count is checked against the bytes left before anything is reserved for it, and what the parsed
//! values take in memory against [`MAX_PARSED_BYTES`](super::budget::MAX_PARSED_BYTES) (`budget.rs`).

use std::mem::size_of;

use super::budget::Budget;
use super::dtype::GgmlType;
use super::error::GgufError;
use super::value::{Array, Value, ValueType};

/// Metadata entries in one file. Real models have about 20 to 60; this leaves room for generous converters.
pub const MAX_METADATA_ENTRIES: u64 = 65_536;
/// Tensors in one file. The largest mixture-of-experts checkpoints have a few thousand.
pub const MAX_TENSORS: u64 = 65_536;
/// Elements in one metadata array. The largest vocabularies have ~260k tokens and ~500k merges; 64M keeps a
/// crafted count from asking for gigabytes while leaving two orders of magnitude of headroom.
pub const MAX_ARRAY_LEN: u64 = 64 * 1024 * 1024;
/// Bytes in one string. Chat templates are kilobytes; an embedded tokenizer.json is ~10 MB (ggml allows 1 GiB).
pub const MAX_STRING_LEN: u64 = 64 * 1024 * 1024;
/// Bytes in one metadata key. Real keys are under 100 bytes (`tokenizer.ggml.fim_pre_token_id`).
pub const MAX_KEY_LEN: u64 = 64 * 1024;
/// Nesting of arrays within arrays. Real files use one level; the cap bounds recursion depth.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Bytes in a tensor name. ggml allows 63; some converters write longer names, which we still accept.
pub const MAX_TENSOR_NAME_LEN: u64 = 1024;
/// The alignment of tensor data when `general.alignment` is absent (GGUF spec).
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// A bounds-checked little-endian reader over the file bytes, with the memory budget of what it parses.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    budget: Budget,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0, budget: Budget::new() }
    }

    /// Takes `count` items of `size` bytes from the memory budget, before they are allocated.
    pub fn reserve(&mut self, count: u64, size: usize, what: &'static str) -> Result<(), GgufError> {
        let offset = self.offset();
        self.budget.take_items(count, size, what, offset)
    }

    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated { offset: self.offset(), needed: n - self.remaining(), what });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes. Its bytes are taken from the budget (the `String` itself
    /// by whoever holds it: the array it is an element of, or the entry).
    pub fn string(&mut self, what: &'static str, max_len: u64) -> Result<String, GgufError> {
        let offset = self.offset();
        let len = self.u64(what)?;
        if len > max_len {
            return Err(GgufError::StringTooLong { len, max: max_len, offset });
        }
        self.budget.take(len, what, offset)?;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { offset, what }),
        }
    }

    /// Checks that `count` elements of at least `min_len` bytes each can fit in the rest of the file, so a
    /// crafted count fails here instead of reserving memory for elements that are not there.
    fn check_count(&self, what: &'static str, count: u64, max: u64, min_len: u64) -> Result<(), GgufError> {
        let offset = self.offset();
        if count > max {
            return Err(GgufError::TooMany { what, count, max, offset });
        }
        let needed = count.saturating_mul(min_len);
        if needed > self.remaining() {
            return Err(GgufError::Truncated { offset, needed: needed - self.remaining(), what });
        }
        Ok(())
    }
}

/// The fixed header.
pub struct Header {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata_count: u64,
}

pub fn parse_header(c: &mut Cursor<'_>) -> Result<Header, GgufError> {
    let magic: [u8; 4] = c.array("magic")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => return Err(GgufError::BigEndian),
        v => return Err(GgufError::UnsupportedVersion { version: v }),
    }
    let tensor_count = c.u64("tensor count")?;
    let metadata_count = c.u64("metadata count")?;
    if tensor_count > MAX_TENSORS {
        return Err(GgufError::TooMany { what: "tensor", count: tensor_count, max: MAX_TENSORS, offset: 8 });
    }
    if metadata_count > MAX_METADATA_ENTRIES {
        return Err(GgufError::TooMany {
            what: "metadata entry",
            count: metadata_count,
            max: MAX_METADATA_ENTRIES,
            offset: 16,
        });
    }
    Ok(Header { version, tensor_count, metadata_count })
}

/// One metadata entry: key, then type id, then value. An error in the value names the key.
pub fn parse_metadata_entry(c: &mut Cursor<'_>) -> Result<(String, Value), GgufError> {
    // The entry in the file-order list, and the key's copy in the index by name.
    c.reserve(1, size_of::<(String, Value)>() + size_of::<(String, usize)>(), "metadata entry")?;
    let key = c.string("metadata key", MAX_KEY_LEN)?;
    c.reserve(key.len() as u64, 1, "metadata key")?;
    match parse_value(c, 0) {
        Ok(value) => Ok((key, value)),
        Err(source) => Err(GgufError::InMetadata { key, source: Box::new(source) }),
    }
}

fn parse_value_type(c: &mut Cursor<'_>) -> Result<ValueType, GgufError> {
    let offset = c.offset();
    let id = c.u32("value type")?;
    ValueType::from_id(id).ok_or(GgufError::UnknownValueType { id, offset })
}

fn parse_value(c: &mut Cursor<'_>, depth: usize) -> Result<Value, GgufError> {
    let t = parse_value_type(c)?;
    parse_value_of_type(c, t, depth)
}

fn parse_value_of_type(c: &mut Cursor<'_>, t: ValueType, depth: usize) -> Result<Value, GgufError> {
    Ok(match t {
        ValueType::U8 => Value::U8(c.array::<1>("u8")?[0]),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array("i8")?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array("u16")?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array("i16")?)),
        ValueType::U32 => Value::U32(c.u32("u32")?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array("i32")?)),
        ValueType::U64 => Value::U64(c.u64("u64")?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array("i64")?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array("f32")?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array("f64")?)),
        ValueType::Bool => Value::Bool(parse_bool(c)?),
        ValueType::String => Value::String(c.string("string value", MAX_STRING_LEN)?),
        // Nested arrays are elements of their parent's `Vec<Array>`, charged there; a top-level one is the entry's.
        ValueType::Array => Value::Array(parse_array(c, depth + 1)?),
    })
}

fn parse_bool(c: &mut Cursor<'_>) -> Result<bool, GgufError> {
    let offset = c.offset();
    match c.array::<1>("bool")?[0] {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::InvalidBool { byte, offset }),
    }
}

fn parse_array(c: &mut Cursor<'_>, depth: usize) -> Result<Array, GgufError> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep { depth, offset: c.offset() });
    }
    let t = parse_value_type(c)?;
    let count = c.u64("array length")?;
    c.check_count("array element", count, MAX_ARRAY_LEN, t.min_encoded_len())?;
    c.reserve(count, element_size(t), array_name(t))?;
    let n = count as usize;
    // Scalars are read straight from their bytes; the count check above bounds every allocation here.
    fn scalars<T, const N: usize>(
        c: &mut Cursor<'_>,
        n: usize,
        what: &'static str,
        f: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        let bytes = c.take((n * N) as u64, what)?;
        Ok(bytes
            .chunks_exact(N)
            .map(|b| {
                let mut a = [0u8; N];
                a.copy_from_slice(b);
                f(a)
            })
            .collect())
    }
    // Reserved at their final size: collecting `Result`s into a `Vec` grows it by doubling, up to twice the memory
    // the budget counted.
    fn each<T>(
        c: &mut Cursor<'_>,
        n: usize,
        mut read: impl FnMut(&mut Cursor<'_>) -> Result<T, GgufError>,
    ) -> Result<Vec<T>, GgufError> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(read(c)?);
        }
        Ok(out)
    }
    Ok(match t {
        ValueType::U8 => Array::U8(c.take(count, "u8 array")?.to_vec()),
        ValueType::I8 => Array::I8(scalars(c, n, "i8 array", i8::from_le_bytes)?),
        ValueType::U16 => Array::U16(scalars(c, n, "u16 array", u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(scalars(c, n, "i16 array", i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(scalars(c, n, "u32 array", u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(scalars(c, n, "i32 array", i32::from_le_bytes)?),
        ValueType::U64 => Array::U64(scalars(c, n, "u64 array", u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(scalars(c, n, "i64 array", i64::from_le_bytes)?),
        ValueType::F32 => Array::F32(scalars(c, n, "f32 array", f32::from_le_bytes)?),
        ValueType::F64 => Array::F64(scalars(c, n, "f64 array", f64::from_le_bytes)?),
        ValueType::Bool => Array::Bool(each(c, n, parse_bool)?),
        ValueType::String => Array::String(each(c, n, |c| c.string("string array element", MAX_STRING_LEN))?),
        ValueType::Array => Array::Array(each(c, n, |c| parse_array(c, depth + 1))?),
    })
}

/// What an array of `t` is called in errors.
fn array_name(t: ValueType) -> &'static str {
    match t {
        ValueType::U8 => "array of u8",
        ValueType::I8 => "array of i8",
        ValueType::U16 => "array of u16",
        ValueType::I16 => "array of i16",
        ValueType::U32 => "array of u32",
        ValueType::I32 => "array of i32",
        ValueType::U64 => "array of u64",
        ValueType::I64 => "array of i64",
        ValueType::F32 => "array of f32",
        ValueType::F64 => "array of f64",
        ValueType::Bool => "array of bools",
        ValueType::String => "array of strings",
        ValueType::Array => "array of arrays",
    }
}

/// The memory one array element of type `t` takes parsed (a string's bytes and a nested array's elements are
/// charged when read).
fn element_size(t: ValueType) -> usize {
    match t {
        ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
        ValueType::U16 | ValueType::I16 => 2,
        ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
        ValueType::U64 | ValueType::I64 | ValueType::F64 => 8,
        ValueType::String => size_of::<String>(),
        ValueType::Array => size_of::<Array>(),
    }
}

/// A tensor info as written in the file, before its data range is validated.
pub struct RawTensorInfo {
    pub name: String,
    pub shape: Vec<u64>,
    pub type_id: u32,
    /// Offset relative to the start of the data section.
    pub offset: u64,
}

pub fn parse_tensor_info(c: &mut Cursor<'_>) -> Result<RawTensorInfo, GgufError> {
    // The info in the raw list and the validated one, and the name's copy in the index by name.
    let per_tensor = size_of::<RawTensorInfo>() + size_of::<super::TensorInfo>() + size_of::<(String, usize)>();
    c.reserve(1, per_tensor, "tensor info")?;
    let name = c.string("tensor name", MAX_TENSOR_NAME_LEN)?;
    c.reserve(name.len() as u64 * 2, 1, "tensor name")?;
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDimensions { tensor: name, n_dims });
    }
    c.reserve(u64::from(n_dims), size_of::<u64>(), "tensor shape")?;
    let shape = (0..n_dims).map(|_| c.u64("tensor dimension")).collect::<Result<Vec<_>, _>>()?;
    let type_id = c.u32("tensor type")?;
    let offset = c.u64("tensor offset")?;
    Ok(RawTensorInfo { name, shape, type_id, offset })
}

/// The checks that turn a raw tensor info into a usable one: known type, sane shape, whole blocks per row.
/// Returns the type and the size of the data in bytes.
pub fn check_tensor_shape(raw: &RawTensorInfo) -> Result<(GgmlType, u64), GgufError> {
    let dtype = GgmlType::from_id(raw.type_id)
        .ok_or_else(|| GgufError::UnknownTensorType { tensor: raw.name.clone(), id: raw.type_id })?;
    let overflow = || GgufError::ShapeOverflow { tensor: raw.name.clone() };
    // ggml stores dimensions as int64_t: anything above i64::MAX is a negative size there.
    if raw.shape.iter().any(|&d| d > i64::MAX as u64) {
        return Err(overflow());
    }
    let n_elements = raw.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(overflow)?;
    if n_elements > i64::MAX as u64 {
        return Err(overflow());
    }
    let row_len = raw.shape.first().copied().unwrap_or(1);
    if row_len % dtype.block_len() != 0 {
        return Err(GgufError::RowNotBlockAligned { tensor: raw.name.clone(), dtype, row_len });
    }
    let size = (n_elements / dtype.block_len()).checked_mul(dtype.block_bytes()).ok_or_else(overflow)?;
    Ok((dtype, size))
}
