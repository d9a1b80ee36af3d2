//! What a user sees for each mistake: `tests/ui/*.rs`, with `.stderr` snapshots.
//! Regenerate with `TRYBUILD=overwrite cargo test --test compile_fail` and read each diff.
//!
//! Only failing cases live here: with no passing case trybuild runs `cargo check`, not a second
//! full build of the dependency tree (inputs that must compile are in `tests/structs.rs`).

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
