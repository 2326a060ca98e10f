//! The showdown's charts, one per family of rows (the HTTP ladder, the echo rows, the load
//! balancer's rows: their figures count different things on different scales). Each chart has
//! two panels of horizontal bars labelled with the row names:
//! - throughput over the row's base row: our median over the rounds (a thick bar), its
//!   min-max over the rounds (a whisker), and the seed's ratio for the same step (a thin bar
//!   beneath, where the seed has one);
//! - the server's CPU time per request (per message, per packet), with its min-max whisker.
//!
//! Also the PNG made from each SVG with `rsvg-convert`, for viewers without SVG.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::results::{Row, Showdown, Workload};
use crate::{Error, Result};
use wirespeed_load::stats::Ratio;

/// Our median bar.
pub const OURS: RGBColor = RGBColor(0x31, 0x82, 0xBD);
/// Min-max whiskers (nothing else in a chart has this colour: the tests count them).
pub const WHISKER: RGBColor = RGBColor(0x33, 0x33, 0x33);
/// The seed's ratio (nothing else in a chart has this colour either).
pub const SEED: RGBColor = RGBColor(0xE6, 0x55, 0x0D);
/// CPU time per request.
pub const COST: RGBColor = RGBColor(0x75, 0x6B, 0xB1);
const BASE_LINE: RGBColor = RGBColor(0x99, 0x99, 0x99);
const NOTE: RGBColor = RGBColor(0x66, 0x66, 0x66);

const WIDTH: u32 = 1200;
/// Pixels per row in each panel.
const ROW_PX: u32 = 38;
const LEGEND_PX: u32 = 34;

/// Which chart a row is drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Http,
    Echo,
    Lb,
    /// The scaling rows: the HTTP rows 4 and 7 on more shards.
    Scaling,
}

impl Family {
    pub const ALL: [Family; 4] = [Family::Http, Family::Echo, Family::Lb, Family::Scaling];

    pub fn of(row: &Row) -> Family {
        match row.workload {
            Some(Workload::HttpScaling) => Family::Scaling,
            Some(Workload::EchoPingPong | Workload::EchoStream) => Family::Echo,
            Some(Workload::LbFullNatPps) => Family::Lb,
            // Only results from before rows named their workload name none, and rendering
            // them names every row first (`fill_from_ladder`).
            Some(Workload::Http) | None => Family::Http,
        }
    }

    /// The chart's file name without extension (`results/showdown.svg` is the HTTP ladder).
    pub fn file_stem(self) -> &'static str {
        match self {
            Family::Http => "showdown",
            Family::Echo => "showdown-echo",
            Family::Lb => "showdown-lb",
            Family::Scaling => "showdown-scaling",
        }
    }

    fn what(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Family::Http => ("HTTP plaintext", "req/s", "request"),
            Family::Echo => ("echo, 512-byte messages", "messages/s", "message"),
            Family::Lb => (
                "L4 load balancer, full-NAT 64-byte TCP",
                "packets/s",
                "packet",
            ),
            Family::Scaling => ("HTTP plaintext on more shards", "req/s", "request"),
        }
    }
}

/// The rows' axis: positions are f64 (a row's bars and whisker sit at fractions of its slot),
/// with one tick, and so one label, at each row.
struct RowAxis {
    rows: usize,
}

impl Ranged for RowAxis {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> Range<f64> {
        -0.5..self.rows as f64 - 0.5
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = (value + 0.5) / self.rows.max(1) as f64;
        limit.0 + (f64::from(limit.1 - limit.0) * t).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            return vec![];
        }
        (0..self.rows).map(|i| i as f64).collect()
    }
}

/// The rows of one family, in table order.
fn rows_of(sd: &Showdown, family: Family) -> Vec<&Row> {
    sd.rows.iter().filter(|r| Family::of(r) == family).collect()
}

/// The label beside a row's bars: its number (as in the table) and its name.
pub fn label(row: &Row) -> String {
    format!("{}  {}", row.row, row.name)
}

/// Min and max of a row's per-round CPU time per request.
fn cost_range(row: &Row) -> Option<Ratio> {
    Ratio::of(row.rounds.iter().filter_map(|r| r.cpu_us_per_req).collect())
}

fn base_description(sd: &Showdown, rows: &[&Row]) -> String {
    let mut bases: Vec<usize> = rows.iter().map(|r| r.base_row.max(1)).collect();
    bases.dedup();
    match bases.as_slice() {
        [one] => match sd.rows.iter().find(|r| r.row == *one) {
            Some(b) => format!("row {one} ({})", b.name),
            None => format!("row {one}"),
        },
        _ => "each pair's first row".to_string(),
    }
}

/// The SVG text of one family's chart, or None when the results have no row of it that ran
/// (the scaling rows on a machine with too few CPUs: the table says why).
pub fn svg(sd: &Showdown, family: Family) -> Result<Option<String>> {
    let rows = rows_of(sd, family);
    if rows.iter().all(|r| r.skipped.is_some()) {
        return Ok(None);
    }
    let n = rows.len();
    let (title, per_s, unit) = family.what();
    let base = base_description(sd, &rows);
    let label_w = rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(10) as u32
        * 7
        + 24;
    let panel_h = 70 + ROW_PX * n as u32;
    let height = 40 + LEGEND_PX + 2 * panel_h;
    let panels = Panels {
        rows: &rows,
        label_w,
        title,
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| panels.err(&e))?;
        let root = root
            .titled(
                &format!("wirespeed showdown: {title} ({} round(s))", sd.rounds),
                ("sans-serif", 22),
            )
            .map_err(|e| panels.err(&e))?;
        let (legend, both) = root.split_vertically(LEGEND_PX);
        let seeded = rows.iter().any(|r| r.seed_ratio.is_some());
        draw_legend(&legend, seeded).map_err(|e| panels.err(&e))?;
        let (top, bottom) = both.split_vertically(panel_h);
        panels.ratios(&top, format!("{per_s} over {base}, higher is better"))?;
        panels.costs(
            &bottom,
            format!("server CPU-us per {unit}, lower is better"),
        )?;
        root.present().map_err(|e| panels.err(&e))?;
    }
    Ok(Some(out))
}

/// What both panels of one chart share: its rows in table order, the width of their labels,
/// and the chart's title (for errors).
struct Panels<'a> {
    rows: &'a [&'a Row],
    label_w: u32,
    title: &'a str,
}

type Area<'b> = DrawingArea<SVGBackend<'b>, plotters::coord::Shift>;

impl Panels<'_> {
    fn err(&self, e: &dyn std::fmt::Display) -> Error {
        Error::Invalid(format!("draw the {} chart: {e}", self.title))
    }

    /// Row i (0-based, table order) sits at y = n-1-i, so the first row is on top.
    fn y_of(&self, i: usize) -> f64 {
        (self.rows.len() - 1 - i) as f64
    }

    fn name_at(&self, y: &f64) -> String {
        let i = self.rows.len() as f64 - 1.0 - y.round();
        self.rows
            .get(i as usize)
            .map(|r| label(r))
            .unwrap_or_default()
    }

    /// Throughput over the base row, with the seed's ratio.
    fn ratios(&self, area: &Area<'_>, caption: String) -> Result<()> {
        let n = self.rows.len();
        let ratio_max = self
            .rows
            .iter()
            .flat_map(|r| {
                let ours = r.rate_vs_base.map(|x| x.max.max(x.median));
                [ours, r.seed_ratio]
            })
            .flatten()
            .filter(|x| x.is_finite())
            .fold(1.0, f64::max)
            * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 17))
            .margin(8)
            .margin_right(24)
            .x_label_area_size(28)
            .y_label_area_size(self.label_w)
            .build_cartesian_2d(0f64..ratio_max, RowAxis { rows: n })
            .map_err(|e| self.err(&e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .y_label_formatter(&|y: &f64| self.name_at(y))
            .x_label_formatter(&|x| format!("{x:.1}x"))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| self.err(&e))?;
        chart
            .draw_series([PathElement::new(
                [(1.0, -0.5), (1.0, n as f64 - 0.5)],
                BASE_LINE.stroke_width(1),
            )])
            .map_err(|e| self.err(&e))?;
        for (i, r) in self.rows.iter().enumerate() {
            let y = self.y_of(i);
            if let Some(why) = &r.skipped {
                let mut text = format!("skipped: {why}");
                if text.chars().count() > 70 {
                    text = text.chars().take(67).collect::<String>() + "...";
                }
                chart
                    .draw_series([note(text, (ratio_max * 0.01, y), &NOTE)])
                    .map_err(|e| self.err(&e))?;
            } else if let Some(ours) = r.rate_vs_base {
                chart
                    .draw_series(bar_with_whisker(
                        ours,
                        y,
                        OURS,
                        format!("{:.2}x", ours.median),
                        ratio_max * 0.008,
                    ))
                    .map_err(|e| self.err(&e))?;
            } else {
                chart
                    .draw_series([note("n/a".into(), (ratio_max * 0.01, y + 0.15), &NOTE)])
                    .map_err(|e| self.err(&e))?;
            }
            if let Some(seed) = r.seed_ratio {
                chart
                    .draw_series([
                        Rectangle::new([(0.0, y - 0.3), (seed, y - 0.12)], SEED.filled())
                            .into_dyn(),
                        note(
                            format!("seed {seed:.2}x"),
                            (seed + ratio_max * 0.01, y - 0.21),
                            &SEED,
                        )
                        .into_dyn(),
                    ])
                    .map_err(|e| self.err(&e))?;
            }
        }

        Ok(())
    }

    /// The server's CPU time per request.
    fn costs(&self, area: &Area<'_>, caption: String) -> Result<()> {
        let n = self.rows.len();
        let cost_max = self
            .rows
            .iter()
            .filter_map(|r| cost_range(r))
            .map(|c| c.max)
            .fold(0.0, f64::max)
            .max(0.1)
            * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 17))
            .margin(8)
            .margin_right(24)
            .x_label_area_size(28)
            .y_label_area_size(self.label_w)
            .build_cartesian_2d(0f64..cost_max, RowAxis { rows: n })
            .map_err(|e| self.err(&e))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .light_line_style(TRANSPARENT)
            .y_label_formatter(&|y: &f64| self.name_at(y))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(|e| self.err(&e))?;
        for (i, r) in self.rows.iter().enumerate() {
            let y = self.y_of(i);
            match (r.cpu_us_per_req, cost_range(r)) {
                (Some(median), Some(range)) if r.skipped.is_none() => {
                    let c = Ratio { median, ..range };
                    chart
                        .draw_series(bar_with_whisker(
                            c,
                            y,
                            COST,
                            format!("{median:.2}"),
                            cost_max * 0.008,
                        ))
                        .map_err(|e| self.err(&e))?;
                }
                _ => {
                    let text = if r.skipped.is_some() {
                        "skipped"
                    } else {
                        "n/a"
                    };
                    chart
                        .draw_series([note(text.into(), (cost_max * 0.01, y), &NOTE)])
                        .map_err(|e| self.err(&e))?;
                }
            }
        }
        Ok(())
    }
}

/// Text left-aligned at `at`, vertically centred on it.
fn note(
    text: String,
    at: (f64, f64),
    color: &'static RGBColor,
) -> Text<'static, (f64, f64), String> {
    let style = TextStyle::from(("sans-serif", 12).into_font())
        .color(color)
        .pos(Pos::new(HPos::Left, VPos::Center));
    Text::new(text, at, style)
}

/// A bar at the median, a whisker from min to max over the rounds, and the median's value
/// `gap` right of both. The bar takes the upper part of the row's slot (the seed's thin bar, if
/// any, goes beneath it).
fn bar_with_whisker<DB: DrawingBackend>(
    v: Ratio,
    y: f64,
    color: RGBColor,
    value: String,
    gap: f64,
) -> Vec<DynElement<'static, DB, (f64, f64)>> {
    let mid = y + 0.15;
    let cap = 0.13;
    let right = v.max.max(v.median);
    vec![
        Rectangle::new([(0.0, y - 0.05), (v.median, y + 0.35)], color.filled()).into_dyn(),
        // One polyline per whisker: left cap, the bar from min to max, right cap.
        PathElement::new(
            vec![
                (v.min, mid - cap),
                (v.min, mid + cap),
                (v.min, mid),
                (v.max, mid),
                (v.max, mid + cap),
                (v.max, mid - cap),
            ],
            WHISKER.stroke_width(2),
        )
        .into_dyn(),
        Text::new(
            value,
            (right + gap, mid),
            TextStyle::from(("sans-serif", 12).into_font())
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        )
        .into_dyn(),
    ]
}

/// What the marks mean, in a strip under the title (the seed's mark only where some row has
/// a seed figure).
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    seeded: bool,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let text = |s: &str, x: i32| {
        Text::new(
            s.to_string(),
            (x, 17),
            TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Left, VPos::Center)),
        )
    };
    let mut x = 40;
    area.draw(&Rectangle::new([(x, 9), (x + 24, 25)], OURS.filled()))?;
    area.draw(&text("ours: median over the rounds", x + 30))?;
    x += 250;
    area.draw(&PathElement::new(
        vec![
            (x, 11),
            (x, 23),
            (x, 17),
            (x + 24, 17),
            (x + 24, 23),
            (x + 24, 11),
        ],
        WHISKER.stroke_width(2),
    ))?;
    area.draw(&text("min-max over the rounds", x + 30))?;
    x += 220;
    if seeded {
        area.draw(&Rectangle::new([(x, 13), (x + 24, 21)], SEED.filled()))?;
        area.draw(&text("the seed's ratio for the same step", x + 30))?;
        x += 280;
    }
    area.draw(&PathElement::new(
        vec![(x + 12, 7), (x + 12, 27)],
        BASE_LINE.stroke_width(1),
    ))?;
    area.draw(&text("1.0x: the base row", x + 24))?;
    Ok(())
}

/// Writes each family's SVG under `dir` (`showdown.svg`, `showdown-echo.svg`,
/// `showdown-lb.svg`, `showdown-scaling.svg`, those with rows that ran) and returns their
/// paths.
pub fn write_svgs(sd: &Showdown, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = vec![];
    for family in Family::ALL {
        let path = dir.join(format!("{}.svg", family.file_stem()));
        match svg(sd, family)? {
            Some(text) => {
                std::fs::write(&path, text).map_err(|source| Error::Io {
                    what: format!("write {}", path.display()),
                    source,
                })?;
                written.push(path);
            }
            // A chart from an earlier run with other rows would be taken for this one's.
            None => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(path.with_extension("png"));
            }
        }
    }
    Ok(written)
}

/// Converts an SVG to a PNG beside it with `rsvg-convert` (Debian's librsvg2-bin). The
/// error is one line that says what to do (the same line for every chart when the tool is
/// missing: the caller says it once).
pub fn png(svg: &Path) -> std::result::Result<PathBuf, String> {
    let png = svg.with_extension("png");
    let out = Command::new("rsvg-convert")
        .arg("--background-color=white")
        .arg("-o")
        .arg(&png)
        .arg(svg)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                "no PNG charts, SVG only: rsvg-convert is not installed \
                 (make deps, or apt-get install librsvg2-bin)"
                    .to_string()
            }
            _ => format!("no PNG charts, SVG only: rsvg-convert: {e}"),
        })?;
    if !out.status.success() {
        let mut msg = String::new();
        let _ = write!(
            msg,
            "no PNG charts, SVG only: rsvg-convert failed on {} ({}): {}",
            svg.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return Err(msg);
    }
    Ok(png)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::RoundFigures;

    fn row(n: usize, name: &str, workload: Workload, base_row: usize, rps: [f64; 3]) -> Row {
        let mut r = Row {
            row: n,
            name: name.into(),
            workload: Some(workload),
            base_row,
            rounds: rps
                .iter()
                .map(|&rps| RoundFigures {
                    rps,
                    cpu_us_per_req: Some(1e6 / rps),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        r.summarize();
        r
    }

    fn fixture() -> Showdown {
        let mut http = [
            row(1, "untuned kernel", Workload::Http, 1, [100.0, 110.0, 90.0]),
            row(2, "tuned kernel", Workload::Http, 1, [210.0, 200.0, 170.0]),
            row(
                3,
                "+ perfect locality",
                Workload::Http,
                1,
                [230.0, 220.0, 250.0],
            ),
            row(4, "io_uring", Workload::Http, 1, [120.0, 130.0, 100.0]),
            row(5, "nginx (1 worker)", Workload::Http, 1, [0.0; 3]),
        ];
        http[1].seed_ratio = Some(2.03);
        http[2].seed_ratio = Some(2.2);
        http[4].skipped = Some("nginx is not installed".into());
        http[4].rounds.clear();
        let mut echo = [
            row(
                6,
                "echo ping-pong 512 B: kernel",
                Workload::EchoPingPong,
                6,
                [50.0, 55.0, 45.0],
            ),
            row(
                7,
                "echo ping-pong 512 B: bypass",
                Workload::EchoPingPong,
                6,
                [60.0, 70.0, 50.0],
            ),
        ];
        echo[0].seed_ratio = Some(1.0);
        echo[1].seed_ratio = Some(1.19);
        let mut sd = Showdown {
            rounds: 3,
            rows: http.into_iter().chain(echo).collect(),
            ..Default::default()
        };
        sd.compute_ratios();
        sd
    }

    fn escaped(s: &str) -> String {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('\'', "&apos;")
    }

    /// Elements `<tag ...>` with the attribute `attr`.
    fn count(svg: &str, tag: &str, attr: &str) -> usize {
        svg.lines()
            .filter(|l| l.starts_with(&format!("<{tag} ")) && l.contains(attr))
            .count()
    }

    #[test]
    fn every_row_is_named_with_whiskers_and_seed_bars_on_its_familys_chart() {
        let sd = fixture();
        let http = svg(&sd, Family::Http).unwrap().unwrap();
        let echo = svg(&sd, Family::Echo).unwrap().unwrap();
        assert!(svg(&sd, Family::Lb).unwrap().is_none());
        let whisker = format!(
            "stroke=\"#{:02X}{:02X}{:02X}\"",
            WHISKER.0, WHISKER.1, WHISKER.2
        );
        let seed = format!("fill=\"#{:02X}{:02X}{:02X}\"", SEED.0, SEED.1, SEED.2);
        for (chart, family) in [(&http, Family::Http), (&echo, Family::Echo)] {
            let rows = rows_of(&sd, family);
            for r in &rows {
                assert!(chart.contains(&escaped(&label(r))), "{} missing", r.name);
                if let Some(s) = r.seed_ratio {
                    assert!(chart.contains(&format!("seed {s:.2}x")), "{} seed", r.name);
                }
            }
            // Other families' rows stay off this chart.
            for r in sd.rows.iter().filter(|r| Family::of(r) != family) {
                assert!(!chart.contains(&escaped(&label(r))), "{} leaked", r.name);
            }
            let measured = rows.iter().filter(|r| r.skipped.is_none()).count();
            let seeded = rows.iter().filter(|r| r.seed_ratio.is_some()).count();
            // A whisker per measured row in each of the two panels, plus the legend's.
            assert_eq!(
                count(chart, "polyline", &whisker),
                2 * measured + 1,
                "{family:?}"
            );
            // A seed bar per row the seed has a figure for, plus the legend's.
            assert!(seeded > 0);
            assert_eq!(count(chart, "rect", &seed), seeded + 1, "{family:?}");
        }
        assert!(http.contains("skipped: nginx is not installed"));
        assert!(http.contains("over row 1 (untuned kernel)"));
        assert!(echo.contains("messages/s over row 6"));
    }

    #[test]
    fn scaling_rows_get_their_own_chart_only_when_one_of_them_ran() {
        let mut sd = fixture();
        let mut wide = [
            row(
                9,
                "tuned kernel, 2 shards",
                Workload::HttpScaling,
                4,
                [0.0; 3],
            ),
            row(10, "bypass, 2 shards", Workload::HttpScaling, 9, [0.0; 3]),
        ];
        for r in wide.iter_mut() {
            r.skipped = Some("needs 4 CPUs".into());
            r.rounds.clear();
        }
        sd.rows.extend(wide);
        assert!(svg(&sd, Family::Scaling).unwrap().is_none(), "all skipped");
        let http = svg(&sd, Family::Http).unwrap().unwrap();
        assert!(
            !http.contains("shards"),
            "scaling rows stay off the ladder's chart"
        );
        // On a machine with the CPUs: measured, charted apart.
        sd.rows.truncate(sd.rows.len() - 2);
        let ran = [
            row(
                9,
                "tuned kernel, 2 shards",
                Workload::HttpScaling,
                4,
                [190.0, 200.0, 210.0],
            ),
            row(
                10,
                "bypass, 2 shards",
                Workload::HttpScaling,
                9,
                [300.0, 320.0, 310.0],
            ),
        ];
        sd.rows.extend(ran.iter().cloned());
        let chart = svg(&sd, Family::Scaling).unwrap().unwrap();
        assert!(chart.contains("HTTP plaintext on more shards"));
        for r in &ran {
            assert!(chart.contains(&escaped(&label(r))), "{} missing", r.name);
        }
        assert_eq!(Family::Scaling.file_stem(), "showdown-scaling");
    }

    #[test]
    fn a_family_without_seed_figures_shows_no_seed_mark() {
        let mut sd = fixture();
        sd.rows.push(row(
            8,
            "L4 LB: nftables",
            Workload::LbFullNatPps,
            8,
            [4.0, 5.0, 6.0],
        ));
        sd.rows.push(row(
            9,
            "L4 LB: wirespeed lb",
            Workload::LbFullNatPps,
            8,
            [20.0, 25.0, 30.0],
        ));
        sd.compute_ratios();
        let lb = svg(&sd, Family::Lb).unwrap().unwrap();
        let seed = format!("fill=\"#{:02X}{:02X}{:02X}\"", SEED.0, SEED.1, SEED.2);
        assert_eq!(count(&lb, "rect", &seed), 0);
        assert!(!lb.contains("the seed's ratio"));
        assert!(lb.contains("5.00x") && lb.contains("packets/s over row 8 (L4 LB: nftables)"));
    }

    #[test]
    fn whiskers_span_the_rounds() {
        let sd = fixture();
        let r = &sd.rows[1];
        let ratio = r.rate_vs_base.unwrap();
        // Rounds 210/100, 200/110, 170/90 -> 1.82 .. 2.1, median 1.89.
        assert!((ratio.min - 200.0 / 110.0).abs() < 1e-9);
        assert!((ratio.max - 2.1).abs() < 1e-9);
        let cost = cost_range(r).unwrap();
        assert!((cost.min - 1e6 / 210.0).abs() < 1e-9);
        assert!((cost.max - 1e6 / 170.0).abs() < 1e-9);
    }

    #[test]
    fn a_row_is_charted_by_its_workload() {
        let mut r = Row::default();
        assert_eq!(Family::of(&r), Family::Http);
        for (w, family) in [
            (Workload::Http, Family::Http),
            (Workload::HttpScaling, Family::Scaling),
            (Workload::EchoPingPong, Family::Echo),
            (Workload::EchoStream, Family::Echo),
            (Workload::LbFullNatPps, Family::Lb),
        ] {
            r.workload = Some(w);
            assert_eq!(Family::of(&r), family);
        }
    }

    #[test]
    fn writes_one_svg_per_family_and_removes_stale_ones() {
        let dir = std::env::temp_dir().join(format!("ws-showdown-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("showdown-lb.svg"), "stale").unwrap();
        let written = write_svgs(&fixture(), &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["showdown.svg", "showdown-echo.svg"]);
        assert!(!dir.join("showdown-lb.svg").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
