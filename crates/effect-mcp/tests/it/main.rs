//! Integration tests of effect-mcp, over an in-process duplex transport.

mod approval;
mod client;
mod fixture;
mod schema;
mod server;
