//! A GGUF writer: builds files for tests (well-formed ones to corrupt, small models) and the synthetic model
//! with real shapes and random weights that the GPU check uses where the real model cannot travel.

use std::io::Write;
use std::path::Path;

use super::dtype::GgmlType;
use super::parse::DEFAULT_ALIGNMENT;
use super::value::{encode_string, Value, ValueType};

/// Accumulates metadata and tensors, then lays them out as a GGUF version 3 file.
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Entry)>,
    tensors: Vec<PendingTensor>,
}

/// A metadata value: typed, or already encoded (hostile test files: 16M empty strings are 128 MB encoded, and
/// 384 MB as a `Vec<String>`).
enum Entry {
    Value(Value),
    Encoded(ValueType, Vec<u8>),
}

impl Entry {
    fn value_type(&self) -> ValueType {
        match self {
            Entry::Value(v) => v.value_type(),
            Entry::Encoded(t, _) => *t,
        }
    }
}

struct PendingTensor {
    name: String,
    dtype: GgmlType,
    shape: Vec<u64>,
    data: Placement,
}

/// Where a tensor's data is.
enum Placement {
    /// Its own bytes, after the tensors before it.
    Data(Vec<u8>),
    /// At this offset of the data section, whatever is there: a tensor info without data of its own, as a hostile
    /// file writes one (overlapping tensors, a size beyond the file).
    Claimed(u64),
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
        self.metadata.push(("general.alignment".into(), Entry::Value(Value::U32(alignment))));
        self
    }

    /// Appends a metadata entry (a key added twice makes a file that readers must refuse).
    pub fn metadata(mut self, key: &str, value: Value) -> Self {
        self.metadata.push((key.to_owned(), Entry::Value(value)));
        self
    }

    /// Appends a metadata entry of type `value_type` whose value is already encoded (`encoded` is written as it
    /// is after the type id: for an array, its element type, count and elements). Nothing checks it.
    pub fn metadata_encoded(mut self, key: &str, value_type: ValueType, encoded: Vec<u8>) -> Self {
        self.metadata.push((key.to_owned(), Entry::Encoded(value_type, encoded)));
        self
    }

    /// Replaces the value of `key`, or appends it when absent.
    pub fn set_metadata(mut self, key: &str, value: Value) -> Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = Entry::Value(value),
            None => self.metadata.push((key.to_owned(), Entry::Value(value))),
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
        let data = Placement::Data(data);
        self.tensors.push(PendingTensor { name: name.to_owned(), dtype, shape: shape.to_vec(), data });
        self
    }

    /// Adds a tensor info that says its data is at `offset` of the data section, and writes no data for it.
    pub fn tensor_claim(mut self, name: &str, dtype: GgmlType, shape: &[u64], offset: u64) -> Self {
        let data = Placement::Claimed(offset);
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
        self.write_to(&mut out).expect("writing to a Vec cannot fail");
        out
    }

    /// Writes the file to `out`, part by part: the tensors' data and encoded values are not copied first.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let mut head = Vec::new();
        head.extend_from_slice(b"GGUF");
        head.extend_from_slice(&self.version.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        let mut out = Counted { out, written: 0 };
        out.emit(&head)?;
        for (key, entry) in &self.metadata {
            let mut bytes = Vec::new();
            encode_string(key, &mut bytes);
            bytes.extend_from_slice(&(entry.value_type() as u32).to_le_bytes());
            match entry {
                Entry::Value(value) => {
                    value.encode(&mut bytes);
                    out.emit(&bytes)?;
                }
                Entry::Encoded(_, encoded) => {
                    out.emit(&bytes)?;
                    out.emit(encoded)?;
                }
            }
        }
        let mut infos = Vec::new();
        let mut offset = 0u64;
        for t in &self.tensors {
            encode_string(&t.name, &mut infos);
            infos.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for d in &t.shape {
                infos.extend_from_slice(&d.to_le_bytes());
            }
            infos.extend_from_slice(&t.dtype.id().to_le_bytes());
            match &t.data {
                Placement::Data(data) => {
                    infos.extend_from_slice(&offset.to_le_bytes());
                    offset = (offset + data.len() as u64).next_multiple_of(self.alignment);
                }
                Placement::Claimed(at) => infos.extend_from_slice(&at.to_le_bytes()),
            }
        }
        out.emit(&infos)?;
        for t in &self.tensors {
            if let Placement::Data(data) = &t.data {
                let pad = out.written.next_multiple_of(self.alignment) - out.written;
                out.emit(&vec![0; pad as usize])?;
                out.emit(data)?;
            }
        }
        Ok(())
    }

    /// Writes the file to `path` (through a temporary name, so a reader never sees half a file).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("gguf.partial");
        let mut file = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        self.write_to(&mut file)?;
        file.flush()?;
        drop(file);
        std::fs::rename(&tmp, path)
    }
}

/// A writer that counts what went through it (tensor data is padded to the alignment from the file's start).
struct Counted<'w, W: Write> {
    out: &'w mut W,
    written: u64,
}

impl<W: Write> Counted<'_, W> {
    fn emit(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.written += bytes.len() as u64;
        self.out.write_all(bytes)
    }
}
