//! Removing what earlier test runs left in the temporary directory (shared by the engine and
//! conformance suites through `#[path]`).

use std::path::Path;

/// Removes `<prefix><pid>…` entries of the temporary directory whose process is gone (Linux:
/// `/proc/<pid>`) and that were not modified for an hour — a run in another PID namespace
/// sharing this temporary directory has pids this one cannot see, but its files are fresh.
pub fn remove_dead_runs_dirs(prefix: &str) {
    // Without /proc a running process cannot be told from a gone one: nothing is removed.
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let idle = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600));
        if idle && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
