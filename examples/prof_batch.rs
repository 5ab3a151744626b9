//! Profiling harness (temporary).
use weir::prelude::*;
fn main() {
    let mut t = 0u64;
    for _ in 0..20 {
        t = t.wrapping_add(
            weir::range(0..1_000_000u64)
                .map(|x| x * 3)
                .filter(|x| x % 2 == 0)
                .fold_with(64, 0u64, |a, x| a + x)
                .wait()
                .unwrap(),
        );
    }
    println!("{t}");
}
