//! The step log: one JSON object per line per step, in the format agreed with the golden
//! recordings of vLLM's scheduler (`tests/data/engine/`):
//!
//! ```json
//! {"step": 0, "time": 0, "scheduled": {"r0": 16, "r1": 4}, "preempted": ["r2"], "finished": ["r1"],
//!  "free_blocks": 11, "prefix_hit_tokens": {"r1": 8}}
//! ```
//!
//! `scheduled` in scheduling order (running requests first, then admitted ones); `preempted` in the
//! order of this step's schedule; `finished` in this step's output processing; `free_blocks` after
//! it (cached but unreferenced blocks count as free, the null block does not); `prefix_hit_tokens`
//! for every request admitted from the waiting queue in this step, 0 included (the tokens it had
//! computed before this step: with a native host tier, those it loaded too). With a native host
//! tier, when not empty: `kv_load_tokens`, the requests that start loading from the tier in this
//! step and the tokens they load; `kv_store_chunks`, the chunks each request's store took.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON object whose key order matters (request id -> count).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ordered(pub Vec<(String, u32)>);

impl Ordered {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of request id -> token count")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry::<String, u32>()? {
                    v.push(e);
                }
                Ok(Ordered(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// Writes whole numbers without a fraction (steps are integers under a step clock).
fn time<S: Serializer>(t: &f64, s: S) -> Result<S::Ok, S::Error> {
    if t.fract() == 0.0 && t.abs() < 9e15 {
        s.serialize_i64(*t as i64)
    } else {
        s.serialize_f64(*t)
    }
}

/// One step; parsing ignores fields beyond these (a recording may carry more).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    #[serde(serialize_with = "time")]
    pub time: f64,
    pub scheduled: Ordered,
    pub preempted: Vec<String>,
    pub finished: Vec<String>,
    pub free_blocks: usize,
    pub prefix_hit_tokens: Ordered,
    /// Native host tier: the requests admitted to load from it in this step, with the tokens they
    /// load (vLLM's external hit), and the chunks each request's store took in this step.
    #[serde(default, skip_serializing_if = "Ordered::is_empty")]
    pub kv_load_tokens: Ordered,
    #[serde(default, skip_serializing_if = "Ordered::is_empty")]
    pub kv_store_chunks: Ordered,
}

impl StepRecord {
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a step record serialises")
    }

    pub fn parse_line(line: &str) -> Result<StepRecord, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// A step in which nothing happened: nothing scheduled, preempted, finished, hit, loaded or
    /// stored.
    pub fn is_idle(&self) -> bool {
        self.scheduled.is_empty()
            && self.preempted.is_empty()
            && self.finished.is_empty()
            && self.prefix_hit_tokens.is_empty()
            && self.kv_load_tokens.is_empty()
            && self.kv_store_chunks.is_empty()
    }
}

/// A log of every step (vLLM's) as the simulator logs it under a step clock: of each spell of
/// idle steps, only the first and the last (`Engine::skip_idle_steps_to`).
pub fn without_idle_interiors(log: Vec<StepRecord>) -> Vec<StepRecord> {
    let idle = |i: usize| log.get(i).is_some_and(StepRecord::is_idle);
    let keep: Vec<bool> = (0..log.len())
        .map(|i| !(i > 0 && idle(i - 1) && idle(i) && idle(i + 1)))
        .collect();
    log.into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_spell_keeps_its_first_and_last_steps() {
        let rec = |step: u64, busy: bool| StepRecord {
            step,
            time: step as f64,
            scheduled: Ordered(if busy { vec![("a".into(), 1)] } else { vec![] }),
            ..Default::default()
        };
        let busy = [
            true, false, false, false, false, true, false, false, true, false,
        ];
        let log: Vec<StepRecord> = (0..busy.len()).map(|i| rec(i as u64, busy[i])).collect();
        let steps: Vec<u64> = without_idle_interiors(log).iter().map(|r| r.step).collect();
        // 1..=4 keep 1 and 4; 6, 7 are a spell of two; the last idle step ends the log.
        assert_eq!(steps, [0, 1, 4, 5, 6, 7, 8, 9]);
    }

    #[test]
    fn round_trips_in_order_with_integer_times() {
        let r = StepRecord {
            step: 3,
            time: 3.0,
            scheduled: Ordered(vec![
                ("r9".into(), 1),
                ("r10".into(), 16),
                ("a\"b".into(), 2),
            ]),
            preempted: vec!["r2".into()],
            finished: vec![],
            free_blocks: 11,
            prefix_hit_tokens: Ordered(vec![("r10".into(), 8)]),
            ..Default::default()
        };
        let line = r.to_line();
        assert!(
            line.starts_with(r#"{"step":3,"time":3,"scheduled":{"r9":1,"r10":16,"a\"b":2}"#),
            "{line}"
        );
        assert_eq!(StepRecord::parse_line(&line).unwrap(), r);
        let golden = r#"{"step": 0, "time": 0.5, "scheduled": {"b": 2, "a": 1}, "preempted": [],
            "finished": ["a"], "free_blocks": 3, "prefix_hit_tokens": {}}"#;
        let g = StepRecord::parse_line(golden).unwrap();
        assert_eq!(g.scheduled.0[0].0, "b");
        assert_eq!(g.time, 0.5);
        assert!(StepRecord::parse_line(r#"{"step": 0}"#).is_err());
    }
}
