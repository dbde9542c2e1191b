//! Weight matrices as the kernels see them: borrowed blocks (usually straight from the memory-mapped GGUF file) with
//! a checked shape.

use std::fmt;

use crate::model::gguf::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};
use crate::model::gguf::{GgmlType, GgufError, TensorView};

/// The elements of a weight matrix, row after row.
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    Q4_0(&'a [BlockQ4_0]),
    Q4_1(&'a [BlockQ4_1]),
    Q8_0(&'a [BlockQ8_0]),
    F32(&'a [f32]),
}

impl WeightData<'_> {
    /// Number of stored items: blocks for the quantized types, floats for F32.
    fn len(&self) -> usize {
        match self {
            WeightData::Q4_0(b) => b.len(),
            WeightData::Q4_1(b) => b.len(),
            WeightData::Q8_0(b) => b.len(),
            WeightData::F32(v) => v.len(),
        }
    }

    /// Bytes of storage (what a matvec streams from memory).
    pub fn n_bytes(&self) -> usize {
        match self {
            WeightData::Q4_0(b) => std::mem::size_of_val(*b),
            WeightData::Q4_1(b) => std::mem::size_of_val(*b),
            WeightData::Q8_0(b) => std::mem::size_of_val(*b),
            WeightData::F32(v) => std::mem::size_of_val(*v),
        }
    }

    /// The type name as GGUF spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            WeightData::Q4_0(_) => "Q4_0",
            WeightData::Q4_1(_) => "Q4_1",
            WeightData::Q8_0(_) => "Q8_0",
            WeightData::F32(_) => "F32",
        }
    }
}

/// A row-major matrix of `n_rows` rows of `row_len` weights: row `r` produces output `r` of a matmul.
#[derive(Clone, Copy, Debug)]
pub struct WeightMatrix<'a> {
    data: WeightData<'a>,
    n_rows: usize,
    /// Weights per row, a multiple of 32.
    row_len: usize,
}

/// Why [`WeightMatrix::new`] refused a shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightShapeError {
    /// Rows must be whole 32-element blocks (for F32 too: the kernels walk every type in 32-wide blocks).
    RowLenNotBlockMultiple { row_len: usize },
    /// `n_rows × row_len` does not fit in `usize`.
    Overflow { n_rows: usize, row_len: usize },
    /// The data holds another number of blocks (or floats, for F32) than the shape needs.
    LengthMismatch { type_name: &'static str, expected: usize, found: usize },
}

impl fmt::Display for WeightShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightShapeError::RowLenNotBlockMultiple { row_len } => {
                write!(f, "weight rows of {row_len} elements are not a multiple of {QK}")
            }
            WeightShapeError::Overflow { n_rows, row_len } => {
                write!(f, "weight matrix of {n_rows} × {row_len} elements overflows")
            }
            WeightShapeError::LengthMismatch { type_name, expected, found } => {
                write!(f, "{type_name} weight data holds {found} items, the shape needs {expected}")
            }
        }
    }
}

impl std::error::Error for WeightShapeError {}

impl<'a> WeightMatrix<'a> {
    /// A matrix over `data`, which must hold exactly `n_rows × row_len` weights.
    pub fn new(data: WeightData<'a>, n_rows: usize, row_len: usize) -> Result<Self, WeightShapeError> {
        if !row_len.is_multiple_of(QK) {
            return Err(WeightShapeError::RowLenNotBlockMultiple { row_len });
        }
        let n_elements = n_rows.checked_mul(row_len).ok_or(WeightShapeError::Overflow { n_rows, row_len })?;
        let expected = match data {
            WeightData::F32(_) => n_elements,
            _ => n_elements / QK,
        };
        if data.len() != expected {
            return Err(WeightShapeError::LengthMismatch { type_name: data.type_name(), expected, found: data.len() });
        }
        Ok(WeightMatrix { data, n_rows, row_len })
    }

    /// A view of a GGUF weight of shape `[row_len, n_rows]` (ggml order: the row length first).
    ///
    /// Dimensions past the second count as more rows, in storage order (ggml lays a `[n0, n1, n2]` tensor out as
    /// `n1 · n2` rows of `n0`), so a 1-D tensor is one row. Callers check `n_rows` and `row_len` against the model's
    /// hyperparameters. Fails with [`GgufError::UnsupportedTensorType`] for types without a matmul kernel (F16,
    /// BF16 and the K-quants among them) and for F32 rows that are not whole 32-element blocks, or with the view's own
    /// errors when the data is misaligned.
    pub fn from_tensor(view: &TensorView<'a>) -> Result<Self, GgufError> {
        let data = match view.dtype() {
            GgmlType::Q4_0 => WeightData::Q4_0(view.as_q4_0()?),
            GgmlType::Q4_1 => WeightData::Q4_1(view.as_q4_1()?),
            GgmlType::Q8_0 => WeightData::Q8_0(view.as_q8_0()?),
            GgmlType::F32 => WeightData::F32(view.as_f32()?),
            dtype => return Err(GgufError::UnsupportedTensorType { tensor: view.name().to_owned(), dtype }),
        };
        let shape = view.shape();
        // The reader checked that the shape's element count fits in u64 and matches the data, and that shape[0] is
        // a whole number of blocks; the data is in memory, so the counts fit in usize too.
        let row_len = shape.first().copied().unwrap_or(1) as usize;
        let n_rows = shape.iter().skip(1).product::<u64>() as usize;
        // Only an F32 tensor can fail here: the reader accepts F32 rows of any length, the kernels walk whole
        // 32-element blocks. GgufError has no shape variant, and for this tensor "cannot compute with" is the truth.
        WeightMatrix::new(data, n_rows, row_len)
            .map_err(|_| GgufError::UnsupportedTensorType { tensor: view.name().to_owned(), dtype: view.dtype() })
    }

    pub fn data(&self) -> WeightData<'a> {
        self.data
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Weights per row (a multiple of 32).
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// 32-element blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.row_len / QK
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;

    #[test]
    fn new_checks_the_shape() {
        let blocks = [BlockQ4_1 { d: f16::ONE, m: f16::ZERO, qs: [0; 16] }; 6];
        let w = WeightMatrix::new(WeightData::Q4_1(&blocks), 3, 64).unwrap();
        assert_eq!((w.n_rows(), w.row_len(), w.blocks_per_row()), (3, 64, 2));
        assert_eq!(w.data().n_bytes(), 120);
        assert_eq!(
            WeightMatrix::new(WeightData::Q4_1(&blocks), 2, 64).unwrap_err(),
            WeightShapeError::LengthMismatch { type_name: "Q4_1", expected: 4, found: 6 }
        );
        assert_eq!(
            WeightMatrix::new(WeightData::Q4_1(&blocks), 6, 48).unwrap_err(),
            WeightShapeError::RowLenNotBlockMultiple { row_len: 48 }
        );
        assert!(matches!(
            WeightMatrix::new(WeightData::F32(&[]), usize::MAX, 64),
            Err(WeightShapeError::Overflow { .. })
        ));
        let floats = [0f32; 96];
        assert!(WeightMatrix::new(WeightData::F32(&floats), 3, 32).is_ok());
    }
}
