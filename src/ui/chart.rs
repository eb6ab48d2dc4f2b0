//! Charts for `localagents ui`, as SVG written on the server.
//!
//! Hand-made rather than a plotting crate: the page needs two kinds of
//! chart (paired bars, bars with a line over them), and a few dozen lines
//! of SVG cost less than a crate with a font stack. No script, no style
//! attribute (the page's Content-Security-Policy allows neither inline):
//! colours come from classes in the page's stylesheet. Every label goes
//! through [`super::html::esc`].

use std::fmt::Write;

use super::html::esc;

/// One group of bars: its label and a value per series (NaN: no bar).
pub struct Group {
    pub label: String,
    pub values: Vec<f64>,
}

/// A bar chart with a pair (or more) of bars per group, and optionally a
/// line of points over them on its own scale (time to first token).
pub struct Bars<'a> {
    /// Each series' class (`new`, `cached`, …) and legend name.
    pub series: &'a [(&'a str, &'a str)],
    pub groups: &'a [Group],
    /// A value per group, drawn as points on the right-hand scale.
    pub line: Option<(&'a str, &'a [Option<f64>])>,
    /// How a value on the left scale reads ("12.3 k", "$0.42").
    pub fmt: &'a dyn Fn(f64) -> String,
    /// How a value on the right scale reads.
    pub line_fmt: &'a dyn Fn(f64) -> String,
    pub title: &'a str,
}

const W: f64 = 900.0;
const H: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 60.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;

/// The left scale: from the smallest value (zero at most) to the largest
/// (zero at least), over the plot's height.
#[derive(Clone, Copy)]
struct Scale {
    max: f64,
    min: f64,
    span: f64,
}

impl Scale {
    /// The scale of every finite value of `groups`.
    fn of(groups: &[Group]) -> Scale {
        let finite = || {
            groups
                .iter()
                .flat_map(|g| g.values.iter().copied())
                .filter(|v| v.is_finite())
        };
        let max = finite().fold(0.0_f64, f64::max);
        let min = finite().fold(0.0_f64, f64::min);
        let span = if max - min > 0.0 { max - min } else { 1.0 };
        Scale { max, min, span }
    }

    /// The height of `v` on the plot.
    fn y(self, v: f64) -> f64 {
        TOP + (H - TOP - BOTTOM) * (self.max - v) / self.span
    }
}

/// The chart as an `<svg>` element.
pub fn bars(c: &Bars) -> String {
    let mut s = String::new();
    let scale = Scale::of(c.groups);
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" viewBox="0 0 {W} {H}" width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg"><title>{}</title>"#,
        esc(c.title)
    );
    axis(&mut s, c, scale);
    let slot = (W - LEFT - RIGHT) / c.groups.len().max(1) as f64;
    groups(&mut s, c, scale, slot);
    if let Some((name, points)) = c.line {
        line(&mut s, c, (name, points), slot);
    }
    legend(&mut s, c);
    s.push_str("</svg>");
    s
}

/// Axis lines and labels: the top value, zero (and the bottom when
/// something is below zero).
fn axis(s: &mut String, c: &Bars, scale: Scale) {
    let Scale { max, min, span } = scale;
    for v in [max, 0.0, min] {
        if v == 0.0 || (v - 0.0).abs() > span / 20.0 {
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}"/><text class="axis" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                W - RIGHT,
                LEFT - 6.0,
                scale.y(v) + 4.0,
                esc(&(c.fmt)(v)),
                y = scale.y(v),
            );
        }
    }
}

/// Each group's bars side by side in its `slot` of the width, and its
/// label under them (every label at most twelve of them).
fn groups(s: &mut String, c: &Bars, scale: Scale, slot: f64) {
    let y = |v: f64| scale.y(v);
    let k = c.series.len().max(1) as f64;
    let bar_w = (slot * 0.8 / k).max(0.5);
    let every = (c.groups.len() / 12).max(1);
    for (i, g) in c.groups.iter().enumerate() {
        let x0 = LEFT + slot * i as f64 + slot * 0.1;
        let _ = write!(s, r#"<g class="group" data-i="{i}">"#);
        for (j, v) in g.values.iter().enumerate() {
            // A value that is not a number (NaN): no bar.
            if !v.is_finite() {
                continue;
            }
            let (class, name) = c.series.get(j).copied().unwrap_or(("bar", ""));
            let (top, bottom) = if *v >= 0.0 {
                (y(*v), y(0.0))
            } else {
                (y(0.0), y(*v))
            };
            let _ = write!(
                s,
                r#"<rect class="bar {}" x="{:.1}" y="{top:.1}" width="{bar_w:.1}" height="{:.1}"><title>{}: {} {}</title></rect>"#,
                esc(class),
                x0 + bar_w * j as f64,
                (bottom - top).max(0.0),
                esc(&g.label),
                esc(&(c.fmt)(*v)),
                esc(name)
            );
        }
        s.push_str("</g>");
        if i % every == 0 {
            let _ = write!(
                s,
                r#"<text class="axis" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x0 + bar_w * k / 2.0,
                H - BOTTOM + 16.0,
                esc(&g.label)
            );
        }
    }
}

/// The line over the bars: a point per group that has a value, joined,
/// on its own scale (its largest value at the right).
fn line(s: &mut String, c: &Bars, (name, points): (&str, &[Option<f64>]), slot: f64) {
    let plot_h = H - TOP - BOTTOM;
    let lmax = points.iter().flatten().copied().fold(0.0_f64, f64::max);
    let lmax = if lmax > 0.0 { lmax } else { 1.0 };
    let ly = |v: f64| TOP + plot_h * (1.0 - v / lmax);
    let mut path = String::new();
    for (i, p) in points.iter().enumerate() {
        if let Some(v) = p {
            let x = LEFT + slot * i as f64 + slot / 2.0;
            let _ = write!(
                path,
                "{}{x:.1},{:.1}",
                if path.is_empty() { "M" } else { " L" },
                ly(*v)
            );
            let _ = write!(
                s,
                r#"<circle class="point" cx="{x:.1}" cy="{:.1}" r="2.5"><title>{}: {}</title></circle>"#,
                ly(*v),
                esc(name),
                esc(&(c.line_fmt)(*v))
            );
        }
    }
    if !path.is_empty() {
        let _ = write!(s, r#"<path class="line" d="{path}"/>"#);
    }
    let _ = write!(
        s,
        r#"<text class="axis" x="{}" y="{}">{}</text>"#,
        W - RIGHT + 6.0,
        TOP + 4.0,
        esc(&(c.line_fmt)(lmax)),
    );
}

/// The legend: a swatch and name per series, then the line's.
fn legend(s: &mut String, c: &Bars) {
    let mut lx = LEFT;
    for (class, name) in c.series {
        let _ = write!(
            s,
            r#"<rect class="bar {}" x="{lx:.1}" y="8" width="12" height="12"/><text class="legend" x="{:.1}" y="18">{}</text>"#,
            esc(class),
            lx + 16.0,
            esc(name)
        );
        lx += 24.0 + 7.0 * name.len() as f64;
    }
    if let Some((name, _)) = c.line {
        let _ = write!(
            s,
            r#"<line class="line" x1="{lx:.1}" x2="{:.1}" y1="14" y2="14"/><text class="legend" x="{:.1}" y="18">{} (right scale)</text>"#,
            lx + 14.0,
            lx + 18.0,
            esc(name)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_pair_per_group_and_labels_escaped() {
        let groups = vec![
            Group {
                label: "<b>".into(),
                values: vec![10.0, 30.0],
            },
            Group {
                label: "2".into(),
                values: vec![5.0, 0.0],
            },
        ];
        let fmt = |v: f64| format!("{v}");
        let svg = bars(&Bars {
            series: &[("new", "new"), ("cached", "cached")],
            groups: &groups,
            line: Some(("ttft", &[Some(100.0), None])),
            fmt: &fmt,
            line_fmt: &fmt,
            title: "t",
        });
        assert_eq!(svg.matches(r#"<g class="group""#).count(), 2);
        assert_eq!(svg.matches(r#"class="bar new" x"#).count(), 3, "{svg}"); // 2 + legend
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(!svg.contains("<b>") && svg.contains("&lt;b&gt;"));
    }
}
