//! A model as its Hugging Face `config.json` states it: `num_hidden_layers`, `hidden_size`,
//! `intermediate_size`, `num_attention_heads`, `num_key_value_heads` (MHA without it), `head_dim`
//! (else `hidden_size / num_attention_heads`), `vocab_size`, `tie_word_embeddings`,
//! `torch_dtype`, `max_position_embeddings`, and `quantization_config.quant_method` (`fp8`: fp8
//! weights, as vLLM reads it). The layer is modelled as vLLM's Llama-style decoder layer
//! (attention, then a gated MLP); Qwen2's q/k/v biases and Qwen3's q/k norms count in its
//! parameters. What pagedkv does not model is refused in one line: mixture-of-experts layers and
//! sliding-window attention.

use super::{ModelShape, Weights};
use crate::kv::Dtype;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why a config.json cannot be a model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error(
        "unknown model {name:?}: neither a preset ({presets}) nor a config.json file or folder"
    )]
    Unknown { name: String, presets: String },
    #[error("{path}: {detail}")]
    Read { path: String, detail: String },
    #[error("{name}: {detail}")]
    Unsupported { name: String, detail: String },
    #[error("{name}: config.json field {field:?} {detail}")]
    Field {
        name: String,
        field: &'static str,
        detail: String,
    },
}

/// A preset name, or a config.json (a file, or a folder holding one).
pub fn load(name_or_path: &str) -> Result<ModelShape, ModelError> {
    if let Some(m) = super::preset(name_or_path) {
        return Ok(m);
    }
    let path = Path::new(name_or_path);
    if !path.exists() {
        return Err(ModelError::Unknown {
            name: name_or_path.chars().take(80).collect(),
            presets: super::preset_names().join(", "),
        });
    }
    let file: PathBuf = if path.is_dir() {
        path.join("config.json")
    } else {
        path.into()
    };
    let read_err = |detail: String| ModelError::Read {
        path: file.display().to_string(),
        detail,
    };
    let text = std::fs::read_to_string(&file).map_err(|e| read_err(e.to_string()))?;
    let json =
        crate::workload::strict_json::from_str(&text).map_err(|e| read_err(e.to_string()))?;
    parse(&json, &name_for(&file, &json))
}

/// A config's name: its `_name_or_path` when set, else the folder that holds it (or the file's
/// stem when that is not `config`).
fn name_for(file: &Path, json: &Value) -> String {
    if let Some(n) = json.get("_name_or_path").and_then(Value::as_str) {
        if !n.is_empty() {
            return n.to_string();
        }
    }
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    if stem != "config" {
        return stem.to_string();
    }
    file.canonicalize()
        .ok()
        .and_then(|p| p.parent()?.file_name()?.to_str().map(str::to_string))
        .unwrap_or_else(|| "model".into())
}

/// Keys that mark a mixture-of-experts layer (Mixtral, Qwen-MoE, DeepSeek, GPT-OSS, Llama 4).
const EXPERT_KEYS: &[&str] = &[
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
];

/// The model `json` describes, called `name`.
pub fn parse(json: &Value, name: &str) -> Result<ModelShape, ModelError> {
    let unsupported = |detail: String| ModelError::Unsupported {
        name: name.into(),
        detail,
    };
    if !json.is_object() {
        return Err(unsupported("config.json is not a JSON object".into()));
    }
    for key in EXPERT_KEYS {
        if let Some(v) = json.get(*key).filter(|v| !v.is_null()) {
            if v.as_u64() != Some(0) {
                return Err(unsupported(format!(
                    "a mixture-of-experts model ({key} = {v}) is not modelled yet: pagedkv's step times and weights assume dense MLP layers"
                )));
            }
        }
    }
    if let Some(w) = json.get("sliding_window").filter(|v| !v.is_null()) {
        if json.get("use_sliding_window").and_then(Value::as_bool) != Some(false) {
            return Err(unsupported(format!(
                "sliding-window attention (sliding_window = {w}) is not modelled: pagedkv keeps every token's KV"
            )));
        }
    }
    let count = |field: &'static str| -> Result<usize, ModelError> {
        let v = json.get(field).ok_or_else(|| ModelError::Field {
            name: name.into(),
            field,
            detail: "is missing".into(),
        })?;
        match v.as_u64() {
            Some(n) if (1..=1 << 24).contains(&n) => Ok(n as usize),
            _ => Err(ModelError::Field {
                name: name.into(),
                field,
                detail: format!("must be a whole number from 1 to 2^24, got {v}"),
            }),
        }
    };
    let optional = |field: &'static str| -> Result<Option<usize>, ModelError> {
        match json.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => count(field).map(Some),
        }
    };
    let layers = count("num_hidden_layers")?;
    let hidden_size = count("hidden_size")?;
    let intermediate_size = count("intermediate_size")?;
    let num_heads = count("num_attention_heads")?;
    let kv_heads = optional("num_key_value_heads")?.unwrap_or(num_heads);
    let vocab_size = count("vocab_size")?;
    let context_len = count("max_position_embeddings")?;
    let head_dim = match optional("head_dim")? {
        Some(d) => d,
        None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
        None => {
            return Err(unsupported(format!(
                "hidden_size {hidden_size} is not a whole multiple of {num_heads} heads and no head_dim is given"
            )))
        }
    };
    if !num_heads.is_multiple_of(kv_heads) {
        return Err(unsupported(format!(
            "{num_heads} attention heads are not a whole multiple of {kv_heads} KV heads"
        )));
    }
    let architecture = json
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .unwrap_or("LlamaForCausalLM")
        .to_string();
    let flag = |field: &str| json.get(field).and_then(Value::as_bool);
    let quant = json
        .get("quantization_config")
        .and_then(|q| q.get("quant_method"))
        .and_then(Value::as_str);
    let weights = match (quant, json.get("torch_dtype").and_then(Value::as_str)) {
        (Some("fp8"), _) => Weights::Fp8,
        (Some(other), _) => {
            return Err(unsupported(format!(
                "quantization {other:?} is not modelled (fp8 is; bf16 and f16 weights are)"
            )))
        }
        (None, Some("float16")) => Weights::F16,
        _ => Weights::Bf16,
    };
    let mut m = ModelShape {
        name: name.into(),
        layers,
        num_heads,
        kv_heads,
        head_dim,
        dtype: Dtype::F16,
        params_billion: 0.0,
        context_len,
        qkv_bias: architecture == "Qwen2ForCausalLM" || flag("attention_bias") == Some(true),
        qk_norm: architecture == "Qwen3ForCausalLM",
        architecture,
        hidden_size,
        intermediate_size,
        vocab_size,
        tie_word_embeddings: flag("tie_word_embeddings").unwrap_or(false),
        weights,
    };
    m.params_billion = m.counted_params() / 1e9;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn llama() -> Value {
        json!({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
               "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "torch_dtype": "bfloat16"})
    }

    #[test]
    fn a_llama_config_gives_its_shape_and_parameter_count() {
        let m = parse(&llama(), "l").unwrap();
        assert_eq!(
            (m.layers, m.num_heads, m.kv_heads, m.head_dim),
            (32, 32, 8, 128)
        );
        // Llama 3.1 8B: 8,030,261,248 parameters (the model card's 8.03B).
        assert_eq!(m.counted_params(), 8_030_261_248.0);
        assert_eq!(m.weights, Weights::Bf16);
        assert!(!m.tie_word_embeddings && !m.qkv_bias && !m.qk_norm);
    }

    #[test]
    fn what_is_not_modelled_is_refused_in_one_line() {
        let mut moe = llama();
        moe["num_local_experts"] = json!(8);
        let e = parse(&moe, "mixtral").unwrap_err().to_string();
        assert!(e.contains("mixture-of-experts") && !e.contains('\n'), "{e}");
        let mut sw = llama();
        sw["sliding_window"] = json!(4096);
        assert!(parse(&sw, "m")
            .unwrap_err()
            .to_string()
            .contains("sliding-window"));
        sw["use_sliding_window"] = json!(false);
        parse(&sw, "m").unwrap();
        let mut bad = llama();
        bad["num_hidden_layers"] = json!(-3);
        let e = parse(&bad, "b").unwrap_err().to_string();
        assert!(e.contains("num_hidden_layers") && e.contains("-3"), "{e}");
        bad = llama();
        bad.as_object_mut().unwrap().remove("vocab_size");
        assert!(parse(&bad, "b")
            .unwrap_err()
            .to_string()
            .contains("missing"));
        let mut q = llama();
        q["quantization_config"] = json!({"quant_method": "awq"});
        assert!(parse(&q, "q").unwrap_err().to_string().contains("awq"));
        q["quantization_config"] = json!({"quant_method": "fp8"});
        assert_eq!(parse(&q, "q").unwrap().weights, Weights::Fp8);
        assert!(parse(&json!([1]), "x").is_err());
    }

    #[test]
    fn files_folders_and_presets_load() {
        let dir = std::env::temp_dir().join(format!("pagedkv-config-{}", std::process::id()));
        let inner = dir.join("My-Model");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(inner.join("config.json"), llama().to_string()).unwrap();
        assert_eq!(load(inner.to_str().unwrap()).unwrap().name, "My-Model");
        let file = inner.join("config.json");
        assert_eq!(load(file.to_str().unwrap()).unwrap().name, "My-Model");
        std::fs::write(inner.join("config.json"), "{not json").unwrap();
        assert!(matches!(
            load(inner.to_str().unwrap()),
            Err(ModelError::Read { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(load("llama-3.1-8b").unwrap().layers, 32);
        let e = load("no-such-model").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown model \"no-such-model\": neither a preset"),
            "{e}"
        );
    }
}
