//! The logic of the runnable examples in this directory, kept in a library so
//! the examples stay short and the test suite runs exactly what they run.
//!
//! See `README.md` for the index.

pub mod effect_assurance;
pub mod mcp_server_client;
pub mod mcp_stdio_server;
pub mod otel;
pub mod rig_tool;
