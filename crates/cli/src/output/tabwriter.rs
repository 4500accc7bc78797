//! Column alignment as Go's `text/tabwriter` does it, which is what gives kubectl's tables and `describe` their
//! look. Cells end with a tab; the text after a line's last tab is not part of any column. A column is aligned
//! over a block of consecutive lines that all have a cell in it, so a line without that cell (a section title in
//! `describe`) starts a new block.

/// Aligns `text`: each column is as wide as its widest cell plus `padding`, and at least `min_width`.
pub fn align(text: &str, min_width: usize, padding: usize) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut out = String::with_capacity(text.len() * 2);
    let mut widths = Vec::new();
    let cfg = Cfg { min_width, padding };
    format(&lines, &mut out, &mut widths, 0, lines.len(), cfg);
    out
}

#[derive(Clone, Copy)]
struct Cfg {
    min_width: usize,
    padding: usize,
}

fn width(cell: &str) -> usize {
    cell.chars().count()
}

/// Formats lines `line0..line1` knowing the widths of the columns left of `widths.len()`: finds each block of
/// lines having a cell in the next column, sizes it, and recurses for the columns further right.
fn format(
    lines: &[Vec<&str>],
    out: &mut String,
    widths: &mut Vec<usize>,
    line0: usize,
    line1: usize,
    cfg: Cfg,
) {
    let column = widths.len();
    let mut start = line0;
    let mut this = line0;
    while this < line1 {
        if column + 1 >= lines[this].len() {
            this += 1;
            continue;
        }
        write_lines(lines, out, widths, start, this);
        start = this;
        let mut w = cfg.min_width;
        while this < line1 && column + 1 < lines[this].len() {
            w = w.max(width(lines[this][column]) + cfg.padding);
            this += 1;
        }
        widths.push(w);
        format(lines, out, widths, start, this, cfg);
        widths.pop();
        start = this;
    }
    write_lines(lines, out, widths, start, line1);
}

fn write_lines(lines: &[Vec<&str>], out: &mut String, widths: &[usize], line0: usize, line1: usize) {
    for (i, line) in lines.iter().enumerate().take(line1).skip(line0) {
        for (j, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if let Some(&w) = widths.get(j) {
                out.extend(std::iter::repeat_n(' ', w.saturating_sub(width(cell))));
            }
        }
        if i + 1 < lines.len() {
            out.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::align;

    #[test]
    fn a_table_is_padded_by_three_with_a_minimum_of_six() {
        let t = "NAME\tREADY\tAGE\nnginx-a\t1/1\t5s\nb\t0/1\t10m\n";
        assert_eq!(
            align(t, 6, 3),
            "NAME      READY   AGE\nnginx-a   1/1     5s\nb         0/1     10m\n"
        );
    }

    #[test]
    fn a_line_without_the_column_ends_the_block() {
        let t = "Name:\tx\nLonger label:\ty\nIPs:\n  IP:\t10.0.0.1\nNext:\tz";
        assert_eq!(
            align(t, 0, 2),
            "Name:          x\nLonger label:  y\nIPs:\n  IP:  10.0.0.1\nNext:  z"
        );
    }

    #[test]
    fn continuation_lines_with_an_empty_first_cell_stay_aligned() {
        let t = "Labels:\ta=b\n\tc=d\nStatus:\tRunning\n";
        assert_eq!(align(t, 0, 2), "Labels:  a=b\n         c=d\nStatus:  Running\n");
    }

    #[test]
    fn width_counts_characters_not_bytes() {
        assert_eq!(align("é\tx\nab\ty\n", 0, 1), "é  x\nab y\n");
    }
}
