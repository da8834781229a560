//! Randomness, injected: protocol functions that need fresh bytes (nonces, blob ids, new
//! secrets) take an [`Entropy`] so tests can pin them. [`OsEntropy`] is the real source
//! (`getrandom`: the OS natively, `crypto.getRandomValues` in the browser).

/// The platform's random source failed (it does not, on any supported platform, in practice).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the platform random source failed: {0}")]
pub struct EntropyError(pub String);

/// A source of random bytes.
pub trait Entropy {
    /// Fills `dest` with random bytes.
    fn fill(&mut self, dest: &mut [u8]) -> Result<(), EntropyError>;
}

/// The operating system's (or browser's) cryptographically secure random source.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&mut self, dest: &mut [u8]) -> Result<(), EntropyError> {
        getrandom::fill(dest).map_err(|e| EntropyError(e.to_string()))
    }
}

/// Replays fixed bytes, for test vectors. Fails when it runs out.
#[derive(Debug, Clone)]
pub struct FixedEntropy {
    bytes: Vec<u8>,
    pos: usize,
}

impl FixedEntropy {
    /// An entropy source that hands out `bytes` in order.
    pub fn new(bytes: Vec<u8>) -> Self {
        FixedEntropy { bytes, pos: 0 }
    }
}

impl Entropy for FixedEntropy {
    fn fill(&mut self, dest: &mut [u8]) -> Result<(), EntropyError> {
        let end = self.pos + dest.len();
        let src = self.bytes.get(self.pos..end).ok_or_else(|| EntropyError("fixed entropy exhausted".into()))?;
        dest.copy_from_slice(src);
        self.pos = end;
        Ok(())
    }
}

/// Returns `N` random bytes.
pub fn random_bytes<const N: usize>(rng: &mut dyn Entropy) -> Result<[u8; N], EntropyError> {
    let mut out = [0u8; N];
    rng.fill(&mut out)?;
    Ok(out)
}
