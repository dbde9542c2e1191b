//! Every kernel of the CUDA backend compiles under NVRTC, for Ampere (compute_80) and Hopper (compute_90), on a
//! machine without a GPU: NVRTC needs no device. A kernel that does not compile fails CI here, not on the GPU.
//!
//! NVRTC comes from the PyPI wheel that `scripts/fetch-nvrtc.sh` unpacks; its lib folder must be on
//! `LD_LIBRARY_PATH` when the test starts:
//!
//! ```text
//! LD_LIBRARY_PATH="$(scripts/fetch-nvrtc.sh)" EMBER_REQUIRE_NVRTC=1 cargo test --release --test cuda_nvrtc
//! ```
//!
//! Without NVRTC the tests skip with a message, unless `EMBER_REQUIRE_NVRTC=1` (as CI sets it): then they fail.

use ember::backend::cuda::module::{all_kv_pairs, kv_pair_suffix};
use ember::backend::cuda::packing::PackedType;
use ember::backend::cuda::{
    compile, kernel_names, nvrtc_library_present, program_source, program_source_for, CudaBackendError, KernelTypes,
    KERNEL_FILES,
};
use ember::backend::{KvCacheType, KvCacheTypes};
use std::sync::Mutex;
use std::thread;

/// Whether NVRTC is here; panics when it is not but must be.
fn nvrtc_available() -> bool {
    if nvrtc_library_present() {
        return true;
    }
    let required = std::env::var("EMBER_REQUIRE_NVRTC").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "EMBER_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded: run scripts/fetch-nvrtc.sh and start the test with \
         LD_LIBRARY_PATH set to the folder it prints"
    );
    eprintln!("skipped: libnvrtc cannot be loaded (see scripts/fetch-nvrtc.sh; EMBER_REQUIRE_NVRTC=1 makes this fail)");
    false
}

/// Hopper (compute_90: the H100 and H200 that `scripts/gpu-check.sh` runs on): each kernel file compiles on its own
/// with only the common headers, so that no file leans on another's definitions, every type's kernels in it; and
/// together the files' PTX holds every kernel. The files compile on two threads, the costliest (`moe.cu`, all 25
/// types' experts: half of the whole program's NVRTC time) first.
#[test]
fn each_kernel_file_compiles_on_its_own_for_hopper_and_together_they_hold_every_kernel() {
    if !nvrtc_available() {
        return;
    }
    // Taken from the end: `moe.cu` last, so first.
    let mut queue: Vec<(&str, &str)> = KERNEL_FILES.to_vec();
    queue.sort_by_key(|(name, _)| *name == "moe.cu");
    let queue = Mutex::new(queue);
    let ptx: Vec<String> = thread::scope(|s| {
        let worker = || {
            let mut done = Vec::new();
            while let Some(file) = queue.lock().unwrap().pop() {
                match compile(&program_source(&[file]), "compute_90") {
                    Ok(ptx) => done.push(ptx.to_src()),
                    Err(e) => panic!("{} does not compile on its own: {e}", file.0),
                }
            }
            done
        };
        let workers = [s.spawn(worker), s.spawn(worker)];
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    assert!(ptx.iter().all(|p| p.contains(".target sm_90")), "a file's PTX does not say .target sm_90");
    for name in kernel_names() {
        let entry = format!(".entry {name}(");
        assert!(ptx.iter().any(|p| p.contains(&entry)), "compute_90: kernel {name} is missing from the PTX");
    }
}

/// Ampere (compute_80): the files compiled as one program, as a GPU compiles them, with every weight type and cache
/// pair, and the experts' kernels of one type. The experts' kernels of the others instantiate the same templates
/// over the same per-type code that the dense kernels compile here for every type (and Hopper compiles them all),
/// so they would double this test's time to show nothing more. No kernel source depends on `__CUDA_ARCH__`.
#[test]
fn the_whole_program_compiles_for_ampere() {
    if !nvrtc_available() {
        return;
    }
    let expert = PackedType::Q4K;
    let types = KernelTypes { experts: vec![expert], ..KernelTypes::all() };
    let ptx = compile(&program_source_for(&KERNEL_FILES, Some(&types)), "compute_80").unwrap_or_else(|e| panic!("{e}"));
    let ptx = ptx.to_src();
    assert!(ptx.contains(".target sm_80"), "the PTX does not say .target sm_80");
    let other_experts: Vec<String> =
        PackedType::ALL.iter().filter(|t| **t != expert).map(|t| format!("_{}", t.kernel_suffix())).collect();
    for name in kernel_names() {
        let an_other_types_expert = name.starts_with("moe_")
            && other_experts.iter().any(|s| name.ends_with(s.as_str()) || name.contains(&format!("{s}_n")));
        if !an_other_types_expert {
            assert!(ptx.contains(&format!(".entry {name}(")), "compute_80: kernel {name} is missing from the PTX");
        }
    }
}

/// Kernel names carry their type's suffix, so two types with one suffix would collide in a program of both.
#[test]
fn each_type_has_its_own_kernel_suffix() {
    let mut suffixes: Vec<&str> = PackedType::ALL.iter().map(|t| t.kernel_suffix()).collect();
    suffixes.sort_unstable();
    let count = suffixes.len();
    suffixes.dedup();
    assert_eq!(suffixes.len(), count, "two types share a kernel suffix");
}

#[test]
fn a_kernel_that_does_not_compile_is_reported_with_its_file_and_line() {
    if !nvrtc_available() {
        return;
    }
    let broken = ("broken.cu", "extern \"C\" __global__ void broken(float* x) {\n    x[0] = undefined_name;\n}\n");
    match compile(&program_source(&[broken]), "compute_90") {
        Err(CudaBackendError::Compile { arch, log }) => {
            assert_eq!(arch, "compute_90");
            assert!(log.contains("broken.cu(2)") && log.contains("undefined_name"), "unexpected log: {log}");
        }
        other => panic!("a broken kernel compiled: {other:?}"),
    }
}

#[test]
fn a_model_compiles_the_kernels_of_its_own_weight_types_its_experts_and_its_kv_cache_only() {
    if !nvrtc_available() {
        return;
    }
    // SmolLM2's file (Q4_1 matrices, a Q8_0 embedding; no experts) with the default f16 cache, and a mixture of
    // experts whose routed experts are Q4_K and its other matrices Q8_0 and Q6_K, with q8_0 keys and q4_0 values.
    let dense = KernelTypes {
        weights: vec![PackedType::Q8_0, PackedType::Q4_1],
        experts: vec![],
        kv_caches: vec![Default::default()],
    };
    let moe = KernelTypes {
        weights: vec![PackedType::Q8_0, PackedType::Q6K, PackedType::Q4K],
        experts: vec![PackedType::Q4K],
        kv_caches: vec![KvCacheTypes { keys: KvCacheType::Q8_0, values: KvCacheType::Q4_0 }],
    };
    for types in [dense, moe] {
        let source = program_source_for(&KERNEL_FILES, Some(&types));
        let ptx = compile(&source, "compute_90").unwrap_or_else(|e| panic!("{e}")).to_src();
        for t in PackedType::ALL {
            let suffix = t.kernel_suffix();
            let name = format!(".entry matmul_{suffix}_n16(");
            assert_eq!(ptx.contains(&name), types.weights.contains(&t), "{name} compiled: {}", ptx.contains(&name));
            for kernel in [format!("moe_gate_up_{suffix}("), format!("moe_down_tiled_{suffix}_n64(")] {
                let name = format!(".entry {kernel}");
                assert_eq!(ptx.contains(&name), types.experts.contains(&t), "{name} compiled: {}", ptx.contains(&name));
            }
        }
        for name in ["rms_norm", "rope_table", "rope_store", "gated_activation", "top_k", "moe_group"] {
            assert!(ptx.contains(&format!(".entry {name}(")), "kernel {name} is missing from the PTX");
        }
        for pair in all_kv_pairs() {
            let compiled = types.kv_caches.contains(&pair);
            for kernel in ["attention", "attention_wide"] {
                let name = format!(".entry {kernel}_{}(", kv_pair_suffix(pair));
                assert_eq!(ptx.contains(&name), compiled, "{name} compiled: {}", ptx.contains(&name));
            }
        }
    }
}
