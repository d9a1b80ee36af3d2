//! What a user sees for each mistake: `tests/ui/*.rs`, with `.stderr` snapshots, and inputs
//! that must compile: `tests/ui/pass/*.rs`.
//! Regenerate with `TRYBUILD=overwrite cargo test --test compile_fail` and read each diff.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
