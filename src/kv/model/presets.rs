//! The model presets: Hugging Face `config.json` files shipped in `data/models/` (each holds the
//! fields pagedkv reads, copied from the model's own config.json on the Hub; sources in
//! `data/models/README.md`), embedded in the binary.

use super::{config_json, ModelShape};

/// (name, config.json text).
const PRESETS: &[(&str, &str)] = &[
    (
        "llama-3-8b",
        include_str!("../../../data/models/llama-3-8b.json"),
    ),
    (
        "llama-3-70b",
        include_str!("../../../data/models/llama-3-70b.json"),
    ),
    (
        "llama-3.1-8b",
        include_str!("../../../data/models/llama-3.1-8b.json"),
    ),
    (
        "llama-3.1-70b",
        include_str!("../../../data/models/llama-3.1-70b.json"),
    ),
    (
        "llama-2-7b",
        include_str!("../../../data/models/llama-2-7b.json"),
    ),
    (
        "mistral-7b",
        include_str!("../../../data/models/mistral-7b.json"),
    ),
    (
        "qwen2.5-7b",
        include_str!("../../../data/models/qwen2.5-7b.json"),
    ),
    (
        "qwen2.5-7b-1m",
        include_str!("../../../data/models/qwen2.5-7b-1m.json"),
    ),
    (
        "qwen2-72b",
        include_str!("../../../data/models/qwen2-72b.json"),
    ),
    (
        "qwen3-32b",
        include_str!("../../../data/models/qwen3-32b.json"),
    ),
];

/// The preset names, for help texts and errors.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
}

/// The preset called `name` (case-insensitive), KV in f16.
pub fn preset(name: &str) -> Option<ModelShape> {
    let name = name.to_ascii_lowercase();
    let (name, text) = PRESETS.iter().find(|p| p.0 == name)?;
    let json = serde_json::from_str(text).expect("a shipped config is JSON");
    Some(config_json::parse(&json, name).expect("a shipped config is a model"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters the model cards state, in billions, to three digits.
    #[test]
    fn every_preset_loads_and_counts_its_model_cards_parameters() {
        let cards = [
            ("llama-3-8b", 8.03),
            ("llama-3-70b", 70.6),
            ("llama-3.1-8b", 8.03),
            ("llama-3.1-70b", 70.6),
            ("llama-2-7b", 6.74),
            ("mistral-7b", 7.24),
            ("qwen2.5-7b", 7.61),
            ("qwen2.5-7b-1m", 7.61),
            ("qwen2-72b", 72.7),
            ("qwen3-32b", 32.8),
        ];
        assert_eq!(cards.len(), PRESETS.len());
        for (name, billions) in cards {
            let m = preset(name).unwrap();
            let got = m.params_billion;
            assert!(
                (got - billions).abs() / billions < 0.0015,
                "{name}: {got} vs {billions}"
            );
        }
        let q = preset("qwen3-32b").unwrap();
        assert_eq!((q.head_dim, q.hidden_size / q.num_heads), (128, 80));
        assert!(q.qk_norm && preset("qwen2.5-7b").unwrap().qkv_bias);
        assert_eq!(preset("LLAMA-3.1-8B").unwrap().name, "llama-3.1-8b");
    }
}
