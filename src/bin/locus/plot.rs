//! `--plot PNG`: a scatter of the first two coordinates, coloured by an
//! integer label (−1 = unassigned, light grey), optional marked points
//! (modes, medoids, centres) drawn as black crosses, and a title.

use std::io::Write;
use std::path::Path;
use std::sync::Once;

use image::ImageEncoder;
use image::codecs::png::PngEncoder;
use ndarray::{ArrayView1, ArrayView2};
use plotters::prelude::*;
use plotters::style::{FontStyle, HSLColor, register_font};

use crate::atomic;
use crate::error::{CliError, CliResult};

/// Pixel size of plots (width, height).
pub const SIZE: (u32, u32) = (900, 900);

/// Colours of labels 0–9 (Tableau 10); later labels get hues spaced by
/// the golden angle.
const PALETTE: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];
/// Colour of unassigned points (label −1 or any negative label).
const UNASSIGNED: RGBColor = RGBColor(205, 205, 205);
/// Font family the titles and axes use (registered from the embedded DejaVu Sans).
const FONT: &str = "sans-serif";

/// A scatter plot to draw.
#[derive(Debug, Clone)]
pub struct Scatter<'a> {
    /// Points, N×d; the first two columns are plotted (d = 1: on a line).
    pub points: ArrayView2<'a, f32>,
    /// One label per point; negative means unassigned.
    pub labels: ArrayView1<'a, i64>,
    /// Points to mark with crosses (C×d), and their legend text.
    pub marked: Option<(ArrayView2<'a, f32>, &'a str)>,
    /// Title, e.g. kernel, bandwidth and cluster count.
    pub title: &'a str,
    /// Added to the first two coordinates of every point drawn (points
    /// centred on an offset are drawn where they were given).
    pub origin: [f64; 2],
}

/// Checks, before any work, that `path` can receive a PNG.
pub fn check_path(flag: &str, path: &Path) -> CliResult<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if ext.as_deref() != Some("png") {
        return Err(CliError::input(format!(
            "{flag} {}: plots are PNG images; use a .png extension",
            path.display()
        )));
    }
    atomic::check_output_dir(flag, path)
}

/// Draws `scatter` and writes it to `path` as a PNG, atomically.
pub fn write_png(flag: &str, path: &Path, scatter: &Scatter<'_>) -> CliResult<()> {
    let (w, h) = SIZE;
    let rgb = render(scatter, SIZE)
        .map_err(|e| CliError::compute(format!("{flag} {}: cannot draw: {e}", path.display())))?;
    atomic::write_atomic(flag, path, |out| {
        PngEncoder::new(&mut *out)
            .write_image(&rgb, w, h, image::ColorType::Rgb8)
            .map_err(std::io::Error::other)?;
        out.flush()
    })
}

/// The colour of a label.
pub fn label_color(label: i64) -> RGBColor {
    match usize::try_from(label) {
        Err(_) => UNASSIGNED,
        Ok(i) if i < PALETTE.len() => {
            let (r, g, b) = PALETTE[i];
            RGBColor(r, g, b)
        }
        Ok(i) => {
            let hue = (i as f64 * 0.618_033_988_75).fract();
            let (r, g, b) = HSLColor(hue, 0.65, 0.45).rgb();
            RGBColor(r, g, b)
        }
    }
}

/// Renders to an RGB buffer of `size` pixels.
fn render(s: &Scatter<'_>, size: (u32, u32)) -> Result<Vec<u8>, String> {
    if s.points.nrows() != s.labels.len() {
        return Err(format!(
            "{} points but {} labels",
            s.points.nrows(),
            s.labels.len()
        ));
    }
    if s.points.ncols() == 0 {
        return Err("points have no coordinates".into());
    }
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        let _ = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });

    let [ox, oy] = s.origin;
    let xy = |p: ArrayView1<'_, f32>| {
        (
            f64::from(p[0]) + ox,
            if p.len() > 1 {
                f64::from(p[1]) + oy
            } else {
                oy
            },
        )
    };
    let pts: Vec<(f64, f64)> = s.points.rows().into_iter().map(xy).collect();
    let marks: Vec<(f64, f64)> = s
        .marked
        .as_ref()
        .map(|(m, _)| {
            m.rows()
                .into_iter()
                .filter(|r| !r.is_empty())
                .map(xy)
                .collect()
        })
        .unwrap_or_default();
    let (xr, yr) = square_ranges(pts.iter().chain(&marks));
    // Room for the longest tick label (coordinates far from 0 have many
    // digits), about 8 pixels a character; fewer labels along x then.
    let width = |r: &std::ops::Range<f64>| {
        [r.start, r.end]
            .iter()
            .map(|v| format!("{v:.1}").len() as u32)
            .max()
            .unwrap_or(0)
    };
    let (x_width, y_width) = (width(&xr), width(&yr));
    let y_labels = (y_width * 8 + 12).clamp(52, 160);
    let x_ticks = (size.0 / (x_width * 10 + 40)).clamp(3, 10) as usize;

    let mut buf = vec![255u8; size.0 as usize * size.1 as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(s.title, (FONT, 22))
            .margin(14)
            // Half the last x tick label may lie past the plot's edge.
            .margin_right((x_width * 4 + 14).min(90))
            .x_label_area_size(36)
            .y_label_area_size(y_labels)
            .build_cartesian_2d(xr, yr)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .light_line_style(RGBColor(238, 238, 238))
            .x_labels(x_ticks)
            .label_style((FONT, 14))
            .draw()
            .map_err(|e| e.to_string())?;
        let radius = match pts.len() {
            0..=2_000 => 3,
            2_001..=50_000 => 2,
            _ => 1,
        };
        // Unassigned points first, so clusters are drawn over them.
        let order = s
            .labels
            .iter()
            .enumerate()
            .filter(|(_, l)| **l < 0)
            .chain(s.labels.iter().enumerate().filter(|(_, l)| **l >= 0));
        chart
            .draw_series(order.map(|(i, &l)| Circle::new(pts[i], radius, label_color(l).filled())))
            .map_err(|e| e.to_string())?;
        if let Some((_, legend)) = s.marked {
            chart
                .draw_series(
                    marks
                        .iter()
                        .map(|&p| Cross::new(p, 9, WHITE.stroke_width(6))),
                )
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(
                    marks
                        .iter()
                        .map(|&p| Cross::new(p, 9, BLACK.stroke_width(3))),
                )
                .map_err(|e| e.to_string())?
                .label(legend)
                .legend(|p| Cross::new(p, 6, BLACK.stroke_width(2)));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .label_font((FONT, 16))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// Axis ranges around all points, padded, with equal spans so distances
/// look the same along both axes.
fn square_ranges<'p>(
    pts: impl Iterator<Item = &'p (f64, f64)>,
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let span = (x1 - x0).max(y1 - y0).max(1e-9) * 1.08;
    let (cx, cy) = ((x0 + x1) / 2.0, (y0 + y1) / 2.0);
    (
        cx - span / 2.0..cx + span / 2.0,
        cy - span / 2.0..cy + span / 2.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array1, Array2, array};

    fn two_blobs() -> (Array2<f32>, Array1<i64>) {
        let n = 300;
        let pts = Array2::from_shape_fn((n, 2), |(i, j)| {
            let c = if i % 3 == 2 {
                0.0
            } else {
                (i % 3) as f32 * 4.0
            };
            let a = i as f32 * 2.399;
            let r = (i as f32 / n as f32).sqrt();
            c + if j == 0 { r * a.cos() } else { r * a.sin() }
        });
        let labels = Array1::from_shape_fn(n, |i| if i % 3 == 2 { -1 } else { (i % 3) as i64 });
        (pts, labels)
    }

    #[test]
    fn renders_a_png_of_the_right_size() {
        let (pts, labels) = two_blobs();
        let modes = array![[0.0f32, 0.0], [4.0, 4.0]];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scatter.png");
        let s = Scatter {
            points: pts.view(),
            labels: labels.view(),
            marked: Some((modes.view(), "modes")),
            title: "gaussian(h=0.5): 2 clusters",
            origin: [0.0, 0.0],
        };
        write_png("--plot", &path, &s).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), SIZE);
        // Cluster colours, the crosses and the title text are all there.
        let has = |c: RGBColor| img.pixels().any(|p| p.0 == [c.0, c.1, c.2]);
        assert!(has(label_color(0)) && has(label_color(1)) && has(UNASSIGNED));
        assert!(img.pixels().filter(|p| p.0 == [0, 0, 0]).count() > 100);
        if let Ok(keep) = std::env::var("LOCUS_KEEP_PLOT") {
            std::fs::copy(&path, keep).unwrap();
        }
    }

    #[test]
    fn one_dimensional_points_and_no_marks() {
        let pts = array![[0.0f32], [1.0], [2.0]];
        let labels = array![0i64, 1, -1];
        let s = Scatter {
            points: pts.view(),
            labels: labels.view(),
            marked: None,
            title: "line",
            origin: [0.0, 0.0],
        };
        let buf = render(&s, (200, 150)).unwrap();
        assert_eq!(buf.len(), 200 * 150 * 3);
    }

    #[test]
    fn mismatched_labels_are_an_error() {
        let pts = array![[0.0f32, 1.0]];
        let labels = array![0i64, 1];
        let s = Scatter {
            points: pts.view(),
            labels: labels.view(),
            marked: None,
            title: "",
            origin: [0.0, 0.0],
        };
        assert!(
            render(&s, (100, 100))
                .unwrap_err()
                .contains("1 points but 2 labels")
        );
    }

    #[test]
    fn paths_must_be_png() {
        assert!(check_path("--plot", Path::new("x.jpg")).is_err());
        assert!(check_path("--plot", Path::new("x.png")).is_ok());
    }
}
