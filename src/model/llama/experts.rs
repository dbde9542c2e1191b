//! Mixture-of-experts feed-forward blocks: their hyperparameters, read from a file as its family's
//! [`MoeLayout`](super::architecture::MoeLayout) says, and the router that picks each token's experts and their
//! weights (llama.cpp's `build_moe_ffn`, `src/llama-graph.cpp`).
//!
//! ```text
//! logits  = ffn_gate_inp · x               [+ ffn_gate_inp.bias]    [n_expert]   f32 weights and activations
//! probs   = softmax(logits)                [Sigmoid: σ(logits)] [SoftmaxOfChosen: logits]
//! choice  = probs                          [+ exp_probs_b]          (selection_bias: for the choice only)
//!                                          [groups: each group scored by the sum of its two best; all but the
//!                                           best `used` groups' experts out of the choice]
//! chosen  = the expert_used_count largest choice values, largest first (equal values: the lower expert first)
//! w       = probs[chosen]                  [SoftmaxOfChosen: softmax(w)]
//!                                          [normalize_weights: w / max(Σ w, 2^-14)] [· expert_weights_scale]
//! out     = Σ_slots w_s · (down_e(act(gate_e · x [+ b]) ⊙ (up_e · x [+ b])) [+ b])    e = chosen_s, in slot order
//!           [shared expert: + ffn_shexp(x), times σ(ffn_gate_inp_shexp · x) when gated]
//! ```
//!
//! Ties: llama.cpp orders the probabilities with `std::sort` (libstdc++'s introsort), which for up to 16 experts
//! is an insertion sort and keeps equal values in index order, as here; for more experts its order among exactly
//! equal probabilities is an artifact of the partitioning. Ours is the stable order for every count (our logits
//! are not llama.cpp's bits anyway, so exact equality between two experts is where the engines may differ).

use crate::model::gguf::GgufFile;

use super::architecture::{Architecture, ExpertGlu, ExpertWidth, ExpertsRule, Gating, KeyedRouting, SharedExpert};
use super::config::ModelConfigError;

/// Most experts a layer may have (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 512;
/// Most a token's chosen experts may add up to in FFN width (the widest dense FFN `config.rs` accepts; Mixtral's
/// 2 × 14336 and Qwen3-235B's 8 × 1536 are far below).
const MAX_ACTIVE_WIDTH: usize = 1 << 20;

/// The mixture-of-experts hyperparameters of a model (every layer alike).
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per layer (`expert_count`).
    pub n_expert: usize,
    /// Experts each token runs (`expert_used_count`).
    pub n_expert_used: usize,
    /// Width of each routed expert's FFN.
    pub n_ff_exp: usize,
    pub gating: Gating,
    /// The chosen experts' weights are divided by their sum.
    pub normalize_weights: bool,
    /// The weights are multiplied by this (`expert_weights_scale`, when present and not 0 or 1).
    pub weights_scale: Option<f32>,
    /// The shared expert, when the model has one.
    pub shared: Option<SharedFfn>,
    /// The experts' gate and up projections are one tensor, `ffn_gate_up_exps` (each expert's `2 n_ff_exp` rows,
    /// the gate's first).
    pub fused_gate_up: bool,
    /// The router and the experts' projections add biases (`ffn_gate_inp.bias`, `ffn_{gate,up,down}_exps.bias`).
    pub biases: bool,
    /// The experts' gated activation.
    pub activation: ExpertGlu,
    /// Each layer's `exp_probs_b.bias` (`n_expert` values) is added to the probabilities to choose the experts.
    pub selection_bias: bool,
    /// Group-limited routing: the experts are `count` groups of consecutive ones, and a token chooses among the
    /// best `used` groups only.
    pub groups: Option<ExpertGroups>,
    /// Layers `0..first_layer` have dense FFNs (`leading_dense_block_count`), the others experts.
    pub first_layer: usize,
}

/// Group-limited routing (DeepSeek's `n_group` and `topk_group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertGroups {
    pub count: usize,
    pub used: usize,
}

/// The per-expert selection bias of a layer (`MoeConfig::selection_bias`).
pub const SELECTION_BIAS: &str = "exp_probs_b.bias";

/// The fused gate and up projections of the experts.
pub const FUSED_GATE_UP_EXPS: &str = "ffn_gate_up_exps.weight";

/// A shared expert: a dense FFN every token runs beside its routed experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedFfn {
    /// Its width (`expert_shared_feed_forward_length`).
    pub n_ff: usize,
    /// Its output is scaled by σ(`ffn_gate_inp_shexp` · x) (Qwen 2 MoE).
    pub gated: bool,
}

fn invalid(key: &'static str, detail: String) -> ModelConfigError {
    ModelConfigError::Invalid { key, detail }
}

/// The mixture-of-experts hyperparameters of `file`, as `arch` reads them (`None`: a dense model). `n_ff` is the
/// file's `feed_forward_length`.
pub(super) fn read(
    file: &GgufFile,
    arch: Architecture,
    n_ff: usize,
    n_layer: usize,
) -> Result<Option<MoeConfig>, ModelConfigError> {
    let k = arch.keys();
    let count = file.optional(k.expert_count, GgufFile::u32)?.unwrap_or(0) as usize;
    let layout = match arch.spec().experts {
        ExpertsRule::Dense if count > 0 => {
            let detail = format!("{count} experts: {} files are dense in ember (as in llama.cpp)", arch.name());
            return Err(invalid(k.expert_count, detail));
        }
        ExpertsRule::Dense => return Ok(None),
        ExpertsRule::WhenCounted(_) if count == 0 => return Ok(None),
        ExpertsRule::WhenCounted(layout) | ExpertsRule::Always(layout) => layout,
    };
    if count == 0 || count > MAX_EXPERTS {
        return Err(invalid(k.expert_count, format!("{count} experts is not in 1..={MAX_EXPERTS}")));
    }
    let used = file.optional(k.expert_used_count, GgufFile::u32)?.unwrap_or(0) as usize;
    if used == 0 || used > count {
        return Err(invalid(k.expert_used_count, format!("{used} experts per token is not in 1..={count}")));
    }
    let keyed = layout.keyed;
    let groups = read_groups(file, arch, keyed, count, used)?;
    let n_ff_exp = match layout.expert_width {
        ExpertWidth::FeedForward => n_ff,
        // llama.cpp: `n_ff_exp ? n_ff_exp : n_ff / n_expert_used`.
        ExpertWidth::ExpertFeedForward => match file.optional(k.expert_feed_forward_length, GgufFile::u32)? {
            Some(w) if w > 0 => w as usize,
            _ => n_ff / used,
        },
    };
    // A token's experts together are no wider than the widest dense FFN ember accepts: the buffers of a step are
    // sized by it (`max_batch_tokens` rows of it each), so a file cannot make them larger than a dense one can.
    if n_ff_exp == 0 || used * n_ff_exp > MAX_ACTIVE_WIDTH {
        let detail =
            format!("{used} experts of {n_ff_exp} per token: their total width must be in 1..={MAX_ACTIVE_WIDTH}");
        return Err(invalid(k.expert_feed_forward_length, detail));
    }
    let shared_width = file.optional(k.expert_shared_feed_forward_length, GgufFile::u32)?.unwrap_or(0) as usize;
    let shared_count = file.optional(k.expert_shared_count, GgufFile::u32)?.unwrap_or(0) as usize;
    let shared = match layout.shared {
        SharedExpert::None => None,
        SharedExpert::Counted if shared_count == 0 => None,
        SharedExpert::Counted => match shared_count.checked_mul(n_ff_exp).filter(|&w| w <= MAX_ACTIVE_WIDTH) {
            Some(n_ff) => Some(SharedFfn { n_ff, gated: false }),
            None => {
                let detail = format!("{shared_count} shared experts of {n_ff_exp}: wider than {MAX_ACTIVE_WIDTH}");
                return Err(invalid(k.expert_shared_count, detail));
            }
        },
        SharedExpert::WhenSized if shared_width == 0 => None,
        SharedExpert::WhenSized => Some(SharedFfn { n_ff: shared_width, gated: false }),
        // llama.cpp: `n_ff_shexp ? n_ff_shexp : n_ff`.
        SharedExpert::SigmoidGated => {
            Some(SharedFfn { n_ff: if shared_width > 0 { shared_width } else { n_ff }, gated: true })
        }
    };
    if shared.is_some_and(|s| s.n_ff > MAX_ACTIVE_WIDTH) {
        let detail = format!("{shared_width} is not in 1..={MAX_ACTIVE_WIDTH}");
        return Err(invalid(k.expert_shared_feed_forward_length, detail));
    }
    let weights_scale = match file.optional(k.expert_weights_scale, GgufFile::f32)? {
        None => None,
        Some(s) if s == 0.0 || s == 1.0 => None,
        Some(s) if s.is_finite() && s > 0.0 => Some(s),
        Some(s) => return Err(invalid(k.expert_weights_scale, format!("{s} is not a positive scale"))),
    };
    let gating = match file.optional(k.expert_gating_func, GgufFile::u32)?.filter(|_| keyed.gating) {
        // llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_*`: 0 is "none", which it replaces by the family's default.
        None | Some(0) => layout.gating,
        Some(1) => Gating::Softmax,
        Some(2) => Gating::Sigmoid,
        Some(other) => {
            let detail = format!("{other}: ember implements 1 (softmax) and 2 (sigmoid)");
            return Err(invalid(k.expert_gating_func, detail));
        }
    };
    let normalize_weights = match keyed.normalize {
        true => file.optional(k.expert_weights_norm, GgufFile::bool)?.unwrap_or(false),
        false => layout.normalize_weights,
    };
    let first_layer = match keyed.leading_dense {
        true => file.optional(k.leading_dense_block_count, GgufFile::u32)?.unwrap_or(0) as usize,
        false => 0,
    };
    if first_layer >= n_layer {
        let detail = format!("{first_layer} dense blocks leave none of the {n_layer} with experts");
        return Err(invalid(k.leading_dense_block_count, detail));
    }
    let selection_bias = keyed.selection_bias
        && file.tensor_info(&super::LlamaConfig::layer_tensor(first_layer, SELECTION_BIAS)).is_some();
    Ok(Some(MoeConfig {
        n_expert: count,
        n_expert_used: used,
        n_ff_exp,
        gating,
        normalize_weights,
        weights_scale,
        shared,
        fused_gate_up: file.tensor_info(&format!("blk.0.{FUSED_GATE_UP_EXPS}")).is_some(),
        biases: layout.biases,
        activation: layout.activation,
        selection_bias,
        groups,
        first_layer,
    }))
}

/// Group-limited routing when the family reads it and the file asks for more than one group (llama.cpp's checks: the
/// groups divide the experts, and a token uses at least one and not all of them); refused by key otherwise.
fn read_groups(
    file: &GgufFile,
    arch: Architecture,
    keyed: KeyedRouting,
    count: usize,
    used: usize,
) -> Result<Option<ExpertGroups>, ModelConfigError> {
    let k = arch.keys();
    let Some(groups) = file.optional(k.expert_group_count, GgufFile::u32)?.filter(|&g| g > 1).map(|g| g as usize)
    else {
        return Ok(None);
    };
    if !keyed.groups {
        let detail = format!("{groups} expert groups: group-limited routing is not implemented for {}", arch.name());
        return Err(invalid(k.expert_group_count, detail));
    }
    // Each group is scored by its two best experts, so it needs two.
    if groups >= count || !count.is_multiple_of(groups) || count / groups < 2 {
        let detail = format!("{groups} groups: they must divide the {count} experts into groups of 2 or more");
        return Err(invalid(k.expert_group_count, detail));
    }
    let group_used = file.optional(k.expert_group_used_count, GgufFile::u32)?.unwrap_or(0) as usize;
    if group_used == 0 || group_used >= groups {
        return Err(invalid(k.expert_group_used_count, format!("{group_used} is not in 1..{groups}")));
    }
    // The chosen groups must hold enough experts to choose from (llama.cpp would pick masked ones).
    if group_used * (count / groups) < used {
        let detail = format!("{group_used} groups of {} experts hold fewer than the {used} chosen", count / groups);
        return Err(invalid(k.expert_group_used_count, detail));
    }
    Ok(Some(ExpertGroups { count: groups, used: group_used }))
}

/// llama.cpp's floor under the sum the weights are normalized by (the smallest normal f16).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

impl MoeConfig {
    /// Routes one token: from its router logits (`n_expert`, overwritten with the probabilities) to its experts
    /// (`selected`, `n_expert_used` ids, the most probable first) and their weights (`weights`). `selection_bias` is
    /// the layer's `exp_probs_b` (`n_expert` values) or empty; `choice` (`n_expert` values) is scratch for the values
    /// the experts are chosen by when they are not the probabilities. Deterministic, and the same on every backend
    /// that computes the same logits.
    pub fn route(
        &self,
        logits: &mut [f32],
        selection_bias: &[f32],
        choice: &mut [f32],
        selected: &mut [u32],
        weights: &mut [f32],
    ) {
        assert_eq!(logits.len(), self.n_expert, "one logit per expert");
        assert!(selected.len() == self.n_expert_used && weights.len() == self.n_expert_used);
        match self.gating {
            Gating::Softmax => softmax(logits),
            Gating::Sigmoid => logits.iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp())),
            Gating::SoftmaxOfChosen => {}
        }
        let probs = &*logits;
        if selection_bias.is_empty() && self.groups.is_none() {
            top_k(probs, selected);
        } else {
            let choice = &mut choice[..self.n_expert];
            choice.copy_from_slice(probs);
            if !selection_bias.is_empty() {
                choice.iter_mut().zip(selection_bias).for_each(|(c, b)| *c += b);
            }
            if let Some(groups) = self.groups {
                keep_best_groups(choice, groups);
            }
            top_k(choice, selected);
        }
        for (w, &e) in weights.iter_mut().zip(selected.iter()) {
            *w = probs[e as usize];
        }
        if self.gating == Gating::SoftmaxOfChosen {
            softmax(weights);
        }
        if self.normalize_weights {
            // As ggml's `sum_rows`: accumulated in f64.
            let sum = weights.iter().map(|&w| f64::from(w)).sum::<f64>() as f32;
            let sum = sum.max(MIN_WEIGHT_SUM);
            weights.iter_mut().for_each(|w| *w /= sum);
        }
        if let Some(scale) = self.weights_scale {
            weights.iter_mut().for_each(|w| *w *= scale);
        }
    }

    /// Whether layer `layer`'s FFN is this mixture (the layers before `first_layer` are dense).
    pub fn has_layer(&self, layer: usize) -> bool {
        layer >= self.first_layer
    }
}

/// Group-limited routing as llama.cpp's `build_moe_ffn` does it: each group of consecutive experts is scored by the
/// sum of its two largest values, and every expert outside the best `groups.used` groups (equal scores: the lower
/// group first) is set to −∞ so that it cannot be chosen.
fn keep_best_groups(choice: &mut [f32], groups: ExpertGroups) {
    let per_group = choice.len() / groups.count;
    let mut scores = [0f32; MAX_EXPERTS / 2];
    let mut best = [0u32; 2];
    for (score, group) in scores.iter_mut().zip(choice.chunks_exact(per_group)) {
        top_k(group, &mut best);
        *score = group[best[0] as usize] + group[best[1] as usize];
    }
    let mut kept = [0u32; MAX_EXPERTS / 2];
    top_k(&scores[..groups.count], &mut kept[..groups.used]);
    for (g, group) in choice.chunks_exact_mut(per_group).enumerate() {
        if !kept[..groups.used].contains(&(g as u32)) {
            group.fill(f32::NEG_INFINITY);
        }
    }
}

/// ggml's softmax: `exp(x − max)`, summed in f64, scaled by the f32 reciprocal of the sum.
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let scale = (1.0 / sum) as f32;
    x.iter_mut().for_each(|v| *v *= scale);
}

/// The indices of the `out.len()` largest values of `x`, largest first; equal values in index order; NaN sorts
/// last.
fn top_k(x: &[f32], out: &mut [u32]) {
    let k = out.len();
    let mut n = 0;
    for (i, &v) in x.iter().enumerate() {
        // Insertion into the sorted prefix: a value enters before the first smaller one (so after its equals).
        let larger = |o: &u32| {
            let w = x[*o as usize];
            w >= v || v.is_nan()
        };
        let at = out[..n].iter().take_while(|o| larger(o)).count();
        if at >= k {
            continue;
        }
        let end = n.min(k - 1);
        out.copy_within(at..end, at + 1);
        out[at] = i as u32;
        n = (n + 1).min(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gguf::Value;
    use crate::model::llama::{LlamaConfig, SyntheticSpec};

    type Writer = crate::model::gguf::writer::GgufWriter;

    /// `spec`'s file edited by `edit`, loaded: "loaded", or the error.
    fn load(spec: SyntheticSpec, edit: impl Fn(Writer) -> Writer) -> String {
        let bytes = edit(spec.writer_with_byte_vocabulary()).to_bytes();
        match LlamaConfig::from_gguf(&GgufFile::from_bytes(&bytes).unwrap()) {
            Ok(_) => "loaded".into(),
            Err(e) => e.to_string(),
        }
    }

    fn set(key: &'static str, v: u32) -> impl Fn(Writer) -> Writer {
        move |w| w.set_metadata(key, Value::U32(v))
    }

    #[test]
    fn hostile_expert_counts_and_widths_are_refused_by_key_before_any_tensor_is_read() {
        let moe = || SyntheticSpec::family("qwen3moe-small", 1, 1).unwrap();
        assert_eq!(load(moe(), |w| w), "loaded");
        let e = load(moe(), set("qwen3moe.expert_count", u32::MAX));
        assert!(e.contains("qwen3moe.expert_count") && e.contains("1..=512"), "{e}");
        let e = load(moe(), set("qwen3moe.expert_used_count", 33));
        assert!(e.contains("qwen3moe.expert_used_count") && e.contains("1..=32"), "{e}");
        let e = load(moe(), set("qwen3moe.expert_feed_forward_length", 1 << 20));
        assert!(e.contains("qwen3moe.expert_feed_forward_length") && e.contains("total width"), "{e}");
        let e = load(moe(), set("qwen3moe.expert_group_count", 4));
        assert!(e.contains("qwen3moe.expert_group_count"), "{e}");
        // A dense family's file that claims experts is refused, not read as dense.
        let dense = SyntheticSpec { arch: crate::model::llama::families::QWEN3, ..SyntheticSpec::tiny(1) };
        assert_eq!(load(dense.clone(), |w| w), "loaded");
        let e = load(dense, set("qwen3.expert_count", 8));
        assert!(e.contains("qwen3.expert_count") && e.contains("dense"), "{e}");
    }

    fn moe(n_expert: usize, used: usize, normalize: bool) -> MoeConfig {
        MoeConfig {
            n_expert,
            n_expert_used: used,
            n_ff_exp: 32,
            gating: Gating::Softmax,
            normalize_weights: normalize,
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
    fn top_k_takes_the_largest_first_and_equal_values_in_index_order() {
        let x = [0.1, 0.5, 0.3, 0.5, f32::NAN, 0.9, 0.3];
        let mut out = [0u32; 4];
        top_k(&x, &mut out);
        assert_eq!(out, [5, 1, 3, 2]);
        let mut all = [0u32; 7];
        top_k(&x, &mut all);
        assert_eq!(all, [5, 1, 3, 2, 6, 0, 4]);
        let mut one = [0u32; 1];
        top_k(&[1.0, 1.0, 1.0], &mut one);
        assert_eq!(one, [0]);
    }

    #[test]
    fn routing_normalizes_the_chosen_probabilities_only_when_the_family_does() {
        let logits = [1.0f32, 3.0, 2.0, 0.0];
        let (mut sel, mut w) = ([0u32; 2], [0f32; 2]);
        moe(4, 2, false).route(&mut logits.clone(), &[], &mut [], &mut sel, &mut w);
        assert_eq!(sel, [1, 2]);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((w[0] - 3f32.exp() / z).abs() < 1e-6 && (w[1] - 2f32.exp() / z).abs() < 1e-6, "{w:?}");
        moe(4, 2, true).route(&mut logits.clone(), &[], &mut [], &mut sel, &mut w);
        let e = 1f32.exp();
        assert!((w[0] - e / (e + 1.0)).abs() < 1e-6 && (w[0] + w[1] - 1.0).abs() < 1e-6, "{w:?}");
        let scaled = MoeConfig { weights_scale: Some(2.5), ..moe(4, 2, true) };
        let mut w2 = [0f32; 2];
        scaled.route(&mut logits.clone(), &[], &mut [], &mut sel, &mut w2);
        assert_eq!(w2, [w[0] * 2.5, w[1] * 2.5]);
    }

    #[test]
    fn softmax_of_chosen_picks_by_raw_logit_and_weights_by_the_chosen_logits_alone() {
        // gpt-oss: the top two of the logits (not of a softmax over all four), weights softmax(3, 2).
        let mut logits = [1.0f32, 3.0, 2.0, -4.0];
        let (mut sel, mut w) = ([0u32; 2], [0f32; 2]);
        MoeConfig { gating: Gating::SoftmaxOfChosen, ..moe(4, 2, false) }.route(
            &mut logits,
            &[],
            &mut [],
            &mut sel,
            &mut w,
        );
        assert_eq!(sel, [1, 2]);
        let e = 1f32.exp();
        assert!((w[0] - e / (e + 1.0)).abs() < 1e-6 && (w[1] - 1.0 / (e + 1.0)).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn the_selection_bias_chooses_the_experts_but_the_probabilities_weight_them() {
        // σ gating (DeepSeek V3): expert 3's bias lifts it above expert 1, whose probability is larger.
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        let m = MoeConfig { gating: Gating::Sigmoid, selection_bias: true, ..moe(4, 2, false) };
        let mut logits = [0.0f32, 2.0, 3.0, 1.0];
        let (mut sel, mut w, mut choice) = ([0u32; 2], [0f32; 2], [0f32; 4]);
        m.route(&mut logits, &[0.0, 0.0, 0.0, 1.5], &mut choice, &mut sel, &mut w);
        assert_eq!(sel, [3, 2]);
        assert_eq!(w, [sigmoid(1.0), sigmoid(3.0)]);
    }

    #[test]
    fn group_routing_keeps_the_groups_whose_two_best_sum_highest() {
        // Four groups of two; group 0 has the best single expert (0.9) but the lowest pair sum (0.9 + 0.0), so
        // with 2 groups kept the experts come from groups 1 and 2 only.
        let groups = Some(ExpertGroups { count: 4, used: 2 });
        let m = MoeConfig { gating: Gating::SoftmaxOfChosen, groups, ..moe(8, 3, false) };
        let values = [0.9f32, 0.0, 0.5, 0.5, 0.45, 0.6, 0.1, 0.2];
        let (mut sel, mut w, mut choice) = ([0u32; 3], [0f32; 3], [0f32; 8]);
        m.route(&mut values.clone(), &[], &mut choice, &mut sel, &mut w);
        assert_eq!(sel, [5, 2, 3]);
        assert_eq!(&choice[..2], &[f32::NEG_INFINITY; 2], "group 0 is out of the choice");
        // Without groups the lone best expert wins.
        let plain = MoeConfig { groups: None, ..m };
        plain.route(&mut values.clone(), &[], &mut choice, &mut sel, &mut w);
        assert_eq!(sel, [0, 5, 2]);
    }
}
