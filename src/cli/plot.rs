//! PNG plots of benchmark results (plotters, bitmap backend). Text needs a TrueType font:
//! DejaVu Sans is looked for where Debian-like systems keep it; without one the plot is drawn
//! without labels and the caller says so.

use std::path::Path;

use plotters::prelude::*;

use super::bench_batch::BatchRow;

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

/// Decode tokens/s against batch size (log₂ x axis), one point per row. Returns a note for
/// the caller ("" or why there are no labels).
pub fn tokens_per_s(path: &Path, rows: &[BatchRow]) -> Result<&'static str, String> {
    draw(path, rows, font())
}

/// The plot, with or without text (`text`: a font is registered).
fn draw(path: &Path, rows: &[BatchRow], text: bool) -> Result<&'static str, String> {
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let xmax = rows.iter().map(|r| (r.batch as f64).log2()).fold(0.0, f64::max) + 0.5;
    let ymax = rows.iter().map(|r| r.decode_tps).fold(0.0, f64::max) * 1.15 + 1.0;
    let mut b = ChartBuilder::on(&root);
    b.margin(20).x_label_area_size(50).y_label_area_size(80);
    if text {
        b.caption("batched decode: tokens/s vs batch size", ("sans-serif", 24));
    }
    let mut chart = b.build_cartesian_2d(-0.5f64..xmax, 0f64..ymax).map_err(|e| e.to_string())?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("log2(batch)").y_desc("decode tokens/s");
    } else {
        // Any text (descriptions, tick labels) needs the font plotters could not find.
        mesh.disable_x_axis().disable_y_axis().x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(|e| e.to_string())?;
    let pts: Vec<(f64, f64)> = rows.iter().map(|r| ((r.batch as f64).log2(), r.decode_tps)).collect();
    chart.draw_series(LineSeries::new(pts.clone(), &BLUE)).map_err(|e| e.to_string())?;
    chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, BLUE.filled()))).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(if text { "" } else { " (no TrueType font found: drawn without labels)" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_without_a_font() {
        let rows: Vec<BatchRow> = [1usize, 8, 64]
            .iter()
            .map(|&b| BatchRow { batch: b, prompt: 8, generated: 8, decode_tps: 100.0 * b as f64, prefill_tps: 1.0, ttft_ms: 1.0, tpot_ms: 1.0 })
            .collect();
        let dir = std::env::temp_dir().join(format!("tandem-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let p = dir.join("plain.png");
        assert_eq!(draw(&p, &rows, false), Ok(" (no TrueType font found: drawn without labels)"));
        assert!(std::fs::metadata(&p).map(|m| m.len() > 0).unwrap_or(false));
        std::fs::remove_dir_all(&dir).ok();
    }
}
