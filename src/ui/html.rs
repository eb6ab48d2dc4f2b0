//! HTML escaping for `localagents ui`: the one function every text from a
//! job, a project or a backend goes through, in [`super::page`] and in the
//! SVG of [`super::chart`]. Its own module so the two share it without
//! importing each other.

/// Text made safe for HTML, in element content and in quoted attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}
