//! GGUF reader: a model file (read into memory or memory-mapped, `LoadMode`) with its metadata and tensors,
//! validated once when it is opened.
//!
//! Reads GGUF versions 2 and 3 (little-endian). Opening checks the whole structure — magic, version, every
//! metadata value, every tensor info, alignment, and that each tensor's data lies inside the file — so that
//! later accessors can only fail on *what* the caller asks for (a missing key, a wrong type), never on a
//! malformed file. See `parse.rs` for the limits a crafted file is held to.

pub mod blocks;
mod budget;
pub mod coded;
pub mod dequantize;
pub mod dtype;
mod error;
pub mod iq4;
pub mod iq_grids;
pub mod kquants;
pub mod mxfp4;
mod parse;
mod source;
pub mod tensor;
pub mod value;
pub mod writer;

use std::path::Path;

use rustc_hash::FxHashMap;

pub use budget::MAX_PARSED_BYTES;
pub use dtype::GgmlType;
pub use error::GgufError;
pub use parse::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_KEY_LEN, MAX_METADATA_ENTRIES, MAX_STRING_LEN,
    MAX_TENSORS,
};
pub use tensor::{TensorInfo, TensorView};
pub use value::{Array, Value, ValueType};

use parse::Cursor;
use source::Source;
pub use source::{LoadMode, AUTO_MAP_BYTES};

use super::progress::LoadProgress;

/// An open GGUF file.
pub struct GgufFile {
    source: Source,
    version: u32,
    /// Metadata in file order.
    metadata: Vec<(String, Value)>,
    metadata_index: FxHashMap<String, usize>,
    /// Tensors in file order.
    tensors: Vec<TensorInfo>,
    tensor_index: FxHashMap<String, usize>,
    alignment: u64,
    /// Absolute offset of the tensor data section.
    data_offset: u64,
}

impl GgufFile {
    /// Brings in and validates the file at `path` ([`LoadMode::Auto`], the default).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        Self::open_with(path, LoadMode::default())
    }

    /// Brings in the file at `path` as `mode` says, and validates it.
    pub fn open_with(path: impl AsRef<Path>, mode: LoadMode) -> Result<Self, GgufError> {
        Self::open_reporting(path, mode, &mut LoadProgress::silent())
    }

    /// Like [`GgufFile::open_with`], reading advances `progress` (by the file's length in all, in
    /// [`LoadMode::Read`]; a map reads nothing); `GgufError::Cancelled` when its host cancels.
    pub fn open_reporting(
        path: impl AsRef<Path>,
        mode: LoadMode,
        progress: &mut LoadProgress<'_>,
    ) -> Result<Self, GgufError> {
        Self::from_source(Source::open(path.as_ref(), mode, progress)?)
    }

    /// Validates a file held in memory (copied into an aligned buffer).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, GgufError> {
        Self::from_source(Source::owned(bytes))
    }

    fn from_source(source: Source) -> Result<Self, GgufError> {
        let bytes = source.bytes();
        let mut c = Cursor::new(bytes);
        let header = parse::parse_header(&mut c)?;

        // Grown entry by entry rather than reserved from the header's counts: each entry is charged to the parse's
        // memory budget as it is read, and a count a small file cannot hold is refused before it costs anything.
        let mut metadata = Vec::new();
        let mut metadata_index = FxHashMap::default();
        for _ in 0..header.metadata_count {
            let (key, value) = parse::parse_metadata_entry(&mut c)?;
            if metadata_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::DuplicateKey { key });
            }
            metadata.push((key, value));
        }
        let alignment = match metadata_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(Value::U32(a)) => {
                return Err(GgufError::BadAlignment { detail: format!("{a} is not a power of two") })
            }
            Some(other) => {
                return Err(GgufError::BadAlignment { detail: format!("it is {}, expected a u32", other.describe()) })
            }
        };

        let mut raw_tensors = Vec::new();
        for _ in 0..header.tensor_count {
            raw_tensors.push(parse::parse_tensor_info(&mut c)?);
        }
        // The data section starts at the first multiple of the alignment after the tensor infos.
        let data_offset = c.offset().next_multiple_of(alignment);
        let file_len = bytes.len() as u64;

        let mut tensors = Vec::with_capacity(raw_tensors.len());
        let mut tensor_index = FxHashMap::default();
        // Where the next tensor's data must start, relative to the data section: each follows the one before,
        // padded to the alignment. So no two tensors share bytes, and the weights a file declares are at most its
        // size (the backends copy every matrix: overlapping tensors would let a small file ask for any amount).
        let mut expected_offset = 0u64;
        for raw in raw_tensors {
            let (dtype, size) = parse::check_tensor_shape(&raw)?;
            if raw.offset % alignment != 0 {
                return Err(GgufError::MisalignedTensor { tensor: raw.name, offset: raw.offset, alignment });
            }
            if raw.offset != expected_offset {
                return Err(GgufError::TensorOffset {
                    tensor: raw.name,
                    offset: raw.offset,
                    expected: expected_offset,
                });
            }
            let out_of_bounds =
                || GgufError::TensorOutOfBounds { tensor: raw.name.clone(), offset: raw.offset, size, file_len };
            let start = data_offset.checked_add(raw.offset).ok_or_else(out_of_bounds)?;
            let end = start.checked_add(size).ok_or_else(out_of_bounds)?;
            if end > file_len {
                return Err(out_of_bounds());
            }
            // Cannot overflow: `end` fits, and padding adds less than the alignment to a value below the file length.
            expected_offset = (raw.offset + size).next_multiple_of(alignment);
            if tensor_index.insert(raw.name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor { name: raw.name });
            }
            tensors.push(TensorInfo { name: raw.name, dtype, shape: raw.shape, offset: start, size });
        }

        Ok(GgufFile {
            version: header.version,
            metadata,
            metadata_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
            source,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the tensor data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The size of the file in bytes.
    pub fn file_len(&self) -> u64 {
        self.source.bytes().len() as u64
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { key: key.to_owned() })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType { key: key.to_owned(), expected, found: found.describe() }
    }

    fn integer<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T, GgufError> {
        let v = self.require(key)?;
        // Any integer type is accepted when the value fits: converters differ in the widths they write.
        v.as_i128().and_then(|i| T::try_from(i).ok()).ok_or_else(|| Self::wrong_type(key, expected, v))
    }

    /// An unsigned 32-bit integer (stored as any integer type that holds a value in range).
    pub fn u32(&self, key: &str) -> Result<u32, GgufError> {
        self.integer(key, "a u32")
    }

    /// An unsigned 64-bit integer (stored as any integer type that holds a value in range).
    pub fn u64(&self, key: &str) -> Result<u64, GgufError> {
        self.integer(key, "a u64")
    }

    /// A signed 32-bit integer (stored as any integer type that holds a value in range).
    pub fn i32(&self, key: &str) -> Result<i32, GgufError> {
        self.integer(key, "an i32")
    }

    /// A 32-bit float (an f64 is narrowed).
    pub fn f32(&self, key: &str) -> Result<f32, GgufError> {
        match self.require(key)? {
            Value::F32(v) => Ok(*v),
            Value::F64(v) => Ok(*v as f32),
            other => Err(Self::wrong_type(key, "an f32", other)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            Value::Bool(v) => Ok(*v),
            other => Err(Self::wrong_type(key, "a bool", other)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str, GgufError> {
        match self.require(key)? {
            Value::String(v) => Ok(v),
            other => Err(Self::wrong_type(key, "a string", other)),
        }
    }

    pub fn array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            other => Err(Self::wrong_type(key, "an array", other)),
        }
    }

    pub fn string_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.array(key)? {
            Array::String(v) => Ok(v),
            _ => Err(Self::wrong_type(key, "an array of strings", self.require(key)?)),
        }
    }

    pub fn i32_array(&self, key: &str) -> Result<&[i32], GgufError> {
        match self.array(key)? {
            Array::I32(v) => Ok(v),
            _ => Err(Self::wrong_type(key, "an array of i32", self.require(key)?)),
        }
    }

    pub fn u32_array(&self, key: &str) -> Result<&[u32], GgufError> {
        match self.array(key)? {
            Array::U32(v) => Ok(v),
            _ => Err(Self::wrong_type(key, "an array of u32", self.require(key)?)),
        }
    }

    pub fn f32_array(&self, key: &str) -> Result<&[f32], GgufError> {
        match self.array(key)? {
            Array::F32(v) => Ok(v),
            _ => Err(Self::wrong_type(key, "an array of f32", self.require(key)?)),
        }
    }

    /// An array of bytes, stored as u8 or i8 (converters write either; llama.cpp accepts both).
    pub fn byte_array(&self, key: &str) -> Result<&[u8], GgufError> {
        match self.array(key)? {
            Array::U8(v) => Ok(v),
            Array::I8(v) => Ok(bytemuck::cast_slice(v)),
            _ => Err(Self::wrong_type(key, "an array of u8", self.require(key)?)),
        }
    }

    /// `Ok(None)` when `key` is absent, otherwise what `get` returns: for optional keys, where a present
    /// value of the wrong type must still be an error rather than silently ignored.
    pub fn optional<'a, T>(
        &'a self,
        key: &str,
        get: impl FnOnce(&'a Self, &str) -> Result<T, GgufError>,
    ) -> Result<Option<T>, GgufError> {
        if self.get(key).is_none() {
            return Ok(None);
        }
        get(self, key).map(Some)
    }

    /// The file's bytes, as loaded (read into memory, or mapped).
    pub fn bytes(&self) -> &[u8] {
        self.source.bytes()
    }

    /// Whether the file is mapped (rather than read into memory).
    pub fn is_mapped(&self) -> bool {
        self.source.is_mapped()
    }

    /// Hints that the mapped tensor data will not be read for now (the CPU backend, having copied what it needs):
    /// its pages leave the process's resident set, and come back from the page cache if read again. Nothing for a
    /// file read into memory.
    pub fn release_tensor_data(&self) {
        self.source.release(self.data_offset as usize..self.source.bytes().len());
    }

    /// [`GgufFile::release_tensor_data`] for tensor `name`'s data only (whole pages inside it): what the CPU backend
    /// does with each matrix once it is packed, so that the file's pages do not pile up in the resident set while
    /// the rest is packed.
    pub fn release_tensor(&self, name: &str) {
        if let Some(info) = self.tensor_info(name) {
            self.source.release(info.offset as usize..(info.offset + info.size) as usize);
        }
    }

    /// All tensor infos in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Each tensor type of the file with its tensor count and bytes, the most bytes first (what llama.cpp's loader
    /// logs as `type q4_K: 97 tensors`): a "dynamic" quantization's mix of types shows here.
    pub fn type_summary(&self) -> Vec<(GgmlType, usize, u64)> {
        let mut types: Vec<(GgmlType, usize, u64)> = Vec::new();
        for t in &self.tensors {
            match types.iter_mut().find(|(d, _, _)| *d == t.dtype) {
                Some((_, count, bytes)) => (*count, *bytes) = (*count + 1, *bytes + t.size),
                None => types.push((t.dtype, 1, t.size)),
            }
        }
        types.sort_by(|a, b| b.2.cmp(&a.2).then((a.0 as u32).cmp(&(b.0 as u32))));
        types
    }

    /// The info of tensor `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A view of tensor `name`'s data.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, GgufError> {
        let info = self.tensor_info(name).ok_or_else(|| GgufError::MissingTensor { name: name.to_owned() })?;
        Ok(self.view(info))
    }

    /// Views of every tensor, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.tensors.iter().map(|info| self.view(info))
    }

    /// `info` must be one of this file's tensor infos.
    fn view<'a>(&'a self, info: &'a TensorInfo) -> TensorView<'a> {
        // In range: checked against the file length when the file was opened.
        let bytes = &self.source.bytes()[info.offset as usize..(info.offset + info.size) as usize];
        TensorView { info, bytes }
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .finish()
    }
}
