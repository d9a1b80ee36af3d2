//! Prints the kernel catalog (docs/KERNELS.md) from what the macro generated:
//! `cargo run --example catalog > docs/KERNELS.md`. A test keeps the file in sync.

fn main() {
    print!("{}", kernels::catalog());
}
