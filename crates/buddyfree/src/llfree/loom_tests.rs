//! Loom model checks of LLFree's protocols.
