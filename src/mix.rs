//! SplitMix64's finaliser: every input bit reaches every output bit. The one mixing step behind
//! the engine's block hashes and the token ids synthesised for Mooncake's traces.

pub fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
