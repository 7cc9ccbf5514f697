//! Integration tests of effect-mcp, over an in-process duplex transport and
//! over stdio to a child process.

mod approval;
mod client;
mod elicit;
mod fixture;
mod output;
mod reconnect;
mod refusal;
mod schema;
mod server;
mod tasks;
