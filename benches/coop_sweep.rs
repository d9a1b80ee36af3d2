#[path = "coop/mod.rs"]
mod coop;
fn main() {}
