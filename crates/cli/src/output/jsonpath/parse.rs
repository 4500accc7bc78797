//! The template parser: text and `{}` blocks, each block a list of path steps, `range`/`end` paired into a tree.
//! Positions in errors are character offsets in the template, from 0.

use super::{Cmp, Filter, Node, Op, Slice};
use serde_json::Value;

/// One `{...}` as parsed, before `range`/`end` are paired.
enum Block {
    Ops(Vec<Op>),
    Range(Vec<Op>),
    End,
}

/// A parse error: what went wrong and where (a 0-based character offset in the template).
#[derive(Debug)]
pub(super) struct ParseError {
    pub(super) pos: usize,
    pub(super) msg: String,
}

type PResult<T> = Result<T, ParseError>;

/// Splits the template into text and `{}` blocks, then pairs `range` with `end`.
pub(super) fn parse_template(src: &str) -> PResult<Vec<Node>> {
    let chars: Vec<char> = src.chars().collect();
    let mut pieces: Vec<(usize, Result<String, Block>)> = Vec::new();
    let (mut i, mut text) = (0, String::new());
    while i < chars.len() {
        if chars[i] != '{' {
            text.push(chars[i]);
            i += 1;
            continue;
        }
        if !text.is_empty() {
            pieces.push((i, Ok(std::mem::take(&mut text))));
        }
        let mut p = Parser {
            chars: &chars,
            pos: i + 1,
            base: 0,
        };
        let raw = p.action(true)?;
        pieces.push((i, Err(classify(raw, i)?)));
        i = p.pos;
    }
    if !text.is_empty() {
        pieces.push((i, Ok(text)));
    }
    // Open ranges: where each began, its path, and its body so far.
    let mut stack: Vec<(usize, Vec<Op>, Vec<Node>)> = Vec::new();
    let mut top: Vec<Node> = Vec::new();
    for (pos, piece) in pieces {
        let node = match piece {
            Ok(t) => Node::Text(t),
            Err(Block::Ops(ops)) => Node::Expr(ops),
            Err(Block::Range(ops)) => {
                stack.push((pos, ops, Vec::new()));
                continue;
            }
            Err(Block::End) => match stack.pop() {
                Some((_, ops, body)) => Node::Range(ops, body),
                None => {
                    return Err(ParseError {
                        pos,
                        msg: "not in range, nothing to end".to_owned(),
                    });
                }
            },
        };
        match stack.last_mut() {
            Some((_, _, body)) => body.push(node),
            None => top.push(node),
        }
    }
    if let Some((pos, _, _)) = stack.pop() {
        return Err(ParseError {
            pos,
            msg: "range without end".to_owned(),
        });
    }
    Ok(top)
}

/// Raw ops of a block, with the `range`/`end` keywords, which only open a block.
#[derive(Debug)]
enum Raw {
    Op(Op),
    Ident(String, usize),
}

fn classify(raw: Vec<Raw>, pos: usize) -> PResult<Block> {
    let mut it = raw.into_iter().peekable();
    let kind = match it.peek() {
        Some(Raw::Ident(name, _)) if name == "range" => 1,
        Some(Raw::Ident(name, _)) if name == "end" => 2,
        _ => 0,
    };
    if kind != 0 {
        it.next();
    }
    let mut ops = Vec::new();
    for r in it {
        match r {
            Raw::Op(op) => ops.push(op),
            Raw::Ident(name, at) => {
                return Err(ParseError {
                    pos: at,
                    msg: format!("unrecognized identifier {name}"),
                });
            }
        }
    }
    match kind {
        1 => Ok(Block::Range(ops)),
        2 if ops.is_empty() => Ok(Block::End),
        2 => Err(ParseError {
            pos,
            msg: "end takes nothing after it".to_owned(),
        }),
        _ => Ok(Block::Ops(ops)),
    }
}

struct Parser<'s> {
    chars: &'s [char],
    pos: usize,
    /// Offset of `chars` in the whole template, for positions in errors of sub-expressions.
    base: usize,
}

fn is_terminator(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
    )
}

impl Parser<'_> {
    fn err<T>(&self, at: usize, msg: impl Into<String>) -> PResult<T> {
        Err(ParseError {
            pos: self.base + at,
            msg: msg.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars()
            .enumerate()
            .all(|(k, c)| self.chars.get(self.pos + k) == Some(&c))
    }

    /// The ops of an action. `braced`: stop at `}` (consumed); else run to the end of the input.
    fn action(&mut self, braced: bool) -> PResult<Vec<Raw>> {
        let mut ops: Vec<Raw> = Vec::new();
        loop {
            let at = self.pos;
            let Some(c) = self.peek() else {
                return if braced {
                    self.err(at, "unclosed action")
                } else {
                    Ok(ops)
                };
            };
            if braced && c == '}' {
                self.pos += 1;
                return Ok(ops);
            }
            if self.starts_with("[?(") {
                ops.push(Raw::Op(self.filter()?));
            } else if self.starts_with("..") {
                if matches!(ops.last(), Some(Raw::Op(Op::Recursive))) {
                    return self.err(at, "invalid multiple recursive descent");
                }
                self.pos += 2;
                ops.push(Raw::Op(Op::Recursive));
                if self.peek().is_some_and(|c| c == '_' || c.is_alphanumeric()) {
                    ops.push(Raw::Op(self.field()));
                }
            } else {
                match c {
                    '\r' | '\n' => return self.err(at, "unclosed action"),
                    ' ' | '@' | '$' => self.pos += 1,
                    '[' => ops.push(Raw::Op(self.array()?)),
                    '"' | '\'' => ops.push(Raw::Op(Op::Literal(Value::String(self.quoted(c)?)))),
                    '.' => {
                        self.pos += 1;
                        ops.push(Raw::Op(self.field()));
                    }
                    '+' | '-' | '0'..='9' => ops.push(Raw::Op(self.number()?)),
                    c if c == '_' || c.is_alphanumeric() => {
                        let word = self.word();
                        match word.as_str() {
                            "true" => ops.push(Raw::Op(Op::Literal(Value::Bool(true)))),
                            "false" => ops.push(Raw::Op(Op::Literal(Value::Bool(false)))),
                            _ => ops.push(Raw::Ident(word, self.base + at)),
                        }
                    }
                    c => {
                        return self.err(
                            at,
                            format!("unrecognized character in action: U+{:04X} {c:?}", u32::from(c)),
                        );
                    }
                }
            }
        }
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| !is_terminator(c)) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// A field name up to a terminator; `\.` keeps a dot in the name (`app\.kubernetes\.io/name`).
    fn field(&mut self) -> Op {
        let mut name = String::new();
        while let Some(c) = self.peek() {
            if c == '\\' {
                self.pos += 1;
                if let Some(next) = self.peek() {
                    name.push(next);
                    self.pos += 1;
                }
                continue;
            }
            if is_terminator(c) {
                break;
            }
            name.push(c);
            self.pos += 1;
        }
        if name == "*" {
            Op::Wildcard
        } else {
            Op::Field(name)
        }
    }

    fn number(&mut self) -> PResult<Op> {
        let start = self.pos;
        if matches!(self.peek(), Some('+' | '-')) {
            self.pos += 1;
        }
        while self.peek().is_some_and(|c| c == '.' || c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Op::Literal(Value::from(i)));
        }
        match text.parse::<f64>() {
            Ok(f) => Ok(Op::Literal(Value::from(f))),
            Err(_) => self.err(start, format!("cannot parse number {text}")),
        }
    }

    /// A quoted string with Go's escapes, the quote at `self.pos`.
    fn quoted(&mut self, quote: char) -> PResult<String> {
        let start = self.pos;
        self.pos += 1;
        let mut s = String::new();
        loop {
            let Some(c) = self.peek() else {
                return self.err(start, "unterminated quoted string");
            };
            self.pos += 1;
            match c {
                '\n' => return self.err(start, "unterminated quoted string"),
                c if c == quote => return Ok(s),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return self.err(start, "unterminated quoted string");
                    };
                    self.pos += 1;
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        'a' => '\u{7}',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        'v' => '\u{b}',
                        '0' => '\0',
                        '\\' | '\'' | '"' => e,
                        'x' | 'u' | 'U' => {
                            let n = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex: String = self.chars.iter().skip(self.pos).take(n).collect();
                            self.pos += n;
                            match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                                Some(ch) if hex.len() == n => ch,
                                _ => return self.err(start, format!("invalid escape \\{e}{hex}")),
                            }
                        }
                        other => return self.err(self.pos - 2, format!("invalid escape \\{other}")),
                    });
                }
                c => s.push(c),
            }
        }
    }

    /// `[...]`: `*`, an index, a slice, `'key'`, or a comma-separated union of those.
    fn array(&mut self) -> PResult<Op> {
        let start = self.pos;
        let mut end = start + 1;
        let mut quote: Option<char> = None;
        loop {
            match self.chars.get(end) {
                None | Some('\n') => return self.err(start, "unterminated array"),
                Some(&c) if quote == Some(c) => quote = None,
                Some(&c @ ('\'' | '"')) if quote.is_none() => quote = Some(c),
                Some(']') if quote.is_none() => break,
                _ => {}
            }
            end += 1;
        }
        self.pos = end + 1;
        bracket(&self.chars[start + 1..end], self.base + start + 1)
    }

    /// `[?(LEFT OP RIGHT)]` or `[?(PATH)]`.
    fn filter(&mut self) -> PResult<Op> {
        let start = self.pos;
        let body_start = start + 3;
        let mut end = body_start;
        let mut quote: Option<char> = None;
        loop {
            match self.chars.get(end) {
                None | Some('\n') => return self.err(start, "unterminated filter"),
                Some(&c) if quote == Some(c) && self.chars[end - 1] != '\\' => quote = None,
                Some(&c @ ('\'' | '"')) if quote.is_none() => quote = Some(c),
                Some(')') if quote.is_none() => break,
                _ => {}
            }
            end += 1;
        }
        if self.chars.get(end + 1) != Some(&']') {
            return self.err(end + 1, "unclosed array expect ]");
        }
        self.pos = end + 2;
        let body = &self.chars[body_start..end];
        let sub = |chars: &[char], off: usize| -> PResult<Vec<Op>> {
            let mut p = Parser {
                chars,
                pos: 0,
                base: self.base + off,
            };
            let raw = p.action(false)?;
            match classify(raw, self.base + off)? {
                Block::Ops(ops) => Ok(ops),
                _ => Err(ParseError {
                    pos: self.base + off,
                    msg: "range and end are not allowed in a filter".into(),
                }),
            }
        };
        let is_op = |c: &char| matches!(c, '!' | '<' | '>' | '=' | '~');
        let left_len = body.iter().take_while(|c| !is_op(c)).count();
        let op_len = body[left_len..].iter().take_while(|c| is_op(c)).count();
        if left_len == 0 || op_len == 0 || left_len + op_len == body.len() {
            return Ok(Op::Filter(Box::new(Filter {
                left: sub(body, body_start)?,
                cmp: None,
            })));
        }
        let op: String = body[left_len..left_len + op_len].iter().collect();
        let cmp = match op.as_str() {
            "==" => Cmp::Eq,
            "!=" => Cmp::Ne,
            "<" => Cmp::Lt,
            ">" => Cmp::Gt,
            "<=" => Cmp::Le,
            ">=" => Cmp::Ge,
            other => {
                return self.err(
                    body_start + left_len,
                    format!("unrecognized filter operator {other}"),
                );
            }
        };
        let left = sub(&body[..left_len], body_start)?;
        let right = sub(&body[left_len + op_len..], body_start + left_len + op_len)?;
        Ok(Op::Filter(Box::new(Filter {
            left,
            cmp: Some((cmp, right)),
        })))
    }
}

/// The inside of `[...]`: `*`, an index, a slice, `'key'`, or a comma-separated union of those.
fn bracket(inner: &[char], base: usize) -> PResult<Op> {
    let parts = split_outside_quotes(inner, ',');
    if parts.len() > 1 {
        let mut branches = Vec::new();
        for (off, part) in parts {
            let (lead, t) = trim(part);
            branches.push(vec![bracket(t, base + off + lead)?]);
        }
        return Ok(Op::Union(branches));
    }
    let text: String = inner.iter().collect();
    let text = if text == "*" { ":".to_owned() } else { text };
    let err = |msg: String| Err(ParseError { pos: base, msg });
    if let Some(q @ ('\'' | '"')) = text.chars().next() {
        if text.len() >= 2 && text.ends_with(q) && !text[1..text.len() - 1].contains(q) {
            let key = text[1..text.len() - 1].to_owned();
            let path = key.split('.').map(str::to_owned).collect();
            return Ok(Op::Key(key, path));
        }
        return err(format!("invalid array index {text}"));
    }
    let fields: Vec<&str> = text.split(':').collect();
    if fields.len() > 3 {
        return err(format!("invalid array index {text}"));
    }
    let mut nums = [None; 3];
    for (k, f) in fields.iter().enumerate() {
        let f = f.trim();
        if f.is_empty() {
            continue;
        }
        match f.parse::<i64>() {
            Ok(n) => nums[k] = Some(n),
            Err(_) => return err(format!("invalid array index {text}")),
        }
    }
    if fields.len() == 1 {
        let Some(n) = nums[0] else {
            return err(format!("invalid array index {text}"));
        };
        return Ok(Op::Slice(Slice {
            start: Some(n),
            end: Some(n + 1),
            step: None,
            derived: true,
        }));
    }
    if nums[2].is_some_and(|s| s <= 0) {
        return err("step must be > 0".to_owned());
    }
    Ok(Op::Slice(Slice {
        start: nums[0],
        end: nums[1],
        step: nums[2],
        derived: false,
    }))
}

/// Splits at `sep` outside quotes, with each part's offset.
fn split_outside_quotes(s: &[char], sep: char) -> Vec<(usize, &[char])> {
    let mut parts = Vec::new();
    let (mut start, mut quote) = (0, None);
    for (i, &c) in s.iter().enumerate() {
        match c {
            c if quote == Some(c) => quote = None,
            '\'' | '"' if quote.is_none() => quote = Some(c),
            c if c == sep && quote.is_none() => {
                parts.push((start, &s[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push((start, &s[start..]));
    parts
}

fn trim(s: &[char]) -> (usize, &[char]) {
    let lead = s.iter().take_while(|c| **c == ' ').count();
    let trail = s[lead..].iter().rev().take_while(|c| **c == ' ').count();
    (lead, &s[lead..s.len() - trail])
}
