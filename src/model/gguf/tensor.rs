//! Tensor infos and borrowed views of tensor data.
//!
//! Shapes are in ggml order: `shape[0]` is the row length (the fastest-varying dimension), so a weight matrix
//! with `n_out` rows of `n_in` inputs has shape `[n_in, n_out]`.

use bytemuck::Pod;
use half::{bf16, f16};

use super::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
use super::dequantize::dequantize;
use super::dtype::GgmlType;
use super::error::GgufError;
use super::kquants::{BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::mxfp4::BlockMxfp4;

/// A tensor's description, validated against the file when it was opened.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: GgmlType,
    /// Dimensions, fastest-varying first.
    pub shape: Vec<u64>,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }
}

/// A tensor's data, borrowed from the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    pub fn dtype(&self) -> GgmlType {
        self.info.dtype
    }

    pub fn shape(&self) -> &'a [u64] {
        &self.info.shape
    }

    pub fn n_elements(&self) -> u64 {
        self.info.n_elements()
    }

    /// Fails with [`GgufError::UnsupportedTensorType`] when ember cannot compute with this tensor's type.
    pub fn require_supported(&self) -> Result<(), GgufError> {
        if self.dtype().is_supported_for_compute() {
            Ok(())
        } else {
            Err(GgufError::UnsupportedTensorType { tensor: self.info.name.clone(), dtype: self.dtype() })
        }
    }

    /// The data as a slice of `T`, after checking that the tensor has type `expected`.
    fn typed<T: Pod>(&self, expected: GgmlType) -> Result<&'a [T], GgufError> {
        if self.dtype() != expected {
            return Err(GgufError::TensorTypeMismatch {
                tensor: self.info.name.clone(),
                expected,
                found: self.dtype(),
            });
        }
        bytemuck::try_cast_slice(self.bytes)
            .map_err(|_| GgufError::TensorDataMisaligned { tensor: self.info.name.clone() })
    }

    pub fn as_f32(&self) -> Result<&'a [f32], GgufError> {
        self.typed(GgmlType::F32)
    }

    pub fn as_f16(&self) -> Result<&'a [f16], GgufError> {
        self.typed(GgmlType::F16)
    }

    pub fn as_bf16(&self) -> Result<&'a [bf16], GgufError> {
        self.typed(GgmlType::Bf16)
    }

    pub fn as_q4_0(&self) -> Result<&'a [BlockQ4_0], GgufError> {
        self.typed(GgmlType::Q4_0)
    }

    pub fn as_q4_1(&self) -> Result<&'a [BlockQ4_1], GgufError> {
        self.typed(GgmlType::Q4_1)
    }

    pub fn as_q8_0(&self) -> Result<&'a [BlockQ8_0], GgufError> {
        self.typed(GgmlType::Q8_0)
    }

    pub fn as_q5_0(&self) -> Result<&'a [BlockQ5_0], GgufError> {
        self.typed(GgmlType::Q5_0)
    }

    pub fn as_q5_1(&self) -> Result<&'a [BlockQ5_1], GgufError> {
        self.typed(GgmlType::Q5_1)
    }

    pub fn as_q2_k(&self) -> Result<&'a [BlockQ2K], GgufError> {
        self.typed(GgmlType::Q2K)
    }

    pub fn as_q3_k(&self) -> Result<&'a [BlockQ3K], GgufError> {
        self.typed(GgmlType::Q3K)
    }

    pub fn as_q4_k(&self) -> Result<&'a [BlockQ4K], GgufError> {
        self.typed(GgmlType::Q4K)
    }

    pub fn as_q5_k(&self) -> Result<&'a [BlockQ5K], GgufError> {
        self.typed(GgmlType::Q5K)
    }

    pub fn as_q6_k(&self) -> Result<&'a [BlockQ6K], GgufError> {
        self.typed(GgmlType::Q6K)
    }

    pub fn as_mxfp4(&self) -> Result<&'a [BlockMxfp4], GgufError> {
        self.typed(GgmlType::Mxfp4)
    }

    /// The whole tensor dequantized to f32 (an allocation of 4 bytes per element: for tests, small tensors and
    /// reference computations, not for weights on the hot path).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, GgufError> {
        self.require_supported()?;
        let mut out = vec![0f32; self.n_elements() as usize];
        // The reader checked that the data holds exactly the shape's whole blocks.
        dequantize(self.dtype(), self.bytes, &mut out)
            .map_err(|_| GgufError::UnsupportedTensorType { tensor: self.info.name.clone(), dtype: self.dtype() })?;
        Ok(out)
    }
}
