//! The `run_python` tool: its parameters, result, description and annotations, and the
//! translation of a daemon outcome into an MCP result. Pure functions, unit-tested.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vivarium_client::{format_bytes, limit_name, InputFileData, Outcome, ProfileInfo};
use vivarium_proto::{ExitStatus, ProfileFeatures, Reason};

use crate::excerpt::{excerpt_weighted, StreamExcerpt};
use crate::files::FileArg;
use crate::session::SessionArg;

pub const TOOL_NAME: &str = "run_python";

/// Characters of a result's text content, by default: well under the 10,000 that Claude
/// Code keeps of a tool result before it cuts the middle out.
pub const DEFAULT_TEXT_CHARS: usize = 8_000;

/// How much of a job's output a result carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    /// Characters of each stream's excerpt in `structuredContent`.
    pub output_chars: usize,
    /// Characters of the whole text content (the JSON text, escapes included).
    pub text_chars: usize,
}

impl Default for Budgets {
    fn default() -> Budgets {
        Budgets {
            output_chars: 8_000,
            text_chars: DEFAULT_TEXT_CHARS,
        }
    }
}

/// Arguments of `run_python`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// Python 3 source to run as a script (`python3 -I -u script.py`). Print what you want
    /// to see; output is returned as head and tail excerpts when long.
    pub code: String,
    /// Text fed to the script's standard input (empty when omitted).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Wall-clock limit in seconds for this run; at most the profile's wall-clock limit,
    /// which also applies when omitted.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Sandbox profile to run under; the server's default profile when omitted.
    #[serde(default)]
    pub profile: Option<String>,
    /// PyPI packages to install before the run, as PEP 508 requirements (e.g.
    /// `["numpy", "pandas>=2"]`); wheels only. A `# /// script` block (PEP 723) in the code
    /// is read too. The first use of a set installs it (seconds); later runs reuse the
    /// cached environment. The profile must allow packages.
    #[serde(default)]
    pub packages: Option<Vec<String>>,
    /// Keep state between calls: omit for a fresh, independent run; `"new"` to open a
    /// session and run `code` as its first cell; or the `session_id` of an earlier result
    /// to run `code` in that session, where earlier variables, imports and files are still
    /// there. A session ends when idle too long or at the end of its lifetime, and its
    /// state is then lost.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Input files to place under /work before the code runs (the description in the
    /// schema is [`crate::files::description`]).
    #[serde(default)]
    pub files: Option<Vec<FileArg>>,
    /// The files, checked and decoded by [`parse_args`] (which empties `files`).
    #[serde(skip)]
    #[schemars(skip)]
    pub input_files: Vec<InputFileData>,
}

impl RunPythonArgs {
    /// The session the call asks for (`None`: a stateless run). Checked by [`parse_args`].
    pub fn session(&self) -> Option<SessionArg> {
        let id = self.session_id.as_deref()?;
        Some(SessionArg::parse(id).expect("parse_args checked session_id"))
    }
}

/// What `run_python` returns (`structuredContent`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct RunPythonResult {
    /// The interpreter's exit code; null when it was killed by a signal or never started,
    /// and for a session cell (the interpreter goes on: see `reason`).
    pub exit_code: Option<i32>,
    /// Why the job ended: ok, error (non-zero exit, or a session cell's exception),
    /// timeout, cpu_limit, oom, pids, output_limit, signal, seccomp (a forbidden system
    /// call), cancelled, sandbox_error; for a session cell also interrupted, memory_guard
    /// (interrupted before the memory limit; the state is kept) and session_ended.
    pub reason: String,
    /// Standard output.
    pub stdout: StreamExcerpt,
    /// Standard error (Python tracebacks land here).
    pub stderr: StreamExcerpt,
    /// Wall-clock time of the job in milliseconds.
    pub wall_ms: u64,
    /// CPU time used by all the job's processes, in milliseconds.
    pub cpu_ms: u64,
    /// Peak memory of the job in bytes.
    pub peak_memory_bytes: u64,
    /// Sandbox limits reached during the run: wall, cpu, memory, pids, stdout, stderr, disk.
    pub limits_hit: Vec<String>,
    /// The profile the job ran under.
    pub profile: String,
    /// The installed packages when the job asked for any (else null).
    pub packages: Option<PackagesResult>,
    /// Present only for a call with `session_id`: the session, this cell's number and
    /// value, and when the session expires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionResult>,
    /// The files the run returned (everything under /work/out, and the matplotlib figures
    /// it showed or left open): each with path, size, media type, sha256 and a
    /// `resources/read` URI, how the result shows it (image, downscaled, inlined, link),
    /// and what was skipped or not listed. Absent when the daemon returns no artifacts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<crate::artifacts::ArtifactsResult>,
}

/// A session cell's part of the result.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SessionResult {
    /// Pass this as `session_id` to run the next cell in the same session.
    pub session_id: String,
    /// Whether this call opened the session (`session_id: "new"`).
    pub opened: bool,
    /// The cell's number in the session (1 for the first).
    pub cell: u64,
    /// The repr of the cell's last expression, as IPython's Out[] shows it; null for a
    /// statement, a None value or a trailing `;`.
    pub value: Option<String>,
    /// True when `value` was cut (the daemon's bound or this result's budget).
    pub value_truncated: bool,
    /// The exception the cell raised (reason `error`), else null.
    pub exception: Option<ExceptionResult>,
    /// Whether the session and its state (variables, imports, files in /work) are still
    /// there for the next cell: true after an exception or an interrupt, false once the
    /// session has ended.
    pub state_kept: bool,
    /// When the session ends if no further cell comes (its idle TTL or its lifetime,
    /// whichever is sooner), RFC 3339 UTC; null once it has ended.
    pub expires_at: Option<String>,
    /// The same, in seconds from now; null once it has ended.
    pub expires_in_seconds: Option<u64>,
}

/// An exception a session cell raised.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ExceptionResult {
    /// The exception's type, e.g. `ValueError`.
    #[serde(rename = "type")]
    pub type_name: String,
    pub message: String,
    /// The traceback, starting in the cell's code (`<cell N>`).
    pub traceback: String,
    pub traceback_truncated: bool,
}

/// The job's package environment.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct PackagesResult {
    /// Every installed distribution as `name==version`.
    pub resolved: Vec<String>,
    /// Whether the environment came from the cache (no install ran).
    pub from_cache: bool,
}

pub fn reason_name(reason: Reason) -> &'static str {
    match reason {
        Reason::Ok => "ok",
        Reason::Error => "error",
        Reason::Timeout => "timeout",
        Reason::CpuLimit => "cpu_limit",
        Reason::Oom => "oom",
        Reason::Pids => "pids",
        Reason::OutputLimit => "output_limit",
        Reason::Signal => "signal",
        Reason::Seccomp => "seccomp",
        Reason::Cancelled => "cancelled",
        Reason::SandboxError => "sandbox_error",
    }
}

/// Parse a call's arguments; the error text is meant for the model.
pub fn parse_args(arguments: Option<JsonObject>) -> Result<RunPythonArgs, String> {
    let arguments = arguments.unwrap_or_default();
    check_types(&arguments).map_err(|e| format!("invalid arguments for {TOOL_NAME}: {e}"))?;
    let value = serde_json::Value::Object(arguments);
    let args: RunPythonArgs = serde_json::from_value(value)
        .map_err(|e| format!("invalid arguments for {TOOL_NAME}: {e}"))?;
    for (name, value, max) in [
        ("code", Some(&args.code), MAX_CODE_CHARS),
        ("stdin", args.stdin.as_ref(), MAX_STDIN_CHARS),
    ] {
        let chars = value.map_or(0, |v| v.chars().count());
        if chars > max {
            return Err(format!(
                "invalid arguments for {TOOL_NAME}: `{name}` has {chars} characters; at most \
                 {max}. Generate large data inside the script, or pass less of it."
            ));
        }
    }
    if let Some(p) = &args.packages {
        if p.len() > MAX_PACKAGES {
            return Err(format!(
                "invalid arguments for {TOOL_NAME}: packages names {} requirements; at most {MAX_PACKAGES}",
                p.len()
            ));
        }
    }
    if let Some(id) = &args.session_id {
        let session =
            SessionArg::parse(id).map_err(|e| format!("invalid arguments for {TOOL_NAME}: {e}"))?;
        if session != SessionArg::New && args.packages.is_some() {
            return Err(format!(
                "invalid arguments for {TOOL_NAME}: `packages` can only be given with \
                 `session_id: \"new\"` (a session's environment is made when it opens); the \
                 session's packages are already there"
            ));
        }
    }
    if let Some(t) = args.timeout_seconds {
        if !(t.is_finite() && t > 0.0) {
            return Err(format!(
                "invalid arguments for {TOOL_NAME}: `timeout_seconds` must be a number of seconds greater than 0, got {t}"
            ));
        }
    }
    let mut args = args;
    if let Some(files) = args.files.take() {
        args.input_files = crate::files::decode(files, args.session_id.is_none())
            .map_err(|e| format!("invalid arguments for {TOOL_NAME}: {e} Nothing ran."))?;
    }
    Ok(args)
}

/// The parameters and what each must be, in the schema's words.
const PARAMETERS: [(&str, &str); 7] = [
    ("code", "a string of Python source"),
    ("stdin", "a string"),
    ("timeout_seconds", "a number of seconds greater than 0"),
    ("profile", "a string naming a profile"),
    ("packages", "an array of strings (PEP 508 requirements)"),
    (
        "session_id",
        "a string: \"new\", or the session_id of an earlier result",
    ),
    (
        "files",
        "an array of objects {\"path\": ..., \"content\": ..., \"encoding\": \"text\" or \"base64\"}",
    ),
];

/// Check each argument's JSON type before serde does, so that a wrong one is described
/// as the schema says (`a number of seconds`), not as a Rust type (`expected f64`).
fn check_types(arguments: &JsonObject) -> Result<(), String> {
    use serde_json::Value;
    fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
    for (name, value) in arguments {
        let Some((_, must)) = PARAMETERS.iter().find(|(n, _)| n == name) else {
            let names: Vec<String> = PARAMETERS.iter().map(|(n, _)| format!("`{n}`")).collect();
            return Err(format!(
                "unknown field `{name}`; the parameters are {}",
                names.join(", ")
            ));
        };
        // An optional parameter may be null (as if omitted); `code` may not.
        let fits = match (name.as_str(), value) {
            (_, Value::Null) => name != "code",
            ("timeout_seconds", v) => v.is_number(),
            ("packages", Value::Array(items)) => items.iter().all(Value::is_string),
            ("packages", _) => false,
            ("files", Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    check_file_item(i, item, kind)?;
                }
                true
            }
            ("files", _) => false,
            (_, v) => v.is_string(),
        };
        if !fits {
            let got = match value {
                Value::Array(items) if name == "packages" => {
                    let bad = items.iter().find(|i| !i.is_string()).map_or("null", kind);
                    format!("an array with {bad} in it")
                }
                v => kind(v).to_string(),
            };
            return Err(format!("`{name}` must be {must}, got {got}"));
        }
    }
    if !arguments.contains_key("code") {
        return Err("missing field `code` (a string of Python source)".into());
    }
    Ok(())
}

/// Check one item of `files` as the schema describes it, naming it by its index (and its
/// path when it has one).
fn check_file_item(
    i: usize,
    item: &serde_json::Value,
    kind: fn(&serde_json::Value) -> &'static str,
) -> Result<(), String> {
    use serde_json::Value;
    const FIELDS: &str = "`path` (a string), `content` (a string) and optionally `encoding` \
                          (\"text\" or \"base64\")";
    let Value::Object(fields) = item else {
        return Err(format!(
            "`files[{i}]` must be an object with {FIELDS}, got {}",
            kind(item)
        ));
    };
    let name = match fields.get("path") {
        Some(Value::String(p)) => format!("`files[{i}]` ({p:?})"),
        _ => format!("`files[{i}]`"),
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !["path", "content", "encoding"].contains(&k.as_str()))
    {
        let mode = if other == "mode" {
            " (files are always mode 0644)"
        } else {
            ""
        };
        return Err(format!(
            "{name} has an unknown field `{other}`{mode}; a file has {FIELDS}"
        ));
    }
    for field in ["path", "content"] {
        match fields.get(field) {
            Some(Value::String(_)) => {}
            None => return Err(format!("{name} has no `{field}`; a file has {FIELDS}")),
            Some(v) => {
                return Err(format!(
                    "{name}: `{field}` must be a string, got {}",
                    kind(v)
                ))
            }
        }
    }
    match fields.get("encoding") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(e)) if e == "text" || e == "base64" => Ok(()),
        Some(Value::String(e)) => Err(format!(
            "{name}: `encoding` must be \"text\" or \"base64\", got {e:?}"
        )),
        Some(v) => Err(format!(
            "{name}: `encoding` must be \"text\" or \"base64\", got {}",
            kind(v)
        )),
    }
}

/// Milliseconds for a timeout in seconds, rounded up, at least 1.
pub fn timeout_ms(seconds: f64) -> u64 {
    ((seconds * 1000.0).ceil() as u64).max(1)
}

/// A tool error text when `timeout_seconds` exceeds the wall limit of `profile` (if known).
pub fn check_timeout(
    timeout_seconds: Option<f64>,
    profile: &str,
    profiles: Option<&[ProfileInfo]>,
) -> Result<(), String> {
    let (Some(t), Some(p)) = (
        timeout_seconds,
        profiles.and_then(|ps| ps.iter().find(|p| p.name == profile)),
    ) else {
        return Ok(());
    };
    if timeout_ms(t) > p.max.wall_ms {
        return Err(format!(
            "invalid timeout_seconds: {t} s exceeds the wall-clock limit of profile `{profile}` \
             ({} s); pass at most that, or omit it to get the limit",
            p.max.wall_ms as f64 / 1000.0
        ));
    }
    Ok(())
}

/// The tool as `tools/list` shows it, described with the daemon's profiles when known.
pub fn tool(
    profiles: Option<&[ProfileInfo]>,
    features: Option<&[ProfileFeatures]>,
    default_profile: &str,
    budgets: Budgets,
) -> Tool {
    let usable: Vec<&ProfileInfo> = profiles
        .unwrap_or_default()
        .iter()
        .filter(|p| p.disabled.is_none())
        .collect();
    let packages = Packages::of(&usable, features);
    let python = python_version(&usable, features, default_profile);
    // Open world: a profile with network, or package installs that fetch from an index.
    let network = usable.iter().any(|p| p.network) || packages.from_index;
    let mut input = (*rmcp::handler::server::common::schema_for_input::<RunPythonArgs>()
        .expect("RunPythonArgs has an object schema"))
    .clone();
    portable(&mut input, true);
    constrain_input(&mut input, &usable);
    if let Some(serde_json::Value::Object(props)) = input.get_mut("properties") {
        match &packages.on {
            // Nothing can have packages: do not advertise them.
            Some(on) if on.is_empty() => {
                props.remove("packages");
            }
            Some(on) if on.len() < usable.len() => {
                if let Some(serde_json::Value::Object(p)) = props.get_mut("packages") {
                    let d = p
                        .get("description")
                        .and_then(|d| d.as_str())
                        .unwrap_or_default()
                        .replace(
                            "The profile must allow packages.",
                            &format!("Only on the profiles {}.", on.join(", ")),
                        );
                    p.insert("description".into(), d.into());
                }
            }
            _ => {}
        }
    }
    if usable.is_empty() {
        // Before the daemon answers there is no list to point at.
        let text = format!(
            "Sandbox profile; `{default_profile}` when omitted. The daemon's profiles are \
             listed here once it answers (the list refreshes); a name it does not know is \
             refused with the ones it has."
        );
        if let Some(serde_json::Value::Object(p)) = input
            .get_mut("properties")
            .and_then(|props| props.get_mut("profile"))
        {
            p.insert("description".into(), text.into());
        }
    } else {
        let names: Vec<String> = usable
            .iter()
            .map(|p| format!("`{}` ({})", p.name, p.description))
            .collect();
        let text = format!(
            "Sandbox profile; `{default_profile}` when omitted. Available: {}.",
            names.join("; ")
        );
        if let Some(serde_json::Value::Object(props)) = input.get_mut("properties") {
            if let Some(serde_json::Value::Object(profile)) = props.get_mut("profile") {
                profile.insert("description".into(), text.into());
            }
            let default = usable.iter().find(|p| p.name == default_profile);
            if let (Some(p), Some(serde_json::Value::Object(timeout))) =
                (default, props.get_mut("timeout_seconds"))
            {
                let text = format!(
                    "Wall-clock limit in seconds for this run; at most the profile's limit ({} s \
                     for `{default_profile}`), which also applies when omitted.",
                    p.max.wall_ms as f64 / 1000.0
                );
                timeout.insert("description".into(), text.into());
            }
        }
    }
    if let Some(serde_json::Value::Object(p)) = input
        .get_mut("properties")
        .and_then(|props| props.get_mut("session_id"))
    {
        p.insert("description".into(), session_id_description().into());
        p.insert(
            "examples".into(),
            serde_json::json!([crate::session::NEW, "mcp_0123456789abcdef0123456789abcdef"]),
        );
    }
    add_examples(&mut input);
    let mut output =
        (*rmcp::handler::server::common::schema_for_output::<RunPythonResult>()).clone();
    portable(&mut output, false);
    constrain_output(&mut output);
    Tool::new(
        TOOL_NAME,
        description(
            &usable,
            default_profile,
            budgets,
            &packages,
            python.as_deref(),
        ),
        Arc::new(input),
    )
    .with_title("Run Python in a sandbox")
    .with_raw_output_schema(Arc::new(output))
    .with_annotations(
        ToolAnnotations::with_title("Run Python in a sandbox")
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(network),
    )
}

/// How long a session lives, in words: the daemon's defaults (its profiles may set other
/// values; each result gives its own session's `expires_at`). The daemon's profile list
/// does not carry a profile's `[session]` limits, so these are stated as defaults.
pub fn session_lifetime_text() -> String {
    format!(
        "A session ends after {} without a call (its idle TTL) or {} after it opened (its \
         lifetime), whichever comes first (the daemon's defaults; each result's `expires_at` \
         says when its session ends)",
        minutes(crate::session::DEFAULT_IDLE_TTL_SECS),
        minutes(crate::session::DEFAULT_LIFETIME_SECS),
    )
}

fn minutes(secs: u64) -> String {
    match secs {
        3600 => "1 hour".into(),
        s if s % 3600 == 0 => format!("{} hours", s / 3600),
        s if s % 60 == 0 => format!("{} minutes", s / 60),
        s => format!("{s} s"),
    }
}

/// The `session_id` parameter's description.
fn session_id_description() -> String {
    format!(
        "Keep Python state between calls. Omit for a fresh, independent run. \"new\": open a \
         session and run `code` as its first cell. The `session_id` of an earlier result: run \
         `code` in that session, where earlier variables, imports and files in /work are \
         still there. {}; its state is then lost, and a call with its id is an error saying \
         it expired (start again with \"new\"). Ids are valid only on this server.",
        session_lifetime_text()
    )
}

/// Where packages work, as far as the daemon said.
#[derive(Debug, Clone, Default)]
pub struct Packages {
    /// The usable profiles whose jobs can have packages (as `` `name` ``); `None` when the
    /// daemon did not say (no answer yet, or older than protocol 4): then the parameter is
    /// advertised as before and the daemon refuses where it cannot.
    pub on: Option<Vec<String>>,
    /// Whether any of them installs from an index over the network.
    pub from_index: bool,
}

impl Packages {
    pub fn of(usable: &[&ProfileInfo], features: Option<&[ProfileFeatures]>) -> Packages {
        let (Some(features), false) = (features, usable.is_empty()) else {
            return Packages::default();
        };
        let with: Vec<&ProfileFeatures> = usable
            .iter()
            .filter_map(|p| features.iter().find(|f| f.name == p.name))
            .filter(|f| f.packages_unavailable.is_none())
            .collect();
        Packages {
            on: Some(with.iter().map(|f| format!("`{}`", f.name)).collect()),
            from_index: with.iter().any(|f| f.packages_from_index),
        }
    }
}

/// Every `reason` a result can carry ([`reason_name`]).
pub const REASONS: [&str; 14] = [
    "ok",
    "error",
    "timeout",
    "cpu_limit",
    "oom",
    "pids",
    "output_limit",
    "signal",
    "seccomp",
    "cancelled",
    "sandbox_error",
    "interrupted",
    "memory_guard",
    "session_ended",
];

/// Every item `limits_hit` can carry (`vivarium_client::limit_name`).
pub const LIMITS: [&str; 7] = ["wall", "cpu", "memory", "pids", "stdout", "stderr", "disk"];

/// Longest `code`, in characters (the schema's `maxLength`): far under the request line
/// limit (`lines::MAX_LINE_BYTES`) even with JSON escapes, and under the daemon's
/// `max_code_bytes` default (16 MiB).
pub const MAX_CODE_CHARS: usize = 1 << 20;

/// Longest `stdin`, in characters (the schema's `maxLength`).
pub const MAX_STDIN_CHARS: usize = 4 << 20;

/// Most requirements a job may name, explicit and PEP 723 together (the daemon's
/// `MAX_REQUIREMENTS`, daemon/src/packages/spec.rs).
pub const MAX_PACKAGES: usize = 64;

/// The JSON Schema formats of draft 2020-12 (section 7.3); others are dropped.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Make a schemars schema portable: only standard `format`s (schemars writes `uint64`,
/// `int32`, `double`, which clients on the TypeScript SDK warn about) and, for an input,
/// optional properties as plain types (`"string"`, not `["string", "null"]` with
/// `default: null`), which some clients cannot read.
pub(crate) fn portable(schema: &mut JsonObject, input: bool) {
    fn walk(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                // Doc comments wrap lines; a description reads better as one paragraph.
                if let Some(serde_json::Value::String(d)) = map.get_mut("description") {
                    *d = d.replace('\n', " ");
                }
                if map
                    .get("format")
                    .and_then(|f| f.as_str())
                    .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
                {
                    map.remove("format");
                }
                map.values_mut().for_each(walk);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    for value in schema.values_mut() {
        walk(value);
    }
    if !input {
        return;
    }
    let required: Vec<String> = match schema.get("required") {
        Some(serde_json::Value::Array(r)) => r
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        _ => vec![],
    };
    if let Some(serde_json::Value::Object(props)) = schema.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            let serde_json::Value::Object(prop) = prop else {
                continue;
            };
            if required.contains(name) {
                continue;
            }
            if let Some(serde_json::Value::Array(types)) = prop.get("type") {
                let types: Vec<serde_json::Value> =
                    types.iter().filter(|t| *t != "null").cloned().collect();
                if types.len() == 1 {
                    prop.insert("type".into(), types[0].clone());
                }
            }
            if prop.get("default") == Some(&serde_json::Value::Null) {
                prop.remove("default");
            }
        }
    }
}

/// The input constraints that are known: a positive timeout at most the longest wall limit
/// of the usable profiles, their names, and how many packages a job may name.
fn constrain_input(schema: &mut JsonObject, usable: &[&ProfileInfo]) {
    let Some(serde_json::Value::Object(props)) = schema.get_mut("properties") else {
        return;
    };
    if let Some(serde_json::Value::Object(t)) = props.get_mut("timeout_seconds") {
        t.insert("exclusiveMinimum".into(), 0.into());
        if let Some(ms) = usable.iter().map(|p| p.max.wall_ms).max() {
            t.insert("maximum".into(), (ms as f64 / 1000.0).into());
        }
    }
    if let Some(serde_json::Value::Object(p)) = props.get_mut("profile") {
        if !usable.is_empty() {
            let names: Vec<serde_json::Value> =
                usable.iter().map(|p| p.name.clone().into()).collect();
            p.insert("enum".into(), names.into());
        }
    }
    if let Some(serde_json::Value::Object(p)) = props.get_mut("packages") {
        p.insert("maxItems".into(), MAX_PACKAGES.into());
    }
    if let Some(serde_json::Value::Object(p)) = props.get_mut("files") {
        p.insert("maxItems".into(), crate::files::MAX_FILES.into());
        p.insert("description".into(), crate::files::description().into());
    }
    for (name, max) in [("code", MAX_CODE_CHARS), ("stdin", MAX_STDIN_CHARS)] {
        if let Some(serde_json::Value::Object(p)) = props.get_mut(name) {
            p.insert("maxLength".into(), max.into());
        }
    }
}

/// The output's enums: `reason` and the items of `limits_hit`.
fn constrain_output(schema: &mut JsonObject) {
    let Some(serde_json::Value::Object(props)) = schema.get_mut("properties") else {
        return;
    };
    if let Some(serde_json::Value::Object(r)) = props.get_mut("reason") {
        r.insert("enum".into(), REASONS.to_vec().into());
    }
    if let Some(serde_json::Value::Object(items)) =
        props.get_mut("limits_hit").and_then(|l| l.get_mut("items"))
    {
        items.insert("enum".into(), LIMITS.to_vec().into());
    }
}

/// The Python version to name in the description: the default profile's, as the daemon
/// says it (protocol 4), or the one version all usable profiles share; `None` otherwise.
fn python_version(
    usable: &[&ProfileInfo],
    features: Option<&[ProfileFeatures]>,
    default_profile: &str,
) -> Option<String> {
    let features = features?;
    let of = |name: &str| (features.iter().find(|f| f.name == name)).and_then(|f| f.python.clone());
    if usable.iter().any(|p| p.name == default_profile) {
        return of(default_profile);
    }
    let mut versions = usable.iter().map(|p| of(&p.name));
    let first = versions.next()??;
    versions
        .all(|v| v.as_deref() == Some(&first))
        .then_some(first)
}

/// Usage examples in the input schema (JSON Schema `examples`): whole argument objects at
/// the root, and values for `code`. Registries and clients show them; each is a valid
/// call.
fn add_examples(input: &mut serde_json::Map<String, serde_json::Value>) {
    input.insert(
        "examples".into(),
        serde_json::json!([
            {"code": "print(6 * 7)"},
            {"code": "import statistics; print(statistics.mean([2, 4, 9]))", "timeout_seconds": 10},
            {"code": "x = 41", "session_id": crate::session::NEW},
        ]),
    );
    if let Some(serde_json::Value::Object(code)) = input
        .get_mut("properties")
        .and_then(|props| props.get_mut("code"))
    {
        code.insert(
            "examples".into(),
            serde_json::json!(["print(6 * 7)", "import sys; print(sys.version)"]),
        );
    }
}

/// The tool description: what the sandbox allows, then short examples. `python`: the
/// interpreter's version when known ("Python 3" otherwise).
pub fn description(
    usable: &[&ProfileInfo],
    default_profile: &str,
    budgets: Budgets,
    packages: &Packages,
    python: Option<&str>,
) -> String {
    let (packages_text, packages_example) = match &packages.on {
        Some(on) if on.is_empty() => (String::new(), ""),
        Some(on) if on.len() < usable.len() => (
            format!(
                " PyPI packages (wheels) can be named in `packages` on the profiles {} \
                 (installed once, then cached).",
                on.join(", ")
            ),
            "; {\"code\": \"import numpy; print(numpy.eye(2))\", \"packages\": [\"numpy\"]}",
        ),
        Some(_) => (
            " PyPI packages (wheels) can be named in `packages` (installed once, then cached)."
                .into(),
            "; {\"code\": \"import numpy; print(numpy.eye(2))\", \"packages\": [\"numpy\"]}",
        ),
        None => (
            " PyPI packages (wheels) can be named in `packages` when the daemon's profile allows \
             them (installed once, then cached)."
                .into(),
            "; {\"code\": \"import numpy; print(numpy.eye(2))\", \"packages\": [\"numpy\"]}",
        ),
    };
    let default = usable.iter().find(|p| p.name == default_profile);
    let network = match default {
        Some(p) if p.network => "network access",
        Some(_) => "no network",
        None => "no network unless the profile allows it",
    };
    let limits = match default {
        Some(p) => format!(
            "limits {} s wall, {} s CPU, {} memory, {} processes, {} per output stream",
            p.max.wall_ms / 1000,
            p.max.cpu_ms / 1000,
            format_bytes(p.max.memory_bytes),
            p.max.pids,
            format_bytes(p.max.output_bytes),
        ),
        None => "the daemon's profile limits on time, CPU, memory, processes and output".into(),
    };
    format!(
        "Run a Python {python} script in a fresh, disposable Linux sandbox and return its exit \
         code, stdout, stderr and resource use. Each call starts clean: {network}, no state \
         between calls unless it names a session, writable /work and /tmp only, no pip; \
         {limits}.{packages_text} Input files (text or base64) can be sent in `files`: they \
         are placed under /work, where the code opens them by their relative path. A Python \
         exception or a limit hit is reported as an error with the traceback or the reason. The result is JSON (exit_code, reason, stdout, stderr, \
         usage): structuredContent keeps up to {out} characters of each stream (head and \
         tail); the text content is the same JSON, led by \"error\" when the run failed, \
         with excerpts cut so that the whole text stays within {text} characters.\n\
         Files out: everything the code writes under /work/out (and matplotlib figures it \
         shows or leaves open) comes back. Images (PNG, JPEG, GIF, WebP by content) are \
         image content, each after a caption naming its path, downscaled to at most \
         {long_side} px and {mp} megapixels, at most {max_images} images and {image_kib} KiB \
         per result (the text says which were left out and why). Small text files are \
         inlined; every file is a resource link that resources/read serves (an hour by default; each result says) \
         from this server; structuredContent.artifacts lists each file (path, size, type, \
         sha256, URI, how it was shown) and what was skipped (links, FIFOs, devices, files \
         over the caps). The whole result stays under 1 MB.\n\
         Sessions, for multi-step work on the same data: `session_id: \"new\"` opens one \
         (variables, imports and files in /work persist between its cells), \
         `result.session.session_id` continues it, and each cell's last expression comes back \
         as `session.value` (as in a notebook). {lifetime}; its state is then lost and a call \
         naming it is an error that says so. A cell that times out or is cancelled is \
         interrupted and the state is kept. Close a session with close_session when done.\n\
         Examples: {{\"code\": \"print(sum(range(10)))\"}}; \
         {{\"code\": \"import sys; print(sys.stdin.read().upper())\", \"stdin\": \"hi\"}}; \
         {{\"code\": \"import time; time.sleep(5)\", \"timeout_seconds\": 2}}; \
         {{\"code\": \"import csv; print(list(csv.reader(open('in.csv'))))\", \"files\": \
         [{{\"path\": \"in.csv\", \"content\": \"a,b\\n1,2\\n\"}}]}}; \
         {{\"code\": \"data = list(range(10))\", \"session_id\": \"new\"}} then \
         {{\"code\": \"sum(data)\", \"session_id\": \"mcp_...\"}}{packages_example}",
        out = budgets.output_chars,
        text = budgets.text_chars,
        long_side = crate::images::DEFAULT_LONG_SIDE,
        mp = crate::images::DEFAULT_MAX_PIXELS as f64 / 1e6,
        max_images = crate::images::DEFAULT_MAX_IMAGES,
        image_kib = crate::images::DEFAULT_MAX_TOTAL_BYTES / 1024,
        lifetime = session_lifetime_text(),
        python = python.unwrap_or("3"),
    )
}

/// The structured result of a finished job, excerpting each stream within `budget` chars.
pub fn result_of(
    outcome: &Outcome,
    stdout: &[u8],
    stderr: &[u8],
    budget: usize,
    packages: Option<&vivarium_proto::PackagesReport>,
) -> RunPythonResult {
    result_with(
        outcome,
        (stdout, budget, 50),
        (stderr, budget, 50),
        packages,
    )
}

/// [`result_of`] with each stream's own budget and head share: `(bytes, chars, head %)`.
fn result_with(
    outcome: &Outcome,
    (stdout, out_chars, out_head): (&[u8], usize, usize),
    (stderr, err_chars, err_head): (&[u8], usize, usize),
    packages: Option<&vivarium_proto::PackagesReport>,
) -> RunPythonResult {
    RunPythonResult {
        exit_code: match outcome.exit {
            ExitStatus::Code(c) => Some(c),
            ExitStatus::Signal(_) | ExitStatus::NotStarted => None,
        },
        reason: reason_name(outcome.reason).into(),
        stdout: excerpt_weighted(stdout, out_chars, outcome.stdout_truncated, out_head),
        stderr: excerpt_weighted(stderr, err_chars, outcome.stderr_truncated, err_head),
        wall_ms: outcome.usage.wall_ms,
        cpu_ms: outcome.usage.cpu_ms,
        peak_memory_bytes: outcome.usage.peak_memory_bytes,
        limits_hit: outcome
            .limits_hit
            .iter()
            .map(|&l| limit_name(l))
            .map(String::from)
            .collect(),
        profile: outcome.profile.clone(),
        packages: packages.map(|p| PackagesResult {
            resolved: p.resolved.clone(),
            from_cache: p.from_cache,
        }),
        session: None,
        artifacts: None,
    }
}

/// What a result's text content holds: the structured result, led by `error` (why the
/// run failed) for a failed run, with excerpts short enough for the text budget.
#[derive(Serialize)]
struct TextResult<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(flatten)]
    result: &'a RunPythonResult,
}

/// The MCP result: success for a clean exit, `isError` otherwise. `structuredContent` is
/// the result with excerpts of `budgets.output_chars` per stream; the one text block is
/// the same result as JSON, led by `error` for a failure, with the excerpts cut so that the
/// whole text is at most `budgets.text_chars` characters (hosts that show the model only
/// the text, and cut long results, get valid JSON with each excerpt once).
pub fn call_result(
    outcome: &Outcome,
    stdout: &[u8],
    stderr: &[u8],
    budgets: Budgets,
    packages: Option<&vivarium_proto::PackagesReport>,
    output_cap: Option<u64>,
) -> CallToolResult {
    let result = result_of(outcome, stdout, stderr, budgets.output_chars, packages);
    let value = serde_json::to_value(&result).expect("the result serializes");
    let text = result_text(outcome, stdout, stderr, budgets, packages, output_cap);
    let mut call = if outcome.reason == Reason::Ok {
        CallToolResult::structured(value)
    } else {
        CallToolResult::structured_error(value)
    };
    call.content = vec![ContentBlock::text(text)];
    call
}

/// The text content of a finished job's result: at most `budgets.text_chars` characters
/// when that leaves room for the fields (it is at least 1,000), and no excerpt longer than
/// the structured one.
pub fn result_text(
    outcome: &Outcome,
    stdout: &[u8],
    stderr: &[u8],
    budgets: Budgets,
    packages: Option<&vivarium_proto::PackagesReport>,
    output_cap: Option<u64>,
) -> String {
    let budget = budgets.text_chars;
    let error = (outcome.reason != Reason::Ok).then(|| failure_reason(outcome, output_cap));
    // A failure's stderr ends with the traceback: give its tail three quarters.
    let err_head = if error.is_some() { 25 } else { 50 };
    fit_text(
        error.as_deref(),
        stdout,
        stderr,
        budgets,
        |out_chars, err_chars| {
            let mut result = result_with(
                outcome,
                (stdout, out_chars, 50),
                (stderr, err_chars, err_head),
                packages,
            );
            if let Some(p) = result.packages.as_mut() {
                shorten_list(&mut p.resolved, budget / 4);
            }
            result
        },
    )
}

/// The text content of a result: `render(out_chars, err_chars)` as JSON led by `error`,
/// with the two excerpts as long as `budgets.text_chars` allows (it is at least 1,000),
/// and neither longer than the structured one.
pub(crate) fn fit_text(
    error: Option<&str>,
    stdout: &[u8],
    stderr: &[u8],
    budgets: Budgets,
    render: impl Fn(usize, usize) -> RunPythonResult,
) -> String {
    let budget = budgets.text_chars;
    let render = |out_chars: usize, err_chars: usize| {
        let result = render(out_chars, err_chars);
        let text = TextResult {
            error,
            result: &result,
        };
        let json = serde_json::to_string(&text).expect("the result serializes");
        let chars = json.chars().count();
        (json, chars)
    };
    let (skeleton, fixed) = render(0, 0);
    let room = budget.saturating_sub(fixed);
    if room == 0 {
        return skeleton;
    }
    // Split the room: a stream that needs less than half leaves the rest to the other.
    let need =
        |bytes: &[u8]| (String::from_utf8_lossy(bytes).chars().count()).min(budgets.output_chars);
    let (out_need, err_need) = (need(stdout), need(stderr));
    let (mut out_chars, mut err_chars) = if out_need + err_need <= room {
        (out_need, err_need)
    } else if out_need <= room / 2 {
        (out_need, room - out_need)
    } else if err_need <= room / 2 {
        (room - err_need, err_need)
    } else {
        (room / 2, room - room / 2)
    };
    // JSON escapes (`\n`, `\"`, `\u0000`) make the text longer than its excerpts:
    // shrink both in proportion until it fits.
    for _ in 0..16 {
        let (json, chars) = render(out_chars, err_chars);
        if chars <= budget {
            return json;
        }
        let used = chars - fixed;
        let scale = |n: usize| (n as u128 * room as u128 / used as u128) as usize;
        out_chars = scale(out_chars).saturating_sub(8);
        err_chars = scale(err_chars).saturating_sub(8);
    }
    skeleton
}

/// Keep the items of `list` that fit in `max_chars`, then one saying how many were left.
fn shorten_list(list: &mut Vec<String>, max_chars: usize) {
    let mut used = 0;
    let keep = list
        .iter()
        .take_while(|item| {
            used += item.len() + 3;
            used <= max_chars
        })
        .count();
    if keep < list.len() {
        let left = list.len() - keep;
        list.truncate(keep);
        list.push(format!("... {left} more (see structuredContent)"));
    }
}

/// Why a job failed, in one line: the reason and the daemon's detail.
pub fn failure_reason(outcome: &Outcome, output_cap: Option<u64>) -> String {
    let usage = &outcome.usage;
    let why = match outcome.reason {
        Reason::Ok => "the script succeeded".to_string(),
        Reason::Error => match outcome.exit {
            ExitStatus::Code(c) => format!("the script exited with code {c}; see stderr"),
            _ => "the script failed".into(),
        },
        Reason::Timeout => format!(
            "killed: wall-clock limit reached after {} ms",
            usage.wall_ms
        ),
        Reason::CpuLimit => format!(
            "killed: CPU-time limit reached ({} ms of CPU)",
            usage.cpu_ms
        ),
        Reason::Oom => format!(
            "killed: out of memory (peak {})",
            format_bytes(usage.peak_memory_bytes)
        ),
        Reason::Pids => "the process limit refused a fork and the script failed".into(),
        Reason::OutputLimit => output_limit_reason(outcome, output_cap),
        Reason::Signal => match outcome.exit {
            ExitStatus::Signal(s) => format!("killed by signal {s}"),
            _ => "killed by a signal".into(),
        },
        Reason::Seccomp => "killed: the script made a system call the sandbox forbids".into(),
        // This server returns before any outcome when its own client cancels or goes
        // away, so a cancelled outcome here is the daemon's: it stopped (shutdown or
        // restart) and killed the job past its grace period.
        Reason::Cancelled => "killed: the Vivarium daemon stopped (shut down or restarted) \
                              while the job ran, so the job did not run to its end; retry once \
                              the daemon is back"
            .into(),
        Reason::SandboxError => "the sandbox could not be built; the code never ran".into(),
    };
    if outcome.detail.is_empty() {
        why
    } else {
        format!("{why} ({})", outcome.detail)
    }
}

/// Which stream went over the sandbox's output cap, and the cap (the profile's
/// `output_bytes`) when the daemon's profile list gave it.
fn output_limit_reason(outcome: &Outcome, cap: Option<u64>) -> String {
    use vivarium_proto::LimitKind;
    let streams: Vec<&str> = [
        (LimitKind::Stdout, outcome.stdout_truncated, "stdout"),
        (LimitKind::Stderr, outcome.stderr_truncated, "stderr"),
    ]
    .into_iter()
    .filter(|(kind, truncated, _)| *truncated || outcome.limits_hit.contains(kind))
    .map(|(_, _, name)| name)
    .collect();
    let streams = match streams.len() {
        0 => "an output stream".to_string(),
        _ => streams.join(" and "),
    };
    let cap = match cap {
        Some(b) => format!(
            "the cap of {} ({b} bytes) per output stream of profile `{}`",
            format_bytes(b),
            outcome.profile
        ),
        None => format!("the per-stream output cap of profile `{}`", outcome.profile),
    };
    format!(
        "killed: {streams} went over {cap}; print less, or write large results to a file \
         and print a summary"
    )
}

/// A tool error's text, cut to `budget` characters (head and tail) when longer.
pub fn error_text(text: String, budget: usize) -> String {
    if text.chars().count() <= budget {
        return text;
    }
    excerpt_weighted(text.as_bytes(), budget, false, 50).text
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::{Isolation, MaxLimits, Usage};

    fn outcome(reason: Reason, exit: ExitStatus) -> Outcome {
        Outcome {
            job_id: 7,
            profile: "default".into(),
            reason,
            exit,
            limits_hit: vec![],
            usage: Usage {
                wall_ms: 12,
                cpu_ms: 10,
                peak_memory_bytes: 8 << 20,
                stdout_bytes: 2,
                stderr_bytes: 0,
            },
            stdout_truncated: false,
            stderr_truncated: false,
            isolation: Isolation::default(),
            detail: String::new(),
        }
    }

    fn profile(name: &str, network: bool) -> ProfileInfo {
        ProfileInfo {
            name: name.into(),
            description: format!("{name} profile"),
            disabled: None,
            network,
            max: MaxLimits {
                wall_ms: 30_000,
                cpu_ms: 30_000,
                memory_bytes: 512 << 20,
                pids: 64,
                output_bytes: 1 << 20,
            },
            not_enforced: vec![],
        }
    }

    #[test]
    fn args_parse_and_reject() {
        let ok = parse_args(Some(
            serde_json::json!({"code": "print(1)", "timeout_seconds": 1.5})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .unwrap();
        assert_eq!(ok.code, "print(1)");
        assert_eq!(ok.timeout_seconds, Some(1.5));
        assert_eq!(timeout_ms(1.5), 1_500);
        assert_eq!(timeout_ms(0.0001), 1);
        let missing = parse_args(None).unwrap_err();
        assert!(missing.contains("missing field `code`"), "{missing}");
        let unknown = parse_args(Some(
            serde_json::json!({"code": "1", "cmd": "x"})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .unwrap_err();
        assert!(unknown.contains("unknown field `cmd`"), "{unknown}");
        let negative = parse_args(Some(
            serde_json::json!({"code": "1", "timeout_seconds": -1})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .unwrap_err();
        assert!(negative.contains("greater than 0"), "{negative}");
    }

    #[test]
    fn tool_metadata() {
        let profiles = [profile("default", false), profile("net", true)];
        let t = tool(Some(&profiles[..1]), None, "default", Budgets::default());
        let a = t.annotations.clone().unwrap();
        assert_eq!(a.read_only_hint, Some(false));
        assert_eq!(a.destructive_hint, Some(false));
        assert_eq!(a.idempotent_hint, Some(false));
        assert_eq!(a.open_world_hint, Some(false));
        let d = t.description.clone().unwrap();
        assert!(
            d.contains("no network")
                && d.contains("Python 3 script")
                && d.contains("30 s wall")
                && d.contains("within 8000 characters"),
            "{d}"
        );
        let schema = serde_json::Value::Object((*t.input_schema).clone());
        assert_eq!(schema["required"], serde_json::json!(["code"]));
        for p in ["code", "stdin", "timeout_seconds", "profile"] {
            assert!(
                schema["properties"][p]["description"].is_string(),
                "{p}: {schema}"
            );
        }
        assert!(schema["properties"]["timeout_seconds"]["description"]
            .as_str()
            .unwrap()
            .contains("(30 s for `default`)"));
        assert!(schema["properties"]["profile"]["description"]
            .as_str()
            .unwrap()
            .contains("`default` (default profile)"));
        let out = serde_json::Value::Object((*t.output_schema.clone().unwrap()).clone());
        assert_eq!(out["type"], "object");
        // A profile with network makes the tool open-world.
        let t = tool(Some(&profiles), None, "default", Budgets::default());
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(true));
        // Unknown profiles: still closed-world, generic text.
        let t = tool(None, None, "default", Budgets::default());
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(false));
    }

    #[test]
    fn timeout_above_the_profile_limit_is_refused_in_seconds() {
        let profiles = [profile("default", false)];
        assert!(check_timeout(Some(30.0), "default", Some(&profiles)).is_ok());
        assert!(check_timeout(Some(99.0), "other", Some(&profiles)).is_ok());
        assert!(check_timeout(Some(99.0), "default", None).is_ok());
        let e = check_timeout(Some(30.5), "default", Some(&profiles)).unwrap_err();
        assert!(e.contains("30.5 s exceeds") && e.contains("(30 s)"), "{e}");
    }

    #[test]
    fn ok_result_is_structured() {
        let r = call_result(
            &outcome(Reason::Ok, ExitStatus::Code(0)),
            b"1\n",
            b"",
            Budgets::default(),
            None,
            None,
        );
        assert_eq!(r.is_error, Some(false));
        let s = r.structured_content.unwrap();
        assert_eq!(s["exit_code"], 0);
        assert_eq!(s["reason"], "ok");
        assert_eq!(s["stdout"]["text"], "1\n");
        assert_eq!(s["stdout"]["total_lines"], 1);
    }

    #[test]
    fn exception_is_an_error_with_the_traceback() {
        let stderr = b"noise\nTraceback (most recent call last):\n  File \"<x>\", line 1\nZeroDivisionError: division by zero\n";
        let r = call_result(
            &outcome(Reason::Error, ExitStatus::Code(1)),
            b"",
            stderr,
            Budgets::default(),
            None,
            None,
        );
        assert_eq!(r.is_error, Some(true));
        assert!(r.structured_content.is_some());
        let text = r.content[0].as_text().unwrap().text.clone();
        let json: serde_json::Value = serde_json::from_str(&text).expect("the text is JSON");
        assert!(
            text.starts_with(r#"{"error":"the script exited with code 1"#),
            "{text}"
        );
        assert!(
            json["stderr"]["text"]
                .as_str()
                .unwrap()
                .contains("ZeroDivisionError"),
            "{text}"
        );
    }

    #[test]
    fn timeout_is_an_error_with_the_reason() {
        let mut o = outcome(Reason::Timeout, ExitStatus::Signal(9));
        o.limits_hit = vec![vivarium_proto::LimitKind::Wall];
        let r = call_result(&o, b"", b"", Budgets::default(), None, None);
        assert_eq!(r.is_error, Some(true));
        let s = r.structured_content.clone().unwrap();
        assert_eq!(s["exit_code"], serde_json::Value::Null);
        assert_eq!(s["limits_hit"], serde_json::json!(["wall"]));
        assert!(r.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("wall-clock limit"));
    }

    fn text_of(r: &CallToolResult) -> String {
        r.content
            .iter()
            .map(|c| c.as_text().expect("text content").text.clone())
            .collect()
    }

    /// Every result's text fits its budget, is one JSON object, and holds each excerpt
    /// once; structuredContent keeps the longer excerpts.
    #[test]
    fn text_fits_the_budget_as_json_with_each_excerpt_once() {
        let mb = |c: &str| c.repeat(1 << 20);
        let quoted: String = "\"q\"\n".repeat(300_000);
        let control = "\u{1}".repeat(1 << 20);
        let lines: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
        let traceback = format!(
            "{}Traceback (most recent call last):\n  File \"<x>\", line 1\nValueError: bad\n",
            "warning: noise\n".repeat(50_000)
        );
        let cases: Vec<(Reason, String, String)> = vec![
            (Reason::Error, mb("o"), mb("e")),
            (Reason::Error, lines.clone(), traceback.clone()),
            (Reason::Ok, mb("x"), String::new()),
            (Reason::Ok, quoted.clone(), quoted),
            (Reason::OutputLimit, control.clone(), control),
            (Reason::Ok, "1\n".into(), String::new()),
            (Reason::Timeout, String::new(), String::new()),
        ];
        for (reason, out, err) in cases {
            let exit = if reason == Reason::Ok {
                ExitStatus::Code(0)
            } else {
                ExitStatus::Code(1)
            };
            for text_chars in [1_000, 4_000, DEFAULT_TEXT_CHARS, 9_999] {
                let budgets = Budgets {
                    output_chars: 8_000,
                    text_chars,
                };
                let r = call_result(
                    &outcome(reason, exit),
                    out.as_bytes(),
                    err.as_bytes(),
                    budgets,
                    None,
                    None,
                );
                assert_eq!(r.content.len(), 1, "one text block");
                let text = text_of(&r);
                let chars = text.chars().count();
                assert!(chars <= text_chars, "{reason:?}: {chars} > {text_chars}");
                let json: serde_json::Value =
                    serde_json::from_str(&text).expect("the text is valid JSON");
                assert_eq!(json.get("error").is_some(), reason != Reason::Ok, "{text}");
                let s = r.structured_content.clone().unwrap();
                for stream in ["stdout", "stderr"] {
                    let excerpt = json[stream]["text"].as_str().unwrap();
                    assert_eq!(json[stream]["total_bytes"], s[stream]["total_bytes"]);
                    // The text's excerpt appears once and is no longer than the structured one.
                    assert!(
                        excerpt.chars().count()
                            <= s[stream]["text"].as_str().unwrap().chars().count()
                    );
                }
                // The room is used: a large budget shows more than a marker.
                if out.len() > 100_000 && text_chars >= 4_000 {
                    assert!(
                        chars > text_chars * 3 / 4,
                        "{chars} of {text_chars}: {text}"
                    );
                }
            }
        }
        // Each end of each stream appears once in the text.
        let out = format!("OUT-HEAD\n{}OUT-TAIL\n", "o\n".repeat(1 << 19));
        let err = format!("ERR-HEAD\n{}ERR-TAIL\n", "e\n".repeat(1 << 19));
        let r = call_result(
            &outcome(Reason::Error, ExitStatus::Code(1)),
            out.as_bytes(),
            err.as_bytes(),
            Budgets::default(),
            None,
            None,
        );
        let text = text_of(&r);
        for sentinel in ["OUT-HEAD", "OUT-TAIL", "ERR-HEAD", "ERR-TAIL"] {
            assert_eq!(text.matches(sentinel).count(), 1, "{sentinel}: {text}");
        }
        // A failure with a traceback keeps the traceback's end in the text.
        let r = call_result(
            &outcome(Reason::Error, ExitStatus::Code(1)),
            lines.as_bytes(),
            traceback.as_bytes(),
            Budgets::default(),
            None,
            None,
        );
        let json: serde_json::Value = serde_json::from_str(&text_of(&r)).unwrap();
        let err = json["stderr"]["text"].as_str().unwrap();
        assert!(err.ends_with("ValueError: bad\n"), "{err}");
        assert!(json["stdout"]["text"]
            .as_str()
            .unwrap()
            .starts_with("line 0\n"));
    }

    /// Collect every `format` and every type array in a schema.
    fn formats_and_type_arrays(v: &serde_json::Value, found: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    if k == "format" || (k == "type" && v.is_array()) {
                        found.push(format!("{k}: {v}"));
                    }
                    formats_and_type_arrays(v, found);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| formats_and_type_arrays(v, found)),
            _ => {}
        }
    }

    #[test]
    fn schemas_are_portable_and_constrained() {
        let mut long = profile("long", false);
        long.max.wall_ms = 120_000;
        let mut off = profile("off", false);
        off.disabled = Some("no cgroups".into());
        let profiles = [profile("default", false), long, off];
        let t = tool(Some(&profiles), None, "default", Budgets::default());
        let input = serde_json::Value::Object((*t.input_schema).clone());
        let output = serde_json::Value::Object((*t.output_schema.clone().unwrap()).clone());
        let mut found = vec![];
        formats_and_type_arrays(&input, &mut found);
        assert_eq!(found, Vec::<String>::new(), "input: {input}");
        for schema in [&input, &output] {
            assert!(
                !schema.to_string().contains("\\n"),
                "a hard line break: {schema}"
            );
        }
        // The output keeps null where a field is null (exit_code), but no odd formats.
        let mut found = vec![];
        formats_and_type_arrays(&output, &mut found);
        assert!(found.iter().all(|f| !f.starts_with("format")), "{found:?}");
        let props = &input["properties"];
        assert_eq!(props["stdin"]["type"], "string");
        assert!(props["stdin"].get("default").is_none(), "{props}");
        // Usage examples: each a whole call that the server accepts.
        let examples = input["examples"].as_array().expect("examples");
        assert!(examples.len() >= 2);
        for example in examples {
            let args = example.as_object().unwrap().clone();
            assert!(args.keys().all(|k| props.get(k).is_some()), "{example}");
            assert!(parse_args(Some(args)).is_ok(), "{example}");
        }
        assert!(props["code"]["examples"]
            .as_array()
            .is_some_and(|e| !e.is_empty()));
        assert_eq!(props["packages"]["type"], "array");
        assert_eq!(props["packages"]["items"]["type"], "string");
        assert_eq!(props["packages"]["maxItems"], MAX_PACKAGES);
        assert_eq!(props["code"]["maxLength"], MAX_CODE_CHARS);
        assert_eq!(props["stdin"]["maxLength"], MAX_STDIN_CHARS);
        assert_eq!(props["timeout_seconds"]["type"], "number");
        assert_eq!(props["timeout_seconds"]["exclusiveMinimum"], 0);
        assert_eq!(props["timeout_seconds"]["maximum"], 120.0);
        assert_eq!(
            props["profile"]["enum"],
            serde_json::json!(["default", "long"])
        );
        let out = &output["properties"];
        assert_eq!(out["reason"]["enum"], serde_json::json!(REASONS));
        assert_eq!(
            out["limits_hit"]["items"]["enum"],
            serde_json::json!(LIMITS)
        );
        assert_eq!(out["wall_ms"]["minimum"], 0);
        // Every reason and limit name is in its enum.
        use vivarium_proto::LimitKind as L;
        for r in [
            Reason::Ok,
            Reason::Error,
            Reason::Timeout,
            Reason::CpuLimit,
            Reason::Oom,
            Reason::Pids,
            Reason::OutputLimit,
            Reason::Signal,
            Reason::Seccomp,
            Reason::Cancelled,
            Reason::SandboxError,
        ] {
            assert!(REASONS.contains(&reason_name(r)));
        }
        for l in [
            L::Wall,
            L::Cpu,
            L::Memory,
            L::Pids,
            L::Stdout,
            L::Stderr,
            L::Disk,
        ] {
            assert!(LIMITS.contains(&limit_name(l)));
        }
        // Without a daemon: no enum, no maximum, but still the positive bound.
        let t = tool(None, None, "default", Budgets::default());
        let props = serde_json::Value::Object((*t.input_schema).clone())["properties"].clone();
        assert!(props["profile"].get("enum").is_none());
        assert!(props["timeout_seconds"].get("maximum").is_none());
        let d = props["profile"]["description"].as_str().unwrap();
        assert!(
            !d.contains("tool description") && d.contains("once it answers"),
            "{d}"
        );
        assert_eq!(props["timeout_seconds"]["exclusiveMinimum"], 0);
        // Too many packages is a tool error naming the bound.
        let many: Vec<String> = (0..65).map(|i| format!("p{i}")).collect();
        let e = parse_args(Some(
            serde_json::json!({"code": "1", "packages": many})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .unwrap_err();
        assert!(e.contains("at most 64"), "{e}");
        // Code and stdin over their maxLength: a tool error, far below the line limit.
        for (name, max) in [("code", MAX_CODE_CHARS), ("stdin", MAX_STDIN_CHARS)] {
            let mut args = serde_json::json!({"code": "1"});
            args[name] = "x".repeat(max + 1).into();
            let e = parse_args(Some(args.as_object().unwrap().clone())).unwrap_err();
            assert!(
                e.contains(&format!(
                    "`{name}` has {} characters; at most {max}",
                    max + 1
                )),
                "{e}"
            );
            args[name] = "x".repeat(max).into();
            assert!(parse_args(Some(args.as_object().unwrap().clone())).is_ok());
        }
    }

    #[test]
    fn output_limit_names_the_stream_and_the_cap() {
        let mut o = outcome(Reason::OutputLimit, ExitStatus::Signal(9));
        o.limits_hit = vec![vivarium_proto::LimitKind::Stdout];
        o.stdout_truncated = true;
        o.usage.stdout_bytes = 1_142_784;
        let why = failure_reason(&o, Some(1 << 20));
        assert!(
            why.contains(
                "stdout went over the cap of 1M (1048576 bytes) per output stream of profile `default`"
            ),
            "{why}"
        );
        assert!(!why.contains("stderr"), "{why}");
        o.limits_hit = vec![vivarium_proto::LimitKind::Stderr];
        o.stdout_truncated = false;
        o.stderr_truncated = true;
        let why = failure_reason(&o, None);
        assert!(
            why.contains("stderr went over the per-stream output cap of profile `default`"),
            "{why}"
        );
    }

    #[test]
    fn type_errors_use_the_schemas_words() {
        let err =
            |v: serde_json::Value| parse_args(Some(v.as_object().unwrap().clone())).unwrap_err();
        for (args, needle) in [
            (
                serde_json::json!({"code": 5}),
                "`code` must be a string of Python source, got a number",
            ),
            (
                serde_json::json!({"code": "1", "timeout_seconds": "2"}),
                "`timeout_seconds` must be a number of seconds greater than 0, got a string",
            ),
            (
                serde_json::json!({"code": "1", "timeout_seconds": 0}),
                "`timeout_seconds` must be a number of seconds greater than 0, got 0",
            ),
            (
                serde_json::json!({"code": "1", "packages": "numpy"}),
                "`packages` must be an array of strings (PEP 508 requirements), got a string",
            ),
            (
                serde_json::json!({"code": "1", "packages": ["a", 1]}),
                "got an array with a number in it",
            ),
            (
                serde_json::json!({"code": "1", "stdin": true}),
                "`stdin` must be a string, got a boolean",
            ),
            (
                serde_json::json!({"code": null}),
                "`code` must be a string of Python source, got null",
            ),
            (
                serde_json::json!({"code": "1", "cmd": 1}),
                "unknown field `cmd`; the parameters are `code`",
            ),
            (serde_json::json!({}), "missing field `code`"),
        ] {
            let e = err(args.clone());
            assert!(e.contains(needle), "{args}: {e}");
            for rust in ["f64", "u64", "i32", "Vec", "Option", "sequence"] {
                assert!(!e.contains(rust), "{args}: {e}");
            }
        }
        // Null optional parameters count as omitted.
        let ok = parse_args(Some(
            serde_json::json!({"code": "1", "stdin": null, "packages": null, "timeout_seconds": null})
                .as_object()
                .unwrap()
                .clone(),
        ))
        .unwrap();
        assert_eq!(ok.stdin, None);
    }

    /// `files`: text and base64 decoded by parse_args, every malformed item a tool error
    /// naming it in the schema's words, and the parameter described with its caps.
    #[test]
    fn files_are_parsed_checked_and_described() {
        let args = |v: serde_json::Value| parse_args(v.as_object().cloned());
        let ok = args(serde_json::json!({
            "code": "1",
            "files": [
                {"path": "data/sales.csv", "content": "a,b\n1,2\n"},
                {"path": "x.bin", "content": "AP8=", "encoding": "base64"},
                {"path": "t.txt", "content": "é", "encoding": "text"},
                {"path": "n.txt", "content": "", "encoding": null},
            ]
        }))
        .unwrap();
        assert_eq!(ok.files, None, "parse_args takes the raw files");
        let got: Vec<(&str, &[u8])> = ok
            .input_files
            .iter()
            .map(|f| (f.path.as_str(), f.data.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                ("data/sales.csv", &b"a,b\n1,2\n"[..]),
                ("x.bin", &[0, 255][..]),
                ("t.txt", "é".as_bytes()),
                ("n.txt", &b""[..]),
            ]
        );
        assert!(args(serde_json::json!({"code": "1", "files": null}))
            .unwrap()
            .input_files
            .is_empty());
        // A session's cell may carry files, and main.py is then an ordinary name.
        let cell = args(serde_json::json!({"code": "1", "session_id": "new",
            "files": [{"path": "main.py", "content": "x"}]}))
        .unwrap();
        assert_eq!(cell.input_files.len(), 1);
        for (files, needle) in [
            (
                serde_json::json!("a.csv"),
                "`files` must be an array of objects {\"path\"",
            ),
            (
                serde_json::json!(["a.csv"]),
                "`files[0]` must be an object with `path` (a string), `content` (a string)",
            ),
            (
                serde_json::json!([{"path": "a"}]),
                "`files[0]` (\"a\") has no `content`",
            ),
            (
                serde_json::json!([{"content": "x"}]),
                "`files[0]` has no `path`",
            ),
            (
                serde_json::json!([{"path": 1, "content": "x"}]),
                "`files[0]`: `path` must be a string, got a number",
            ),
            (
                serde_json::json!([{"path": "a", "content": "x", "mode": 420}]),
                "unknown field `mode` (files are always mode 0644)",
            ),
            (
                serde_json::json!([{"path": "a", "content": "x", "encoding": "utf8"}]),
                "`files[0]` (\"a\"): `encoding` must be \"text\" or \"base64\", got \"utf8\"",
            ),
            (
                serde_json::json!([{"path": "a", "content": "x"}, {"path": "b", "content": "%%", "encoding": "base64"}]),
                "files[1] (\"b\"): `content` is not valid base64",
            ),
            (
                serde_json::json!([{"path": "../a", "content": "x"}]),
                "input file \"../a\": the path has a `.` or `..` component",
            ),
            (
                serde_json::json!([{"path": "a", "content": "x"}, {"path": "a", "content": "y"}]),
                "input file \"a\" is given twice",
            ),
            (
                serde_json::json!([{"path": "main.py", "content": "x"}]),
                "/work/main.py is the script itself",
            ),
        ] {
            let e = args(serde_json::json!({"code": "1", "files": files.clone()})).unwrap_err();
            assert!(
                e.starts_with("invalid arguments for run_python: ") && e.contains(needle),
                "{files}: {e}"
            );
            for rust in ["Vec", "FileArg", "Encoding", "sequence", "struct"] {
                assert!(!e.contains(rust), "{files}: {e}");
            }
        }
        let e =
            args(serde_json::json!({"code": "1", "files": [{"path": "/etc/x", "content": ""}]}))
                .unwrap_err();
        assert!(e.ends_with("Nothing ran."), "{e}");
        // Described, bounded, inline (no $ref), and named in the tool description.
        let t = tool(
            Some(&[profile("default", false)]),
            None,
            "default",
            Budgets::default(),
        );
        let input = serde_json::Value::Object((*t.input_schema).clone());
        let p = &input["properties"]["files"];
        assert_eq!(p["type"], "array");
        assert_eq!(p["maxItems"], crate::files::MAX_FILES);
        assert_eq!(
            p["items"]["required"],
            serde_json::json!(["path", "content"])
        );
        assert_eq!(
            p["items"]["properties"]["encoding"]["enum"],
            serde_json::json!(["text", "base64"])
        );
        assert!(!input.to_string().contains("$ref"), "{input}");
        let d = p["description"].as_str().unwrap();
        assert!(
            d.contains("relative to /work") && d.contains("16 MiB per file"),
            "{d}"
        );
        assert_eq!(input["required"], serde_json::json!(["code"]));
        let desc = t.description.unwrap();
        assert!(
            desc.contains("`files`") && desc.contains("\"files\": [{\"path\": \"in.csv\""),
            "{desc}"
        );
    }

    #[test]
    fn a_daemon_shutdown_is_not_a_users_cancel() {
        let o = outcome(Reason::Cancelled, ExitStatus::Signal(9));
        let why = failure_reason(&o, None);
        assert!(why.contains("the Vivarium daemon stopped"), "{why}");
        assert!(why.contains("did not run to its end"), "{why}");
        assert!(!why.starts_with("cancelled"), "{why}");
    }

    fn features(name: &str, unavailable: Option<&str>, from_index: bool) -> ProfileFeatures {
        ProfileFeatures {
            name: name.into(),
            packages_unavailable: unavailable.map(String::from),
            packages_from_index: from_index,
            python: None,
        }
    }

    /// The description names the interpreter's version the daemon reports, and says
    /// "Python 3" without one (an older daemon, or a name that does not say).
    #[test]
    fn the_description_names_the_profiles_python() {
        let profiles = [profile("default", false), profile("other", false)];
        let with = |d: Option<&str>, o: Option<&str>| {
            let mut f = vec![
                features("default", None, false),
                features("other", None, false),
            ];
            f[0].python = d.map(String::from);
            f[1].python = o.map(String::from);
            let t = tool(Some(&profiles), Some(&f), "default", Budgets::default());
            t.description.unwrap().to_string()
        };
        assert!(with(Some("3.12"), Some("3.11")).contains("Run a Python 3.12 script"));
        assert!(with(None, Some("3.11")).contains("Run a Python 3 script"));
        let old = tool(Some(&profiles), None, "default", Budgets::default());
        assert!(old.description.unwrap().contains("Run a Python 3 script"));
        let f = [features("a", None, false)];
        let mut g = f.to_vec();
        g[0].python = Some("3.13".into());
        let only = [profile("a", false)];
        let t = tool(Some(&only), Some(&g), "default", Budgets::default());
        assert!(t.description.unwrap().contains("Run a Python 3.13 script"));
    }

    /// `packages` is advertised exactly where the daemon says it works.
    #[test]
    fn packages_are_advertised_where_they_work() {
        let profiles = [profile("default", false), profile("wheels", false)];
        let props =
            |t: &Tool| serde_json::Value::Object((*t.input_schema).clone())["properties"].clone();
        // Nowhere (no uv): no parameter, no sentence, no numpy example, closed world.
        let none = [
            features("default", Some("no uv is configured"), false),
            features("wheels", Some("no uv is configured"), false),
        ];
        let t = tool(Some(&profiles), Some(&none), "default", Budgets::default());
        assert!(props(&t).get("packages").is_none(), "{}", props(&t));
        let d = t.description.clone().unwrap();
        assert!(!d.contains("packages") && !d.contains("numpy"), "{d}");
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(false));
        // On one profile, from a wheelhouse: named, still closed world.
        let some = [
            features(
                "default",
                Some("profile \"default\" does not allow packages"),
                false,
            ),
            features("wheels", None, false),
        ];
        let t = tool(Some(&profiles), Some(&some), "default", Budgets::default());
        let p = props(&t)["packages"]["description"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(p.contains("Only on the profiles `wheels`."), "{p}");
        assert!(t
            .description
            .clone()
            .unwrap()
            .contains("on the profiles `wheels`"));
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(false));
        // From an index: the installs reach the network, so the tool is open-world.
        let index = [
            features("default", None, true),
            features("wheels", None, false),
        ];
        let t = tool(Some(&profiles), Some(&index), "default", Budgets::default());
        assert!(props(&t)["packages"].is_object());
        assert!(t.description.clone().unwrap().contains("numpy"));
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(true));
        // An older daemon (no features): advertised as before, closed world.
        let t = tool(Some(&profiles), None, "default", Budgets::default());
        assert!(props(&t)["packages"].is_object());
        assert_eq!(t.annotations.unwrap().open_world_hint, Some(false));
    }

    /// `session_id` is optional and described with the lifetime; a stateless result is
    /// exactly as before (no `session` key), and the output schema does not require one.
    #[test]
    fn session_id_is_an_optional_described_argument() {
        let args = |v: serde_json::Value| parse_args(v.as_object().cloned());
        assert_eq!(
            args(serde_json::json!({"code": "1"})).unwrap().session(),
            None
        );
        assert_eq!(
            args(serde_json::json!({"code": "1", "session_id": "new", "packages": ["numpy"]}))
                .unwrap()
                .session(),
            Some(SessionArg::New)
        );
        let alias = "mcp_00112233445566778899aabbccddeeff";
        assert_eq!(
            args(serde_json::json!({"code": "1", "session_id": alias}))
                .unwrap()
                .session(),
            Some(SessionArg::Alias(alias.into()))
        );
        for (bad, needle) in [
            (
                serde_json::json!({"code": "1", "session_id": "yes"}),
                "`session_id` must be \"new\"",
            ),
            (
                serde_json::json!({"code": "1", "session_id": 7}),
                "`session_id` must be a string: \"new\", or the session_id of an earlier result, got a number",
            ),
            (
                serde_json::json!({"code": "1", "session_id": alias, "packages": ["numpy"]}),
                "`packages` can only be given with `session_id: \"new\"`",
            ),
        ] {
            let e = args(bad.clone()).unwrap_err();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        let t = tool(
            Some(&[profile("default", false)]),
            None,
            "default",
            Budgets::default(),
        );
        let input = serde_json::Value::Object((*t.input_schema).clone());
        let p = &input["properties"]["session_id"];
        assert_eq!(p["type"], "string");
        assert_eq!(p["examples"][0], "new");
        let d = p["description"].as_str().unwrap();
        assert!(
            d.contains("10 minutes without a call") && d.contains("1 hour after it opened"),
            "{d}"
        );
        assert!(
            d.contains("state is then lost") && d.contains("expired"),
            "{d}"
        );
        assert_eq!(input["required"], serde_json::json!(["code"]));
        let desc = t.description.clone().unwrap();
        assert!(
            desc.contains("`session_id: \"new\"` opens one")
                && desc.contains("10 minutes")
                && desc.contains("close_session"),
            "{desc}"
        );
        let output = serde_json::Value::Object((*t.output_schema.clone().unwrap()).clone());
        let required: Vec<String> =
            serde_json::from_value(output["required"].clone()).unwrap_or_default();
        assert!(!required.contains(&"session".to_string()), "{output}");
        assert!(output["properties"]["session"].is_object(), "{output}");
        // A stateless result has no `session` key, in structuredContent or in the text.
        let r = call_result(
            &outcome(Reason::Ok, ExitStatus::Code(0)),
            b"1\n",
            b"",
            Budgets::default(),
            None,
            None,
        );
        assert!(r
            .structured_content
            .as_ref()
            .unwrap()
            .get("session")
            .is_none());
        assert!(!text_of(&r).contains("session"));
        for r in ["interrupted", "memory_guard", "session_ended"] {
            assert!(REASONS.contains(&r));
        }
        for s in [
            crate::cell::cell_reason(&vivarium_client::CellStatus::Ok),
            crate::cell::cell_reason(&vivarium_client::CellStatus::Interrupted),
            crate::cell::cell_reason(&vivarium_client::CellStatus::MemoryGuard),
            crate::cell::cell_reason(&vivarium_client::CellStatus::Timeout),
        ] {
            assert!(REASONS.contains(&s), "{s}");
        }
    }
}
