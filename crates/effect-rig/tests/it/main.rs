//! Integration tests of effect-rig: rig's own dispatch drives the adapter.

mod agent;
mod fixture;
mod tool_set;
