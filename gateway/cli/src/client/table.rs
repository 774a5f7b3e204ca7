//! Aligned text tables, coloured only for a terminal that wants colour.

use std::io::IsTerminal;

/// Colours for people: on when stdout is a terminal and `NO_COLOR` is unset.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    enabled: bool,
}

/// What a cell's colour says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Good,
    Warn,
    Bad,
    Dim,
    Bold,
}

impl Paint {
    pub fn detect() -> Paint {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        Paint {
            enabled: std::io::stdout().is_terminal() && !no_color,
        }
    }

    pub fn paint(self, tone: Tone, text: &str) -> String {
        let code = match tone {
            Tone::Plain => return text.to_owned(),
            Tone::Good => "32",
            Tone::Warn => "33",
            Tone::Bad => "31",
            Tone::Dim => "2",
            Tone::Bold => "1",
        };
        if self.enabled && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// The tone of a server status.
pub fn status_tone(status: &str, degraded: bool) -> Tone {
    match status {
        "online" if degraded => Tone::Warn,
        "online" => Tone::Good,
        "offline" | "error" | "requires_reauth" | "permanently_failed" => Tone::Bad,
        "disabled" => Tone::Dim,
        _ => Tone::Warn,
    }
}

/// Columns padded to their widest cell; the last column is not padded.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<(String, Tone)>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<(String, Tone)>) {
        self.rows.push(cells);
    }

    pub fn render(&self, paint: Paint) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (index, (text, _)) in row.iter().enumerate().take(columns) {
                widths[index] = widths[index].max(text.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<(String, Tone)> = self
            .header
            .iter()
            .map(|h| (h.clone(), Tone::Bold))
            .collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (index, (text, tone)) in row.iter().enumerate().take(columns) {
                let last = index + 1 == columns.min(row.len());
                line.push_str(&paint.paint(*tone, text));
                if !last {
                    let pad = widths[index] - text.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut table = Table::new(&["NAME", "STATUS"]);
        table.row(vec![
            ("filesystem".into(), Tone::Plain),
            ("online".into(), Tone::Good),
        ]);
        table.row(vec![
            ("db".into(), Tone::Plain),
            ("offline".into(), Tone::Bad),
        ]);
        let text = table.render(Paint { enabled: false });
        assert_eq!(
            text,
            "NAME        STATUS\nfilesystem  online\ndb          offline\n"
        );
    }
}
