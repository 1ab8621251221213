//! Input quoted in an error message, cut to a readable length: the one rule for every message
//! the CLI prints. A field of a bad file can be megabytes long; its first characters and its
//! size say what it is.

/// Characters of a quoted span a message keeps.
pub const SHOWN: usize = 80;

/// `message` with every quoted span longer than [`SHOWN`] characters cut to its first ones, then
/// the closing quote, `…` and the span's length. Spans are quoted as Rust's `{:?}` and serde_json
/// quote text (between `"` and `"`, with `\"` and `\\` inside) or as serde names a field (between
/// backticks).
pub fn clip(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4096));
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest[open..].chars().next().expect("found");
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let Some(end) = span_end(rest, quote) else {
            break;
        };
        let span = &rest[..end];
        let chars = span.chars().count();
        if chars > SHOWN {
            let cut: String = span.chars().take(SHOWN).collect();
            out.push_str(&format!("{cut}…{quote} ({chars} characters)"));
        } else {
            out.push_str(span);
            out.push(quote);
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Where the span opened by `quote` ends in `rest`: the next unescaped `"`, or the next backtick.
fn span_end(rest: &str, quote: char) -> Option<usize> {
    if quote == '`' {
        return rest.find('`');
    }
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match (escaped, c) {
            (false, '\\') => escaped = true,
            (false, '"') => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_quoted_spans_are_cut_and_the_rest_is_kept() {
        let long = "7".repeat(4 << 20);
        let message = format!("f.csv, line 3: output tokens {long:?} is not a token count");
        let clipped = clip(&message);
        assert_eq!(
            clipped,
            format!(
                "f.csv, line 3: output tokens \"{}…\" (4194304 characters) is not a token count",
                "7".repeat(SHOWN)
            )
        );
        // Short spans, escapes and an unclosed quote stay as they are.
        for same in [
            "header \"a,b\" lacks a column",
            r#"key "a\"b" and "c\\" twice"#,
            "an \"unclosed quote",
            "no quotes",
        ] {
            assert_eq!(clip(same), same);
        }
        let escaped = format!("{:?}", format!("\"{}", "x".repeat(100)));
        assert!(
            clip(&escaped).ends_with("…\" (102 characters)"),
            "{}",
            clip(&escaped)
        );
        // serde names fields between backticks.
        let field = format!("unknown field `{}`, expected `a`", "t".repeat(200));
        assert_eq!(
            clip(&field),
            format!(
                "unknown field `{}…` (200 characters), expected `a`",
                "t".repeat(SHOWN)
            )
        );
    }
}
