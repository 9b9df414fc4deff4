//! The generation loop: stops at EOS, at max tokens, on request, at a full context; with
//! context shift it runs ten times past the context in the same fixed buffers. `generate_more`
//! (a chat turn) continues the cached sequence exactly as a fresh run over the whole sequence
//! would, and shifts the context by its stated policy when the new tokens do not fit.

use host_tools::convert::WeightDType;
use reference_tests::*;
use runtime::generate::{generate, generate_more, Control, GenerateOptions, StopReason};
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::{Session, SessionSizes};

fn sampled() -> SamplerConfig {
    SamplerConfig { temperature: 0.9, top_k: 20, top_p: 0.95, repetition_penalty: 1.0, seed: 7 }
}

/// Runs `generate` on the tiny fixture and returns (ids, summary).
fn run(cfg: SamplerConfig, opts: GenerateOptions, capacity: usize, stop_after: Option<usize>) -> (Vec<u32>, runtime::generate::Summary) {
    let blob = convert_dir(&fixture_dir("tiny"), WeightDType::F32);
    let model = blob.model().unwrap();
    let sizes = SessionSizes::new(model.config(), capacity, 4);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, capacity).unwrap();
    let mut sampler = Sampler::<32>::new(cfg).unwrap();
    let mut window = vec![0u32; capacity];
    let mut ids = Vec::new();
    let summary = generate(&mut s, &mut sampler, &[1, 2, 3], &mut window, &opts, |t| {
        ids.push(t);
        if Some(ids.len()) == stop_after {
            Control::Stop
        } else {
            Control::Continue
        }
    })
    .unwrap();
    (ids, summary)
}

#[test]
fn ten_times_the_context_with_context_shift() {
    let opts = GenerateOptions { max_tokens: 320, stop_at_eos: false, context_shift: true };
    let (ids, summary) = run(sampled(), opts, 32, None);
    assert_eq!(ids.len(), 320);
    assert_eq!(summary.generated, 320);
    assert_eq!(summary.reason, StopReason::MaxTokens);
    assert!(summary.shifts >= 10, "{} shifts", summary.shifts);
    // same seed, same stream
    let (again, _) = run(sampled(), opts, 32, None);
    assert_eq!(ids, again);
}

#[test]
fn without_context_shift_a_full_context_stops_cleanly() {
    let opts = GenerateOptions { max_tokens: 100, stop_at_eos: false, context_shift: false };
    let (ids, summary) = run(sampled(), opts, 16, None);
    // 3 prompt tokens + 13 fed back fill 16 positions; the 14th token is drawn from the last
    // logits and kept, then there is no room to feed it.
    assert_eq!(summary.reason, StopReason::ContextFull { capacity: 16 });
    assert_eq!(ids.len(), 14);
    assert_eq!(summary.generated, 14);
}

#[test]
fn greedy_generation_matches_the_reference_continuation() {
    let dir = fixture_dir("tiny");
    let r = reference(&dir);
    let (prompt, want) = (ids(&r["greedy"]["prompt_ids"]), ids(&r["greedy"]["new_ids"]));
    let blob = convert_dir(&dir, WeightDType::F32);
    let model = blob.model().unwrap();
    let sizes = SessionSizes::new(model.config(), 32, 8);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 32).unwrap();
    let mut sampler = Sampler::<8>::new(SamplerConfig::greedy()).unwrap();
    let mut window = vec![0u32; 32];
    let mut got = Vec::new();
    let opts = GenerateOptions { max_tokens: want.len(), stop_at_eos: false, context_shift: false };
    let summary = generate(&mut s, &mut sampler, &prompt, &mut window, &opts, |t| {
        got.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!(summary.reason, StopReason::MaxTokens);
    assert_eq!(got, want);
}

#[test]
fn stops_at_eos_and_on_request() {
    // Find what greedy decoding produces, then declare its 5th token the EOS id: generation
    // must stop right before it, without emitting it.
    let opts = GenerateOptions { max_tokens: 20, stop_at_eos: false, context_shift: false };
    let (ids, _) = run(SamplerConfig::greedy(), opts, 32, None);
    let eos = ids[4];
    let first = ids.iter().position(|&t| t == eos).unwrap();
    let dir = fixture_dir("tiny");
    let tmp = std::env::temp_dir().join(format!("gen-eos-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for f in ["model.safetensors"] {
        std::fs::copy(dir.join(f), tmp.join(f)).unwrap();
    }
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    config["eos_token_id"] = eos.into();
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let blob = convert_dir(&tmp, WeightDType::F32);
    let model = blob.model().unwrap();
    assert_eq!(model.config().eos_token_id, eos);
    let sizes = SessionSizes::new(model.config(), 32, 4);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 32).unwrap();
    let mut sampler = Sampler::<8>::new(SamplerConfig::greedy()).unwrap();
    let mut window = vec![0u32; 32];
    let mut got = Vec::new();
    let opts = GenerateOptions { max_tokens: 20, stop_at_eos: true, context_shift: false };
    let summary = generate(&mut s, &mut sampler, &[1, 2, 3], &mut window, &opts, |t| {
        got.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!(summary.reason, StopReason::Eos);
    assert_eq!(got, ids[..first].to_vec());

    let opts = GenerateOptions { max_tokens: 20, stop_at_eos: false, context_shift: false };
    let (ids, summary) = run(sampled(), opts, 32, Some(3));
    assert_eq!((ids.len(), summary.reason), (3, StopReason::Stopped));
}

#[test]
fn bad_prompts_are_errors_before_anything_runs() {
    let blob = convert_dir(&fixture_dir("tiny"), WeightDType::F32);
    let model = blob.model().unwrap();
    let sizes = SessionSizes::new(model.config(), 8, 1);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 8).unwrap();
    let mut sampler = Sampler::<8>::new(SamplerConfig::greedy()).unwrap();
    let mut window = vec![0u32; 8];
    let opts = GenerateOptions { max_tokens: 5, stop_at_eos: true, context_shift: true };
    let mut never = |_| -> Control { panic!("no token may be emitted") };
    assert_eq!(
        generate(&mut s, &mut sampler, &[], &mut window, &opts, &mut never).unwrap_err(),
        runtime::Error::EmptyInput
    );
    assert_eq!(
        generate(&mut s, &mut sampler, &[1; 9], &mut window, &opts, &mut never).unwrap_err(),
        runtime::Error::ContextFull { used: 0, adding: 9, capacity: 8 }
    );
    assert_eq!(
        generate(&mut s, &mut sampler, &[64], &mut window, &opts, &mut never).unwrap_err(),
        runtime::Error::InvalidToken { id: 64, vocab_size: 64 }
    );
    let zero = GenerateOptions { max_tokens: 0, ..opts };
    let summary = generate(&mut s, &mut sampler, &[1], &mut window, &zero, &mut never).unwrap();
    assert_eq!(summary.generated, 0);
}

/// Runs `generate` from scratch over `prompt` and returns the tokens it draws.
fn fresh(model: &runtime::Model<'_>, capacity: usize, prompt: &[u32], opts: GenerateOptions) -> Vec<u32> {
    let sizes = SessionSizes::new(model.config(), capacity, 4);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(model, &mut arena, &mut kv, capacity).unwrap();
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let mut window = vec![0u32; capacity];
    let mut got = Vec::new();
    generate(&mut s, &mut sampler, prompt, &mut window, &opts, |t| {
        got.push(t);
        Control::Continue
    })
    .unwrap();
    got
}

#[test]
fn generate_more_continues_the_cached_sequence_like_a_fresh_run() {
    let blob = convert_dir(&fixture_dir("tiny"), WeightDType::F32);
    let model = blob.model().unwrap();
    let capacity = 32;
    let sizes = SessionSizes::new(model.config(), capacity, 1);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, capacity).unwrap();
    let mut window = vec![0u32; capacity];
    let opts = GenerateOptions { max_tokens: 5, stop_at_eos: false, context_shift: true };

    // turn 1: [1, 2, 3] and five tokens; the fifth is drawn but not fed back
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let mut first = Vec::new();
    generate(&mut s, &mut sampler, &[1, 2, 3], &mut window, &opts, |t| {
        first.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!(s.pos(), 3 + 4);
    // turn 2: the fifth token and new text, with a fresh sampler on the same seed
    let new = [first[4], 9, 10, 11];
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let mut second = Vec::new();
    let summary = generate_more(&mut s, &mut sampler, &new, &mut window, &opts, |t| {
        second.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!((summary.generated, summary.shifts, summary.reprefilled), (5, 0, 0));
    // only the new tokens were added to the cache, and the window holds the whole sequence
    let mut sequence = vec![1, 2, 3];
    sequence.extend_from_slice(&first);
    sequence.extend_from_slice(&new[1..]);
    assert_eq!(s.pos(), sequence.len() + 4);
    assert_eq!(&window[..sequence.len()], &sequence[..]);
    assert_eq!(&window[sequence.len()..s.pos()], &second[..4]);
    // the same draws as a fresh run over the whole sequence (bit-identical cache contents)
    assert_eq!(second, fresh(&model, capacity, &sequence, opts));
}

#[test]
fn generate_more_shifts_by_its_policy_when_the_new_tokens_do_not_fit() {
    let blob = convert_dir(&fixture_dir("tiny"), WeightDType::F32);
    let model = blob.model().unwrap();
    let capacity = 16;
    let sizes = SessionSizes::new(model.config(), capacity, 1);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, capacity).unwrap();
    let mut window = vec![0u32; capacity];
    let opts = GenerateOptions { max_tokens: 3, stop_at_eos: false, context_shift: true };
    let prompt: Vec<u32> = (1..=12).collect();
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    generate(&mut s, &mut sampler, &prompt, &mut window, &opts, |_| Control::Continue).unwrap();
    assert_eq!(s.pos(), 14);
    let cached = window[..14].to_vec();

    // 5 new tokens do not fit beside 14: keep min(14, 16 / 2 - 5) = 3 of the most recent
    let new = [20, 21, 22, 23, 24];
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let mut got = Vec::new();
    let summary = generate_more(&mut s, &mut sampler, &new, &mut window, &opts, |t| {
        got.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!((summary.shifts, summary.reprefilled, summary.generated), (1, 3, 3));
    let mut kept = cached[11..].to_vec();
    kept.extend_from_slice(&new);
    assert_eq!(&window[..8], &kept[..]);
    assert_eq!(s.pos(), 8 + 2);
    assert_eq!(got, fresh(&model, capacity, &kept, opts));

    // 9 new tokens alone fill more than half: nothing is kept
    let new: Vec<u32> = (30..39).collect();
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let summary = generate_more(&mut s, &mut sampler, &new, &mut window, &opts, |_| Control::Continue).unwrap();
    assert_eq!((summary.shifts, summary.reprefilled), (1, 0));
    assert_eq!(&window[..9], &new[..]);
}

#[test]
fn generate_more_refuses_what_cannot_run_and_leaves_the_cache_alone() {
    let blob = convert_dir(&fixture_dir("tiny"), WeightDType::F32);
    let model = blob.model().unwrap();
    let sizes = SessionSizes::new(model.config(), 8, 1);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, 8).unwrap();
    let mut window = vec![0u32; 8];
    let mut sampler = Sampler::<8>::new(SamplerConfig::greedy()).unwrap();
    let opts = GenerateOptions { max_tokens: 2, stop_at_eos: false, context_shift: true };
    generate(&mut s, &mut sampler, &[1, 2, 3], &mut window, &opts, |_| Control::Continue).unwrap();
    let (pos, cached) = (s.pos(), window[..4].to_vec());
    let mut never = |_| -> Control { panic!("no token may be emitted") };
    use runtime::Error;
    assert_eq!(generate_more(&mut s, &mut sampler, &[], &mut window, &opts, &mut never).unwrap_err(), Error::EmptyInput);
    assert_eq!(
        generate_more(&mut s, &mut sampler, &[1; 9], &mut window, &opts, &mut never).unwrap_err(),
        Error::ContextFull { used: 4, adding: 9, capacity: 8 }
    );
    assert_eq!(
        generate_more(&mut s, &mut sampler, &[5, 64], &mut window, &opts, &mut never).unwrap_err(),
        Error::InvalidToken { id: 64, vocab_size: 64 }
    );
    let no_shift = GenerateOptions { context_shift: false, ..opts };
    assert_eq!(
        generate_more(&mut s, &mut sampler, &[1; 5], &mut window, &no_shift, &mut never).unwrap_err(),
        Error::ContextFull { used: 4, adding: 5, capacity: 8 }
    );
    assert_eq!(generate_more(&mut s, &mut sampler, &[1], &mut window[..7], &opts, &mut never).unwrap_err(), Error::BufferTooSmall { needed: 8, available: 7 });
    assert_eq!((s.pos(), &window[..4]), (pos, &cached[..]));
}

/// A Llama sequence starts with BOS; a context shift keeps it in front of the most recent half
/// (as llama.cpp keeps it), in both `generate` and `generate_more`, and what the cache then
/// holds is exactly that window: the logits after the shift are a fresh run's over it.
#[test]
fn a_context_shift_keeps_the_leading_bos() {
    let dir = fixture_dir("llama_gqa");
    let blob = convert_dir(&dir, WeightDType::F32);
    let model = blob.model().unwrap();
    let bos = model.config().bos_token_id;
    let capacity = 16;
    let sizes = SessionSizes::new(model.config(), capacity, 4);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::new(&model, &mut arena, &mut kv, capacity).unwrap();
    let mut sampler = Sampler::<32>::new(sampled()).unwrap();
    let mut window = vec![0u32; capacity];
    let prompt = [bos, 40, 50, 60, 70];
    let opts = GenerateOptions { max_tokens: 14, stop_at_eos: false, context_shift: true };
    let mut ids = Vec::new();
    let summary = generate(&mut s, &mut sampler, &prompt, &mut window, &opts, |t| {
        ids.push(t);
        Control::Continue
    })
    .unwrap();
    assert_eq!(summary.shifts, 1, "5 + 14 tokens in 16 positions shift once: {summary:?}, {ids:?}");
    let held = s.pos();
    assert_eq!(window[0], bos, "BOS stays first after the shift");
    // the window after the shift is BOS, then the most recent tokens: the sequence's tail
    let sequence: Vec<u32> = prompt.iter().copied().chain(ids.iter().copied()).collect();
    let tail = &sequence[sequence.len() - 1 - (held - 1)..sequence.len() - 1];
    assert_eq!(&window[1..held], tail);
    // and the cache holds exactly that: a fresh session over the window gives the same logits
    let after = s.logits().unwrap().to_vec();
    let (mut arena2, mut kv2) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut fresh = Session::new(&model, &mut arena2, &mut kv2, capacity).unwrap();
    assert!(fresh.prefill(&window[..held]).unwrap().to_vec() == after);
    // a chat turn that does not fit shifts with the BOS in front as well
    let turn: Vec<u32> = (100..108).collect();
    let opts = GenerateOptions { max_tokens: 1, stop_at_eos: false, context_shift: true };
    let summary = generate_more(&mut s, &mut sampler, &turn, &mut window, &opts, |_| Control::Continue).unwrap();
    assert_eq!(summary.shifts, 1);
    assert_eq!(window[0], bos);
    assert_eq!(&window[s.pos() - turn.len()..s.pos()], &turn[..]);
}
