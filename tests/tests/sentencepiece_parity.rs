//! SentencePiece BPE: the runtime's ids against the `sentencepiece` package's and Hugging Face's,
//! exactly, on every string of `tests/fixtures/sp_tokenizer/cases.json` (made by
//! `tests/make_sp_fixtures.py`); decoding and streaming; random strings; corrupted sections.
//!
//! The tokenizers (all packed here through `host_tools::tokenizer_pack::pack_from_dir`):
//! - `model`: a sentencepiece BPE `tokenizer.model` with Llama's settings (1000 pieces);
//! - `hf`: the `tokenizer.json` transformers converts it into (a `Metaspace` pre-tokenizer);
//! - `hf_legacy`: the same in Llama 2's layout (`Prepend` + `Replace` normalizer);
//! - `no_fallback_rew`: no byte fallback, `remove_extra_whitespaces` (400 pieces);
//! - `trained`: this project's trainer (`host-tools train-tokenizer`, 600 pieces);
//! - the completed vocabulary of `host-tools random --preset stories15m` (32,000 pieces, about
//!   half of them completed from two trained pieces each): trained again here, checked against
//!   the digest in `completed.json`, and its ids against sentencepiece's and transformers'.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use runtime::tokenizer::sentencepiece::format;
use runtime::tokenizer::{PieceType, Tokenizer, Utf8Stream};
use runtime::Error;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("sp_tokenizer")
}

const HINT: &str = "regenerate with: .venv/bin/python tests/make_sp_fixtures.py (see tests/fixtures/README.md)";

fn cases() -> &'static Value {
    static CASES: OnceLock<Value> = OnceLock::new();
    CASES.get_or_init(|| {
        let path = fixtures().join("cases.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; {HINT}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}; {HINT}", path.display()))
    })
}

fn strings() -> Vec<&'static str> {
    cases()["strings"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect()
}

/// The packed section of one fixture folder (packed once per process).
fn section(name: &str) -> &'static [u8] {
    static SECTIONS: OnceLock<std::sync::Mutex<HashMap<String, &'static [u8]>>> = OnceLock::new();
    let map = SECTIONS.get_or_init(Default::default);
    let mut map = map.lock().unwrap();
    if let Some(&section) = map.get(name) {
        return section;
    }
    let dir = fixtures().join(name);
    let bytes = host_tools::tokenizer_pack::pack_from_dir(&dir)
        .unwrap_or_else(|e| panic!("packing {}: {e:#}", dir.display()))
        .unwrap_or_else(|| panic!("no tokenizer in {}", dir.display()));
    let section: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    map.insert(name.to_string(), section);
    section
}

fn tokenizer(name: &str) -> Tokenizer<'static> {
    let tok = Tokenizer::from_bytes(section(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(tok.as_sentencepiece().is_some(), "{name} packs as SentencePiece");
    tok
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().unwrap().iter().map(|id| id.as_u64().unwrap() as u32).collect()
}

fn encode(tok: &Tokenizer<'_>, text: &str) -> Vec<u32> {
    let mut out = vec![0; tok.max_encoded_len(text.len())];
    let n = tok.encode(text, &mut out).unwrap_or_else(|e| panic!("encoding {text:?}: {e}"));
    out.truncate(n);
    out
}

fn decode(tok: &Tokenizer<'_>, ids: &[u32]) -> String {
    let mut out = vec![0; ids.len() * 16 + 16];
    let n = tok.decode(ids, &mut out).unwrap();
    String::from_utf8_lossy(&out[..n]).into_owned()
}

/// The ids, as pieces, for a failure message.
fn show(tok: &Tokenizer<'_>, ids: &[u32]) -> String {
    let pieces: Vec<String> =
        ids.iter().map(|&id| format!("{id}:{:?}", String::from_utf8_lossy(tok.token_bytes(id).unwrap_or(b"?")))).collect();
    pieces.join(" ")
}

/// Requires the runtime's ids for every fixture string to be `expected[i]`.
fn assert_ids(name: &str, expected: impl Fn(usize) -> Vec<u32>) {
    let tok = tokenizer(name);
    let mut failures = Vec::new();
    for (i, text) in strings().into_iter().enumerate() {
        let (want, got) = (expected(i), encode(&tok, text));
        if want != got {
            failures.push(format!("string {i} {text:?}:\n  expected {}\n  runtime  {}", show(&tok, &want), show(&tok, &got)));
        }
    }
    assert!(failures.is_empty(), "{name}: {} of {} strings differ ({HINT}):\n{}", failures.len(), strings().len(), failures.join("\n"));
}

// ---- exact ids --------------------------------------------------------------------------------------

#[test]
fn tokenizer_model_ids_equal_sentencepiece() {
    for name in ["model", "no_fallback_rew", "trained"] {
        let encoded = cases()[name]["encode"].as_array().unwrap();
        assert_ids(name, |i| ids(&encoded[i]["ids"]));
    }
}

#[test]
fn tokenizer_json_ids_equal_hugging_face() {
    for name in ["hf", "hf_legacy"] {
        let expected = cases()[name]["ids"].as_array().unwrap();
        assert_ids(name, |i| ids(&expected[i]));
    }
    // Llama 2's layout gives sentencepiece's ids; transformers 5's Metaspace conversion does
    // not prepend ▁ to a text that starts with a space (19 of the strings).
    let (sp, legacy, meta) = (&cases()["model"]["encode"], &cases()["hf_legacy"]["ids"], &cases()["hf"]["ids"]);
    let differ = |other: &Value| (0..strings().len()).filter(|&i| sp[i]["ids"] != other[i]).count();
    assert_eq!(differ(legacy), 0);
    assert!(differ(meta) > 0);
}

#[test]
fn whole_files_encode_to_the_same_ids() {
    // models/default/val.txt (192 KB) and models/stories/stories.txt, each one string: the id
    // count and a digest (h = h * 31 + id mod 2^64) of the reference's ids.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for name in ["model", "no_fallback_rew", "trained", "hf", "hf_legacy"] {
        let tok = tokenizer(name);
        for (file, expected) in cases()[name]["files"].as_object().unwrap() {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let ids = encode(&tok, &text);
            let hash = ids.iter().fold(0u64, |h, &id| h.wrapping_mul(31).wrapping_add(u64::from(id)));
            assert_eq!(ids.len() as u64, expected["n"].as_u64().unwrap(), "{name}: {file}");
            assert_eq!(format!("{hash:016x}"), expected["hash"].as_str().unwrap(), "{name}: {file}");
        }
    }
}

#[test]
fn special_ids_and_bos_come_from_the_checkpoint() {
    for name in ["model", "no_fallback_rew", "trained"] {
        let tok = tokenizer(name);
        let c = &cases()[name];
        let id = |key: &str| c[key].as_i64().and_then(|id| u32::try_from(id).ok());
        assert_eq!(tok.vocab_size() as u64, c["vocab_size"].as_u64().unwrap(), "{name}");
        assert_eq!((tok.bos_id(), tok.eos_id(), tok.unk_id()), (id("bos_id"), id("eos_id"), id("unk_id")), "{name}");
    }
    // tokenizer_config.json says add_bos_token: true (model, hf, trained); a bare tokenizer.model
    // adds BOS too (LlamaTokenizer's default).
    for name in ["model", "hf", "hf_legacy", "no_fallback_rew", "trained"] {
        assert_eq!(tokenizer(name).prompt_prefix(), Some(1), "{name}");
    }
    // transformers (AutoTokenizer on the trained folder) gives BOS, then sentencepiece's ids
    // (except where its Metaspace conversion leaves out the ▁ in front of a leading space).
    let tok = tokenizer("trained");
    let hf = cases()["trained"]["transformers_ids"].as_array().unwrap();
    for (i, text) in strings().into_iter().enumerate() {
        let mut ours = vec![tok.prompt_prefix().unwrap()];
        ours.extend(encode(&tok, text));
        let theirs = ids(&hf[i]);
        assert_eq!(theirs[0], ours[0], "string {i}: BOS");
        if !text.starts_with([' ', '\u{2581}']) {
            assert_eq!(ours, theirs, "string {i} {text:?}");
        }
    }
}

#[test]
fn wide_ids_take_the_reference_merge_loop_and_agree() {
    // The same tables with 4-byte ids: encoding takes the naive merge loop instead of the
    // tagged 16-bit one.
    let tables = host_tools::tokenizer_pack::tokenizer_from_dir(&fixtures().join("model")).unwrap().unwrap();
    let host_tools::tokenizer_pack::TokenizerTables::SentencePiece(mut tables) = tables else { panic!("not SentencePiece") };
    let v = tables.types.len();
    tables.types.resize(70_000, format::TYPE_CONTROL);
    tables.names.resize(70_000, String::new());
    tables.text.resize(70_000, Vec::new());
    let wide = tables.section().unwrap();
    assert_eq!(wide[6], 4, "id width");
    let (tok, narrow) = (Tokenizer::from_bytes(&wide).unwrap(), tokenizer("model"));
    assert_eq!(tok.vocab_size(), 70_000);
    for text in strings() {
        assert_eq!(encode(&tok, text), encode(&narrow, text), "{text:?} (vocab {v} -> 70000)");
    }
}

// ---- decoding ---------------------------------------------------------------------------------------

/// Whether sentencepiece's decode of `ids` drops more leading spaces than the runtime's: with
/// remove_extra_whitespaces it drops the leading space of every piece while the text is still
/// empty (so a run of `▁` pieces at the start disappears), the runtime only that of the first.
fn rew_leading_space_pieces(tok: &Tokenizer<'_>, ids: &[u32]) -> bool {
    let sp = tok.as_sentencepiece().unwrap();
    let mut pieces = ids.iter().filter(|&&id| sp.piece_type(id) != Some(PieceType::Control));
    sp.flags() & format::FLAG_REMOVE_EXTRA_WHITESPACES != 0 && pieces.next().is_some_and(|&id| tok.token_bytes(id) == Some(b" "))
}

/// `ours` is sentencepiece's decode `theirs`, up to [`rew_leading_space_pieces`].
fn assert_decoded(tok: &Tokenizer<'_>, ids: &[u32], ours: &str, theirs: &str, what: &str) {
    if rew_leading_space_pieces(tok, ids) {
        assert_eq!(ours.trim_start_matches(' '), theirs.trim_start_matches(' '), "{what}");
    } else {
        assert_eq!(ours, theirs, "{what}");
    }
}

#[test]
fn decode_gives_what_sentencepiece_decodes() {
    for name in ["model", "no_fallback_rew", "trained"] {
        let tok = tokenizer(name);
        let bos = tok.bos_id().unwrap();
        let encoded = cases()[name]["encode"].as_array().unwrap();
        for (i, text) in strings().into_iter().enumerate() {
            let ids = ids(&encoded[i]["ids"]);
            let theirs = encoded[i]["decoded"].as_str().unwrap();
            assert_decoded(&tok, &ids, &decode(&tok, &ids), theirs, &format!("{name}: string {i} {text:?}"));
            let with_bos: Vec<u32> = std::iter::once(bos).chain(ids.iter().copied()).collect();
            let theirs = encoded[i]["decoded_with_bos"].as_str().unwrap();
            assert_decoded(&tok, &with_bos, &decode(&tok, &with_bos), theirs, &format!("{name}: BOS + string {i}"));
        }
        for case in cases()[name]["decode"].as_array().unwrap() {
            let ids = ids(&case["ids"]);
            let theirs = case["decoded"].as_str().unwrap();
            assert_decoded(&tok, &ids, &decode(&tok, &ids), theirs, &format!("{name}: ids {}", show(&tok, &ids)));
        }
    }
    // Llama's settings (no remove_extra_whitespaces) never need the exception.
    let tok = tokenizer("model");
    assert!(strings().iter().all(|text| !rew_leading_space_pieces(&tok, &encode(&tok, text))));
}

#[test]
fn documented_decode_differences() {
    // A control piece in the middle of the text: sentencepiece keeps the next piece's space,
    // the runtime drops it (as llama2.c does after BOS). Bytes that are not UTF-8: one U+FFFD
    // per maximal invalid sequence here, one per byte in sentencepiece.
    let tok = tokenizer("model");
    let differs = cases()["model"]["decode_differs"].as_array().unwrap();
    let ours: Vec<String> = differs.iter().map(|case| decode(&tok, &ids(&case["ids"]))).collect();
    let theirs: Vec<&str> = differs.iter().map(|case| case["decoded"].as_str().unwrap()).collect();
    let word = ids(&differs[0]["ids"])[0];
    let bare = String::from_utf8_lossy(tok.token_bytes(word).unwrap()).trim_start().to_string();
    assert_eq!(ours[0], format!("{bare}{bare}"));
    assert_eq!(theirs[0], format!("{bare} {bare}"));
    assert_eq!(ours[1], format!("{bare}{bare}"));
    assert_eq!(ours[2], format!("\u{FFFD} {bare}"));
    assert_eq!(theirs[2], format!("\u{FFFD}\u{FFFD} {bare}"));
    assert_eq!((ours[3].as_str(), theirs[3]), ("\u{FFFD}", "\u{FFFD}"));
}

#[test]
fn streaming_across_byte_pieces_gives_the_same_text() {
    for name in ["model", "no_fallback_rew", "trained", "hf"] {
        let tok = tokenizer(name);
        for text in strings() {
            let ids = encode(&tok, text);
            let (mut stream, mut out, mut prev) = (Utf8Stream::new(), String::new(), None);
            for &id in &ids {
                for piece in stream.push(tok.token_text(prev, id).unwrap()) {
                    out.push_str(piece);
                }
                prev = Some(id);
            }
            out.push_str(stream.finish());
            assert_eq!(out, decode(&tok, &ids), "{name}: {text:?}");
        }
    }
}

#[test]
fn round_trip_is_the_normalized_text() {
    // Llama's settings: decoding gives the text back, a literal ▁ as a space.
    let tok = tokenizer("model");
    for text in strings() {
        assert_eq!(decode(&tok, &encode(&tok, text)), text.replace('\u{2581}', " "), "{text:?}");
    }
}

#[test]
fn token_text_drops_the_prefix_space_at_the_start_and_after_bos() {
    let tok = tokenizer("model");
    let sp = tok.as_sentencepiece().unwrap();
    let the = encode(&tok, "the")[0];
    assert_eq!(tok.token_bytes(the), Some(&b" the"[..]));
    assert_eq!(tok.token_text(None, the), Some(&b"the"[..]));
    assert_eq!(tok.token_text(Some(1), the), Some(&b"the"[..]));
    assert_eq!(tok.token_text(Some(2), the), Some(&b"the"[..]));
    assert_eq!(tok.token_text(Some(the), the), Some(&b" the"[..]));
    let space = sp.byte_token(b' ').unwrap();
    assert_eq!(sp.piece_type(space), Some(PieceType::Byte));
    assert_eq!(tok.token_text(None, space), Some(&b" "[..]), "byte pieces keep their byte");
    assert_eq!(tok.token_text(None, 0), Some(" \u{2047} ".as_bytes()), "<unk> keeps its surface");
    assert_eq!(tok.token_text(None, 1), Some(&b""[..]));
    assert_eq!(tok.token_text(None, 1000), None);
}

#[test]
fn errors_carry_the_numbers() {
    let tok = tokenizer("model");
    let mut out = [0u32; 3];
    // "Hello world" needs 11 + 1 slots: "▁Hello" (6) is the first segment, then "▁world".
    match tok.encode("Hello world", &mut out) {
        Err(Error::BufferTooSmall { needed, available: 3 }) => assert!((7..=12).contains(&needed), "needed {needed}"),
        other => panic!("{other:?}"),
    }
    let mut big = [0u32; 12];
    assert!(tok.encode("Hello world", &mut big).is_ok());
    assert_eq!(tok.decode(&[1000], &mut [0; 8]), Err(Error::InvalidToken { id: 1000, vocab_size: 1000 }));
    let the = encode(&tok, "the the");
    assert_eq!(tok.decode(&the, &mut [0; 2]), Err(Error::BufferTooSmall { needed: 7, available: 2 }));
}

// ---- a blob with a SentencePiece tokenizer ------------------------------------------------------------

/// A random GPT-2 checkpoint (1 layer, 16 wide) with 1000 tokens, the SentencePiece fixtures'
/// size, in `dir` (weights and config only: the byte-level tokenizer `write_random` puts beside
/// it is removed).
fn random_gpt2_1000(dir: &Path) {
    host_tools::random::write_random(dir, host_tools::random::RandomShape::gpt2(1, 16, 2, 1000, 32), 3).unwrap();
    for f in ["vocab.json", "merges.txt"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
}

#[test]
fn a_converted_checkpoint_carries_the_sentencepiece_tokenizer() {
    // A random GPT-2 with the 1000 pieces' vocabulary size (convert requires them equal).
    let dir = std::env::temp_dir().join(format!("sp-convert-{}", std::process::id()));
    random_gpt2_1000(&dir);
    for f in ["tokenizer.model", "tokenizer_config.json"] {
        std::fs::copy(fixtures().join("model").join(f), dir.join(f)).unwrap();
    }
    let converted = host_tools::convert::convert(&dir, &Default::default());
    let keep = host_tools::prune::KeepVocab { text: "the".into(), origin: "text".into(), most_frequent: None };
    let pruned = host_tools::convert::convert(&dir, &host_tools::convert::ConvertOptions { keep_vocab: Some(keep), ..Default::default() });
    std::fs::remove_dir_all(&dir).unwrap();
    let blob = converted.unwrap().blob;
    let model = runtime::Model::from_blob(&blob).unwrap();
    let tok = model.tokenizer().unwrap();
    assert!(tok.as_sentencepiece().is_some());
    assert_eq!(encode(tok, "Hello world"), encode(&tokenizer("model"), "Hello world"));
    // pruned to "the" (tests/tests/pruning.rs has the claims): the same pieces, as source ids
    let pruned = pruned.unwrap().blob;
    let pruned = runtime::Model::from_blob(&pruned).unwrap();
    let ids: Vec<u32> = encode(pruned.tokenizer().unwrap(), "the").iter().map(|&id| pruned.source_id(id).unwrap()).collect();
    assert_eq!(ids, encode(&tokenizer("model"), "the"));
    assert!(pruned.config().vocab_size < 300, "{}", pruned.config().vocab_size);
}

/// Pruning a `tokenizer.json` SentencePiece vocabulary (ranked merges, a `Metaspace`
/// pre-tokenizer) and a `tokenizer.model` one to the story text: the text and each of its lines
/// whose full encoding is kept encode to the same pieces (as source ids), other text to the same
/// bytes.
#[test]
fn tokenizer_json_and_model_vocabularies_prune_to_a_text() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let stories = std::fs::read_to_string(root.join("models/stories/stories.txt")).unwrap();
    let val = std::fs::read_to_string(root.join("models/default/val.txt")).unwrap();
    for (name, files) in [("hf", &["tokenizer.json", "tokenizer_config.json"][..]), ("hf_legacy", &["tokenizer.json"][..]), ("model", &["tokenizer.model", "tokenizer_config.json"][..])] {
        let dir = std::env::temp_dir().join(format!("sp-prune-{name}-{}", std::process::id()));
        random_gpt2_1000(&dir);
        for f in files {
            std::fs::copy(fixtures().join(name).join(f), dir.join(f)).unwrap();
        }
        let keep = host_tools::prune::KeepVocab { text: stories.clone(), origin: "stories".into(), most_frequent: None };
        let blob = host_tools::convert::convert(&dir, &host_tools::convert::ConvertOptions { keep_vocab: Some(keep), ..Default::default() });
        std::fs::remove_dir_all(&dir).unwrap();
        let blob = blob.unwrap_or_else(|e| panic!("{name}: {e:#}")).blob;
        let pruned = runtime::Model::from_blob(&blob).unwrap();
        let (full, tok) = (tokenizer(name), pruned.tokenizer().unwrap());
        assert!(tok.vocab_size() < full.vocab_size(), "{name}");
        // (a line alone starts with the dummy prefix's ▁, which the whole text has not there:
        // only the lines whose full encoding is kept are checked)
        let mut covered = 0;
        for text in std::iter::once(stories.as_str()).chain(stories.lines()) {
            let want = encode(&full, text);
            if want.iter().all(|&id| pruned.id_from_source(id).is_some()) {
                let ids: Vec<u32> = encode(tok, text).iter().map(|&id| pruned.source_id(id).unwrap()).collect();
                assert_eq!(ids, want, "{name}: {text:?}");
                covered += 1;
            } else {
                assert_eq!(decode(tok, &encode(tok, text)), decode(&full, &want), "{name}: {text:?}");
            }
        }
        assert!(covered > 10, "{name}: {covered} lines covered");
        let other = &val[..5000];
        assert_eq!(decode(tok, &encode(tok, other)), decode(&full, &encode(&full, other)), "{name}");
        assert_ne!(encode(tok, other).len(), encode(&full, other).len(), "{name}: other text needs other pieces");
    }
}

// ---- random text --------------------------------------------------------------------------------------

/// What sentencepiece's `remove_extra_whitespaces` leaves of a text, decoded: leading spaces,
/// trailing spaces and ▁s, and every space after a space dropped; ▁ read as a space.
fn remove_extra_whitespaces(text: &str) -> String {
    let kept = text.trim_start_matches(' ').trim_end_matches([' ', '\u{2581}']);
    let mut out = String::new();
    let mut prev = None;
    for c in kept.chars() {
        if !(c == ' ' && prev == Some(' ')) {
            out.push(if c == '\u{2581}' { ' ' } else { c });
        }
        prev = Some(c);
    }
    out
}

/// Text with many spaces, ▁, digits, letters the vocabulary knows and characters it does not.
fn text_strategy() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        4 => Just(" ".to_string()),
        2 => Just("\u{2581}".to_string()),
        6 => "[a-z]{1,6}",
        2 => "[A-Z][a-z]{0,5}",
        2 => "[0-9]{1,4}",
        2 => "[.,;:!?'\"()\\n\\t-]",
        2 => any::<char>().prop_map(|c| c.to_string()),
        1 => "[é안😀中ñ\u{301}]{1,3}",
    ];
    prop::collection::vec(pieces, 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// tokenizer.model (sentencepiece's merges by piece score) and Llama 2's tokenizer.json
    /// (Hugging Face's ranked merges) give the same ids, and decoding gives the text back.
    #[test]
    fn model_and_tokenizer_json_agree_and_round_trip(text in text_strategy()) {
        let (model, legacy) = (tokenizer("model"), tokenizer("hf_legacy"));
        let ids = encode(&model, &text);
        prop_assert_eq!(&ids, &encode(&legacy, &text));
        prop_assert_eq!(decode(&model, &ids), text.replace('\u{2581}', " "));
        // The buffer bound holds exactly: text.len() + 1 always suffices.
        let mut out = vec![0; text.len() + 1];
        prop_assert!(model.encode(&text, &mut out).is_ok());
    }

    /// Without byte fallback and with remove_extra_whitespaces: never a panic, unknown runs
    /// become one <unk>, and the text comes back with spaces collapsed (where no <unk> is).
    #[test]
    fn other_flags_round_trip(text in text_strategy()) {
        let tok = tokenizer("no_fallback_rew");
        let ids = encode(&tok, &text);
        let unk = tok.unk_id().unwrap();
        prop_assert!(ids.windows(2).all(|w| !(w[0] == unk && w[1] == unk)));
        if !ids.contains(&unk) {
            prop_assert_eq!(decode(&tok, &ids), remove_extra_whitespaces(&text));
        }
    }
}

// ---- corrupted and malformed sections ----------------------------------------------------------------

/// Loads a possibly corrupted section; if it is accepted, encoding and decoding must still work
/// and the round trip still hold (validation checks every merge's and character's text).
fn try_corrupted(section: &[u8]) -> bool {
    let Ok(tok) = Tokenizer::from_bytes(section) else { return false };
    for text in ["Hello, world! It's 3.14 😀 나는", "", "   \n\t x", "\u{2581}a  b "] {
        let mut out = vec![0; text.len() + 1];
        let n = tok.encode(text, &mut out).expect("text.len() + 1 is always enough");
        let _ = tok.decode(&out[..n], &mut [0; 8]);
        let round = decode(&tok, &out[..n]);
        assert!(!round.contains('\u{FFFD}') || tok.unk_id().is_some(), "{text:?} -> {round:?}");
    }
    let _ = tok.decode(&[0, 1, 2, u32::MAX], &mut [0; 8]);
    true
}

#[test]
fn truncated_and_flipped_sections_are_rejected_or_harmless() {
    let section = section("no_fallback_rew");
    for len in 0..section.len() {
        assert!(Tokenizer::from_bytes(&section[..len]).is_err(), "truncated to {len} bytes");
    }
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut rng = || runner.rng().next_u32() as usize;
    for _ in 0..3000 {
        let mut bad = section.to_vec();
        let at = rng() % bad.len();
        bad[at] ^= 1 << (rng() % 8);
        try_corrupted(&bad);
    }
    let mut padded = section.to_vec();
    padded.extend_from_slice(&[0xAA; 40]);
    assert!(try_corrupted(&padded));
    let big = self::section("model");
    for _ in 0..300 {
        let len = rng() % big.len();
        assert!(Tokenizer::from_bytes(&big[..len]).is_err());
        let mut bad = big.to_vec();
        let at = rng() % bad.len();
        bad[at] ^= 1 << (rng() % 8);
        try_corrupted(&bad);
    }
}

/// The model section's tables: (byte offset, entry size) of each, for the edits below.
struct Layout {
    w: usize,
    v: usize,
    types: usize,
    byte_to_id: usize,
    chars: usize,
    merges: usize,
    offsets: usize,
}

fn layout(s: &[u8]) -> Layout {
    let u32_at = |at: usize| u32::from_le_bytes(s[at..at + 4].try_into().unwrap()) as usize;
    let (w, v, m, c) = (s[6] as usize, u32_at(12), u32_at(16), u32_at(20));
    let types = format::HEADER_BYTES;
    let byte_to_id = types + v;
    let chars = byte_to_id + 256 * w;
    let merges = chars + (4 + w) * c;
    let offsets = merges + 4 * w * m;
    Layout { w, v, types, byte_to_id, chars, merges, offsets }
}

#[test]
fn malformed_sections_name_the_offset() {
    let good = section("model");
    let l = layout(good);
    assert_eq!(l.w, 2);
    let with = |at: usize, value: &[u8]| {
        let mut s = good.to_vec();
        s[at..at + value.len()].copy_from_slice(value);
        Tokenizer::from_bytes(&s).err()
    };
    let bad = |offset: usize| Some(Error::BadTokenizer { offset: offset as u32 });
    let id = |id: u16| id.to_le_bytes();
    // Header.
    assert_eq!(with(0, b"SPBQ"), bad(0), "bad magic (read as a byte-level section)");
    assert_eq!(with(4, &2u16.to_le_bytes()), bad(4), "future version");
    assert_eq!(with(6, &[3]), bad(6), "id width");
    assert_eq!(with(7, &[1]), bad(7), "reserved byte");
    assert_eq!(with(8, &(1u32 << 20).to_le_bytes()), bad(8), "unknown flag");
    assert_eq!(with(8, &format::FLAG_DUMMY_PREFIX_UNLESS_SPACE.to_le_bytes()), bad(8), "unless-space without a prefix");
    assert_eq!(with(12, &0u32.to_le_bytes()), bad(12), "empty vocabulary");
    assert_eq!(with(12, &70_000u32.to_le_bytes()), bad(12), "too many ids for W = 2");
    assert_eq!(with(16, &1_000_000u32.to_le_bytes()), bad(16), "too many merges for W = 2");
    assert_eq!(with(20, &1u32.to_le_bytes()), bad(40), "counts disagree with section_len");
    assert_eq!(with(40, &0u32.to_le_bytes()), bad(40), "section_len");
    assert_eq!(with(28, &5000u32.to_le_bytes()), bad(28), "unk_id out of range");
    assert_eq!(with(28, &1u32.to_le_bytes()), bad(28), "unk_id not UNKNOWN");
    assert_eq!(with(32, &0u32.to_le_bytes()), bad(32), "bos_id not CONTROL");
    assert_eq!(with(32, &format::NO_ID.to_le_bytes()), bad(32), "add_bos without BOS");
    assert_eq!(with(36, &300u32.to_le_bytes()), bad(36), "eos_id not CONTROL");
    // Piece types.
    assert_eq!(with(l.types + 500, &[format::TYPE_USER_DEFINED]), bad(l.types + 500), "user-defined");
    assert_eq!(with(l.types + 500, &[format::TYPE_UNUSED]), bad(l.types + 500), "unused");
    assert_eq!(with(l.types + 500, &[9]), bad(l.types + 500), "unknown type");
    assert_eq!(with(l.types + 500, &[format::TYPE_CONTROL]), bad(l.types + 500), "a control piece with text");
    assert_eq!(with(l.types + 500, &[format::TYPE_BYTE]), bad(l.types + 500), "a byte piece of several bytes");
    assert_eq!(with(l.types + 1, &[format::TYPE_NORMAL]), bad(32), "BOS no longer CONTROL");
    assert_eq!(with(l.types + 3, &[format::TYPE_NORMAL]), bad(l.byte_to_id), "byte table points at a non-byte piece");
    // Byte table.
    assert_eq!(with(l.byte_to_id + 2 * 65, &id(3)), bad(l.byte_to_id + 2 * 65), "byte 65 -> <0x00>");
    assert_eq!(with(l.byte_to_id, &id(999)), bad(l.byte_to_id), "byte 0 -> a normal piece");
    // Characters: sorted, a NORMAL piece whose text is the character, ▁ present.
    let code_at = |i: usize| l.chars + (4 + l.w) * i;
    let first_code = u32::from_le_bytes(good[code_at(0)..code_at(0) + 4].try_into().unwrap());
    assert_eq!(with(code_at(1), &first_code.to_le_bytes()), bad(code_at(1)), "duplicate character");
    assert_eq!(with(code_at(0), &0xD800u32.to_le_bytes()), bad(code_at(0)), "a surrogate");
    assert_eq!(with(code_at(0), &0x20u32.to_le_bytes()), bad(code_at(0)), "a plain space");
    assert_eq!(with(code_at(0) + 4, &id(1)), bad(code_at(0) + 4), "character -> control piece");
    assert_eq!(with(code_at(0) + 4, &id(999)), bad(code_at(0) + 4), "character -> another piece's text");
    // Merges: sorted, ranks < M, ordinary pieces, result = left ++ right.
    let merge_at = |i: usize| l.merges + 4 * l.w * i;
    let entry = |i: usize| good[merge_at(i)..merge_at(i) + 4 * l.w].to_vec();
    assert_eq!(with(merge_at(1), &entry(0)), bad(merge_at(1)), "unsorted / duplicate merge");
    assert_eq!(with(merge_at(0) + 2 * l.w, &id(60_000)), bad(merge_at(0) + 2 * l.w), "rank >= M");
    assert_eq!(with(merge_at(0) + 3 * l.w, &id(3)), bad(merge_at(0) + 3 * l.w), "result is a byte piece (not left ++ right)");
    // (<s>, right) -> right: the text adds up (<s> is empty) but <s> is no ordinary piece.
    let right = u16::from_le_bytes(good[merge_at(0) + l.w..merge_at(0) + 2 * l.w].try_into().unwrap());
    let mut control = [0u8; 8];
    for (k, v) in [1u16, right, 0, right].into_iter().enumerate() {
        control[2 * k..2 * k + 2].copy_from_slice(&v.to_le_bytes());
    }
    assert_eq!(with(merge_at(0), &control), bad(merge_at(0)), "merge of a control piece");
    let result = u16::from_le_bytes(good[merge_at(0) + 3 * l.w..merge_at(0) + 4 * l.w].try_into().unwrap());
    let other = if result == 300 { 301 } else { 300 };
    assert_eq!(with(merge_at(0) + 3 * l.w, &id(other)), bad(merge_at(0) + 3 * l.w), "result's text is not left ++ right");
    assert_eq!(with(merge_at(0), &id(5000)), bad(merge_at(0)), "left out of range");
    // Offsets.
    assert_eq!(with(l.offsets, &1u32.to_le_bytes()), bad(l.offsets), "offsets[0] != 0");
    assert_eq!(with(l.offsets + 4 * 400, &0u32.to_le_bytes()), bad(l.offsets + 4 * 400), "decreasing offsets");
    assert_eq!(with(l.offsets + 4 * l.v, &0u32.to_le_bytes()), bad(l.offsets + 4 * l.v), "offsets[V] != B");
    // Nothing else: the good section loads.
    assert!(Tokenizer::from_bytes(good).is_ok());
    assert_eq!(Tokenizer::from_bytes(&good[..3]).err(), bad(3), "shorter than a magic: the byte-level reader's error");
}

#[test]
fn a_space_piece_is_required() {
    // Remove ▁ from the character table of the no-fallback section (keeping the counts right).
    let good = section("no_fallback_rew");
    let u32_at = |at: usize| u32::from_le_bytes(good[at..at + 4].try_into().unwrap()) as usize;
    let (w, v, c) = (good[6] as usize, u32_at(12), u32_at(20));
    let chars = format::HEADER_BYTES + v;
    let entry = 4 + w;
    let space = (0..c).find(|&i| u32_at(chars + entry * i) == 0x2581).unwrap();
    let mut s = good.to_vec();
    s.drain(chars + entry * space..chars + entry * (space + 1));
    s[20..24].copy_from_slice(&((c - 1) as u32).to_le_bytes());
    let len = (good.len() - entry) as u32;
    s[40..44].copy_from_slice(&len.to_le_bytes());
    assert_eq!(Tokenizer::from_bytes(&s).err(), Some(Error::BadTokenizer { offset: format::OFFSET_N_CHARS as u32 }));
}

// ---- the project's own trainer ------------------------------------------------------------------------

#[test]
fn the_trained_fixture_is_what_the_trainer_makes() {
    // `trained/` was written by `host-tools train-tokenizer` (tests/make_sp_fixtures.py); the
    // trainer is deterministic, so it must make the same bytes again.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("models/stories/stories.txt")).unwrap();
    let model = host_tools::sp_train::train_sentencepiece_bpe(&text, 600).unwrap();
    let committed = std::fs::read(fixtures().join("trained/tokenizer.model")).unwrap();
    assert!(model == committed, "the trainer's output differs from tests/fixtures/sp_tokenizer/trained; {HINT}");
    let config = std::fs::read_to_string(fixtures().join("trained/tokenizer_config.json")).unwrap();
    assert_eq!(config, host_tools::sp_train::llama_tokenizer_config_json());
}

/// The Llama parity fixture `llama_gqa` carries the tokenizer.model `tests/make_fixtures.py`
/// trained for it: converting the folder packs it, and the blob's tokenizer gives the ids
/// `sp.encode` gave there (recorded in reference.json), with BOS 1 as the prompt prefix.
#[test]
fn the_llama_fixture_converts_with_its_sentencepiece_tokenizer() {
    let dir = reference_tests::fixture_dir("llama_gqa");
    let r = reference_tests::reference(&dir);
    let blob = reference_tests::convert_dir(&dir, host_tools::convert::WeightDType::F32);
    let model = blob.model().unwrap();
    let tok = model.tokenizer().expect("llama_gqa converts with its tokenizer");
    assert!(tok.as_sentencepiece().is_some());
    assert_eq!((tok.prompt_prefix(), tok.bos_id(), tok.eos_id()), (Some(1), Some(1), Some(2)));
    let encodings = r["tokenizer"]["sp_encode"].as_object().unwrap();
    assert_eq!(encodings.len(), 3);
    for (text, want) in encodings {
        let mut out = vec![0u32; tok.max_encoded_len(text.len())];
        let n = tok.encode(text, &mut out).unwrap();
        assert_eq!(&out[..n], reference_tests::ids(want).as_slice(), "{text:?}");
        // as a prompt: BOS, then the same ids
        let mut prompt = vec![0u32; tok.max_encoded_len(text.len()) + 1];
        let m = tok.encode_prompt(text, &mut prompt).unwrap();
        assert_eq!((m, prompt[0], &prompt[1..m]), (n + 1, 1, &out[..n]), "{text:?} as a prompt");
    }
    assert_eq!(tok.encode_prompt("a", &mut []), Err(runtime::Error::BufferTooSmall { needed: 1, available: 0 }));
}

// ---- a completed vocabulary (host-tools random --preset stories15m / stories42m) ------------------

/// The 32,000-piece tokenizer `host-tools random --preset stories15m` writes: trained on the
/// repository's text until no pair is left, then completed (`host_tools::sp_train`, step 5).
/// `completed.json` has sentencepiece's and transformers' ids for it (the model itself is not
/// committed: it is made again here, and its digest must be the one the ids were made with).
#[test]
fn a_completed_vocabulary_encodes_as_sentencepiece_and_transformers_do() {
    let path = fixtures().join("completed.json");
    let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}; {HINT}", path.display()))).unwrap();
    let text = host_tools::random::TOKENIZER_TEXT.join("\n");
    let model = host_tools::sp_train::train_sentencepiece_bpe(&text, 32000).unwrap();
    let hash = model.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    assert!(
        (model.len() as u64, format!("{hash:016x}").as_str()) == (case["model_bytes"].as_u64().unwrap(), case["model_hash"].as_str().unwrap()),
        "the trainer makes another 32,000-piece model than completed.json was made from; {HINT} --completed-only"
    );
    let config = host_tools::sp_pack::TokenizerConfig::parse(&host_tools::sp_train::llama_tokenizer_config_json()).unwrap();
    let parsed = host_tools::sp_model::SpModel::parse(&model).unwrap();
    let section = host_tools::sp_pack::SpTables::from_model(&parsed, &config).unwrap().section().unwrap();
    let tok = Tokenizer::from_bytes(&section).unwrap();
    assert_eq!(tok.vocab_size(), 32000);
    let (sp, hf) = (case["encode"].as_array().unwrap(), case["transformers_ids"].as_array().unwrap());
    let mut failures = Vec::new();
    for (i, text) in strings().into_iter().enumerate() {
        let (want, got) = (ids(&sp[i]), encode(&tok, text));
        if want != got {
            failures.push(format!("string {i} {text:?}:\n  sentencepiece {}\n  runtime       {}", show(&tok, &want), show(&tok, &got)));
        }
        // transformers: BOS, then the same ids (but for its Metaspace conversion's leading space)
        let mut ours = vec![tok.prompt_prefix().unwrap()];
        ours.extend(got);
        if !text.starts_with([' ', '\u{2581}']) {
            assert_eq!(ids(&hf[i]), ours, "transformers, string {i} {text:?}");
        }
    }
    assert!(failures.is_empty(), "{} of {} strings differ ({HINT}):\n{}", failures.len(), strings().len(), failures.join("\n"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for (file, expected) in case["files"].as_object().unwrap() {
        let ids = encode(&tok, &std::fs::read_to_string(root.join(file)).unwrap());
        let hash = ids.iter().fold(0u64, |h, &id| h.wrapping_mul(31).wrapping_add(u64::from(id)));
        assert_eq!((ids.len() as u64, format!("{hash:016x}")), (expected["n"].as_u64().unwrap(), expected["hash"].as_str().unwrap().to_string()), "{file}");
    }
    // the completed pieces are used: some ids lie above the ~16,100 trained pieces and below the
    // single characters at the end
    assert!(sp.iter().flat_map(|ids| ids.as_array().unwrap()).any(|id| (16_500..31_500).contains(&id.as_u64().unwrap())));
}
