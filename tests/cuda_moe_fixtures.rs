//! What the CPU emulation of the CUDA mixture-of-experts kernels is checked against (`scripts/gpu-check.sh
//! emulate`, the `moe_route` and `moe_families` checks of kernel_checks.cpp):
//!
//! - routing cases: logits rows (exact ties, ties at the k-th place, NaN, 512 experts) with what
//!   `MoeConfig::route` makes of them, for softmax, sigmoid and gpt-oss' softmax of the chosen, with and without
//!   renormalization and a scale, and DeepSeek's choice: a selection bias (`exp_probs_b`), group-limited routing, both
//!   (V3's 8 of 256 experts in the best 4 of 8 groups), with ties between experts and between groups' scores;
//! - one mixture-of-experts layer of each of the six families' synthetic models (qwen3moe, Mixtral, qwen2moe with
//!   its gated shared expert, OLMoE, GraniteMoE with its multipliers, gpt-oss with its router and expert biases,
//!   softmax of the chosen and clamped SwiGLU over MXFP4 experts), and qwen3moe with every matrix Q8_0, Q4_K, MXFP4
//!   or one of the codebook types (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, TQ1_0,
//!   TQ2_0), and the first mixture-of-experts layer of deepseek2-lite-small (softmax router, two counted shared
//!   experts as one ungated FFN, after a leading dense block) and deepseek3-small (sigmoid router with a selection
//!   bias, 2 of 4 groups, renormalized and scaled weights, one shared expert): the layer's tensors packed by the CUDA
//!   backend's own `packing::pack`, a few tokens or a step of 16 (which takes the grouped expert kernels), and the
//!   CPU backend's logits for them through that layer alone: its `LlamaBackend` operations `embed`, `rms_norm` (the
//!   FFN norm), `moe_ffn`, the residual add and `logits`, the sequence the forward pass runs for a mixture-of-experts
//!   block, without the attention. The emulation runs the CUDA kernels in the order `execute_moe.rs` enqueues them
//!   and compares the logits within the bound the GPU's logits are held to for the dense families
//!   (`tests/cuda_backend.rs`: relative error 1e-3).
//!
//! With `EMBER_MOE_FIXTURES=FILE` the test writes them there. File format, little-endian u32 words (floats as their
//! bits): the count of routing cases, each `gating normalize scale n_expert k n_rows n_group group_used
//! selection_bias`, the logits, the selection bias (`n_expert` values, when `selection_bias` is 1), the chosen
//! experts, the weights; then the count of layers, each its name (length, then bytes padded to words), `n_embd vocab
//! n_expert k n_ff gating normalize scale act shared_n_ff shared_gated eps embed_scale logit_scale residual_scale
//! biases alpha limit n_group group_used selection_bias n_tokens`, the tokens, the FFN norm, the output norm, the
//! matrices (token_embd, output, router, gate, up, down, then the shared expert's gate, up, down and, when gated, its
//! gate row), each as `type rows cols n_quants n_scales quants scales`, with `biases` the router's, the experts'
//! gate, up and down biases, with `selection_bias` the layer's `exp_probs_b`, and the CPU's logits
//! `[n_tokens][vocab]`. `n_group` is 0 without group-limited routing. `gating` is moe.cu's GATING_* (0 softmax, 1 sigmoid, 2 softmax of the chosen), `act`
//! its ACT_* (0 SiLU, 1 GELU, 2 gpt-oss' clamped SwiGLU with `alpha` and `limit`).

#[path = "common/quant_blocks.rs"]
mod quant_blocks;
#[path = "common/rng.rs"]
mod rng;

use ember::backend::cpu::kernels::WeightMatrix;
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::cuda::packing::pack;
use ember::backend::KvCacheTypes;
use ember::model::gguf::{GgmlType, GgufFile};
use ember::model::llama::architecture::{ExpertGlu, Gating};
use ember::model::llama::experts::{ExpertGroups, SELECTION_BIAS};
use ember::model::llama::forward::{Buf, Norm};
use ember::model::llama::{FfnActivation, LlamaBackend, LlamaConfig, MoeConfig, SeqChunk, SyntheticSpec};
use ember::model::TokenId;
use quant_blocks::CODEBOOK_TYPES;
use rng::Rng;

/// moe.cu's GATING_* code of `g`.
fn gating_code(g: Gating) -> usize {
    match g {
        Gating::Softmax => 0,
        Gating::Sigmoid => 1,
        Gating::SoftmaxOfChosen => 2,
    }
}

fn moe(n_expert: usize, k: usize, gating: Gating, normalize: bool, scale: Option<f32>) -> MoeConfig {
    MoeConfig {
        n_expert,
        n_expert_used: k,
        n_ff_exp: 32,
        gating,
        normalize_weights: normalize,
        weights_scale: scale,
        shared: None,
        fused_gate_up: false,
        biases: false,
        activation: ExpertGlu::AsDense,
        selection_bias: false,
        groups: None,
        first_layer: 0,
    }
}

/// Logits rows for a routing case: random, with values repeated so that exact ties fall inside, across and below
/// the k-th place; one row all equal; where asked, a NaN; and one row of distinct values.
fn routing_rows(n_expert: usize, n_rows: usize, nan: bool, rng: &mut Rng) -> Vec<f32> {
    let mut rows = Vec::new();
    for r in 0..n_rows {
        let mut row: Vec<f32> = (0..n_expert).map(|_| (rng.uniform(-1.0, 1.0) * 8.0).round() / 2.0).collect();
        match r {
            0 => row.iter_mut().for_each(|x| *x = 0.25),
            1 => {
                // The largest value three times: the first two places and the third are a tie.
                let top = row.iter().copied().fold(f32::MIN, f32::max) + 1.0;
                for i in [n_expert - 1, n_expert / 2, 1] {
                    row[i] = top;
                }
            }
            2 if nan => row[n_expert / 3] = f32::NAN,
            // Unrounded: few ties, so that the best experts spread over the groups and group-limited routing
            // (whose all-equal row keeps the first groups, as an unlimited choice would) decides.
            4 => row.iter_mut().for_each(|x| *x = rng.uniform(-4.0, 4.0)),
            _ => {}
        }
        rows.extend(row);
    }
    rows
}

struct Words(Vec<u32>);

impl Words {
    fn put(&mut self, v: usize) {
        self.0.push(u32::try_from(v).unwrap());
    }
    fn float(&mut self, v: f32) {
        self.0.push(v.to_bits());
    }
    fn floats(&mut self, v: &[f32]) {
        self.0.extend(v.iter().map(|x| x.to_bits()));
    }
    fn name(&mut self, s: &str) {
        self.put(s.len());
        let mut bytes = s.as_bytes().to_vec();
        bytes.resize(s.len().next_multiple_of(4), 0);
        self.0.extend(bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())));
    }
    fn matrix(&mut self, file: &GgufFile, name: &str) {
        let packed = pack(&WeightMatrix::from_tensor(&file.tensor(name).unwrap()).unwrap());
        for v in [packed.dtype as usize, packed.rows, packed.cols, packed.quants.len(), packed.scales.len()] {
            self.put(v);
        }
        self.0.extend(&packed.quants);
        self.0.extend(&packed.scales);
    }
}

/// DeepSeek's routing: `m` with a selection bias and `groups` (count, used) as asked.
fn deepseek(m: MoeConfig, selection_bias: bool, groups: Option<(usize, usize)>) -> MoeConfig {
    MoeConfig { selection_bias, groups: groups.map(|(count, used)| ExpertGroups { count, used }), ..m }
}

fn routing_cases(out: &mut Words) -> usize {
    let mut rng = Rng(20270301);
    let cases = [
        moe(8, 2, Gating::Softmax, true, None),
        moe(64, 8, Gating::Softmax, false, None),
        moe(16, 4, Gating::Sigmoid, true, Some(2.5)),
        moe(60, 4, Gating::Softmax, false, Some(16.0)),
        moe(512, 8, Gating::Softmax, true, None),
        moe(32, 32, Gating::Sigmoid, false, None),
        // gpt-oss-20b's 4 of 32 and -120b's 4 of 128: the top k of the raw logits, the softmax of those k.
        moe(32, 4, Gating::SoftmaxOfChosen, false, None),
        moe(128, 4, Gating::SoftmaxOfChosen, false, None),
        // DeepSeek: V3's 8 of 256 in the best 4 of 8 groups with a selection bias; deepseek3-small's 4 of 16 in 2 of 4
        // groups; V2's group-limited greedy choice (6 of 160 in 3 of 8 groups, no bias); a bias alone; the most groups
        // (256 of two experts, 2 kept).
        deepseek(moe(256, 8, Gating::Sigmoid, true, Some(2.5)), true, Some((8, 4))),
        deepseek(moe(16, 4, Gating::Sigmoid, true, Some(2.5)), true, Some((4, 2))),
        deepseek(moe(160, 6, Gating::Softmax, false, Some(16.0)), false, Some((8, 3))),
        deepseek(moe(64, 6, Gating::Sigmoid, true, None), true, None),
        deepseek(moe(512, 4, Gating::Softmax, true, None), false, Some((256, 2))),
    ];
    out.put(cases.len());
    let mut exact_ties = 0;
    for m in &cases {
        let n_rows = 5;
        let rows = routing_rows(m.n_expert, n_rows, m.gating == Gating::Sigmoid, &mut rng);
        // Multiples of 1/16, so that biased choices still tie where their probabilities and biases do.
        let bias: Vec<f32> = match m.selection_bias {
            true => (0..m.n_expert).map(|_| (rng.uniform(-1.0, 1.0) * 4.0).round() / 16.0).collect(),
            false => Vec::new(),
        };
        let (k, mut selected, mut weights) = (m.n_expert_used, Vec::new(), Vec::new());
        for row in rows.chunks_exact(m.n_expert) {
            let (mut sel, mut w, mut choice) = (vec![0u32; k], vec![0f32; k], vec![0f32; m.n_expert]);
            m.route(&mut row.to_vec(), &bias, &mut choice, &mut sel, &mut w);
            // The all-equal row takes the first k experts, in order: ties go by index (the groups' too).
            exact_ties += usize::from(row.iter().all(|&x| x == row[0]));
            selected.extend(sel);
            weights.extend(w);
        }
        if !m.selection_bias {
            assert_eq!(selected[..k], (0..k as u32).collect::<Vec<_>>()[..], "an all-equal row takes experts 0..k");
        }
        for v in [gating_code(m.gating), usize::from(m.normalize_weights)] {
            out.put(v);
        }
        out.float(m.weights_scale.unwrap_or(0.0));
        let (n_group, group_used) = m.groups.map_or((0, 0), |g| (g.count, g.used));
        for v in [m.n_expert, k, n_rows, n_group, group_used, usize::from(m.selection_bias)] {
            out.put(v);
        }
        out.floats(&rows);
        out.floats(&bias);
        out.0.extend(&selected);
        out.floats(&weights);
    }
    assert_eq!(exact_ties, cases.len());
    cases.len()
}

/// One layer of `spec`'s model: its tensors, a few tokens, and the CPU backend's logits through that layer alone.
fn layer_case(out: &mut Words, name: &str, spec: &SyntheticSpec, n_tokens: usize) {
    let bytes = spec.writer_with_byte_vocabulary().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    let moe = config.moe.clone().expect("a mixture-of-experts family");
    // The first layer with experts (DeepSeek's leading dense blocks come before it).
    let l = moe.first_layer;
    assert!(config.pre_norms && !config.post_norms && config.final_softcap.is_none(), "{name}: the emulated layer");
    let cpu_options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 64,
        kv_block_size: 16,
        kv_num_blocks: 4,
        kv_window_blocks: None,
        precision: Precision::Float32,
        kv_cache: KvCacheTypes::default(),
    };
    let mut cpu = CpuBackend::new(&file, config.clone(), cpu_options).unwrap();
    let tokens: Vec<TokenId> = (0..n_tokens).map(|j| ((j * 37 + 11) % config.vocab_size) as TokenId).collect();
    let table = [0u32, 1, 2, 3];
    let batch =
        [SeqChunk { tokens: &tokens, start_pos: 0, block_table: &table, window_table: &[], logit_rows: n_tokens }];
    let mut logits = vec![0f32; n_tokens * config.vocab_size];
    // The forward pass's mixture-of-experts block (forward.rs: `pre_norm`, `moe_ffn`, `add_branch`) on the
    // embeddings, then the final norm and output projection.
    cpu.begin(&batch).unwrap();
    cpu.embed(Buf::X);
    cpu.rms_norm(Buf::X, Norm::Ffn(l), Buf::Xn);
    cpu.moe_ffn(l, Buf::Xn);
    cpu.add_scaled(Buf::Xn, config.residual_scale.unwrap_or(1.0), Buf::X);
    cpu.logits(&mut logits).unwrap();
    assert!(logits.iter().all(|v| v.is_finite()), "{name}");

    out.name(name);
    let (act, alpha, limit) = match (moe.activation, config.ffn_activation) {
        (ExpertGlu::SwigluOai { alpha, limit }, _) => (2, alpha, limit),
        (ExpertGlu::AsDense, FfnActivation::Silu) => (0, 0.0, 0.0),
        (ExpertGlu::AsDense, FfnActivation::GeluTanh) => (1, 0.0, 0.0),
    };
    let (shared_n_ff, shared_gated) = moe.shared.map_or((0, false), |s| (s.n_ff, s.gated));
    for v in [config.n_embd, config.vocab_size, moe.n_expert, moe.n_expert_used, moe.n_ff_exp] {
        out.put(v);
    }
    out.put(gating_code(moe.gating));
    out.put(usize::from(moe.normalize_weights));
    out.float(moe.weights_scale.unwrap_or(0.0));
    for v in [act, shared_n_ff, usize::from(shared_gated)] {
        out.put(v);
    }
    out.float(config.rms_eps);
    out.float(config.embed_scale.unwrap_or(1.0));
    out.float(config.logit_scale.unwrap_or(0.0));
    out.float(config.residual_scale.unwrap_or(1.0));
    out.put(usize::from(moe.biases));
    out.float(alpha);
    out.float(limit);
    let (n_group, group_used) = moe.groups.map_or((0, 0), |g| (g.count, g.used));
    for v in [n_group, group_used, usize::from(moe.selection_bias), n_tokens] {
        out.put(v);
    }
    out.0.extend(&tokens);
    // The FFN norm under its family's name (gpt-oss': `post_attention_norm`).
    let norm = |n: Norm| file.tensor(&config.norm_tensor(n)).unwrap().as_f32().unwrap().to_vec();
    out.floats(&norm(Norm::Ffn(l)));
    out.floats(&norm(Norm::Output));
    out.matrix(&file, "token_embd.weight");
    out.matrix(&file, if config.tied_output { "token_embd.weight" } else { "output.weight" });
    let layer = |suffix: &str| LlamaConfig::layer_tensor(l, suffix);
    let mut names = vec!["ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"];
    if moe.shared.is_some() {
        names.extend(["ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"]);
    }
    if shared_gated {
        names.push("ffn_gate_inp_shexp.weight");
    }
    for suffix in names {
        out.matrix(&file, &layer(suffix));
    }
    if moe.biases {
        for suffix in ["ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"] {
            out.floats(file.tensor(&layer(suffix)).unwrap().as_f32().unwrap());
        }
    }
    if moe.selection_bias {
        out.floats(file.tensor(&layer(SELECTION_BIAS)).unwrap().as_f32().unwrap());
    }
    out.floats(&logits);
}

#[test]
fn moe_fixtures_for_the_cuda_emulation() {
    let mut out = Words(Vec::new());
    let n_routing = routing_cases(&mut out);
    // Steps of 16 tokens for the families whose routed experts differ (Qwen 3's many experts, Mixtral's few wide
    // ones, Qwen 2's shared expert, gpt-oss' biases and SwiGLU over MXFP4): past `SMALL_BATCH_MAX_TOKENS` rows with
    // at least one pair per expert, they take the grouped path (`calls_moe::grouped_experts`), and the router and
    // shared expert the tiled matmul. One token for the others, whose routing is what differs (the per-pair path;
    // the emulation runs a thread per GPU thread: `make test` pays for each row).
    let families = [
        ("qwen3moe-small", 16),
        ("mixtral-small", 16),
        ("qwen2moe-small", 16),
        ("olmoe-small", 1),
        ("granitemoe-small", 1),
        ("gpt-oss-small-mxfp4", 16),
    ];
    let mut layers: Vec<(String, SyntheticSpec, usize)> = families
        .iter()
        .map(|&(f, n_tokens)| (f.to_string(), SyntheticSpec::family(f, 5, 1).unwrap(), n_tokens))
        .collect();
    for dtype in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Mxfp4].into_iter().chain(CODEBOOK_TYPES) {
        let spec = SyntheticSpec { matrix_type: Some(dtype), ..SyntheticSpec::family("qwen3moe-small", 7, 1).unwrap() };
        // The grouped path over quantized experts (the types differ only in `slice_dequant`).
        layers.push((format!("qwen3moe-small, {dtype:?} experts"), spec, 16));
    }
    // DeepSeek's routing and counted shared experts, in layer 1 (after the leading dense block). Its attention is
    // not part of the emulated layer.
    for family in ["deepseek2-lite-small", "deepseek3-small"] {
        layers.push((format!("{family}, layer 1"), SyntheticSpec::family(family, 8, 2).unwrap(), 1));
    }
    out.put(layers.len());
    for (name, spec, n_tokens) in &layers {
        layer_case(&mut out, name, spec, *n_tokens);
    }
    if let Some(path) = std::env::var_os("EMBER_MOE_FIXTURES") {
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&out.0)).unwrap();
        eprintln!("wrote {n_routing} routing cases and {} layers to {}", layers.len(), path.to_string_lossy());
    }
}
