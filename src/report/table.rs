//! A plain text table: a header row, then rows, each column as wide as its widest cell. Numbers
//! (cells that parse as one) are right-aligned, text is left-aligned.

#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as an HTML `<table>`, numbers right-aligned (class `num`), text escaped.
    pub fn to_html(&self) -> String {
        let cell = |tag: &str, c: &str| {
            let class = if numeric(c) { " class=\"num\"" } else { "" };
            format!("<{tag}{class}>{}</{tag}>", escape_html(c))
        };
        let mut out = String::from("<table>\n<thead><tr>");
        for c in &self.header {
            out += &cell("th", c);
        }
        out += "</tr></thead>\n<tbody>\n";
        for row in &self.rows {
            out += "<tr>";
            for c in row {
                out += &cell("td", c);
            }
            out += "</tr>\n";
        }
        out + "</tbody>\n</table>\n"
    }
}

/// `text` with HTML's special characters escaped.
pub fn escape_html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn numeric(cell: &str) -> bool {
    let trimmed = cell.trim_end_matches(['%', 'x', '×']);
    !trimmed.is_empty() && trimmed.parse::<f64>().is_ok()
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0; cols];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in row.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |f: &mut std::fmt::Formatter<'_>, row: &[String]| -> std::fmt::Result {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if numeric(c) {
                        format!("{c:>w$}", w = width[i])
                    } else {
                        format!("{c:<w$}", w = width[i])
                    }
                })
                .collect();
            writeln!(f, "{}", cells.join("  ").trim_end())
        };
        line(f, &self.header)?;
        let rule: Vec<String> = width.iter().map(|&w| "-".repeat(w)).collect();
        writeln!(f, "{}", rule.join("  "))?;
        for row in &self.rows {
            line(f, row)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_numbers_right_and_text_left() {
        let mut t = Table::new(["policy", "hits"]);
        t.row(["lru", "5"]).row(["s3fifo", "12.5%"]);
        assert_eq!(
            t.to_string(),
            "policy  hits\n------  -----\nlru         5\ns3fifo  12.5%\n"
        );
        t.row(["<a & b>", "3"]);
        let html = t.to_html();
        assert!(html.contains("<th>policy</th>") && html.contains("<td class=\"num\">12.5%</td>"));
        assert!(html.contains("<td>&lt;a &amp; b&gt;</td>"), "{html}");
    }
}
