//! The recommendation: one rule over one figure per block size, each with its noise band.
//!
//! The figure is the SLO capacity ([`crate::sim::goodput`]) when the end-to-end runs were made, else
//! the throughput proxy ([`super::proxy`]); higher is better. Each has a band from the measured
//! attention efficiency's noise: the figure at efficiency × (1 − noise) and × (1 + noise). The rule
//! ([`pick`], in words [`rule`]): vLLM's 16, unless some block size's low end beats 16's high end
//! by more than the resolution (what the figure cannot tell apart even without noise); then, of
//! those, the one with the highest nominal figure (ties to the larger block: shorter tables). A
//! block size measured badly can then neither win nor lose on its luck, and 16 stays unless the
//! evidence against it survives the noise.

use crate::kv::BlockSize;
use serde::Serialize;

/// One block size's figure with its noise band (`low ≤ nominal ≤ high` in the usual case).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Banded {
    pub block_size: BlockSize,
    pub nominal: f64,
    pub low: f64,
    pub high: f64,
}

/// What [`pick`] concluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pick {
    pub block_size: BlockSize,
    /// Whether the pick beats vLLM's 16 beyond the noise (else it is 16).
    pub beats_default: bool,
    /// Block sizes neither beating 16 nor beaten by it beyond the noise.
    pub tied_with_default: Vec<BlockSize>,
}

/// Whether `a` beats `b` beyond the noise: `a`'s low end above `b`'s high end by more than
/// `resolution` (relative).
pub fn beats(a: &Banded, b: &Banded, resolution: f64) -> bool {
    a.low > b.high * (1.0 + resolution)
}

/// The rule (see the module docs) among `figures`, against `default` (vLLM's 16); `None` without a
/// row for `default`.
pub fn pick(figures: &[Banded], default: BlockSize, resolution: f64) -> Option<Pick> {
    let def = figures.iter().find(|f| f.block_size == default)?;
    let winner = figures
        .iter()
        .filter(|f| beats(f, def, resolution))
        .max_by(|a, b| {
            a.nominal
                .total_cmp(&b.nominal)
                .then(a.block_size.cmp(&b.block_size))
        });
    Some(Pick {
        block_size: winner.map_or(default, |w| w.block_size),
        beats_default: winner.is_some(),
        tied_with_default: figures
            .iter()
            .filter(|f| {
                f.block_size != default && !beats(f, def, resolution) && !beats(def, f, resolution)
            })
            .map(|f| f.block_size)
            .collect(),
    })
}

/// The rule in words, for `figure` (e.g. "SLO capacity") at `resolution`: the footnote the text
/// report and the HTML report print, the one [`pick`] follows.
pub fn rule(figure: &str, resolution: f64) -> String {
    format!(
        "rule: vLLM's 16 unless another block size's {figure} at the low end of its noise band \
         (efficiency × (1 − noise)) beats 16's at the high end of 16's band by more than {:.0}%; \
         then, of those, the highest nominal {figure} (ties: the larger block)",
        100.0 * resolution
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIXTEEN: BlockSize = BlockSize::of(16);

    fn b(block_size: u32, nominal: f64, low: f64, high: f64) -> Banded {
        Banded {
            block_size: BlockSize::of(block_size),
            nominal,
            low,
            high,
        }
    }

    #[test]
    fn only_a_lead_that_survives_the_band_moves_the_pick_off_16() {
        // 64 is nominally ahead, but its low end (98) is under 16's high end (105).
        let rows = [
            b(16, 100.0, 95.0, 105.0),
            b(64, 103.0, 98.0, 108.0),
            b(1, 60.0, 55.0, 65.0),
        ];
        let p = pick(&rows, SIXTEEN, 0.02).unwrap();
        assert_eq!((p.block_size.get(), p.beats_default), (16, false));
        assert_eq!(p.tied_with_default, vec![BlockSize::of(64)]);
        // 32 and 64 both clear 16's high end by more than 2%: the higher nominal wins; at equal
        // nominal the larger block does.
        let rows = [
            b(16, 100.0, 99.0, 101.0),
            b(32, 110.0, 104.0, 112.0),
            b(64, 108.0, 106.0, 109.0),
            b(128, 110.0, 103.5, 111.0),
        ];
        let p = pick(&rows, SIXTEEN, 0.02).unwrap();
        assert_eq!((p.block_size.get(), p.beats_default), (128, true));
        assert!(p.tied_with_default.is_empty());
        // 3% resolution: only 64's low end (106) clears 101 × 1.03 = 104.03; at 5%, none does.
        assert_eq!(pick(&rows, SIXTEEN, 0.03).unwrap().block_size.get(), 64);
        let p = pick(&rows, SIXTEEN, 0.05).unwrap();
        assert_eq!((p.block_size.get(), p.beats_default), (16, false));
        assert_eq!(p.tied_with_default, [32, 64, 128].map(BlockSize::of));
        assert!(pick(&rows[1..], SIXTEEN, 0.02).is_none());
    }

    #[test]
    fn the_rule_in_words_names_the_figure_and_the_resolution() {
        let r = rule("SLO capacity", 0.02);
        assert!(r.starts_with("rule: vLLM's 16 unless") && r.contains("SLO capacity"));
        assert!(r.contains("by more than 2%"), "{r}");
    }
}
