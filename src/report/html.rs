//! A report's rendered cards as one self-contained HTML page (`capcard
//! report --html`): the summary and every card as sections, their charts
//! inline as SVG markup. Pure: same report, same bytes (no clock, no I/O).
//!
//! Why this shape: the page is mailed or attached to a ticket and opened
//! with a double-click, far from its results folder. So nothing in it may
//! point at a file or the network: links between cards become in-page
//! anchors, chart images become the chart's own SVG, links anywhere else
//! lose their target (their text stays, an external address is written
//! out), and raw HTML from a (custom) template is shown as text, never
//! passed through. A Content-Security-Policy of `default-src 'none'` makes
//! the browser refuse any fetch that might still slip in.

use std::collections::{BTreeMap, BTreeSet};

use pulldown_cmark::{CowStr, Event, LinkType, Options, Parser, Tag, TagEnd, html::push_html};

use super::{
    Chart, ReportError, SUMMARY_FILE_NAME, Templates, card_file_name, card_stem, sanitize_file_part,
};
use crate::analyze::CapacityReport;

/// The page's file name in the results folder.
pub const HTML_FILE_NAME: &str = "report.html";

/// One section of the page: the summary or a card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The file name other cards link it by (`summary.md`, `<stem>.md`).
    pub file_name: String,
    /// Its anchor in the page.
    pub id: String,
    /// Its line in the table of contents.
    pub label: String,
    pub markdown: String,
    /// Its charts; any its markdown does not show as an image are appended
    /// at its end, so that a link to one always lands on it.
    pub charts: Vec<Chart>,
}

/// The whole page, parts in the order shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub title: String,
    pub parts: Vec<Part>,
}

/// The report's page: the summary (when it has one), then every card in the
/// report's order, each with its charts.
pub fn render_page(report: &CapacityReport, templates: &Templates) -> Result<String, ReportError> {
    let mut parts = Vec::new();
    let settings_charts: Vec<Chart> = report
        .settings
        .iter()
        .flat_map(super::settings_chart::charts)
        .collect();
    let mut settings_charts = Some(settings_charts);
    if let Some(summary) = super::render_summary(report, templates)? {
        parts.push(Part {
            file_name: SUMMARY_FILE_NAME.to_string(),
            id: "summary".to_string(),
            label: "Summary".to_string(),
            markdown: summary,
            charts: settings_charts.take().unwrap_or_default(),
        });
    }
    for card in &report.cards {
        parts.push(Part {
            file_name: card_file_name(card),
            id: format!("card-{}", card_stem(card)),
            label: format!("{} × {}", card.target, card.workload),
            markdown: super::render_card(report, card, templates)?,
            charts: super::charts(card),
        });
    }
    // Settings charts belong to the summary; without one (a single card)
    // they close the first part rather than being lost.
    if let (Some(charts), Some(first)) = (settings_charts, parts.first_mut()) {
        first.charts.extend(charts);
    }
    let title = match report.cards.as_slice() {
        [card] => format!("Capacity card: {} × {}", card.target, card.workload),
        _ => format!("Capacity report: {}", report.experiment),
    };
    Ok(page(&Page { title, parts }))
}

/// The page as HTML: a table of contents when there are several parts,
/// then each part as a `<section>`.
pub fn page(page: &Page) -> String {
    let mut links = Links::new(&page.parts);
    let mut out = String::with_capacity(
        16 * 1024
            + page
                .parts
                .iter()
                .map(|p| 2 * p.markdown.len() + p.charts.iter().map(|c| c.svg.len()).sum::<usize>())
                .sum::<usize>(),
    );
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    // No fetch of any kind, even should a template slip an <img> past us:
    // only the inline stylesheet (and inline SVG, which is markup) is allowed.
    out.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n",
    );
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<title>");
    out.push_str(&escape(&page.title));
    out.push_str("</title>\n<style>\n");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n");
    if page.parts.len() > 1 {
        out.push_str("<nav class=\"toc\" aria-label=\"Contents\">\n<p>");
        out.push_str(&escape(&page.title));
        out.push_str("</p>\n<ol>\n");
        for part in &page.parts {
            out.push_str(&format!(
                "<li><a href=\"#{}\">{}</a></li>\n",
                escape(&part.id),
                escape(&part.label)
            ));
        }
        out.push_str("</ol>\n</nav>\n");
    }
    out.push_str("<main>\n");
    for part in &page.parts {
        out.push_str(&format!(
            "<section class=\"part\" id=\"{}\">\n",
            escape(&part.id)
        ));
        out.push_str(&links.markdown_html(&part.markdown));
        let rest: Vec<&Chart> = part
            .charts
            .iter()
            .filter(|c| !links.embedded.contains(&c.file_name))
            .collect();
        if !rest.is_empty() {
            out.push_str("<div class=\"charts\">\n");
            for chart in rest {
                out.push_str(&links.figure(&chart.file_name, &chart.file_name));
            }
            out.push_str("</div>\n");
        }
        out.push_str("</section>\n");
    }
    if page.parts.is_empty() {
        out.push_str("<p>This report has no cards.</p>\n");
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

/// Where the page's links go: each part's file name and each chart's to
/// its anchor; which charts are already in the page.
struct Links<'a> {
    parts: BTreeMap<&'a str, &'a str>,
    charts: BTreeMap<&'a str, &'a Chart>,
    embedded: BTreeSet<String>,
}

impl<'a> Links<'a> {
    fn new(parts: &'a [Part]) -> Self {
        Links {
            parts: parts
                .iter()
                .map(|p| (p.file_name.as_str(), p.id.as_str()))
                .collect(),
            charts: parts
                .iter()
                .flat_map(|p| &p.charts)
                .map(|c| (c.file_name.as_str(), c))
                .collect(),
            embedded: BTreeSet::new(),
        }
    }

    /// The in-page anchor a link's destination becomes, if it has one in
    /// the page (`card.md#x` lands on the card).
    fn anchor(&self, dest: &str) -> Option<String> {
        if dest.starts_with('#') {
            return Some(dest.to_string());
        }
        let path = dest.split('#').next().unwrap_or(dest);
        let path = path.strip_prefix("./").unwrap_or(path);
        if let Some(id) = self.parts.get(path) {
            return Some(format!("#{id}"));
        }
        self.charts
            .contains_key(path)
            .then(|| format!("#{}", chart_id(path)))
    }

    /// A chart as a figure with its caption; the first time it is shown
    /// it carries the anchor links to it land on.
    fn figure(&mut self, file_name: &str, caption: &str) -> String {
        let Some(chart) = self.charts.get(file_name) else {
            return String::new();
        };
        let first = self.embedded.insert(file_name.to_string());
        let id = if first {
            format!(" id=\"{}\"", chart_id(file_name))
        } else {
            String::new()
        };
        format!(
            "<figure class=\"chart\"{id}>\n{}\n<figcaption>{}</figcaption>\n</figure>\n",
            inline_svg(&chart.svg, caption),
            escape(caption)
        )
    }

    /// One part's markdown as HTML, links and images rewritten as the
    /// module doc says.
    fn markdown_html(&mut self, markdown: &str) -> String {
        let mut events: Vec<Event<'_>> = Vec::new();
        // Per open link: `None` kept (its end is written), `Some(suffix)`
        // dropped (the text written after it, if any).
        let mut open_links: Vec<Option<Option<String>>> = Vec::new();
        // An image being read: its destination and the alt text so far.
        let mut image: Option<(String, String)> = None;
        // The open paragraph's index in `events`, and whether it holds only
        // charts so far: a <figure> may not sit inside a <p>.
        let mut paragraph: Option<(usize, bool)> = None;
        let mut in_cell = false;
        let mut in_head = false;
        for event in Parser::new_ext(markdown, Options::ENABLE_TABLES) {
            if let Some((_, alt)) = image.as_mut() {
                match event {
                    Event::End(TagEnd::Image) => {
                        let (dest, alt) = image.take().unwrap_or_default();
                        let figure = self
                            .charts
                            .contains_key(dest.strip_prefix("./").unwrap_or(&dest))
                            .then(|| self.figure(dest.strip_prefix("./").unwrap_or(&dest), &alt));
                        match figure {
                            Some(html) => events.push(Event::Html(html.into())),
                            None => {
                                // Not one of the report's charts: its words only.
                                if let Some((_, only)) = paragraph.as_mut() {
                                    *only = false;
                                }
                                events.push(Event::Text(alt.into()));
                            }
                        }
                    }
                    Event::Text(text) | Event::Code(text) => alt.push_str(&text),
                    _ => {}
                }
                continue;
            }
            let keeps_paragraph_bare = matches!(
                event,
                Event::Start(Tag::Image { .. }) | Event::SoftBreak | Event::End(TagEnd::Paragraph)
            );
            if !keeps_paragraph_bare {
                if let Some((_, only)) = paragraph.as_mut() {
                    *only = false;
                }
            }
            match event {
                Event::Start(Tag::Image { dest_url, .. }) => {
                    image = Some((dest_url.to_string(), String::new()));
                }
                Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }) => match self.anchor(&dest_url) {
                    Some(anchor) => {
                        open_links.push(None);
                        events.push(Event::Start(Tag::Link {
                            link_type,
                            dest_url: CowStr::from(anchor),
                            title,
                            id,
                        }));
                    }
                    None => {
                        // An address outside the page is written out, not
                        // linked: the reader can still follow it by hand.
                        let written_out = matches!(link_type, LinkType::Autolink | LinkType::Email);
                        let external = dest_url.contains("://") || dest_url.starts_with("mailto:");
                        open_links.push(Some(
                            (external && !written_out).then(|| format!(" ({dest_url})")),
                        ));
                    }
                },
                Event::End(TagEnd::Link) => match open_links.pop() {
                    Some(None) => events.push(Event::End(TagEnd::Link)),
                    Some(Some(Some(suffix))) => events.push(Event::Text(suffix.into())),
                    Some(Some(None)) | None => {}
                },
                Event::Start(Tag::Paragraph) => {
                    paragraph = Some((events.len(), true));
                    events.push(Event::Start(Tag::Paragraph));
                }
                Event::End(TagEnd::Paragraph) => match paragraph.take() {
                    Some((start, true)) => {
                        events.remove(start);
                    }
                    _ => events.push(Event::End(TagEnd::Paragraph)),
                },
                // Wide tables scroll sideways on screen instead of widening
                // the page.
                Event::Start(Tag::Table(alignments)) => {
                    events.push(Event::Html("<div class=\"table\">\n".into()));
                    events.push(Event::Start(Tag::Table(alignments)));
                }
                Event::End(TagEnd::Table) => {
                    events.push(Event::End(TagEnd::Table));
                    events.push(Event::Html("</div>\n".into()));
                }
                // Only body cells: a header's words may wrap.
                Event::Start(Tag::TableHead) => {
                    in_head = true;
                    events.push(Event::Start(Tag::TableHead));
                }
                Event::End(TagEnd::TableHead) => {
                    in_head = false;
                    events.push(Event::End(TagEnd::TableHead));
                }
                Event::Start(Tag::TableCell) => {
                    in_cell = !in_head;
                    events.push(Event::Start(Tag::TableCell));
                }
                Event::End(TagEnd::TableCell) => {
                    in_cell = false;
                    events.push(Event::End(TagEnd::TableCell));
                }
                // A short figure in a cell ("2.82 ms", "0.3 / 3") stays on
                // one line: the cards' wide tables otherwise break every
                // number from its unit.
                Event::Text(text) if in_cell && text.chars().count() <= SHORT_CELL_TEXT => {
                    events.push(Event::Text(text.replace(' ', "\u{a0}").into()));
                }
                // Raw HTML is shown, escaped, never interpreted; its `=`
                // too, so that not even the page's text reads `src=...`.
                Event::Start(Tag::HtmlBlock) => events.push(Event::Start(Tag::Paragraph)),
                Event::End(TagEnd::HtmlBlock) => events.push(Event::End(TagEnd::Paragraph)),
                Event::Html(text) | Event::InlineHtml(text) => {
                    events.push(Event::Html(escape(&text).replace('=', "&#61;").into()));
                }
                other => events.push(other),
            }
        }
        let mut html = String::with_capacity(markdown.len() * 2);
        push_html(&mut html, events.into_iter());
        html
    }
}

/// Text in a table cell up to this many characters is kept on one line.
const SHORT_CELL_TEXT: usize = 12;

/// A chart's anchor: its file name without `.svg`, kept to characters an
/// id and a URL fragment take as they are.
fn chart_id(file_name: &str) -> String {
    let stem = file_name.strip_suffix(".svg").unwrap_or(file_name);
    format!("chart-{}", sanitize_file_part(stem))
}

/// The chart's SVG as markup inside HTML: from its `<svg` on (no XML
/// prolog), without the namespace declarations HTML does not need, labelled
/// for screen readers.
fn inline_svg(svg: &str, label: &str) -> String {
    let Some(start) = svg.find("<svg") else {
        return String::new();
    };
    let body = svg[start + "<svg".len()..]
        .replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
        .replacen(" xmlns:xlink=\"http://www.w3.org/1999/xlink\"", "", 1);
    format!(
        "<svg role=\"img\" aria-label=\"{}\"{}",
        escape(label),
        body.trim_end()
    )
}

/// Text safe in HTML content and in a double-quoted attribute.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// System fonts only; print: no contents list, a page per card, rows and
/// charts kept whole, charts at the page's width.
const STYLE: &str = r#":root{color-scheme:light}
body{margin:0 auto;max-width:96rem;padding:1rem 1.5rem 3rem;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#1b1b1f;background:#fff}
h1{font-size:1.6rem;margin:1.5rem 0 .8rem;padding-bottom:.3rem;border-bottom:2px solid #d8dbe0}
h2{font-size:1.3rem;margin:2rem 0 .6rem;padding-bottom:.2rem;border-bottom:1px solid #e6e8eb}
h3{font-size:1.08rem;margin:1.5rem 0 .5rem}
code{font:.88em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f2f3f5;padding:0 .25em;border-radius:3px}
blockquote{margin:1rem 0;padding:.1rem 1rem;border-left:4px solid #b9c3d6;background:#f6f8fb;color:#333}
blockquote p{margin:.5rem 0}
a{color:#1a56b0}
.table{overflow-x:auto;margin:1rem 0}
table{border-collapse:collapse;font-size:.8rem;line-height:1.3}
p,ul,ol,blockquote{max-width:64rem}
th,td{border:1px solid #d8dbe0;padding:.2rem .4rem;text-align:left;vertical-align:top}
th{background:#f2f3f5}
thead:not(:has(th:not(:empty))){display:none}
tbody tr:nth-child(even){background:#fafbfc}
figure.chart{margin:1.5rem 0}
figure.chart svg{display:block;width:100%;max-width:1100px;height:auto;border:1px solid #e6e8eb}
figcaption{font-size:.84rem;color:#555;margin-top:.3rem}
nav.toc{margin:1rem 0 2rem;padding:.6rem 1rem;border:1px solid #d8dbe0;border-radius:6px;background:#f6f8fb}
nav.toc p{margin:0 0 .3rem;font-weight:600}
nav.toc ol{margin:0;padding-left:1.4rem}
section.part+section.part{margin-top:3rem;border-top:3px solid #d8dbe0}
@media print{
body{max-width:none;padding:0;font-size:10pt}
p,ul,ol,blockquote{max-width:none}
nav.toc{display:none}
section.part+section.part{break-before:page;margin-top:0;border-top:none}
.table{overflow:visible}
table{font-size:7.5pt}
thead{display:table-header-group}
tr,figure.chart,blockquote{break-inside:avoid}
h1,h2,h3{break-after:avoid}
figure.chart svg{width:100%;max-width:100%;border:none}
a{color:inherit;text-decoration:none}
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn svg(label: &str) -> String {
        format!(
            "<svg width=\"100\" height=\"50\" viewBox=\"0 0 100 50\" xmlns=\"http://www.w3.org/2000/svg\">\n<text x=\"1\" y=\"1\">{label}</text>\n</svg>\n"
        )
    }

    fn chart(name: &str) -> Chart {
        Chart {
            file_name: name.to_string(),
            svg: svg(name),
        }
    }

    fn sample() -> Page {
        let summary = "# Capacity summary: `demo`\n\n\
| target | card |\n|---|---|\n| `a` | [card](a--w.md) |\n| `b` | [card](./b--w.md#conditions) |\n\n\
![Cr_open per setting](settings.svg)\n";
        let card_a = "# Capacity card: `a` × `w`\n\n\
> An **experiment** description & <script>alert(1)</script>\n\n\
| | |\n|---|---|\n| Target | endpoint http://127.0.0.1:8000/v1 |\n\n\
Chart: [a--w--frontier.svg](a--w--frontier.svg) (the frontier).\n\n\
See [the method](https://example.org/docs), the [journal](runs/a--w--c0001.jsonl) and <https://example.org/x>.\n\n\
<div onclick=\"x\">raw block</div>\n\n\
## Charts\n\n\
![closed loop: output tok/s](a--w--closed.svg)\n\
![SLO frontier](a--w--frontier.svg)\n\n\
![a picture that is not a chart](photo.png)\n";
        let card_b = "# Capacity card: `b` × `w`\n\nBack to the [summary](summary.md).\n";
        Page {
            title: "Capacity report: demo".to_string(),
            parts: vec![
                Part {
                    file_name: "summary.md".into(),
                    id: "summary".into(),
                    label: "Summary".into(),
                    markdown: summary.into(),
                    charts: vec![chart("settings.svg")],
                },
                Part {
                    file_name: "a--w.md".into(),
                    id: "card-a--w".into(),
                    label: "a × w".into(),
                    markdown: card_a.into(),
                    charts: vec![chart("a--w--closed.svg"), chart("a--w--frontier.svg")],
                },
                Part {
                    file_name: "b--w.md".into(),
                    id: "card-b--w".into(),
                    label: "b × w".into(),
                    markdown: card_b.into(),
                    // Not shown as an image by its card: appended.
                    charts: vec![chart("b--w--open.svg")],
                },
            ],
        }
    }

    /// Every value of `attr="..."` in the page.
    fn attribute_values<'h>(html: &'h str, attr: &str) -> Vec<&'h str> {
        let needle = format!("{attr}=\"");
        html.match_indices(&needle)
            .filter_map(|(at, _)| {
                let rest = &html[at + needle.len()..];
                rest.find('"').map(|end| &rest[..end])
            })
            .collect()
    }

    #[test]
    fn nothing_points_outside_the_page() {
        let html = page(&sample());
        assert!(!html.contains("src="), "{html}");
        assert!(!html.contains("url("), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        let hrefs = attribute_values(&html, "href");
        assert!(!hrefs.is_empty());
        let ids = attribute_values(&html, "id");
        for href in hrefs {
            let target = href.strip_prefix('#');
            assert!(target.is_some(), "href={href:?} is not an in-page anchor");
            // ... and lands on something.
            assert!(
                target.is_some_and(|t| ids.contains(&t)),
                "href={href:?} has no element with that id: {ids:?}"
            );
        }
        // The raw HTML is shown as text.
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;div onclick&#61;"), "{html}");
        // An outside address is written out, not linked.
        assert!(
            html.contains("the method (https://example.org/docs)"),
            "{html}"
        );
        assert!(html.contains("the journal and"), "{html}");
    }

    #[test]
    fn every_chart_is_inline_once_with_its_anchor() {
        let html = page(&sample());
        assert_eq!(html.matches("<svg").count(), 4, "{html}");
        for name in [
            "settings.svg",
            "a--w--closed.svg",
            "a--w--frontier.svg",
            "b--w--open.svg",
        ] {
            assert_eq!(
                html.matches(&format!(">{name}</text>")).count(),
                1,
                "{name}"
            );
            assert_eq!(
                html.matches(&format!("id=\"{}\"", chart_id(name))).count(),
                1
            );
        }
        // The link to the frontier chart lands on the inline chart.
        assert!(html.contains("<a href=\"#chart-a--w--frontier\">a--w--frontier.svg</a>"));
        // Charts are not wrapped in paragraphs, and a non-chart image
        // leaves its words.
        assert!(!html.contains("<p><figure"), "{html}");
        assert!(html.contains("a picture that is not a chart"));
        // No namespace declarations left (HTML does not need them).
        assert!(!html.contains("http://www.w3.org"), "{html}");
        assert!(
            html.contains(
                "<svg role=\"img\" aria-label=\"closed loop: output tok/s\" width=\"100\""
            )
        );
    }

    #[test]
    fn the_contents_list_each_part_in_order() {
        let html = page(&sample());
        let nav_start = html.find("<nav").unwrap_or(usize::MAX);
        let nav_end = html.find("</nav>").unwrap_or(0);
        assert!(nav_start < nav_end, "{html}");
        let nav = &html[nav_start..nav_end];
        let entries = [
            "<li><a href=\"#summary\">Summary</a></li>",
            "<li><a href=\"#card-a--w\">a × w</a></li>",
            "<li><a href=\"#card-b--w\">b × w</a></li>",
        ];
        let at: Vec<Option<usize>> = entries.iter().map(|e| nav.find(e)).collect();
        assert!(at.iter().all(Option::is_some), "{nav}");
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{nav}");
        // Sections in the same order.
        let sections: Vec<&str> = ["id=\"summary\"", "id=\"card-a--w\"", "id=\"card-b--w\""]
            .iter()
            .map(|s| &html[html.find(s).unwrap_or(0)..])
            .collect();
        assert!(sections.windows(2).all(|w| w[0].len() > w[1].len()));
    }

    #[test]
    fn an_image_tag_in_a_template_is_text() {
        let mut p = sample();
        p.parts[2].markdown = "Look: <img src=\"x.png\" onerror=\"alert(1)\">\n".to_string();
        let html = page(&p);
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("src="), "{html}");
        assert!(
            html.contains("Look: &lt;img src&#61;&quot;x.png&quot;"),
            "{html}"
        );
    }

    #[test]
    fn the_fixture_report_has_every_card_and_chart_inline() {
        let text = include_str!("../../tests/data/results-fixture.json");
        let report = crate::report::parse_results_json(text).expect("fixture parses");
        let html = render_page(&report, &Templates::builtin()).expect("renders");
        let charts: Vec<Chart> = report.cards.iter().flat_map(super::super::charts).collect();
        assert!(report.cards.len() > 1 && !charts.is_empty());
        // Each chart once, as the chart's own markup (its first line after
        // the tag is its background).
        assert_eq!(html.matches("<svg").count(), charts.len());
        for chart in &charts {
            let id = format!(
                "<figure class=\"chart\" id=\"{}\">",
                chart_id(&chart.file_name)
            );
            assert!(html.contains(&id), "{} not inline", chart.file_name);
        }
        assert!(!html.contains("src="));
        // (Its endpoint's address is in the text, written out, not linked.)
        let ids = attribute_values(&html, "id");
        for href in attribute_values(&html, "href") {
            assert!(
                href.strip_prefix('#').is_some_and(|t| ids.contains(&t)),
                "{href}"
            );
        }
        for card in &report.cards {
            let entry = format!(
                "<li><a href=\"#card-{}\">{} × {}</a></li>",
                card_stem(card),
                escape(&card.target),
                escape(&card.workload)
            );
            assert!(html.contains(&entry), "{entry}");
        }
        assert_eq!(
            html,
            render_page(&report, &Templates::builtin()).expect("renders")
        );
    }

    #[test]
    fn a_short_figure_in_a_table_cell_keeps_its_unit() {
        let mut p = sample();
        p.parts[2].markdown =
            "| TTFT p50 | note |\n|---|---|\n| 2.82 ms | a longer sentence that may wrap |\n"
                .to_string();
        let html = page(&p);
        assert!(html.contains("<th>TTFT p50</th>"), "{html}");
        assert!(html.contains("<td>2.82\u{a0}ms</td>"), "{html}");
        assert!(
            html.contains("<td>a longer sentence that may wrap</td>"),
            "{html}"
        );
    }

    #[test]
    fn a_single_card_has_no_contents_list() {
        let mut one = sample();
        one.parts.drain(..2);
        let html = page(&one);
        assert!(!html.contains("<nav"), "{html}");
        assert!(html.contains("<section class=\"part\" id=\"card-b--w\">"));
    }

    #[test]
    fn the_page_is_deterministic_and_escapes_its_title() {
        let mut p = sample();
        p.title = "Capacity report: <a&b>".to_string();
        assert_eq!(page(&p), page(&p.clone()));
        assert!(page(&p).contains("<title>Capacity report: &lt;a&amp;b&gt;</title>"));
        assert!(page(&p).starts_with("<!DOCTYPE html>\n"));
    }
}
