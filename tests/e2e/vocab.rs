//! The token lists of llama.cpp's `ggml-vocab-*.gguf` files, read from
//! their GGUF metadata (the format: ggml's docs/gguf.md), for t23.

/// One vocabulary: its tokenizer model and its normal tokens, decoded to
/// text (byte-level BPE mapped back to bytes; SentencePiece's `▁` to a
/// space).
pub struct Vocab {
    pub model: String,
    pub tokens: Vec<String>,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or_else(|| format!("GGUF cut short at byte {}", self.at))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u64()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// A metadata value, as far as t23 needs it.
enum Meta {
    Str(Vec<u8>),
    Strs(Vec<Vec<u8>>),
    Ints(Vec<i64>),
    Other,
}

fn scalar_size(t: u32) -> Option<usize> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

fn value(r: &mut Reader, t: u32) -> Result<Meta, String> {
    match t {
        8 => Ok(Meta::Str(r.string()?)),
        9 => {
            let et = r.u32()?;
            let n = r.u64()? as usize;
            match et {
                8 => (0..n)
                    .map(|_| r.string())
                    .collect::<Result<_, _>>()
                    .map(Meta::Strs),
                4 | 5 => (0..n)
                    .map(|_| r.u32().map(|v| v as i32 as i64))
                    .collect::<Result<_, _>>()
                    .map(Meta::Ints),
                _ => {
                    let size = scalar_size(et).ok_or(format!("array of type {et}"))?;
                    r.take(size * n)?;
                    Ok(Meta::Other)
                }
            }
        }
        _ => {
            r.take(scalar_size(t).ok_or(format!("value of type {t}"))?)?;
            Ok(Meta::Other)
        }
    }
}

/// GPT-2's byte-to-character table, reversed.
fn byte_of_char() -> std::collections::HashMap<char, u8> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter()
        .zip(&cs)
        .map(|(b, c)| (char::from_u32(*c).unwrap(), *b as u8))
        .collect()
}

/// Read `path`'s tokenizer model and normal tokens (type 1, or all when
/// the file has no types).
pub fn read(path: &std::path::Path) -> Result<Vocab, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut r = Reader { b: &b, at: 0 };
    if r.take(4)? != b"GGUF" {
        return Err(format!("{}: not a GGUF file", path.display()));
    }
    let _version = r.u32()?;
    let _tensors = r.u64()?;
    let kvs = r.u64()?;
    let (mut model, mut tokens, mut types) = (String::new(), Vec::new(), Vec::new());
    for _ in 0..kvs {
        let key = r.string()?;
        let t = r.u32()?;
        match (key.as_slice(), value(&mut r, t)?) {
            (b"tokenizer.ggml.model", Meta::Str(s)) => model = String::from_utf8_lossy(&s).into(),
            (b"tokenizer.ggml.tokens", Meta::Strs(s)) => tokens = s,
            (b"tokenizer.ggml.token_type", Meta::Ints(v)) => types = v,
            _ => {}
        }
    }
    let bytes = byte_of_char();
    let decode = |raw: &[u8]| -> String {
        let t = String::from_utf8_lossy(raw);
        if model == "gpt2" {
            let b: Option<Vec<u8>> = t.chars().map(|c| bytes.get(&c).copied()).collect();
            match b {
                Some(b) => String::from_utf8_lossy(&b).into(),
                None => t.into(),
            }
        } else {
            t.replace('\u{2581}', " ")
        }
    };
    let tokens = tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| types.get(*i).is_none_or(|t| *t == 1))
        .map(|(_, raw)| decode(raw))
        .collect();
    Ok(Vocab { model, tokens })
}
