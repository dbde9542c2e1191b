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

#[test]
fn every_kernel_compiles_for_ampere_and_hopper() {
    if !nvrtc_available() {
        return;
    }
    let source = program_source(&KERNEL_FILES);
    for arch in ["compute_80", "compute_90"] {
        let ptx = compile(&source, arch).unwrap_or_else(|e| panic!("{e}")).to_src();
        let target = format!(".target sm_{}", &arch["compute_".len()..]);
        assert!(ptx.contains(&target), "{arch}: the PTX does not say {target:?}");
        for name in kernel_names() {
            assert!(ptx.contains(&format!(".entry {name}(")), "{arch}: kernel {name} is missing from the PTX");
        }
    }
}

#[test]
fn each_kernel_file_compiles_with_only_the_common_header() {
    if !nvrtc_available() {
        return;
    }
    for file in KERNEL_FILES {
        if let Err(e) = compile(&program_source(&[file]), "compute_90") {
            panic!("{} does not compile on its own: {e}", file.0);
        }
    }
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
