//! Finding the GPU: probing for the driver without panicking, opening a context and the one stream the backend
//! works on, and the panic boundary around cudarc.
//!
//! cudarc loads `libcuda.so` on first use and panics when it cannot (TOOLCHAIN.md: `CudaContext::new` panics on a
//! machine without a driver, on every call). So the library's presence is probed first, and every call into
//! cudarc that could still panic (a symbol missing from an old driver, an assertion) runs under [`guard`].

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream};

use super::error::CudaBackendError;

/// What the backend knows of its device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// `(major, minor)`, e.g. `(9, 0)` for Hopper.
    pub compute_capability: (i32, i32),
    pub total_memory_bytes: usize,
    pub multiprocessors: i32,
}

/// An open device: its context, and the stream all of the backend's work goes to, in order.
pub struct CudaDevice {
    pub info: DeviceInfo,
    pub stream: Arc<CudaStream>,
    pub context: Arc<CudaContext>,
}

/// Whether the CUDA driver library can be loaded. Never panics.
pub fn driver_library_present() -> bool {
    // SAFETY: tries `dlopen` on the driver's file names; loading the real driver runs only its own initializers.
    catch_unwind(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false)
}

/// Whether the NVRTC library can be loaded. Never panics.
pub fn nvrtc_library_present() -> bool {
    // SAFETY: as for the driver: `dlopen` of NVRTC's file names.
    catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false)
}

/// Runs `f`, turning a panic inside it into [`CudaBackendError::Panic`].
///
/// The panic hook still prints the panic's message to stderr: replacing the hook would be process-wide state
/// shared with the host program, which a library must not touch.
pub fn guard<T>(f: impl FnOnce() -> Result<T, CudaBackendError>) -> Result<T, CudaBackendError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(CudaBackendError::Panic(message))
        }
    }
}

/// Describes device `ordinal` without keeping it open; an error says why there is no usable one.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, CudaBackendError> {
    CudaDevice::open(ordinal).map(|device| device.info)
}

impl CudaDevice {
    /// Opens device `ordinal`: checks for the driver, creates the context and a stream.
    pub fn open(ordinal: usize) -> Result<Self, CudaBackendError> {
        if !driver_library_present() {
            return Err(CudaBackendError::NoDriver);
        }
        guard(|| {
            let count = CudaContext::device_count()
                .map_err(|e| CudaBackendError::NoDevice(format!("the driver did not initialize: {e:?}")))?;
            if count <= 0 {
                return Err(CudaBackendError::NoDevice("the driver sees no device".into()));
            }
            if ordinal >= count as usize {
                return Err(CudaBackendError::NoDevice(format!("device {ordinal} asked for, {count} present")));
            }
            let context = CudaContext::new(ordinal).map_err(CudaBackendError::driver("creating a context"))?;
            // SAFETY: called before anything is allocated in this context. All of the backend's work goes to one
            // stream, in order, so cudarc's per-buffer events would only cost time; and a graph capture must not
            // wait on events recorded outside it, which those events would make every launch do.
            unsafe { context.disable_event_tracking() };
            let stream = context.new_stream().map_err(CudaBackendError::driver("creating a stream"))?;
            let attribute = |a| context.attribute(a).map_err(CudaBackendError::driver("reading device attributes"));
            let info = DeviceInfo {
                ordinal,
                name: context.name().map_err(CudaBackendError::driver("reading the device name"))?,
                compute_capability: (
                    attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                ),
                total_memory_bytes: context.total_mem().map_err(CudaBackendError::driver("reading the memory size"))?,
                multiprocessors: attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            };
            Ok(CudaDevice { info, stream, context })
        })
    }
}
