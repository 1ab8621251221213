//! A request's figures as vLLM 0.33.0's frontend keeps them for its metrics
//! (`vllm/v1/metrics/stats.py`: `RequestStateStats`, `IterationStats.update_from_output` and
//! `update_from_finished_request`; vllm 0.33.0 wheel, commit 4ba787ec9), in the engine's
//! simulated seconds: the request is queued when the engine receives it (its arrival here),
//! scheduled when a step first admits it (the step's start; a preempted request's later
//! admissions do not count), and its tokens land when their step ends.

/// What is known of a request still running (vLLM's `RequestStateStats`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestTimes {
    /// Received, and queued (`arrival_time` and `queued_ts` are one moment here).
    pub arrival: f64,
    /// First admitted by the scheduler (`scheduled_ts`).
    pub scheduled: Option<f64>,
    /// Its first token (`first_token_ts`) and latest token (`last_token_ts`).
    pub first_token: Option<f64>,
    pub last_token: f64,
    /// Tokens generated so far (`num_generation_tokens`).
    pub generated: u32,
}

impl RequestTimes {
    pub fn new(arrival: f64) -> RequestTimes {
        RequestTimes {
            arrival,
            scheduled: None,
            first_token: None,
            last_token: arrival,
            generated: 0,
        }
    }

    /// A step starting at `t` admitted it (the first time counts: vLLM ignores the
    /// re-admissions of a preempted request).
    pub fn admitted(&mut self, t: f64) {
        self.scheduled.get_or_insert(t);
    }

    /// A step ending at `t` brought `new` tokens (> 0). The first brings its time to first
    /// token; a later one an inter-token latency (the time since the last output, whatever
    /// the number of tokens it brings).
    pub fn tokens(&mut self, t: f64, new: u32) -> TokenTiming {
        debug_assert!(new > 0);
        let timing = match self.first_token {
            None => {
                self.first_token = Some(t);
                TokenTiming::First(t - self.arrival)
            }
            Some(_) => TokenTiming::Gap(t - self.last_token),
        };
        self.last_token = t;
        self.generated += new;
        timing
    }
}

/// What a step's output means for a request's latency histograms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenTiming {
    /// Time to first token.
    First(f64),
    /// Inter-token latency.
    Gap(f64),
}

/// A finished request (vLLM's `FinishedRequestStats`), its phases worked out as
/// `update_from_finished_request` does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinishedRequest {
    pub e2e: f64,
    /// Queued until first scheduled.
    pub queued: f64,
    /// First scheduled until the first token (preemptions in between included).
    pub prefill: f64,
    /// First token until the last.
    pub decode: f64,
    /// First scheduled until the last token.
    pub inference: f64,
    /// `decode / (generated − 1)`; 0 for a single token.
    pub mean_time_per_output_token: f64,
    pub prompt_tokens: u32,
    pub generation_tokens: u32,
    pub preemptions: u32,
    /// The `max_tokens` the engine was given.
    pub max_tokens: u32,
    /// Prompt tokens found cached at the first admission (local and external).
    pub cached_tokens: u32,
}

impl FinishedRequest {
    /// `t`: the request's times, its last token being its end.
    pub fn new(
        t: &RequestTimes,
        prompt_tokens: u32,
        cached_tokens: u32,
        preemptions: u32,
        max_tokens: u32,
    ) -> FinishedRequest {
        // A finished request was scheduled and has its first token; were it not (never), the
        // phases would read 0 as vLLM's zeroed timestamps make them.
        let scheduled = t.scheduled.unwrap_or(t.arrival);
        let first = t.first_token.unwrap_or(scheduled);
        let decode = t.last_token - first;
        FinishedRequest {
            e2e: t.last_token - t.arrival,
            queued: scheduled - t.arrival,
            prefill: first - scheduled,
            decode,
            inference: t.last_token - scheduled,
            mean_time_per_output_token: if t.generated > 1 {
                decode / f64::from(t.generated - 1)
            } else {
                0.0
            },
            prompt_tokens,
            generation_tokens: t.generated,
            preemptions,
            max_tokens,
            cached_tokens,
        }
    }

    /// New KV computed in prefill: the prompt less its cached tokens
    /// (`vllm:request_prefill_kv_computed_tokens`).
    pub fn prefill_kv_computed(&self) -> u32 {
        self.prompt_tokens - self.cached_tokens.min(self.prompt_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_vllms_timestamps_worked_by_hand() {
        // Arrives at 1.0, waits, admitted by the step at 1.5, preempted and re-admitted at
        // 1.9 (ignored), first token at 2.0, then tokens at 2.25 (one) and 3.0 (two at once).
        let mut t = RequestTimes::new(1.0);
        t.admitted(1.5);
        t.admitted(1.9);
        assert_eq!(t.tokens(2.0, 1), TokenTiming::First(1.0));
        assert_eq!(t.tokens(2.25, 1), TokenTiming::Gap(0.25));
        assert_eq!(t.tokens(3.0, 2), TokenTiming::Gap(0.75));
        let f = FinishedRequest::new(&t, 100, 32, 1, 4);
        assert_eq!(
            f,
            FinishedRequest {
                e2e: 2.0,
                queued: 0.5,
                prefill: 0.5,
                decode: 1.0,
                inference: 1.5,
                // 1.0 s over the 3 tokens after the first.
                mean_time_per_output_token: 1.0 / 3.0,
                prompt_tokens: 100,
                generation_tokens: 4,
                preemptions: 1,
                max_tokens: 4,
                cached_tokens: 32,
            }
        );
        assert_eq!(f.prefill_kv_computed(), 68);
        assert_eq!(f.queued + f.prefill + f.decode, f.e2e);
    }

    #[test]
    fn one_token_has_no_time_per_output_token() {
        let mut t = RequestTimes::new(0.0);
        t.admitted(0.0);
        t.tokens(0.02, 1);
        let f = FinishedRequest::new(&t, 8, 8, 0, 1);
        assert_eq!((f.decode, f.mean_time_per_output_token), (0.0, 0.0));
        assert_eq!((f.prefill, f.e2e), (0.02, 0.02));
        assert_eq!(f.prefill_kv_computed(), 0);
    }
}
