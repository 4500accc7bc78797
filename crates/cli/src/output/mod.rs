//! What `crius get` and `crius describe` print, the way kubectl prints it: `-o wide|yaml|json|name|jsonpath=T`,
//! the default tables and `describe pod`. Everything here is pure: Kubernetes objects in (as `serde_json::Value`,
//! exactly as the API server would return them), text out. The caller fetches the objects, writes the text, and
//! prints errors as `error: {e}` (the messages here carry no prefix).
//!
//! ```text
//! Format::parse("-o value") ──▶ render(kind, objects, single, &format, now) ──▶ String
//!                                  ├─ Table / Wide ─▶ table (tabwriter-aligned, kubectl's columns)
//!                                  ├─ Json / Yaml  ─▶ the object, or a `List` of them
//!                                  ├─ Name         ─▶ pod/NAME, job.batch/NAME, deployment.apps/NAME
//!                                  └─ JsonPath     ─▶ jsonpath (on the object, or on the `List`)
//! describe::describe_pod(pod, events, now) ──▶ String
//! ```

mod columns;
pub mod describe;
mod json;
pub mod jsonpath;
pub mod table;
mod timefmt;

use jsonpath::JsonPath;
use serde_json::{Value, json};
use std::str::FromStr;
use std::time::SystemTime;

/// An `-o` output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// No `-o`: kubectl's default columns.
    Table,
    /// `-o wide`: the default columns and more.
    Wide,
    /// `-o json`.
    Json,
    /// `-o yaml`.
    Yaml,
    /// `-o name`: `kind.group/name`.
    Name,
    /// `-o jsonpath=TEMPLATE`.
    JsonPath(String),
    /// `-o jsonpath-as-json=TEMPLATE`: each `{}`'s results as an indented JSON list.
    JsonPathAsJson(String),
}

/// The `-o` values accepted, as kubectl lists them in its error.
pub const ALLOWED_FORMATS: &str = "json,jsonpath,jsonpath-as-json,name,wide,yaml";

impl Format {
    /// Parses an `-o` value (`""` is the default table). A jsonpath template is parsed here, so a bad one is
    /// refused before anything is fetched.
    pub fn parse(s: &str) -> Result<Self, String> {
        let format = match s {
            "" => Self::Table,
            "wide" => Self::Wide,
            "json" => Self::Json,
            "yaml" => Self::Yaml,
            "name" => Self::Name,
            "jsonpath" | "jsonpath-as-json" => {
                return Err("template format specified but no template given".to_owned());
            }
            _ => match s.split_once('=') {
                Some(("jsonpath", t)) => Self::JsonPath(t.to_owned()),
                Some(("jsonpath-as-json", t)) => Self::JsonPathAsJson(t.to_owned()),
                _ => {
                    return Err(format!(
                        "unable to match a printer suitable for the output format {s:?}, allowed formats are: \
                         {ALLOWED_FORMATS}"
                    ));
                }
            },
        };
        if let Self::JsonPath(t) | Self::JsonPathAsJson(t) = &format {
            if t.is_empty() {
                return Err("template format specified but no template given".to_owned());
            }
            JsonPath::parse(t)?;
        }
        Ok(format)
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

/// The flags besides `-o` that change what is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// `--allow-missing-template-keys` (kubectl's default: `true`): a key a jsonpath template names but an
    /// object lacks prints nothing; when `false` it is an error.
    pub allow_missing_template_keys: bool,
    /// `-A`: tables get a NAMESPACE column first.
    pub all_namespaces: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            allow_missing_template_keys: true,
            all_namespaces: false,
        }
    }
}

/// Renders `objects` of `kind` (`pods`, `pod`, `po`, `jobs`, `deployments`, `deploy`, ... or a `Kind`) with
/// kubectl's defaults. `single`: a name was asked for, so json/yaml/jsonpath see the object itself rather than a
/// `List`. An empty table is `""`: print [`no_resources`] to stderr instead.
pub fn render(
    kind: &str,
    objects: &[Value],
    single: bool,
    format: &Format,
    now: SystemTime,
) -> Result<String, String> {
    render_with(kind, objects, single, format, now, RenderOptions::default())
}

/// [`render`] with flags.
pub fn render_with(
    kind: &str,
    objects: &[Value],
    single: bool,
    format: &Format,
    now: SystemTime,
    opts: RenderOptions,
) -> Result<String, String> {
    let subject = || match objects {
        [one] if single => one.clone(),
        _ => list(objects),
    };
    match format {
        Format::Table | Format::Wide => Ok(table::render_table(
            kind,
            objects,
            *format == Format::Wide,
            opts.all_namespaces,
            now,
        )),
        Format::Json => {
            let mut s = json::indented(&subject(), "    ");
            s.push('\n');
            Ok(s)
        }
        Format::Yaml => yaml(&subject()),
        Format::Name => Ok(objects
            .iter()
            .map(|o| format!("{}\n", name_of(kind, o)))
            .collect()),
        Format::JsonPath(t) | Format::JsonPathAsJson(t) => JsonPath::parse(t)?
            .allow_missing_keys(opts.allow_missing_template_keys)
            .json_output(matches!(format, Format::JsonPathAsJson(_)))
            .execute(&subject()),
    }
}

/// The `List` kubectl prints for several objects.
pub fn list(objects: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}})
}

/// YAML with sorted keys, as kubectl writes it.
fn yaml(v: &Value) -> Result<String, String> {
    serde_yaml_ng::to_string(&sorted(v)).map_err(|e| format!("writing YAML: {e}"))
}

/// `v` with every map's keys in order, whatever the map type keeps.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// `-o name`'s form: the lowercase kind, its API group, the name (`job.batch/pi`). The kind and group come
/// from the object's `kind`/`apiVersion`, else from the `kind` asked for.
pub fn name_of(kind: &str, obj: &Value) -> String {
    let (k, group) = match obj["kind"].as_str() {
        Some(k) => {
            let api = obj["apiVersion"].as_str().unwrap_or("v1");
            (
                k.to_lowercase(),
                api.split_once('/').map_or("", |(g, _)| g).to_owned(),
            )
        }
        None => match Kind::of(kind) {
            Kind::Pod => ("pod".to_owned(), String::new()),
            Kind::Job => ("job".to_owned(), "batch".to_owned()),
            Kind::Deployment => ("deployment".to_owned(), "apps".to_owned()),
            Kind::Other => (kind.to_lowercase(), String::new()),
        },
    };
    let name = str_at(obj, &["metadata", "name"]);
    if group.is_empty() {
        format!("{k}/{name}")
    } else {
        format!("{k}.{group}/{name}")
    }
}

/// What kubectl tells (on stderr) when a table would be empty: `No resources found in NS namespace.`, or
/// `No resources found` across all namespaces (`namespace` `None`).
pub fn no_resources(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("No resources found in {ns} namespace."),
        None => "No resources found".to_owned(),
    }
}

/// The kinds with their own columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Pod,
    Job,
    Deployment,
    Other,
}

impl Kind {
    /// The kind a resource word names, in any of kubectl's spellings.
    pub(crate) fn of(kind: &str) -> Self {
        match kind.to_ascii_lowercase().as_str() {
            "pod" | "pods" | "po" => Self::Pod,
            "job" | "jobs" | "job.batch" | "jobs.batch" => Self::Job,
            "deployment" | "deployments" | "deploy" | "deployment.apps" | "deployments.apps" => {
                Self::Deployment
            }
            _ => Self::Other,
        }
    }
}

/// The value at `path`, if every step is there.
pub(crate) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(*k))
}

/// The string at `path`, `""` when absent (Go's zero value, which kubectl's printers test for).
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

/// The integer at `path`, 0 when absent.
pub(crate) fn int_at(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// The list at `path`, empty when absent.
pub(crate) fn list_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

#[cfg(test)]
mod tests;
