//! PNG plots of benchmark results (plotters, bitmap backend). Text needs a TrueType font:
//! DejaVu Sans is looked for where Debian-like systems keep it; without one the plot is drawn
//! without labels and the caller says so.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Register a system sans-serif font for plotters; false when none is found.
fn font() -> bool {
    const CANDIDATES: [&str; 3] =
        ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf", "/usr/share/fonts/TTF/DejaVuSans.ttf"];
    for c in CANDIDATES {
        if let Ok(bytes) = std::fs::read(c) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    false
}

/// One named line of (x, y) points.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

/// What a chart says: its title and the two axes' descriptions.
pub struct Labels<'a> {
    pub title: &'a str,
    pub x: &'a str,
    pub y: &'a str,
}

/// The note a caller prints after the path: "" or why there are no labels.
const NO_FONT: &str = " (no TrueType font found: drawn without labels)";

/// Decode tokens/s against batch size (log₂ x axis), one (batch, tokens/s) point per
/// measurement. Returns a note for the caller ("" or why there are no labels).
pub fn tokens_per_s(path: &Path, points: Vec<(f64, f64)>) -> Result<&'static str, String> {
    let series = [Series { label: "decode tokens/s".into(), points, color: BLUE }];
    lines(path, &Labels { title: "batched decode: tokens/s vs batch size", x: "batch size", y: "decode tokens/s" }, &series)
}

/// `series` against a log₂ x axis (ticks at powers of two, points with x > 0), with a legend.
/// Returns a note for the caller ("" or why there are no labels).
pub fn lines(path: &Path, labels: &Labels, series: &[Series]) -> Result<&'static str, String> {
    draw(path, labels, series, font())
}

/// Charts side by side in one PNG (900 × 600 pixels each), each its own labels and series
/// against a log₂ x axis. Returns a note for the caller ("" or why there are no labels).
pub fn panels(path: &Path, charts: &[(&Labels, &[Series])]) -> Result<&'static str, String> {
    draw_panels(path, charts, font())
}

fn draw_panels(path: &Path, charts: &[(&Labels, &[Series])], text: bool) -> Result<&'static str, String> {
    let n = charts.len().max(1);
    let root = BitMapBackend::new(path, (900 * n as u32, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    for (area, (labels, series)) in root.split_evenly((1, n)).iter().zip(charts) {
        chart(area, labels, series, text)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(if text { "" } else { NO_FONT })
}

/// The plot, with or without text (`text`: a font is registered).
fn draw(path: &Path, labels: &Labels, series: &[Series], text: bool) -> Result<&'static str, String> {
    draw_panels(path, &[(labels, series)], text)
}

/// One chart on `root`.
fn chart<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, labels: &Labels, series: &[Series], text: bool) -> Result<(), String> {
    let all = || series.iter().flat_map(|s| s.points.iter()).filter(|p| p.0 > 0.0);
    let xmin = all().map(|p| p.0.log2()).fold(f64::INFINITY, f64::min).min(0.0).floor() - 0.5;
    let xmax = all().map(|p| p.0.log2()).fold(0.0, f64::max).ceil() + 0.5;
    let ymax = all().map(|p| p.1).fold(0.0, f64::max) * 1.15 + 1.0;
    let mut b = ChartBuilder::on(root);
    b.margin(20).x_label_area_size(50).y_label_area_size(90);
    if text {
        b.caption(labels.title, ("sans-serif", 24));
    }
    let mut chart = b.build_cartesian_2d(xmin..xmax, 0f64..ymax).map_err(|e| e.to_string())?;
    let mut mesh = chart.configure_mesh();
    if text {
        // One tick per power of two; a tick between two (were plotters to pick one) stays bare.
        let x_label = |x: &f64| if (x - x.round()).abs() < 1e-6 { format!("{}", x.exp2().round()) } else { String::new() };
        mesh.x_labels((xmax - xmin) as usize + 1)
            .x_desc(labels.x)
            .y_desc(labels.y)
            .x_label_formatter(&x_label)
            .y_label_formatter(&|y| format!("{y:.0}"));
        mesh.label_style(("sans-serif", 16)).axis_desc_style(("sans-serif", 18)).draw().map_err(|e| e.to_string())?;
    } else {
        // Any text (descriptions, tick labels) needs the font plotters could not find.
        mesh.disable_x_axis().disable_y_axis().x_labels(0).y_labels(0).draw().map_err(|e| e.to_string())?;
    }
    for s in series {
        let pts: Vec<(f64, f64)> = s.points.iter().filter(|p| p.0 > 0.0).map(|&(x, y)| (x.log2(), y)).collect();
        let color = s.color;
        let line = chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2))).map_err(|e| e.to_string())?;
        if text {
            line.label(s.label.as_str()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(|e| e.to_string())?;
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 16))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> Vec<Series> {
        let pts = |k: f64| [1.0, 8.0, 64.0].iter().map(|&b| (b, k * b)).collect();
        vec![Series { label: "a".into(), points: pts(100.0), color: BLUE }, Series { label: "b".into(), points: pts(50.0), color: RED }]
    }

    #[test]
    fn draws_without_a_font() {
        let dir = std::env::temp_dir().join(format!("tandem-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let p = dir.join("plain.png");
        assert_eq!(draw(&p, &Labels { title: "t", x: "x", y: "y" }, &series(), false), Ok(NO_FONT));
        assert!(std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn draws_panels_side_by_side() {
        let dir = std::env::temp_dir().join(format!("tandem-plot-panels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let p = dir.join("panels.png");
        let (a, b, s) = (Labels { title: "a", x: "x", y: "y" }, Labels { title: "b", x: "x", y: "y" }, series());
        let charts: [(&Labels, &[Series]); 2] = [(&a, &s), (&b, &s)];
        assert_eq!(draw_panels(&p, &charts, false), Ok(NO_FONT));
        let note = panels(&p, &charts);
        assert!(note == Ok("") || note == Ok(NO_FONT), "{note:?}");
        let png = std::fs::read(&p).unwrap_or_default();
        // The IHDR chunk's width: two 900-pixel charts.
        assert_eq!(png.get(16..20), Some(&1800u32.to_be_bytes()[..]));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn draws_with_a_font_where_there_is_one() {
        let dir = std::env::temp_dir().join(format!("tandem-plot-font-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let p = dir.join("labels.png");
        let note = lines(&p, &Labels { title: "t", x: "x", y: "y" }, &series());
        assert!(note == Ok("") || note == Ok(NO_FONT), "{note:?}");
        assert!(std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false));
        std::fs::remove_dir_all(&dir).ok();
    }
}
