//! The metrics log: one JSON object per line (JSON Lines) beside the checkpoint,
//! `NAME.metrics.jsonl`, a line for every step at which the training loss was read or a
//! validation ran; the loss curve (`NAME.loss.svg`) is drawn from it. In Python:
//! `pandas.read_json("checkpoints/model.metrics.jsonl", lines=True)`.
//!
//! Each line holds every key, `null` where the step has no value:
//!
//! | key | value |
//! | --- | --- |
//! | `step` | steps done (the line describes the step just finished) |
//! | `loss` | training loss of that step's batch, nats per token |
//! | `val_loss` | validation loss after that step (a mean over `--eval-batches` batches) |
//! | `lr` | learning rate the step used |
//! | `grad_norm` | global gradient norm before clipping, unscaled (`null` on a step the loss scaler skipped) |
//! | `tokens_per_s` | training throughput since the run (or the resume) started |
//! | `loss_scale` | mixed precision's loss scale after the step (`null` in f32) |
//! | `skipped` | steps mixed precision skipped so far (`null` in f32) |
//! | `time_s` | seconds since the run (or the resume) started |
//!
//! A resumed run keeps the lines up to the checkpoint's step and appends after them (the lines
//! of steps it trains again are replaced); a log missing beside an older checkpoint starts from
//! the checkpoint's loss history. A log that cannot be written is a warning, never the end of a
//! run.

use crate::Error;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// (step, loss) points of a curve.
pub type Curve = Vec<(usize, f32)>;

/// `model.safetensors` → `model.metrics.jsonl`.
pub fn metrics_path(checkpoint: &Path) -> PathBuf {
    let stem = checkpoint.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    checkpoint.with_file_name(format!("{stem}.metrics.jsonl"))
}

/// One line of the log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// Steps done.
    pub step: u64,
    /// Training loss of the step's batch.
    pub loss: Option<f32>,
    /// Validation loss after the step.
    pub val_loss: Option<f32>,
    /// Learning rate of the step.
    pub lr: Option<f32>,
    /// Global gradient norm before clipping.
    pub grad_norm: Option<f32>,
    /// Training tokens per second.
    pub tokens_per_s: Option<f64>,
    /// Loss scale (mixed precision).
    pub loss_scale: Option<f32>,
    /// Steps skipped so far (mixed precision).
    pub skipped: Option<u32>,
    /// Seconds since the run started.
    pub time_s: Option<f64>,
}

/// A finite number, else `null` (JSON has no NaN).
fn num(x: Option<f64>) -> Value {
    x.and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

impl Record {
    /// The JSON line (without the newline), its keys in the table's order.
    pub fn to_line(&self) -> String {
        let f = |x: Option<f32>| num(x.map(|v| crate::export::json_f32(v).as_f64().unwrap_or(f64::NAN)));
        let fields: [(&str, Value); 9] = [
            ("step", self.step.into()),
            ("loss", f(self.loss)),
            ("val_loss", f(self.val_loss)),
            ("lr", f(self.lr)),
            ("grad_norm", f(self.grad_norm)),
            ("tokens_per_s", num(self.tokens_per_s.map(|t| t.round()))),
            ("loss_scale", f(self.loss_scale)),
            ("skipped", self.skipped.into()),
            ("time_s", num(self.time_s.map(|t| (t * 1000.0).round() / 1000.0))),
        ];
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    }

    /// A line of the log (`None`: not one).
    pub fn from_line(line: &str) -> Option<Record> {
        let v: Value = serde_json::from_str(line).ok()?;
        let f = |k: &str| v[k].as_f64().map(|x| x as f32);
        Some(Record {
            step: v["step"].as_u64()?,
            loss: f("loss"),
            val_loss: f("val_loss"),
            lr: f("lr"),
            grad_norm: f("grad_norm"),
            tokens_per_s: v["tokens_per_s"].as_f64(),
            loss_scale: f("loss_scale"),
            skipped: v["skipped"].as_u64().and_then(|x| u32::try_from(x).ok()),
            time_s: v["time_s"].as_f64(),
        })
    }
}

/// Reads a log (a regular file of at most [`crate::files::MAX_METRICS_BYTES`]); lines that are
/// not records (one cut short by a crash) are skipped.
pub fn read(path: &Path) -> Result<Vec<Record>, Error> {
    let bytes =
        crate::files::read_regular(path, crate::files::MAX_METRICS_BYTES, "the metrics log").map_err(Error::Data)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| Error::Data(format!("the metrics log {} is not UTF-8 text: {e}", path.display())))?;
    Ok(text.lines().filter_map(Record::from_line).collect())
}

/// The training and validation curves of a log, as (step, loss) points.
pub fn curves(records: &[Record]) -> (Curve, Curve) {
    let pick =
        |f: fn(&Record) -> Option<f32>| records.iter().filter_map(|r| f(r).map(|l| (r.step as usize, l))).collect();
    (pick(|r| r.loss), pick(|r| r.val_loss))
}

/// The log of a run, open for appending.
pub struct Log {
    path: PathBuf,
    file: Option<std::fs::File>,
    warned: bool,
}

impl Log {
    /// Opens the log at `path` for a run starting at step `from`: lines of later steps are
    /// dropped (a new run, `from` 0, starts an empty log). Where no log exists and `history`
    /// is given (a checkpoint's (step, training loss) and (step, validation loss)), the log
    /// starts with it. Failing to open is a warning (returned), and the run goes on without a
    /// log.
    pub fn open(path: &Path, from: u64, history: Option<(&Curve, &Curve)>) -> (Log, Option<String>) {
        let mut kept: Vec<Record> = if from == 0 {
            Vec::new()
        } else {
            read(path).unwrap_or_default().into_iter().filter(|r| r.step <= from).collect()
        };
        if kept.is_empty()
            && let Some((train, val)) = history
        {
            let mut by_step = std::collections::BTreeMap::<u64, Record>::new();
            for &(s, l) in train.iter().filter(|h| h.0 as u64 <= from) {
                by_step.entry(s as u64).or_insert_with(|| Record { step: s as u64, ..Record::default() }).loss =
                    Some(l);
            }
            for &(s, l) in val.iter().filter(|h| h.0 as u64 <= from) {
                by_step.entry(s as u64).or_insert_with(|| Record { step: s as u64, ..Record::default() }).val_loss =
                    Some(l);
            }
            kept = by_step.into_values().collect();
        }
        let mut text = String::new();
        for r in &kept {
            text.push_str(&r.to_line());
            text.push('\n');
        }
        let opened = crate::checkpoint::write_atomic(path, |w| w.write_all(text.as_bytes())).and_then(|_| {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| Error::Save(format!("cannot open {}: {e}", path.display())))
        });
        match opened {
            Ok(f) => (Log { path: path.to_path_buf(), file: Some(f), warned: false }, None),
            Err(e) => {
                (Log { path: path.to_path_buf(), file: None, warned: true }, Some(format!("no metrics log: {e}")))
            }
        }
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a line (one write); a failure is returned as a warning once, then ignored.
    pub fn append(&mut self, r: &Record) -> Option<String> {
        let file = self.file.as_mut()?;
        let line = r.to_line() + "\n";
        match file.write_all(line.as_bytes()) {
            Ok(()) => None,
            Err(e) if !self.warned => {
                self.warned = true;
                Some(format!("the metrics log {} cannot be written ({e}); training goes on", self.path.display()))
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_hold_every_key() {
        let r = Record {
            step: 30,
            loss: Some(2.5),
            val_loss: None,
            lr: Some(3e-3),
            grad_norm: None,
            tokens_per_s: Some(1234.4),
            loss_scale: Some(65536.0),
            skipped: Some(2),
            time_s: Some(1.23456),
        };
        let line = r.to_line();
        let v: Value = serde_json::from_str(&line).unwrap();
        for k in ["step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_scale", "skipped", "time_s"] {
            assert!(v.get(k).is_some(), "{k} missing from {line}");
        }
        assert!(line.contains("\"lr\":0.003") && line.contains("\"val_loss\":null"), "{line}");
        let back = Record::from_line(&line).unwrap();
        assert_eq!(back, Record { tokens_per_s: Some(1234.0), time_s: Some(1.235), ..r });
        assert_eq!(Record::from_line("{\"step\": 3, \"loss\": NaN"), None);
        let nan = Record { step: 1, loss: Some(f32::NAN), ..Record::default() }.to_line();
        assert!(nan.contains("\"loss\":null"), "{nan}");
    }

    #[test]
    fn a_resumed_log_keeps_the_steps_up_to_the_checkpoint() {
        let d = std::env::temp_dir().join(format!("kernels-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("m.metrics.jsonl");
        let (mut log, w) = Log::open(&p, 0, None);
        assert!(w.is_none());
        for s in [10, 20, 30] {
            log.append(&Record { step: s, loss: Some(s as f32), ..Record::default() });
        }
        std::fs::write(&p, std::fs::read_to_string(&p).unwrap() + "{\"step\": 4").unwrap();
        drop(log);
        let (mut log, _) = Log::open(&p, 20, None);
        log.append(&Record { step: 30, loss: Some(3.0), val_loss: Some(3.5), ..Record::default() });
        let (train, val) = curves(&read(&p).unwrap());
        assert_eq!(train, [(10, 10.0), (20, 20.0), (30, 3.0)]);
        assert_eq!(val, [(30, 3.5)]);
        // No log beside an older checkpoint: its history starts one.
        std::fs::remove_file(&p).unwrap();
        let (_log, _) = Log::open(&p, 20, Some((&vec![(10, 5.0), (20, 4.0), (30, 1.0)], &vec![(20, 4.5)])));
        let (train, val) = curves(&read(&p).unwrap());
        assert_eq!((train, val), (vec![(10, 5.0), (20, 4.0)], vec![(20, 4.5)]));
        std::fs::remove_dir_all(d).unwrap();
    }
}
