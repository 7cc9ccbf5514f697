//! Resuming from a checkpoint never repeats a completed side effect: within a
//! process, and (with the SQLite checkpoint store) across a process restart.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_runtime::store::MemoryCheckpointStore;
use agent_runtime::{
    Action, AgentRuntime, CheckpointStore, DeterministicPlanner, EffectKind, PermissionPolicy,
    ReplaySummary, RunOptions, RunStatus, Task, ToolDefinition, ToolError, ToolRegistry,
};
use serde_json::json;

/// A tool whose side effect is a line appended to a file, so it is visible
/// from another process.
fn journal_tools(file: PathBuf) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    registry
        .register(ToolDefinition::new(
            "append_line",
            "Appends a line to the journal",
            json!({"type": "object", "properties": {"line": {"type": "string"}}, "required": ["line"]}),
            EffectKind::Mutation,
            move |input| {
                let line = input.arguments["line"].as_str().unwrap_or_default();
                let mut file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)
                    .map_err(|e| ToolError::failed(e.to_string()))?;
                writeln!(file, "{line}").map_err(|e| ToolError::failed(e.to_string()))?;
                Ok(json!({"appended": line}))
            },
        ))
        .unwrap();
    registry
}

fn journal_runtime(dir: &Path, checkpoints: Arc<dyn CheckpointStore>) -> AgentRuntime {
    let append = |line: &str| Action::call("append_line", json!({"line": line}));
    AgentRuntime::builder(
        journal_tools(dir.join("journal.txt")),
        DeterministicPlanner::new([append("one"), append("two"), Action::finish(json!("done"))]),
    )
    .policy(PermissionPolicy::allow(["append_line"]).without_mutation_confirmation())
    .checkpoint_store(checkpoints)
    .build()
    .unwrap()
}

fn journal(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("journal.txt"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn task() -> Task {
    Task::new("run-journal", json!("write two lines"))
}

#[test]
fn resume_from_checkpoint_does_not_repeat_a_side_effect() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn CheckpointStore> = Arc::new(MemoryCheckpointStore::new());
    let first = journal_runtime(dir.path(), Arc::clone(&store));
    let paused = first
        .run(task(), RunOptions::start().stop_after_steps(1))
        .unwrap();
    assert_eq!((paused.status, paused.steps), (RunStatus::Paused, 1));
    assert_eq!(journal(dir.path()), ["one"]);
    // A second runtime sharing only the checkpoint store picks up at step 1.
    let second = journal_runtime(dir.path(), store);
    let done = second.run(task(), RunOptions::resume()).unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(journal(dir.path()), ["one", "two"]);
    let events = second.events().events("run-journal").unwrap();
    let summary = ReplaySummary::of(&events);
    assert_eq!(summary.recoveries, 1);
    assert_eq!(summary.tool_calls.len(), 1);
    assert_eq!(
        summary.transitions[0],
        (RunStatus::Paused, RunStatus::Running)
    );
    // Sequences continue from the checkpoint rather than restarting at 1.
    let checkpoint_sequence = events[0].sequence;
    assert!(checkpoint_sequence > 1);
    assert!(
        events
            .windows(2)
            .all(|w| w[1].sequence == w[0].sequence + 1)
    );
}

#[cfg(feature = "sqlite-checkpoints")]
mod sqlite {
    use std::process::Command;

    use agent_runtime::SqliteCheckpointStore;

    use super::*;

    /// Set in the child process to the directory the parent prepared.
    const CHILD_DIR: &str = "AGENT_RUNTIME_RESTART_DIR";
    const THIS_TEST: &str = "restart::sqlite::sqlite_checkpoint_resume_survives_restart";

    fn open(dir: &Path) -> Arc<dyn CheckpointStore> {
        Arc::new(SqliteCheckpointStore::open(dir.join("checkpoints.sqlite3")).unwrap())
    }

    /// Runs one step, then stops as if the process ended.
    fn phase_one(dir: &Path) {
        let runtime = journal_runtime(dir, open(dir));
        let paused = runtime
            .run(task(), RunOptions::start().stop_after_steps(1))
            .unwrap();
        assert_eq!(paused.status, RunStatus::Paused);
        assert_eq!(journal(dir), ["one"]);
    }

    /// Reopens everything from the files and finishes the run.
    fn phase_two(dir: &Path) {
        let runtime = journal_runtime(dir, open(dir));
        let done = runtime.run(task(), RunOptions::resume()).unwrap();
        assert_eq!(done.status, RunStatus::Completed);
        assert_eq!(done.output, Some(json!("done")));
        assert_eq!(journal(dir), ["one", "two"]);
        let saved = open(dir).load("run-journal").unwrap().unwrap();
        assert_eq!(saved.status, RunStatus::Completed);
        assert_eq!(saved.observations.len(), 2);
    }

    /// In the parent's child process this finishes the parent's run; run on
    /// its own it does both phases in one process, dropping and reopening
    /// every store in between.
    #[test]
    fn sqlite_checkpoint_resume_survives_restart() {
        if let Some(dir) = std::env::var_os(CHILD_DIR) {
            phase_two(Path::new(&dir));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        phase_one(dir.path());
        phase_two(dir.path());
    }

    #[test]
    fn run_resumes_in_a_new_process() {
        let dir = tempfile::tempdir().unwrap();
        phase_one(dir.path());
        let output = Command::new(std::env::current_exe().unwrap())
            .args([THIS_TEST, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
        // The child completed the run: step one ran once, in this process.
        assert_eq!(journal(dir.path()), ["one", "two"]);
        let saved = open(dir.path()).load("run-journal").unwrap().unwrap();
        assert_eq!(saved.status, RunStatus::Completed);
    }
}
