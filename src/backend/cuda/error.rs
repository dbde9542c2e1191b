//! Why the CUDA backend could not start or could not run a step.

use std::fmt;

use cudarc::driver::DriverError;

use crate::model::gguf::GgufError;
use crate::model::llama::batch::BatchError;

/// A failure of the CUDA backend. The first three variants mean "no usable GPU here" (see
/// [`is_unavailable`](CudaBackendError::is_unavailable)): an engine with `backend: "auto"` then runs on the CPU.
#[derive(Debug)]
pub enum CudaBackendError {
    /// No CUDA driver library (`libcuda.so`) could be loaded: no NVIDIA driver on this machine.
    NoDriver,
    /// The driver loaded but offers no usable device (none, not the one asked for, or it failed to initialize).
    NoDevice(String),
    /// NVRTC (`libnvrtc.so.13` or `.12`) could not be loaded, so the kernels cannot be compiled.
    NoCompiler,
    /// NVRTC refused the kernels: its log, which names the `.cu` file and line.
    Compile { arch: &'static str, log: String },
    /// A CUDA driver call failed.
    Driver { during: &'static str, error: DriverError },
    /// Reading the model's weights failed.
    Gguf(GgufError),
    /// The model needs something the backend does not implement (a weight type, a head layout).
    Unsupported(String),
    /// An option out of range, named.
    Options(String),
    /// The step's batch is invalid.
    Batch(BatchError),
    /// An argument that the backend's own code got wrong (a buffer shorter than a kernel needs). A bug, reported
    /// rather than launched.
    Internal(String),
    /// cudarc panicked (a library symbol it could not load, an assertion); caught at the backend's boundary.
    Panic(String),
    /// An earlier failure left the device in an unknown state; the backend refuses further steps.
    Poisoned(String),
}

impl CudaBackendError {
    /// True when there is simply no usable GPU here (no driver, no device, no compiler), rather than a fault.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CudaBackendError::NoDriver | CudaBackendError::NoDevice(_) | CudaBackendError::NoCompiler)
    }

    /// A driver error, with what the backend was doing.
    pub(crate) fn driver(during: &'static str) -> impl FnOnce(DriverError) -> Self {
        move |error| CudaBackendError::Driver { during, error }
    }
}

impl fmt::Display for CudaBackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaBackendError::NoDriver => {
                write!(f, "no CUDA driver: libcuda.so could not be loaded (no NVIDIA driver installed?)")
            }
            CudaBackendError::NoDevice(detail) => write!(f, "no usable CUDA device: {detail}"),
            CudaBackendError::NoCompiler => write!(
                f,
                "no NVRTC: libnvrtc.so.13 (or .12) could not be loaded to compile the kernels; install the CUDA \
                 toolkit's NVRTC or put its lib folder on LD_LIBRARY_PATH (scripts/fetch-nvrtc.sh fetches one)"
            ),
            CudaBackendError::Compile { arch, log } => {
                write!(f, "NVRTC could not compile the kernels for {arch}:\n{log}")
            }
            CudaBackendError::Driver { during, error } => write!(f, "CUDA error while {during}: {error:?}"),
            CudaBackendError::Gguf(e) => e.fmt(f),
            CudaBackendError::Unsupported(detail) => write!(f, "not supported by the CUDA backend: {detail}"),
            CudaBackendError::Options(detail) => write!(f, "invalid CUDA backend option: {detail}"),
            CudaBackendError::Batch(e) => e.fmt(f),
            CudaBackendError::Internal(detail) => write!(f, "CUDA backend bug: {detail}"),
            CudaBackendError::Panic(detail) => write!(f, "the CUDA library panicked: {detail}"),
            CudaBackendError::Poisoned(detail) => {
                write!(f, "the CUDA backend is unusable after an earlier failure: {detail}")
            }
        }
    }
}

impl std::error::Error for CudaBackendError {}

impl From<BatchError> for CudaBackendError {
    fn from(e: BatchError) -> Self {
        CudaBackendError::Batch(e)
    }
}

impl From<GgufError> for CudaBackendError {
    fn from(e: GgufError) -> Self {
        CudaBackendError::Gguf(e)
    }
}
