//! Nadaraya–Watson regression of a noisy sine with every kernel profile,
//! on the best backend. Run: `cargo run --release --example local_mean`.

use locus::{Engine, Kernel, Profile};
use ndarray::Array2;

fn main() -> locus::Result<()> {
    let engine = Engine::new();
    println!("backend: {}", engine.backend());
    // 2000 noisy samples of sin(x) on [0, 2π], 9 query points.
    let n = 2000;
    let mut s = 12345u64;
    let mut noise = move || {
        s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4
    };
    let x = Array2::from_shape_fn((n, 1), |(i, _)| i as f32 * std::f32::consts::TAU / n as f32);
    let y = x.mapv(|v| v.sin() + noise());
    let q = Array2::from_shape_fn((9, 1), |(i, _)| 0.3 + i as f32 * 0.7);
    println!("{:>12} {}", "x:", fmt_row(q.column(0).iter()));
    println!(
        "{:>12} {}",
        "sin(x):",
        fmt_row(
            q.column(0)
                .iter()
                .map(|v| v.sin())
                .collect::<Vec<_>>()
                .iter()
        )
    );
    for p in Profile::ALL {
        let k = Kernel::new(p, 0.15)?;
        let m = engine.local_mean(&k, q.view(), x.view(), y.view())?;
        println!("{:>12} {}", p.name(), fmt_row(m.values.column(0).iter()));
    }
    Ok(())
}

fn fmt_row<'a>(v: impl Iterator<Item = &'a f32>) -> String {
    v.map(|x| format!("{x:7.3}")).collect::<Vec<_>>().join(" ")
}
