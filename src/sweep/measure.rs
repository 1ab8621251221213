//! The bandwidth side of the sweep put together: every probe at every block size, round after
//! round, each rate divided by the limit measured beside it, and the median of the rounds with
//! the spread the recommendation's noise band rests on.
//!
//! What is measured beside what (per probe, block size and round):
//! - the read-only stream limit, always: attention and the read-only gather are fractions of it,
//!   and attention's fraction (else the read-only gather's) is the one figure the answer reads;
//! - the copy limit, only beside the copy-out gather it is the denominator of;
//! - the scalar conversion pass (reference only, no rate divides by it), once per probe and
//!   round: it reads the same bytes at every block size.
//!
//! With [`ProbeOptions::answer_only`] (`--quick`) only what the answer reads is measured: the
//! first probe ([`super::probes_for`] leaves out the others), its attention and the stream limit
//! beside it; the gathers and the copy limit only where attention is not measured.

use super::{
    BandwidthProbe, GatherRates, LimitSet, Limits, ModelShape, ProbeOptions, SweepError, SweepRow,
};
use crate::kv::KvSpec;
use crate::stats::median;
use serde::Serialize;

/// One memory setting's bandwidth figures at one block size (GB/s; fractions of the limits).
/// `None`: not measured (see the module's notes on what `--quick` leaves out).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBandwidth {
    pub memory: String,
    pub copy_gbps: Option<f64>,
    pub stream_gbps: f64,
    pub convert_stream_gbps: Option<f64>,
    pub gather_gbps: Option<f64>,
    pub gather_frac_of_stream: Option<f64>,
    pub gather_copy_gbps: Option<f64>,
    pub gather_copy_frac_of_copy: Option<f64>,
    pub attention_gbps: Option<f64>,
    pub attention_frac_of_stream: Option<f64>,
    /// Half the range of the efficiency the proxy uses (attention's fraction of stream, else the
    /// read-only gather's) over the rounds, relative to its median; `None` with one round.
    pub efficiency_noise: Option<f64>,
}

impl MemoryBandwidth {
    /// One measurement's figures, each rate over the limit measured beside it: a copy-out gather
    /// only beside a copy limit.
    fn of(
        memory: String,
        limits: Limits,
        convert_stream_gbps: Option<f64>,
        gather: Option<GatherRates>,
        attention_gbps: Option<f64>,
    ) -> Self {
        let stream = limits.stream_gbps;
        let copy_out = gather.zip(limits.copy_gbps);
        MemoryBandwidth {
            memory,
            copy_gbps: limits.copy_gbps,
            stream_gbps: stream,
            convert_stream_gbps,
            gather_gbps: gather.map(|g| g.read_gbps),
            gather_frac_of_stream: gather.map(|g| g.read_gbps / stream),
            gather_copy_gbps: copy_out.map(|(g, _)| g.copy_gbps),
            gather_copy_frac_of_copy: copy_out.map(|(g, copy)| g.copy_gbps / copy),
            attention_gbps,
            attention_frac_of_stream: attention_gbps.map(|a| a / stream),
            efficiency_noise: None,
        }
    }

    /// The efficiency the throughput proxy uses: attention's fraction of the stream limit when
    /// measured, else the read-only gather's.
    pub fn efficiency(&self) -> Option<f64> {
        self.attention_frac_of_stream.or(self.gather_frac_of_stream)
    }

    /// Every figure the median of its values over `rounds` (each fraction the median of the
    /// per-round fractions, each taken against its own neighbouring limit).
    fn median_of(rounds: &[MemoryBandwidth]) -> MemoryBandwidth {
        let med =
            |f: &dyn Fn(&MemoryBandwidth) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
        let med_opt = |f: &dyn Fn(&MemoryBandwidth) -> Option<f64>| {
            let v: Option<Vec<f64>> = rounds.iter().map(f).collect();
            v.map(|v| median(&v))
        };
        let noise = |eff: Vec<f64>| {
            let (lo, hi) = eff
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                    (l.min(x), h.max(x))
                });
            let mid = median(&eff);
            (eff.len() > 1 && mid > 0.0).then(|| (hi - lo) / 2.0 / mid)
        };
        let eff: Option<Vec<f64>> = rounds.iter().map(MemoryBandwidth::efficiency).collect();
        MemoryBandwidth {
            memory: rounds[0].memory.clone(),
            copy_gbps: med_opt(&|m| m.copy_gbps),
            stream_gbps: med(&|m| m.stream_gbps),
            convert_stream_gbps: med_opt(&|m| m.convert_stream_gbps),
            gather_gbps: med_opt(&|m| m.gather_gbps),
            gather_frac_of_stream: med_opt(&|m| m.gather_frac_of_stream),
            gather_copy_gbps: med_opt(&|m| m.gather_copy_gbps),
            gather_copy_frac_of_copy: med_opt(&|m| m.gather_copy_frac_of_copy),
            attention_gbps: med_opt(&|m| m.attention_gbps),
            attention_frac_of_stream: med_opt(&|m| m.attention_frac_of_stream),
            efficiency_noise: eff.and_then(noise),
        }
    }
}

/// Measures every probe at every row's block size, one layer of `model`'s shape, `opts.rounds`
/// times over, and keeps the median of each figure (and the spread of the proxy's efficiency).
/// The limits are measured again next to each block size's gathers and attention, and each
/// fraction divides by its neighbour; the probes take turns at each block size, and each round
/// passes over every block size before the next begins. On a shared machine the load drifts over
/// a sweep: a limit (or another memory setting) measured at another moment would skew the
/// comparison, and rounds spread over the whole sweep keep a burst of load from landing on one
/// block size only. `progress` is called after each measurement with a short label. Returns the
/// probes' notes (each once) and what `opts.answer_only` left out.
pub fn measure_bandwidth(
    rows: &mut [SweepRow],
    mut probes: Vec<Box<dyn BandwidthProbe>>,
    model: &ModelShape,
    opts: &ProbeOptions,
    mut progress: impl FnMut(&str),
) -> Result<Vec<String>, SweepError> {
    let rounds = opts.rounds.max(1);
    // Beside attention the gathers are reported only; without it the read-only one is the answer.
    let gathers = !opts.answer_only || opts.attention.is_none();
    let set = if gathers {
        LimitSet::CopyAndStream
    } else {
        LimitSet::Stream
    };
    // samples[row][probe][round]
    let mut samples: Vec<Vec<Vec<MemoryBandwidth>>> =
        vec![vec![Vec::with_capacity(rounds); probes.len()]; rows.len()];
    for round in 0..rounds {
        let mut convert = vec![None; probes.len()];
        for (i, (row, row_samples)) in rows.iter().zip(samples.iter_mut()).enumerate() {
            let spec = KvSpec::new(
                model.kv_heads,
                model.head_dim,
                row.block_size.get(),
                model.dtype,
            )?;
            let probes_here = probes.iter_mut().zip(row_samples.iter_mut());
            for (p, (probe, probe_samples)) in probes_here.enumerate() {
                let memory = probe.memory();
                if i == 0 && !opts.answer_only {
                    convert[p] = probe.convert_stream_gbps(&spec)?;
                }
                let limits = probe.limits(&spec, set)?;
                let mut gather = gathers.then(|| probe.gather(&spec)).transpose()?;
                let attention = probe.attention_gbps(&spec)?;
                if gather.is_none() && attention.is_none() {
                    // No attention kernel for this shape (a GPU's note says so): the read-only
                    // gather carries the answer, over the stream measured before attention.
                    gather = Some(probe.gather(&spec)?);
                }
                probe_samples.push(MemoryBandwidth::of(
                    memory.clone(),
                    limits,
                    convert[p],
                    gather,
                    attention,
                ));
                progress(&format!(
                    "round {}/{rounds}, {memory}: block size {}",
                    round + 1,
                    row.block_size
                ));
            }
        }
    }
    let mut notes: Vec<String> = Vec::new();
    for note in probes.iter().flat_map(|p| p.notes()) {
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    if opts.answer_only {
        let left = if gathers {
            "the scalar conversion pass"
        } else {
            "the paged gathers, the copy limit and the scalar conversion pass"
        };
        notes.push(format!(
            "--quick measures only what the answer reads: {left} not measured (the sweep \
             without --quick measures them)"
        ));
    }
    for (row, row_samples) in rows.iter_mut().zip(&samples) {
        row.memory = row_samples
            .iter()
            .map(|s| MemoryBandwidth::median_of(s))
            .collect();
        if let Some(m) = row.memory.first() {
            row.first_probe = m.into();
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::super::{apply_proxy, memory_rows, model, proxy_banded, DurationModel};
    use super::super::{AttentionBatch, MemoryConfig, ProbeError};
    use super::*;
    use crate::workload::azure::Request;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// What a [`Scripted`] probe was asked, in order: `L` (stream limit), `C` (copy limit), `X`
    /// (conversion pass), `G` (gathers), `A` (attention), each with the block size.
    type Log = Rc<RefCell<Vec<(char, usize)>>>;

    /// A probe whose figures are scripted per call: the stream limit `10 + n` GB/s on its `n`-th
    /// measurement and the copy limit twice that, attention `block_size × k` GB/s on its `k`-th,
    /// so that the order of the measurements and which limit a rate was divided by show in the
    /// figures. `attends: false`: a probe with no attention kernel.
    struct Scripted {
        calls: usize,
        limits: usize,
        attends: bool,
        log: Log,
    }

    impl Scripted {
        fn new(attends: bool) -> (Self, Log) {
            let log = Log::default();
            let probe = Scripted {
                calls: 0,
                limits: 0,
                attends,
                log: log.clone(),
            };
            (probe, log)
        }
    }

    impl BandwidthProbe for Scripted {
        fn device(&self) -> String {
            "scripted".into()
        }
        fn memory(&self) -> String {
            "test".into()
        }
        fn limits(&mut self, spec: &KvSpec, set: LimitSet) -> Result<Limits, ProbeError> {
            self.limits += 1;
            let stream = 10.0 + self.limits as f64;
            let copy = (set == LimitSet::CopyAndStream).then_some(2.0 * stream);
            let mut log = self.log.borrow_mut();
            if copy.is_some() {
                log.push(('C', spec.block_size));
            }
            log.push(('L', spec.block_size));
            Ok(Limits {
                copy_gbps: copy,
                stream_gbps: stream,
            })
        }
        fn convert_stream_gbps(&mut self, spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
            self.log.borrow_mut().push(('X', spec.block_size));
            Ok(Some(1.0))
        }
        fn gather(&mut self, spec: &KvSpec) -> Result<GatherRates, ProbeError> {
            self.log.borrow_mut().push(('G', spec.block_size));
            Ok(GatherRates {
                copy_gbps: 10.0,
                read_gbps: 5.0,
            })
        }
        fn attention_gbps(&mut self, spec: &KvSpec) -> Result<Option<f64>, ProbeError> {
            if !self.attends {
                return Ok(None);
            }
            self.log.borrow_mut().push(('A', spec.block_size));
            self.calls += 1;
            Ok(Some(spec.block_size as f64 * self.calls as f64))
        }
    }

    /// Block sizes 1 and 2 of a small trace.
    fn two_rows() -> (Vec<SweepRow>, ModelShape) {
        let model = model::preset("llama-3-8b").unwrap();
        let requests: Vec<Request> = (0..20)
            .map(|i| Request {
                arrival_s: i as f64,
                prompt_tokens: 100 + 7 * i,
                output_tokens: 10 + i,
            })
            .collect();
        let config = MemoryConfig {
            model: model.clone(),
            pool_bytes: 1 << 30,
            durations: DurationModel {
                prefill_s_per_token: 0.0,
                decode_s_per_token: 0.02,
            },
            turns: 2,
            system_prompt_tokens: 0,
        };
        let mut rows = memory_rows(&requests, &config).unwrap();
        rows.truncate(2);
        (rows, model)
    }

    fn options(rounds: usize, attention: bool, answer_only: bool) -> ProbeOptions {
        ProbeOptions {
            pool_bytes: 1 << 20,
            reps: 1,
            rounds,
            seq_tokens: 256,
            seed: 1,
            attention: attention.then(|| AttentionBatch::fixed(32, 1, 16)),
            answer_only,
        }
    }

    #[test]
    fn rounds_pass_over_every_block_size_and_keep_medians_and_spread() {
        let (mut rows, model) = two_rows();
        let (probe, log) = Scripted::new(true);
        let mut labels = Vec::new();
        let opts = options(3, true, false);
        measure_bandwidth(&mut rows, vec![Box::new(probe)], &model, &opts, |l| {
            labels.push(l.to_string())
        })
        .unwrap();
        // Round by round over every block size, not block size by block size; the limits before
        // each block size's gathers and attention, the conversion pass once per round.
        let round = |_| {
            let mut r = vec![('X', 1)];
            for bs in [1, 2] {
                r.extend([('C', bs), ('L', bs), ('G', bs), ('A', bs)]);
            }
            r
        };
        assert_eq!(*log.borrow(), (0..3).flat_map(round).collect::<Vec<_>>());
        assert_eq!(labels.len(), 6);
        // Block size 1 was measured on calls 1, 3, 5: attention 1, 3, 5 GB/s over the streams
        // measured beside them, 11, 13, 15; block size 2 on calls 2, 4, 6: 4, 8, 12 over 12, 14,
        // 16. A rate over a limit of another call would give other fractions.
        assert_eq!(rows[0].first_probe.attention_gbps, Some(3.0));
        assert_eq!(rows[0].first_probe.stream_gbps, Some(13.0));
        assert_eq!(
            rows[0].first_probe.attention_frac_of_stream,
            Some(3.0 / 13.0)
        );
        assert_eq!(rows[1].first_probe.attention_gbps, Some(8.0));
        assert_eq!(
            rows[1].first_probe.attention_frac_of_stream,
            Some(8.0 / 14.0)
        );
        // Gathers 5 GB/s read-only over streams 11, 13, 15; copy-out 10 over copies 22, 26, 30.
        assert_eq!(rows[0].first_probe.gather_frac_of_stream, Some(5.0 / 13.0));
        assert_eq!(
            rows[0].first_probe.gather_copy_frac_of_copy,
            Some(10.0 / 26.0)
        );
        assert_eq!(rows[1].first_probe.convert_stream_gbps, Some(1.0));
        assert_eq!(rows[0].memory.len(), 1);
        // Half the range over the median.
        let want = [
            (5.0 / 15.0 - 1.0 / 11.0) / 2.0 / (3.0 / 13.0),
            (12.0 / 16.0 - 4.0 / 12.0) / 2.0 / (8.0 / 14.0),
        ];
        for (r, want) in rows.iter().zip(want) {
            assert!((r.first_probe.efficiency_noise.unwrap() - want).abs() < 1e-12);
        }
        // The noise band follows the measured spread; block size 2 is the best.
        let band = apply_proxy(&mut rows);
        assert!((band - (want[0] + want[1]) / 2.0).abs() < 1e-12);
        assert_eq!(rows[1].proxy, 1.0);
        let banded = proxy_banded(&rows, band);
        assert!((banded[1].low - (1.0 - band.max(want[1]))).abs() < 1e-12);
    }

    /// `--quick`: attention and the stream limit beside it, nothing the answer does not read;
    /// the answer's figures as the full sweep measures them.
    #[test]
    fn answer_only_measures_what_the_answer_reads_beside_its_limit() {
        let (mut full_rows, model) = two_rows();
        let (probe, _) = Scripted::new(true);
        let full = options(3, true, false);
        measure_bandwidth(&mut full_rows, vec![Box::new(probe)], &model, &full, |_| {}).unwrap();
        let (mut rows, _) = two_rows();
        let (probe, log) = Scripted::new(true);
        let quick = options(3, true, true);
        let notes = measure_bandwidth(&mut rows, vec![Box::new(probe)], &model, &quick, |_| {});
        let round = [('L', 1), ('A', 1), ('L', 2), ('A', 2)];
        assert_eq!(*log.borrow(), round.repeat(3));
        assert!(notes.unwrap().iter().any(|n| n.contains("copy limit")));
        for (r, f) in rows.iter().zip(&full_rows) {
            assert_eq!(
                r.first_probe.attention_frac_of_stream,
                f.first_probe.attention_frac_of_stream
            );
            assert_eq!(r.efficiency(), f.efficiency());
            assert_eq!(
                r.first_probe.efficiency_noise,
                f.first_probe.efficiency_noise
            );
            assert_eq!(r.first_probe.stream_gbps, f.first_probe.stream_gbps);
            let left_out = [
                r.first_probe.gather_gbps,
                r.first_probe.copy_gbps,
                r.first_probe.convert_stream_gbps,
            ];
            assert_eq!(left_out, [None; 3]);
        }
        assert_eq!(
            rows[0].first_probe.attention_frac_of_stream,
            Some(3.0 / 13.0)
        );
    }

    /// Without attention the read-only gather is the answer, over the stream beside it, and the
    /// copy-out gather keeps its copy limit.
    #[test]
    fn answer_only_without_attention_keeps_the_gathers() {
        let (mut rows, model) = two_rows();
        let (probe, log) = Scripted::new(false);
        let quick = options(1, false, true);
        measure_bandwidth(&mut rows, vec![Box::new(probe)], &model, &quick, |_| {}).unwrap();
        let round = [('C', 1), ('L', 1), ('G', 1), ('C', 2), ('L', 2), ('G', 2)];
        assert_eq!(*log.borrow(), round);
        assert_eq!(rows[1].first_probe.gather_frac_of_stream, Some(5.0 / 12.0));
        assert_eq!(
            rows[1].first_probe.gather_copy_frac_of_copy,
            Some(10.0 / 24.0)
        );
        assert_eq!(rows[1].efficiency(), Some(5.0 / 12.0));
        // A probe asked for attention that has no kernel for the shape: the read-only gather
        // after all, over the stream beside it, and no copy-out rate without its limit.
        let (mut rows, _) = two_rows();
        let (probe, log) = Scripted::new(false);
        let quick = options(1, true, true);
        measure_bandwidth(&mut rows, vec![Box::new(probe)], &model, &quick, |_| {}).unwrap();
        assert_eq!(*log.borrow(), [('L', 1), ('G', 1), ('L', 2), ('G', 2)]);
        assert_eq!(rows[0].first_probe.gather_frac_of_stream, Some(5.0 / 11.0));
        assert_eq!(
            (
                rows[0].first_probe.gather_copy_gbps,
                rows[0].first_probe.copy_gbps
            ),
            (None, None)
        );
    }
}
