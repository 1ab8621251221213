//! What every reader of text input does alike: a UTF-8 byte-order mark before the first line is
//! skipped (as Python's `utf-8-sig` and spreadsheet exports write it), and a line-oriented file
//! must end with a newline. A number cut short still parses (`374` cut to `37`), so a last line
//! without its newline is refused, naming the line, rather than read as a wrong request.

use std::io::{self, BufRead};

/// The UTF-8 byte-order mark.
pub const BOM: &str = "\u{feff}";

/// Why a last line without a newline is refused (the message names the line before it).
pub const INCOMPLETE: &str = "the file ends inside this line, without a newline, as a file cut short does (if the line is whole, end the file with a newline)";

/// `text` without a leading byte-order mark.
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// Consumes a byte-order mark at the start of `input`, if there is one.
pub fn skip_bom(input: &mut impl BufRead) -> io::Result<()> {
    if input.fill_buf()?.starts_with(BOM.as_bytes()) {
        input.consume(BOM.len());
    }
    Ok(())
}

/// The number (1-based) of the last line of `text` if it does not end with a newline.
pub fn unterminated_last_line(text: &str) -> Option<u64> {
    match text.is_empty() || text.ends_with('\n') {
        true => None,
        false => Some(text.bytes().filter(|&b| b == b'\n').count() as u64 + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_is_skipped_once_and_an_unterminated_line_is_found() {
        assert_eq!(strip_bom("\u{feff}a,b\n"), "a,b\n");
        assert_eq!(strip_bom("\u{feff}\u{feff}x"), "\u{feff}x");
        let mut r = io::Cursor::new("\u{feff}{}\n".as_bytes());
        skip_bom(&mut r).unwrap();
        let mut rest = String::new();
        r.read_line(&mut rest).unwrap();
        assert_eq!(rest, "{}\n");
        let mut plain = io::Cursor::new(&b"ab"[..]);
        skip_bom(&mut plain).unwrap();
        assert_eq!(plain.position(), 0);
        assert_eq!(unterminated_last_line("a\nb\n37"), Some(3));
        assert_eq!(unterminated_last_line("a\nb\n"), None);
        assert_eq!(unterminated_last_line(""), None);
        assert_eq!(unterminated_last_line("x"), Some(1));
    }
}
