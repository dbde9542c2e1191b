//! The operands of the mixture-of-experts kernels (`kernels/moe.cu`), their checks and launch shapes, as
//! `calls.rs` does for the dense ones: `args()` is a pure function, tested below without a GPU.

use cudarc::driver::LaunchConfig;

use super::args::{MoeDownArgs, MoeGateUpArgs, MoeGroupArgs, MoeSharedAddArgs, MoeTilesArgs, RouteArgs};
use super::calls::{activation_code, blocks, config, int, internal, matmul_tile, SMALL_BATCH_MAX_TOKENS};
use super::device_array::{DeviceArray, MatrixArray};
use super::error::CudaBackendError;
use crate::model::llama::architecture::{ExpertGlu, Gating};
use crate::model::llama::{FfnActivation, MoeConfig};

/// Most experts `moe_route` takes (`ROUTE_MAX_EXPERTS` of moe.cu; `experts::MAX_EXPERTS`, which the config's
/// reader holds files to).
pub const ROUTE_MAX_EXPERTS: usize = 512;
const ROUTE_THREADS: u32 = 256;
const MOE_THREADS: u32 = 128;
const MOE_ROWS_PER_BLOCK: usize = 4;
const SHARED_ADD_THREADS: u32 = 256;
const GROUP_THREADS: u32 = 256;
/// `MM_THREADS` and `MM_BM` of common.cuh: the grouped expert kernels' blocks and rows per block.
const TILED_THREADS: u32 = 256;
const TILED_ROWS_PER_BLOCK: usize = 64;
/// A grid's largest second dimension; the kernels loop over what does not fit.
const MAX_GRID_Y: usize = 65535;

/// Each token's experts and weights from its router logits (`MoeConfig::route` on the device).
pub struct RouteCall<'a> {
    /// `[n_tokens][moe.n_expert]`.
    pub logits: DeviceArray<'a, f32>,
    /// `[moe.n_expert]`: the router's bias (`moe.biases`), added to every token's logits before the routing.
    pub bias: Option<DeviceArray<'a, f32>>,
    /// `[moe.n_expert]`: the layer's selection bias (`exp_probs_b`, `moe.selection_bias`), added to the
    /// probabilities to choose the experts, not to their weights.
    pub selection_bias: Option<DeviceArray<'a, f32>>,
    /// `[n_tokens][moe.n_expert_used]`.
    pub selected: DeviceArray<'a, i32>,
    pub weights: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub moe: &'a MoeConfig,
}

impl RouteCall<'_> {
    pub fn args(&self) -> Result<(RouteArgs, LaunchConfig), CudaBackendError> {
        let (n, k) = (self.moe.n_expert, self.moe.n_expert_used);
        if n == 0 || n > ROUTE_MAX_EXPERTS || k == 0 || k > n {
            return Err(internal(format!("routing {k} of {n} experts (at most {ROUTE_MAX_EXPERTS})")));
        }
        // `read_groups` of experts.rs holds a file to these; the kernel's group scores need two experts a group.
        let (n_group, group_used) = match self.moe.groups {
            None => (0, 0),
            Some(g)
                if g.count > 1 && n.is_multiple_of(g.count) && n / g.count >= 2 && (1..g.count).contains(&g.used) =>
            {
                (g.count as i32, g.used as i32)
            }
            Some(g) => return Err(internal(format!("{} of {} groups of {n} experts", g.used, g.count))),
        };
        if self.moe.selection_bias != self.selection_bias.is_some() {
            return Err(internal("a selection bias for a layer without one, or none for a layer with one".into()));
        }
        let args = RouteArgs {
            logits: self.logits.covering(self.n_tokens * n, "the router logits")?,
            bias: optional(self.bias, n, "the router's bias")?,
            selected: self.selected.covering(self.n_tokens * k, "the chosen experts")?,
            weights: self.weights.covering(self.n_tokens * k, "the experts' weights")?,
            n_tokens: int(self.n_tokens, "tokens")?,
            n_expert: n as i32,
            k: k as i32,
            gating: match self.moe.gating {
                Gating::Softmax => 0,
                Gating::Sigmoid => 1,
                Gating::SoftmaxOfChosen => 2,
            },
            normalize: i32::from(self.moe.normalize_weights),
            scale: match self.moe.weights_scale {
                None => 0.0,
                Some(s) if s.is_finite() && s > 0.0 => s,
                Some(s) => return Err(internal(format!("expert weights scale {s}"))),
            },
            selection_bias: optional(self.selection_bias, n, "the experts' selection bias")?,
            n_group,
            group_used,
        };
        Ok((args, config((blocks(self.n_tokens, 1)?, 1), ROUTE_THREADS)))
    }
}

/// Where each expert's gate and up rows sit in their stacked tensors.
#[derive(Clone, Copy)]
pub struct ExpertRows<'a> {
    /// `[n_expert · stride rows][n_embd]`.
    pub gate: MatrixArray<'a>,
    /// The up tensor: `gate` itself when the file fuses them (`ffn_gate_up_exps`).
    pub up: MatrixArray<'a>,
    /// Rows from one expert's first gate row to the next's (`n_ff_exp`, or `2 n_ff_exp` fused).
    pub stride: usize,
    /// Rows from an expert's first gate row to its first up row (0, or `n_ff_exp` fused).
    pub up_offset: usize,
}

/// The address of an optional array of at least `n` elements, or 0 (null: the kernel's "none").
fn optional(array: Option<DeviceArray<'_, f32>>, n: usize, what: &str) -> Result<u64, CudaBackendError> {
    array.map_or(Ok(0), |a| a.covering(n, what))
}

/// The experts' biases (gpt-oss), `[n_expert][width]` each: gate and up `n_ff_exp` wide, down `n_embd`.
#[derive(Clone, Copy)]
pub struct ExpertBiases<'a> {
    pub gate: DeviceArray<'a, f32>,
    pub up: DeviceArray<'a, f32>,
    pub down: DeviceArray<'a, f32>,
}

/// `hidden[pair] = act(gate_e · x[token] + gb_e, up_e · x[token] + ub_e)` for every (token, slot) pair, `e` its
/// expert, `act(g, u)` the dense FFN's `act(g) · u` or gpt-oss' clamped SwiGLU.
pub struct MoeGateUpCall<'a> {
    pub experts: ExpertRows<'a>,
    /// `[n_tokens][n_embd]`.
    pub x: DeviceArray<'a, f32>,
    /// `[n_tokens][k]`.
    pub selected: DeviceArray<'a, i32>,
    /// `[n_tokens · k][n_ff]`.
    pub hidden: DeviceArray<'a, f32>,
    pub n_tokens: usize,
    pub k: usize,
    pub n_expert: usize,
    /// One expert's width.
    pub n_ff: usize,
    /// The dense FFN's activation, which `glu` may name for the experts too.
    pub activation: FfnActivation,
    pub glu: ExpertGlu,
    pub biases: Option<ExpertBiases<'a>>,
}

impl MoeGateUpCall<'_> {
    pub fn args(&self) -> Result<(MoeGateUpArgs, LaunchConfig), CudaBackendError> {
        let (e, ff) = (&self.experts, self.n_ff);
        let cols = e.gate.cols;
        if e.up.dtype != e.gate.dtype || e.up.cols != cols {
            return Err(internal("the experts' gate and up of different types or widths".into()));
        }
        if e.stride < e.up_offset + ff || self.n_expert == 0 {
            return Err(internal(format!("experts of {ff} rows every {} rows, up at {}", e.stride, e.up_offset)));
        }
        let total = self.n_expert * e.stride;
        if e.gate.rows != total || e.up.rows != total {
            return Err(internal(format!(
                "{} experts of {} rows in tensors of {} rows",
                self.n_expert, e.stride, e.gate.rows
            )));
        }
        let ((gate_qs, gate_sc), (up_qs, up_sc)) =
            (e.gate.addresses("the experts' gate")?, e.up.addresses("the experts' up")?);
        let pairs = self.n_tokens * self.k;
        let (act, alpha, limit) = match self.glu {
            ExpertGlu::AsDense => (activation_code(self.activation), 0.0, 0.0),
            // `alpha` divides (the CPU's `routed_experts` holds it to the same).
            ExpertGlu::SwigluOai { alpha, limit } if alpha.is_normal() => (2, alpha, limit),
            ExpertGlu::SwigluOai { alpha, .. } => return Err(internal(format!("a SwiGLU alpha of {alpha}"))),
        };
        let biases = self.n_expert * ff;
        let args = MoeGateUpArgs {
            gate_qs,
            gate_sc,
            up_qs,
            up_sc,
            x: self.x.covering(self.n_tokens * cols, "the experts' input")?,
            selected: self.selected.covering(pairs, "the chosen experts")?,
            hidden: self.hidden.covering(pairs * ff, "the experts' hidden rows")?,
            gate_bias: optional(self.biases.map(|b| b.gate), biases, "the experts' gate biases")?,
            up_bias: optional(self.biases.map(|b| b.up), biases, "the experts' up biases")?,
            rows: int(ff, "an expert's width")?,
            cols: int(cols, "the row length")?,
            expert_stride: int(e.stride, "the expert stride")?,
            up_offset: int(e.up_offset, "the up rows' offset")?,
            n_tokens: int(self.n_tokens, "tokens")?,
            k: int(self.k, "experts per token")?,
            n_expert: int(self.n_expert, "experts")?,
            act,
            alpha,
            limit,
        };
        let grid_y = pairs.min(MAX_GRID_Y) as u32;
        Ok((args, config((blocks(ff, MOE_ROWS_PER_BLOCK)?, grid_y), MOE_THREADS)))
    }
}

/// `out[t] = Σ_s weights[t][s] · (down_e · hidden[t·k + s] + db_e)` in slot order, `e = selected[t][s]`.
pub struct MoeDownCall<'a> {
    /// `[n_expert · n_embd rows][n_ff]`.
    pub down: MatrixArray<'a>,
    pub hidden: DeviceArray<'a, f32>,
    pub selected: DeviceArray<'a, i32>,
    pub weights: DeviceArray<'a, f32>,
    /// `[n_tokens][n_embd]`.
    pub out: DeviceArray<'a, f32>,
    /// `[n_expert][n_embd]`: each expert's down bias (gpt-oss).
    pub bias: Option<DeviceArray<'a, f32>>,
    pub n_tokens: usize,
    pub k: usize,
    pub n_expert: usize,
}

impl MoeDownCall<'_> {
    pub fn args(&self) -> Result<(MoeDownArgs, LaunchConfig), CudaBackendError> {
        let (cols, n_expert) = (self.down.cols, self.n_expert);
        if n_expert == 0 || !self.down.rows.is_multiple_of(n_expert) {
            return Err(internal(format!("a down tensor of {} rows for {n_expert} experts", self.down.rows)));
        }
        let rows = self.down.rows / n_expert;
        let (qs, sc) = self.down.addresses("the experts' down")?;
        let pairs = self.n_tokens * self.k;
        let args = MoeDownArgs {
            qs,
            sc,
            hidden: self.hidden.covering(pairs * cols, "the experts' hidden rows")?,
            selected: self.selected.covering(pairs, "the chosen experts")?,
            weights: self.weights.covering(pairs, "the experts' weights")?,
            out: self.out.covering(self.n_tokens * rows, "the experts' output")?,
            bias: optional(self.bias, n_expert * rows, "the experts' down biases")?,
            rows: int(rows, "the output width")?,
            cols: int(cols, "an expert's width")?,
            n_tokens: int(self.n_tokens, "tokens")?,
            k: int(self.k, "experts per token")?,
            n_expert: int(n_expert, "experts")?,
            pad: 0,
        };
        let grid_y = self.n_tokens.min(MAX_GRID_Y) as u32;
        Ok((args, config((blocks(rows, MOE_ROWS_PER_BLOCK)?, grid_y), MOE_THREADS)))
    }
}

/// Whether a step runs its routed experts grouped by expert (`moe_group`, then a tiled matmul per expert) rather
/// than per (token, slot) pair. As the dense projections take the tiled matmul past [`SMALL_BATCH_MAX_TOKENS`]
/// rows, so do the experts, when the step also has at least as many pairs as there are experts: below that most
/// experts get one pair or none, a tile would read an expert's rows for one pair as a per-pair matvec does, and the
/// grouping would be pure overhead. Decode steps (a few rows) keep the per-pair kernels, which read only the chosen
/// experts' bytes. Both paths give the same bits (moe.cu), so this decides speed only; the bound is reasoned, not
/// measured on a GPU.
pub fn grouped_experts(n_tokens: usize, k: usize, n_expert: usize) -> bool {
    n_tokens > SMALL_BATCH_MAX_TOKENS && n_tokens * k >= n_expert
}

/// Pairs per tile of the grouped expert kernels for a step of `pairs` pairs: the dense matmul's tile
/// ([`matmul_tile`]: 16, 32 or 64) for the pairs an expert gets on average.
pub fn expert_tile(pairs: usize, n_expert: usize) -> usize {
    matmul_tile(pairs.div_ceil(n_expert.max(1)))
}

/// The most tiles `pairs` pairs over `n_expert` experts make at `tile` pairs per tile: every full tile, plus at
/// most one partial tile per expert that has pairs.
pub fn max_expert_tiles(pairs: usize, n_expert: usize, tile: usize) -> usize {
    pairs / tile + n_expert.min(pairs)
}

/// Where a step's pairs grouped by expert live on the device (`MoeBuffers::grouped`), at one tile width.
#[derive(Clone, Copy)]
pub struct PairTiles<'a> {
    /// `[pairs]`: the pairs, expert by expert, each expert's in pair order.
    pub order: DeviceArray<'a, i32>,
    /// `[max tiles][3]`: each tile's expert, first position in `order` and number of pairs.
    pub tiles: DeviceArray<'a, i32>,
    /// `[1]`: how many tiles the step has.
    pub n_tiles: DeviceArray<'a, i32>,
    /// `[pairs][n_embd]`: each pair's expert output, before the weighted sum.
    pub pair_out: DeviceArray<'a, f32>,
    /// Pairs per tile: 16, 32 or 64 ([`expert_tile`]).
    pub tile: usize,
}

impl PairTiles<'_> {
    /// The tiled kernels' second parameter for `pairs` pairs over `n_expert` experts, `width` the down's output
    /// width; with the most tiles, which the grid covers.
    fn args(&self, pairs: usize, n_expert: usize, width: usize) -> Result<(MoeTilesArgs, usize), CudaBackendError> {
        if ![16, 32, 64].contains(&self.tile) {
            return Err(internal(format!("expert tiles of {} pairs", self.tile)));
        }
        let max_tiles = max_expert_tiles(pairs, n_expert, self.tile);
        let args = MoeTilesArgs {
            order: self.order.covering(pairs, "the pairs by expert")?,
            tiles: self.tiles.covering(3 * max_tiles, "the expert tiles")?,
            n_tiles: self.n_tiles.covering(1, "the tile count")?,
            pair_out: self.pair_out.covering(pairs * width, "the pairs' expert outputs")?,
        };
        Ok((args, max_tiles))
    }
}

/// The step's pairs grouped by expert into `tiles` (`moe_group`, one block).
pub struct MoeGroupCall<'a> {
    /// `[n_tokens][k]`: each pair's expert.
    pub selected: DeviceArray<'a, i32>,
    pub tiles: PairTiles<'a>,
    pub pairs: usize,
    pub n_expert: usize,
    /// The down's output width (`n_embd`), for `tiles.pair_out`.
    pub width: usize,
}

impl MoeGroupCall<'_> {
    pub fn args(&self) -> Result<(MoeGroupArgs, LaunchConfig), CudaBackendError> {
        if self.n_expert == 0 || self.n_expert > ROUTE_MAX_EXPERTS {
            return Err(internal(format!("grouping pairs over {} experts", self.n_expert)));
        }
        let (tiles, max_tiles) = self.tiles.args(self.pairs, self.n_expert, self.width)?;
        let args = MoeGroupArgs {
            selected: self.selected.covering(self.pairs, "the chosen experts")?,
            order: tiles.order,
            tiles: tiles.tiles,
            n_tiles: tiles.n_tiles,
            n_pairs: int(self.pairs, "pairs")?,
            n_expert: self.n_expert as i32,
            tile: self.tiles.tile as i32,
            max_tiles: int(max_tiles, "expert tiles")?,
        };
        Ok((args, config((1, 1), GROUP_THREADS)))
    }
}

/// The grid of a grouped expert kernel: blocks of 64 of `rows` rows by every tile a step can have (the kernel
/// loops past the grid's limit; blocks past the step's tiles leave).
fn tiled_grid(rows: usize, max_tiles: usize) -> Result<LaunchConfig, CudaBackendError> {
    Ok(config((blocks(rows, TILED_ROWS_PER_BLOCK)?, max_tiles.clamp(1, MAX_GRID_Y) as u32), TILED_THREADS))
}

impl MoeGateUpCall<'_> {
    /// The per-pair call's operands for `moe_gate_up_tiled_*`, with the pairs grouped in `tiles`.
    pub fn tiled_args(
        &self,
        tiles: &PairTiles<'_>,
    ) -> Result<(MoeGateUpArgs, MoeTilesArgs, LaunchConfig), CudaBackendError> {
        let (args, _) = self.args()?;
        let pairs = self.n_tokens * self.k;
        let (tiles, max_tiles) = tiles.args(pairs, self.n_expert, self.experts.gate.cols)?;
        Ok((args, tiles, tiled_grid(self.n_ff, max_tiles)?))
    }
}

impl MoeDownCall<'_> {
    /// The per-pair call's operands for `moe_down_tiled_*` (each pair's output into `tiles.pair_out`).
    pub fn tiled_args(
        &self,
        tiles: &PairTiles<'_>,
    ) -> Result<(MoeDownArgs, MoeTilesArgs, LaunchConfig), CudaBackendError> {
        let (args, _) = self.args()?;
        let (tiles, max_tiles) = tiles.args(self.n_tokens * self.k, self.n_expert, args.rows as usize)?;
        Ok((args, tiles, tiled_grid(args.rows as usize, max_tiles)?))
    }

    /// The operands of `moe_weighted_sum`: `out` from what `moe_down_tiled_*` left in `tiles.pair_out`.
    pub fn weighted_sum_args(
        &self,
        tiles: &PairTiles<'_>,
    ) -> Result<(MoeDownArgs, MoeTilesArgs, LaunchConfig), CudaBackendError> {
        let (args, _) = self.args()?;
        let rows = args.rows as usize;
        let (tiles, _) = tiles.args(self.n_tokens * self.k, self.n_expert, rows)?;
        let n = int(self.n_tokens * rows, "outputs")? as usize;
        Ok((args, tiles, config((blocks(n, SHARED_ADD_THREADS as usize)?, 1), SHARED_ADD_THREADS)))
    }
}

/// `out += g · y`, `g` σ of each token's shared-expert gate logit, or 1 without one.
pub struct MoeSharedAddCall<'a> {
    pub out: DeviceArray<'a, f32>,
    pub y: DeviceArray<'a, f32>,
    /// `[n_tokens]`.
    pub gate: Option<DeviceArray<'a, f32>>,
    pub n_tokens: usize,
    pub width: usize,
}

impl MoeSharedAddCall<'_> {
    pub fn args(&self) -> Result<(MoeSharedAddArgs, LaunchConfig), CudaBackendError> {
        let n = self.n_tokens.checked_mul(self.width).ok_or_else(|| internal("shared expert rows overflow".into()))?;
        let args = MoeSharedAddArgs {
            out: self.out.covering(n, "the block's output")?,
            y: self.y.covering(n, "the shared expert's output")?,
            gate: match self.gate {
                Some(g) => g.covering(self.n_tokens, "the shared expert's gate")?,
                None => 0,
            },
            n_tokens: int(self.n_tokens, "tokens")?,
            width: int(self.width, "the width")?,
        };
        int(n, "elements")?;
        Ok((args, config((blocks(n, SHARED_ADD_THREADS as usize)?, 1), SHARED_ADD_THREADS)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::packing::PackedType;
    use crate::model::llama::experts::ExpertGroups;

    fn matrix<'a>(dtype: PackedType, rows: usize, cols: usize) -> MatrixArray<'a> {
        let blocks = rows * cols / 32;
        MatrixArray {
            dtype,
            rows,
            cols,
            quants: DeviceArray::fake(0x1000, blocks * dtype.quant_words()),
            scales: DeviceArray::fake(0x9000_0000, blocks * dtype.scale_words()),
        }
    }

    fn moe(n_expert: usize, k: usize) -> MoeConfig {
        MoeConfig {
            n_expert,
            n_expert_used: k,
            n_ff_exp: 64,
            gating: Gating::Softmax,
            normalize_weights: true,
            weights_scale: None,
            shared: None,
            fused_gate_up: false,
            biases: false,
            activation: ExpertGlu::AsDense,
            selection_bias: false,
            groups: None,
            first_layer: 0,
        }
    }

    #[test]
    fn routing_is_bounded_by_the_kernels_expert_count() {
        let call = |m: &MoeConfig, t: usize| {
            RouteCall {
                logits: DeviceArray::fake(0, 3 * 512),
                bias: None,
                selection_bias: None,
                selected: DeviceArray::fake(0, 3 * 8),
                weights: DeviceArray::fake(0, 3 * 8),
                n_tokens: t,
                moe: m,
            }
            .args()
            .map(|(a, c)| (a.n_expert, a.k, c.grid_dim))
        };
        assert_eq!(call(&moe(512, 8), 3).unwrap(), (512, 8, (3, 1, 1)));
        assert!(call(&moe(513, 8), 1).is_err());
        assert!(call(&moe(512, 8), 4).is_err(), "short logits");
        assert!(call(&moe(8, 9), 1).is_err());
    }

    #[test]
    fn expert_calls_check_the_stacked_tensors_and_cover_every_pair() {
        let (gate, down) = (matrix(PackedType::Q4K, 8 * 64, 256), matrix(PackedType::Q6K, 8 * 256, 64));
        let fused = matrix(PackedType::Q4K, 8 * 128, 256);
        let gate_up = |experts, n_tokens| MoeGateUpCall {
            experts,
            x: DeviceArray::fake(0, n_tokens * 256),
            selected: DeviceArray::fake(0, n_tokens * 2),
            hidden: DeviceArray::fake(0, n_tokens * 2 * 64),
            n_tokens,
            k: 2,
            n_expert: 8,
            n_ff: 64,
            activation: FfnActivation::Silu,
            glu: ExpertGlu::AsDense,
            biases: None,
        };
        let split = ExpertRows { gate, up: gate, stride: 64, up_offset: 0 };
        let (args, cfg) = gate_up(split, 5).args().unwrap();
        assert_eq!((args.rows, args.expert_stride, cfg.grid_dim), (64, 64, (16, 10, 1)));
        let joined = ExpertRows { gate: fused, up: fused, stride: 128, up_offset: 64 };
        assert_eq!(gate_up(joined, 1).args().unwrap().0.up_offset, 64);
        assert!(gate_up(ExpertRows { stride: 100, ..joined }, 1).args().is_err(), "stride against the rows");
        let q8 = matrix(PackedType::Q8_0, 8 * 64, 256);
        assert!(gate_up(ExpertRows { up: q8, ..split }, 1).args().is_err(), "two types in one launch");
        // 70,000 pairs: the grid stops at 65,535 and the kernel loops.
        assert_eq!(gate_up(split, 35_000).args().unwrap().1.grid_dim.1, 65_535);
        let down_call = |n_expert| MoeDownCall {
            down,
            hidden: DeviceArray::fake(0, 3 * 2 * 64),
            selected: DeviceArray::fake(0, 3 * 2),
            weights: DeviceArray::fake(0, 3 * 2),
            out: DeviceArray::fake(0, 3 * 256),
            bias: None,
            n_tokens: 3,
            k: 2,
            n_expert,
        };
        let (args, cfg) = down_call(8).args().unwrap();
        assert_eq!((args.rows, args.cols, cfg.grid_dim), (256, 64, (64, 3, 1)));
        assert!(down_call(7).args().is_err());
    }

    #[test]
    fn gpt_oss_experts_pass_their_gating_activation_and_biases_or_null_without_them() {
        let oss = MoeConfig {
            gating: Gating::SoftmaxOfChosen,
            normalize_weights: false,
            biases: true,
            activation: ExpertGlu::SwigluOai { alpha: 1.702, limit: 7.0 },
            ..moe(32, 4)
        };
        let route = |bias_len: usize| {
            RouteCall {
                logits: DeviceArray::fake(0x100, 2 * 32),
                bias: Some(DeviceArray::fake(0x4000, bias_len)),
                selection_bias: None,
                selected: DeviceArray::fake(0, 2 * 4),
                weights: DeviceArray::fake(0, 2 * 4),
                n_tokens: 2,
                moe: &oss,
            }
            .args()
            .map(|(a, _)| (a.gating, a.bias, a.normalize))
        };
        assert_eq!(route(32).unwrap(), (2, 0x4000, 0));
        assert!(route(31).is_err(), "a bias short of one expert");
        let gate = matrix(PackedType::Mxfp4, 32 * 64, 256);
        let biases = |len: usize| ExpertBiases {
            gate: DeviceArray::fake(0x1_0000, len),
            up: DeviceArray::fake(0x2_0000, len),
            down: DeviceArray::fake(0x3_0000, 32 * 256),
        };
        let gate_up = |glu, biases| MoeGateUpCall {
            experts: ExpertRows { gate, up: gate, stride: 64, up_offset: 0 },
            x: DeviceArray::fake(0, 256),
            selected: DeviceArray::fake(0, 4),
            hidden: DeviceArray::fake(0, 4 * 64),
            n_tokens: 1,
            k: 4,
            n_expert: 32,
            n_ff: 64,
            activation: FfnActivation::Silu,
            glu,
            biases,
        };
        let (args, _) = gate_up(oss.activation, Some(biases(32 * 64))).args().unwrap();
        assert_eq!((args.act, args.alpha, args.limit), (2, 1.702, 7.0));
        assert_eq!((args.gate_bias, args.up_bias), (0x1_0000, 0x2_0000));
        assert!(gate_up(oss.activation, Some(biases(32 * 64 - 1))).args().is_err(), "short expert biases");
        let subnormal = ExpertGlu::SwigluOai { alpha: 1e-40, limit: 7.0 };
        assert!(gate_up(subnormal, None).args().is_err(), "alpha divides");
        let (args, _) = gate_up(ExpertGlu::AsDense, None).args().unwrap();
        assert_eq!((args.act, args.gate_bias, args.up_bias), (0, 0, 0));
        let down = |bias| MoeDownCall {
            down: matrix(PackedType::Mxfp4, 32 * 256, 64),
            hidden: DeviceArray::fake(0, 4 * 64),
            selected: DeviceArray::fake(0, 4),
            weights: DeviceArray::fake(0, 4),
            out: DeviceArray::fake(0, 256),
            bias,
            n_tokens: 1,
            k: 4,
            n_expert: 32,
        };
        assert_eq!(down(Some(biases(0).down)).args().unwrap().0.bias, 0x3_0000);
        assert!(down(Some(DeviceArray::fake(0x3_0000, 256))).args().is_err(), "one expert's down bias only");
        assert_eq!(down(None).args().unwrap().0.bias, 0);
    }

    #[test]
    fn deepseeks_selection_bias_and_groups_reach_the_routing_kernel_or_are_refused() {
        let v3 = MoeConfig {
            gating: Gating::Sigmoid,
            selection_bias: true,
            groups: Some(ExpertGroups { count: 8, used: 4 }),
            ..moe(256, 8)
        };
        let route = |m: &MoeConfig, bias_len: Option<usize>| {
            RouteCall {
                logits: DeviceArray::fake(0x100, 256),
                bias: None,
                selection_bias: bias_len.map(|n| DeviceArray::fake(0x5000, n)),
                selected: DeviceArray::fake(0, 8),
                weights: DeviceArray::fake(0, 8),
                n_tokens: 1,
                moe: m,
            }
            .args()
            .map(|(a, _)| (a.selection_bias, a.n_group, a.group_used, a.bias))
        };
        assert_eq!(route(&v3, Some(256)).unwrap(), (0x5000, 8, 4, 0));
        assert!(route(&v3, Some(255)).is_err(), "a selection bias short of one expert");
        assert!(route(&v3, None).is_err(), "a layer with a selection bias routed without it");
        let plain = MoeConfig { selection_bias: false, groups: None, ..v3.clone() };
        assert_eq!(route(&plain, None).unwrap(), (0, 0, 0, 0));
        assert!(route(&plain, Some(256)).is_err(), "a selection bias the config does not have");
        for (count, used) in [(7, 2), (256, 2), (8, 0), (8, 8)] {
            let m = MoeConfig { groups: Some(ExpertGroups { count, used }), ..v3.clone() };
            assert!(route(&m, Some(256)).is_err(), "{used} of {count} groups");
        }
    }

    #[test]
    fn steps_past_a_few_rows_with_a_pair_per_expert_take_the_grouped_path() {
        assert!(!grouped_experts(8, 8, 32), "a step project_small takes stays per pair");
        assert!(grouped_experts(9, 8, 32));
        assert!(!grouped_experts(16, 1, 32), "fewer pairs than experts");
        assert!(grouped_experts(16, 2, 32) && grouped_experts(512, 8, 128));
        // The tile follows the pairs an expert gets on average, as the dense matmul's follows the tokens.
        assert_eq!(
            [(128, 32), (16 * 2, 8), (512 * 8, 128), (4096, 8)].map(|(p, e)| expert_tile(p, e)),
            [16, 16, 32, 64]
        );
    }

    #[test]
    fn no_split_of_a_steps_pairs_over_the_experts_makes_more_tiles_than_the_bound() {
        // Every way of giving `pairs` pairs to 4 experts (some none), at each tile width: the tiles moe_group makes.
        for tile in [1, 2, 3, 16] {
            for pairs in 0..=12usize {
                for a in 0..=pairs {
                    for b in 0..=pairs - a {
                        for c in 0..=pairs - a - b {
                            let counts = [a, b, c, pairs - a - b - c];
                            let tiles: usize = counts.iter().map(|n| n.div_ceil(tile)).sum();
                            assert!(tiles <= max_expert_tiles(pairs, 4, tile), "{counts:?} at {tile}");
                        }
                    }
                }
            }
        }
        // Its two terms: the full tiles, and at most one partial tile per expert, or per pair when fewer.
        assert_eq!(max_expert_tiles(64, 4, 16), 4 + 4);
        assert_eq!(max_expert_tiles(3, 8, 16), 3);
    }

    #[test]
    fn grouped_calls_cover_every_tile_a_step_can_have() {
        let (gate, down) = (matrix(PackedType::Q4K, 8 * 64, 256), matrix(PackedType::Q6K, 8 * 256, 64));
        let (n_tokens, k) = (12, 2);
        let pairs = n_tokens * k;
        let tiles = |tile, tiles_len| PairTiles {
            order: DeviceArray::fake(0x100, pairs),
            tiles: DeviceArray::fake(0x200, tiles_len),
            n_tiles: DeviceArray::fake(0x300, 1),
            pair_out: DeviceArray::fake(0x400, pairs * 256),
            tile,
        };
        // 24 pairs over 8 experts at 16 per tile: 1 full tile and up to 8 partial ones.
        assert_eq!(expert_tile(pairs, 8), 16);
        let full = tiles(16, 3 * 9);
        let group =
            |t| MoeGroupCall { selected: DeviceArray::fake(0x500, pairs), tiles: t, pairs, n_expert: 8, width: 256 };
        let (args, cfg) = group(full).args().unwrap();
        assert_eq!((args.n_pairs, args.tile, args.max_tiles, cfg.grid_dim), (24, 16, 9, (1, 1, 1)));
        assert_eq!((args.order, args.tiles, args.n_tiles), (0x100, 0x200, 0x300));
        assert!(group(tiles(16, 3 * 9 - 1)).args().is_err(), "room for one tile too few");
        assert!(group(tiles(24, 3 * 9)).args().is_err(), "no kernel for tiles of 24");
        let gate_up = MoeGateUpCall {
            experts: ExpertRows { gate, up: gate, stride: 64, up_offset: 0 },
            x: DeviceArray::fake(0, n_tokens * 256),
            selected: DeviceArray::fake(0, pairs),
            hidden: DeviceArray::fake(0, pairs * 64),
            n_tokens,
            k,
            n_expert: 8,
            n_ff: 64,
            activation: FfnActivation::Silu,
            glu: ExpertGlu::AsDense,
            biases: None,
        };
        // Blocks of 64 rows by the 9 tiles a step of 24 pairs can have.
        let (args, tiles_args, cfg) = gate_up.tiled_args(&full).unwrap();
        assert_eq!((args.rows, tiles_args.pair_out, cfg.grid_dim, cfg.block_dim), (64, 0x400, (1, 9, 1), (256, 1, 1)));
        let down = MoeDownCall {
            down,
            hidden: DeviceArray::fake(0, pairs * 64),
            selected: DeviceArray::fake(0, pairs),
            weights: DeviceArray::fake(0, pairs),
            out: DeviceArray::fake(0, n_tokens * 256),
            bias: None,
            n_tokens,
            k,
            n_expert: 8,
        };
        assert_eq!(down.tiled_args(&full).unwrap().2.grid_dim, (4, 9, 1));
        assert_eq!(down.weighted_sum_args(&full).unwrap().2.grid_dim, (12, 1, 1));
        let short = PairTiles { pair_out: DeviceArray::fake(0x400, pairs * 256 - 1), ..full };
        assert!(down.tiled_args(&short).is_err(), "a pair's output row short");
    }
}
