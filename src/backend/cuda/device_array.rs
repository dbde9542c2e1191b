//! Device memory as kernel operands: an address with its length, so that each kernel's wrapper can check that its
//! operands cover what it will touch before anything is launched.

use std::marker::PhantomData;
use std::ops::Range;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::error::CudaBackendError;
use super::packing::PackedType;

/// A device array as a kernel operand: its address and its length in elements.
///
/// It borrows the buffer it was taken from, so the buffer outlives the launch call; it must also outlive the
/// kernel's run (asynchronous) and any graph that recorded the address, which the backend ensures by owning every
/// buffer and synchronizing before it frees them.
#[derive(Debug)]
pub struct DeviceArray<'a, T> {
    address: u64,
    len: usize,
    _buffer: PhantomData<&'a [T]>,
}

impl<T> Clone for DeviceArray<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DeviceArray<'_, T> {}

impl<'a, T> DeviceArray<'a, T> {
    /// The whole of `buffer`.
    pub fn new(buffer: &'a CudaSlice<T>, stream: &CudaStream) -> Self {
        // With event tracking off (device.rs), the returned guard records nothing.
        let (address, _no_event) = buffer.device_ptr(stream);
        DeviceArray { address, len: buffer.len(), _buffer: PhantomData }
    }

    /// An array at a made-up address, for the tests of the checks (never launched).
    #[cfg(test)]
    pub fn fake(address: u64, len: usize) -> Self {
        DeviceArray { address, len, _buffer: PhantomData }
    }

    /// Elements `range` of this array.
    pub fn sub(self, range: Range<usize>) -> Result<Self, CudaBackendError> {
        if range.start > range.end || range.end > self.len {
            return Err(internal(format!("sub-array {range:?} of an array of {}", self.len)));
        }
        let offset = (range.start * std::mem::size_of::<T>()) as u64;
        Ok(DeviceArray { address: self.address + offset, len: range.len(), _buffer: PhantomData })
    }

    /// The address, once the array is known to hold at least `needed` elements.
    pub(super) fn covering(&self, needed: usize, what: &str) -> Result<u64, CudaBackendError> {
        if self.len < needed {
            return Err(internal(format!("{what} holds {} elements, the kernel reads or writes {needed}", self.len)));
        }
        Ok(self.address)
    }
}

fn internal(detail: String) -> CudaBackendError {
    CudaBackendError::Internal(detail)
}

/// A packed weight matrix on the device (see `packing.rs`).
#[derive(Clone, Copy, Debug)]
pub struct MatrixArray<'a> {
    pub dtype: PackedType,
    pub rows: usize,
    pub cols: usize,
    /// `[rows][cols / 32][dtype.quant_words()]`.
    pub quants: DeviceArray<'a, u32>,
    /// `[rows][cols / 32][dtype.scale_words()]`.
    pub scales: DeviceArray<'a, u32>,
}

impl MatrixArray<'_> {
    /// Rows `start..start + n` as a matrix of their own (a packed row's groups are self-contained): one head's
    /// matrix of a per-head stack such as `attn_k_b`.
    pub fn rows(self, start: usize, n: usize) -> Result<Self, CudaBackendError> {
        if start + n > self.rows || !self.cols.is_multiple_of(32) {
            return Err(internal(format!("rows {start}..{} of a matrix of {}", start + n, self.rows)));
        }
        let blocks = self.cols / 32;
        let (q, s) = (blocks * self.dtype.quant_words(), blocks * self.dtype.scale_words());
        Ok(MatrixArray {
            rows: n,
            quants: self.quants.sub(start * q..(start + n) * q)?,
            scales: self.scales.sub(start * s..(start + n) * s)?,
            ..self
        })
    }

    /// The addresses of quants and scales, checked against the shape.
    pub(super) fn addresses(&self, what: &str) -> Result<(u64, u64), CudaBackendError> {
        if self.cols == 0 || !self.cols.is_multiple_of(32) {
            return Err(internal(format!("{what} has rows of {} weights, not whole blocks", self.cols)));
        }
        let n_blocks = self.rows * self.cols / 32;
        Ok((
            self.quants.covering(n_blocks * self.dtype.quant_words(), what)?,
            self.scales.covering(n_blocks * self.dtype.scale_words(), what)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_arrays_are_offset_in_bytes_and_bounded() {
        let a: DeviceArray<'_, f32> = DeviceArray::fake(0x100, 10);
        let b = a.sub(2..6).unwrap();
        assert_eq!((b.covering(4, "b").unwrap(), b.len), (0x108, 4));
        assert!(b.covering(5, "b").is_err());
        assert!(a.sub(8..11).is_err());
        assert_eq!(a.sub(10..10).unwrap().len, 0);
    }

    #[test]
    fn a_matrix_must_cover_its_shape() {
        let m = |quants, scales| MatrixArray {
            dtype: PackedType::Q4_1,
            rows: 2,
            cols: 64,
            quants: DeviceArray::fake(0x40, quants),
            scales: DeviceArray::fake(0x80, scales),
        };
        assert_eq!(m(16, 4).addresses("m").unwrap(), (0x40, 0x80));
        assert!(m(15, 4).addresses("m").is_err());
        assert!(m(16, 3).addresses("m").is_err());
        assert!(MatrixArray { cols: 48, ..m(16, 4) }.addresses("m").is_err());
        // Row 1 alone: 8 quant words and 2 scale words (4 bytes each) past the matrix's start.
        let second = m(16, 4).rows(1, 1).unwrap();
        assert_eq!((second.rows, second.addresses("row").unwrap()), (1, (0x60, 0x88)));
        assert!(m(16, 4).rows(1, 2).is_err());
    }
}
