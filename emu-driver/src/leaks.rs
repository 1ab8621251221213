//! What was never freed. With `PAGEDKV_EMU_LEAKS=1` the driver reports, when the process exits,
//! every allocation, `cuMemCreate` handle, reservation, module, stream, event and graph still
//! alive, and those the primary context's destruction had to reclaim, on stderr, and makes the
//! exit status non-zero when there is any.

use crate::state::{self, State};
use std::sync::Mutex;

/// Objects reclaimed when the context was destroyed with them still alive.
static RECLAIMED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Registers the exit report when `PAGEDKV_EMU_LEAKS=1`.
pub fn arm() {
    if std::env::var("PAGEDKV_EMU_LEAKS").is_ok_and(|v| v == "1") {
        // SAFETY: registers a plain function with no captured state.
        unsafe { libc::atexit(report_at_exit) };
    }
}

/// Everything alive in `st`, one line each.
pub fn alive(st: &State) -> Vec<String> {
    let mut out = Vec::new();
    for (p, a) in st.memory.live() {
        out.push(format!("{} of {} bytes at {p:#x}", a.kind.what(), a.len));
    }
    for (id, h) in &st.vmm.handles {
        let state = if h.released {
            "released but still mapped"
        } else {
            "not released"
        };
        out.push(format!(
            "cuMemCreate handle {id:#x} of {} bytes ({state})",
            h.size
        ));
    }
    for (p, r) in &st.vmm.reservations {
        out.push(format!("reservation of {} bytes at {p:#x}", r.len));
    }
    for m in st.modules.values() {
        out.push(format!("module {}", m.name));
    }
    for id in st.streams.keys() {
        out.push(format!("stream {id:#x}"));
    }
    for id in st.events.keys() {
        out.push(format!("event {id:#x}"));
    }
    for id in st.graphs.keys().chain(st.graph_execs.keys()) {
        out.push(format!("graph {id:#x}"));
    }
    out
}

/// The context is destroyed (last release, or reset): its work runs, then everything still in
/// it is reclaimed, as the driver does, and remembered as leaked.
pub fn destroy_context(st: &mut State, why: &str) {
    let _ = st.flush_all();
    let left = alive(st);
    if !left.is_empty() {
        let mut r = RECLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        r.extend(
            left.into_iter()
                .map(|l| format!("{l} (reclaimed by {why})")),
        );
    }
    st.memory.take_live();
    let reservations: Vec<(u64, usize)> = st
        .vmm
        .reservations
        .iter()
        .map(|(&p, r)| (p, r.len))
        .collect();
    let mapped: Vec<(u64, usize)> = st.vmm.mappings.iter().map(|(&p, m)| (p, m.len)).collect();
    for (p, len) in mapped {
        let _ = st.vmm.unmap(p, len);
    }
    for (p, len) in reservations {
        let _ = st.vmm.address_free(p, len);
    }
    st.vmm.handles.clear();
    st.modules.clear();
    st.functions.clear();
    st.streams.clear();
    st.events.clear();
    st.graphs.clear();
    st.graph_execs.clear();
    st.order = Default::default();
    st.sticky = None;
    st.last_failure = None;
    st.context_refs = 0;
}

extern "C" fn report_at_exit() {
    let Ok(guard) = state::try_lock() else {
        eprintln!("pagedkv emulated driver: leak report skipped: the driver was busy at exit");
        return;
    };
    let mut lines = RECLAIMED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(st) = guard.as_ref() {
        lines.extend(alive(st));
    }
    if lines.is_empty() {
        return;
    }
    eprintln!("pagedkv emulated driver: {} leaked at exit:", lines.len());
    for l in &lines {
        eprintln!("  {l}");
    }
    // The exit handlers registered before this one never run after `_exit`: the call counts
    // (`PAGEDKV_EMU_CALLS`) are written here first.
    crate::faults::write_calls();
    // SAFETY: ends the process with a failing status; nothing after the exit handlers matters.
    unsafe { libc::_exit(3) };
}
