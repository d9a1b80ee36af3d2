//! Vocabularies for the exports: the byte tokenizer as a standard `tokenizer.json`, the
//! byte-level alphabet, a tokenizer's vocabulary in GGUF's `tokenizer.ggml.*` form, and the
//! bytes of text each token stands for (bits per byte).
//!
//! A byte-level BPE (GPT-2's scheme, which `bpe:N` trains) writes every byte as one printable
//! character: the printable Latin-1 bytes `!`..`~`, `¡`..`¬`, `®`..`ÿ` stand for themselves,
//! the other 68 bytes, in order, for U+0100 onwards. Its tokens are strings over those 256
//! characters, so the byte tokenizer is the byte-level BPE with the 256 single characters as
//! its vocabulary (token b is byte b) and no merges.

use crate::Error;
use crate::tokenizer::Tokenizer;
use serde_json::Value;

/// Whether byte `b` stands for itself in the byte-level alphabet.
fn printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that stands for byte `b` in byte-level BPE vocabularies.
pub fn byte_level_char(b: u8) -> char {
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// The byte a byte-level character stands for (`None`: not one of the 256).
fn byte_of(c: char) -> Option<u8> {
    let n = c as u32;
    if n < 256 && printable(n as u8) {
        return Some(n as u8);
    }
    let rank = n.checked_sub(256)?;
    (0..=255u8).filter(|&x| !printable(x)).nth(rank as usize)
}

/// The byte tokenizer (token b is byte b) as a `tokenizer.json` that Hugging Face's tokenizers
/// read: a byte-level BPE with the 256 byte characters as its vocabulary, no merges, GPT-2's
/// pre-tokenizing split (which cannot change single-byte ids) and the byte-level decoder.
pub fn bytes_tokenizer_json() -> String {
    let vocab: serde_json::Map<String, Value> =
        (0..=255u8).map(|b| (byte_level_char(b).to_string(), Value::from(b as u32))).collect();
    let level = serde_json::json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true
    });
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": level,
        "post_processor": null,
        "decoder": level,
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []
        }
    });
    // Through the library, so the file is in its own canonical (pretty) form.
    let tk: tokenizers::Tokenizer = json.to_string().parse().expect("the byte tokenizer's JSON is a tokenizer");
    tk.to_string(true).expect("a tokenizer serialises")
}

/// The parts of a `tokenizer.json` the GGUF vocabulary needs.
struct Parsed {
    /// Token strings by id.
    tokens: Vec<String>,
    /// Per id: `None` for the model's tokens, `Some(special)` for added ones.
    added: Vec<Option<bool>>,
    merges: Vec<String>,
    byte_level: bool,
    /// The pre-tokenizer is exactly byte-level with GPT-2's split.
    gpt2_split: bool,
    byte_fallback: bool,
    model: String,
}

fn parse(json: &str, vocab_size: usize) -> Result<Parsed, Error> {
    let bad = |m: String| Error::Config(format!("the tokenizer's JSON: {m}"));
    let v: Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let model = v["model"]["type"].as_str().unwrap_or("?").to_string();
    let mut tokens = vec![None; vocab_size];
    let mut added = vec![None; vocab_size];
    let mut put = |id: u64, s: &str, special: Option<bool>| -> Result<(), Error> {
        let slot = tokens
            .get_mut(id as usize)
            .ok_or_else(|| bad(format!("token {s:?} has the id {id}, past {vocab_size}")))?;
        *slot = Some(s.to_string());
        if special.is_some() {
            added[id as usize] = special;
        }
        Ok(())
    };
    if let Some(map) = v["model"]["vocab"].as_object() {
        for (s, id) in map {
            put(id.as_u64().ok_or_else(|| bad(format!("token {s:?} has no integer id")))?, s, None)?;
        }
    }
    for t in v["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(s)) = (t["id"].as_u64(), t["content"].as_str()) else {
            return Err(bad("an added token without id or content".into()));
        };
        put(id, s, Some(t["special"].as_bool().unwrap_or(false)))?;
    }
    let tokens = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.ok_or_else(|| bad(format!("no token has the id {i}: GGUF needs every id below {vocab_size}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let merges = v["model"]["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(pair) => match &pair[..] {
                [Value::String(a), Value::String(b)] => Ok(format!("{a} {b}")),
                _ => Err(bad(format!("a merge that is not a pair of strings: {m}"))),
            },
            _ => Err(bad(format!("a merge that is not a pair of strings: {m}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let is_level = |p: &Value| p["type"] == "ByteLevel";
    let pre = &v["pre_tokenizer"];
    let pre_level = is_level(pre) || pre["pretokenizers"].as_array().is_some_and(|ps| ps.iter().any(is_level));
    Ok(Parsed {
        tokens,
        added,
        merges,
        byte_level: pre_level && is_level(&v["decoder"]),
        gpt2_split: is_level(pre) && pre["use_regex"].as_bool().unwrap_or(true) && v["normalizer"].is_null(),
        byte_fallback: v["model"]["byte_fallback"].as_bool().unwrap_or(false),
        model,
    })
}

/// A vocabulary in GGUF's terms (`tokenizer.ggml.*`, llama.cpp's `gpt2` byte-level BPE).
pub(crate) struct GgufVocab {
    /// `tokenizer.ggml.tokens`, by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: 1 normal, 3 control (special added tokens), 4 user-defined.
    pub types: Vec<i32>,
    /// `tokenizer.ggml.merges`: "left right", by rank.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.pre`: llama.cpp's name of the pre-tokenizing split.
    pub pre: &'static str,
    /// An end-of-text token, where the tokenizer has one of the usual ones as a special token.
    pub eos: Option<u32>,
    /// What a user should know (a split llama.cpp may not reproduce).
    pub warning: Option<String>,
}

/// Special tokens taken as the end of a text, in this order.
const EOS_NAMES: [&str; 4] = ["<|endoftext|>", "</s>", "<|end_of_text|>", "<|im_end|>"];

/// The tokenizer as llama.cpp's `gpt2` vocabulary: bytes and byte-level BPEs (GPT-2's scheme,
/// what `bpe:N` trains); other kinds are refused with the reason.
pub(crate) fn gguf_vocab(tk: &Tokenizer) -> Result<GgufVocab, Error> {
    let Some(json) = tk.json() else {
        return Ok(GgufVocab {
            tokens: (0..=255u8).map(|b| byte_level_char(b).to_string()).collect(),
            types: vec![1; 256],
            merges: Vec::new(),
            pre: "gpt-2",
            eos: None,
            warning: None,
        });
    };
    let p = parse(json, tk.vocab_size())?;
    if p.model != "BPE" || !p.byte_level || p.byte_fallback {
        return Err(Error::Config(format!(
            "GGUF export takes byte tokens and byte-level BPE tokenizers (llama.cpp's gpt2 vocabulary); this tokenizer is {}{}",
            tk.describe(),
            if p.byte_fallback {
                " with byte fallback (a SentencePiece-style vocabulary)"
            } else {
                " without the byte-level pre-tokenizer and decoder"
            }
        )));
    }
    let types = p.added.iter().map(|a| match a {
        None => 1,
        Some(true) => 3,
        Some(false) => 4,
    });
    let eos = EOS_NAMES.iter().find_map(|name| {
        p.tokens.iter().zip(&p.added).position(|(t, a)| t == name && *a == Some(true)).map(|i| i as u32)
    });
    let warning = (!p.gpt2_split).then(|| {
        "the tokenizer's pre-tokenizer is not GPT-2's plain byte-level split; the GGUF file names llama.cpp's `default` split, which may cut some texts into other tokens than tokenizer.json does".to_string()
    });
    Ok(GgufVocab {
        types: types.collect(),
        tokens: p.tokens,
        merges: p.merges,
        pre: if p.gpt2_split { "gpt-2" } else { "default" },
        eos,
        warning,
    })
}

/// The number of bytes of text each token id stands for (bits per byte divide by their sum):
/// 1 for byte tokens; for a byte-level BPE, the byte characters of its string (an added token:
/// the bytes of its text); for other tokenizers, the bytes of the token decoded alone.
pub fn token_byte_lengths(tk: &Tokenizer) -> Result<Vec<u32>, Error> {
    let Some(json) = tk.json() else { return Ok(vec![1; 256]) };
    let p = parse(json, tk.vocab_size())?;
    let mut out = Vec::with_capacity(p.tokens.len());
    for (id, (t, added)) in p.tokens.iter().zip(&p.added).enumerate() {
        let n = if added.is_some() {
            t.len()
        } else if p.byte_level && t.chars().all(|c| byte_of(c).is_some()) {
            t.chars().count()
        } else {
            tk.decode(&[id as u32])?.len()
        };
        out.push(n as u32);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_alphabet_is_a_bijection_and_gpt2s() {
        let chars: Vec<char> = (0..=255u8).map(byte_level_char).collect();
        let mut sorted = chars.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 256);
        assert_eq!(chars[b'a' as usize], 'a');
        assert_eq!(chars[b' ' as usize], 'Ġ');
        assert_eq!(chars[b'\n' as usize], 'Ċ');
        assert_eq!(chars[0], 'Ā');
        for b in 0..=255u8 {
            assert_eq!(byte_of(byte_level_char(b)), Some(b));
        }
        // The library's own alphabet is the same set.
        let lib = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet();
        assert!(chars.iter().all(|c| lib.contains(c)) && lib.len() == 256);
    }

    #[test]
    fn the_byte_tokenizer_json_encodes_bytes_as_their_ids() {
        let tk = Tokenizer::from_json(&bytes_tokenizer_json(), "bytes").unwrap();
        assert_eq!(tk.vocab_size(), 256);
        let text = "héllo  wörld\n\ttabs, \u{1F600} and\r\n\u{0}nul".as_bytes();
        assert_eq!(tk.encode(text).unwrap(), Tokenizer::bytes().encode(text).unwrap());
        assert_eq!(tk.decode(&tk.encode(text).unwrap()).unwrap().as_bytes(), text);
        assert_eq!(token_byte_lengths(&tk).unwrap(), vec![1; 256]);
    }

    #[test]
    fn bpe_vocabularies_for_gguf_and_byte_counts() {
        let text = "the cat sat on the mat; the cat ate the rat. ".repeat(50);
        let tk = Tokenizer::train_bpe(&text, 300).unwrap();
        let v = gguf_vocab(&tk).unwrap();
        assert_eq!(v.tokens.len(), tk.vocab_size());
        assert_eq!(v.pre, "gpt-2");
        assert!(!v.merges.is_empty() && v.merges.iter().all(|m| m.split(' ').count() == 2));
        let lens = token_byte_lengths(&tk).unwrap();
        // Every token's bytes are the bytes its decoding gives, for tokens of whole characters.
        let ids = tk.encode(text.as_bytes()).unwrap();
        let total: u32 = ids.iter().map(|&i| lens[i as usize]).sum();
        assert_eq!(total as usize, text.len());
        let b = gguf_vocab(&Tokenizer::bytes()).unwrap();
        assert_eq!((b.tokens.len(), b.merges.len(), b.tokens[32].as_str()), (256, 0, "Ġ"));
    }
}
