//! Every way a GGUF file can be unreadable or unsuitable, each naming the offset, key or tensor at fault.

use std::fmt;
use std::path::PathBuf;

use super::dtype::GgmlType;

/// An error from opening or querying a GGUF file. Offsets are byte offsets from the start of the file.
#[derive(Debug)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    Io { path: PathBuf, source: std::io::Error },
    /// The first four bytes are not `GGUF`.
    BadMagic { found: [u8; 4] },
    /// A version other than 2 or 3 (version 1 used 32-bit lengths and is obsolete).
    UnsupportedVersion { version: u32 },
    /// The version field reads as a byte-swapped 2 or 3: the file is big-endian, which ember does not read.
    BigEndian,
    /// The file ends before a field it declares.
    Truncated { offset: u64, needed: u64, what: &'static str },
    /// A count (metadata entries, tensors, array elements) is beyond what ember accepts.
    TooMany { what: &'static str, count: u64, max: u64, offset: u64 },
    /// A string is longer than ember accepts.
    StringTooLong { len: u64, max: u64, offset: u64 },
    /// Parsing the header would take more memory than [`super::MAX_PARSED_BYTES`] allows (`budget.rs`).
    ParsedTooLarge { what: &'static str, bytes: u64, used: u64, max: u64, offset: u64 },
    /// A metadata value is malformed or too large: `source` says how, this names the key it belongs to.
    InMetadata { key: String, source: Box<GgufError> },
    /// A string is not UTF-8.
    InvalidUtf8 { offset: u64, what: &'static str },
    /// A metadata value type id that GGUF does not define.
    UnknownValueType { id: u32, offset: u64 },
    /// A bool stored as something other than 0 or 1.
    InvalidBool { byte: u8, offset: u64 },
    /// Arrays nested deeper than ember accepts.
    NestingTooDeep { depth: usize, offset: u64 },
    /// The same metadata key twice.
    DuplicateKey { key: String },
    /// The same tensor name twice.
    DuplicateTensor { name: String },
    /// `general.alignment` is zero, not a power of two, or of the wrong type.
    BadAlignment { detail: String },
    /// A tensor with more dimensions than ggml supports (4).
    TooManyDimensions { tensor: String, n_dims: u32 },
    /// A dimension beyond `i64::MAX`, or an element count or byte size that overflows 64 bits.
    ShapeOverflow { tensor: String },
    /// A tensor type id that this build does not know.
    UnknownTensorType { tensor: String, id: u32 },
    /// The row length (first dimension) is not a whole number of the type's blocks.
    RowNotBlockAligned { tensor: String, dtype: GgmlType, row_len: u64 },
    /// A tensor's data offset is not a multiple of the file's alignment.
    MisalignedTensor { tensor: String, offset: u64, alignment: u64 },
    /// A tensor's data does not start where the previous tensor's (padded to the alignment) ends: the data section
    /// holds the tensors in order, without gaps or overlaps (ggml's `gguf_init_from_file` requires it too). Tensors
    /// that overlap would let a file declare more weights than it has bytes.
    TensorOffset { tensor: String, offset: u64, expected: u64 },
    /// A tensor's data lies (partly) beyond the end of the file.
    TensorOutOfBounds { tensor: String, offset: u64, size: u64, file_len: u64 },
    /// A metadata key the caller needs is absent.
    MissingKey { key: String },
    /// A metadata value has another type than the caller needs (or does not fit it).
    WrongType { key: String, expected: &'static str, found: String },
    /// A tensor the caller needs is absent.
    MissingTensor { name: String },
    /// A tensor has a type ember cannot compute with.
    UnsupportedTensorType { tensor: String, dtype: GgmlType },
    /// A tensor was viewed as another type than it has.
    TensorTypeMismatch { tensor: String, expected: GgmlType, found: GgmlType },
    /// A tensor's bytes are not aligned for the element type they were viewed as.
    TensorDataMisaligned { tensor: String },
    /// The host's progress function asked to stop reading the file (`model::progress`).
    Cancelled,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufError::*;
        match self {
            Io { path, source } => write!(f, "cannot read GGUF file {}: {source}", path.display()),
            BadMagic { found } => write!(f, "not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\""),
            UnsupportedVersion { version } => {
                write!(f, "unsupported GGUF version {version} (ember reads versions 2 and 3)")
            }
            BigEndian => write!(f, "big-endian GGUF files are not supported"),
            Truncated { offset, needed, what } => {
                write!(f, "GGUF file truncated: {what} at offset {offset} needs {needed} more bytes")
            }
            TooMany { what, count, max, offset } => {
                write!(f, "GGUF {what} count {count} at offset {offset} exceeds the limit of {max}")
            }
            StringTooLong { len, max, offset } => {
                write!(f, "GGUF string of {len} bytes at offset {offset} exceeds the limit of {max}")
            }
            ParsedTooLarge { what, bytes, used, max, offset } => write!(
                f,
                "GGUF {what} at offset {offset} would take {bytes} bytes of memory once read, more than the {} left \
                 of the {max}-byte limit on a file's parsed metadata and tensor infos",
                max - used
            ),
            InMetadata { key, source } => write!(f, "GGUF metadata key {key:?}: {source}"),
            InvalidUtf8 { offset, what } => write!(f, "GGUF {what} at offset {offset} is not valid UTF-8"),
            UnknownValueType { id, offset } => write!(f, "unknown GGUF metadata value type {id} at offset {offset}"),
            InvalidBool { byte, offset } => write!(f, "GGUF bool at offset {offset} has value {byte}, expected 0 or 1"),
            NestingTooDeep { depth, offset } => {
                write!(f, "GGUF arrays nested {depth} deep at offset {offset}: too deep")
            }
            DuplicateKey { key } => write!(f, "GGUF metadata key {key:?} appears twice"),
            DuplicateTensor { name } => write!(f, "GGUF tensor {name:?} appears twice"),
            BadAlignment { detail } => write!(f, "invalid general.alignment: {detail}"),
            TooManyDimensions { tensor, n_dims } => {
                write!(f, "tensor {tensor:?} has {n_dims} dimensions (at most 4 are allowed)")
            }
            ShapeOverflow { tensor } => write!(f, "tensor {tensor:?} has a shape whose size overflows"),
            UnknownTensorType { tensor, id } => write!(f, "tensor {tensor:?} has unknown type id {id}"),
            RowNotBlockAligned { tensor, dtype, row_len } => write!(
                f,
                "tensor {tensor:?} of type {dtype} has rows of {row_len} elements, not a multiple of {}",
                dtype.block_len()
            ),
            MisalignedTensor { tensor, offset, alignment } => {
                write!(f, "tensor {tensor:?} data offset {offset} is not a multiple of the alignment {alignment}")
            }
            TensorOffset { tensor, offset, expected } => write!(
                f,
                "tensor {tensor:?} data starts at offset {offset} of the data section, expected {expected} (where the \
                 tensors before it end): tensors must follow each other without gaps or overlaps"
            ),
            TensorOutOfBounds { tensor, offset, size, file_len } => write!(
                f,
                "tensor {tensor:?} data ({size} bytes at offset {offset}) extends beyond the file ({file_len} bytes)"
            ),
            MissingKey { key } => write!(f, "GGUF metadata key {key:?} is missing"),
            WrongType { key, expected, found } => {
                write!(f, "GGUF metadata key {key:?} is {found}, expected {expected}")
            }
            MissingTensor { name } => write!(f, "tensor {name:?} is missing from the model"),
            UnsupportedTensorType { tensor, dtype } => {
                write!(f, "tensor {tensor:?} has type {dtype}, which ember cannot compute with")
            }
            TensorTypeMismatch { tensor, expected, found } => {
                write!(f, "tensor {tensor:?} has type {found}, expected {expected}")
            }
            TensorDataMisaligned { tensor } => write!(f, "tensor {tensor:?} data is not aligned for its type"),
            Cancelled => write!(f, "the load was cancelled by its progress callback"),
        }
    }
}

impl GgufError {
    /// The error itself, without the key [`GgufError::InMetadata`] wraps it with: what tests and callers that
    /// tell kinds apart look at.
    pub fn kind(&self) -> &GgufError {
        match self {
            GgufError::InMetadata { source, .. } => source.kind(),
            other => other,
        }
    }
}

impl std::error::Error for GgufError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GgufError::Io { source, .. } => Some(source),
            GgufError::InMetadata { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}
