//! The sampler on arbitrary logits (NaN, ±inf, subnormals, huge, GPT-2-sized) and arbitrary
//! parameters, at several capacities `K`.
//!
//! Checked besides "no panic": invalid parameters are refused by `Sampler::new` with the
//! parameter named; a drawn id is in range and its logit is neither NaN nor `-inf`; greedy and
//! top-k 1 give the argmax; `BadSamplerParam { Logits }` only when no logit can be drawn; the
//! same seed gives the same token.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use runtime::error::SamplerParam;
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::Error;

#[derive(Arbitrary, Debug)]
struct Input {
    temperature: f32,
    top_k: u8,
    top_p: f32,
    repetition_penalty: f32,
    seed: u64,
    /// false: parameters are folded into their valid ranges so sampling runs; true: used raw.
    raw_params: bool,
    /// Which capacity K to use.
    capacity: u8,
    logits: Vec<f32>,
    /// When non-zero, the logits are tiled (with an index-dependent offset) up to this many
    /// times 16 entries, reaching GPT-2's 50257 and the histogram path of top-p.
    tile_to: u16,
    /// (index, kind) overrides with special values.
    specials: Vec<(u16, u8)>,
    recent: Vec<u16>,
    draws: u8,
}

const SPECIAL: [f32; 9] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1e-45, -1e-45];

fn fold(x: f32, lo: f32, hi: f32) -> f32 {
    if x.is_finite() && x > lo && x <= hi {
        x
    } else {
        lo + (hi - lo) * ((x.to_bits() % 1000 + 1) as f32 / 1000.0)
    }
}

fuzz_target!(|input: Input| {
    let mut logits = input.logits.clone();
    if input.tile_to > 0 && !logits.is_empty() {
        let n = (usize::from(input.tile_to) * 16).min(60_000);
        let base = logits.clone();
        logits = (0..n).map(|i| base[i % base.len()] - (i / base.len()) as f32 * 0.01).collect();
    }
    for &(i, kind) in &input.specials {
        if let Some(l) = logits.get_mut(usize::from(i)) {
            *l = SPECIAL[usize::from(kind) % SPECIAL.len()];
        }
    }
    let cfg = if input.raw_params {
        SamplerConfig {
            temperature: input.temperature,
            top_k: usize::from(input.top_k),
            top_p: input.top_p,
            repetition_penalty: input.repetition_penalty,
            seed: input.seed,
            ..SamplerConfig::greedy()
        }
    } else {
        let t = input.temperature;
        SamplerConfig {
            // keep 0 (greedy), subnormal and huge temperatures reachable
            temperature: if t == 0.0 || (t.is_finite() && t > 0.0) { t } else { fold(t, 0.0, 4.0) },
            top_k: usize::from(input.top_k) % 70,
            top_p: fold(input.top_p, 0.0, 1.0),
            repetition_penalty: fold(input.repetition_penalty, 0.0, 3.0),
            seed: input.seed,
            ..SamplerConfig::greedy()
        }
    };
    let recent: Vec<u32> = input.recent.iter().map(|&id| u32::from(id)).collect();
    let draws = 1 + usize::from(input.draws % 4);
    match input.capacity % 4 {
        0 => run::<0>(cfg, &logits, &recent, draws),
        1 => run::<1>(cfg, &logits, &recent, draws),
        2 => run::<3>(cfg, &logits, &recent, draws),
        _ => run::<64>(cfg, &logits, &recent, draws),
    }
});

fn run<const K: usize>(cfg: SamplerConfig, logits: &[f32], recent: &[u32], draws: usize) {
    let mut s = match Sampler::<K>::new(cfg) {
        Ok(s) => s,
        Err(Error::BadSamplerParam { what }) => {
            let valid = match what {
                SamplerParam::Temperature => cfg.temperature >= 0.0 && cfg.temperature.is_finite(),
                SamplerParam::TopK => cfg.top_k <= K,
                SamplerParam::TopP => cfg.top_p > 0.0 && cfg.top_p <= 1.0,
                SamplerParam::RepetitionPenalty => cfg.repetition_penalty > 0.0 && cfg.repetition_penalty.is_finite(),
                SamplerParam::Logits => false,
            };
            assert!(!valid, "{what:?} refused but valid in {cfg:?}");
            return;
        }
        Err(e) => panic!("unexpected error {e:?}"),
    };
    let mut twin = Sampler::<K>::new(cfg).expect("same config");
    let drawable = logits.iter().any(|&l| l > f32::NEG_INFINITY);
    let penalised = cfg.repetition_penalty != 1.0;
    for _ in 0..draws {
        let mut a = logits.to_vec();
        let mut b = logits.to_vec();
        let (ra, rb) = (s.sample(&mut a, recent), twin.sample(&mut b, recent));
        assert_eq!(ra, rb, "same seed, same logits, different draws");
        match ra {
            Ok(id) => {
                let l = *logits.get(id as usize).unwrap_or_else(|| panic!("id {id} >= {}", logits.len()));
                assert!(!l.is_nan() && l != f32::NEG_INFINITY, "drew id {id} with logit {l}");
                let argmax_needed = cfg.is_greedy() || cfg.top_k == 1;
                if argmax_needed && !penalised {
                    let best = logits.iter().copied().filter(|l| !l.is_nan()).fold(f32::NEG_INFINITY, f32::max);
                    let first = logits.iter().position(|&x| x == best).expect("a best logit") as u32;
                    assert_eq!(id, first, "greedy/top-1 did not pick the first argmax");
                }
            }
            Err(Error::BadSamplerParam { what: SamplerParam::Logits }) => {
                // the penalty can push finite logits to -inf (x · penalty overflows)
                assert!(!drawable || penalised || logits.len() > u32::MAX as usize, "refused drawable logits");
            }
            Err(Error::InvalidToken { id, vocab_size }) => {
                assert!(penalised && id as usize >= logits.len() && vocab_size as usize == logits.len());
                assert!(recent.contains(&id));
            }
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
}
