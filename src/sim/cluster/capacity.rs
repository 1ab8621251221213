//! Capacity per GPU of cluster layouts: DistServe's goodput (OSDI'24 §2.2: the highest request
//! rate at which the SLO attainment target holds, per GPU) for colocated replicas (`4`) and
//! prefill:decode splits (`2:2`) on the same trace and SLOs.
//!
//! Each layout's rate is found by the goodput search ([`crate::sim::goodput::search_by`]:
//! doubling, then geometric bisection of the trace's rate scale, each probe a whole cluster run),
//! so its answer is a bracket: the highest scale seen to hold and the lowest above it seen to
//! fail. Rate scale 1 is the trace's own arrival rate ([`crate::sim::goodput::own_rate`]);
//! requests per second are that rate times the scale, per GPU divided by the layout's GPUs
//! (replicas × tensor parallelism, each side's for a split). The layouts are searched in
//! parallel (rayon), each search sequential and every run deterministic, so the answer does not
//! depend on the thread count.

use super::outcome::ClusterOutcome;
use super::pd::Disagg;
use super::run::run;
use super::spec::ClusterSpec;
use super::RouterKind;
use crate::kv::BlockSize;
use crate::sim::engine::{EngineError, RunSettings, SloTargets};
use crate::sim::goodput::{own_rate, search_by, SearchLimits};
use crate::workload::serving::{scale_rate, ServingRequest};
use rayon::prelude::*;
use serde::{Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The most replicas (instances on one side) a layout may name, as `--replicas` allows.
pub const MAX_REPLICAS: usize = 1024;

/// A cluster layout: `N` colocated replicas, or `P:D` prefill and decode instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Colocated(usize),
    Split { prefill: usize, decode: usize },
}

impl Layout {
    /// The layout `spec` runs.
    pub fn of(spec: &ClusterSpec) -> Layout {
        match spec.disagg() {
            Some(d) => Layout::Split {
                prefill: d.prefill_replicas,
                decode: d.decode_replicas,
            },
            None => Layout::Colocated(spec.replicas()),
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Colocated(n) => write!(f, "{n}"),
            Layout::Split { prefill, decode } => write!(f, "{prefill}:{decode}"),
        }
    }
}

impl Serialize for Layout {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A layout that is no layout: "N" or "P:D", each count 1 to [`MAX_REPLICAS`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("'{0}' is not a layout: {LAYOUT_FORMS}")]
    NotALayout(String),
    #[error("'{text}': {role} must be 1 to {MAX_REPLICAS} ({LAYOUT_FORMS})")]
    OutOfRange { text: String, role: &'static str },
}

const LAYOUT_FORMS: &str = "a layout is N (colocated replicas) or P:D (prefill:decode instances)";

impl FromStr for Layout {
    type Err = LayoutError;

    fn from_str(text: &str) -> Result<Self, LayoutError> {
        let count = |part: &str, role: &'static str| match part.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_REPLICAS).contains(&n) => Ok(n),
            Ok(_) => Err(LayoutError::OutOfRange {
                text: text.into(),
                role,
            }),
            Err(_) => Err(LayoutError::NotALayout(text.into())),
        };
        match text.split(':').collect::<Vec<_>>()[..] {
            [n] => Ok(Layout::Colocated(count(n, "replicas")?)),
            [p, d] => Ok(Layout::Split {
                prefill: count(p, "prefill instances")?,
                decode: count(d, "decode instances")?,
            }),
            _ => Err(LayoutError::NotALayout(text.into())),
        }
    }
}

/// GPUs `spec` takes at the engine's tensor parallelism `tp`: replicas × TP, or prefill instances
/// × their TP + decode instances × theirs.
pub fn gpus(spec: &ClusterSpec, tp: usize) -> usize {
    match spec.disagg() {
        Some(Disagg {
            prefill_replicas,
            decode_replicas,
            prefill_tp,
            decode_tp,
            ..
        }) => {
            prefill_replicas * prefill_tp.unwrap_or(tp) + decode_replicas * decode_tp.unwrap_or(tp)
        }
        None => spec.replicas() * tp,
    }
}

/// One layout's search.
#[derive(Debug, Clone, Serialize)]
pub struct LayoutCapacity {
    pub layout: Layout,
    /// The router (a split's prefill router).
    pub router: RouterKind,
    pub gpus: usize,
    /// The highest rate scale seen to hold; 0 when even the lowest searched failed.
    pub rate_scale: f64,
    /// The lowest scale above it seen to fail; infinite (JSON null) when none failed.
    pub failed_scale: f64,
    /// Cluster runs made.
    pub probes: usize,
    /// Whether the bracket closed within the search's resolution.
    pub resolved: bool,
    /// DistServe's goodput: the arrival rate at `rate_scale`, requests per second ...
    pub requests_per_s: f64,
    /// ... and per GPU.
    pub requests_per_s_per_gpu: f64,
    /// The run at `rate_scale`; `None` when none held.
    pub at: Option<ClusterOutcome>,
}

/// Every layout's search, and what they share.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityReport {
    pub slo: SloTargets,
    pub search: SearchLimits,
    /// Requests per run.
    pub requests: usize,
    /// Their own arrival rate, requests per second: rate scale 1.
    pub base_rps: f64,
    /// Whether they had no arrival times (all at once), so arrivals were spaced 1 s apart.
    pub spaced: bool,
    pub layouts: Vec<LayoutCapacity>,
}

impl CapacityReport {
    /// The layout that serves the most per GPU (the first of equals); `None` when none held.
    pub fn best(&self) -> Option<&LayoutCapacity> {
        best_of(self.layouts.iter())
    }

    /// The best colocated layout, and the best split one.
    pub fn best_colocated(&self) -> Option<&LayoutCapacity> {
        best_of(
            self.layouts
                .iter()
                .filter(|l| matches!(l.layout, Layout::Colocated(_))),
        )
    }

    pub fn best_split(&self) -> Option<&LayoutCapacity> {
        best_of(
            self.layouts
                .iter()
                .filter(|l| matches!(l.layout, Layout::Split { .. })),
        )
    }

    /// Whether the layouts take different numbers of GPUs.
    pub fn mixed_gpus(&self) -> bool {
        self.layouts.windows(2).any(|w| w[0].gpus != w[1].gpus)
    }
}

fn best_of<'a>(it: impl Iterator<Item = &'a LayoutCapacity>) -> Option<&'a LayoutCapacity> {
    it.filter(|l| l.rate_scale > 0.0)
        .fold(None, |best: Option<&LayoutCapacity>, l| match best {
            Some(b) if b.requests_per_s_per_gpu >= l.requests_per_s_per_gpu => Some(b),
            _ => Some(l),
        })
}

/// Searches each of `specs` on `requests` at `block_size` against `slo` (which replaces the
/// engine's objectives in `s`), in parallel; `progress` is called after every cluster run.
pub fn search(
    s: &RunSettings,
    block_size: BlockSize,
    specs: &[ClusterSpec],
    requests: &[ServingRequest],
    slo: &SloTargets,
    limits: &SearchLimits,
    progress: &(dyn Fn() + Sync),
) -> Result<CapacityReport, EngineError> {
    let s = RunSettings {
        slo: slo.slo(),
        ..s.clone()
    };
    let mut base = requests.to_vec();
    let (base_rps, spaced) = own_rate(&mut base);
    let layouts = specs
        .par_iter()
        .map(|spec| {
            let found = search_by(
                limits,
                slo,
                |scale| {
                    let mut scaled = base.clone();
                    scale_rate(&mut scaled, scale);
                    let out = run(&s, block_size, spec, &scaled, false, None, |_, _| {});
                    progress();
                    out
                },
                |o: &ClusterOutcome| &o.total,
            )?;
            let gpus = gpus(spec, s.tp);
            let rps = found.rate_scale * base_rps;
            Ok(LayoutCapacity {
                layout: Layout::of(spec),
                router: spec.router(),
                gpus,
                rate_scale: found.rate_scale,
                failed_scale: found.failed_scale,
                probes: found.probes,
                resolved: limits.closes(found.rate_scale, found.failed_scale),
                requests_per_s: rps,
                requests_per_s_per_gpu: rps / gpus as f64,
                at: found.held,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok(CapacityReport {
        slo: *slo,
        search: *limits,
        requests: base.len(),
        base_rps,
        spaced,
        layouts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIXTEEN: BlockSize = BlockSize::of(16);
    use crate::hw::gpu;
    use crate::sim::cluster::pd::KvTransfer;
    use crate::sim::cluster::RouterConfig;
    use crate::sim::engine::{EngineConfig, Judged};
    use crate::workload::serving::Prompt;
    use rand::{Rng, SeedableRng};

    fn settings() -> RunSettings {
        RunSettings {
            engine: EngineConfig {
                max_num_seqs: 1024,
                max_num_batched_tokens: 8192,
                ..EngineConfig::default()
            },
            gpu_memory_utilization: 0.9,
            ..RunSettings::new(
                crate::kv::model::preset("llama-3.1-8b").unwrap(),
                gpu("h200").unwrap(),
                crate::sim::latency::Choice::roofline("the roofline this test was written for"),
            )
        }
    }

    fn colocated(replicas: usize) -> ClusterSpec {
        ClusterSpec::colocated(replicas, RouterKind::LeastLoaded, RouterConfig::default()).unwrap()
    }

    fn split(prefill: usize, decode: usize, decode_tp: Option<usize>) -> ClusterSpec {
        ClusterSpec::disaggregated(
            Disagg {
                prefill_replicas: prefill,
                decode_replicas: decode,
                prefill_tp: None,
                decode_tp,
                link_gbps: 100.0,
                transfer: KvTransfer::Layerwise,
                link_sharing: Default::default(),
                local_prefill: None,
                balancing_threshold: None,
            },
            RouterKind::LeastLoaded,
            RouterConfig::default(),
        )
    }

    fn slo(ttft_s: f64, tpot_s: Option<f64>) -> SloTargets {
        SloTargets {
            ttft_s: Some(ttft_s),
            tpot_s,
            tbt_s: None,
            attainment: 0.9,
            judged: Judged::Joint,
        }
    }

    #[test]
    fn layouts_parse_and_count_their_gpus() {
        assert_eq!("4".parse(), Ok(Layout::Colocated(4)));
        let two_two = Layout::Split {
            prefill: 2,
            decode: 2,
        };
        assert_eq!("2:2".parse(), Ok(two_two));
        assert_eq!(two_two.to_string(), "2:2");
        let range = |text: &str, role| LayoutError::OutOfRange {
            text: text.into(),
            role,
        };
        for (bad, why) in [
            ("0", range("0", "replicas")),
            ("0:4", range("0:4", "prefill instances")),
            ("2:1025", range("2:1025", "decode instances")),
            ("1025", range("1025", "replicas")),
        ] {
            assert_eq!(bad.parse::<Layout>(), Err(why), "{bad}");
        }
        for bad in ["3:", ":3", "x", "", "1:2:3", "-1", "2.5"] {
            assert_eq!(
                bad.parse::<Layout>(),
                Err(LayoutError::NotALayout(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            "0:4".parse::<Layout>().unwrap_err().to_string(),
            "'0:4': prefill instances must be 1 to 1024 (a layout is N (colocated replicas) or P:D \
             (prefill:decode instances))"
        );
        assert_eq!(gpus(&colocated(4), 2), 8);
        // Three prefill instances at the engine's TP 2, one decode instance at TP 4.
        assert_eq!(gpus(&split(3, 1, Some(4)), 2), 10);
        assert_eq!(Layout::of(&split(3, 1, None)).to_string(), "3:1");
    }

    /// A single server's capacity is its service rate, as in the sweep's test
    /// (`sweep::end_to_end`): every request one full 8192-token prefill chunk and one output
    /// token, so each takes one step of `t` seconds and nothing overlaps; with arrivals `g < t`
    /// apart request `i` has TTFT `(i + 1)·t − i·g`, within `2t` iff `i ≤ t / (t − g)`; 90% of `n`
    /// within at the gap `g* = t − t / (0.9n − 1)`: the capacity scale is `1 / g*` (arrivals 1 s
    /// apart at scale 1, so the rate is n / (n − 1) at scale 1).
    #[test]
    fn one_replica_has_the_capacity_a_single_server_queue_predicts() {
        let n = 200;
        let reqs: Vec<ServingRequest> = (0..n)
            .map(|i| ServingRequest {
                id: format!("r{i}"),
                arrival: i as f64,
                prompt: Prompt::Unique(8192),
                output_len: 1,
                priority: 0,
            })
            .collect();
        let s = settings();
        let one = [colocated(1)];
        let t = run(&s, SIXTEEN, &one[0], &reqs, false, None, |_, _| {})
            .unwrap()
            .total
            .latency
            .ttft
            .unwrap();
        assert!(
            (t.p99 - t.p50).abs() < 1e-9 * t.p99,
            "at 1 s apart nothing queues"
        );
        let t = t.p99;
        let limits = SearchLimits::default();
        let c = search(
            &s,
            SIXTEEN,
            &one,
            &reqs,
            &slo(2.0 * t, None),
            &limits,
            &|| {},
        )
        .unwrap();
        let want = 1.0 / (t - t / (0.9 * n as f64 - 1.0));
        let l = &c.layouts[0];
        assert!(
            l.rate_scale <= want && l.failed_scale > want && l.resolved,
            "t {t}, predicted {want}, found {l:?}"
        );
        assert_eq!((c.base_rps, c.spaced), (n as f64 / (n - 1) as f64, false));
        assert_eq!(l.requests_per_s, l.rate_scale * c.base_rps);
        assert_eq!(l.requests_per_s_per_gpu, l.requests_per_s);
    }

    /// On random requests, each layout's answer is a boundary: rerun at the scale found, the
    /// target holds; at the lowest scale above it that the search tried, it fails. And the
    /// answer is the same on one thread as on several.
    #[test]
    fn each_answer_holds_and_the_next_probe_above_fails_on_any_thread_count() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let mut at = 0.0;
        let reqs: Vec<ServingRequest> = (0..60)
            .map(|i| {
                at += rng.random_range(0.0..0.4);
                ServingRequest {
                    id: format!("r{i}"),
                    arrival: at,
                    prompt: Prompt::Unique(rng.random_range(200..4000)),
                    output_len: rng.random_range(2..80),
                    priority: 0,
                }
            })
            .collect();
        let s = settings();
        let specs = [colocated(2), split(1, 1, None)];
        let target = slo(0.2, Some(0.012));
        let limits = SearchLimits::default();
        let go = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| search(&s, SIXTEEN, &specs, &reqs, &target, &limits, &|| {}).unwrap())
        };
        let c = go(2);
        let checked = RunSettings {
            slo: target.slo(),
            ..s.clone()
        };
        for (l, spec) in c.layouts.iter().zip(&specs) {
            assert!(l.resolved, "{}: {l:?}", l.layout);
            let at = |scale: f64| {
                let mut r = reqs.clone();
                scale_rate(&mut r, scale);
                let o = run(&checked, SIXTEEN, spec, &r, false, None, |_, _| {}).unwrap();
                target.sustained(&o.total)
            };
            assert!(at(l.rate_scale), "{}: holds at {}", l.layout, l.rate_scale);
            assert!(
                !at(l.failed_scale),
                "{}: fails at {}",
                l.layout,
                l.failed_scale
            );
            assert!(target.sustained(&l.at.as_ref().unwrap().total));
        }
        let json = |c: &CapacityReport| serde_json::to_string(c).unwrap();
        assert_eq!(json(&go(1)), json(&c));
    }
}
