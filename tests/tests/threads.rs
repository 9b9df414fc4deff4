//! `host --threads`: a session run on several threads gives the one-thread bits. The matrix
//! products (`kernels::linear_par`: prefill split by tokens, or f32/f16 by weight rows where
//! the threads lend buffers), prefill's attention (shared out by query) and the MLP's
//! activation (`kernels::activate_par`) are split; every logit of a prefill and of the decode
//! steps after it must be bit-identical, for every weight and KV dtype, on a GPT-2 shape and
//! on a GPT-Neo shape whose local layers' ring is shorter than the prompt (attention then
//! stays on one thread).

use host_tools::convert::{convert, ConvertOptions, WeightDType};
use host_tools::random::{write_random, RandomShape};
use runtime::kernels::Parallel;
use runtime::{KvDType, Model, Session, SessionSizes};

/// Plain scoped threads, tasks in reverse so that the last ones start first; with `.1`, each
/// task gets a buffer of NaN (f32/f16 prefill is then split by weight rows, and an output it
/// forgot would show), else none (split by tokens).
struct Scoped(usize, bool);

impl Parallel for Scoped {
    fn threads(&self) -> usize {
        self.0
    }
    fn with_buffer(&self, len: usize, f: &mut dyn FnMut(&mut [f32])) {
        if self.1 {
            f(&mut vec![f32::NAN; len])
        } else {
            f(&mut [])
        }
    }
    fn run(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        std::thread::scope(|s| {
            for i in (0..n).rev() {
                s.spawn(move || task(i));
            }
        });
    }
}

/// Every position's logits: a prefill of `prompt`, then decoding `rest`.
fn logits(model: &Model<'_>, prompt: &[u32], rest: &[u32], kv: KvDType, batch: usize, par: Option<&dyn Parallel>) -> Vec<u32> {
    let cfg = model.config();
    let sizes = SessionSizes::with_kv(cfg, cfg.n_ctx(), batch, kv);
    let (mut arena, mut cache) = (vec![0.0f32; sizes.arena_len], vec![0.0f32; sizes.kv_len]);
    let mut s = Session::with_kv_dtype(model, &mut arena, &mut cache, cfg.n_ctx(), kv).unwrap();
    if let Some(p) = par {
        s.set_parallel(p);
    }
    let mut out = Vec::new();
    s.prefill_each(prompt, |_, l| out.extend(l.iter().map(|v| v.to_bits()))).unwrap();
    for &t in rest {
        out.extend(s.decode(t).unwrap().iter().map(|v| v.to_bits()));
    }
    out
}

fn check(name: &str, shape: RandomShape, prompt_len: usize) {
    let dir = std::env::temp_dir().join(format!("gpt2-mcu-threads-{name}-{}", std::process::id()));
    write_random(&dir, shape, 7).unwrap();
    let v = shape.vocab_size;
    let ids: Vec<u32> = (0..prompt_len as u32 + 4).map(|i| i.wrapping_mul(2654435761).wrapping_add(i) % v).collect();
    let (prompt, rest) = ids.split_at(prompt_len);
    for dtype in [WeightDType::F32, WeightDType::F16, WeightDType::Q8, WeightDType::Q4] {
        let blob = convert(&dir, &ConvertOptions { dtype, ..ConvertOptions::default() }).unwrap().blob;
        let model = Model::from_blob(&blob).unwrap();
        for kv in [KvDType::F32, KvDType::F16, KvDType::I8] {
            // one batch for the whole prompt, and batches that split it
            for batch in [prompt_len, 48] {
                let one = logits(&model, prompt, rest, kv, batch, None);
                for (threads, lend) in [(2, false), (3, false), (2, true), (3, true)] {
                    let many = logits(&model, prompt, rest, kv, batch, Some(&Scoped(threads, lend)));
                    assert!(one == many, "{name} {dtype:?} kv {kv:?} batch {batch}: {threads} threads (buffers: {lend}) differ from one");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn threads_give_the_one_thread_bits_gpt2() {
    // 128 tokens × MLP 512 (activation split), attention 128 · 128 · 128 MACs (split)
    let shape = RandomShape { n_inner: Some(512), ..RandomShape::gpt2(2, 128, 4, 512, 160) };
    check("gpt2", shape, 128);
}

#[test]
fn threads_give_the_one_thread_bits_gpt_neo_ring() {
    // local layers with a window of 32 < the 96-token prompt: their attention stays serial
    let shape = RandomShape { n_inner: Some(512), ..RandomShape::gpt_neo(2, 128, 4, 512, 160, 32) };
    check("neo", shape, 96);
}

#[test]
fn threads_give_the_one_thread_bits_llama() {
    // grouped-query attention (8 heads on 2) split across tasks, RoPE, the gated MLP's rows split
    // (128 tokens × 2 · 256), an untied head
    let shape = RandomShape { tied: false, ..RandomShape::llama(2, 128, 8, 2, 256, 512, 160) };
    check("llama", shape, 128);
}
