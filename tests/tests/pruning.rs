//! Vocabulary pruning (`host-tools convert --keep-vocab FILE [--vocab-size N]`), the three
//! claims of `host-tools/src/prune.rs`:
//! - (a) text whose full-vocabulary encoding uses only kept tokens encodes to the same tokens
//!   (through the source ids): the keep text, random substrings of it, with and without
//!   `--vocab-size`;
//! - (b) any other text round-trips byte-exact through the pruned tokenizer;
//! - (c) the pruned model's logits at the kept tokens are the full model's bit for bit (f32, and
//!   q8 and q4 too: rows quantize independently), and what the sampler draws from them is what it
//!   draws from the full distribution restricted to the kept set, step after step.
//!
//! The model: random GPT-Neo checkpoints (`host-tools random`: 2 layers, 32 wide, 8 heads of 4,
//! window 8, GPT-2's 50257 tokens; one with an untied `lm_head`) with GPT-2's tokenizer
//! (`tests/fixtures/gpt2-tokenizer`), pruned to the story text `models/stories/stories.txt`.
//!
//! SentencePiece vocabularies (`host-tools/src/sp_prune.rs`), the same claims: `models/llama`
//! (a trained Llama with a 2048-piece SentencePiece BPE, tied head; f32 and q8) and the
//! `llama_gqa` fixture (512 pieces, untied head), pruned to the same story text.
//!
//! Run: `cargo test -p reference-tests --test pruning`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use host_tools::blob_file::BlobFile;
use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::hf::{write_checkpoint, Checkpoint};
use host_tools::prune::KeepVocab;
use host_tools::random::{alternating, write_random, RandomShape};
use proptest::prelude::*;
use reference_tests::workspace_root;
use runtime::config::Arch;
use runtime::sampler::{Sampler, SamplerConfig};
use runtime::tokenizer::Tokenizer;
use runtime::{KvDType, Model, Session, SessionSizes};

const N_CTX: u32 = 128;

/// The keep text.
fn stories() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| std::fs::read_to_string(workspace_root().join("models/stories/stories.txt")).expect("models/stories/stories.txt"))
}

/// A random GPT-Neo checkpoint with GPT-2's tokenizer in a temporary folder (`untied`: with a
/// separate `lm_head.weight`).
fn checkpoint(untied: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pruning-test-{}-{}", if untied { "untied" } else { "tied" }, std::process::id()));
    let shape = RandomShape::gpt_neo(2, 32, 8, 50257, N_CTX, 8);
    assert_eq!((shape.arch, shape.local), (Arch::GptNeo, alternating(2)));
    write_random(&dir, shape, 7).expect("random checkpoint");
    if untied {
        // the same weights and a head of its own: lm_head = wte reversed row-wise, scaled
        let ckpt = Checkpoint::open(&dir).unwrap();
        let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> =
            ckpt.names().map(|n| { let t = ckpt.read(n).unwrap(); (n.to_string(), t.shape, t.data) }).collect();
        drop(ckpt);
        let wte = tensors.iter().find(|t| t.0 == "transformer.wte.weight").unwrap().clone();
        let head: Vec<f32> = wte.2.chunks(32).rev().flatten().map(|x| 3.0 * x).collect();
        tensors.push(("lm_head.weight".into(), wte.1, head));
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        config["tie_word_embeddings"] = serde_json::Value::Bool(false);
        write_checkpoint(&dir, &config, &tensors).unwrap();
    }
    let tok = workspace_root().join("tests/fixtures/gpt2-tokenizer");
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(tok.join(f), dir.join(f)).unwrap();
    }
    dir
}

fn keep(most_frequent: Option<usize>) -> KeepVocab {
    KeepVocab { text: stories().to_string(), origin: "models/stories/stories.txt".into(), most_frequent }
}

/// The blobs of one checkpoint: full and pruned.
struct Pair {
    full: BlobFile,
    pruned: BlobFile,
}

fn pair(dir: &Path, dtype: WeightDType, most_frequent: Option<usize>) -> Pair {
    pair_with(dir, dtype, keep(most_frequent))
}

fn pair_with(dir: &Path, dtype: WeightDType, keep: KeepVocab) -> Pair {
    let full = convert(dir, &ConvertOptions { dtype, ..ConvertOptions::default() }).unwrap();
    let pruned = convert(dir, &ConvertOptions { dtype, keep_vocab: Some(keep), ..ConvertOptions::default() }).unwrap();
    Pair { full: BlobFile::from_bytes(&full.blob), pruned: BlobFile::from_bytes(&pruned.blob) }
}

/// Every pair the tests use, converted once; the checkpoints are removed afterwards.
struct Pairs {
    /// f32, every token of the story text.
    f32: Pair,
    /// f32, the 300 most frequent tokens of the story text.
    top300: Pair,
    /// q8 and q4, every token of the story text.
    q8: Pair,
    q4: Pair,
    /// f32, an untied head.
    untied: Pair,
}

fn pairs() -> &'static Pairs {
    static P: OnceLock<Pairs> = OnceLock::new();
    P.get_or_init(|| {
        let (tied, untied) = (checkpoint(false), checkpoint(true));
        let p = Pairs {
            f32: pair(&tied, WeightDType::F32, None),
            top300: pair(&tied, WeightDType::F32, Some(300)),
            q8: pair(&tied, WeightDType::Q8, None),
            q4: pair(&tied, WeightDType::Q4, None),
            untied: pair(&untied, WeightDType::F32, None),
        };
        for dir in [tied, untied] {
            let _ = std::fs::remove_dir_all(dir);
        }
        p
    })
}

fn f32_pair() -> &'static Pair {
    &pairs().f32
}

fn top300_pair() -> &'static Pair {
    &pairs().top300
}

fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
    let mut out = vec![0; tok.max_encoded_len(text.len())];
    let n = tok.encode(text, &mut out).unwrap_or_else(|e| panic!("encode({text:?}): {e}"));
    out.truncate(n);
    out
}

fn decode(tok: &Tokenizer<'_>, ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|&id| tok.token_bytes(id).expect("a token of this tokenizer").iter().copied()).collect()
}

/// What (a) and (b) say about `text`: the full encoding mapped through the kept set, when every
/// token of it is kept, equals the pruned encoding (returns true); the pruned encoding decodes
/// to the text's bytes either way.
fn check_text(full: &Model<'_>, pruned: &Model<'_>, text: &str) -> bool {
    let (ft, pt) = (full.tokenizer().unwrap(), pruned.tokenizer().unwrap());
    let f = encode(ft, text);
    let p = encode(pt, text);
    // (b): the same bytes back (SentencePiece: the normalized text, as the full tokenizer gives)
    assert_eq!(decode(pt, &p), decode(ft, &f), "(b) round trip of {text:?}");
    if ft.as_sentencepiece().is_none() {
        assert_eq!(decode(pt, &p), text.as_bytes(), "(b) round trip of {text:?}");
    }
    let as_source: Vec<u32> = p.iter().map(|&id| pruned.source_id(id).unwrap()).collect();
    let covered = f.iter().all(|&id| pruned.id_from_source(id).is_some());
    if covered {
        assert_eq!(as_source, f, "(a) {text:?}: the pruned encoding (as source ids) differs from the full one");
    }
    covered
}

#[test]
fn the_blob_records_the_kept_tokens() {
    let (full, pruned) = (f32_pair().full.model().unwrap(), f32_pair().pruned.model().unwrap());
    assert!(pruned.is_pruned() && !full.is_pruned());
    assert_eq!(pruned.source_vocab_size(), 50257);
    let v = pruned.config().vocab_size;
    assert!((256 + 500..4000).contains(&v), "kept {v} tokens");
    // dense new ids in source-id order, the 256 byte tokens (GPT-2's 0..=255) first
    for id in 0..256 {
        assert_eq!(pruned.source_id(id), Some(id));
    }
    let src: Vec<u32> = (0..v).map(|id| pruned.source_id(id).unwrap()).collect();
    assert!(src.windows(2).all(|w| w[0] < w[1]));
    for (new, &s) in src.iter().enumerate() {
        assert_eq!(pruned.id_from_source(s), Some(new as u32));
    }
    // the special token <|endoftext|> (bos = eos = 50256) is kept, and it is the last
    assert_eq!(pruned.source_id(pruned.config().eos_token_id), Some(50256));
    assert_eq!(pruned.config().bos_token_id, v - 1);
    // every kept token's bytes are the full tokenizer's bytes of its source id
    let (ft, pt) = (full.tokenizer().unwrap(), pruned.tokenizer().unwrap());
    assert_eq!(pt.vocab_size(), v as usize);
    for id in 0..v {
        assert_eq!(pt.token_bytes(id), ft.token_bytes(src[id as usize]), "token {id} (source {})", src[id as usize]);
    }
    // the embedding rows are gone: wte is [kept, C]
    assert_eq!((pruned.wte().rows, full.wte().rows), (v as usize, 50257));
}

/// (a) on the keep text itself, with every token kept and with `--vocab-size 300` (where the
/// text is only partly covered: the covered lines still encode the same, the others round-trip).
#[test]
fn claim_a_the_keep_text_encodes_as_with_the_full_vocabulary() {
    let p = f32_pair();
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    assert!(check_text(&full, &pruned, stories()), "the keep text itself must be covered");
    let p = top300_pair();
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    assert!(!check_text(&full, &pruned, stories()), "300 tokens cannot cover the whole text");
    let (mut covered, mut lines) = (0, 0);
    for line in stories().lines() {
        lines += 1;
        covered += usize::from(check_text(&full, &pruned, line));
    }
    assert!(covered > 0 && covered < lines, "{covered} of {lines} lines covered by the 300 most frequent tokens");
}

/// A deterministic sample of substrings: most are covered (the check is not vacuous), and some
/// are not (cut words encode through tokens the text never needed).
#[test]
fn claim_a_many_substrings_are_covered() {
    let p = f32_pair();
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    let text = stories();
    let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut covered, n) = (0, 2000);
    for _ in 0..n {
        let a = bounds[next() as usize % bounds.len()];
        let len = 1 + next() as usize % 200;
        let b = bounds.iter().copied().find(|&b| b >= a + len).unwrap_or(text.len());
        covered += usize::from(check_text(&full, &pruned, &text[a..b]));
    }
    assert!(covered > n / 2 && covered < n, "{covered} of {n} substrings covered");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// (a) and (b) on random substrings of the keep text.
    #[test]
    fn claim_a_random_substrings(start in 0.0f64..1.0, len in 0usize..400, top300 in any::<bool>()) {
        let p = if top300 { top300_pair() } else { f32_pair() };
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        let text = stories();
        let floor = |mut i: usize| { while !text.is_char_boundary(i) { i -= 1; } i };
        let a = floor(((text.len() as f64) * start) as usize);
        let b = floor((a + len).min(text.len()));
        check_text(&full, &pruned, &text[a..b]);
    }

    /// (b) on any text: letters, digits, punctuation, whitespace runs, and any Unicode.
    #[test]
    fn claim_b_any_text_round_trips(text in "(\\PC|[ \\n\\t]){0,120}", top300 in any::<bool>()) {
        let p = if top300 { top300_pair() } else { f32_pair() };
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        check_text(&full, &pruned, &text);
    }
}

#[test]
fn claim_b_other_texts_round_trip() {
    let p = f32_pair();
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    let shakespeare = std::fs::read_to_string(workspace_root().join("models/default/val.txt")).unwrap();
    let mixed = "naïve café — 東京 🚀 <|endoftext|> \u{0}\u{7f} x².  \n\n\t tabs   and   spaces   ";
    for text in [&shakespeare[..shakespeare.len().min(20_000)], mixed] {
        assert!(!check_text(&full, &pruned, text), "this text needs tokens the stories do not");
    }
}

/// Logits after each prefix of `ids` (the model's own ids).
fn logits(model: &Model<'_>, ids: &[u32]) -> Vec<Vec<f32>> {
    let sizes = SessionSizes::with_kv(model.config(), ids.len(), 4, KvDType::F32);
    let (mut arena, mut kv) = (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len]);
    let mut s = Session::with_kv_dtype(model, &mut arena, &mut kv, ids.len(), KvDType::F32).unwrap();
    let mut rows = Vec::new();
    s.prefill_each(ids, |_, l| rows.push(l.to_vec())).unwrap();
    rows
}

/// (c): at every position of a story prompt (longer than the window of 8), each kept token's
/// logit equals the full model's bit for bit: tied head (f32, q8, q4) and untied head (f32).
#[test]
fn claim_c_logits_at_kept_tokens_are_the_full_models() {
    let (untied, q8, q4) = (&pairs().untied, &pairs().q8, &pairs().q4);
    for (what, p) in [("f32", f32_pair()), ("q8", q8), ("q4", q4), ("f32, untied head", untied)] {
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        let text = &stories()[..400];
        let ids = encode(full.tokenizer().unwrap(), text);
        assert!(ids.len() > 40 && ids.len() <= N_CTX as usize);
        let new_ids: Vec<u32> = ids.iter().map(|&s| pruned.id_from_source(s).unwrap()).collect();
        let (lf, lp) = (logits(&full, &ids), logits(&pruned, &new_ids));
        for (pos, (f, p)) in lf.iter().zip(&lp).enumerate() {
            assert_eq!(p.len(), pruned.config().vocab_size());
            for (id, &l) in p.iter().enumerate() {
                let src = pruned.source_id(id as u32).unwrap() as usize;
                assert_eq!(l.to_bits(), f[src].to_bits(), "{what}: position {pos}, token {id} (source {src}): {l} vs {}", f[src]);
            }
            // (the distribution: softmax over the kept logits is the full softmax renormalised)
            let full_p = softmax64(f);
            let kept_mass: f64 = (0..p.len()).map(|id| full_p[pruned.source_id(id as u32).unwrap() as usize]).sum();
            for (id, q) in softmax64(p).iter().enumerate() {
                let want = full_p[pruned.source_id(id as u32).unwrap() as usize] / kept_mass;
                assert!((q - want).abs() <= 1e-12 * want.max(1e-300) + 1e-15, "{what}: position {pos}, token {id}: {q} vs {want}");
            }
        }
    }
    // the untied blob's head is its own: different logits from the tied one
    let (a, b) = (f32_pair().pruned.model().unwrap(), untied.pruned.model().unwrap());
    assert_ne!(logits(&a, &[300, 301])[1], logits(&b, &[300, 301])[1]);
}

fn softmax64(l: &[f32]) -> Vec<f64> {
    let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = l.iter().map(|&x| (x as f64 - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// (c) as the sampler sees it: generating from the pruned model draws, step after step, the
/// tokens the same sampler draws from the full model's logits with every pruned token at -inf
/// (its distribution renormalised over the kept set), for top-k and for plain temperature.
#[test]
fn claim_c_sampling_the_pruned_model_is_sampling_the_renormalised_full_one() {
    let p = f32_pair();
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    let prompt = encode(full.tokenizer().unwrap(), "Once upon a time, there was a little girl named Lily.");
    let cap = 64;
    for cfg in [
        SamplerConfig { temperature: 0.8, top_k: 40, top_p: 0.95, repetition_penalty: 1.0, seed: 42 },
        SamplerConfig { temperature: 1.0, top_k: 0, top_p: 1.0, repetition_penalty: 1.0, seed: 7 },
    ] {
        let mut sessions = Vec::new();
        let sizes = SessionSizes::with_kv(full.config(), cap, 1, KvDType::F32);
        let mut bufs: Vec<(Vec<f32>, Vec<f32>)> = (0..2).map(|_| (vec![0.0; sizes.arena_len], vec![0.0; sizes.kv_len])).collect();
        for ((arena, kv), model) in bufs.iter_mut().zip([&full, &pruned]) {
            sessions.push(Session::with_kv_dtype(model, arena, kv, cap, KvDType::F32).unwrap());
        }
        let (mut sf, mut sp) = (Sampler::<64>::new(cfg).unwrap(), Sampler::<64>::new(cfg).unwrap());
        let new_prompt: Vec<u32> = prompt.iter().map(|&s| pruned.id_from_source(s).unwrap()).collect();
        let mut lf = sessions[0].prefill(&prompt).unwrap().to_vec();
        let mut lp = sessions[1].prefill(&new_prompt).unwrap().to_vec();
        for step in 0..cap - prompt.len() {
            // (the full model's logits with the pruned tokens at -inf)
            for (src, l) in lf.iter_mut().enumerate() {
                if pruned.id_from_source(src as u32).is_none() {
                    *l = f32::NEG_INFINITY;
                }
            }
            let tf = sf.sample(&mut lf, &[]).unwrap();
            let tp = sp.sample(&mut lp, &[]).unwrap();
            assert_eq!(pruned.source_id(tp), Some(tf), "{cfg:?}: step {step}");
            lf = sessions[0].decode(tf).unwrap().to_vec();
            lp = sessions[1].decode(tp).unwrap().to_vec();
        }
    }
}

// ---- SentencePiece vocabularies -----------------------------------------------------------------------

/// The SentencePiece pairs: `models/llama` (f32, q8, and f32 with `--vocab-size 300`) pruned to
/// the story text, and the untied `llama_gqa` fixture (f32) pruned to its first 1000 bytes
/// ([`gqa_keep_text`]: its 512 pieces are all in the whole text's encoding).
struct SpPairs {
    f32: Pair,
    q8: Pair,
    top300: Pair,
    untied: Pair,
}

fn sp_pairs() -> &'static SpPairs {
    static P: OnceLock<SpPairs> = OnceLock::new();
    P.get_or_init(|| {
        let llama = workspace_root().join("models/llama");
        let gqa = reference_tests::fixture_dir("llama_gqa");
        SpPairs {
            f32: pair(&llama, WeightDType::F32, None),
            q8: pair(&llama, WeightDType::Q8, None),
            top300: pair(&llama, WeightDType::F32, Some(300)),
            untied: pair_with(&gqa, WeightDType::F32, KeepVocab { text: gqa_keep_text().into(), origin: "stories.txt[..1000]".into(), most_frequent: None }),
        }
    })
}

fn gqa_keep_text() -> &'static str {
    let text = stories();
    let mut end = 1000;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[test]
fn sp_the_blob_records_the_kept_pieces() {
    for (what, p, source_v) in [("models/llama", &sp_pairs().f32, 2048), ("llama_gqa", &sp_pairs().untied, 512)] {
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        assert!(pruned.is_pruned());
        assert_eq!(pruned.source_vocab_size() as usize, source_v);
        let v = pruned.config().vocab_size;
        assert!(v > 259 && (v as usize) < source_v, "{what}: kept {v} pieces");
        // <unk> <s> </s> and the 256 byte pieces keep their ids 0..=258
        for id in 0..259 {
            assert_eq!(pruned.source_id(id), Some(id), "{what}");
        }
        let (ft, pt) = (full.tokenizer().unwrap(), pruned.tokenizer().unwrap());
        let (fs, ps) = (ft.as_sentencepiece().unwrap(), pt.as_sentencepiece().unwrap());
        assert_eq!((pt.bos_id(), pt.eos_id(), pt.unk_id()), (Some(1), Some(2), Some(0)), "{what}");
        assert_eq!((pruned.config().bos_token_id, pruned.config().eos_token_id), (1, 2));
        assert_eq!(pt.prompt_prefix(), ft.prompt_prefix());
        for id in 0..v {
            let src = pruned.source_id(id).unwrap();
            assert_eq!(pt.token_bytes(id), ft.token_bytes(src), "{what}: piece {id} (source {src})");
            assert_eq!(ps.piece_type(id), fs.piece_type(src), "{what}: piece {id} (source {src})");
        }
        assert!(ps.n_merges() < fs.n_merges());
        assert_eq!((pruned.wte().rows, full.wte().rows), (v as usize, source_v));
    }
}

#[test]
fn sp_claim_a_the_keep_text_and_its_substrings_encode_as_with_the_full_vocabulary() {
    let p = &sp_pairs().f32;
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    assert!(check_text(&full, &pruned, stories()), "the keep text itself must be covered");
    let p = &sp_pairs().untied;
    let (gf, gp) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    assert!(check_text(&gf, &gp, gqa_keep_text()));
    assert!(!check_text(&gf, &gp, stories()));
    // --vocab-size 300: some lines covered, some not
    let p = &sp_pairs().top300;
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    assert!(!check_text(&full, &pruned, stories()), "300 pieces cannot cover the whole text");
    let (mut covered, mut lines) = (0, 0);
    for line in stories().lines() {
        lines += 1;
        covered += usize::from(check_text(&full, &pruned, line));
    }
    assert!(covered > 0 && covered < lines, "{covered} of {lines} lines covered by the 300 most frequent pieces");
    // substrings (cut words start without the dummy prefix's ▁: many are still covered)
    let p = &sp_pairs().f32;
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    let text = stories();
    let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut covered, n) = (0, 2000);
    for _ in 0..n {
        let a = bounds[next() as usize % bounds.len()];
        let len = 1 + next() as usize % 200;
        let b = bounds.iter().copied().find(|&b| b >= a + len).unwrap_or(text.len());
        covered += usize::from(check_text(&full, &pruned, &text[a..b]));
    }
    assert!(covered > n / 4 && covered < n, "{covered} of {n} substrings covered");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// (a) on random substrings of the keep text, (b) on any text (bytes for what is not kept).
    #[test]
    fn sp_claims_a_and_b_random_texts(start in 0.0f64..1.0, len in 0usize..300, any_text in "(\\PC|[ \\n\\t\u{2581}]){0,80}", which in 0usize..3) {
        let p = [&sp_pairs().f32, &sp_pairs().top300, &sp_pairs().untied][which];
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        let text = stories();
        let floor = |mut i: usize| { while !text.is_char_boundary(i) { i -= 1; } i };
        let a = floor(((text.len() as f64) * start) as usize);
        let b = floor((a + len).min(text.len()));
        check_text(&full, &pruned, &text[a..b]);
        check_text(&full, &pruned, &any_text);
    }
}

#[test]
fn sp_claim_b_other_texts_round_trip() {
    let p = &sp_pairs().f32;
    let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
    let mixed = "naïve café — 東京 🚀 <s> \u{0}\u{7f} x².  \n\n\t tabs   and   spaces   \u{2581}";
    let val = std::fs::read_to_string(workspace_root().join("models/default/val.txt")).unwrap();
    for text in [mixed, &val[..20_000]] {
        assert!(!check_text(&full, &pruned, text), "this text needs pieces the stories do not");
    }
}

/// (c): each kept piece's logit equals the full model's bit for bit at every position of a
/// story prompt (BOS first): tied head f32 and q8, untied head f32.
#[test]
fn sp_claim_c_logits_at_kept_pieces_are_the_full_models() {
    let sp = sp_pairs();
    for (what, p, keep_text) in [("f32", &sp.f32, stories()), ("q8", &sp.q8, stories()), ("f32, untied head", &sp.untied, gqa_keep_text())] {
        let (full, pruned) = (p.full.model().unwrap(), p.pruned.model().unwrap());
        // BOS, then the keep text's first pieces (all kept), as many as the context holds (≤ 100)
        let mut ids = vec![full.tokenizer().unwrap().bos_id().unwrap()];
        ids.extend(encode(full.tokenizer().unwrap(), keep_text));
        ids.truncate((full.config().n_ctx as usize).min(100));
        assert!(ids.len() > 40, "{what}: {} ids", ids.len());
        let new_ids: Vec<u32> = ids.iter().map(|&s| pruned.id_from_source(s).unwrap()).collect();
        let (lf, lp) = (logits(&full, &ids), logits(&pruned, &new_ids));
        for (pos, (f, p)) in lf.iter().zip(&lp).enumerate() {
            assert_eq!(p.len(), pruned.config().vocab_size());
            for (id, &l) in p.iter().enumerate() {
                let src = pruned.source_id(id as u32).unwrap() as usize;
                assert_eq!(l.to_bits(), f[src].to_bits(), "{what}: position {pos}, piece {id} (source {src}): {l} vs {}", f[src]);
            }
        }
    }
}
