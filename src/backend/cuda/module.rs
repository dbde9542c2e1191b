//! The kernels' CUDA C sources, compiled by NVRTC once per process and GPU architecture, and loaded per context.
//!
//! The sources are embedded in the binary (`include_str!`), so nothing but the driver and NVRTC is needed at run
//! time. They are compiled as one program, the headers (`common.cuh`, `kv_cache.cuh`) first; a `#line` marker
//! before each file makes NVRTC's log name the file and line of an error. The target is the virtual architecture
//! of the device (`compute_90` on Hopper): the driver turns its PTX into machine code at load, and a newer GPU
//! runs the newest PTX it can.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use super::device::{guard, nvrtc_library_present};
use super::error::CudaBackendError;
use super::packing::PackedType;
use crate::backend::{KvCacheType, KvCacheTypes};

/// The definitions every kernel file may use, in compilation order, before the kernel files.
const HEADERS: [(&str, &str); 2] =
    [("common.cuh", include_str!("kernels/common.cuh")), ("kv_cache.cuh", include_str!("kernels/kv_cache.cuh"))];

/// Every kernel file, by name, in compilation order (after the headers).
pub const KERNEL_FILES: [(&str, &str); 10] = [
    ("embed.cu", include_str!("kernels/embed.cu")),
    ("rms_norm.cu", include_str!("kernels/rms_norm.cu")),
    ("matvec.cu", include_str!("kernels/matvec.cu")),
    ("matmul.cu", include_str!("kernels/matmul.cu")),
    ("rope_kv.cu", include_str!("kernels/rope_kv.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
    ("latent.cu", include_str!("kernels/latent.cu")),
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("top_k.cu", include_str!("kernels/top_k.cu")),
    ("moe.cu", include_str!("kernels/moe.cu")),
];

/// Virtual architectures the kernels are compiled for, oldest first, as `(major, minor, name)`. The kernels need
/// sm_75 at least (CUDA 13 supports nothing older); `tests/cuda_nvrtc.rs` compiles for compute_80 and compute_90.
const ARCHITECTURES: [(i32, i32, &str); 8] = [
    (7, 5, "compute_75"),
    (8, 0, "compute_80"),
    (8, 6, "compute_86"),
    (8, 7, "compute_87"),
    (8, 9, "compute_89"),
    (9, 0, "compute_90"),
    (10, 0, "compute_100"),
    (12, 0, "compute_120"),
];

/// The newest virtual architecture a device of compute capability `(major, minor)` runs, if it runs any.
pub fn virtual_arch(compute_capability: (i32, i32)) -> Option<&'static str> {
    ARCHITECTURES.iter().rev().find(|&&(major, minor, _)| (major, minor) <= compute_capability).map(|a| a.2)
}

/// The types a program's per-type kernels are compiled for: the weight types of every matrix of the model, those of
/// its routed experts, for the kernels of moe.cu that only they use (none for a dense model), and the KV cache's
/// types (keys, values), for attention.cu's kernels (`attention_{keys}_{values}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelTypes {
    pub weights: Vec<PackedType>,
    pub experts: Vec<PackedType>,
    pub kv_caches: Vec<KvCacheTypes>,
}

impl KernelTypes {
    /// Every type, for each list (the whole program).
    pub fn all() -> Self {
        KernelTypes { weights: PackedType::ALL.to_vec(), experts: PackedType::ALL.to_vec(), kv_caches: all_kv_pairs() }
    }

    /// Each list sorted by type number, each type once: equal sets of types are one cache entry.
    fn normalized(&self) -> Self {
        let sorted = |types: &[PackedType]| {
            let mut types = types.to_vec();
            types.sort_by_key(|t| *t as usize);
            types.dedup();
            types
        };
        let mut kv_caches = self.kv_caches.clone();
        kv_caches.sort_by_key(|t| (t.keys as usize, t.values as usize));
        kv_caches.dedup();
        KernelTypes { weights: sorted(&self.weights), experts: sorted(&self.experts), kv_caches }
    }
}

/// Every pair of KV cache types, keys first, in `KvCacheType::ALL`'s order (`FOR_EACH_KV_PAIR` of kv_cache.cuh).
pub fn all_kv_pairs() -> Vec<KvCacheTypes> {
    let all = KvCacheType::ALL;
    all.iter().flat_map(|&keys| all.iter().map(move |&values| KvCacheTypes { keys, values })).collect()
}

/// The suffix of a pair's attention kernels: `{keys}_{values}` (`attention_q8_0_f16`).
pub fn kv_pair_suffix(types: KvCacheTypes) -> String {
    format!("{}_{}", types.keys.name(), types.values.name())
}

/// The headers followed by `files`, each behind a `#line` marker naming it: the kernels of every type.
pub fn program_source(files: &[(&str, &str)]) -> String {
    program_source_for(files, None)
}

/// [`program_source`] with the per-type kernels of `types` only (all types for `None`). A type list of `types` is
/// defined for the program as it is given (`EMBER_WEIGHT_TYPES`, `EMBER_EXPERT_TYPES`, `EMBER_KV_TYPES`).
pub fn program_source_for(files: &[(&str, &str)], types: Option<&KernelTypes>) -> String {
    let mut source = String::new();
    if let Some(types) = types {
        let list = |types: &[PackedType]| -> String {
            types
                .iter()
                .map(|t| format!(" X({}, TYPE_{})", t.kernel_suffix(), t.kernel_suffix().to_uppercase()))
                .collect()
        };
        source.push_str(&format!("#define EMBER_WEIGHT_TYPES(X){}\n", list(&types.weights)));
        source.push_str(&format!("#define EMBER_EXPERT_TYPES(X){}\n", list(&types.experts)));
        let pairs: String = types
            .kv_caches
            .iter()
            .map(|t| {
                let (k, v) = (t.keys.name(), t.values.name());
                format!(" X({k}, {v}, KV_{}, KV_{})", k.to_uppercase(), v.to_uppercase())
            })
            .collect();
        source.push_str(&format!("#define EMBER_KV_TYPES(X){pairs}\n"));
    }
    for (name, text) in HEADERS.iter().chain(files) {
        source.push_str(&format!("#line 1 \"{name}\"\n"));
        source.push_str(text);
        source.push('\n');
    }
    source
}

/// NVRTC's options for `arch`. FMA contraction is off: every FMA the batch-invariance argument of `common.cuh`
/// relies on is written out, and the compiler must not contract other expressions one way in a kernel and
/// another way in its twin.
pub fn compile_options(arch: &'static str) -> CompileOptions {
    CompileOptions { arch: Some(arch), fmad: Some(false), name: Some("ember_kernels.cu".into()), ..Default::default() }
}

/// Compiles `source` for `arch`. Needs only NVRTC, no GPU.
pub fn compile(source: &str, arch: &'static str) -> Result<Ptx, CudaBackendError> {
    if !nvrtc_library_present() {
        return Err(CudaBackendError::NoCompiler);
    }
    guard(|| {
        compile_ptx_with_opts(source, compile_options(arch)).map_err(|e| match e {
            CompileError::CompileError { log, .. } => {
                CudaBackendError::Compile { arch, log: log.to_string_lossy().into_owned() }
            }
            other => CudaBackendError::Compile { arch, log: format!("{other:?}") },
        })
    })
}

/// The whole program's PTX for `arch` (the kernels of every weight type), compiled on first use and kept for the
/// life of the process.
pub fn kernels_ptx(arch: &'static str) -> Result<Ptx, CudaBackendError> {
    kernels_ptx_for(arch, &KernelTypes::all())
}

/// The program's PTX for `arch` with the per-type kernels of `types` only, compiled on first use and kept for the
/// life of the process: a model of one or two weight types compiles a fifth of the kernels or less (on our CI
/// machine NVRTC took 2.2 s for SmolLM2's two types and 11.7 s for all thirteen types of the time, per architecture;
/// the 25 types of now are not re-measured), and a dense
/// model none of the experts' kernels.
///
/// A process-wide cache, although ember keeps no global state otherwise: compiling takes seconds, the result is a
/// pure function of the embedded sources, `arch` and `types`, and engines share nothing through it but the time
/// saved.
pub fn kernels_ptx_for(arch: &'static str, types: &KernelTypes) -> Result<Ptx, CudaBackendError> {
    /// PTX by architecture and (sorted) weight types.
    type PtxCache = HashMap<(&'static str, KernelTypes), Ptx>;
    static CACHE: OnceLock<Mutex<PtxCache>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let types = types.normalized();
    // Held while compiling: a second engine starting at the same time waits for the first's result.
    let mut compiled = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ptx) = compiled.get(&(arch, types.clone())) {
        return Ok(ptx.clone());
    }
    let ptx = compile(&program_source_for(&KERNEL_FILES, Some(&types)), arch)?;
    compiled.insert((arch, types), ptx.clone());
    Ok(ptx)
}

/// The compiled program loaded into one context.
pub struct KernelModule {
    module: Arc<CudaModule>,
}

impl KernelModule {
    /// Compiles (or takes from the cache) the program for the device's architecture, with the kernels of weight
    /// types `types`, and loads it.
    pub fn load(
        context: &Arc<CudaContext>,
        compute_capability: (i32, i32),
        types: &KernelTypes,
    ) -> Result<Self, CudaBackendError> {
        let arch = virtual_arch(compute_capability).ok_or_else(|| {
            CudaBackendError::Unsupported(format!(
                "compute capability {}.{}: the kernels need 7.5 or newer",
                compute_capability.0, compute_capability.1
            ))
        })?;
        let ptx = kernels_ptx_for(arch, types)?;
        let module = guard(|| context.load_module(ptx).map_err(CudaBackendError::driver("loading the kernels")))?;
        Ok(KernelModule { module })
    }

    /// The kernel `name` (an `extern "C"` function of the sources).
    pub fn function(&self, name: &str) -> Result<CudaFunction, CudaBackendError> {
        self.module.load_function(name).map_err(CudaBackendError::driver("finding a kernel in the module"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_get_the_newest_architecture_they_run() {
        assert_eq!(virtual_arch((9, 0)), Some("compute_90"));
        assert_eq!(virtual_arch((8, 9)), Some("compute_89"));
        assert_eq!(virtual_arch((8, 8)), Some("compute_87"));
        assert_eq!(virtual_arch((10, 3)), Some("compute_100"));
        assert_eq!(virtual_arch((13, 0)), Some("compute_120"));
        assert_eq!(virtual_arch((7, 0)), None);
    }

    #[test]
    fn the_program_names_each_file_before_its_text() {
        let source = program_source(&KERNEL_FILES);
        let mut at = 0;
        for (name, text) in HEADERS.iter().chain(&KERNEL_FILES) {
            let marker = format!("#line 1 \"{name}\"\n");
            at = at + source[at..].find(&marker).unwrap_or_else(|| panic!("{name} missing or out of order"));
            assert!(source[at + marker.len()..].starts_with(text), "{name} does not follow its marker");
        }
        assert!(!source.contains("#include"), "the kernels must compile without the CUDA headers");
    }
}
