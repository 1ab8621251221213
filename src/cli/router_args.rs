//! The routers' flags, under the names their originals use (SGLang's launcher; Dynamo's
//! frontend), with the defaults those deployments get.

use crate::cli::count;
use crate::cli::count_u64;
use crate::sim::cluster::router::{KvAwareConfig, LoadTies, PrefixAwareConfig};
use crate::sim::cluster::RouterConfig;

#[derive(clap::Args)]
pub struct RouterArgs {
    /// Prefix-aware (SGLang's --cache-threshold): the matched fraction of a prompt above which
    /// the matching replica wins.
    #[arg(long, default_value_t = 0.3)]
    cache_threshold: f64,
    /// Prefix-aware (SGLang's --balance-abs-threshold): loads are imbalanced when max - min
    /// exceeds this ...
    #[arg(long, default_value_t = 64, value_parser = count(0..))]
    balance_abs_threshold: usize,
    /// ... and max exceeds min times this (SGLang's --balance-rel-threshold).
    #[arg(long, default_value_t = 1.5)]
    balance_rel_threshold: f64,
    /// Prefix-aware: characters per replica the router's tree keeps at each eviction (SGLang's
    /// --max-tree-size; read as 4 characters a token).
    #[arg(long, default_value_t = 1 << 26, value_parser = count_u64(0..))]
    max_tree_size: u64,
    /// Prefix-aware: seconds (steps) between the tree's evictions (SGLang's
    /// --eviction-interval-secs).
    #[arg(long, alias = "eviction-interval", default_value_t = 60.0)]
    eviction_interval_secs: f64,
    /// Prefix-aware: which of several equally least-loaded replicas wins: `random` as SGLang's
    /// gateway today (sgl-model-gateway, PR #33138), `first` as `sglang-router` 0.3.2 from
    /// PyPI (`min_by_key`: the first worker given).
    #[arg(long, value_enum, default_value_t = LoadTies::Random)]
    prefix_aware_ties: LoadTies,
    /// Kv-aware (Dynamo's --router-temperature): 0 takes the lowest cost (ties at random); above
    /// 0 samples from the softmax of the normalised costs.
    #[arg(long, default_value_t = 0.0)]
    router_temperature: f64,
    /// Kv-aware (Dynamo's --router-kv-overlap-score-credit): prefill blocks each cached block
    /// saves.
    #[arg(long, default_value_t = 1.0)]
    router_kv_overlap_score_credit: f64,
    /// Kv-aware (Dynamo's --router-prefill-load-scale): the weight of the prefill term.
    #[arg(long, default_value_t = 1.0)]
    router_prefill_load_scale: f64,
    /// Kv-aware (Dynamo's --router-host-cache-hit-weight): the credit of a block the host tier
    /// holds (with a tier).
    #[arg(long, default_value_t = 0.75)]
    router_host_cache_hit_weight: f64,
}

impl RouterArgs {
    /// The routers' settings; `seed` seeds their random tie breaks.
    pub fn config(&self, seed: u64) -> Result<RouterConfig, String> {
        if !(0.0..=1.0).contains(&self.cache_threshold) {
            return Err(format!(
                "--cache-threshold must be in [0, 1], got {}",
                self.cache_threshold
            ));
        }
        for (name, v) in [
            ("balance-rel-threshold", self.balance_rel_threshold),
            ("router-temperature", self.router_temperature),
            (
                "router-kv-overlap-score-credit",
                self.router_kv_overlap_score_credit,
            ),
            ("router-prefill-load-scale", self.router_prefill_load_scale),
            (
                "router-host-cache-hit-weight",
                self.router_host_cache_hit_weight,
            ),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("--{name} must be a finite number >= 0, got {v}"));
            }
        }
        if !(self.eviction_interval_secs.is_finite() && self.eviction_interval_secs > 0.0) {
            return Err(format!(
                "--eviction-interval-secs must be > 0, got {}",
                self.eviction_interval_secs
            ));
        }
        Ok(RouterConfig {
            prefix_aware: PrefixAwareConfig {
                cache_threshold: self.cache_threshold,
                balance_abs_threshold: self.balance_abs_threshold,
                balance_rel_threshold: self.balance_rel_threshold,
                eviction_interval: self.eviction_interval_secs,
                max_tree_size: self.max_tree_size,
                ties: self.prefix_aware_ties,
            },
            kv_aware: KvAwareConfig {
                overlap_score_credit: self.router_kv_overlap_score_credit,
                prefill_load_scale: self.router_prefill_load_scale,
                host_cache_hit_weight: self.router_host_cache_hit_weight,
                temperature: self.router_temperature,
            },
            seed,
        })
    }
}
