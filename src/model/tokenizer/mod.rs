//! Byte-level BPE tokenizer (being written).
