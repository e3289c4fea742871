//! A terminal's screen as an SVG picture (tests/pictures.rs draws the README's picture of
//! `tasklock top` with it): what `tmux capture-pane -e -p` prints, read as a grid of cells
//! with the SGR attributes a view uses (the 16 colours, the 256, 24-bit ones, bold,
//! reverse), written as monospace text, every run of cells at its column, XML-escaped.
//! Other escape sequences are skipped; a character is one cell (the demo's screen has no
//! wide ones).

/// A colour as the terminal was told it.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Colour {
    Default,
    Indexed(u8),
    Rgb(u8, u8, u8),
}

#[derive(Clone, Copy, PartialEq, Debug)]
struct Style {
    fg: Colour,
    bg: Colour,
    bold: bool,
    reverse: bool,
}

const PLAIN: Style = Style {
    fg: Colour::Default,
    bg: Colour::Default,
    bold: false,
    reverse: false,
};

/// A dark theme: the default colours and the 16 (GitHub's dark palette).
const FOREGROUND: &str = "#c9d1d9";
const BACKGROUND: &str = "#0d1117";
const SIXTEEN: [&str; 16] = [
    "#484f58", "#ff7b72", "#3fb950", "#d29922", "#58a6ff", "#bc8cff", "#39c5cf", "#b1bac4",
    "#6e7681", "#ffa198", "#56d364", "#e3b341", "#79c0ff", "#d2a8ff", "#56d4dd", "#f0f6fc",
];

/// The picture's geometry, in pixels: a cell, and the margins.
const FONT_SIZE: f64 = 14.0;
const CELL_W: f64 = 8.4;
const CELL_H: f64 = 17.0;
const PAD: f64 = 14.0;
const TITLE_BAR: f64 = 30.0;

fn hex(c: Colour, default: &str) -> String {
    match c {
        Colour::Default => default.to_string(),
        Colour::Indexed(n) if n < 16 => SIXTEEN[n as usize].to_string(),
        Colour::Indexed(n) if n < 232 => {
            let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v };
            let n = n - 16;
            format!(
                "#{:02x}{:02x}{:02x}",
                level(n / 36),
                level(n / 6 % 6),
                level(n % 6)
            )
        }
        Colour::Indexed(n) => {
            let g = 8 + 10 * (n - 232);
            format!("#{g:02x}{g:02x}{g:02x}")
        }
        Colour::Rgb(r, g, b) => format!("#{r:02x}{g:02x}{b:02x}"),
    }
}

/// The colours a cell is drawn in: its text's and its background's.
fn colours(s: Style) -> (String, String) {
    let (fg, bg) = (hex(s.fg, FOREGROUND), hex(s.bg, BACKGROUND));
    if s.reverse { (bg, fg) } else { (fg, bg) }
}

/// A colour given by SGR parameters from `p[i]` (38 or 48): the colour and how many
/// parameters it took.
fn extended(p: &[u16], i: usize) -> (Option<Colour>, usize) {
    match p.get(i + 1) {
        Some(5) => (p.get(i + 2).map(|&n| Colour::Indexed(n as u8)), 3),
        Some(2) if p.len() > i + 4 => (
            Some(Colour::Rgb(p[i + 2] as u8, p[i + 3] as u8, p[i + 4] as u8)),
            5,
        ),
        _ => (None, p.len() - i),
    }
}

/// `style` after the SGR sequence with parameters `params` (`1;38;5;2`).
fn sgr(mut style: Style, params: &str) -> Style {
    let p: Vec<u16> = params
        .split([';', ':'])
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let mut i = 0;
    while i < p.len() {
        let mut took = 1;
        match p[i] {
            0 => style = PLAIN,
            1 => style.bold = true,
            22 => style.bold = false,
            7 => style.reverse = true,
            27 => style.reverse = false,
            n @ 30..=37 => style.fg = Colour::Indexed((n - 30) as u8),
            n @ 90..=97 => style.fg = Colour::Indexed((n - 90 + 8) as u8),
            39 => style.fg = Colour::Default,
            n @ 40..=47 => style.bg = Colour::Indexed((n - 40) as u8),
            n @ 100..=107 => style.bg = Colour::Indexed((n - 100 + 8) as u8),
            49 => style.bg = Colour::Default,
            38 | 48 => {
                let (c, n) = extended(&p, i);
                took = n;
                if let Some(c) = c {
                    if p[i] == 38 {
                        style.fg = c;
                    } else {
                        style.bg = c;
                    }
                }
            }
            _ => {}
        }
        i += took;
    }
    style
}

/// The screen as rows of `cols` cells each (a line's missing end is blank).
fn grid(ansi: &str, cols: usize) -> Vec<Vec<(char, Style)>> {
    let mut rows = Vec::new();
    let mut style = PLAIN;
    for line in ansi.lines() {
        let mut row = Vec::with_capacity(cols);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\x1b' {
                row.push((c, style));
                continue;
            }
            match chars.next() {
                Some('[') => {
                    let mut params = String::new();
                    let mut end = None;
                    for d in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&d) {
                            end = Some(d);
                            break;
                        }
                        params.push(d);
                    }
                    if end == Some('m') {
                        style = sgr(style, &params);
                    }
                }
                // An OSC (a title, a link): up to its BEL or ST.
                Some(']') => {
                    while let Some(d) = chars.next() {
                        if d == '\x07' || (d == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            }
        }
        // What tmux left out at a line's end is blank, in no colour.
        row.truncate(cols);
        row.resize(cols, (' ', PLAIN));
        rows.push(row);
    }
    rows
}

/// The text of a capture, without its escape sequences: one line per row.
pub fn text(ansi: &str, cols: usize) -> String {
    grid(ansi, cols)
        .iter()
        .map(|r| {
            r.iter()
                .map(|(c, _)| *c)
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `c` as XML text: escaped, and what XML cannot hold (control characters,
/// noncharacters) shown as `?`.
fn xml_char(c: char, out: &mut String) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        '"' => out.push_str("&quot;"),
        '\'' => out.push_str("&apos;"),
        c if (c < ' ' && c != '\t') || c == '\u{fffe}' || c == '\u{ffff}' => out.push('?'),
        c => out.push(c),
    }
}

/// Runs of cells in one row that `key` gives the same value: (first column, cells, value).
fn runs<K: PartialEq + Clone>(
    row: &[(char, Style)],
    key: impl Fn(&(char, Style)) -> K,
) -> Vec<(usize, usize, K)> {
    let mut out: Vec<(usize, usize, K)> = Vec::new();
    for (i, cell) in row.iter().enumerate() {
        let k = key(cell);
        match out.last_mut() {
            Some((_, n, last)) if *last == k => *n += 1,
            _ => out.push((i, 1, k)),
        }
    }
    out
}

/// The parts of a run of cells starting at column `x` that hold text, each with its
/// column: split where two blanks or more are, so that no text drawn starts or ends with
/// a blank, or holds more than one in a row (a renderer may collapse them; each part is
/// put at its own column).
fn words(cells: &[(char, Style)], x: usize) -> Vec<(usize, &[(char, Style)])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cells.len() {
        if cells[i].0 == ' ' {
            i += 1;
            continue;
        }
        let start = i;
        while i < cells.len() && !(cells[i].0 == ' ' && cells.get(i + 1).is_none_or(|c| c.0 == ' '))
        {
            i += 1;
        }
        out.push((x + start, &cells[start..i]));
    }
    out
}

/// A `cols`×`rows` terminal's capture as an SVG picture of a terminal window titled
/// `title`.
pub fn svg(ansi: &str, cols: u16, rows: u16, title: &str) -> String {
    let (cols, rows) = (cols as usize, rows as usize);
    let mut grid = grid(ansi, cols);
    grid.resize(rows, vec![(' ', PLAIN); cols]);
    grid.truncate(rows);
    let width = 2.0 * PAD + cols as f64 * CELL_W;
    let height = TITLE_BAR + 2.0 * PAD + rows as f64 * CELL_H;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"ui-monospace, SFMono-Regular, \
         'SF Mono', Menlo, Consolas, 'DejaVu Sans Mono', 'Liberation Mono', monospace\" \
         font-size=\"{FONT_SIZE}\" xml:space=\"preserve\">\n\
         <rect width=\"100%\" height=\"100%\" rx=\"8\" fill=\"{BACKGROUND}\"/>\n\
         <circle cx=\"20\" cy=\"15\" r=\"6\" fill=\"#ff5f57\"/>\
         <circle cx=\"40\" cy=\"15\" r=\"6\" fill=\"#febc2e\"/>\
         <circle cx=\"60\" cy=\"15\" r=\"6\" fill=\"#28c840\"/>\n"
    );
    let mut t = String::new();
    title.chars().for_each(|c| xml_char(c, &mut t));
    out.push_str(&format!(
        "<text x=\"{:.1}\" y=\"20\" text-anchor=\"middle\" fill=\"#8b949e\">{t}</text>\n",
        width / 2.0
    ));
    for (y, row) in grid.iter().enumerate() {
        let top = TITLE_BAR + PAD + y as f64 * CELL_H;
        for (x, n, (_, bg)) in runs(row, |(_, s)| colours(*s)) {
            if bg != BACKGROUND {
                out.push_str(&format!(
                    "<rect x=\"{:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{CELL_H}\" fill=\"{bg}\"/>\n",
                    PAD + x as f64 * CELL_W,
                    n as f64 * CELL_W,
                ));
            }
        }
        let base = top + CELL_H * 0.78;
        for (x, n, (fg, bold)) in runs(row, |(_, s)| (colours(*s).0, s.bold)) {
            for (x, cells) in words(&row[x..x + n], x) {
                let mut text = String::new();
                cells.iter().for_each(|(c, _)| xml_char(*c, &mut text));
                out.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{base:.1}\" textLength=\"{:.1}\" fill=\"{fg}\"{}>{text}</text>\n",
                    PAD + x as f64 * CELL_W,
                    cells.len() as f64 * CELL_W,
                    if bold { " font-weight=\"bold\"" } else { "" },
                ));
            }
        }
    }
    out.push_str("</svg>\n");
    out
}
