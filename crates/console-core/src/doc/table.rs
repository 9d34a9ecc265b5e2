//! GFM table rows as text: the cells of a row line, and a row with one cell taken out.

/// The byte spans of a row line's cells, their pipes excluded, split at unescaped pipes (GFM
/// splits at every unescaped `|`, inside code spans too). A leading and a trailing pipe are
/// borders, not separators.
pub(crate) fn cells(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut pipes = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'|' => {
                pipes.push(i);
                i += 1;
            }
            _ => i += 1,
        }
    }
    let first = line.len() - line.trim_start().len();
    let last = line.trim_end().len();
    let mut start = first;
    let mut seps: &[usize] = &pipes;
    if let Some((&p, rest)) = seps.split_first()
        && p == first
    {
        start = p + 1;
        seps = rest;
    }
    let mut end_all = last;
    if let Some((&p, rest)) = seps.split_last()
        && p + 1 == last
    {
        end_all = p;
        seps = rest;
    }
    let mut out = Vec::with_capacity(seps.len() + 1);
    for &p in seps {
        out.push((start, p));
        start = p + 1;
    }
    if start <= end_all {
        out.push((start, end_all));
    }
    out
}

/// The row line with cell `index` taken out, written `| a | b |` (the line's other cells as
/// they were, trimmed). A row with fewer cells is written back with its cells unchanged.
pub(crate) fn without_cell(line: &str, index: usize) -> String {
    let spans = cells(line);
    let kept: Vec<&str> = spans
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != index)
        .map(|(_, &(s, e))| line.get(s..e).unwrap_or("").trim())
        .collect();
    let mut out = String::with_capacity(line.len());
    out.push('|');
    for cell in kept {
        out.push(' ');
        out.push_str(cell);
        out.push_str(" |");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<&str> {
        cells(line)
            .into_iter()
            .map(|(s, e)| line[s..e].trim())
            .collect()
    }

    #[test]
    fn doc_table_cells_split_at_unescaped_pipes() {
        assert_eq!(texts("| a | b |"), ["a", "b"]);
        assert_eq!(texts("a | b"), ["a", "b"]);
        assert_eq!(texts("| a \\| x | `b` |"), ["a \\| x", "`b`"]);
        assert_eq!(texts("|---|:-:|"), ["---", ":-:"]);
        assert_eq!(texts("| a |"), ["a"]);
        assert_eq!(texts("| a | |"), ["a", ""]);
    }

    #[test]
    fn doc_table_without_cell() {
        assert_eq!(without_cell("| a | b | c |", 1), "| a | c |");
        assert_eq!(without_cell("a | b", 0), "| b |");
        assert_eq!(without_cell("| a |", 3), "| a |");
    }
}
