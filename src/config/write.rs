//! Writing KDL that the decoder reads back as written: the one place that
//! quotes strings for the files capcard writes (`capcard profile`,
//! `capcard calibrate`, `capcard init`).

/// A KDL string literal: `"…"` with quotes, backslashes and control
/// characters escaped (KDL 2.0 §3.12).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_read_back_as_written() {
        for s in [
            "plain",
            "with \"quotes\"",
            "back\\slash",
            "two\nlines\ttab",
            "bell\u{7}",
        ] {
            let doc: kdl::KdlDocument = format!("node {}", string(s)).parse().unwrap();
            let value = doc.nodes()[0].entries()[0].value().as_string().unwrap();
            assert_eq!(value, s);
        }
    }
}
