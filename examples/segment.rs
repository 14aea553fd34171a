//! Image segmentation by joint spatial–range MeanShift (Comaniciu & Meer,
//! 2002; paper §2.1.3): every pixel is a point `(row, col, L*, u*, v*)`,
//! the kernel a product of a spatial block (bandwidth `--spatial`, in
//! pixels) and a range block (bandwidth `--range`, in CIE L*u*v* units),
//! each pixel moves to its mode, pixels whose modes meet form a segment,
//! and the segmented image paints each segment in its mode's colour.
//!
//! ```text
//! cargo run --release --example segment -- --input photo.png --output segmented.png \
//!     --spatial 8 --range 7 [--spatial-kernel uniform] [--range-kernel gaussian] \
//!     [--scale 2] [--backend auto|cpu|gpu] [--labels labels.npy]
//! ```
//!
//! `--scale s` first averages s×s pixel squares (MeanShift costs grow with
//! the pixels times their spatial neighbourhood). The input is an 8-bit
//! PNG (grey, RGB, with or without alpha); the summary goes to stdout as
//! one JSON object. `benches/compare_segmentation.py` runs it on
//! scikit-learn's `china.jpg` next to scikit-learn's MeanShift.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use image::{ImageBuffer, Rgb};
use locus::{BackendInfo, Device, Engine, EngineOptions, Kernel, MeanShiftParams, Profile};
use ndarray::{Array1, Array2};

#[derive(Debug, Parser)]
#[command(about = "Segments a PNG by joint spatial–range MeanShift")]
struct Args {
    /// The photograph (8-bit PNG).
    #[arg(long)]
    input: PathBuf,
    /// Where to write the segmented image (PNG).
    #[arg(long)]
    output: PathBuf,
    /// Spatial bandwidth, in pixels of the (scaled) image.
    #[arg(long, default_value_t = 8.0)]
    spatial: f32,
    /// Range bandwidth, in CIE L*u*v* units.
    #[arg(long, default_value_t = 7.0)]
    range: f32,
    /// Profile of the spatial block.
    #[arg(long, default_value = "uniform")]
    spatial_kernel: Profile,
    /// Profile of the range block.
    #[arg(long, default_value = "gaussian")]
    range_kernel: Profile,
    /// Average s×s squares of pixels first.
    #[arg(long, default_value_t = 1)]
    scale: u32,
    /// auto, cpu or gpu.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Also write each pixel's segment (H×W, i64) to this .npy file.
    #[arg(long)]
    labels: Option<PathBuf>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run(a: &Args) -> Result<(), String> {
    let device = match a.backend.as_str() {
        "auto" => Device::Auto,
        "cpu" => Device::Cpu,
        "gpu" => Device::Gpu,
        other => return Err(format!("--backend must be auto, cpu or gpu, got {other:?}")),
    };
    if a.scale == 0 {
        return Err("--scale must be at least 1".into());
    }
    // Parameters and output folders checked before any work.
    Kernel::new(a.spatial_kernel, a.spatial).map_err(|e| format!("--spatial: {e}"))?;
    Kernel::new(a.range_kernel, a.range).map_err(|e| format!("--range: {e}"))?;
    for (flag, path) in [
        ("--output", Some(&a.output)),
        ("--labels", a.labels.as_ref()),
    ] {
        let Some(path) = path else { continue };
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(format!("{flag} {}: no such folder", path.display()));
        }
    }
    let img = image::open(&a.input)
        .map_err(|e| format!("{}: {e}", a.input.display()))?
        .to_rgb8();
    let img = downscale(&img, a.scale);
    let (w, h) = img.dimensions();
    if w == 0 || h == 0 {
        return Err(format!("{}: the image has no pixels", a.input.display()));
    }
    // Pixels as (row, col, L*, u*, v*).
    let n = (w * h) as usize;
    let mut x = Array2::<f32>::zeros((n, 5));
    for (px, py, p) in img.enumerate_pixels() {
        let i = (py * w + px) as usize;
        let [l, u, v] = rgb_to_luv(p.0);
        x.row_mut(i)
            .assign(&ndarray::arr1(&[py as f32, px as f32, l, u, v]));
    }
    let kernel = Kernel::product([
        (2, a.spatial_kernel, a.spatial),
        (3, a.range_kernel, a.range),
    ])
    .map_err(|e| e.to_string())?;
    let engine = Engine::with_options(EngineOptions::new(device)).map_err(|e| e.to_string())?;
    let params = MeanShiftParams::new()
        .kernel(kernel)
        .check()
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let fit = engine
        .mean_shift_owned(&params, x, |_| {})
        .map_err(|e| e.to_string())?;
    let seconds = t0.elapsed().as_secs_f64();

    // Each pixel painted in its segment's mode colour.
    let colours: Vec<[u8; 3]> = fit
        .modes
        .rows()
        .into_iter()
        .map(|m| luv_to_rgb([m[2], m[3], m[4]]))
        .collect();
    let out = ImageBuffer::from_fn(w, h, |px, py| {
        let label = fit.labels[(py * w + px) as usize];
        Rgb(colours[label as usize])
    });
    out.save(&a.output)
        .map_err(|e| format!("{}: {e}", a.output.display()))?;
    if let Some(p) = &a.labels {
        let grid = Array2::from_shape_vec((h as usize, w as usize), fit.labels.to_vec())
            .map_err(|e| e.to_string())?;
        ndarray_npy::write_npy(p, &grid).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let sizes = segment_sizes(&fit.labels, fit.modes.nrows());
    println!(
        "{{\"width\": {w}, \"height\": {h}, \"pixels\": {n}, \"segments\": {}, \"largest\": {}, \
         \"iterations\": {}, \"converged\": {}, \"seconds\": {seconds:.3}, \"backend\": \"{}\", \
         \"kernel\": \"{}\", \"psnr_db\": {:.2}}}",
        fit.modes.nrows(),
        sizes.iter().max().copied().unwrap_or(0),
        fit.iterations,
        fit.converged,
        match engine.backend() {
            BackendInfo::Gpu { name, .. } => name.clone(),
            _ => "cpu".into(),
        },
        params
            .product_kernel()
            .map(|k| k.to_string())
            .unwrap_or_default(),
        psnr(&img, &out),
    );
    Ok(())
}

/// Pixels per segment.
fn segment_sizes(labels: &Array1<i64>, segments: usize) -> Vec<usize> {
    let mut sizes = vec![0; segments];
    for &l in labels {
        sizes[l as usize] += 1;
    }
    sizes
}

/// Averages `s × s` squares (the last partial ones too).
fn downscale(img: &image::RgbImage, s: u32) -> image::RgbImage {
    if s == 1 {
        return img.clone();
    }
    let (w, h) = img.dimensions();
    ImageBuffer::from_fn(w.div_ceil(s), h.div_ceil(s), |bx, by| {
        let mut sum = [0u32; 3];
        let mut count = 0;
        for py in by * s..((by + 1) * s).min(h) {
            for px in bx * s..((bx + 1) * s).min(w) {
                let p = img.get_pixel(px, py).0;
                for c in 0..3 {
                    sum[c] += u32::from(p[c]);
                }
                count += 1;
            }
        }
        Rgb(sum.map(|v| ((v + count / 2) / count) as u8))
    })
}

/// Peak signal-to-noise ratio of the segmented image against the input.
fn psnr(a: &image::RgbImage, b: &image::RgbImage) -> f64 {
    let mse: f64 = a
        .pixels()
        .zip(b.pixels())
        .flat_map(|(p, q)| (0..3).map(move |c| (f64::from(p.0[c]) - f64::from(q.0[c])).powi(2)))
        .sum::<f64>()
        / (3 * a.len() / 3) as f64;
    10.0 * (255.0f64.powi(2) / mse.max(1e-12)).log10()
}

/// The D65 white point, and its u′, v′.
const WHITE: [f64; 3] = [0.950_47, 1.0, 1.088_83];

fn white_uv() -> (f64, f64) {
    let [x, y, z] = WHITE;
    let den = x + 15.0 * y + 3.0 * z;
    (4.0 * x / den, 9.0 * y / den)
}

/// sRGB (8-bit) → CIE L*u*v* (D65), the range space of Comaniciu–Meer.
fn rgb_to_luv(p: [u8; 3]) -> [f32; 3] {
    let lin = p.map(|c| {
        let c = f64::from(c) / 255.0;
        if c <= 0.040_45 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    });
    let x = 0.412_456_4 * lin[0] + 0.357_576_1 * lin[1] + 0.180_437_5 * lin[2];
    let y = 0.212_672_9 * lin[0] + 0.715_152_2 * lin[1] + 0.072_175 * lin[2];
    let z = 0.019_333_9 * lin[0] + 0.119_192 * lin[1] + 0.950_304_1 * lin[2];
    let yr = y / WHITE[1];
    let l = if yr > (6.0f64 / 29.0).powi(3) {
        116.0 * yr.cbrt() - 16.0
    } else {
        (29.0f64 / 3.0).powi(3) * yr
    };
    let den = x + 15.0 * y + 3.0 * z;
    if den <= 0.0 {
        return [l as f32, 0.0, 0.0];
    }
    let (un, vn) = white_uv();
    let (up, vp) = (4.0 * x / den, 9.0 * y / den);
    [
        l as f32,
        (13.0 * l * (up - un)) as f32,
        (13.0 * l * (vp - vn)) as f32,
    ]
}

/// CIE L*u*v* (D65) → sRGB (8-bit, clamped).
fn luv_to_rgb(luv: [f32; 3]) -> [u8; 3] {
    let [l, u, v] = luv.map(f64::from);
    if l <= 0.0 {
        return [0, 0, 0];
    }
    let (un, vn) = white_uv();
    let (up, vp) = (u / (13.0 * l) + un, v / (13.0 * l) + vn);
    let y = if l > 8.0 {
        ((l + 16.0) / 116.0).powi(3)
    } else {
        l * (3.0f64 / 29.0).powi(3)
    } * WHITE[1];
    let x = y * 9.0 * up / (4.0 * vp);
    let z = y * (12.0 - 3.0 * up - 20.0 * vp) / (4.0 * vp);
    let lin = [
        3.240_454_2 * x - 1.537_138_5 * y - 0.498_531_4 * z,
        -0.969_266 * x + 1.876_010_8 * y + 0.041_556 * z,
        0.055_643_4 * x - 0.204_025_9 * y + 1.057_225_2 * z,
    ];
    lin.map(|c| {
        let c = c.clamp(0.0, 1.0);
        let s = if c <= 0.003_130_8 {
            12.92 * c
        } else {
            1.055 * c.powf(1.0 / 2.4) - 0.055
        };
        (s * 255.0).round() as u8
    })
}
