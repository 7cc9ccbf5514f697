//! Processes by id, from /proc: a process's children, whether it still
//! exists, and kill -9.

/// The processes whose parent is `pid` (from /proc).
pub(crate) fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let child: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // The parent is the second field after the parenthesized name.
            let after = stat.rsplit_once(')')?.1;
            let parent: i32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (parent == pid).then_some(child)
        })
        .collect()
}

pub(crate) fn kill9(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Whether `pid` still exists (a zombie does: the server refuses to start
/// while the process its lock file names can be signalled).
pub(crate) fn alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
