//! Weight matrices as the kernels see them: borrowed blocks (usually straight from the memory-mapped GGUF file) with
//! a checked shape.

use std::fmt;

use half::{bf16, f16};

use crate::model::gguf::blocks::{self, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, QK};
use crate::model::gguf::coded::{
    dequantize_coded, BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockTq1_0,
    BlockTq2_0,
};
use crate::model::gguf::iq4::{dequantize_iq4_nl, dequantize_iq4_xs, BlockIq4Nl, BlockIq4Xs};
use crate::model::gguf::kquants::{dequantize_k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, QK_K};
use crate::model::gguf::mxfp4::{dequantize_mxfp4, BlockMxfp4};
use crate::model::gguf::{GgmlType, GgufError, TensorView};

/// The elements of a weight matrix, row after row: blocks of the quantized types (32 elements, 256 for the
/// K-quants, IQ4_XS and the coded types), values of the float types.
#[derive(Clone, Copy, Debug)]
pub enum WeightData<'a> {
    Q4_0(&'a [BlockQ4_0]),
    Q4_1(&'a [BlockQ4_1]),
    Q5_0(&'a [BlockQ5_0]),
    Q5_1(&'a [BlockQ5_1]),
    Q8_0(&'a [BlockQ8_0]),
    Q2K(&'a [BlockQ2K]),
    Q3K(&'a [BlockQ3K]),
    Q4K(&'a [BlockQ4K]),
    Q5K(&'a [BlockQ5K]),
    Q6K(&'a [BlockQ6K]),
    Mxfp4(&'a [BlockMxfp4]),
    Iq4Nl(&'a [BlockIq4Nl]),
    Iq4Xs(&'a [BlockIq4Xs]),
    Iq3Xxs(&'a [BlockIq3Xxs]),
    Iq3S(&'a [BlockIq3S]),
    Iq2Xxs(&'a [BlockIq2Xxs]),
    Iq2Xs(&'a [BlockIq2Xs]),
    Iq2S(&'a [BlockIq2S]),
    Iq1S(&'a [BlockIq1S]),
    Iq1M(&'a [BlockIq1M]),
    Tq1_0(&'a [BlockTq1_0]),
    Tq2_0(&'a [BlockTq2_0]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
    F32(&'a [f32]),
}

/// `$body` with `$x` bound to the slice of whichever variant `$data` is.
macro_rules! with_slice {
    ($data:expr, $x:ident => $body:expr) => {
        match $data {
            WeightData::Q4_0($x) => $body,
            WeightData::Q4_1($x) => $body,
            WeightData::Q5_0($x) => $body,
            WeightData::Q5_1($x) => $body,
            WeightData::Q8_0($x) => $body,
            WeightData::Q2K($x) => $body,
            WeightData::Q3K($x) => $body,
            WeightData::Q4K($x) => $body,
            WeightData::Q5K($x) => $body,
            WeightData::Q6K($x) => $body,
            WeightData::Mxfp4($x) => $body,
            WeightData::Iq4Nl($x) => $body,
            WeightData::Iq4Xs($x) => $body,
            WeightData::Iq3Xxs($x) => $body,
            WeightData::Iq3S($x) => $body,
            WeightData::Iq2Xxs($x) => $body,
            WeightData::Iq2Xs($x) => $body,
            WeightData::Iq2S($x) => $body,
            WeightData::Iq1S($x) => $body,
            WeightData::Iq1M($x) => $body,
            WeightData::Tq1_0($x) => $body,
            WeightData::Tq2_0($x) => $body,
            WeightData::F16($x) => $body,
            WeightData::Bf16($x) => $body,
            WeightData::F32($x) => $body,
        }
    };
}

impl WeightData<'_> {
    /// Number of stored items: blocks for the quantized types, values for the float types.
    fn len(&self) -> usize {
        with_slice!(self, b => b.len())
    }

    /// Bytes of storage (what a matvec streams from memory).
    pub fn n_bytes(&self) -> usize {
        with_slice!(self, b => std::mem::size_of_val(*b))
    }

    /// The GGUF type.
    pub fn dtype(&self) -> GgmlType {
        match self {
            WeightData::Q4_0(_) => GgmlType::Q4_0,
            WeightData::Q4_1(_) => GgmlType::Q4_1,
            WeightData::Q5_0(_) => GgmlType::Q5_0,
            WeightData::Q5_1(_) => GgmlType::Q5_1,
            WeightData::Q8_0(_) => GgmlType::Q8_0,
            WeightData::Q2K(_) => GgmlType::Q2K,
            WeightData::Q3K(_) => GgmlType::Q3K,
            WeightData::Q4K(_) => GgmlType::Q4K,
            WeightData::Q5K(_) => GgmlType::Q5K,
            WeightData::Q6K(_) => GgmlType::Q6K,
            WeightData::Mxfp4(_) => GgmlType::Mxfp4,
            WeightData::Iq4Nl(_) => GgmlType::Iq4Nl,
            WeightData::Iq4Xs(_) => GgmlType::Iq4Xs,
            WeightData::Iq3Xxs(_) => GgmlType::Iq3Xxs,
            WeightData::Iq3S(_) => GgmlType::Iq3S,
            WeightData::Iq2Xxs(_) => GgmlType::Iq2Xxs,
            WeightData::Iq2Xs(_) => GgmlType::Iq2Xs,
            WeightData::Iq2S(_) => GgmlType::Iq2S,
            WeightData::Iq1S(_) => GgmlType::Iq1S,
            WeightData::Iq1M(_) => GgmlType::Iq1M,
            WeightData::Tq1_0(_) => GgmlType::Tq1_0,
            WeightData::Tq2_0(_) => GgmlType::Tq2_0,
            WeightData::F16(_) => GgmlType::F16,
            WeightData::Bf16(_) => GgmlType::Bf16,
            WeightData::F32(_) => GgmlType::F32,
        }
    }

    /// `bytes` (whole items of type `dtype`) as weight data, or `None` for a type without kernels or data
    /// misaligned for its blocks.
    pub fn from_bytes(dtype: GgmlType, bytes: &[u8]) -> Option<WeightData<'_>> {
        Some(match dtype {
            GgmlType::Q4_0 => WeightData::Q4_0(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q4_1 => WeightData::Q4_1(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q5_0 => WeightData::Q5_0(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q5_1 => WeightData::Q5_1(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q8_0 => WeightData::Q8_0(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q2K => WeightData::Q2K(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q3K => WeightData::Q3K(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q4K => WeightData::Q4K(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q5K => WeightData::Q5K(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Q6K => WeightData::Q6K(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Mxfp4 => WeightData::Mxfp4(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq4Nl => WeightData::Iq4Nl(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq4Xs => WeightData::Iq4Xs(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq3Xxs => WeightData::Iq3Xxs(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq3S => WeightData::Iq3S(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq2Xxs => WeightData::Iq2Xxs(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq2Xs => WeightData::Iq2Xs(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq2S => WeightData::Iq2S(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq1S => WeightData::Iq1S(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Iq1M => WeightData::Iq1M(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Tq1_0 => WeightData::Tq1_0(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Tq2_0 => WeightData::Tq2_0(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::F16 => WeightData::F16(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::Bf16 => WeightData::Bf16(bytemuck::try_cast_slice(bytes).ok()?),
            GgmlType::F32 => WeightData::F32(bytemuck::try_cast_slice(bytes).ok()?),
            _ => return None,
        })
    }

    /// The type name as GGUF spells it.
    pub fn type_name(&self) -> &'static str {
        self.dtype().name()
    }

    /// Elements per stored item (1 for the float types).
    fn item_len(&self) -> usize {
        self.dtype().block_len() as usize
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
    /// Rows must be whole 32-element blocks (for the float types too: the kernels walk every type in 32-wide
    /// blocks), and whole 256-element super-blocks for the K-quants.
    RowLenNotBlockMultiple { row_len: usize, block_len: usize },
    /// `n_rows × row_len` does not fit in `usize`.
    Overflow { n_rows: usize, row_len: usize },
    /// The data holds another number of blocks (or floats, for F32) than the shape needs.
    LengthMismatch { type_name: &'static str, expected: usize, found: usize },
}

impl fmt::Display for WeightShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightShapeError::RowLenNotBlockMultiple { row_len, block_len } => {
                write!(f, "weight rows of {row_len} elements are not a multiple of {block_len}")
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
        let block_len = data.item_len().max(QK);
        if !row_len.is_multiple_of(block_len) {
            return Err(WeightShapeError::RowLenNotBlockMultiple { row_len, block_len });
        }
        let n_elements = n_rows.checked_mul(row_len).ok_or(WeightShapeError::Overflow { n_rows, row_len })?;
        let expected = n_elements / data.item_len();
        if data.len() != expected {
            return Err(WeightShapeError::LengthMismatch { type_name: data.type_name(), expected, found: data.len() });
        }
        Ok(WeightMatrix { data, n_rows, row_len })
    }

    /// A view of a GGUF weight of shape `[row_len, n_rows]` (ggml order: the row length first).
    ///
    /// Dimensions past the second count as more rows, in storage order (ggml lays a `[n0, n1, n2]` tensor out as
    /// `n1 · n2` rows of `n0`), so a 1-D tensor is one row. Callers check `n_rows` and `row_len` against the model's
    /// hyperparameters. Fails with [`GgufError::UnsupportedTensorType`] for types without a matmul kernel (the
    /// IQ and TQ families, …) and for float rows that are not whole 32-element blocks, or with the view's own
    /// errors when the data is misaligned.
    pub fn from_tensor(view: &TensorView<'a>) -> Result<Self, GgufError> {
        let dtype = view.dtype();
        let data = match WeightData::from_bytes(dtype, view.bytes) {
            Some(data) => data,
            None if dtype.is_supported_for_compute() => {
                return Err(GgufError::TensorDataMisaligned { tensor: view.name().to_owned() })
            }
            None => return Err(GgufError::UnsupportedTensorType { tensor: view.name().to_owned(), dtype }),
        };
        let shape = view.shape();
        // The reader checked that the shape's element count fits in u64 and matches the data, and that shape[0] is
        // a whole number of blocks; the data is in memory, so the counts fit in usize too.
        let row_len = shape.first().copied().unwrap_or(1) as usize;
        let n_rows = shape.iter().skip(1).product::<u64>() as usize;
        // Only a float tensor can fail here: the reader accepts float rows of any length, the kernels walk whole
        // 32-element blocks. GgufError has no shape variant, and for this tensor "cannot compute with" is the truth.
        WeightMatrix::new(data, n_rows, row_len)
            .map_err(|_| GgufError::UnsupportedTensorType { tensor: view.name().to_owned(), dtype: view.dtype() })
    }

    pub fn data(&self) -> WeightData<'a> {
        self.data
    }

    /// Rows `rows` of the matrix, as a matrix of their own (one part of a fused tensor: phi3's queries, keys
    /// and values in one `attn_qkv`); `None` when the range is not inside the matrix.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Option<WeightMatrix<'a>> {
        if rows.start > rows.end || rows.end > self.n_rows {
            return None;
        }
        let per_row = self.row_len / self.data.item_len();
        let r = rows.start * per_row..rows.end * per_row;
        let data = match self.data {
            WeightData::Q4_0(b) => WeightData::Q4_0(&b[r]),
            WeightData::Q4_1(b) => WeightData::Q4_1(&b[r]),
            WeightData::Q5_0(b) => WeightData::Q5_0(&b[r]),
            WeightData::Q5_1(b) => WeightData::Q5_1(&b[r]),
            WeightData::Q8_0(b) => WeightData::Q8_0(&b[r]),
            WeightData::Q2K(b) => WeightData::Q2K(&b[r]),
            WeightData::Q3K(b) => WeightData::Q3K(&b[r]),
            WeightData::Q4K(b) => WeightData::Q4K(&b[r]),
            WeightData::Q5K(b) => WeightData::Q5K(&b[r]),
            WeightData::Q6K(b) => WeightData::Q6K(&b[r]),
            WeightData::Mxfp4(b) => WeightData::Mxfp4(&b[r]),
            WeightData::Iq4Nl(b) => WeightData::Iq4Nl(&b[r]),
            WeightData::Iq4Xs(b) => WeightData::Iq4Xs(&b[r]),
            WeightData::Iq3Xxs(b) => WeightData::Iq3Xxs(&b[r]),
            WeightData::Iq3S(b) => WeightData::Iq3S(&b[r]),
            WeightData::Iq2Xxs(b) => WeightData::Iq2Xxs(&b[r]),
            WeightData::Iq2Xs(b) => WeightData::Iq2Xs(&b[r]),
            WeightData::Iq2S(b) => WeightData::Iq2S(&b[r]),
            WeightData::Iq1S(b) => WeightData::Iq1S(&b[r]),
            WeightData::Iq1M(b) => WeightData::Iq1M(&b[r]),
            WeightData::Tq1_0(b) => WeightData::Tq1_0(&b[r]),
            WeightData::Tq2_0(b) => WeightData::Tq2_0(&b[r]),
            WeightData::F16(v) => WeightData::F16(&v[r]),
            WeightData::Bf16(v) => WeightData::Bf16(&v[r]),
            WeightData::F32(v) => WeightData::F32(&v[r]),
        };
        Some(WeightMatrix { data, n_rows: rows.len(), row_len: self.row_len })
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Weights per row (a multiple of 32).
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// 32-element blocks per row (the activation blocks a row meets).
    pub fn blocks_per_row(&self) -> usize {
        self.row_len / QK
    }

    /// Dequantizes row `row` into `out` (`row_len` floats), as `model::gguf::dequantize` does (an embedding
    /// lookup: no allocation).
    ///
    /// # Panics
    /// When `row` is not a row of the matrix or `out` has another length.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        assert!(row < self.n_rows && out.len() == self.row_len, "dequantize_row: row {row} or output length");
        let n = self.row_len;
        let items = |per_item: usize| row * n / per_item..(row + 1) * n / per_item;
        match self.data {
            WeightData::Q4_0(b) => blocks::dequantize_q4_0(&b[items(QK)], out),
            WeightData::Q4_1(b) => blocks::dequantize_q4_1(&b[items(QK)], out),
            WeightData::Q5_0(b) => blocks::dequantize_q5_0(&b[items(QK)], out),
            WeightData::Q5_1(b) => blocks::dequantize_q5_1(&b[items(QK)], out),
            WeightData::Q8_0(b) => blocks::dequantize_q8_0(&b[items(QK)], out),
            WeightData::Q2K(b) => dequantize_k(&b[items(QK_K)], out),
            WeightData::Q3K(b) => dequantize_k(&b[items(QK_K)], out),
            WeightData::Q4K(b) => dequantize_k(&b[items(QK_K)], out),
            WeightData::Q5K(b) => dequantize_k(&b[items(QK_K)], out),
            WeightData::Q6K(b) => dequantize_k(&b[items(QK_K)], out),
            WeightData::Mxfp4(b) => dequantize_mxfp4(&b[items(QK)], out),
            WeightData::Iq4Nl(b) => dequantize_iq4_nl(&b[items(QK)], out),
            WeightData::Iq4Xs(b) => dequantize_iq4_xs(&b[items(QK_K)], out),
            WeightData::Iq3Xxs(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq3S(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq2Xxs(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq2Xs(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq2S(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq1S(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Iq1M(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Tq1_0(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::Tq2_0(b) => dequantize_coded(&b[items(QK_K)], out),
            WeightData::F16(v) => blocks::dequantize_f16(&v[items(1)], out),
            WeightData::Bf16(v) => blocks::dequantize_bf16(&v[items(1)], out),
            WeightData::F32(v) => out.copy_from_slice(&v[items(1)]),
        }
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
            WeightShapeError::RowLenNotBlockMultiple { row_len: 48, block_len: 32 }
        );
        assert!(matches!(
            WeightMatrix::new(WeightData::F32(&[]), usize::MAX, 64),
            Err(WeightShapeError::Overflow { .. })
        ));
        let floats = [0f32; 96];
        assert!(WeightMatrix::new(WeightData::F32(&floats), 3, 32).is_ok());
    }

    #[test]
    fn rows_are_the_same_rows_alone() {
        let floats: Vec<f32> = (0..5 * 32).map(|i| i as f32).collect();
        let w = WeightMatrix::new(WeightData::F32(&floats), 5, 32).unwrap();
        let part = w.rows(1..4).unwrap();
        assert_eq!((part.n_rows(), part.row_len()), (3, 32));
        let (mut a, mut b) = (vec![0f32; 32], vec![0f32; 32]);
        for r in 0..3 {
            part.dequantize_row(r, &mut a);
            w.dequantize_row(r + 1, &mut b);
            assert_eq!(a, b);
        }
        assert_eq!(w.rows(5..5).map(|m| m.n_rows()), Some(0));
        assert!(w.rows(4..6).is_none());
        let blocks = [BlockQ4_1 { d: f16::ONE, m: f16::ZERO, qs: [0; 16] }; 6];
        let q = WeightMatrix::new(WeightData::Q4_1(&blocks), 3, 64).unwrap();
        assert_eq!(q.rows(2..3).unwrap().data().n_bytes(), 40, "one row of two blocks");
    }
}
