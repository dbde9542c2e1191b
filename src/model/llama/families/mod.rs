//! One file per architecture, each holding its [`ArchSpec`](super::architecture::ArchSpec): what the generic block
//! reads to run that family. [`ALL`] is the one list of them.

mod deepseek2;
mod gemma2;
mod gemma3;
mod gptoss;
mod granite;
mod granitemoe;
mod llama;
mod olmo2;
mod olmoe;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;
mod smollm3;

pub use deepseek2::DEEPSEEK2;
pub use gemma2::GEMMA2;
pub use gemma3::GEMMA3;
pub use gptoss::GPT_OSS;
pub use granite::GRANITE;
pub use granitemoe::GRANITEMOE;
pub use llama::LLAMA;
pub use olmo2::OLMO2;
pub use olmoe::OLMOE;
pub use phi3::PHI3;
pub use qwen2::QWEN2;
pub use qwen2moe::QWEN2MOE;
pub use qwen3::QWEN3;
pub use qwen3moe::QWEN3MOE;
pub use smollm3::SMOLLM3;

use super::architecture::Architecture;

/// Every architecture ember runs.
pub(super) static ALL: [Architecture; 15] = [
    LLAMA, GEMMA3, QWEN2, QWEN3, PHI3, SMOLLM3, GEMMA2, GRANITE, OLMO2, QWEN3MOE, QWEN2MOE, OLMOE, GRANITEMOE, GPT_OSS,
    DEEPSEEK2,
];
