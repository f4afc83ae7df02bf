//! Line charts as inline SVG, drawn by the server: a time axis of the last minutes, a value axis
//! from zero to a round maximum, one polyline per series (broken where a period has no value).

use std::fmt::Write;

use super::html::escape;

/// The drawing's size (it scales to its box) and the plot's margins.
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 14.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// One line of a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Its name in the legend.
    pub(crate) name: String,
    /// Its points: seconds before now (zero or less) and the value, if the period had one.
    pub(crate) points: Vec<(f64, Option<f64>)>,
}

/// The smallest of 1, 2, 5 times a power of ten at least `max` (1 for nothing).
pub(crate) fn round_up(max: f64) -> f64 {
    if max.is_nan() || max <= 0.0 {
        return 1.0;
    }
    let mut step = 10f64.powf(max.log10().floor());
    loop {
        for factor in [1.0, 2.0, 5.0] {
            if step * factor >= max * (1.0 - 1e-9) {
                return step * factor;
            }
        }
        step *= 10.0;
    }
}

/// A number for an axis or a caption: no more digits than it needs.
pub(crate) fn number(value: f64) -> String {
    let text = if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A chart of `series` over the last `window` seconds, values in `unit`, or a note that there
/// is nothing to draw yet.
pub(crate) fn line_chart(
    id: &str,
    label: &str,
    unit: &str,
    window: f64,
    series: &[Series],
) -> String {
    let values = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.1));
    let max = round_up(values.fold(0.0, f64::max));
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |seconds_before: f64| LEFT + plot_w * (1.0 + seconds_before / window).clamp(0.0, 1.0);
    let y = |value: f64| TOP + plot_h * (1.0 - (value / max).clamp(0.0, 1.0));
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"{}\" class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-label=\"{}\"><title>{}</title>",
        escape(id),
        escape(label),
        escape(label)
    );
    // Value axis: zero, half, the maximum; a grid line each.
    for value in [0.0, max / 2.0, max] {
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"axis\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{} {}</text>",
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(value) + 4.0,
            number(value),
            escape(unit),
            y = y(value),
        );
    }
    // Time axis: at most seven ticks back from now, at round intervals.
    let step = [15.0, 30.0, 60.0, 120.0, 300.0]
        .into_iter()
        .find(|step| window / step <= 6.0)
        .unwrap_or(300.0);
    let mut back = 0.0;
    while back <= window + 1e-9 {
        let label = match back {
            0.0 => "now".to_string(),
            b if b < 60.0 => format!("−{} s", number(b)),
            b => format!("−{} min", number(b / 60.0)),
        };
        let anchor = if back == 0.0 { "end" } else { "middle" };
        let _ = write!(
            svg,
            "<text class=\"axis\" x=\"{:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{label}</text>",
            x(-back),
            HEIGHT - 8.0
        );
        back += step;
    }
    for (i, s) in series.iter().enumerate() {
        for run in runs(&s.points) {
            let class = format!("s{i}");
            if let [(t, v)] = run.as_slice() {
                let _ = write!(
                    svg,
                    "<circle class=\"{class}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\"/>",
                    x(*t),
                    y(*v)
                );
                continue;
            }
            let points: Vec<String> = run
                .iter()
                .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
                .collect();
            let _ = write!(
                svg,
                "<polyline class=\"{class}\" points=\"{}\"/>",
                points.join(" ")
            );
        }
    }
    svg.push_str("</svg>");
    let mut legend = String::from("<ul class=\"legend\">");
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            legend,
            "<li><span class=\"swatch s{i}\"></span>{}</li>",
            escape(&s.name)
        );
    }
    legend.push_str("</ul>");
    format!("{svg}{legend}")
}

/// The stretches of consecutive points that have values.
fn runs(points: &[(f64, Option<f64>)]) -> Vec<Vec<(f64, f64)>> {
    let mut runs = vec![Vec::new()];
    for &(t, value) in points {
        match value {
            Some(v) => runs.last_mut().into_iter().for_each(|r| r.push((t, v))),
            None => runs.push(Vec::new()),
        }
    }
    runs.retain(|r| !r.is_empty());
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_end_at_round_numbers_and_labels_keep_few_digits() {
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(0.7), 1.0);
        assert_eq!(round_up(1.2), 2.0);
        assert_eq!(round_up(3.0), 5.0);
        assert_eq!(round_up(7.0), 10.0);
        assert_eq!(round_up(10.0), 10.0);
        assert_eq!(round_up(0.013), 0.02);
        assert_eq!(round_up(430.0), 500.0);
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(12.5), "12.5");
        assert_eq!(number(250.0), "250");
    }

    #[test]
    fn a_chart_draws_each_stretch_of_values_and_escapes_its_names() {
        let series = [
            Series {
                name: "completed <per s>".into(),
                points: vec![
                    (-20.0, Some(1.0)),
                    (-15.0, Some(2.0)),
                    (-10.0, None),
                    (-5.0, Some(4.0)),
                ],
            },
            Series {
                name: "failed".into(),
                points: vec![],
            },
        ];
        let svg = line_chart("throughput", "Throughput", "/s", 900.0, &series);
        assert_eq!(svg.matches("<polyline class=\"s0\"").count(), 1, "{svg}");
        assert_eq!(svg.matches("<circle class=\"s0\"").count(), 1, "{svg}");
        assert!(svg.contains(">5 /s</text>"), "the axis ends at 5: {svg}");
        assert!(
            svg.contains(">now</text>") && svg.contains(">−15 min</text>"),
            "{svg}"
        );
        assert_eq!(
            svg.matches("min</text>").count(),
            3,
            "every 5 minutes: {svg}"
        );
        let young = line_chart("t", "T", "/s", 60.0, &series);
        assert!(young.contains(">−15 s</text>") && young.contains(">−1 min</text>"));
        assert_eq!(
            young.matches("class=\"axis\"").count(),
            8,
            "3 values, 5 times: {young}"
        );
        assert!(svg.contains("completed &lt;per s&gt;"), "{svg}");
        // The last point is 5 s before now: near the right edge, at 4 of 5.
        let right = LEFT + (WIDTH - LEFT - RIGHT) * (1.0 - 5.0 / 900.0);
        let top = TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - 4.0 / 5.0);
        assert!(
            svg.contains(&format!("cx=\"{right:.1}\" cy=\"{top:.1}\"")),
            "{svg}"
        );
    }
}
