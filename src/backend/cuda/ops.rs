//! The operations of a step as the backend records them, and the plan of kernel launches they become.
//!
//! The `LlamaBackend` methods only record (`Op`); the step runs when `logits` ends it. Recording first lets the
//! backend see neighbouring operations and fuse them, and lets a decode step be replayed from a CUDA graph when its
//! operations are those the graph was recorded from. The plan ([`plan`]) is a pure function, tested below:
//!
//! - `RmsNorm(X → Xn)` then `Matmul(Xn → …)` becomes one projection that normalizes as it reads (for steps of
//!   at most `SMALL_BATCH_MAX_TOKENS` tokens, the only ones `project_small` runs); it still writes `Xn`;
//! - `Matmul(… → [Gate, Up])` then `Gated` becomes one projection that writes act(gate)·up into `Gate`;
//! - `MatmulAdd` is a projection that adds into its output (the residual add); `RmsNormAdd` (Gemma 3's normalized
//!   residual branch) is a norm that adds into its output, never fused;
//! - `HeadNorms(l)` (q/k norms) normalizes the heads of `Q` and `K` in place, one launch each;
//! - `Attention(l)` is two launches: RoPE and the cache append for every token, then attention;
//! - `AddBias` (Qwen 2's and gpt-oss' q/k/v biases, gpt-oss' output-projection bias) is one launch each, after the
//!   projections;
//! - `AddScaled` (Granite's scaled residual branch) is one launch, after the projection into `Xn`;
//! - `Moe(l, io)` (a mixture-of-experts FFN) is one planned launch that `execute_moe.rs` runs as its few kernels;
//!   the norm before it stays separate (its output is the block's input and output both);
//! - `LatentAttention(l, input)` (DeepSeek's) is one planned launch that `execute_latent.rs` runs as its kernels;
//!   the norm before it stays separate.
//!
//! A sequence the rules do not match runs operation by operation, unfused: fusing never changes what the
//! operations mean, only how many launches they take.

use crate::model::llama::forward::{Bias, Buf, Norm, Weight};

/// Most projections of one input the backend records in one op (the forward pass groups at most three).
pub const MAX_OUTPUTS: usize = 3;

/// Up to three projections of one input: `(weight, output buffer)` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outputs {
    items: [Option<(Weight, Buf)>; MAX_OUTPUTS],
}

impl Outputs {
    /// The first `MAX_OUTPUTS` of `outputs`.
    pub fn new(outputs: &[(Weight, Buf)]) -> Self {
        Outputs { items: std::array::from_fn(|i| outputs.get(i).copied()) }
    }

    pub fn iter(&self) -> impl Iterator<Item = (Weight, Buf)> + '_ {
        self.items.iter().flatten().copied()
    }

    fn writes(&self, b: Buf) -> bool {
        self.iter().any(|(_, out)| out == b)
    }
}

/// A recorded `LlamaBackend` operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Embed {
        dst: Buf,
    },
    RmsNorm {
        src: Buf,
        weight: Norm,
        dst: Buf,
    },
    Matmul {
        src: Buf,
        outputs: Outputs,
    },
    MatmulAdd {
        src: Buf,
        weight: Weight,
        dst: Buf,
    },
    RmsNormAdd {
        src: Buf,
        weight: Norm,
        dst: Buf,
    },
    HeadNorms {
        layer: usize,
    },
    Attention {
        layer: usize,
    },
    Gated,
    AddBias {
        dst: Buf,
        bias: Bias,
    },
    /// `dst += factor · src`; the factor as its bits (`f32::to_bits`), so that ops compare exactly.
    AddScaled {
        src: Buf,
        dst: Buf,
        factor_bits: u32,
    },
    /// The mixture-of-experts FFN of `layer`: `io`'s rows replaced by the block's output.
    Moe {
        layer: usize,
        io: Buf,
    },
    /// The latent attention of `layer` from the normalized rows in `input`, into `Att`.
    LatentAttention {
        layer: usize,
        input: Buf,
    },
}

/// An RMSNorm applied by the projection that reads its output: `weight`, and `dst`, the buffer the normalized input
/// is still written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormInput {
    pub weight: Norm,
    pub dst: Buf,
}

/// A planned launch (or, for a projection of several types of matrices, a few).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    Embed {
        dst: Buf,
    },
    /// `dst (+)= src / rms(src) ⊙ weight`.
    RmsNorm {
        src: Buf,
        weight: Norm,
        dst: Buf,
        add: bool,
    },
    /// `out (+)= w · src'` for each output, where `src'` is `src` normalized when `norm` is set.
    Project {
        src: Buf,
        norm: Option<NormInput>,
        outputs: Outputs,
        add: bool,
    },
    /// `Gate = act(gate · src') ⊙ (up · src')`, `Up = up · src'`.
    ProjectGated {
        src: Buf,
        norm: Option<NormInput>,
        gate: Weight,
        up: Weight,
    },
    HeadNorms {
        layer: usize,
    },
    RopeStore {
        layer: usize,
    },
    Attention {
        layer: usize,
    },
    Gated,
    /// `dst[row] += bias` (Qwen 2's projection biases).
    AddBias {
        dst: Buf,
        bias: Bias,
    },
    /// `dst += factor · src` (Granite's residual scale), the factor as `f32` bits.
    AddScaled {
        src: Buf,
        dst: Buf,
        factor_bits: u32,
    },
    /// The router, the routing, the routed experts and the shared expert of `layer` (`execute_moe.rs`).
    Moe {
        layer: usize,
        io: Buf,
    },
    /// The projections, key store, absorption, attention and decompression of `layer`'s latent attention
    /// (`execute_latent.rs`).
    LatentAttention {
        layer: usize,
        input: Buf,
    },
}

/// The launches that carry out `ops`, fusing as the module comment says; `fuse_norms` allows the norm fusion
/// (steps small enough for `project_small`).
pub fn plan(ops: &[Op], fuse_norms: bool, out: &mut Vec<Launch>) {
    out.clear();
    let mut i = 0;
    while i < ops.len() {
        let (launch, used) = match ops[i] {
            Op::RmsNorm { src, weight, dst } => match ops.get(i + 1) {
                Some(&Op::Matmul { src: input, outputs })
                    if fuse_norms && input == dst && !outputs.writes(src) && !outputs.writes(dst) =>
                {
                    project(src, Some(NormInput { weight, dst }), outputs, ops.get(i + 2), 2)
                }
                _ => (Launch::RmsNorm { src, weight, dst, add: false }, 1),
            },
            Op::Matmul { src, outputs } => project(src, None, outputs, ops.get(i + 1), 1),
            Op::MatmulAdd { src, weight, dst } => {
                (Launch::Project { src, norm: None, outputs: Outputs::new(&[(weight, dst)]), add: true }, 1)
            }
            Op::RmsNormAdd { src, weight, dst } => (Launch::RmsNorm { src, weight, dst, add: true }, 1),
            Op::HeadNorms { layer } => (Launch::HeadNorms { layer }, 1),
            Op::Attention { layer } => {
                out.push(Launch::RopeStore { layer });
                (Launch::Attention { layer }, 1)
            }
            Op::Embed { dst } => (Launch::Embed { dst }, 1),
            Op::Gated => (Launch::Gated, 1),
            Op::AddBias { dst, bias } => (Launch::AddBias { dst, bias }, 1),
            Op::AddScaled { src, dst, factor_bits } => (Launch::AddScaled { src, dst, factor_bits }, 1),
            Op::Moe { layer, io } => (Launch::Moe { layer, io }, 1),
            Op::LatentAttention { layer, input } => (Launch::LatentAttention { layer, input }, 1),
        };
        out.push(launch);
        i += used;
    }
}

/// A projection of `outputs` (ops consumed so far: `used`), fused with the gated activation that follows it when
/// it computes exactly `Gate` and `Up`.
fn project(src: Buf, norm: Option<NormInput>, outputs: Outputs, next: Option<&Op>, used: usize) -> (Launch, usize) {
    let mut it = outputs.iter();
    if let (Some(Op::Gated), Some((gate, Buf::Gate)), Some((up, Buf::Up)), None) =
        (next, it.next(), it.next(), it.next())
    {
        if src != Buf::Gate && src != Buf::Up {
            return (Launch::ProjectGated { src, norm, gate, up }, used + 1);
        }
    }
    (Launch::Project { src, norm, outputs, add: false }, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ops `forward` records for one layer `l`.
    fn layer_ops(l: usize) -> Vec<Op> {
        vec![
            Op::RmsNorm { src: Buf::X, weight: Norm::Attn(l), dst: Buf::Xn },
            Op::Matmul {
                src: Buf::Xn,
                outputs: Outputs::new(&[
                    (Weight::AttnQ(l), Buf::Q),
                    (Weight::AttnK(l), Buf::K),
                    (Weight::AttnV(l), Buf::V),
                ]),
            },
            Op::Attention { layer: l },
            Op::MatmulAdd { src: Buf::Att, weight: Weight::AttnOutput(l), dst: Buf::X },
            Op::RmsNorm { src: Buf::X, weight: Norm::Ffn(l), dst: Buf::Xn },
            Op::Matmul {
                src: Buf::Xn,
                outputs: Outputs::new(&[(Weight::FfnGate(l), Buf::Gate), (Weight::FfnUp(l), Buf::Up)]),
            },
            Op::Gated,
            Op::MatmulAdd { src: Buf::Gate, weight: Weight::FfnDown(l), dst: Buf::X },
        ]
    }

    #[test]
    fn a_small_step_layer_is_six_launches() {
        let mut launches = Vec::new();
        plan(&layer_ops(4), true, &mut launches);
        let norm = |weight| Some(NormInput { weight, dst: Buf::Xn });
        assert_eq!(
            launches,
            [
                Launch::Project {
                    src: Buf::X,
                    norm: norm(Norm::Attn(4)),
                    outputs: Outputs::new(&[
                        (Weight::AttnQ(4), Buf::Q),
                        (Weight::AttnK(4), Buf::K),
                        (Weight::AttnV(4), Buf::V)
                    ]),
                    add: false
                },
                Launch::RopeStore { layer: 4 },
                Launch::Attention { layer: 4 },
                Launch::Project {
                    src: Buf::Att,
                    norm: None,
                    outputs: Outputs::new(&[(Weight::AttnOutput(4), Buf::X)]),
                    add: true
                },
                Launch::ProjectGated {
                    src: Buf::X,
                    norm: norm(Norm::Ffn(4)),
                    gate: Weight::FfnGate(4),
                    up: Weight::FfnUp(4)
                },
                Launch::Project {
                    src: Buf::Gate,
                    norm: None,
                    outputs: Outputs::new(&[(Weight::FfnDown(4), Buf::X)]),
                    add: true
                },
            ]
        );
    }

    #[test]
    fn a_large_step_keeps_its_norms_separate() {
        let mut launches = Vec::new();
        plan(&layer_ops(0), false, &mut launches);
        assert_eq!(launches.len(), 8);
        assert_eq!(launches[0], Launch::RmsNorm { src: Buf::X, weight: Norm::Attn(0), dst: Buf::Xn, add: false });
        assert!(matches!(launches[1], Launch::Project { src: Buf::Xn, norm: None, add: false, .. }));
        assert!(matches!(launches[6], Launch::ProjectGated { src: Buf::Xn, norm: None, .. }));
    }

    #[test]
    fn sequences_that_do_not_match_stay_unfused() {
        let mut launches = Vec::new();
        let gate_up = Outputs::new(&[(Weight::FfnGate(0), Buf::Gate), (Weight::FfnUp(0), Buf::Up)]);
        let up_gate = Outputs::new(&[(Weight::FfnUp(0), Buf::Up), (Weight::FfnGate(0), Buf::Gate)]);
        let ops = [
            // A norm whose output the next matmul does not read.
            Op::RmsNorm { src: Buf::X, weight: Norm::Output, dst: Buf::Xn },
            Op::Matmul { src: Buf::Att, outputs: gate_up },
            // Gate and up in the other order: silu would apply to the wrong one.
            Op::Matmul { src: Buf::Xn, outputs: up_gate },
            Op::Gated,
            // A projection that overwrites the norm's input.
            Op::RmsNorm { src: Buf::X, weight: Norm::Output, dst: Buf::Xn },
            Op::Matmul { src: Buf::Xn, outputs: Outputs::new(&[(Weight::AttnQ(0), Buf::X)]) },
        ];
        plan(&ops, true, &mut launches);
        assert_eq!(launches.len(), 6);
        assert!(matches!(launches[0], Launch::RmsNorm { .. }));
        assert!(matches!(launches[1], Launch::Project { src: Buf::Att, norm: None, .. }));
        assert!(matches!(launches[2], Launch::Project { src: Buf::Xn, .. }));
        assert_eq!(launches[3], Launch::Gated);
        assert!(matches!(launches[4], Launch::RmsNorm { .. }));
        assert!(matches!(launches[5], Launch::Project { src: Buf::Xn, norm: None, .. }));
    }

    /// The ops `forward` records for one Gemma 3 layer: q/k norms, and normalized residual branches.
    fn gemma_layer_ops(l: usize) -> Vec<Op> {
        let mut ops = layer_ops(l);
        ops.insert(2, Op::HeadNorms { layer: l });
        let branch = |src, weight, post| {
            [
                Op::Matmul { src, outputs: Outputs::new(&[(weight, Buf::Xn)]) },
                Op::RmsNormAdd { src: Buf::Xn, weight: post, dst: Buf::X },
            ]
        };
        ops.splice(4..5, branch(Buf::Att, Weight::AttnOutput(l), Norm::PostAttn(l)));
        let last = ops.len() - 1;
        ops.splice(last.., branch(Buf::Gate, Weight::FfnDown(l), Norm::PostFfn(l)));
        ops
    }

    #[test]
    fn a_gemma_layer_adds_its_normalized_branches_unfused() {
        let mut launches = Vec::new();
        plan(&gemma_layer_ops(2), true, &mut launches);
        let post = |src, weight, norm| {
            [
                Launch::Project { src, norm: None, outputs: Outputs::new(&[(weight, Buf::Xn)]), add: false },
                Launch::RmsNorm { src: Buf::Xn, weight: norm, dst: Buf::X, add: true },
            ]
        };
        assert!(matches!(launches[0], Launch::Project { src: Buf::X, norm: Some(_), .. }));
        assert_eq!(
            launches[1..4],
            [Launch::HeadNorms { layer: 2 }, Launch::RopeStore { layer: 2 }, Launch::Attention { layer: 2 }]
        );
        assert_eq!(launches[4..6], post(Buf::Att, Weight::AttnOutput(2), Norm::PostAttn(2)));
        assert!(matches!(launches[6], Launch::ProjectGated { src: Buf::X, norm: Some(_), .. }));
        assert_eq!(launches[7..9], post(Buf::Gate, Weight::FfnDown(2), Norm::PostFfn(2)));
        assert_eq!(launches.len(), 9);
    }

    #[test]
    fn qwen2_biases_follow_their_fused_projection_one_launch_each() {
        let l = 1;
        let mut ops = layer_ops(l);
        let biases = [(Buf::Q, Bias::AttnQ(l)), (Buf::K, Bias::AttnK(l)), (Buf::V, Bias::AttnV(l))];
        ops.splice(2..2, biases.map(|(dst, bias)| Op::AddBias { dst, bias }));
        let mut launches = Vec::new();
        plan(&ops, true, &mut launches);
        assert!(matches!(launches[0], Launch::Project { src: Buf::X, norm: Some(_), .. }));
        assert_eq!(launches[1..4], biases.map(|(dst, bias)| Launch::AddBias { dst, bias }));
        assert_eq!(launches[4..6], [Launch::RopeStore { layer: l }, Launch::Attention { layer: l }]);
    }

    /// A mixture-of-experts layer: its FFN input norm is not fused (the block reads and overwrites `Xn`), the block
    /// is one planned launch, and the branch is added by one `add_scaled`.
    #[test]
    fn a_mixture_of_experts_layer_plans_its_block_between_a_norm_and_an_add() {
        let mut ops = layer_ops(3);
        let one = 1f32.to_bits();
        ops.splice(
            5..,
            [Op::Moe { layer: 3, io: Buf::Xn }, Op::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits: one }],
        );
        let mut launches = Vec::new();
        plan(&ops, true, &mut launches);
        assert_eq!(
            launches[4..],
            [
                Launch::RmsNorm { src: Buf::X, weight: Norm::Ffn(3), dst: Buf::Xn, add: false },
                Launch::Moe { layer: 3, io: Buf::Xn },
                Launch::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits: one },
            ]
        );
    }

    /// gpt-oss' biased output projection: into `Xn`, its bias, then the residual add of `Xn` (forward.rs's order).
    #[test]
    fn a_gpt_oss_output_projection_adds_its_bias_before_the_residual() {
        let one = 1f32.to_bits();
        let mut ops = layer_ops(2);
        ops.splice(
            3..4,
            [
                Op::Matmul { src: Buf::Att, outputs: Outputs::new(&[(Weight::AttnOutput(2), Buf::Xn)]) },
                Op::AddBias { dst: Buf::Xn, bias: Bias::AttnOutput(2) },
                Op::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits: one },
            ],
        );
        let mut launches = Vec::new();
        plan(&ops, true, &mut launches);
        let output = Outputs::new(&[(Weight::AttnOutput(2), Buf::Xn)]);
        assert_eq!(
            launches[3..6],
            [
                Launch::Project { src: Buf::Att, norm: None, outputs: output, add: false },
                Launch::AddBias { dst: Buf::Xn, bias: Bias::AttnOutput(2) },
                Launch::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits: one },
            ]
        );
    }

    /// Granite's scaled residual branches: the projection into `Xn`, then one `add_scaled` launch with the factor's
    /// exact bits.
    #[test]
    fn a_granite_layer_adds_its_scaled_branches_after_the_projections() {
        let factor_bits = 0.22f32.to_bits();
        let mut ops = layer_ops(1);
        let branch = |src, weight| {
            [
                Op::Matmul { src, outputs: Outputs::new(&[(weight, Buf::Xn)]) },
                Op::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits },
            ]
        };
        ops.splice(3..4, branch(Buf::Att, Weight::AttnOutput(1)));
        let last = ops.len() - 1;
        ops.splice(last.., branch(Buf::Gate, Weight::FfnDown(1)));
        let mut launches = Vec::new();
        plan(&ops, true, &mut launches);
        let scaled = Launch::AddScaled { src: Buf::Xn, dst: Buf::X, factor_bits };
        let positions: Vec<usize> = (0..launches.len()).filter(|&i| launches[i] == scaled).collect();
        assert_eq!(positions.len(), 2, "{launches:?}");
        for i in positions {
            assert!(
                matches!(launches[i - 1], Launch::Project { outputs, add: false, .. } if outputs.writes(Buf::Xn)),
                "{launches:?}"
            );
        }
    }
}
