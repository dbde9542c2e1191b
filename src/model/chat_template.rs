//! Chat template rendering (being written).
