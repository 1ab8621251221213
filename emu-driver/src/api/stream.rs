//! Streams, events, stream capture and graphs (`crate::queue` holds when work runs).

use super::{handle, id};
use crate::errors::{Failure, R};
use crate::state::{call, put, State, NULL_STREAM};
use crate::streams::{Event, Graph, Op, Stream};
use cudarc::driver::sys::{
    CUevent, CUevent_flags, CUgraph, CUgraphExec, CUresult, CUstream, CUstreamCaptureStatus,
    CUstream_flags,
};
use std::ffi::{c_int, c_uint, c_ulonglong};

fn stream_exists(st: &State, stream: u64) -> R {
    if stream == NULL_STREAM || st.streams.contains_key(&stream) {
        Ok(())
    } else {
        Err(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    }
}

fn not_capturing(st: &State, stream: u64) -> R {
    match st.streams.get(&stream) {
        Some(s) if s.capture.is_some() => {
            Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.into())
        }
        _ => Ok(()),
    }
}

fn create_stream(st: &mut State, out: *mut CUstream, flags: c_uint) -> R {
    let non_blocking = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
    if flags & !non_blocking != 0 {
        return Err(Failure::invalid(format!(
            "flags {flags:#x} (only CU_STREAM_NON_BLOCKING is emulated)"
        )));
    }
    let h = st.new_handle();
    st.streams.insert(h, Stream::new(flags & non_blocking != 0));
    st.order.new_stream(h, flags & non_blocking == 0);
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, handle(h)) }
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut CUstream, flags: c_uint) -> CUresult {
    call("cuStreamCreate", true, |st| create_stream(st, out, flags))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    out: *mut CUstream,
    flags: c_uint,
    _priority: c_int,
) -> CUresult {
    call("cuStreamCreateWithPriority", true, |st| {
        create_stream(st, out, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    call("cuStreamDestroy_v2", true, |st| {
        let s = id(stream);
        if !st.streams.contains_key(&s) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE.into());
        }
        // The driver lets queued work finish after the call returns; running it now is one
        // legal order, and the only one once the stream is gone.
        st.flush_all_of(s)?;
        st.streams.remove(&s);
        Ok(())
    })
}

/// The host waits for `stream`'s work (for the legacy stream, every blocking stream's too).
fn synchronize(st: &mut State, stream: u64) -> R {
    stream_exists(st, stream)?;
    not_capturing(st, stream)?;
    if stream == NULL_STREAM {
        st.flush_blocking()?;
    } else {
        st.flush_all_of(stream)?;
    }
    st.order.host_waits_stream(stream);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    call("cuStreamSynchronize", true, |st| {
        synchronize(st, id(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: CUstream) -> CUresult {
    // Work is done once someone looks: a query runs it, as the GPU would have meanwhile.
    call("cuStreamQuery", true, |st| synchronize(st, id(stream)))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    stream: CUstream,
    event: CUevent,
    _flags: c_uint,
) -> CUresult {
    call("cuStreamWaitEvent", true, |st| {
        stream_exists(st, id(stream))?;
        let e = st
            .events
            .get(&id(event))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        // The wait is for the event's last record as of now; never recorded: nothing to wait for.
        if e.recorded.is_none() && e.clock.is_empty() {
            return Ok(());
        }
        let wait = Op::Wait {
            after: e.recorded,
            clock: e.clock.clone(),
        };
        st.enqueue(id(stream), wait)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut CUevent, flags: c_uint) -> CUresult {
    call("cuEventCreate", true, |st| {
        let disable_timing = CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        let h = st.new_handle();
        st.events.insert(
            h,
            Event {
                timing: flags & disable_timing == 0,
                recorded: None,
                reached: None,
                clock: Default::default(),
            },
        );
        // SAFETY: out-pointer from the caller.
        unsafe { put(out, handle(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    call("cuEventDestroy_v2", true, |st| {
        st.events
            .remove(&id(event))
            .map(|_| ())
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    call("cuEventRecord", true, |st| {
        if !st.events.contains_key(&id(event)) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE.into());
        }
        stream_exists(st, id(stream))?;
        if id(stream) == NULL_STREAM {
            // The legacy stream's work ran at once; the record is an item of it all the same,
            // after every blocking stream's work.
            st.flush_blocking()?;
            let seq = st.order.next_legacy_seq();
            let clock = st.order.item(NULL_STREAM, seq);
            let e = st.events.get_mut(&id(event)).expect("checked");
            e.recorded = None;
            e.reached = Some(std::time::Instant::now());
            e.clock = clock;
            return Ok(());
        }
        st.enqueue(id(stream), Op::Record { event: id(event) })
    })
}

fn event_done(st: &mut State, event: u64) -> R {
    let e = st
        .events
        .get(&event)
        .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    let clock = e.clock.clone();
    if let Some((stream, upto)) = e.recorded {
        not_capturing(st, stream)?;
        st.flush(stream, upto)?;
    }
    st.order.host_waits(&clock);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: CUevent) -> CUresult {
    call("cuEventSynchronize", true, |st| event_done(st, id(event)))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: CUevent) -> CUresult {
    call("cuEventQuery", true, |st| event_done(st, id(event)))
}

fn elapsed(st: &State, out: *mut f32, start: CUevent, end: CUevent) -> R {
    let get = |e: CUevent| {
        st.events
            .get(&id(e))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
    };
    let (a, b) = (get(start)?, get(end)?);
    if !a.timing || !b.timing {
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE.into());
    }
    let (Some(t0), Some(t1)) = (a.reached, b.reached) else {
        return Err(CUresult::CUDA_ERROR_NOT_READY.into());
    };
    // Wall time of the emulator on the CPU: a duration, not a GPU measurement.
    let ms = t1.saturating_duration_since(t0).as_secs_f64() * 1e3;
    // SAFETY: out-pointer from the caller.
    unsafe { put(out, ms as f32) }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    out: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    call("cuEventElapsedTime", true, |st| {
        elapsed(st, out, start, end)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    out: *mut f32,
    start: CUevent,
    end: CUevent,
) -> CUresult {
    call("cuEventElapsedTime_v2", true, |st| {
        elapsed(st, out, start, end)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(stream: CUstream, _mode: u32) -> CUresult {
    call("cuStreamBeginCapture_v2", true, |st| {
        let s = st
            .streams
            .get_mut(&id(stream))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        if s.capture.is_some() {
            return Err(CUresult::CUDA_ERROR_ILLEGAL_STATE.into());
        }
        s.capture = Some(Vec::new());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CUresult {
    call("cuStreamEndCapture", true, |st| {
        let s = st
            .streams
            .get_mut(&id(stream))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        let ops = s.capture.take().ok_or(CUresult::CUDA_ERROR_ILLEGAL_STATE)?;
        let h = st.new_handle();
        st.graphs.insert(h, Graph { ops });
        // SAFETY: out-pointer from the caller.
        unsafe { put(graph, handle(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: CUstream, status: *mut u32) -> CUresult {
    call("cuStreamIsCapturing", true, |st| {
        stream_exists(st, id(stream))?;
        let capturing = st
            .streams
            .get(&id(stream))
            .is_some_and(|s| s.capture.is_some());
        let value = if capturing {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
        } else {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        };
        // SAFETY: out-pointer from the caller.
        unsafe { put(status, value as u32) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    _flags: c_ulonglong,
) -> CUresult {
    call("cuGraphInstantiateWithFlags", true, |st| {
        let g = st
            .graphs
            .get(&id(graph))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?
            .clone();
        let h = st.new_handle();
        st.graph_execs.insert(h, g);
        // SAFETY: out-pointer from the caller.
        unsafe { put(exec, handle(h)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CUresult {
    call("cuGraphLaunch", true, |st| {
        let g = st
            .graph_execs
            .get(&id(exec))
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?
            .clone();
        for op in g.ops {
            st.enqueue(id(stream), op)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: CUgraphExec, stream: CUstream) -> CUresult {
    call("cuGraphUpload", true, |st| {
        stream_exists(st, id(stream))?;
        st.graph_execs
            .get(&id(exec))
            .map(|_| ())
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    call("cuGraphDestroy", true, |st| {
        st.graphs
            .remove(&id(graph))
            .map(|_| ())
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    call("cuGraphExecDestroy", true, |st| {
        st.graph_execs
            .remove(&id(exec))
            .map(|_| ())
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE.into())
    })
}
