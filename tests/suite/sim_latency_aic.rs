//! The measured step-time model on the shipped tables against AIConfigurator's own estimates
//! (tests/data/aic/estimates.json, recorded by scripts/record-aiconfigurator-golden from
//! AIConfigurator 0.12.0's engine, which `aiconfigurator cli estimate --estimate-mode static`
//! prints): every case's step, built as the engine schedules it, timed by pagedkv.
//!
//! Cases at the tables' own batch and length points test the composition of ops (the sum over a
//! layer's ops × layers, the LM head, the all-reduces, prefix caching's share of prefill
//! attention); cases between them add pagedkv's interpolation of AIConfigurator's values.

use pagedkv::hw::gpu;
use pagedkv::kv::model::{preset, ModelShape, Weights};
use pagedkv::kv::Dtype;
use pagedkv::sim::latency::{shipped, BatchShape, Measured, StepLatency};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    cases: Vec<Case>,
}

#[derive(Deserialize, Debug)]
struct Case {
    gpu: String,
    model: String,
    tp: usize,
    weights: String,
    kv: String,
    phase: String,
    batch: u32,
    new_tokens: u32,
    context: u32,
    ms: f64,
    grid: bool,
    #[serde(default)]
    cli: bool,
}

fn golden() -> Vec<Case> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/aic/estimates.json");
    let g: Golden = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    g.cases
}

fn model(c: &Case) -> ModelShape {
    let mut m = preset(&c.model).unwrap();
    m.weights = if c.weights == "fp8" {
        Weights::Fp8
    } else {
        Weights::Bf16
    };
    m.dtype = if c.kv == "fp8" {
        Dtype::Fp8E4m3
    } else {
        Dtype::Bf16
    };
    m
}

/// pagedkv's time for a case, milliseconds.
fn pagedkv_ms(c: &Case) -> f64 {
    let profile = shipped(gpu(&c.gpu).unwrap().name).unwrap();
    let m = Measured::new(&profile, &model(c), c.tp).unwrap();
    let batch = BatchShape::of((0..c.batch).map(|_| (c.new_tokens, c.context)));
    let (compute, comm) =
        pagedkv::sim::latency::Latency::Measured(std::sync::Arc::new(m)).forward(&batch);
    (compute + comm) * 1e3
}

struct Errors(Vec<(f64, String)>);

impl Errors {
    fn of<'a>(cases: impl Iterator<Item = &'a Case>) -> Errors {
        let mut v: Vec<(f64, String)> = cases
            .map(|c| {
                let got = pagedkv_ms(c);
                (
                    (got - c.ms).abs() / c.ms,
                    format!("{c:?}: pagedkv {got:.4} ms"),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        Errors(v)
    }

    fn quantile(&self, q: f64) -> f64 {
        self.0[((self.0.len() - 1) as f64 * q).round() as usize].0
    }

    fn worst(&self) -> &(f64, String) {
        self.0.last().unwrap()
    }
}

#[test]
fn on_the_tables_points_every_step_is_within_5_percent_of_aiconfigurator() {
    let cases = golden();
    for phase in ["decode", "prefill"] {
        let e = Errors::of(cases.iter().filter(|c| c.grid && c.phase == phase));
        eprintln!(
            "{phase}: {} cases, median error {:.2}%, p95 {:.2}%, worst {:.2}% ({})",
            e.0.len(),
            100.0 * e.quantile(0.5),
            100.0 * e.quantile(0.95),
            100.0 * e.worst().0,
            e.worst().1
        );
        assert!(e.0.len() > 500, "{phase}: {} cases", e.0.len());
        assert!(e.worst().0 <= 0.05, "{phase}: {}", e.worst().1);
        assert!(
            e.quantile(0.5) <= 0.01,
            "{phase}: median {}",
            e.quantile(0.5)
        );
    }
}

#[test]
fn between_the_tables_points_the_interpolation_stays_close() {
    let cases = golden();
    let e = Errors::of(cases.iter().filter(|c| !c.grid));
    eprintln!(
        "between points: {} cases, median error {:.2}%, p95 {:.2}%, worst {:.2}% ({})",
        e.0.len(),
        100.0 * e.quantile(0.5),
        100.0 * e.quantile(0.95),
        100.0 * e.worst().0,
        e.worst().1
    );
    assert!(e.0.len() > 100);
    assert!(
        e.quantile(0.5) <= 0.02 && e.worst().0 <= 0.05,
        "{}",
        e.worst().1
    );
}

#[test]
fn the_issues_own_cases_and_the_cli_checked_ones_are_in_the_golden() {
    let cases = golden();
    // Llama-3.1-8B bf16 TP 1 on an H200: the figures issue 42 quotes from `cli estimate`.
    for (phase, batch, new, ctx, aic) in [
        ("decode", 1, 1, 2048, 4.91),
        ("decode", 16, 1, 2048, 6.33),
        ("decode", 64, 1, 2048, 9.47),
        ("decode", 256, 1, 2048, 23.55),
        ("prefill", 1, 512, 0, 11.48),
        ("prefill", 1, 2048, 0, 43.40),
        ("prefill", 1, 8192, 0, 198.87),
    ] {
        let c = cases
            .iter()
            .find(|c| {
                c.gpu == "h200"
                    && c.model == "llama-3.1-8b"
                    && c.tp == 1
                    && c.weights == "bf16"
                    && c.kv == "bf16"
                    && c.phase == phase
                    && c.batch == batch
                    && c.new_tokens == new
                    && c.context == ctx
            })
            .unwrap();
        assert!((c.ms - aic).abs() < 0.006, "{c:?} vs the issue's {aic}");
        let got = pagedkv_ms(c);
        assert!((got - c.ms).abs() / c.ms <= 0.05, "{c:?}: {got}");
    }
    assert!(cases.iter().filter(|c| c.cli).count() >= 5);
}
