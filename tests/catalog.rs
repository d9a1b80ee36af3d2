//! docs/KERNELS.md is the catalog the code generates (regenerate it with
//! `cargo run --example catalog > docs/KERNELS.md`), and every kernel says what it writes.

kernels::kernels!("tests/shaders/unchecked.wgsl", shared = "shaders/00_shared.wgsl");

#[test]
fn the_catalog_is_current_and_complete() {
    let generated = kernels::catalog();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/KERNELS.md");
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(on_disk == generated, "docs/KERNELS.md is stale: run `cargo run --example catalog > docs/KERNELS.md`");
    for k in kernels::all_kernels() {
        let l = k.doc.to_lowercase();
        assert!(
            l.contains("overwrite") || l.contains("accumulate") || l.contains("in place") || l.contains("+="),
            "{}: the header must say whether it overwrites or accumulates",
            k.qualified_name()
        );
    }
}

#[test]
fn the_catalog_marks_unchecked_kernels() {
    let tables = kernels::catalog_tables(unchecked::KERNELS.iter().copied());
    let row = |name: &str| {
        tables.lines().find(|l| l.starts_with(&format!("| `{name}`"))).unwrap_or_else(|| panic!("{tables}")).to_string()
    };
    assert!(row("circular_window").starts_with("| `circular_window` *(unchecked)* | "), "{tables}");
    let checked = kernels::catalog_tables([&kernels::infrastructure::scale::KERNEL]);
    assert!(checked.contains("| `scale` | ") && !checked.contains("unchecked"), "{checked}");
}
