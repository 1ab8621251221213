//! What streams, events and graphs hold: the work queued on a stream (copies, memsets, kernel
//! launches, event records and waits), an event's state, a captured graph. How the work runs is
//! queue.rs.

use crate::order::Clock;
use pagedkv::emu::KernelInfo;
use std::collections::VecDeque;
use std::time::Instant;

/// One kernel argument as the launch copied it out of `kernelParams`.
#[derive(Debug, Clone, Copy)]
pub enum ArgValue {
    Pointer(u64),
    Scalar([u8; 8]),
}

#[derive(Clone)]
pub struct KernelLaunch {
    pub kernel: &'static KernelInfo,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    pub args: Vec<ArgValue>,
}

#[derive(Clone)]
pub enum Op {
    Kernel(KernelLaunch),
    /// From pageable host memory: the bytes were taken when the copy was queued, as the driver
    /// stages them before the call returns.
    HostToDevice {
        dst: u64,
        bytes: Vec<u8>,
    },
    /// To host memory, written when the copy runs.
    DeviceToHost {
        dst: usize,
        src: u64,
        len: usize,
    },
    DeviceToDevice {
        dst: u64,
        src: u64,
        len: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        len: usize,
    },
    Record {
        event: u64,
    },
    /// `cuStreamWaitEvent`: runs the recorded stream's work up to its item `upto` first (none
    /// for an event recorded on the legacy stream, whose work ran at once), and orders what the
    /// stream queues next after everything `clock` covers.
    Wait {
        after: Option<(u64, u64)>,
        clock: Clock,
    },
    /// `cuMemFreeAsync`: the allocation goes when the stream reaches this point.
    Free {
        ptr: u64,
    },
}

pub struct Stream {
    /// Created with `CU_STREAM_NON_BLOCKING`: the legacy default stream does not wait for it.
    pub non_blocking: bool,
    /// Queued items with their sequence numbers.
    pub queue: VecDeque<(u64, Op)>,
    pub next_seq: u64,
    /// While capturing: the graph being built.
    pub capture: Option<Vec<Op>>,
}

impl Stream {
    pub fn new(non_blocking: bool) -> Self {
        Stream {
            non_blocking,
            queue: VecDeque::new(),
            next_seq: 1,
            capture: None,
        }
    }
}

pub struct Event {
    pub timing: bool,
    /// The stream and item of the last record, if any.
    pub recorded: Option<(u64, u64)>,
    /// When the last record ran; `None` while it waits in its stream.
    pub reached: Option<Instant>,
    /// What the last record comes after (racecheck).
    pub clock: Clock,
}

#[derive(Clone, Default)]
pub struct Graph {
    pub ops: Vec<Op>,
}
