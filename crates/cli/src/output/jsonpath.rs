//! kubectl's JSONPath templates (`-o jsonpath=...`): text outside `{}` is printed as is; inside, a path
//! (`.a.b`, `[0]`, `[1:3]`, `[-1]`, `[*]`, `..name`, `['key']`, `[?(@.type=="Ready")]`, `['a','b']`), a string
//! literal (`"\n"`, `'\t'`), or `range PATH` ... `end`. `$` and `@` name the current object. What a path finds is
//! printed as kubectl does: strings raw, numbers and booleans as text, maps and lists as compact JSON, several
//! results joined by spaces. A missing key prints nothing unless missing keys are refused
//! (`--allow-missing-template-keys=false`), then it is an error naming the key. An index out of range is always an
//! error, as in kubectl.
//!
//! One difference, on purpose: kubectl reads `['a.b']` as the path `.a.b`; here a key spelled with dots is first
//! looked up as it is (`['app.kubernetes.io/name']` finds the label), and only then as a path, so kubectl's
//! documented `['metadata.name', 'status.capacity']` still works.

use super::json;
use parse::parse_template;
use serde_json::Value;
use std::cmp::Ordering;

mod parse;

/// A parsed template.
#[derive(Debug, Clone)]
pub struct JsonPath {
    raw: String,
    nodes: Vec<Node>,
    allow_missing_keys: bool,
    json_output: bool,
}

#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Expr(Vec<Op>),
    Range(Vec<Op>, Vec<Node>),
}

#[derive(Debug, Clone)]
enum Op {
    Field(String),
    /// `['key']`: the key as written if the map has it, else its dotted path.
    Key(String, Vec<String>),
    Wildcard,
    Recursive,
    Slice(Slice),
    Filter(Box<Filter>),
    Union(Vec<Vec<Op>>),
    /// A literal: a quoted string, a number or a boolean.
    Literal(Value),
}

#[derive(Debug, Clone, Copy)]
struct Slice {
    start: Option<i64>,
    end: Option<i64>,
    step: Option<i64>,
    /// `[n]` is `[n:n+1]`; an end derived that way wraps when it is 0 (`[-1]`).
    derived: bool,
}

#[derive(Debug, Clone)]
struct Filter {
    left: Vec<Op>,
    /// `None` for an existence test (`[?(@.x)]`).
    cmp: Option<(Cmp, Vec<Op>)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Gt,
    Le,
    Ge,
}

impl JsonPath {
    /// Parses `template`. The error reads as kubectl's (`error parsing jsonpath T, ...`) and names the position.
    pub fn parse(template: &str) -> Result<Self, String> {
        let nodes = parse_template(template).map_err(|e| {
            format!(
                "error parsing jsonpath {template}, {} (at position {})",
                e.msg, e.pos
            )
        })?;
        Ok(Self {
            raw: template.to_owned(),
            nodes,
            allow_missing_keys: true,
            json_output: false,
        })
    }

    /// Whether a missing key prints nothing (kubectl's default, `true`) or is an error.
    #[must_use]
    pub fn allow_missing_keys(mut self, allow: bool) -> Self {
        self.allow_missing_keys = allow;
        self
    }

    /// `-o jsonpath-as-json`: each `{}`'s results as an indented JSON list.
    #[must_use]
    pub fn json_output(mut self, on: bool) -> Self {
        self.json_output = on;
        self
    }

    /// Runs the template on `data`.
    pub fn execute(&self, data: &Value) -> Result<String, String> {
        let mut out = String::new();
        self.run(&self.nodes, data, &mut out).map_err(|e| {
            format!(
                "error executing jsonpath {:?}: Error executing template: {e}",
                self.raw
            )
        })?;
        Ok(out)
    }

    fn run<'a>(&'a self, nodes: &'a [Node], data: &'a Value, out: &mut String) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Text(t) => {
                    if self.json_output {
                        self.print(&[&Value::String(t.clone())], out);
                    } else {
                        out.push_str(t);
                    }
                }
                Node::Expr(ops) => {
                    let found = self.eval(ops, vec![data])?;
                    self.print(&found, out);
                }
                Node::Range(ops, body) => {
                    for item in self.eval(ops, vec![data])? {
                        self.run(body, item, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn print(&self, found: &[&Value], out: &mut String) {
        if self.json_output {
            let list = Value::Array(found.iter().map(|v| (*v).clone()).collect());
            out.push_str(&json::indented(&list, "    "));
            out.push('\n');
            return;
        }
        for (i, v) in found.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&json::scalar_text(v));
        }
    }

    fn eval<'a>(&'a self, ops: &'a [Op], mut cur: Vec<&'a Value>) -> Result<Vec<&'a Value>, String> {
        for op in ops {
            cur = self.step(op, cur)?;
        }
        Ok(cur)
    }

    fn step<'a>(&'a self, op: &'a Op, input: Vec<&'a Value>) -> Result<Vec<&'a Value>, String> {
        let mut out = Vec::new();
        match op {
            Op::Field(name) => {
                out.extend(input.iter().filter_map(|v| v.as_object()?.get(name)));
                self.missing(name, &input, &out)?;
            }
            Op::Key(key, path) => {
                for v in &input {
                    let Some(map) = v.as_object() else { continue };
                    if let Some(found) = map.get(key) {
                        out.push(found);
                    } else if let Some(found) = path.iter().try_fold(*v, |v, k| v.as_object()?.get(k)) {
                        out.push(found);
                    }
                }
                self.missing(key, &input, &out)?;
            }
            Op::Wildcard => {
                for v in input {
                    match v {
                        Value::Object(m) => out.extend(m.values()),
                        Value::Array(a) => out.extend(a.iter()),
                        _ => {}
                    }
                }
            }
            Op::Recursive => input.into_iter().for_each(|v| descend(v, &mut out)),
            Op::Slice(s) => {
                for v in input {
                    match v {
                        Value::Null => {}
                        Value::Array(a) => out.extend(s.select(a)?),
                        other => return Err(format!("{} is not array or slice", type_name(other))),
                    }
                }
            }
            Op::Filter(f) => {
                for v in input {
                    let Value::Array(items) = v else {
                        return Err(format!(
                            "{} is not array or slice and cannot be filtered",
                            json::compact(v)
                        ));
                    };
                    for item in items {
                        if self.keep(f, item)? {
                            out.push(item);
                        }
                    }
                }
            }
            Op::Union(branches) => {
                for branch in branches {
                    out.extend(self.eval(branch, input.clone())?);
                }
            }
            Op::Literal(v) => out.push(v),
        }
        Ok(out)
    }

    fn missing(&self, name: &str, input: &[&Value], found: &[&Value]) -> Result<(), String> {
        if found.is_empty() && !input.is_empty() && !self.allow_missing_keys {
            return Err(format!("{name} is not found"));
        }
        Ok(())
    }

    fn keep(&self, f: &Filter, item: &Value) -> Result<bool, String> {
        let Some((cmp, right)) = &f.cmp else {
            return Ok(self.eval(&f.left, vec![item]).is_ok_and(|l| !l.is_empty()));
        };
        let one = |found: Vec<&Value>| -> Result<Option<Value>, String> {
            match found.len() {
                0 => Ok(None),
                1 => Ok(Some(found[0].clone())),
                _ => Err("can only compare one element at a time".to_owned()),
            }
        };
        let Some(l) = one(self.eval(&f.left, vec![item])?)? else {
            return Ok(false);
        };
        let Some(r) = one(self.eval(right, vec![item])?)? else {
            return Ok(false);
        };
        compare(&l, *cmp, &r)
    }
}

/// Every non-empty map and list at or under `v`, parents first (kubectl's `..`).
fn descend<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    let children: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => return,
    };
    if !children.is_empty() {
        out.push(v);
        children.into_iter().for_each(|c| descend(c, out));
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    }
}

fn compare(l: &Value, cmp: Cmp, r: &Value) -> Result<bool, String> {
    let ord = match (l, r) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
            a.partial_cmp(&b)
        }
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) if matches!(cmp, Cmp::Eq | Cmp::Ne) => Some(a.cmp(b)),
        (Value::Null, Value::Null) if matches!(cmp, Cmp::Eq | Cmp::Ne) => Some(Ordering::Equal),
        (Value::Bool(_), Value::Bool(_)) | (Value::Null, Value::Null) => {
            return Err("invalid type for comparison".to_owned());
        }
        _ => return Err("incompatible types for comparison".to_owned()),
    };
    Ok(match (cmp, ord) {
        (Cmp::Ne, o) => o != Some(Ordering::Equal),
        (_, None) => false,
        (Cmp::Eq, Some(o)) => o == Ordering::Equal,
        (Cmp::Lt, Some(o)) => o == Ordering::Less,
        (Cmp::Gt, Some(o)) => o == Ordering::Greater,
        (Cmp::Le, Some(o)) => o != Ordering::Greater,
        (Cmp::Ge, Some(o)) => o != Ordering::Less,
    })
}

impl Slice {
    fn select<'a>(&self, a: &'a [Value]) -> Result<Vec<&'a Value>, String> {
        let len = i64::try_from(a.len()).unwrap_or(i64::MAX);
        let mut start = self.start.unwrap_or(0);
        if start < 0 {
            start += len;
        }
        let mut end = self.end.unwrap_or(len);
        if end < 0 || (end == 0 && self.derived) {
            end += len;
        }
        if start == end {
            return Ok(Vec::new());
        }
        if start >= len || start < 0 {
            return Err(format!("array index out of bounds: index {start}, length {len}"));
        }
        if end > len || end < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                end - 1
            ));
        }
        if start > end {
            return Err(format!(
                "starting index {start} is greater than ending index {end}"
            ));
        }
        let (s, e) = (
            usize::try_from(start).unwrap_or(0),
            usize::try_from(end).unwrap_or(0),
        );
        let step = self.step.and_then(|n| usize::try_from(n).ok()).unwrap_or(1);
        Ok(a[s..e].iter().step_by(step.max(1)).collect())
    }
}

#[cfg(test)]
mod tests;
