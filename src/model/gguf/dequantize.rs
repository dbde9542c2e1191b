//! Dequantization of tensor data of any type ember computes with, by its GGUF type: the one dispatch over the
//! per-type functions of `blocks`, `kquants`, `mxfp4`, `iq4` and `coded`.

use bytemuck::Pod;

use super::blocks::{self, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0};
use super::coded::{
    dequantize_coded, BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockTq1_0,
    BlockTq2_0,
};
use super::dtype::GgmlType;
use super::iq4::{dequantize_iq4_nl, dequantize_iq4_xs, BlockIq4Nl, BlockIq4Xs};
use super::kquants::{dequantize_k, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K};
use super::mxfp4::{dequantize_mxfp4, BlockMxfp4};

/// Why [`dequantize`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DequantizeError {
    /// ember does not compute with this type.
    Unsupported(GgmlType),
    /// `bytes` is not a whole number of the type's blocks, or `out` does not hold their elements.
    Length { bytes: usize, out: usize },
}

/// Dequantizes `bytes`, data of type `dtype` (whole blocks, any alignment), into `out`, one f32 per element.
pub fn dequantize(dtype: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), DequantizeError> {
    if !dtype.is_supported_for_compute() {
        return Err(DequantizeError::Unsupported(dtype));
    }
    let (block_bytes, block_len) = (dtype.block_bytes() as usize, dtype.block_len() as usize);
    if !bytes.len().is_multiple_of(block_bytes) || bytes.len() / block_bytes * block_len != out.len() {
        return Err(DequantizeError::Length { bytes: bytes.len(), out: out.len() });
    }
    match dtype {
        GgmlType::F32 => out.copy_from_slice(&pod_vec::<f32>(bytes)),
        GgmlType::F16 => blocks::dequantize_f16(&pod_vec(bytes), out),
        GgmlType::Bf16 => blocks::dequantize_bf16(&pod_vec(bytes), out),
        GgmlType::Q4_0 => blocks::dequantize_q4_0(&pod_vec::<BlockQ4_0>(bytes), out),
        GgmlType::Q4_1 => blocks::dequantize_q4_1(&pod_vec::<BlockQ4_1>(bytes), out),
        GgmlType::Q5_0 => blocks::dequantize_q5_0(&pod_vec::<BlockQ5_0>(bytes), out),
        GgmlType::Q5_1 => blocks::dequantize_q5_1(&pod_vec::<BlockQ5_1>(bytes), out),
        GgmlType::Q8_0 => blocks::dequantize_q8_0(&pod_vec::<BlockQ8_0>(bytes), out),
        GgmlType::Q2K => dequantize_k(&pod_vec::<BlockQ2K>(bytes), out),
        GgmlType::Q3K => dequantize_k(&pod_vec::<BlockQ3K>(bytes), out),
        GgmlType::Q4K => dequantize_k(&pod_vec::<BlockQ4K>(bytes), out),
        GgmlType::Q5K => dequantize_k(&pod_vec::<BlockQ5K>(bytes), out),
        GgmlType::Q6K => dequantize_k(&pod_vec::<BlockQ6K>(bytes), out),
        GgmlType::Mxfp4 => dequantize_mxfp4(&pod_vec::<BlockMxfp4>(bytes), out),
        GgmlType::Iq4Nl => dequantize_iq4_nl(&pod_vec::<BlockIq4Nl>(bytes), out),
        GgmlType::Iq4Xs => dequantize_iq4_xs(&pod_vec::<BlockIq4Xs>(bytes), out),
        GgmlType::Iq3Xxs => dequantize_coded(&pod_vec::<BlockIq3Xxs>(bytes), out),
        GgmlType::Iq3S => dequantize_coded(&pod_vec::<BlockIq3S>(bytes), out),
        GgmlType::Iq2Xxs => dequantize_coded(&pod_vec::<BlockIq2Xxs>(bytes), out),
        GgmlType::Iq2Xs => dequantize_coded(&pod_vec::<BlockIq2Xs>(bytes), out),
        GgmlType::Iq2S => dequantize_coded(&pod_vec::<BlockIq2S>(bytes), out),
        GgmlType::Iq1S => dequantize_coded(&pod_vec::<BlockIq1S>(bytes), out),
        GgmlType::Iq1M => dequantize_coded(&pod_vec::<BlockIq1M>(bytes), out),
        GgmlType::Tq1_0 => dequantize_coded(&pod_vec::<BlockTq1_0>(bytes), out),
        GgmlType::Tq2_0 => dequantize_coded(&pod_vec::<BlockTq2_0>(bytes), out),
        other => return Err(DequantizeError::Unsupported(other)),
    }
    Ok(())
}

/// `bytes` as values of `T`, copied (so any alignment works; dequantizing allocates its output anyway).
fn pod_vec<T: Pod>(bytes: &[u8]) -> Vec<T> {
    bytes.chunks_exact(std::mem::size_of::<T>()).map(bytemuck::pod_read_unaligned).collect()
}
