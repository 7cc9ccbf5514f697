//! What the project's command-line tools share: a usage error in the one
//! line their help promises.

/// A clap usage error in one line: its first paragraph (the error and the
/// arguments it names), without the usage block and the "--help" hint.
///
/// ```
/// use production_agent_systems::cli::usage_line;
///
/// let rendered = "error: unexpected argument '--nope' found\n\n  tip: try '--help'\n\nUsage: agent-effect [OPTIONS]\n";
/// assert_eq!(usage_line(rendered), "error: unexpected argument '--nope' found");
/// assert_eq!(usage_line(""), "error: invalid usage (see --help)");
/// ```
pub fn usage_line(rendered: &str) -> String {
    let first = rendered.split("\n\n").next().unwrap_or_default();
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        "error: invalid usage (see --help)".to_owned()
    } else {
        line
    }
}
