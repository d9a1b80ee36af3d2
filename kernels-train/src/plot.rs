//! The loss curve as an SVG file (no plotting dependency).

use std::fmt::Write as _;

/// Writes an SVG with the training loss per step (a line) and validation losses (dots).
pub fn loss_svg(train: &[(usize, f32)], validation: &[(usize, f32)], title: &str) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 60.0, 20.0, 40.0, 50.0);
    let all = train.iter().chain(validation);
    let max_step = all.clone().map(|p| p.0).max().unwrap_or(1).max(1) as f64;
    let (mut lo, mut hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
        let v = p.1 as f64;
        if v.is_finite() { (lo.min(v), hi.max(v)) } else { (lo, hi) }
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo < 1e-6 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.05;
    let (lo, hi) = (lo - pad, hi + pad);
    let x = |s: usize| left + (w - left - right) * s as f64 / max_step;
    let y = |v: f32| top + (h - top - bottom) * (hi - v as f64) / (hi - lo);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">step</text>
<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">loss (nats per token)</text>
"#,
        w / 2.0,
        escape(title),
        h - bottom,
        w - right,
        h - bottom,
        h - bottom,
        (left + w - right) / 2.0,
        h - 12.0,
        (top + h - bottom) / 2.0,
        (top + h - bottom) / 2.0,
    );
    for i in 0..=5 {
        let v = lo + (hi - lo) * i as f64 / 5.0;
        let yy = y(v as f32);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v:.2}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
        let s = (max_step * i as f64 / 5.0).round() as usize;
        let _ = writeln!(svg, r#"<text x="{:.1}" y="{}" text-anchor="middle">{s}</text>"#, x(s), h - bottom + 16.0);
    }
    if !train.is_empty() {
        let points: Vec<String> =
            train.iter().filter(|p| p.1.is_finite()).map(|&(s, v)| format!("{:.1},{:.1}", x(s), y(v))).collect();
        let _ = writeln!(
            svg,
            r##"<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{}"/>"##,
            points.join(" ")
        );
    }
    for &(s, v) in validation.iter().filter(|p| p.1.is_finite()) {
        let _ = writeln!(svg, r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="#d62728"/>"##, x(s), y(v));
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{}" y1="{top}" x2="{}" y2="{top}" stroke="#1f77b4" stroke-width="2"/><text x="{}" y="{}">train</text><circle cx="{}" cy="{}" r="3.5" fill="#d62728"/><text x="{}" y="{}">validation</text>
</svg>"##,
        w - 200.0,
        w - 180.0,
        w - 175.0,
        top + 4.0,
        w - 110.0,
        top,
        w - 100.0,
        top + 4.0
    );
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn svg_has_the_curve() {
        let svg = super::loss_svg(&[(0, 5.5), (1, 4.0), (2, 3.0)], &[(2, 3.2)], "a < b");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("<polyline") && svg.contains("<circle") && svg.contains("a &lt; b"));
    }
}
