//! `.npy` reading and writing (float32) through `npyz`.

use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result};
use npyz::WriterBuilder;

/// Writes `data` (row-major, `shape`) as a float32 `.npy` file.
pub fn write_f32(path: &Path, shape: &[u64], data: &[f32]) -> Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = npyz::WriteOptions::new().default_dtype().shape(shape).writer(BufWriter::new(file)).begin_nd()?;
    w.extend(data.iter().copied())?;
    w.finish()?;
    Ok(())
}

/// Reads a float32 `.npy` file: `(shape, data)`.
pub fn read_f32(path: &Path) -> Result<(Vec<u64>, Vec<f32>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let npy = npyz::NpyFile::new(&bytes[..]).with_context(|| format!("{} is not a .npy file", path.display()))?;
    let shape = npy.shape().to_vec();
    let data = npy.into_vec::<f32>().with_context(|| format!("{} does not hold float32", path.display()))?;
    Ok((shape, data))
}
