//! Turning a step's planned launches into kernel calls on the stream. Everything here only enqueues work: run
//! directly it executes the step, run inside a graph capture it records it (see `graph.rs`).

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::buffers::{self, Buffers};
use super::calls::*;
use super::device_array::DeviceArray;
use super::error::CudaBackendError;
use super::kv_cache::DeviceKvCache;
use super::launch::Kernels;
use super::ops::{Launch, NormInput};
use super::step_meta::MetaLayout;
use super::weights::DeviceWeights;
use crate::model::llama::forward::{Bias, Buf, Norm, Weight};
use crate::model::llama::{LlamaConfig, QkNorm};

/// Everything one step's kernels read and write.
pub struct StepRun<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub kernels: &'a Kernels,
    pub config: &'a LlamaConfig,
    pub weights: &'a DeviceWeights,
    pub cache: &'a DeviceKvCache,
    pub buffers: &'a Buffers,
    /// The step's metadata on the device, sections as `layout` places them.
    pub meta: DeviceArray<'a, i32>,
    pub layout: MetaLayout,
    /// Rows every kernel computes (the step's tokens, padded for a graph).
    pub rows: usize,
    /// Rows of logits to compute, gathered from the rows the metadata names; 0 for none.
    pub logit_rows: usize,
}

impl StepRun<'_> {
    /// Enqueues the whole step: the RoPE angles of each base, `launches`, then the logits.
    pub fn enqueue(&self, launches: &[Launch]) -> Result<(), CudaBackendError> {
        let half = self.config.rope_dim / 2;
        for (base, tables) in self.buffers.rope.iter().enumerate() {
            self.kernels.rope_table(
                self.stream,
                &RopeTableCall {
                    positions: self.meta.sub(self.layout.positions())?,
                    inv_freq: DeviceArray::new(&tables.inv_freq, self.stream),
                    cos: DeviceArray::new(&tables.cos, self.stream),
                    sin: DeviceArray::new(&tables.sin, self.stream),
                    scale: self.config.rope_magnitude(base),
                    n_tokens: self.rows,
                    half,
                },
            )?;
        }
        for launch in launches {
            self.enqueue_one(launch)?;
        }
        if self.logit_rows > 0 {
            self.logits()?;
        }
        Ok(())
    }

    fn activation(&self, b: Buf) -> DeviceArray<'_, f32> {
        self.buffers.activation(b, self.stream)
    }

    fn norm_weight(&self, n: Norm) -> Result<DeviceArray<'_, f32>, CudaBackendError> {
        Ok(DeviceArray::new(self.weights.norm(n)?, self.stream))
    }

    fn heads(&self) -> HeadShape {
        let c = self.config;
        HeadShape { n_head: c.n_head, n_head_kv: c.n_head_kv, head_dim: c.head_dim, rope_dim: c.rope_dim }
    }

    fn enqueue_one(&self, launch: &Launch) -> Result<(), CudaBackendError> {
        let (k, s) = (self.kernels, self.stream);
        match *launch {
            Launch::Embed { dst } => k.embed(
                s,
                &EmbedCall {
                    table: self.weights.token_embd().array(s),
                    tokens: self.meta.sub(self.layout.tokens())?,
                    out: self.activation(dst),
                    n_tokens: self.rows,
                    scale: self.config.embed_scale.unwrap_or(1.0),
                },
            ),
            Launch::RmsNorm { src, weight, dst, add } => self.rms_norm(src, weight, dst, add),
            Launch::HeadNorms { layer } => self.head_norms(layer),
            Launch::Project { src, norm, outputs, add } => {
                let outputs: Vec<(Weight, Buf)> = outputs.iter().collect();
                self.project(src, norm, &outputs, add)
            }
            Launch::ProjectGated { src, norm, gate, up } => {
                if self.rows <= SMALL_BATCH_MAX_TOKENS {
                    self.project_small(src, norm, &[(gate, Buf::Gate), (up, Buf::Up)], false, true)
                } else {
                    self.project(src, norm, &[(gate, Buf::Gate), (up, Buf::Up)], false)?;
                    self.gated_activation()
                }
            }
            Launch::RopeStore { layer } => {
                let tables = &self.buffers.rope[self.config.layers[layer].rope];
                k.rope_store(
                    s,
                    &RopeStoreCall {
                        q: self.activation(Buf::Q),
                        k: self.activation(Buf::K),
                        v: self.activation(Buf::V),
                        cos: DeviceArray::new(&tables.cos, s),
                        sin: DeviceArray::new(&tables.sin, s),
                        positions: self.meta.sub(self.layout.positions())?,
                        slots: self.meta.sub(self.layout.slots())?,
                        cache: self.cache.layer(layer, s)?,
                        shape: self.heads(),
                        n_tokens: self.rows,
                        neox: self.config.rope_neox,
                    },
                )
            }
            Launch::Attention { layer } => k.attention(
                s,
                &AttentionCall {
                    q: self.activation(Buf::Q),
                    out: self.activation(Buf::Att),
                    cache: self.cache.layer(layer, s)?,
                    positions: self.meta.sub(self.layout.positions())?,
                    table_offsets: self.meta.sub(self.layout.table_offsets())?,
                    block_tables: self.meta.sub(self.layout.block_tables())?,
                    shape: self.heads(),
                    block_size: self.cache.block_size(),
                    n_tokens: self.rows,
                    window: self.config.layers[layer].window,
                    scale: self.config.attention_scale,
                    softcap: self.config.attn_softcap,
                    sinks: self.weights.sinks(layer).map(|w| DeviceArray::new(w, s)),
                    value_dim: self.config.head_dim,
                    values_in_keys: false,
                },
            ),
            Launch::Gated => self.gated_activation(),
            Launch::AddBias { dst, bias } => self.add_bias(dst, bias),
            Launch::AddScaled { src, dst, factor_bits } => k.add_scaled(
                s,
                &AddScaledCall {
                    dst: self.activation(dst),
                    src: self.activation(src),
                    n: self.rows * buffers::width(self.config, dst),
                    factor: f32::from_bits(factor_bits),
                },
            ),
            Launch::Moe { layer, io } => self.moe(layer, io),
            Launch::LatentAttention { layer, input } => self.latent_attention(layer, input),
        }
    }

    fn add_bias(&self, dst: Buf, bias: Bias) -> Result<(), CudaBackendError> {
        let width = match bias {
            Bias::AttnQ(_) => self.config.q_dim(),
            Bias::AttnK(_) | Bias::AttnV(_) => self.config.kv_dim(),
            Bias::AttnOutput(_) => self.config.n_embd,
        };
        let call = AddBiasCall {
            x: self.activation(dst),
            bias: DeviceArray::new(self.weights.bias(bias)?, self.stream),
            rows: self.rows,
            width,
        };
        self.kernels.add_bias(self.stream, &call)
    }

    fn rms_norm(&self, src: Buf, weight: Norm, dst: Buf, add: bool) -> Result<(), CudaBackendError> {
        let call = RmsNormCall {
            x: self.activation(src),
            weight: self.norm_weight(weight)?,
            out: self.activation(dst),
            rows: None,
            n_rows: self.rows,
            width: self.config.n_embd,
            eps: self.config.rms_eps,
            add,
        };
        self.kernels.rms_norm(self.stream, &call)
    }

    /// The q/k norms of `layer`: every head of `Q` and of `K` normalized in place (rows of `head_dim`).
    fn head_norms(&self, layer: usize) -> Result<(), CudaBackendError> {
        let c = self.config;
        for (buf, norm, heads) in [(Buf::Q, Norm::QHead(layer), c.n_head), (Buf::K, Norm::KHead(layer), c.n_head_kv)] {
            // Each head of each row, or each whole row (OLMo 2).
            let (n_rows, width) = match c.qk_norm {
                Some(QkNorm::Rows) => (self.rows, heads * c.head_dim),
                _ => (self.rows * heads, c.head_dim),
            };
            let call = RmsNormCall {
                x: self.activation(buf),
                weight: self.norm_weight(norm)?,
                out: self.activation(buf),
                rows: None,
                n_rows,
                width,
                eps: c.rms_eps,
                add: false,
            };
            self.kernels.rms_norm(self.stream, &call)?;
        }
        Ok(())
    }

    fn gated_activation(&self) -> Result<(), CudaBackendError> {
        let call = GatedCall {
            gate: self.activation(Buf::Gate),
            up: self.activation(Buf::Up),
            n: self.rows * self.config.n_ff,
            activation: self.config.ffn_activation,
        };
        self.kernels.gated_activation(self.stream, &call)
    }

    /// `out (+)= w · src'` for each `(w, out)`, `src'` being `src` normalized when `norm` is set.
    fn project(
        &self,
        src: Buf,
        norm: Option<NormInput>,
        outputs: &[(Weight, Buf)],
        add: bool,
    ) -> Result<(), CudaBackendError> {
        let reads = [Some(src), norm.map(|n| n.dst)];
        if outputs.iter().any(|&(_, out)| reads.contains(&Some(out))) {
            return Err(CudaBackendError::Internal(format!("a projection of {src:?} writes its own input")));
        }
        if self.rows <= SMALL_BATCH_MAX_TOKENS {
            // One launch per run of matrices of the same type (all of them, for a model of one type).
            let mut first_launch = true;
            let mut rest = outputs;
            while let Some(&(w, _)) = rest.first() {
                let dtype = self.weights.matrix(w).dtype;
                let run = rest.iter().take_while(|&&(v, _)| self.weights.matrix(v).dtype == dtype).count();
                // Only the first launch writes the normalized input; the others normalize as they read, too.
                let norm = norm.map(|n| (n, first_launch));
                self.project_small_with(src, norm, &rest[..run], add, false)?;
                rest = &rest[run..];
                first_launch = false;
            }
            return Ok(());
        }
        let src = match norm {
            Some(n) => {
                self.rms_norm(src, n.weight, n.dst, false)?;
                n.dst
            }
            None => src,
        };
        for &(w, out) in outputs {
            let call = MatmulCall {
                matrix: self.weights.matrix(w).array(self.stream),
                x: self.activation(src),
                y: self.activation(out),
                n_tokens: self.rows,
                add,
            };
            self.kernels.matmul(self.stream, &call)?;
        }
        Ok(())
    }

    fn project_small(
        &self,
        src: Buf,
        norm: Option<NormInput>,
        outputs: &[(Weight, Buf)],
        add: bool,
        gated: bool,
    ) -> Result<(), CudaBackendError> {
        self.project_small_with(src, norm.map(|n| (n, true)), outputs, add, gated)
    }

    /// One `project_small` launch; `norm` says whether this launch also writes the normalized input.
    fn project_small_with(
        &self,
        src: Buf,
        norm: Option<(NormInput, bool)>,
        outputs: &[(Weight, Buf)],
        add: bool,
        gated: bool,
    ) -> Result<(), CudaBackendError> {
        let arrays: Vec<_> =
            outputs.iter().map(|&(w, out)| (self.weights.matrix(w).array(self.stream), self.activation(out))).collect();
        let call = ProjectSmallCall {
            outputs: &arrays,
            x: self.activation(src),
            n_tokens: self.rows,
            norm: match norm {
                Some((n, writes)) => Some(FusedNorm {
                    weight: self.norm_weight(n.weight)?,
                    normalized: writes.then(|| self.activation(n.dst)),
                    eps: self.config.rms_eps,
                }),
                None => None,
            },
            add,
            gated: gated.then_some(self.config.ffn_activation),
        };
        self.kernels.project_small(self.stream, &call)
    }

    /// The final norm of the rows that want logits, gathered, then the output projection into `logits`.
    fn logits(&self) -> Result<(), CudaBackendError> {
        let (s, rows) = (self.stream, self.logit_rows);
        let input = DeviceArray::new(&self.buffers.logits_input, s);
        self.kernels.rms_norm(
            s,
            &RmsNormCall {
                x: self.activation(Buf::X),
                weight: self.norm_weight(Norm::Output)?,
                out: input,
                rows: Some(self.meta.sub(self.layout.logit_rows())?),
                n_rows: rows,
                width: self.config.n_embd,
                eps: self.config.rms_eps,
                add: false,
            },
        )?;
        let output = self.weights.output().array(s);
        let logits = DeviceArray::new(&self.buffers.logits, s);
        if rows <= SMALL_BATCH_MAX_TOKENS {
            let outputs = [(output, logits)];
            let call =
                ProjectSmallCall { outputs: &outputs, x: input, n_tokens: rows, norm: None, add: false, gated: None };
            self.kernels.project_small(s, &call)?;
        } else {
            let call = MatmulCall { matrix: output, x: input, y: logits, n_tokens: rows, add: false };
            self.kernels.matmul(s, &call)?;
        }
        let (logit_scale, softcap) = (self.config.logit_scale, self.config.final_softcap);
        if logit_scale.is_some() || softcap.is_some() {
            let call = FinishLogitsCall { logits, n: rows * self.config.vocab_size, logit_scale, softcap };
            self.kernels.finish_logits(s, &call)?;
        }
        Ok(())
    }
}
