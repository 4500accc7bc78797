//! Column alignment as Go's `text/tabwriter` does it, which is what gives kubectl's tables and `describe` their
//! look. Cells end with a tab; the text after a line's last tab is not part of any column. A column is aligned
//! over a block of consecutive lines that all have a cell in it, so a line without that cell (a section title in
//! `describe`) starts a new block.

use std::io::Write;

/// Aligns `text`: each column is as wide as its widest cell plus `padding`, and at least `min_width`.
///
/// Widths are display columns (the `tabwriter` crate counts them with `unicode-width`): a CJK character or an
/// emoji takes two, a combining mark none, so columns stay aligned on a terminal whatever the names hold.
pub fn align(text: &str, min_width: usize, padding: usize) -> String {
    // Go's `minwidth` counts the padding in; the crate adds the padding to it.
    let mut w = tabwriter::TabWriter::new(Vec::with_capacity(text.len() * 2))
        .minwidth(min_width.saturating_sub(padding))
        .padding(padding);
    // Writing to a Vec cannot fail (nor can the flush into_inner does), and the crate passes its bytes through.
    let _ = w.write_all(text.as_bytes());
    let out = w.into_inner().unwrap_or_default();
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
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

    #[test]
    fn wide_characters_take_two_columns() {
        // "ウェブ" is 3 characters and 6 columns; "🚀" is 1 character and 2 columns.
        let t = "NAME\tREADY\tAGE\nウェブ-0\t1/1\t5s\n🚀-api\t0/1\t10m\nplain\t1/1\t1h\n";
        let out = align(t, 6, 3);
        assert_eq!(
            out,
            "NAME       READY   AGE\nウェブ-0   1/1     5s\n🚀-api     0/1     10m\nplain      1/1     1h\n"
        );
        // The second column starts at the same display column on every line.
        let col = |line: &str| {
            let cell = line.split("  ").next().unwrap_or_default();
            let spaces = line[cell.len()..].len() - line[cell.len()..].trim_start().len();
            cell.chars()
                .map(|c| if c.is_ascii() { 1 } else { 2 })
                .sum::<usize>()
                + spaces
        };
        let starts: Vec<usize> = out.lines().map(col).collect();
        assert!(starts.iter().all(|&s| s == starts[0]), "{starts:?}\n{out}");
    }
}
