//! The pipeline cache on disk: written when a context that built pipelines ends, read by the
//! next, and a file that is damaged, cut short, not ours or of another driver is ignored (and
//! replaced), never handed to the driver; kernels run right in every case.

mod common;

use common::{gpu_with, rng, uniform};
use kernels::infrastructure::scale;
use kernels::{Gpu, GpuOptions, PipelineCacheFile};
use std::path::{Path, PathBuf};

fn dir(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kernels-plcache-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn open(dir: &Path) -> Option<Gpu> {
    gpu_with(GpuOptions::from_env().pipeline_cache_dir(Some(dir)))
}

/// `scale` on fresh random values, against float64.
fn runs_right(gpu: &Gpu, test: &str) {
    let mut r = rng(test);
    let xs = uniform(&mut r, 3000, -2.0, 2.0);
    let mut x = gpu.upload(&xs).unwrap();
    scale(gpu, &mut x, scale::Params::new(3000, -1.5)).unwrap();
    let got = x.read(gpu).unwrap();
    for (g, v) in got.iter().zip(&xs) {
        let want = *v as f64 * -1.5;
        assert!((*g as f64 - want).abs() <= want.abs() * f32::EPSILON as f64 / 2.0, "{g} for {want}: one rounding");
    }
}

/// The cache file, where the backend has one (`None` on backends without: nothing to test).
fn file_of(gpu: &Gpu) -> Option<PathBuf> {
    match gpu.pipeline_cache_file() {
        PipelineCacheFile::New { path } | PipelineCacheFile::Loaded { path, .. } => Some(path.clone()),
        PipelineCacheFile::Ignored { path, .. } => Some(path.clone()),
        PipelineCacheFile::Off { reason } => {
            eprintln!("SKIPPED: no pipeline cache on this adapter ({reason})");
            None
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_run_reads_what_the_last_one_wrote() {
    let d = dir("roundtrip");
    let Some(gpu) = open(&d) else { return };
    let Some(path) = file_of(&gpu) else { return };
    assert!(matches!(gpu.pipeline_cache_file(), PipelineCacheFile::New { .. }), "{:?}", gpu.pipeline_cache_file());
    assert!(path.starts_with(&d), "{} is in the directory asked for", path.display());
    runs_right(&gpu, "a_run_reads_what_the_last_one_wrote");
    drop(gpu);
    assert!(path.exists(), "written when the context ends");
    let Some(gpu) = open(&d) else { return };
    let PipelineCacheFile::Loaded { bytes, .. } = gpu.pipeline_cache_file() else {
        panic!("{:?}", gpu.pipeline_cache_file())
    };
    assert!(*bytes > 0);
    runs_right(&gpu, "a_run_reads_what_the_last_one_wrote");
    // Saved now (if the driver's data changed); then nothing new was built: nothing is
    // written again, by a save or by the end of the context.
    gpu.save_pipeline_cache().unwrap();
    let before = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert_eq!(gpu.save_pipeline_cache().unwrap(), None, "nothing built since the last save");
    drop(gpu);
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), before);
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "no temporary files are left: {left:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_damaged_or_foreign_file_is_ignored_and_replaced() {
    let d = dir("damaged");
    let Some(gpu) = open(&d) else { return };
    let Some(path) = file_of(&gpu) else { return };
    runs_right(&gpu, "a_damaged_or_foreign_file_is_ignored_and_replaced");
    drop(gpu);
    let good = std::fs::read(&path).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x40;
    let mut foreign = good.clone();
    // The key names the adapter: another adapter's file differs there.
    let at = foreign.windows(7).position(|w| w == b"adapter").expect("the key names the adapter") + 8;
    foreign[at] ^= 0x01;
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("a flipped bit", flipped, "checksum"),
        ("cut short", good[..good.len() - 3].to_vec(), "holds"),
        ("another adapter's", foreign, "another adapter"),
        ("not ours", b"WGPUPLCH\x01\x00\x00\x00 something else entirely".to_vec(), "not a pipeline cache"),
        ("empty", Vec::new(), "ends inside"),
    ];
    for (what, bytes, reason) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let Some(gpu) = open(&d) else { return };
        match gpu.pipeline_cache_file() {
            PipelineCacheFile::Ignored { reason: r, .. } => assert!(r.contains(reason), "{what}: {r}"),
            other => panic!("{what}: {other:?}"),
        }
        runs_right(&gpu, what);
        drop(gpu);
        // Replaced by a good one.
        let Some(gpu) = open(&d) else { return };
        assert!(matches!(gpu.pipeline_cache_file(), PipelineCacheFile::Loaded { .. }), "{what}: not replaced");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn no_directory_no_cache() {
    let Some(gpu) = gpu_with(GpuOptions::from_env().pipeline_cache_dir(None::<PathBuf>)) else { return };
    assert!(matches!(gpu.pipeline_cache_file(), PipelineCacheFile::Off { .. }));
    assert_eq!(gpu.save_pipeline_cache().unwrap(), None);
    runs_right(&gpu, "no_directory_no_cache");
}
