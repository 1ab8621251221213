//! The CPU probes' host memory, fitted before anything is mapped to what this host has available.
//! Their buffers ([`super::cpu_probe::host_bytes`]) follow the pool; a default pool (no
//! `--probe-mib`) is halved until they take at most half of the memory available (attention's
//! problems and the engine runs need the rest), and the report says so. A pool the user gave,
//! or one that cannot shrink enough, is refused in one line when it exceeds all that is available.

use super::bandwidth::{check_pool_size, ProbeOptions};
use super::SweepError;
use crate::host_memory::{bytes, ensure_within};

/// Fits `opts.pool_bytes` for tokens of `token_bytes` to `available` bytes (see the module), with
/// `host_bytes` the probes' buffers for a set of options; `given`: the user chose the pool. The
/// note says what was halved, when it was.
pub fn fit(
    opts: &mut ProbeOptions,
    given: bool,
    token_bytes: usize,
    available: Option<u64>,
    host_bytes: impl Fn(&ProbeOptions) -> u64,
) -> Result<Option<String>, SweepError> {
    let chosen = opts.pool_bytes;
    if let (false, Some(available)) = (given, available) {
        while host_bytes(opts) > available / 2 {
            let half = opts.pool_bytes / 2;
            if check_pool_size(half, token_bytes).is_err() || !half.is_multiple_of(1 << 20) {
                break;
            }
            opts.pool_bytes = half;
        }
    }
    let what = format!(
        "the CPU bandwidth probe of {}",
        bytes(opts.pool_bytes as u64)
    );
    ensure_within(host_bytes(opts), &what, available)
        .map_err(|e| SweepError::Invalid(e.to_string()))?;
    Ok((opts.pool_bytes != chosen).then(|| {
        format!(
            "probe pool {} instead of the default {}: the CPU probes' buffers ({}) kept within \
             half of the {} of memory available",
            bytes(opts.pool_bytes as u64),
            bytes(chosen as u64),
            bytes(host_bytes(opts)),
            bytes(available.unwrap_or(0))
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn opts(pool_mib: usize) -> ProbeOptions {
        ProbeOptions {
            pool_bytes: pool_mib * MIB,
            reps: 1,
            rounds: 1,
            seq_tokens: 256,
            seed: 1,
            attention: None,
            answer_only: false,
        }
    }

    /// Two probes' K, V and copy-out buffers (three halves of the pool each) and a limits'
    /// buffer of at least 64 MiB, as `cpu_probe::host_bytes` counts them with a 16 MiB cache.
    fn two_probes(o: &ProbeOptions) -> u64 {
        (2 * 3 * (o.pool_bytes / 2) + o.pool_bytes.max(64 * MIB)) as u64
    }

    /// Llama-3-8B's token, 2 KiB in each pool: a block of 256 tokens needs 512 KiB.
    const TOKEN: usize = 2048;

    #[test]
    fn a_default_pool_halves_to_fit_half_the_memory_available() {
        // 128 MiB: 384 + 128 MiB. With 800 MiB available (budget 400): 64 MiB, 192 + 64 = 256.
        let mut o = opts(128);
        let note = fit(&mut o, false, TOKEN, Some(800 * MIB as u64), two_probes).unwrap();
        assert_eq!(o.pool_bytes, 64 * MIB);
        let note = note.unwrap();
        assert!(
            note.contains("probe pool 64 MiB instead of the default 128 MiB")
                && note.contains("(256 MiB)")
                && note.contains("800 MiB of memory available"),
            "{note}"
        );
        // Enough memory: unchanged, no note; unknown availability: unchanged.
        let mut o = opts(128);
        assert_eq!(
            fit(&mut o, false, TOKEN, Some(1 << 40), two_probes).unwrap(),
            None
        );
        assert_eq!(fit(&mut o, false, TOKEN, None, two_probes).unwrap(), None);
        assert_eq!(o.pool_bytes, 128 * MIB);
    }

    #[test]
    fn a_given_pool_or_one_that_cannot_shrink_enough_is_refused() {
        // Given: never halved; refused only beyond all that is available (512 MiB here).
        let mut o = opts(128);
        assert_eq!(
            fit(&mut o, true, TOKEN, Some(600 * MIB as u64), two_probes).unwrap(),
            None
        );
        assert_eq!(o.pool_bytes, 128 * MIB);
        let e = fit(&mut o, true, TOKEN, Some(400 * MIB as u64), two_probes).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the CPU bandwidth probe of 128 MiB needs 512 MiB of memory, more than the 400 MiB \
             available"
        );
        // The limits' buffer alone (64 MiB) exceeds 60 MiB: halved down to the smallest pool
        // that holds a block of the largest size (1 MiB: two pools of 512 KiB), then refused.
        let mut o = opts(128);
        let e = fit(&mut o, false, TOKEN, Some(60 * MIB as u64), two_probes).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the CPU bandwidth probe of 1 MiB needs"),
            "{e}"
        );
        // A pool of an odd MiB count stops halving at a whole MiB.
        let mut o = opts(3);
        let note = fit(&mut o, false, TOKEN, Some(130 * MIB as u64), two_probes).unwrap();
        assert_eq!(o.pool_bytes, 3 * MIB);
        assert_eq!(note, None);
    }
}
