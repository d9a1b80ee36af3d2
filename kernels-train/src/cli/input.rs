//! What `--data`, `--val-data` and `--eval` name: a text read into memory, or token shards read
//! by position; and the corpus a run trains on.

use crate::Error;
use crate::data::{self, Corpus, Tokens};
use crate::shards::{self, Shards};
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

/// A text in memory or shards on disk, with where it came from.
pub(super) enum Input {
    /// A text file's bytes (or the built-in text).
    Text(Vec<u8>, String),
    /// Token shards, and the directory they are in when `--data` named one.
    Shards(Shards, String, Option<PathBuf>),
}

impl Input {
    /// What `spec` names (`None`: the built-in text): shards if it is a directory, a glob, or a
    /// file that starts with a shard's magic; a text file otherwise.
    pub(super) fn open(spec: Option<&Path>) -> Result<Input, Error> {
        let Some(spec) = spec else {
            return Ok(Input::Text(data::built_in_text(), "built-in project text".into()));
        };
        let shown = spec.display().to_string();
        let is_glob = !spec.exists() && shown.contains(['*', '?', '[']);
        if spec.is_dir() || is_glob || shards::is_shard(spec) {
            let files = shards::resolve(spec)?;
            let s = Shards::open(&files)?;
            let what =
                format!("{shown} ({} shard{}, {} tokens)", s.files(), if s.files() == 1 { "" } else { "s" }, s.len());
            return Ok(Input::Shards(s, what, spec.is_dir().then(|| spec.to_path_buf())));
        }
        Ok(Input::Text(data::read_text(spec)?, shown))
    }

    /// Where it came from.
    pub(super) fn source(&self) -> &str {
        match self {
            Input::Text(_, s) | Input::Shards(_, s, _) => s,
        }
    }

    /// The tokenizer `--tokenize-to` left in a shard directory (`tokenizer.json`), if any.
    pub(super) fn directory_tokenizer(&self) -> Result<Option<Tokenizer>, Error> {
        match self {
            Input::Shards(_, _, Some(dir)) if dir.join("tokenizer.json").is_file() => {
                Tokenizer::open(&dir.join("tokenizer.json")).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The tokens, tokenized here by `tk` for a text.
    pub(super) fn tokens(self, tk: &Tokenizer) -> Result<Tokens, Error> {
        match self {
            Input::Text(bytes, source) => Tokens::text(&bytes, tk).map_err(|e| Error::Data(format!("{source}: {e}"))),
            Input::Shards(s, _, _) => Tokens::shards(s, tk),
        }
    }
}

/// The corpus of a run: validation from `val` (`--val-data`), else the last of several shards,
/// else the last 5% of the tokens.
pub(super) fn corpus(data: Input, val: Option<Input>, tk: Tokenizer) -> Result<Corpus, Error> {
    let source = match &val {
        Some(v) => format!("{}; validation {}", data.source(), v.source()),
        None => data.source().to_string(),
    };
    match (data, val) {
        (d, Some(v)) => Ok(Corpus::with_validation(d.tokens(&tk)?, v.tokens(&tk)?, tk, &source)),
        (Input::Shards(s, _, _), None) => match s.split_last() {
            (train, Some(last)) => {
                let (train, last) = (Tokens::shards(train, &tk)?, Tokens::shards(last, &tk)?);
                Ok(Corpus::with_validation(train, last, tk, &format!("{source}; validation: the last shard")))
            }
            (one, None) => Ok(Corpus::held_out(Tokens::shards(one, &tk)?, tk, &source)),
        },
        (Input::Text(bytes, _), None) => Corpus::new(&bytes, &source, tk),
    }
}

/// The text files `--tokenize-to` reads from a `--data` value: a file, a directory's files
/// (sorted, hidden ones left out) or a glob's matches. Shards among them are refused, and so is
/// anything that is not a regular file.
pub(super) fn text_files(spec: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut files: Vec<PathBuf> = if spec.is_dir() {
        std::fs::read_dir(spec)
            .map_err(|e| Error::Data(format!("cannot list {}: {e}", spec.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
            .collect()
    } else {
        shards::resolve(spec)?
    };
    files.sort();
    if files.is_empty() {
        return Err(Error::Data(format!("{} holds no files to tokenize", spec.display())));
    }
    if let Some(s) = files.iter().find(|f| shards::is_shard(f)) {
        return Err(Error::Data(format!("{} is a token shard already, not text to tokenize", s.display())));
    }
    // Each a regular file, before anything is written (they are opened again to be read).
    for f in &files {
        crate::files::open_regular(f, "the text").map_err(Error::Data)?;
    }
    Ok(files)
}
