//! The document as HTML for a page, rendered by the engine itself over comrak's tree (comrak's
//! own renderer is not used): every text is escaped, raw HTML shows as text, and a URL is kept
//! only when its scheme is `http`, `https`, `mailto` or `countersign` (the latter through the
//! caller's resolver) or it has none (relative). So no script from a document can run.

use std::fmt::Write;

use comrak::nodes::{AstNode, ListType, NodeList, NodeValue};

use super::Document;
use super::parse::{self, Lines};

fn escape(out: &mut String, text: &str) {
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
}

/// The URL to put in an attribute, or None to drop it.
fn safe_url(url: &str, resolve: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let url = url.trim();
    let cut = url.find([':', '/', '?', '#']);
    match cut.map(|i| (i, url.as_bytes()[i])) {
        Some((i, b':')) => {
            let scheme = url[..i].to_ascii_lowercase();
            match scheme.as_str() {
                "http" | "https" | "mailto" => Some(url.to_owned()),
                "countersign" => resolve(url).and_then(|u| {
                    // What the resolver gives is checked again (and may not be a ref).
                    let cut = u.find([':', '/', '?', '#']);
                    match cut.map(|i| (i, u.as_bytes()[i])) {
                        Some((i, b':')) => matches!(
                            u[..i].to_ascii_lowercase().as_str(),
                            "http" | "https" | "countersign"
                        )
                        .then_some(u),
                        _ => Some(u),
                    }
                }),
                _ => None,
            }
        }
        _ => Some(url.to_owned()),
    }
}

struct Renderer<'r> {
    out: String,
    resolve: &'r dyn Fn(&str) -> Option<String>,
}

/// HTML the sanitizer made (no raw HTML, only safe URL schemes): the one kind of HTML a page
/// may print unescaped. Only this module makes one; it reads as the `str` it holds. A rendered
/// document also knows where each top-level block's HTML ends, so a page can show it in parts
/// ([`SafeHtml::part`]) without cutting an element.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SafeHtml {
    text: std::sync::Arc<str>,
    /// The byte offset where each top-level block's HTML ends, in order (empty when not known).
    ends: std::sync::Arc<[usize]>,
}

/// Some of a rendered document's top-level blocks: what [`SafeHtml::part`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtmlPart {
    pub html: SafeHtml,
    /// The index of the first block after this part, or None when the part reaches the end.
    pub next: Option<usize>,
    /// Top-level blocks and HTML bytes after this part.
    pub blocks_after: usize,
    pub bytes_after: usize,
}

impl SafeHtml {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// How many top-level blocks the document has (0 when not known).
    pub fn blocks(&self) -> usize {
        self.ends.len()
    }

    /// The top-level blocks from index `from`, as many as fit in `budget` bytes of HTML (at
    /// least one), or None when `from` is past the last block. HTML with no known blocks is one
    /// part.
    pub fn part(&self, from: usize, budget: usize) -> Option<HtmlPart> {
        if self.ends.is_empty() {
            return (from == 0).then(|| HtmlPart {
                html: self.clone(),
                next: None,
                blocks_after: 0,
                bytes_after: 0,
            });
        }
        let start = match from {
            0 => 0,
            i => *self.ends.get(i - 1)?,
        };
        if from >= self.ends.len() {
            return None;
        }
        // The last block that ends within the budget, and at least the first one.
        let within = self.ends[from..].partition_point(|&e| e - start <= budget);
        let to = from + within.max(1);
        let end = self.ends[to - 1];
        let whole = from == 0 && to == self.ends.len();
        Some(HtmlPart {
            html: if whole {
                self.clone()
            } else {
                SafeHtml {
                    text: self.text[start..end].into(),
                    ends: self.ends[from..to].iter().map(|e| e - start).collect(),
                }
            },
            next: (to < self.ends.len()).then_some(to),
            blocks_after: self.ends.len() - to,
            bytes_after: self.text.len() - end,
        })
    }
}

impl std::ops::Deref for SafeHtml {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Display for SafeHtml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Renders the document; each top-level element carries `data-block`.
pub(crate) fn render(doc: &Document, resolve: &dyn Fn(&str) -> Option<String>) -> SafeHtml {
    let (text, ends) = render_text(doc, resolve);
    SafeHtml {
        text: text.into(),
        ends: ends.into(),
    }
}

fn render_text(doc: &Document, resolve: &dyn Fn(&str) -> Option<String>) -> (String, Vec<usize>) {
    parse::with_ast(doc.markdown(), |root, lines| {
        let mut r = Renderer {
            out: String::with_capacity(doc.markdown().len() * 3 / 2),
            resolve,
        };
        let mut ends = Vec::new();
        for child in root.children() {
            let sp = child.data.borrow().sourcepos;
            let at = lines.offset(sp.start.line, sp.start.column);
            let id = top_id(doc, at);
            r.block(child, id, lines);
            if ends.last() != Some(&r.out.len()) {
                ends.push(r.out.len());
            }
        }
        (r.out, ends)
    })
}

fn top_id(doc: &Document, at: usize) -> Option<&str> {
    let tops = doc.tops();
    let i = tops.partition_point(|t| t.start <= at).checked_sub(1)?;
    tops.get(i).filter(|t| at <= t.end()).map(|t| &*t.node.id)
}

impl Renderer<'_> {
    fn open(&mut self, tag: &str, block: Option<&str>, attrs: &[(&str, &str)]) {
        self.out.push('<');
        self.out.push_str(tag);
        if let Some(id) = block {
            self.out.push_str(" data-block=\"");
            escape(&mut self.out, id);
            self.out.push('"');
        }
        for (k, v) in attrs {
            let _ = write!(self.out, " {k}=\"");
            escape(&mut self.out, v);
            self.out.push('"');
        }
        self.out.push('>');
    }

    fn close(&mut self, tag: &str) {
        let _ = write!(self.out, "</{tag}>");
    }

    fn children<'a>(&mut self, node: &'a AstNode<'a>, lines: &Lines<'_>) {
        for c in node.children() {
            self.block(c, None, lines);
        }
    }

    fn block<'a>(&mut self, node: &'a AstNode<'a>, block: Option<&str>, lines: &Lines<'_>) {
        let value = node.data.borrow().value.clone();
        match &value {
            NodeValue::Paragraph => {
                self.open("p", block, &[]);
                self.inlines(node);
                self.close("p");
                self.out.push('\n');
            }
            NodeValue::Heading(h) => {
                let tag = format!("h{}", h.level.clamp(1, 6));
                self.open(&tag, block, &[]);
                self.inlines(node);
                self.close(&tag);
                self.out.push('\n');
            }
            NodeValue::ThematicBreak => {
                self.open("hr", block, &[]);
                self.out.push('\n');
            }
            NodeValue::CodeBlock(c) => {
                self.open("pre", block, &[]);
                let lang = c.info.split_whitespace().next().unwrap_or("");
                if lang.is_empty() {
                    self.out.push_str("<code>");
                } else {
                    let class = format!("language-{lang}");
                    self.open("code", None, &[("class", &class)]);
                }
                escape(&mut self.out, &c.literal);
                self.out.push_str("</code></pre>\n");
            }
            NodeValue::HtmlBlock(h) => {
                self.open("pre", block, &[("class", "raw-html")]);
                escape(&mut self.out, &h.literal);
                self.out.push_str("</pre>\n");
            }
            NodeValue::BlockQuote => {
                self.open("blockquote", block, &[]);
                self.out.push('\n');
                self.children(node, lines);
                self.close("blockquote");
                self.out.push('\n');
            }
            NodeValue::List(l) => self.list(node, l, block, lines),
            NodeValue::Table(_) => self.table(node, block),
            NodeValue::BlockDirective(d) => self.directive(node, &d.info, block, lines),
            NodeValue::Item(_) | NodeValue::TaskItem(_) => {
                self.items_one(node, false, lines);
            }
            _ => {
                // Any other block (none with the options in force): its text, escaped.
                self.open("div", block, &[]);
                self.inlines(node);
                self.out.push_str("</div>\n");
            }
        }
    }

    /// An ordered list (its `start` when not 1) or a bullet list, and its items.
    fn list<'a>(
        &mut self,
        node: &'a AstNode<'a>,
        l: &NodeList,
        block: Option<&str>,
        lines: &Lines<'_>,
    ) {
        let start = l.start.to_string();
        if l.list_type == ListType::Ordered {
            let attrs: &[(&str, &str)] = if l.start == 1 {
                &[]
            } else {
                &[("start", &start)]
            };
            self.open("ol", block, attrs);
            self.out.push('\n');
            self.items(node, l.tight, lines);
            self.close("ol");
        } else {
            self.open("ul", block, &[]);
            self.out.push('\n');
            self.items(node, l.tight, lines);
            self.close("ul");
        }
        self.out.push('\n');
    }

    /// A table: its header row in `<thead>`, the others in `<tbody>`.
    fn table<'a>(&mut self, node: &'a AstNode<'a>, block: Option<&str>) {
        self.open("table", block, &[]);
        self.out.push('\n');
        let mut body = false;
        for row in node.children() {
            let header = matches!(row.data.borrow().value, NodeValue::TableRow(true));
            if !header && !body {
                self.out.push_str("<tbody>\n");
                body = true;
            }
            if header {
                self.out.push_str("<thead>\n");
            }
            self.out.push_str("<tr>");
            for cell in row.children() {
                let tag = if header { "th" } else { "td" };
                self.open(tag, None, &[]);
                self.inlines(cell);
                self.close(tag);
            }
            self.out.push_str("</tr>\n");
            if header {
                self.out.push_str("</thead>\n");
            }
        }
        if body {
            self.out.push_str("</tbody>\n");
        }
        self.out.push_str("</table>\n");
    }

    /// A block directive: an ask (`:::ask id=… state=…`, its id and state as data attributes)
    /// or any other, as a `div` around its children.
    fn directive<'a>(
        &mut self,
        node: &'a AstNode<'a>,
        info: &str,
        block: Option<&str>,
        lines: &Lines<'_>,
    ) {
        if parse::is_ask_info(info) {
            let mut attrs: Vec<(String, String)> = vec![("class".into(), "ask".into())];
            for w in info.split_whitespace().skip(1) {
                if let Some((k, v)) = w.split_once('=')
                    && (k == "id" || k == "state")
                {
                    attrs.push((format!("data-ask-{k}"), v.to_owned()));
                }
            }
            let attrs: Vec<(&str, &str)> = attrs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            self.open("div", block, &attrs);
        } else {
            self.open("div", block, &[("class", "directive")]);
        }
        self.out.push('\n');
        self.children(node, lines);
        self.out.push_str("</div>\n");
    }

    fn items<'a>(&mut self, list: &'a AstNode<'a>, tight: bool, lines: &Lines<'_>) {
        for item in list.children() {
            self.items_one(item, tight, lines);
        }
    }

    fn items_one<'a>(&mut self, item: &'a AstNode<'a>, tight: bool, lines: &Lines<'_>) {
        let task = match &item.data.borrow().value {
            NodeValue::TaskItem(t) => Some(t.symbol.is_some()),
            _ => None,
        };
        match task {
            Some(checked) => {
                self.open("li", None, &[("class", "task")]);
                // Named, so that a screen reader (and axe-core's `label` rule) reads what the
                // box says: a task list's boxes have no <label>.
                self.out.push_str(if checked {
                    "<input type=\"checkbox\" disabled checked aria-label=\"done\"> "
                } else {
                    "<input type=\"checkbox\" disabled aria-label=\"not done\"> "
                });
            }
            None => self.open("li", None, &[]),
        }
        for c in item.children() {
            let para = matches!(c.data.borrow().value, NodeValue::Paragraph);
            if tight && para {
                self.inlines(c);
            } else {
                self.block(c, None, lines);
            }
        }
        self.out.push_str("</li>\n");
    }

    fn inlines<'a>(&mut self, node: &'a AstNode<'a>) {
        for c in node.children() {
            self.inline(c);
        }
    }

    fn inline<'a>(&mut self, node: &'a AstNode<'a>) {
        let value = node.data.borrow().value.clone();
        match &value {
            NodeValue::Text(t) => escape(&mut self.out, t),
            NodeValue::SoftBreak => self.out.push('\n'),
            NodeValue::LineBreak => self.out.push_str("<br>\n"),
            NodeValue::Code(c) => {
                self.out.push_str("<code>");
                escape(&mut self.out, &c.literal);
                self.out.push_str("</code>");
            }
            NodeValue::HtmlInline(h) => escape(&mut self.out, h),
            NodeValue::Emph => {
                self.out.push_str("<em>");
                self.inlines(node);
                self.out.push_str("</em>");
            }
            NodeValue::Strong => {
                self.out.push_str("<strong>");
                self.inlines(node);
                self.out.push_str("</strong>");
            }
            NodeValue::Link(l) => match safe_url(&l.url, self.resolve) {
                Some(href) => {
                    let mut attrs = vec![("href", href.as_str())];
                    if !l.title.is_empty() {
                        attrs.push(("title", l.title.as_str()));
                    }
                    self.open("a", None, &attrs);
                    self.inlines(node);
                    self.out.push_str("</a>");
                }
                None => self.inlines(node),
            },
            NodeValue::Image(l) => {
                let mut alt = String::new();
                plain(node, &mut alt);
                match safe_url(&l.url, self.resolve) {
                    Some(src) => {
                        let mut attrs = vec![("src", src.as_str()), ("alt", alt.as_str())];
                        if !l.title.is_empty() {
                            attrs.push(("title", l.title.as_str()));
                        }
                        self.open("img", None, &attrs);
                    }
                    None => escape(&mut self.out, &alt),
                }
            }
            _ => self.inlines(node),
        }
    }
}

/// The plain text of an inline subtree (an image's alt text).
fn plain<'a>(node: &'a AstNode<'a>, out: &mut String) {
    for c in node.children() {
        match &c.data.borrow().value {
            NodeValue::Text(t) => out.push_str(t),
            NodeValue::Code(code) => out.push_str(&code.literal),
            NodeValue::SoftBreak | NodeValue::LineBreak => out.push(' '),
            _ => {}
        }
        plain(c, out);
    }
}
