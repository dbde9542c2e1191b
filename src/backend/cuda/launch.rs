//! The loaded kernels, one safe typed function each: it takes the kernel's `*Call` (see `calls.rs`), whose
//! checks guarantee that every operand covers what the kernel touches, and launches it on the backend's stream.

use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use super::args::MoeTilesArgs;
use super::calls::*;
use super::calls_latent::{HeadsCopyCall, LatentKeysCall, LatentQueriesCall};
use super::calls_moe::{MoeDownCall, MoeGateUpCall, MoeGroupCall, MoeSharedAddCall, PairTiles, RouteCall};
use super::error::CudaBackendError;
use super::module::{all_kv_pairs, kv_pair_suffix, KernelModule, KernelTypes};
use super::packing::PackedType;
use crate::backend::KvCacheTypes;

/// Every kernel of the program, looked up once in the loaded module.
pub struct Kernels {
    /// Each indexed by [`PackedType`] number; `None` for a type the model does not have (not compiled).
    embed: Vec<Option<CudaFunction>>,
    rms_norm: CudaFunction,
    project_small: Vec<Option<CudaFunction>>,
    project_gated_small: Vec<Option<CudaFunction>>,
    /// `[type][tile]`, tiles of 16, 32 and 64 tokens.
    matmul: Vec<Option<[CudaFunction; 3]>>,
    rope_table: CudaFunction,
    rope_store: CudaFunction,
    /// `attention_{keys}_{values}` and `attention_wide_…` of each pair of cache types compiled
    /// (`KernelTypes::kv_caches`: the backend's own).
    attention: Vec<(KvCacheTypes, [CudaFunction; 2])>,
    latent_keys: CudaFunction,
    heads_copy: CudaFunction,
    latent_queries: CudaFunction,
    gated_activation: CudaFunction,
    add_bias: CudaFunction,
    add_scaled: CudaFunction,
    finish_logits: CudaFunction,
    top_k: CudaFunction,
    moe_route: CudaFunction,
    moe_shared_add: CudaFunction,
    /// The mixture-of-experts kernels of each weight type the routed experts have (`KernelTypes::experts`).
    moe_gate_up: Vec<Option<CudaFunction>>,
    moe_down: Vec<Option<CudaFunction>>,
    /// The grouped path's (prefill): `moe_group`, the tiled gate/up and down of each type `[type][tile]` (tiles of
    /// 16, 32 and 64 pairs), and `moe_weighted_sum`.
    moe_group: CudaFunction,
    moe_gate_up_tiled: Vec<Option<[CudaFunction; 3]>>,
    moe_down_tiled: Vec<Option<[CudaFunction; 3]>>,
    moe_weighted_sum: CudaFunction,
}

/// The kernels that are not compiled per weight type or per pair of KV cache types.
const SHARED_KERNELS: [&str; 15] = [
    "rms_norm",
    "rope_table",
    "rope_store",
    "latent_keys",
    "heads_copy",
    "latent_queries",
    "gated_activation",
    "add_bias",
    "add_scaled",
    "finish_logits",
    "top_k",
    "moe_route",
    "moe_shared_add",
    "moe_group",
    "moe_weighted_sum",
];

/// The attention kernels of a pair of cache types: heads up to 256 wide, and up to 576.
fn attention_names(types: KvCacheTypes) -> [String; 2] {
    let suffix = kv_pair_suffix(types);
    [format!("attention_{suffix}"), format!("attention_wide_{suffix}")]
}

/// The name of every kernel of the program (the `extern "C"` functions of the `.cu` files).
pub fn kernel_names() -> Vec<String> {
    let mut names: Vec<String> = SHARED_KERNELS.map(String::from).into();
    names.extend(all_kv_pairs().into_iter().flat_map(attention_names));
    for t in PackedType::ALL.map(PackedType::kernel_suffix) {
        names.extend([format!("embed_{t}"), format!("project_small_{t}"), format!("project_gated_small_{t}")]);
        names.extend([16, 32, 64].map(|n| format!("matmul_{t}_n{n}")));
        names.extend([format!("moe_gate_up_{t}"), format!("moe_down_{t}")]);
        names.extend([16, 32, 64].map(|n| format!("moe_gate_up_tiled_{t}_n{n}")));
        names.extend([16, 32, 64].map(|n| format!("moe_down_tiled_{t}_n{n}")));
    }
    names
}

fn tile_index(n_tokens: usize) -> usize {
    match matmul_tile(n_tokens) {
        16 => 0,
        32 => 1,
        _ => 2,
    }
}

impl Kernels {
    /// Looks up every kernel of `module`, which was compiled with the per-type kernels of `types`.
    pub fn load(module: &KernelModule, types: &KernelTypes) -> Result<Self, CudaBackendError> {
        let per_type_of = |prefix: &str, types: &[PackedType]| -> Result<Vec<Option<CudaFunction>>, CudaBackendError> {
            let of = |t: &PackedType| module.function(&format!("{prefix}_{}", t.kernel_suffix()));
            PackedType::ALL.iter().map(|t| types.contains(t).then(|| of(t)).transpose()).collect()
        };
        let per_type = |prefix: &str| per_type_of(prefix, &types.weights);
        // The three tile widths of each compiled type's `{prefix}_{type}_n{16,32,64}`.
        let tiled = |prefix: &str, types: &[PackedType]| -> Result<Vec<Option<[CudaFunction; 3]>>, CudaBackendError> {
            let of = |t: &PackedType| -> Result<[CudaFunction; 3], CudaBackendError> {
                let [a, b, c] = [16, 32, 64].map(|n| module.function(&format!("{prefix}_{}_n{n}", t.kernel_suffix())));
                Ok([a?, b?, c?])
            };
            PackedType::ALL.iter().map(|t| types.contains(t).then(|| of(t)).transpose()).collect()
        };
        Ok(Kernels {
            embed: per_type("embed")?,
            rms_norm: module.function("rms_norm")?,
            project_small: per_type("project_small")?,
            project_gated_small: per_type("project_gated_small")?,
            matmul: tiled("matmul", &types.weights)?,
            rope_table: module.function("rope_table")?,
            rope_store: module.function("rope_store")?,
            attention: types
                .kv_caches
                .iter()
                .map(|&t| {
                    let [narrow, wide] = attention_names(t).map(|name| module.function(&name));
                    Ok((t, [narrow?, wide?]))
                })
                .collect::<Result<_, CudaBackendError>>()?,
            latent_keys: module.function("latent_keys")?,
            heads_copy: module.function("heads_copy")?,
            latent_queries: module.function("latent_queries")?,
            gated_activation: module.function("gated_activation")?,
            add_bias: module.function("add_bias")?,
            add_scaled: module.function("add_scaled")?,
            finish_logits: module.function("finish_logits")?,
            top_k: module.function("top_k")?,
            moe_route: module.function("moe_route")?,
            moe_shared_add: module.function("moe_shared_add")?,
            moe_gate_up: per_type_of("moe_gate_up", &types.experts)?,
            moe_down: per_type_of("moe_down", &types.experts)?,
            moe_group: module.function("moe_group")?,
            moe_gate_up_tiled: tiled("moe_gate_up_tiled", &types.experts)?,
            moe_down_tiled: tiled("moe_down_tiled", &types.experts)?,
            moe_weighted_sum: module.function("moe_weighted_sum")?,
        })
    }

    pub fn embed(&self, stream: &CudaStream, call: &EmbedCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, compiled(&self.embed, call.table.dtype)?, &args, cfg)
    }

    pub fn rms_norm(&self, stream: &CudaStream, call: &RmsNormCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.rms_norm, &args, cfg)
    }

    pub fn project_small(&self, stream: &CudaStream, call: &ProjectSmallCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        let dtype = call.outputs[0].0.dtype;
        let table = if call.gated.is_some() { &self.project_gated_small } else { &self.project_small };
        launch(stream, compiled(table, dtype)?, &args, cfg)
    }

    pub fn matmul(&self, stream: &CudaStream, call: &MatmulCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &compiled(&self.matmul, call.matrix.dtype)?[tile_index(call.n_tokens)], &args, cfg)
    }

    pub fn rope_table(&self, stream: &CudaStream, call: &RopeTableCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.rope_table, &args, cfg)
    }

    pub fn rope_store(&self, stream: &CudaStream, call: &RopeStoreCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.rope_store, &args, cfg)
    }

    pub fn attention(&self, stream: &CudaStream, call: &AttentionCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        let types = call.cache.types;
        let (_, [narrow, wide]) = self.attention.iter().find(|(t, _)| *t == types).ok_or_else(|| {
            CudaBackendError::Internal(format!(
                "no attention over {} / {} caches was compiled",
                types.keys, types.values
            ))
        })?;
        launch(stream, if call.wide() { wide } else { narrow }, &args, cfg)
    }

    pub fn gated_activation(&self, stream: &CudaStream, call: &GatedCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.gated_activation, &args, cfg)
    }

    pub fn add_bias(&self, stream: &CudaStream, call: &AddBiasCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.add_bias, &args, cfg)
    }

    pub fn add_scaled(&self, stream: &CudaStream, call: &AddScaledCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.add_scaled, &args, cfg)
    }

    pub fn finish_logits(&self, stream: &CudaStream, call: &FinishLogitsCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.finish_logits, &args, cfg)
    }

    pub fn top_k(&self, stream: &CudaStream, call: &TopKCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.top_k, &args, cfg)
    }

    pub fn moe_route(&self, stream: &CudaStream, call: &RouteCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.moe_route, &args, cfg)
    }

    pub fn moe_gate_up(&self, stream: &CudaStream, call: &MoeGateUpCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, compiled(&self.moe_gate_up, call.experts.gate.dtype)?, &args, cfg)
    }

    pub fn moe_down(&self, stream: &CudaStream, call: &MoeDownCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, compiled(&self.moe_down, call.down.dtype)?, &args, cfg)
    }

    pub fn moe_group(&self, stream: &CudaStream, call: &MoeGroupCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.moe_group, &args, cfg)
    }

    pub fn moe_gate_up_tiled(
        &self,
        stream: &CudaStream,
        call: &MoeGateUpCall<'_>,
        tiles: &PairTiles<'_>,
    ) -> Result<(), CudaBackendError> {
        let (args, tiles_args, cfg) = call.tiled_args(tiles)?;
        let kernels = compiled(&self.moe_gate_up_tiled, call.experts.gate.dtype)?;
        launch_with_tiles(stream, &kernels[tile_index(tiles.tile)], &args, &tiles_args, cfg)
    }

    pub fn moe_down_tiled(
        &self,
        stream: &CudaStream,
        call: &MoeDownCall<'_>,
        tiles: &PairTiles<'_>,
    ) -> Result<(), CudaBackendError> {
        let (args, tiles_args, cfg) = call.tiled_args(tiles)?;
        let kernels = compiled(&self.moe_down_tiled, call.down.dtype)?;
        launch_with_tiles(stream, &kernels[tile_index(tiles.tile)], &args, &tiles_args, cfg)
    }

    pub fn moe_weighted_sum(
        &self,
        stream: &CudaStream,
        call: &MoeDownCall<'_>,
        tiles: &PairTiles<'_>,
    ) -> Result<(), CudaBackendError> {
        let (args, tiles_args, cfg) = call.weighted_sum_args(tiles)?;
        launch_with_tiles(stream, &self.moe_weighted_sum, &args, &tiles_args, cfg)
    }

    pub fn moe_shared_add(&self, stream: &CudaStream, call: &MoeSharedAddCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.moe_shared_add, &args, cfg)
    }

    pub fn latent_keys(&self, stream: &CudaStream, call: &LatentKeysCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.latent_keys, &args, cfg)
    }

    pub fn heads_copy(&self, stream: &CudaStream, call: &HeadsCopyCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.heads_copy, &args, cfg)
    }

    pub fn latent_queries(&self, stream: &CudaStream, call: &LatentQueriesCall<'_>) -> Result<(), CudaBackendError> {
        let (args, cfg) = call.args()?;
        launch(stream, &self.latent_queries, &args, cfg)
    }
}

/// The kernel of `dtype` in a per-type table; an internal error for a type that was not compiled (the backend
/// compiles every type its weights have, so no call names another).
fn compiled<T>(table: &[Option<T>], dtype: PackedType) -> Result<&T, CudaBackendError> {
    table[dtype as usize]
        .as_ref()
        .ok_or_else(|| CudaBackendError::Internal(format!("no {dtype:?} kernels were compiled for this model")))
}

/// Launches `function` with its one parameter struct `args`; a grid of no blocks launches nothing.
fn launch<A: DeviceRepr>(
    stream: &CudaStream,
    function: &CudaFunction,
    args: &A,
    cfg: LaunchConfig,
) -> Result<(), CudaBackendError> {
    if cfg.grid_dim.0 == 0 || cfg.grid_dim.1 == 0 {
        return Ok(());
    }
    let mut builder = stream.launch_builder(function);
    builder.arg(args);
    // SAFETY: `args` is the `#[repr(C)]` mirror of the kernel's only parameter (sizes asserted in Rust and in the
    // .cu file); its `args()` checked that every pointer in it covers what the kernel reads and writes for these
    // sizes; the buffers are the backend's and stay allocated until the stream has run the kernel (the backend
    // synchronizes before freeing any); the block size is the kernel's `__launch_bounds__`.
    unsafe { builder.launch(cfg) }.map(|_| ()).map_err(CudaBackendError::driver("launching a kernel"))
}

/// Launches a grouped expert kernel: its per-pair kernel's struct `args`, then `tiles` (`MoeTiles`).
fn launch_with_tiles<A: DeviceRepr>(
    stream: &CudaStream,
    function: &CudaFunction,
    args: &A,
    tiles: &MoeTilesArgs,
    cfg: LaunchConfig,
) -> Result<(), CudaBackendError> {
    if cfg.grid_dim.0 == 0 || cfg.grid_dim.1 == 0 {
        return Ok(());
    }
    let mut builder = stream.launch_builder(function);
    builder.arg(args).arg(tiles);
    // SAFETY: as `launch`'s, for both parameters: `#[repr(C)]` mirrors of the kernel's two structs, whose pointers
    // the call's `tiled_args` or `weighted_sum_args` checked against these sizes (the tiles' arrays against the most
    // tiles the grid covers); the buffers outlive the kernel; the block size is the kernel's `__launch_bounds__`.
    unsafe { builder.launch(cfg) }.map(|_| ()).map_err(CudaBackendError::driver("launching a kernel"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_name_is_defined_in_the_sources() {
        let source = super::super::module::program_source(&super::super::module::KERNEL_FILES);
        assert_eq!(kernel_names().len(), SHARED_KERNELS.len() + 2 * 9 + PackedType::ALL.len() * 14);
        // The per-type kernels are instantiated by FOR_EACH_WEIGHT_TYPE (tests/cuda_nvrtc.rs finds every name in
        // the compiled PTX); here, that its list is ours, in our order.
        let list: String = PackedType::ALL
            .iter()
            .map(|t| format!("X({}, TYPE_{}) ", t.kernel_suffix(), t.kernel_suffix().to_uppercase()))
            .collect();
        let flat = source.replace(['\\', '\n'], " ").split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(list.trim_end()), "FOR_EACH_WEIGHT_TYPE does not list {list}");
        for t in PackedType::ALL {
            let number = format!("#define TYPE_{} {}", t.kernel_suffix().to_uppercase(), t as usize);
            assert!(source.contains(&number), "common.cuh lacks {number:?}");
        }
        for name in SHARED_KERNELS {
            assert!(source.contains(&format!(" {name}(const ")), "kernel {name} is not defined in the sources");
        }
        // The attention kernels are instantiated by FOR_EACH_KV_PAIR, for every pair in `all_kv_pairs`' order.
        let pairs: String = all_kv_pairs()
            .iter()
            .map(|t| {
                let (k, v) = (t.keys.name(), t.values.name());
                format!("X({k}, {v}, KV_{}, KV_{}) ", k.to_uppercase(), v.to_uppercase())
            })
            .collect();
        assert!(flat.contains(pairs.trim_end()), "FOR_EACH_KV_PAIR does not list {pairs}");
    }
}
