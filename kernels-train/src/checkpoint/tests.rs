use super::*;
use crate::params;
use crate::rng::Rng;
use std::path::{Path, PathBuf};

fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kt-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sample(seed: u64) -> Checkpoint {
    let model = ModelConfig::new(8, 1, 2, 1, 4);
    let init = params::init(&model, seed).unwrap();
    Checkpoint {
        model,
        step: 17,
        seed,
        m: init.as_ref().map(|p| p.iter().map(|x| x * 0.5).collect()),
        v: init.as_ref().map(|p| p.iter().map(|x| x * x).collect()),
        params: init,
        moments8: None,
        scaler: None,
        train_history: vec![(0, 5.5), (1, 5.0)],
        val_history: vec![(1, 5.1)],
        tokenizer: crate::tokenizer::Tokenizer::bytes(),
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn round_trip_and_atomic_write() {
    let c = sample(3);
    let dir = scratch_dir("round-trip");
    let path = dir.join("model.safetensors");
    save(&path, &c).unwrap();
    assert_eq!(load(&path).unwrap(), c);
    // The file is plain safetensors with the weights under their names.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("layers.0.attention.wq.weight").unwrap().shape(), &[8, 8]);
    // Leftover temporaries are not left behind.
    assert_eq!(names_in(&dir), ["model.safetensors"]);
    let mut other = c.model.clone();
    other.dim = 16;
    assert!(check_compatible(&c.model, &other).unwrap_err().to_string().contains("dim 8 (checkpoint) vs 16 (asked)"));
    assert!(matches!(load(&dir.join("missing.safetensors")), Err(Error::Checkpoint(_))));
    std::fs::write(dir.join("junk.safetensors"), b"not a checkpoint").unwrap();
    assert!(matches!(load(&dir.join("junk.safetensors")), Err(Error::Corrupt(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_loss_scaler_state_round_trips_and_is_checked() {
    use crate::scaler::ScalerState;
    let dir = scratch_dir("scaler");
    let path = dir.join("model.safetensors");
    let mixed = Checkpoint {
        scaler: Some(ScalerState { scale: 2048.0, clean_steps: 17, skipped: 4, last_skipped: false }),
        ..sample(5)
    };
    save(&path, &mixed).unwrap();
    assert_eq!(load(&path).unwrap(), mixed);
    // An f32 checkpoint has no scaler entries and loads without one.
    save(&path, &sample(5)).unwrap();
    assert_eq!(load(&path).unwrap().scaler, None);
    // A scale that is not a power of two in range is refused as corrupt (checksum recomputed).
    let bad = Checkpoint { scaler: Some(ScalerState { scale: 3.0, ..ScalerState::default() }), ..sample(5) };
    save(&path, &bad).unwrap();
    assert!(matches!(load(&path), Err(Error::Corrupt(m)) if m.contains("loss scale")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_non_finite_state_is_never_saved_as_a_checkpoint() {
    let dir = scratch_dir("non-finite");
    let path = dir.join("model.safetensors");
    let good = sample(4);
    save(&path, &good).unwrap();
    let before = std::fs::read(&path).unwrap();
    for poison in [f32::NAN, f32::INFINITY] {
        for which in 0..3 {
            let mut bad = good.clone();
            let t = match which {
                0 => &mut bad.params.layers[0].w2,
                1 => &mut bad.m.embedding,
                _ => &mut bad.v.final_norm,
            };
            t[1] = poison;
            let e = save(&path, &bad).unwrap_err();
            assert!(matches!(e, Error::Diverged(_)), "{e}");
            assert_eq!(std::fs::read(&path).unwrap(), before, "the good checkpoint was touched");
            // The diverged record is written, elsewhere, and reads back as it was.
            let elsewhere = diverged_path(&path);
            save_diverged(&elsewhere, &bad).unwrap();
            let back = load(&elsewhere).unwrap();
            assert!(back.non_finite().is_some());
        }
    }
    assert_eq!(names_in(&dir), ["model.diverged.safetensors", "model.safetensors"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every bit of the header (length prefix, JSON, padding) and a random sample of the data's
/// bits, flipped one at a time: each damaged file is refused as damaged or unreadable, or reads
/// back exactly as saved; never a panic, never different values.
#[test]
fn single_bit_flips_are_rejected_or_harmless() {
    let dir = scratch_dir("bit-flips");
    let path = dir.join("model.safetensors");
    let c = sample(5);
    save(&path, &c).unwrap();
    let good = std::fs::read(&path).unwrap();
    let header_end = 8 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let seed = std::env::var("KERNELS_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("bit flips: KERNELS_TEST_SEED={seed}");
    let mut rng = Rng::new(seed);
    let mut bits: Vec<usize> = (0..header_end * 8).collect();
    bits.extend((0..3000).map(|_| header_end * 8 + rng.below(((good.len() - header_end) * 8) as u64) as usize));
    let (mut rejected, mut same) = (0, 0);
    let mut bytes = good.clone();
    for bit in bits {
        bytes[bit / 8] ^= 1 << (bit % 8);
        let result = from_bytes(&bytes, "flipped");
        bytes[bit / 8] ^= 1 << (bit % 8);
        match result {
            Err(Error::Corrupt(_) | Error::Checkpoint(_)) => rejected += 1,
            Err(e) => panic!("bit {bit}: unexpected error kind: {e}"),
            Ok(back) => {
                assert_eq!(back, c, "bit {bit} (byte {}) changed the checkpoint silently", bit / 8);
                same += 1;
            }
        }
    }
    eprintln!("{rejected} flips rejected, {same} harmless (header {header_end} bytes, file {})", good.len());
    assert!(rejected > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file whose checksum is right but whose metadata is absurd (as a crafted file would be) is
/// refused before anything is allocated for it.
#[test]
fn crafted_metadata_is_refused_before_allocation() {
    let dir = scratch_dir("crafted");
    let path = dir.join("model.safetensors");
    let c = sample(6);
    save(&path, &c).unwrap();
    let good = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    let data = &good[8 + n..];
    let header: serde_json::Value = serde_json::from_slice(&good[8..8 + n]).unwrap();
    // Re-signs a changed header: the checksum is recomputed, so only the bounds can refuse it.
    let craft = |change: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| -> Result<Checkpoint, Error> {
        let mut h = header.as_object().unwrap().clone();
        change(&mut h);
        let meta: std::collections::BTreeMap<String, String> =
            serde_json::from_value(h["__metadata__"].clone()).unwrap();
        let st_tensors: Vec<(String, Vec<usize>, std::ops::Range<usize>)> = h
            .iter()
            .filter(|(k, _)| k.as_str() != "__metadata__")
            .map(|(k, v)| {
                let shape = serde_json::from_value(v["shape"].clone()).unwrap();
                let o: Vec<usize> = serde_json::from_value(v["data_offsets"].clone()).unwrap();
                (k.clone(), shape, o[0]..o[1])
            })
            .collect();
        let sum = checksum(
            &meta,
            st_tensors.iter().map(|(name, shape, r)| TensorBytes {
                name,
                dtype: "F32",
                shape,
                data: data.get(r.clone()).unwrap_or(&[]),
            }),
        );
        let mut meta = meta;
        meta.insert("checksum".into(), sum);
        h.insert("__metadata__".into(), serde_json::json!(meta));
        let mut hb = serde_json::to_vec(&h).unwrap();
        hb.resize(hb.len().next_multiple_of(8), b' ');
        let mut file = (hb.len() as u64).to_le_bytes().to_vec();
        file.extend(hb);
        file.extend(data);
        std::fs::write(&path, file).unwrap();
        load(&path)
    };
    let set_config = |key: &'static str, value: serde_json::Value| {
        move |h: &mut serde_json::Map<String, serde_json::Value>| {
            let meta = h["__metadata__"].as_object_mut().unwrap();
            let mut cfg: serde_json::Value = serde_json::from_str(meta["config"].as_str().unwrap()).unwrap();
            cfg[key] = value.clone();
            meta.insert("config".into(), cfg.to_string().into());
        }
    };
    // Unchanged, it loads: the re-signing is faithful.
    assert_eq!(craft(&|_| {}).unwrap(), c);
    for (what, result) in [
        ("heads 0", craft(&set_config("heads", 0.into()))),
        ("layers 100000000", craft(&set_config("layers", 100_000_000.into()))),
        ("layers 2 (tensors for 1)", craft(&set_config("layers", 2.into()))),
        ("norm_eps NaN", craft(&set_config("norm_eps", "NaN".into()))),
        ("norm_eps -1", craft(&set_config("norm_eps", (-1.0).into()))),
        ("rope_base 0", craft(&set_config("rope_base", 0.0.into()))),
        ("seq_len 2^40", craft(&set_config("seq_len", (1u64 << 40).into()))),
        (
            "step 2^40",
            craft(&|h| {
                h["__metadata__"]["step"] = "1099511627776".into();
            }),
        ),
        (
            "seed not a number",
            craft(&|h| {
                h["__metadata__"]["seed"] = "x".into();
            }),
        ),
        (
            "history of odd length",
            craft(&|h| {
                h["history.validation"]["shape"] = serde_json::json!([2]);
            }),
        ),
        (
            "history step past the run",
            craft(&|h| {
                h["__metadata__"]["step"] = "0".into();
            }),
        ),
        (
            "no tokenizer",
            craft(&|h| {
                h["__metadata__"].as_object_mut().unwrap().remove("tokenizer");
            }),
        ),
        (
            "a tokenizer that does not parse",
            craft(&|h| {
                h["__metadata__"]["tokenizer"] = "{\"model\": 3}".into();
            }),
        ),
        ("a vocabulary that is not the tokenizer's", craft(&set_config("vocab", 320.into()))),
    ] {
        let e = result.expect_err(what);
        assert!(matches!(e, Error::Corrupt(_)), "{what}: {e}");
        eprintln!("{what}: {e}");
    }
    // A file of the previous format (no tokenizer) reads as bytes.
    let old = craft(&|h| {
        let meta = h["__metadata__"].as_object_mut().unwrap();
        meta.remove("tokenizer");
        meta.insert("format".into(), FORMAT_BYTES_ONLY.into());
    });
    assert_eq!(old.unwrap(), c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint with a BPE tokenizer: its JSON is in the metadata, under the checksum (a
/// changed merge is damage), and it reads back as the same tokenizer; in memory and on disk
/// the bytes are the same.
#[test]
fn the_tokenizer_is_recorded_under_the_checksum() {
    let text = crate::data::built_in_text();
    let tk = crate::tokenizer::Tokenizer::train_bpe(std::str::from_utf8(&text).unwrap(), 300).unwrap();
    let model = ModelConfig::new(8, 1, 2, 1, 4).with_vocab(tk.model_vocab());
    let init = params::init(&model, 9).unwrap();
    let c = Checkpoint {
        model,
        step: 2,
        seed: 9,
        m: init.as_ref().map(|p| p.iter().map(|x| x * 0.5).collect()),
        v: init.as_ref().map(|p| p.iter().map(|x| x * x).collect()),
        params: init,
        moments8: None,
        scaler: None,
        train_history: vec![(1, 5.5)],
        val_history: vec![],
        tokenizer: tk,
    };
    let bytes = to_bytes(&c).unwrap();
    let back = from_bytes(&bytes, "memory").unwrap();
    assert_eq!(back, c);
    assert_eq!(back.tokenizer.json(), c.tokenizer.json());
    let dir = scratch_dir("tokenizer");
    let path = dir.join("model.safetensors");
    save(&path, &c).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    // One merge changed inside the header: the checksum refuses it.
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    let at = header.find("merges").expect("the BPE's merges are in the header");
    let mut damaged = bytes.clone();
    // A letter of a merge, changed to another letter: the JSON stays valid.
    let i = 8 + at + 8 + header[at + 8..].find(|c: char| c.is_ascii_lowercase()).unwrap();
    damaged[i] = if damaged[i] == b'a' { b'b' } else { b'a' };
    let e = from_bytes(&damaged, "damaged").unwrap_err();
    assert!(matches!(e, Error::Corrupt(_)), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn destinations_are_probed_locked_and_cleaned() {
    let dir = scratch_dir("destination");
    let path = dir.join("sub").join("model.safetensors");
    // The directory is created; stale temporaries of killed saves are removed; others stay.
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/.model.safetensors.partial-99999-0"), vec![0u8; 4096]).unwrap();
    std::fs::write(dir.join("sub/.model.loss.svg.partial-99999-3"), b"<svg").unwrap();
    std::fs::write(dir.join("sub/.other.safetensors.partial-1-0"), b"x").unwrap();
    let d = Destination::open(&path).unwrap();
    assert_eq!(d.removed(), 2);
    assert!(d.lock_error().is_none(), "{:?}", d.lock_error());
    assert_eq!(names_in(&dir.join("sub")), [".model.safetensors.lock", ".other.safetensors.partial-1-0"]);
    // A second holder is refused while the first lives, and says who holds it.
    let e = Destination::open(&path).unwrap_err();
    assert!(matches!(e, Error::Busy(_)), "{e}");
    assert!(e.to_string().contains(&format!("process {}", std::process::id())), "{e}");
    d.save(&sample(7)).unwrap();
    d.write_curve("<svg/>").unwrap();
    drop(d);
    let d = Destination::open(&path).unwrap();
    assert_eq!(load(d.path()).unwrap(), sample(7));
    drop(d);

    // Paths that cannot take a checkpoint fail before any training, saying why.
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    for (path, want) in [
        (file.join("model.safetensors"), "it is a file, not a directory"),
        (file.join("deeper/model.safetensors"), "it is a file, not a directory"),
        (dir.clone(), "is a directory"),
        (dir.join("sub/.."), "names no file"),
    ] {
        let e = Destination::open(&path).unwrap_err();
        assert!(matches!(e, Error::Checkpoint(_)) && e.to_string().contains(want), "{}: {e}", path.display());
    }
    std::fs::create_dir_all(dir.join("blocked.loss.svg")).unwrap();
    let e = Destination::open(&dir.join("blocked.safetensors")).unwrap_err();
    assert!(e.to_string().contains("blocked.loss.svg is a directory"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A directory without write permission (not for root, which may write anyway: then the case
/// is skipped, and said so).
#[cfg(unix)]
#[test]
fn an_unwritable_directory_is_found_before_training() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("read-only");
    let ro = dir.join("ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    if std::fs::write(ro.join("x"), b"x").is_ok() {
        eprintln!("SKIPPED: this user writes into a read-only directory (root)");
    } else {
        let e = Destination::open(&ro.join("model.safetensors")).unwrap_err();
        assert!(e.to_string().contains("cannot write in"), "{e}");
    }
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // A directory no one can create files in, root included.
    #[cfg(target_os = "linux")]
    {
        let e = Destination::open(Path::new("/proc/self/model.safetensors")).unwrap_err();
        assert!(matches!(e, Error::Checkpoint(_)) && e.to_string().contains("cannot write in /proc/self"), "{e}");
    }
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let dir = scratch_dir("failed-write");
    let path = dir.join("model.safetensors");
    let c = sample(8);
    save(&path, &c).unwrap();
    // A disk that fills up halfway through the write.
    let e = write_atomic(&path, |w| {
        w.write_all(b"partial")?;
        Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"))
    })
    .unwrap_err();
    assert!(matches!(e, Error::Save(_)) && e.to_string().contains("No space left"), "{e}");
    assert_eq!(load(&path).unwrap(), c);
    // The target replaced by a directory: the rename fails.
    let blocked = dir.join("blocked.safetensors");
    std::fs::create_dir_all(blocked.join("inside")).unwrap();
    assert!(save(&blocked, &c).is_err());
    assert!(blocked.join("inside").exists());
    assert_eq!(names_in(&dir), ["blocked.safetensors", "model.safetensors"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An AdamW-8bit checkpoint: its codes and scales round-trip, it names its optimizer, it holds
/// no f32 moments, and a non-finite scale is refused like any non-finite state.
#[test]
fn the_8bit_optimizer_state_round_trips() {
    use crate::optim::{Moments8, OptimizerKind};
    let base = sample(11);
    let layout = params::layout(&base.model);
    let mut rng = Rng::new(11);
    let q = layout.as_ref().map(|p| {
        let n = p.elements();
        let mut t = Moments8::zeros(n);
        t.mq.iter_mut().chain(t.vq.iter_mut()).for_each(|c| *c = (rng.next_u64() & 0xff) as u8);
        t.qscale.iter_mut().for_each(|s| *s = rng.uniform() as f32);
        t
    });
    let empty = layout.as_ref().map(|_| Vec::new());
    let c = Checkpoint { m: empty.clone(), v: empty, moments8: Some(q), ..base };
    assert_eq!(c.optimizer(), OptimizerKind::AdamW8bit);
    let bytes = to_bytes(&c).unwrap();
    let back = from_bytes(&bytes, "q").unwrap();
    assert_eq!(back, c);
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert!(st.tensor("optim.m.embedding.weight").is_err());
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(header.metadata().as_ref().unwrap()["optimizer"], "adamw-8bit");
    assert_eq!(metadata(&sample(11))["optimizer"], "adamw");

    let mut bad = c.clone();
    bad.moments8.as_mut().unwrap().final_norm.qscale[0] = f32::NAN;
    assert!(matches!(to_bytes(&bad), Err(Error::Diverged(m)) if m.contains("optim.qscale.norm.weight")));
    // Codes of the wrong length are not written.
    let mut short = c.clone();
    short.moments8.as_mut().unwrap().embedding.mq.pop();
    assert!(matches!(to_bytes(&short), Err(Error::Checkpoint(_))));
}
