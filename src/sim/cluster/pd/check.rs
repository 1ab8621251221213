//! The invariants of a disaggregated run, checked after any event: each request in one place,
//! the blocks each side holds as its state says, the counts adding up.

use super::core::PdCore;
use crate::sim::engine::request::Status;
use crate::sim::engine::Engine;

impl PdCore {
    /// Every invariant of every instance ([`Engine::check`], [`ClusterCore::check`]) and of the
    /// requests between them: each in one place, blocks held on each side as its state says,
    /// the counts adding up.
    pub fn check(&self) -> Result<(), String> {
        self.prefill.check().map_err(|m| format!("prefill: {m}"))?;
        for (d, e) in self.decode.iter().enumerate() {
            e.check().map_err(|m| format!("decode {d}: {m}"))?;
        }
        let (mut finished, mut queued, mut moving, mut fetching) = (0, 0, 0, 0);
        for (k, q) in self.requests.iter().enumerate() {
            let pre = self.prefill_req(k);
            let dec = self.decode_req(k);
            if q.rejected.is_some() {
                if pre.is_some() || dec.is_some() {
                    return Err(format!("{}: rejected, yet placed", q.request.id));
                }
                finished += 1;
                continue;
            }
            if let Some((c, _)) = q.chosen {
                if pre.is_some() || dec.is_some() || q.fetch.is_none() {
                    return Err(format!("{}: fetching, yet placed", q.request.id));
                }
                if !self.fetching[c.replica].contains(&(k as u32)) {
                    return Err(format!("{}: fetching, not listed", q.request.id));
                }
                fetching += 1;
                continue;
            }
            let done = match (q.moves(), pre, dec) {
                (false, Some(p), None) => p.is_finished(),
                (false, None, Some(d)) => d.is_finished(),
                (true, Some(p), d) => {
                    let held = p.is_finished() && p.hold_kv;
                    match d {
                        None => {
                            if p.is_finished() && !held {
                                return Err(format!("{}: freed before its transfer", q.request.id));
                            }
                            queued += usize::from(q.wanted);
                            false
                        }
                        Some(d) if !q.arrived => {
                            moving += usize::from(q.prefill_end.is_finite());
                            if d.status != Status::Receiving || (p.is_finished() && !held) {
                                return Err(format!(
                                    "{}: in transfer, decode side {:?}, prefill side holds {held}",
                                    q.request.id, d.status
                                ));
                            }
                            if d.num_computed != d.prompt_len
                                || d.blocks.len() as u64
                                    != u64::from(d.prompt_len + 1)
                                        .div_ceil(u64::from(self.block_size))
                            {
                                return Err(format!(
                                    "{}: {} blocks reserved for {} tokens",
                                    q.request.id,
                                    d.blocks.len(),
                                    d.prompt_len
                                ));
                            }
                            false
                        }
                        Some(d) => {
                            if held || !p.blocks.is_empty() {
                                return Err(format!(
                                    "{}: the prefill side holds blocks after the transfer",
                                    q.request.id
                                ));
                            }
                            d.is_finished()
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "{}: placed {:?} / {:?}",
                        q.request.id, q.prefill, q.decode
                    ))
                }
            };
            finished += usize::from(done);
        }
        if finished != self.done {
            return Err(format!("{finished} finished, {} counted", self.done));
        }
        let listed: usize = self.fetching.iter().map(Vec::len).sum();
        if fetching != self.fetches.len() || listed != fetching {
            return Err(format!(
                "{fetching} fetching, {} timed, {listed} listed",
                self.fetches.len()
            ));
        }
        if queued != self.pending.len() || moving != self.transfers.len() {
            return Err(format!(
                "{queued} wait for a decode pool ({} queued), {moving} in transfer ({} timed)",
                self.pending.len(),
                self.transfers.len()
            ));
        }
        let load: usize = self.decode_load.iter().sum();
        let on_decode = self.requests.iter().filter(|q| q.decode.is_some()).count();
        let decode_done: usize = self.decode.iter().map(Engine::finished_requests).sum();
        if load + decode_done != on_decode {
            return Err(format!(
                "decode loads {load} + {decode_done} finished, {on_decode} sent"
            ));
        }
        Ok(())
    }
}
