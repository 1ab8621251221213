//! The memory a policy manages, behind one interface: admit a request, grow it by a token, release
//! it, and say how much each holder has allocated.

use super::contiguous::{ContiguousMemory, Fit, NoHole};
use crate::kv::{BlockAllocator, SeqId};
use serde::Serialize;

/// How memory is handed to requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Policy {
    /// One contiguous span of exactly the request's final length (known at admission).
    Contiguous { fit: Fit },
    /// One contiguous span of `max_len` tokens whatever the request's length: what engines did
    /// before paging, when the output length was unknown.
    Reserve { fit: Fit, max_len: u64 },
    /// Pages of `page_size` tokens from the block allocator, taken as the KV grows.
    Paged { page_size: usize },
}

impl Policy {
    pub fn name(&self) -> String {
        match self {
            Policy::Contiguous { fit } => format!("{fit}-fit"),
            Policy::Reserve { fit, max_len } => format!("reserve-{max_len}-{fit}-fit"),
            Policy::Paged { page_size } => format!("paged-{page_size}"),
        }
    }

    pub fn page_size(&self) -> Option<usize> {
        match self {
            Policy::Paged { page_size } => Some(*page_size),
            _ => None,
        }
    }
}

/// Why a request was turned away at admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Longer than the whole memory, or than the reservation.
    TooLong,
    /// Not enough free memory in total.
    OutOfMemory,
    /// Enough free memory in total but no hole large enough.
    Fragmented,
}

#[derive(Debug, Clone, Copy)]
pub enum Handle {
    Span { start: u64, size: u64 },
    Seq(SeqId),
}

pub enum Memory {
    Contiguous {
        mem: ContiguousMemory,
        reserve: Option<u64>,
    },
    Paged(BlockAllocator),
}

impl Memory {
    /// `capacity` in tokens; for paging it must be a whole number of pages (checked by the caller).
    pub fn new(policy: Policy, capacity: u64) -> Self {
        match policy {
            Policy::Contiguous { fit } => Memory::Contiguous {
                mem: ContiguousMemory::new(capacity, fit),
                reserve: None,
            },
            Policy::Reserve { fit, max_len } => Memory::Contiguous {
                mem: ContiguousMemory::new(capacity, fit),
                reserve: Some(max_len),
            },
            Policy::Paged { page_size } => Memory::Paged(BlockAllocator::new(
                capacity as usize / page_size,
                page_size,
            )),
        }
    }

    /// Admits a request of `prompt` tokens now and `final_len` tokens at the end (final_len > 0).
    pub fn admit(&mut self, prompt: u64, final_len: u64) -> Result<Handle, Reject> {
        match self {
            Memory::Contiguous { mem, reserve } => {
                let size = match *reserve {
                    Some(max) if final_len > max => return Err(Reject::TooLong),
                    Some(max) => max,
                    None => final_len,
                };
                if size > mem.capacity() {
                    return Err(Reject::TooLong);
                }
                match mem.allocate(size) {
                    Ok(start) => Ok(Handle::Span { start, size }),
                    Err(NoHole::Fragmented) => Err(Reject::Fragmented),
                    Err(NoHole::OutOfMemory) => Err(Reject::OutOfMemory),
                }
            }
            Memory::Paged(a) => {
                if final_len > (a.num_blocks() * a.block_size()) as u64 {
                    return Err(Reject::TooLong);
                }
                let seq = a.new_sequence();
                match a.append_tokens(seq, prompt as usize) {
                    Ok(_) => Ok(Handle::Seq(seq)),
                    Err(_) => {
                        a.free_sequence(seq).expect("just created");
                        Err(Reject::OutOfMemory)
                    }
                }
            }
        }
    }

    /// Writes one more token; false when memory ran out (only paging allocates as it grows).
    pub fn grow(&mut self, h: Handle) -> bool {
        match (self, h) {
            (Memory::Paged(a), Handle::Seq(s)) => a.append_token(s).is_ok(),
            _ => true,
        }
    }

    pub fn release(&mut self, h: Handle) {
        match (self, h) {
            (Memory::Contiguous { mem, .. }, Handle::Span { start, size }) => {
                mem.release(start, size)
            }
            (Memory::Paged(a), Handle::Seq(s)) => a.free_sequence(s).expect("live sequence"),
            _ => unreachable!("handle from another memory"),
        }
    }

    /// Tokens of memory allocated to the holder.
    pub fn allocated(&self, h: Handle) -> u64 {
        match (self, h) {
            (Memory::Contiguous { .. }, Handle::Span { size, .. }) => size,
            (Memory::Paged(a), Handle::Seq(s)) => {
                (a.blocks(s).expect("live sequence").len() * a.block_size()) as u64
            }
            _ => unreachable!("handle from another memory"),
        }
    }

    /// Free tokens as the memory itself counts them.
    pub fn free(&self) -> u64 {
        match self {
            Memory::Contiguous { mem, .. } => mem.free(),
            Memory::Paged(a) => (a.free_blocks() * a.block_size()) as u64,
        }
    }

    pub fn external_fragmentation(&self) -> f64 {
        match self {
            Memory::Contiguous { mem, .. } => mem.external_fragmentation(),
            // Any free page serves any request.
            Memory::Paged(_) => 0.0,
        }
    }

    /// Checks the memory's own bookkeeping against the live holders: spans and holes tile the
    /// memory exactly; the block allocator's invariants hold and its filled slots are `data`.
    pub fn check(&self, live: &[Handle], data: u64) -> Result<(), String> {
        match self {
            Memory::Contiguous { mem, .. } => {
                let mut spans: Vec<(u64, u64)> = mem.holes().collect();
                spans.extend(live.iter().map(|h| match *h {
                    Handle::Span { start, size } => (start, size),
                    Handle::Seq(_) => (u64::MAX, 0),
                }));
                spans.sort_unstable();
                let mut at = 0;
                for (s, l) in spans {
                    if s != at {
                        return Err(format!("span at {s} but the previous one ends at {at}"));
                    }
                    at = s + l;
                }
                if at != mem.capacity() {
                    return Err(format!("spans end at {at}, capacity {}", mem.capacity()));
                }
                Ok(())
            }
            Memory::Paged(a) => {
                a.check_invariants()?;
                let filled = a.usage().filled_slots as u64;
                if filled != data {
                    return Err(format!("{filled} filled slots but {data} tokens written"));
                }
                Ok(())
            }
        }
    }
}
