//! The document engine (issue 12), with no IO: markdown parsed into a block tree with stable
//! block ids, the canonical markdown written back, byte ranges and tokens per block, and the
//! quote-anchored edit ops of protocol §6.2.
