//! Streams, events and graphs. Work is queued per stream and runs, in order, only when something
//! waits for it: a synchronisation of its stream, of the context, or of an event recorded after
//! it, or a stream that waits on such an event. So a copy to host memory lands only once the
//! program synchronises, and a result read before that is caught (it is not there yet). Work on
//! the legacy default stream (0), and the synchronous calls, run at once, after every blocking
//! stream, as the driver orders them; non-blocking streams (cudarc's) are not waited for.
//! While a stream captures, its work goes into a graph instead; launching the graph queues it.
//! Every item queued is also placed in the happens-before order (`racecheck.rs`), and the device
//! memory an item uses is opened to the driver only while the item runs (`access.rs`).

use crate::access::Opened;
use crate::errors::{Failure, R};
use crate::state::{State, NULL_STREAM};
use crate::streams::{ArgValue, KernelLaunch, Op};
use cudarc::driver::sys::CUresult;
use pagedkv::emu::{EmuError, ParamKind};
use std::time::Instant;

impl State {
    /// Queues `op` on `stream` (runs it at once on the legacy default stream); while the stream
    /// captures, adds it to the graph instead.
    pub fn enqueue(&mut self, stream: u64, op: Op) -> R {
        if stream == NULL_STREAM {
            self.flush_blocking()?;
            let seq = self.order.next_legacy_seq();
            self.track(NULL_STREAM, seq, &op);
            let asynchronous = matches!(op, Op::Kernel(_));
            let ran = self.run(NULL_STREAM, op);
            // A kernel's failure is the context's sticky error, seen by the next call, not by
            // the launch (which a GPU has long returned from); a synchronous copy's is its own.
            return if asynchronous { Ok(()) } else { ran };
        }
        let s = self
            .streams
            .get_mut(&stream)
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        if let Some(graph) = &mut s.capture {
            match op {
                // Recording and waiting order the capture; they are not work of the graph.
                Op::Record { .. } | Op::Wait { .. } => {}
                Op::Free { .. } => {
                    return Err(Failure::new(
                        CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                        "cuMemFreeAsync on a capturing stream",
                    ))
                }
                op => graph.push(op),
            }
            return Ok(());
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        if let Op::Record { event } = op {
            let e = self
                .events
                .get_mut(&event)
                .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
            e.recorded = Some((stream, seq));
            e.reached = None;
        }
        self.track(stream, seq, &op);
        self.streams
            .get_mut(&stream)
            .expect("found above")
            .queue
            .push_back((seq, op));
        Ok(())
    }

    /// The sequence number the next item queued on `stream` will get.
    pub fn last_seq(&self, stream: u64) -> Option<u64> {
        self.streams.get(&stream).map(|s| s.next_seq - 1)
    }

    /// Runs `stream`'s queued work up to and including item `upto`.
    pub fn flush(&mut self, stream: u64, upto: u64) -> R {
        loop {
            let Some(s) = self.streams.get_mut(&stream) else {
                return Ok(()); // destroyed: its work ran when it was
            };
            match s.queue.front() {
                Some(&(seq, _)) if seq <= upto => {
                    let (_, op) = s.queue.pop_front().expect("front exists");
                    self.run(stream, op)?;
                }
                _ => return Ok(()),
            }
        }
    }

    pub fn flush_all_of(&mut self, stream: u64) -> R {
        self.flush(stream, u64::MAX)
    }

    /// Every stream's work (`cuCtxSynchronize`).
    pub fn flush_all(&mut self) -> R {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.flush_all_of(id)?;
        }
        Ok(())
    }

    /// Every stream's work, with the host waiting for it (`cuCtxSynchronize`, and the calls that
    /// synchronise the context before they act: `cuMemFree`, `cuMemFreeHost`, `cuModuleUnload`).
    pub fn synchronize_all(&mut self) -> R {
        self.flush_all()?;
        self.order.host_waits_all();
        Ok(())
    }

    /// The work of every blocking stream, which the legacy default stream waits for.
    pub fn flush_blocking(&mut self) -> R {
        let ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.non_blocking)
            .map(|(&k, _)| k)
            .collect();
        for id in ids {
            self.flush_all_of(id)?;
        }
        Ok(())
    }

    /// The reason `[ptr, ptr + len)` cannot be used by `what` when it runs, as an illegal address.
    fn reachable(&self, ptr: u64, len: usize, what: &str) -> R {
        self.device_range(ptr, len).map_err(|why| {
            Failure::new(
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{what} {ptr:#x}: it {why}"),
            )
        })
    }

    /// Runs one item. A failure inside a kernel or a copy is reported on stderr (naming the kernel
    /// and argument) and becomes the context's sticky error, as an illegal address does on a GPU.
    fn run(&mut self, stream: u64, op: Op) -> R {
        let mut opened = Opened::default();
        let outcome = match op {
            Op::Kernel(k) => self.run_kernel(&k),
            Op::HostToDevice { dst, bytes } => self
                .reachable(dst, bytes.len(), "copy to device pointer")
                .and_then(|()| self.open(&mut opened, dst, bytes.len()))
                .map(|()| {
                    // SAFETY: the destination range is live device memory (checked), open.
                    unsafe {
                        std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len())
                    };
                    self.mark_written(dst, bytes.len());
                }),
            Op::DeviceToHost { dst, src, len } => self
                .reachable(src, len, "copy from device pointer")
                .and_then(|()| self.open(&mut opened, src, len))
                .map(|()| {
                    // SAFETY: the source is live device memory (checked), open; the host
                    // destination is the caller's, valid until the copy completes as the API
                    // requires.
                    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
                }),
            Op::DeviceToDevice { dst, src, len } => self
                .reachable(src, len, "copy from device pointer")
                .and_then(|()| self.reachable(dst, len, "copy to device pointer"))
                .and_then(|()| self.open(&mut opened, src, len))
                .and_then(|()| self.open(&mut opened, dst, len))
                .map(|()| {
                    // SAFETY: both ranges are live device memory (checked), open; they may
                    // overlap.
                    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
                    self.copy_marks(dst, src, len);
                }),
            Op::Memset { dst, value, len } => self
                .reachable(dst, len, "memset of device pointer")
                .and_then(|()| self.open(&mut opened, dst, len))
                .map(|()| {
                    // SAFETY: live device memory (checked), open.
                    unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) };
                    self.mark_written(dst, len);
                }),
            Op::Record { event } => {
                if let Some(e) = self.events.get_mut(&event) {
                    if e.recorded.is_some_and(|(s, _)| s == stream) {
                        e.reached = Some(Instant::now());
                    }
                }
                Ok(())
            }
            Op::Wait { after, .. } => {
                return match after {
                    Some((other, upto)) => self.flush(other, upto),
                    None => Ok(()),
                }
            }
            Op::Free { ptr } => {
                self.memory.free(ptr, crate::memory::Kind::Device);
                Ok(())
            }
        };
        drop(opened);
        outcome.map_err(|f| {
            let message = f.why.unwrap_or_else(|| format!("{:?}", f.code));
            self.fail_work(f.code, message)
        })
    }

    fn run_kernel(&self, k: &KernelLaunch) -> R {
        let name = k.kernel.name;
        let mut launch = pagedkv::emu::Launch::new(name)
            .grid((k.grid[0], k.grid[1], k.grid[2]))
            .block((k.block[0], k.block[1], k.block[2]))
            .smem(k.smem as usize)
            .workers(workers());
        let mut opened = Opened::default();
        for (i, (param, arg)) in k.kernel.params.iter().zip(&k.args).enumerate() {
            launch = match (param.kind, *arg) {
                (ParamKind::Buf(elem, mutable), ArgValue::Pointer(ptr)) => {
                    let (bytes, shadow) = if ptr == 0 {
                        (0, None)
                    } else {
                        let end = self.device_extent(ptr).map_err(|why| {
                            Failure::new(
                                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                                format!(
                                    "kernel {name}, argument {i} ({}): pointer {ptr:#x} {why}",
                                    param.name
                                ),
                            )
                        })?;
                        let bytes = (end - ptr) as usize;
                        self.open(&mut opened, ptr, bytes)?;
                        (bytes, self.shadow(ptr, bytes))
                    };
                    // SAFETY: `bytes` bytes from `ptr` are live device memory (host memory here),
                    // open until the launch returns, that no Rust reference aliases while the
                    // kernel runs; the shadow, when there is one, is as long.
                    unsafe {
                        launch.raw_buf(
                            ptr as *mut _,
                            bytes,
                            elem,
                            mutable,
                            shadow.unwrap_or(std::ptr::null_mut()),
                        )
                    }
                }
                (ParamKind::Scalar(kind), ArgValue::Scalar(bits)) => launch.raw_scalar(kind, bits),
                _ => unreachable!("arguments are copied by the parameter list"),
            };
        }
        launch.run().map_err(|e| {
            let (code, message) = match e {
                EmuError::OutOfBounds(m) => (CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, m),
                EmuError::Misaligned(m) => (CUresult::CUDA_ERROR_MISALIGNED_ADDRESS, m),
                EmuError::Trap(m) => (CUresult::CUDA_ERROR_ASSERT, m),
                // No GPU error exists for it: compute-sanitizer reports it beside the run.
                EmuError::Uninitialized(m) => (CUresult::CUDA_ERROR_LAUNCH_FAILED, m),
                other => (
                    CUresult::CUDA_ERROR_LAUNCH_FAILED,
                    format!("kernel {name}: {other}"),
                ),
            };
            Failure::new(code, message)
        })
    }
}

/// OS threads that run a launch's blocks.
fn workers() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}
