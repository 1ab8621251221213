//! An enum value is spelt one way everywhere: its command-line name (clap's `ValueEnum`), which
//! tables and messages print (`Display`), is also its JSON name (serde), for every enum that has
//! both. (`X86PageSize` alone differs on purpose: `4k` on the command line, `4KiB` in JSON.)

use clap::ValueEnum;
use pagedkv::kv::Dtype;
use pagedkv::sim::alloc::Fit;
use pagedkv::sim::cache::Policy as CachePolicy;
use pagedkv::sim::cow::Strategy;
use pagedkv::sim::engine::config::Policy as EnginePolicy;
use pagedkv::sim::radix::EvictionPolicy;
use pagedkv::sim::sched::PolicyKind;
use pagedkv::sim::thrash::Pattern;
use pagedkv::vmm::SleepMode;
use pagedkv::workload::jobs::Class;
use serde::Serialize;
use serde_json::Value;

/// Each value's command-line name and JSON string; checks they agree and returns the names.
fn cli_and_json_agree<E: ValueEnum + Serialize + std::fmt::Debug>() -> Vec<String> {
    E::value_variants()
        .iter()
        .map(|v| {
            let name = v.to_possible_value().expect("named").get_name().to_string();
            assert_eq!(
                serde_json::to_value(v).unwrap(),
                Value::String(name.clone()),
                "{v:?}"
            );
            name
        })
        .collect()
}

/// As [`cli_and_json_agree`], and `Display` prints the same name.
fn all_agree<E: ValueEnum + Serialize + std::fmt::Debug + std::fmt::Display>() -> Vec<String> {
    let names = cli_and_json_agree::<E>();
    let shown: Vec<String> = E::value_variants().iter().map(E::to_string).collect();
    assert_eq!(shown, names);
    names
}

#[test]
fn command_line_display_and_json_names_agree() {
    assert_eq!(
        all_agree::<CachePolicy>(),
        ["fifo", "lru", "lfu", "clock", "arc", "opt", "s3fifo", "sieve"]
    );
    assert_eq!(
        all_agree::<PolicyKind>(),
        [
            "fcfs",
            "sjf",
            "srpt",
            "rr",
            "mlfq",
            "prio",
            "aging",
            "srpt-pred"
        ]
    );
    assert_eq!(
        all_agree::<EnginePolicy>(),
        ["fcfs", "priority", "sjf", "srpt", "aging"]
    );
    assert_eq!(all_agree::<Fit>(), ["first", "best", "worst"]);
    assert_eq!(all_agree::<EvictionPolicy>(), ["lru", "lfu", "fifo"]);
    assert_eq!(
        all_agree::<Strategy>(),
        ["copy-on-write", "copy-every-fork", "copy-extra-forks"]
    );
    assert_eq!(all_agree::<Class>(), ["interactive", "batch"]);
    assert_eq!(cli_and_json_agree::<Pattern>(), ["uniform", "loop"]);
    assert_eq!(cli_and_json_agree::<SleepMode>(), ["offload", "discard"]);
    assert_eq!(
        all_agree::<Dtype>(),
        ["f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2"]
    );
}
