//! A GGUF writer: builds files for tests (well-formed ones to corrupt, small models) and the synthetic model
//! with real shapes and random weights that the GPU check uses where the real model cannot travel.

use std::path::Path;

use super::dtype::GgmlType;
use super::parse::DEFAULT_ALIGNMENT;
use super::value::{encode_string, Value};

/// Accumulates metadata and tensors, then lays them out as a GGUF version 3 file.
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

struct PendingTensor {
    name: String,
    dtype: GgmlType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter { version: 3, alignment: DEFAULT_ALIGNMENT, metadata: Vec::new(), tensors: Vec::new() }
    }

    /// Writes this version number in the header (2 and 3 share a layout).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    /// Aligns tensor data to `alignment` bytes and records it as `general.alignment`.
    pub fn alignment(mut self, alignment: u32) -> Self {
        self.alignment = u64::from(alignment);
        self.metadata.retain(|(k, _)| k != "general.alignment");
        self.metadata.push(("general.alignment".into(), Value::U32(alignment)));
        self
    }

    /// Appends a metadata entry (a key added twice makes a file that readers must refuse).
    pub fn metadata(mut self, key: &str, value: Value) -> Self {
        self.metadata.push((key.to_owned(), value));
        self
    }

    /// Replaces the value of `key`, or appends it when absent.
    pub fn set_metadata(mut self, key: &str, value: Value) -> Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
        self
    }

    /// Drops metadata entry `key`.
    pub fn without_metadata(mut self, key: &str) -> Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    /// Drops tensor `name`.
    pub fn without_tensor(mut self, name: &str) -> Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    /// Adds a tensor; `shape` is fastest-varying first and `data` must already be in `dtype`'s layout.
    pub fn tensor(mut self, name: &str, dtype: GgmlType, shape: &[u64], data: Vec<u8>) -> Self {
        self.tensors.push(PendingTensor { name: name.to_owned(), dtype, shape: shape.to_vec(), data });
        self
    }

    /// Adds an f32 tensor.
    pub fn tensor_f32(self, name: &str, shape: &[u64], values: &[f32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, GgmlType::F32, shape, data)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            encode_string(key, &mut out);
            out.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            value.encode(&mut out);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            encode_string(&t.name, &mut out);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        for t in &self.tensors {
            out.resize((out.len() as u64).next_multiple_of(self.alignment) as usize, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }

    /// Writes the file to `path` (through a temporary name, so a reader never sees half a file).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("gguf.partial");
        std::fs::write(&tmp, self.to_bytes())?;
        std::fs::rename(&tmp, path)
    }
}
