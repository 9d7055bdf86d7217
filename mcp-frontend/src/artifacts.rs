//! The artifacts of a job or cell (protocol 8: the files it left under `/work/out`, its
//! captured matplotlib figures) in its MCP result.
//!
//! What a result carries, all within budgets:
//!
//! - images (`image/png`, `image/jpeg`, `image/gif`, `image/webp` by the daemon's sniffed
//!   media type, never the name) as MCP image content, fitted by [`crate::images`] (long
//!   side at most 1568 px, 1.15 megapixels, at most 8 images and 600 KiB of image bytes
//!   per result), each after a short text caption naming its path (and its original size
//!   when it was downscaled);
//! - small UTF-8 text artifacts inlined as text, within the text budget;
//! - resource links (at most [`MAX_LINKS`], within the text budget) to every artifact
//!   kept in this instance's [`ArtifactStore`], which `resources/read` serves for its TTL;
//! - one text note that says, briefly, what was returned, shown, left out and why,
//!   skipped (links, FIFOs, devices, files over the caps) and not listed;
//! - `structuredContent.artifacts` ([`ArtifactsResult`]): every artifact (path, size,
//!   media type, sha256, URI, how it is shown), the skipped entries and the report's
//!   flags, the lists bounded (about [`LISTED_BYTES`]) with counts of the rest.
//!
//! All text blocks together (the result's JSON text included) stay within the text budget
//! (`--text-chars`): the artifacts take at most a quarter of it, and the JSON text the
//! rest. The whole result, serialized, stays under [`MAX_RESULT_BYTES`]: past it images
//! are dropped from the end (each caption then says so), then the listings are cut.
//!
//! Everything here comes from the sandbox: paths are only shown (control characters
//! replaced, long ones cut) and put in URIs percent-encoded; image bytes go through
//! images.rs's hard limits.

use std::sync::Arc;

use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, Resource};
use rmcp::schemars::JsonSchema;
use serde::Serialize;
use vivarium_client::Artifact;
use vivarium_proto::{ArtifactsReport, ArtifactsStatus};

use crate::images::{self, ImageBudget, LeftOutReason};
use crate::principal::PrincipalKey;
use crate::resources::{self, ArtifactStore};

/// Bytes of a whole result (its JSON) at most: under the 1,048,576 characters Claude
/// Desktop accepts of a tool result, with room for the JSON-RPC envelope.
pub const MAX_RESULT_BYTES: usize = 1_000_000;

/// Resource links in one result at most (the rest have their URI in
/// `structuredContent`): Claude Code turns each into a line of text.
pub const MAX_LINKS: usize = 16;

/// Bytes of a text artifact that may be inlined.
pub const INLINE_MAX_BYTES: usize = 2_000;

/// About how many bytes of JSON `structuredContent.artifacts` lists (files and skipped
/// entries); the rest are counted (`files_not_listed`, `skipped_not_listed`).
pub const LISTED_BYTES: usize = 64 * 1024;

/// Characters of a path in the text (the structured listing has it whole).
const SHOWN_PATH_CHARS: usize = 120;

/// The image media types shown as images.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What the daemon sent before the outcome.
#[derive(Debug, Default)]
pub struct Collected {
    pub artifacts: Vec<Artifact>,
    pub report: Option<ArtifactsReport>,
}

/// `structuredContent.artifacts`: what the job or cell returned as files.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ArtifactsResult {
    /// `collected`, `not_requested`, `not_collected` (the job was killed or its sandbox
    /// failed before collection; see `detail`), or `unreported` (the daemon sent no
    /// report).
    pub status: String,
    /// Why the artifacts were not collected, when they were not.
    pub detail: Option<String>,
    /// Files returned, and their bytes.
    pub returned: u64,
    pub returned_bytes: u64,
    /// The files returned, in path order.
    pub files: Vec<ArtifactEntry>,
    /// Files returned but not listed here (the listing's bound).
    pub files_not_listed: u64,
    /// Matching entries that were not returned: symlinks, FIFOs, sockets, devices (never
    /// opened), files over the caps (never read).
    pub skipped: Vec<SkippedEntry>,
    /// Skipped entries not listed here.
    pub skipped_not_listed: u64,
    /// Matching entries the daemon did not even list (past `max_files`, or past its list
    /// of skipped entries).
    pub omitted: u64,
    /// The walk stopped at its bound of directory entries: there may be more files.
    pub walk_limit: bool,
    /// A directory deeper than 32 levels or a path over 4096 bytes was left out.
    pub depth_limit: bool,
    /// The caps that applied (the profile's).
    pub max_files: u64,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
    /// Seconds after this result that `resources/read` serves the files' `uri`s (from
    /// this server instance only).
    pub links_expire_in_seconds: u64,
}

/// One returned file.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ArtifactEntry {
    /// Relative to /work.
    pub path: String,
    /// The name was not UTF-8 and is shown with U+FFFD.
    pub path_lossy: bool,
    pub size: u64,
    /// From the content's magic bytes, not the name.
    pub media_type: String,
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
    /// The full file (the original of a downscaled image) through `resources/read`;
    /// null when it is larger than this server keeps.
    pub uri: Option<String>,
    /// How this result carries it: `image` (image content as it is), `downscaled` (image
    /// content made smaller; `uri` is the original), `inlined` (its text is in the
    /// content), `image_left_out` (an image not shown: see `note`), `link` (only `uri`).
    pub shown_as: String,
    /// The shown image's size in pixels.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// The original image's size in pixels, when it was decoded.
    pub original_width: Option<u32>,
    pub original_height: Option<u32>,
    /// Why an image was left out.
    pub note: Option<String>,
}

/// A matching entry that was not returned.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SkippedEntry {
    pub path: String,
    pub path_lossy: bool,
    /// symlink, fifo, socket, char device, block device, too large, over the total,
    /// unreadable, changed while collected.
    pub kind: String,
    /// Its size as listed (a symlink: its target's length), never its content.
    pub size: u64,
    /// The error number, for `unreadable`.
    pub errno: Option<u32>,
}

/// A content block of the artifacts, in order.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    /// A caption then its image; `file` is the entry's index.
    Image {
        file: usize,
        caption: String,
        data: String,
        mime: &'static str,
    },
    Link(Resource),
}

/// The artifacts' part of one result, ready to attach.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub structured: ArtifactsResult,
    note: String,
    blocks: Vec<Block>,
}

impl Prepared {
    /// Characters of its text: the note, captions, inlined text and the links' fields.
    pub fn text_chars(&self) -> usize {
        self.note.chars().count()
            + self
                .blocks
                .iter()
                .map(|b| match b {
                    Block::Text(t) => t.chars().count(),
                    Block::Image { caption, .. } => caption.chars().count(),
                    Block::Link(r) => link_chars(r),
                })
                .sum::<usize>()
    }

    /// Images it shows.
    pub fn images(&self) -> usize {
        self.blocks
            .iter()
            .filter(|b| matches!(b, Block::Image { .. }))
            .count()
    }
}

/// Characters a host shows for a link (its fields as a line).
fn link_chars(r: &Resource) -> usize {
    r.uri.chars().count()
        + r.name.chars().count()
        + r.description.as_ref().map_or(0, |d| d.chars().count())
        + r.mime_type.as_ref().map_or(0, |m| m.len())
        + 16
}

/// [`prepare_now`] off the runtime's threads (decoding images is CPU work).
pub async fn prepare(
    collected: Collected,
    store: Arc<ArtifactStore>,
    owner: PrincipalKey,
    text_chars: usize,
) -> Option<Prepared> {
    match tokio::task::spawn_blocking(move || {
        prepare_now(
            collected,
            &store,
            &owner,
            text_chars,
            &ImageBudget::default(),
        )
    })
    .await
    {
        Ok(prepared) => prepared,
        Err(e) => {
            tracing::warn!(error = %e, "preparing the artifacts failed");
            None
        }
    }
}

/// The artifacts' part of a result whose text budget is `text_chars`: each file kept in
/// `store` for `owner` (the principal of the call), the images fitted to `budget`. `None` when there is nothing to say (no
/// artifacts and no report: an older daemon, or outputs not requested).
pub fn prepare_now(
    collected: Collected,
    store: &ArtifactStore,
    owner: &PrincipalKey,
    text_chars: usize,
    budget: &ImageBudget,
) -> Option<Prepared> {
    let Collected { artifacts, report } = collected;
    // Nothing returned and nothing left out: nothing to say (most runs write no files).
    let quiet = |r: &ArtifactsReport| {
        matches!(
            r.status,
            ArtifactsStatus::Collected | ArtifactsStatus::NotRequested
        ) && r.skipped.is_empty()
            && r.omitted == 0
            && !r.walk_limit
            && !r.depth_limit
    };
    if artifacts.is_empty() && report.as_ref().is_none_or(quiet) {
        return None;
    }
    // A killed run's error already says why: the report goes to structuredContent only.
    let silent = artifacts.is_empty()
        && report
            .as_ref()
            .is_some_and(|r| matches!(r.status, ArtifactsStatus::NotCollected(_)));
    let share = (text_chars / 4).max(250);
    let ttl_s = store.ttl().as_secs();

    // Keep every file, and list it.
    let mut entries = Vec::with_capacity(artifacts.len());
    let mut datas = Vec::with_capacity(artifacts.len());
    for artifact in artifacts {
        let Artifact { header, data } = artifact;
        let data: Arc<[u8]> = Arc::from(data);
        let uri = store.put(owner, &header, data.clone());
        entries.push(ArtifactEntry {
            path: header.path,
            path_lossy: header.path_lossy,
            size: header.size,
            media_type: header.media_type,
            sha256: header.sha256,
            uri,
            shown_as: "link".into(),
            width: None,
            height: None,
            original_width: None,
            original_height: None,
            note: None,
        });
        datas.push(data);
    }

    // Images, by the daemon's media type.
    let candidates: Vec<usize> = (0..entries.len())
        .filter(|&i| IMAGE_TYPES.contains(&entries[i].media_type.as_str()))
        .collect();
    let selection = images::select_images(
        candidates
            .iter()
            .map(|&i| (entries[i].path.clone(), datas[i].to_vec())),
        budget,
    );
    let mut blocks = Vec::new();
    for (shown, included) in selection.included.iter().enumerate() {
        let file = candidates[included.index];
        let image = &included.image;
        let entry = &mut entries[file];
        let downscaled = (image.width, image.height) != (image.source_width, image.source_height);
        entry.shown_as = if downscaled { "downscaled" } else { "image" }.into();
        entry.width = Some(image.width);
        entry.height = Some(image.height);
        entry.original_width = Some(image.source_width);
        entry.original_height = Some(image.source_height);
        let caption = if downscaled {
            format!(
                "Image {}: {} ({}x{} px, downscaled from {}x{}; the original is {})",
                shown + 1,
                shown_path(&entry.path),
                image.width,
                image.height,
                image.source_width,
                image.source_height,
                if entry.uri.is_some() {
                    "a resource link"
                } else {
                    "too large to keep"
                }
            )
        } else {
            format!(
                "Image {}: {} ({}x{} px)",
                shown + 1,
                shown_path(&entry.path),
                image.width,
                image.height
            )
        };
        blocks.push(Block::Image {
            file,
            caption,
            data: base64::engine::general_purpose::STANDARD.encode(&image.data),
            mime: image.media_type.mime(),
        });
    }
    let mut left_out = Vec::new();
    for out in &selection.left_out {
        let file = candidates[out.index];
        let entry = &mut entries[file];
        entry.shown_as = "image_left_out".into();
        let why = left_out_words(&out.reason);
        entry.note = Some(why.clone());
        left_out.push(format!("{} ({why})", shown_path(&entry.path)));
    }

    // The note takes half the share at most; captions, inlined text and links the rest.
    let note_budget = share / 2;
    let captions: usize = blocks
        .iter()
        .map(|b| match b {
            Block::Image { caption, .. } => caption.chars().count(),
            _ => 0,
        })
        .sum();
    let mut room = share.saturating_sub(note_budget + captions);

    // Small text files, inlined while they fit in half the room; links get the rest.
    let mut inline_room = room / 2;
    let mut inlined = 0;
    for (i, entry) in entries.iter_mut().enumerate() {
        if !resources::is_text(&entry.media_type) || datas[i].len() > INLINE_MAX_BYTES {
            continue;
        }
        let Ok(text) = std::str::from_utf8(&datas[i]) else {
            continue;
        };
        let block = format!(
            "File {} ({} bytes):\n{text}",
            shown_path(&entry.path),
            entry.size
        );
        let chars = block.chars().count();
        if chars > inline_room {
            continue;
        }
        inline_room -= chars;
        room -= chars;
        entry.shown_as = "inlined".into();
        blocks.push(Block::Text(block));
        inlined += 1;
    }

    // Links: files not in the content first (originals of downscaled images, other
    // files), then the images shown as they are and the inlined text.
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by_key(|&i| {
        (
            matches!(entries[i].shown_as.as_str(), "image" | "inlined"),
            i,
        )
    });
    let mut links = 0;
    for i in order {
        let entry = &entries[i];
        let Some(uri) = &entry.uri else { continue };
        if links >= MAX_LINKS {
            break;
        }
        let header = vivarium_proto::ArtifactHeader {
            path: entry.path.clone(),
            path_lossy: entry.path_lossy,
            size: entry.size,
            sha256: entry.sha256.clone(),
            media_type: entry.media_type.clone(),
        };
        let link = resources::link(uri, &header);
        let chars = link_chars(&link);
        if chars > room {
            break;
        }
        room -= chars;
        blocks.push(Block::Link(link));
        links += 1;
    }

    let returned_bytes: u64 = entries.iter().map(|e| e.size).sum();
    let not_kept = entries.iter().filter(|e| e.uri.is_none()).count();
    let mut structured = ArtifactsResult {
        status: "unreported".into(),
        detail: None,
        returned: entries.len() as u64,
        returned_bytes,
        files: entries,
        files_not_listed: 0,
        skipped: Vec::new(),
        skipped_not_listed: 0,
        omitted: 0,
        walk_limit: false,
        depth_limit: false,
        max_files: 0,
        max_file_bytes: 0,
        max_total_bytes: 0,
        links_expire_in_seconds: ttl_s,
    };
    let mut skipped_words = Vec::new();
    if let Some(report) = report {
        let (status, detail) = match report.status {
            ArtifactsStatus::Collected => ("collected", None),
            ArtifactsStatus::NotRequested => ("not_requested", None),
            ArtifactsStatus::NotCollected(why) => ("not_collected", Some(why)),
        };
        structured.status = status.into();
        structured.detail = detail;
        structured.omitted = report.omitted;
        structured.walk_limit = report.walk_limit;
        structured.depth_limit = report.depth_limit;
        structured.max_files = report.max_files.into();
        structured.max_file_bytes = report.max_file_bytes;
        structured.max_total_bytes = report.max_total_bytes;
        for s in &report.skipped {
            skipped_words.push(format!(
                "{} ({}, {})",
                shown_path(&s.path),
                s.kind.as_str(),
                human_bytes(s.size)
            ));
        }
        structured.skipped = report
            .skipped
            .into_iter()
            .map(|s| SkippedEntry {
                path: s.path,
                path_lossy: s.path_lossy,
                kind: s.kind.as_str().into(),
                size: s.size,
                errno: s.errno,
            })
            .collect();
    }
    bound_listing(&mut structured, LISTED_BYTES);

    let note = note(NoteFacts {
        structured: &structured,
        shown: selection.included.len(),
        left_out: &left_out,
        inlined,
        links,
        not_kept,
        store_mib: store.max_bytes() >> 20,
        skipped: &skipped_words,
        budget: note_budget,
    });
    Some(Prepared {
        structured,
        note: if silent { String::new() } else { note },
        blocks,
    })
}

/// Cut the listings so that their JSON is about `max_bytes` (files get three quarters),
/// counting what was cut.
fn bound_listing(s: &mut ArtifactsResult, max_bytes: usize) {
    fn keep<T: Serialize>(list: &mut Vec<T>, max_bytes: usize) -> u64 {
        let mut used = 0;
        let n = list
            .iter()
            .take_while(|item| {
                used += serde_json::to_string(item).map_or(0, |j| j.len() + 1);
                used <= max_bytes
            })
            .count();
        let cut = (list.len() - n) as u64;
        list.truncate(n);
        cut
    }
    s.files_not_listed += keep(&mut s.files, max_bytes * 3 / 4);
    s.skipped_not_listed += keep(&mut s.skipped, max_bytes / 4);
}

struct NoteFacts<'a> {
    structured: &'a ArtifactsResult,
    shown: usize,
    left_out: &'a [String],
    inlined: usize,
    links: usize,
    not_kept: usize,
    store_mib: u64,
    skipped: &'a [String],
    budget: usize,
}

/// The note: the facts in short sentences, the two lists cut to what the budget leaves.
fn note(f: NoteFacts<'_>) -> String {
    let s = f.structured;
    let mut fixed = Vec::new();
    match s.status.as_str() {
        "not_collected" => fixed.push(format!(
            "Artifacts were not collected: {}.",
            s.detail
                .as_deref()
                .map(|d| cut_chars(d, 200))
                .unwrap_or_default()
        )),
        "unreported" => {
            fixed.push("The daemon sent artifacts without a report of what it skipped.".into())
        }
        _ => {}
    }
    fixed.push(format!(
        "Artifacts: {} file(s), {} (structuredContent.artifacts lists path, size, type, \
         sha256 and URI).",
        s.returned,
        human_bytes(s.returned_bytes)
    ));
    if f.shown > 0 {
        fixed.push(format!("{} shown as images below.", f.shown));
    }
    if f.inlined > 0 {
        fixed.push(format!("{} small text file(s) inlined below.", f.inlined));
    }
    let uris = s.returned as usize - f.not_kept;
    if uris > 0 {
        let mut t = format!(
            "resources/read serves each file's URI for {} from this server instance only",
            duration_words(s.links_expire_in_seconds)
        );
        if f.links > 0 {
            t.push_str(&format!("; {} of them are resource links below", f.links));
        }
        t.push('.');
        fixed.push(t);
    }
    if f.not_kept > 0 {
        fixed.push(format!(
            "{} file(s) are larger than this server keeps ({} MiB) and have no URI.",
            f.not_kept, f.store_mib
        ));
    }
    if s.omitted > 0 {
        fixed.push(format!(
            "{} matching entries were not returned or listed, past the caps ({} files, {} per \
             file, {} in all).",
            s.omitted,
            s.max_files,
            human_bytes(s.max_file_bytes),
            human_bytes(s.max_total_bytes)
        ));
    }
    if s.walk_limit {
        fixed.push("The walk of /work stopped at its bound: there may be more files.".into());
    }
    if s.depth_limit {
        fixed.push("Paths deeper than 32 levels or over 4096 bytes were left out.".into());
    }
    let mut text = fixed.join(" ");
    let rest = f.budget.saturating_sub(text.chars().count());
    let lists: Vec<(&str, &[String])> = [
        ("Images not shown: ", f.left_out),
        ("Skipped, not returned: ", f.skipped),
    ]
    .into_iter()
    .filter(|(_, l)| !l.is_empty())
    .collect();
    for (k, (lead, items)) in lists.iter().enumerate() {
        let used = text.chars().count();
        let allowance = if k + 1 == lists.len() {
            f.budget.saturating_sub(used)
        } else {
            rest / lists.len()
        };
        text.push(' ');
        text.push_str(lead);
        text.push_str(&list_within(
            items,
            allowance.saturating_sub(lead.len() + 2),
        ));
        text.push('.');
    }
    text
}

/// `items` joined by "; " within `max_chars`, then how many more.
fn list_within(items: &[String], max_chars: usize) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        let more = format!("; and {} more", items.len() - i);
        if out.chars().count() + item.chars().count() + 2 + more.len() > max_chars
            && i + 1 < items.len()
            || out.chars().count() + item.chars().count() + 2 > max_chars
        {
            if i == 0 {
                return format!("{} (see structuredContent)", items.len());
            }
            out.push_str(&more);
            return out;
        }
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(item);
    }
    out
}

/// Why an image was left out, in words.
fn left_out_words(reason: &LeftOutReason) -> String {
    match reason {
        LeftOutReason::OverCount { max_images } => {
            format!("over the limit of {max_images} images in one result")
        }
        LeftOutReason::OverBytes { allowance, .. } => format!(
            "over the result's image byte budget ({} left for it)",
            human_bytes(*allowance as u64)
        ),
        LeftOutReason::Refused(e) => e.to_string(),
    }
}

/// A path for the text: control characters replaced, cut to [`SHOWN_PATH_CHARS`].
fn shown_path(path: &str) -> String {
    let clean: String = path
        .chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect();
    cut_chars(&clean, SHOWN_PATH_CHARS)
}

fn cut_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.into();
    }
    let head: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{head}…")
}

fn human_bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} bytes"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn duration_words(secs: u64) -> String {
    if secs.is_multiple_of(3600) && secs >= 3600 {
        let h = secs / 3600;
        format!("{h} hour{}", if h == 1 { "" } else { "s" })
    } else if secs.is_multiple_of(60) && secs >= 60 {
        format!("{} minutes", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// The text budget left to the result's JSON text once `prepared` has its share.
pub fn json_budgets(
    budgets: crate::tool::Budgets,
    prepared: Option<&Prepared>,
) -> crate::tool::Budgets {
    let used = prepared.map_or(0, Prepared::text_chars);
    crate::tool::Budgets {
        text_chars: budgets.text_chars.saturating_sub(used).max(500),
        ..budgets
    }
}

/// `call` with the artifacts: `structuredContent.artifacts`, the note, the images and
/// their captions, inlined text and links after its text; then under
/// [`MAX_RESULT_BYTES`] (images dropped from the end, then the listings cut).
pub fn attach(call: CallToolResult, prepared: Option<Prepared>) -> CallToolResult {
    let Some(mut prepared) = prepared else {
        return call;
    };
    let mut listing = LISTED_BYTES;
    loop {
        let attached = render(&call, &prepared);
        let size = serde_json::to_string(&attached).map_or(0, |j| j.len());
        if size <= MAX_RESULT_BYTES {
            return attached;
        }
        // Drop the last image still shown.
        if let Some(pos) = prepared
            .blocks
            .iter()
            .rposition(|b| matches!(b, Block::Image { .. }))
        {
            let Block::Image { file, caption, .. } = prepared.blocks.remove(pos) else {
                unreachable!("an image block")
            };
            let why = "not shown: the result would be over its 1 MB cap";
            prepared
                .blocks
                .insert(pos, Block::Text(format!("{caption}: {why}")));
            if let Some(entry) = prepared.structured.files.get_mut(file) {
                entry.shown_as = "image_left_out".into();
                entry.note = Some(why.into());
            }
            continue;
        }
        if listing < 1024 {
            return attached;
        }
        listing /= 2;
        bound_listing(&mut prepared.structured, listing);
    }
}

fn render(call: &CallToolResult, prepared: &Prepared) -> CallToolResult {
    let mut call = call.clone();
    if let Some(serde_json::Value::Object(map)) = call.structured_content.as_mut() {
        map.insert(
            "artifacts".into(),
            serde_json::to_value(&prepared.structured).expect("artifacts serialize"),
        );
    }
    if !prepared.note.is_empty() {
        call.content.push(ContentBlock::text(prepared.note.clone()));
    }
    for block in &prepared.blocks {
        match block {
            Block::Text(t) => call.content.push(ContentBlock::text(t.clone())),
            Block::Image {
                caption,
                data,
                mime,
                ..
            } => {
                call.content.push(ContentBlock::text(caption.clone()));
                call.content.push(ContentBlock::image(data.clone(), *mime));
            }
            Block::Link(r) => call.content.push(ContentBlock::resource_link(r.clone())),
        }
    }
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
    use image::{DynamicImage, GenericImageView, GrayImage, Rgb, RgbImage};
    use rmcp::model::ResourceContents;
    use vivarium_client::Outcome;
    use vivarium_proto::{
        ArtifactHeader, ExitStatus, Isolation, Reason, SkipKind, SkippedArtifact, Usage,
    };

    use crate::resources::{DEFAULT_MAX_BYTES, DEFAULT_TTL};
    use crate::tool::Budgets;

    fn png_of(image: &DynamicImage) -> Vec<u8> {
        let mut out = Vec::new();
        let encoder = PngEncoder::new_with_quality(&mut out, CompressionType::Fast, PngFilter::Up);
        image.write_with_encoder(encoder).unwrap();
        out
    }

    /// Noise compresses badly: plots that press on the byte budget.
    fn noise_png(width: u32, height: u32, seed: u32) -> Vec<u8> {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        png_of(&DynamicImage::ImageRgb8(RgbImage::from_fn(
            width,
            height,
            |_, _| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let [a, b, c, _] = state.to_le_bytes();
                Rgb([a, b, c])
            },
        )))
    }

    fn sha256_hex(_: &[u8]) -> String {
        "ab".repeat(32)
    }

    fn artifact(path: &str, media_type: &str, data: Vec<u8>) -> Artifact {
        Artifact {
            header: ArtifactHeader {
                path: path.into(),
                path_lossy: false,
                size: data.len() as u64,
                sha256: sha256_hex(&data),
                media_type: media_type.into(),
            },
            data,
        }
    }

    fn report(returned: usize, skipped: Vec<SkippedArtifact>) -> ArtifactsReport {
        ArtifactsReport {
            status: ArtifactsStatus::Collected,
            returned: returned as u32,
            returned_bytes: 0,
            skipped,
            omitted: 0,
            walk_limit: false,
            depth_limit: false,
            max_files: 1000,
            max_file_bytes: 16 << 20,
            max_total_bytes: 64 << 20,
        }
    }

    fn owner() -> PrincipalKey {
        PrincipalKey::new(crate::principal::LOCAL_ISSUER, "stdio")
    }

    fn store() -> Arc<ArtifactStore> {
        Arc::new(ArtifactStore::new(DEFAULT_TTL, DEFAULT_MAX_BYTES))
    }

    fn outcome() -> Outcome {
        Outcome {
            job_id: 7,
            profile: "default".into(),
            reason: Reason::Ok,
            exit: ExitStatus::Code(0),
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

    /// The whole result of a job that printed `stdout`/`stderr` and returned `collected`.
    fn job_result(
        collected: Collected,
        store: &ArtifactStore,
        budgets: Budgets,
        stdout: &[u8],
        stderr: &[u8],
    ) -> CallToolResult {
        let prepared = prepare_now(
            collected,
            store,
            &owner(),
            budgets.text_chars,
            &ImageBudget::default(),
        );
        let call = crate::tool::call_result(
            &outcome(),
            stdout,
            stderr,
            json_budgets(budgets, prepared.as_ref()),
            None,
            None,
        );
        attach(call, prepared)
    }

    fn images_of(call: &CallToolResult) -> Vec<DynamicImage> {
        call.content
            .iter()
            .filter_map(|c| c.as_image())
            .map(|i| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&i.data)
                    .unwrap();
                image::load_from_memory(&bytes).unwrap()
            })
            .collect()
    }

    fn text_chars_of(call: &CallToolResult) -> usize {
        call.content
            .iter()
            .map(|c| match c {
                ContentBlock::Text(t) => t.text.chars().count(),
                ContentBlock::ResourceLink(r) => link_chars(r),
                _ => 0,
            })
            .sum()
    }

    fn all_text(call: &CallToolResult) -> String {
        call.content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn files_of(call: &CallToolResult) -> Vec<serde_json::Value> {
        call.structured_content.as_ref().unwrap()["artifacts"]["files"]
            .as_array()
            .unwrap()
            .clone()
    }

    #[test]
    fn a_10000_px_png_is_shown_downscaled_and_its_original_is_a_link() {
        // Built from rows (a debug build is slow per pixel); compresses well.
        let (w, h) = (10_000u32, 10_000u32);
        let mut raw = vec![200u8; (w * h) as usize];
        for y in (0..h as usize).step_by(500) {
            raw[y * w as usize..(y + 1) * w as usize].fill(0);
        }
        let png = png_of(&DynamicImage::ImageLuma8(
            GrayImage::from_raw(w, h, raw).unwrap(),
        ));
        let store = store();
        let collected = Collected {
            artifacts: vec![artifact("out/huge.png", "image/png", png.clone())],
            report: Some(report(1, vec![])),
        };
        let call = job_result(collected, &store, Budgets::default(), b"ok\n", b"");
        let shown = images_of(&call);
        assert_eq!(shown.len(), 1);
        let (sw, sh) = shown[0].dimensions();
        assert!(sw.max(sh) <= 1568 && u64::from(sw) * u64::from(sh) <= 1_150_000);
        assert_eq!((sw, sh), (1072, 1072));
        let files = files_of(&call);
        assert_eq!(files[0]["shown_as"], "downscaled");
        assert_eq!(files[0]["original_width"], 10_000);
        assert_eq!(files[0]["width"], 1072);
        let text = all_text(&call);
        assert!(
            text.contains("Image 1: out/huge.png (1072x1072 px, downscaled from 10000x10000"),
            "{text}"
        );
        // The original, whole, through resources/read.
        let uri = files[0]["uri"].as_str().unwrap();
        assert!(call
            .content
            .iter()
            .any(|c| matches!(c, ContentBlock::ResourceLink(r) if r.uri == uri)));
        let read = store.read(&owner(), uri).unwrap();
        let ResourceContents::BlobResourceContents { blob, .. } = &read.contents[0] else {
            panic!("a PNG is a blob");
        };
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(blob)
                .unwrap(),
            png
        );
    }

    /// A valid PNG header declaring `width`x`height` RGBA, with a few bytes of data.
    fn bomb_png(width: u32, height: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0xedb8_8320
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            let crc = crc32(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        }
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
        chunk(&mut out, b"IHDR", &ihdr);
        let mut idat = vec![0x78, 0x01, 0x01, 64, 0, !64, 0xff];
        idat.extend_from_slice(&[0; 64]);
        idat.extend_from_slice(&((64u32 << 16) | 1).to_be_bytes());
        chunk(&mut out, b"IDAT", &idat);
        chunk(&mut out, b"IEND", &[]);
        out
    }

    fn status_kib(field: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn bomb_result(store: &ArtifactStore) -> CallToolResult {
        let bomb = bomb_png(100_000, 100_000);
        assert!(bomb.len() < 200);
        let collected = Collected {
            artifacts: vec![artifact("out/bomb.png", "image/png", bomb)],
            report: Some(report(1, vec![])),
        };
        job_result(collected, store, Budgets::default(), b"", b"")
    }

    const BOMB_CHILD: &str = "VIVARIUM_ARTIFACTS_BOMB_CHILD";

    /// The result of a job that returned a decompression bomb (a valid PNG header
    /// declaring 100000x100000 RGBA, 40 GB decoded, in under 200 bytes): refused from the
    /// header and said so. The bounded memory is checked in a child (this test binary
    /// re-run on `bomb_child` alone) whose address space may grow by only 64 MiB, where
    /// decoding would abort it.
    #[test]
    fn a_decompression_bomb_is_refused_from_its_header_and_the_result_says_so() {
        let store = store();
        let call = bomb_result(&store);
        assert!(images_of(&call).is_empty());
        let files = files_of(&call);
        assert_eq!(files[0]["shown_as"], "image_left_out");
        let note = files[0]["note"].as_str().unwrap();
        assert!(
            note.contains("too large to decode: 100000x100000"),
            "{note}"
        );
        let text = all_text(&call);
        assert!(
            text.contains("Images not shown: out/bomb.png (image too large to decode"),
            "{text}"
        );
        // Still served as a file.
        assert!(store
            .read(&owner(), files[0]["uri"].as_str().unwrap())
            .is_ok());

        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "artifacts::tests::bomb_child",
                "--exact",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(BOMB_CHILD, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("artifacts bomb child ok"),
            "the child did not run: {stdout}\n{stderr}"
        );
    }

    /// The child of the test above; does nothing unless run by it.
    #[test]
    fn bomb_child() {
        if std::env::var_os(BOMB_CHILD).is_none() {
            return;
        }
        use nix::sys::resource::{setrlimit, Resource};
        let store = store();
        let limit = (status_kib("VmSize:") << 10) + (64 << 20);
        setrlimit(Resource::RLIMIT_AS, limit, limit).unwrap();
        let call = bomb_result(&store);
        assert_eq!(files_of(&call)[0]["shown_as"], "image_left_out");
        println!("artifacts bomb child ok under RLIMIT_AS = VmSize + 64 MiB");
    }

    /// 30 plots that compress badly, a large stdout and stderr of the characters that
    /// JSON escapes most, and 10 000 skipped entries with long paths.
    fn worst_case() -> (Collected, Vec<u8>, Vec<u8>) {
        let mut artifacts: Vec<Artifact> = (0..30)
            .map(|i| {
                artifact(
                    &format!("out/figure-{}.png", i + 1),
                    "image/png",
                    noise_png(480, 360, i + 1),
                )
            })
            .collect();
        for i in 0..200 {
            artifacts.push(artifact(
                &format!("out/{}/table-{i}.csv", "deep/".repeat(40)),
                "text/plain; charset=utf-8",
                format!("a,b\n{i},{i}\n").into_bytes(),
            ));
        }
        let skipped = (0..10_000)
            .map(|i| SkippedArtifact {
                path: format!("out/{}/fifo-{i}", "x".repeat(200)),
                path_lossy: false,
                kind: SkipKind::Fifo,
                size: 0,
                errno: None,
            })
            .collect();
        let n = artifacts.len();
        let collected = Collected {
            artifacts,
            report: Some(ArtifactsReport {
                omitted: 5_000,
                walk_limit: true,
                ..report(n, skipped)
            }),
        };
        let nasty: Vec<u8> = "\"\u{1}€😀\\".repeat(40_000).into_bytes();
        (collected, nasty.clone(), nasty)
    }

    #[test]
    fn thirty_plots_stay_within_the_image_budget_and_say_what_was_left_out() {
        let (collected, stdout, stderr) = worst_case();
        let store = store();
        let budgets = Budgets::default();
        let call = job_result(collected, &store, budgets, &stdout, &stderr);
        let json = serde_json::to_string(&call).unwrap();
        assert!(json.len() < MAX_RESULT_BYTES, "{} bytes", json.len());
        assert!(json.len() < 1 << 20);
        // The image budget: at most 8, each within 1568 px and 1.15 MP, 600 KiB in all.
        let shown = images_of(&call);
        assert!(!shown.is_empty() && shown.len() <= 8, "{}", shown.len());
        for image in &shown {
            let (w, h) = image.dimensions();
            assert!(w.max(h) <= 1568 && u64::from(w) * u64::from(h) <= 1_150_000);
        }
        let image_bytes: usize = call
            .content
            .iter()
            .filter_map(|c| c.as_image())
            .map(|i| i.data.len() * 3 / 4)
            .sum();
        assert!(image_bytes <= 600 * 1024, "{image_bytes}");
        // The text, all blocks and links together, within the text budget.
        let chars = text_chars_of(&call);
        eprintln!(
            "worst case: {} bytes of JSON, {} images ({image_bytes} bytes), {chars} chars of text",
            json.len(),
            shown.len()
        );
        assert!(chars <= budgets.text_chars, "{chars} chars of text");
        // What was left out, and why, in the text and in structuredContent.
        let text = all_text(&call);
        assert!(
            text.contains("Images not shown: out/figure-9.png (over the limit of 8 images"),
            "{text}"
        );
        assert!(text.contains("Artifacts: 230 file(s)"), "{text}");
        assert!(text.contains("Skipped, not returned: "), "{text}");
        assert!(
            text.contains("5000 matching entries were not returned"),
            "{text}"
        );
        assert!(text.contains("there may be more files"), "{text}");
        let a = &call.structured_content.as_ref().unwrap()["artifacts"];
        let files = a["files"].as_array().unwrap();
        let left_out = files
            .iter()
            .filter(|f| f["shown_as"] == "image_left_out")
            .count();
        assert_eq!(left_out, 30 - shown.len());
        assert_eq!(
            files.len() as u64 + a["files_not_listed"].as_u64().unwrap(),
            230
        );
        assert_eq!(
            a["skipped"].as_array().unwrap().len() as u64
                + a["skipped_not_listed"].as_u64().unwrap(),
            10_000
        );
        assert!(a["skipped_not_listed"].as_u64().unwrap() > 0);
        assert_eq!(a["walk_limit"], true);
        // Links are bounded.
        let links = call
            .content
            .iter()
            .filter(|c| matches!(c, ContentBlock::ResourceLink(_)))
            .count();
        assert!(links <= MAX_LINKS);
    }

    #[test]
    fn a_result_over_1_mib_drops_images_from_the_end_and_says_so() {
        // An operator's huge stream budget leaves less room for the images.
        let (collected, stdout, stderr) = worst_case();
        let budgets = Budgets {
            output_chars: 60_000,
            text_chars: 8_000,
        };
        let call = job_result(collected, &store(), budgets, &stdout, &stderr);
        let json = serde_json::to_string(&call).unwrap();
        eprintln!(
            "huge streams: {} bytes of JSON, {} images",
            json.len(),
            images_of(&call).len()
        );
        assert!(json.len() <= MAX_RESULT_BYTES, "{} bytes", json.len());
        let text = all_text(&call);
        assert!(text.contains("over its 1 MB cap"), "{text}");
        let files = files_of(&call);
        assert!(files
            .iter()
            .any(|f| f["note"] == "not shown: the result would be over its 1 MB cap"));
    }

    #[test]
    fn small_text_is_inlined_and_every_kept_file_has_a_uri() {
        let store = store();
        let collected = Collected {
            artifacts: vec![
                artifact(
                    "out/result.csv",
                    "text/plain; charset=utf-8",
                    b"x,y\n1,2\n".to_vec(),
                ),
                artifact(
                    "out/report.pdf",
                    "application/pdf",
                    b"%PDF-1.7 ...".to_vec(),
                ),
                // Named .png, but not one by its bytes: never treated as an image.
                artifact("out/fake.png", "application/octet-stream", vec![0; 10]),
            ],
            report: Some(report(
                3,
                vec![SkippedArtifact {
                    path: "out/shadow".into(),
                    path_lossy: false,
                    kind: SkipKind::Symlink,
                    size: 11,
                    errno: None,
                }],
            )),
        };
        let call = job_result(collected, &store, Budgets::default(), b"", b"");
        let text = all_text(&call);
        assert!(
            text.contains("File out/result.csv (8 bytes):\nx,y\n1,2\n"),
            "{text}"
        );
        assert!(
            text.contains("Skipped, not returned: out/shadow (symlink, 11 bytes)"),
            "{text}"
        );
        assert!(
            text.contains("for 1 hour from this server instance only"),
            "{text}"
        );
        let files = files_of(&call);
        let shown: Vec<&str> = files
            .iter()
            .map(|f| f["shown_as"].as_str().unwrap())
            .collect();
        assert_eq!(shown, ["inlined", "link", "link"]);
        assert!(images_of(&call).is_empty());
        for f in &files {
            let uri = f["uri"].as_str().unwrap();
            assert!(store.read(&owner(), uri).is_ok(), "{uri}");
        }
        let links = call
            .content
            .iter()
            .filter(|c| matches!(c, ContentBlock::ResourceLink(_)))
            .count();
        assert_eq!(links, 3);
        let skipped = &call.structured_content.as_ref().unwrap()["artifacts"]["skipped"];
        assert_eq!(skipped[0]["kind"], "symlink");
        assert_eq!(skipped[0]["size"], 11);
    }

    #[test]
    fn no_artifacts_and_no_report_leave_the_result_as_it_was() {
        let prepared = prepare_now(
            Collected::default(),
            &store(),
            &owner(),
            8_000,
            &ImageBudget::default(),
        );
        assert!(prepared.is_none());
        let call =
            crate::tool::call_result(&outcome(), b"hi\n", b"", Budgets::default(), None, None);
        let same = attach(call.clone(), None);
        assert_eq!(same, call);
    }

    #[test]
    fn a_run_that_wrote_no_files_gets_no_note_and_a_killed_one_a_structured_report() {
        let call = job_result(
            Collected {
                artifacts: vec![],
                report: Some(report(0, vec![])),
            },
            &store(),
            Budgets::default(),
            b"hi\n",
            b"",
        );
        assert_eq!(call.content.len(), 1, "{call:?}");
        assert!(call.structured_content.as_ref().unwrap()["artifacts"].is_null());
        let killed = ArtifactsReport {
            status: ArtifactsStatus::NotCollected("the job was killed (timeout)".into()),
            ..report(0, vec![])
        };
        let call = job_result(
            Collected {
                artifacts: vec![],
                report: Some(killed),
            },
            &store(),
            Budgets::default(),
            b"",
            b"",
        );
        assert_eq!(call.content.len(), 1, "{call:?}");
        let a = &call.structured_content.as_ref().unwrap()["artifacts"];
        assert_eq!(a["status"], "not_collected");
        assert_eq!(a["detail"], "the job was killed (timeout)");
        // Something skipped is worth a note even with nothing returned.
        let skipped = SkippedArtifact {
            path: "out/fifo".into(),
            path_lossy: false,
            kind: SkipKind::Fifo,
            size: 0,
            errno: None,
        };
        let call = job_result(
            Collected {
                artifacts: vec![],
                report: Some(report(0, vec![skipped])),
            },
            &store(),
            Budgets::default(),
            b"",
            b"",
        );
        assert_eq!(call.content.len(), 2, "{call:?}");
        assert!(all_text(&call).contains("out/fifo (fifo, 0 bytes)"));
    }

    #[test]
    fn the_output_schema_lists_artifacts() {
        let tool = crate::tool::tool(None, None, "default", Budgets::default());
        let schema = serde_json::to_string(&tool.output_schema).unwrap();
        assert!(schema.contains("\"artifacts\""), "{schema}");
        assert!(schema.contains("shown_as"), "{schema}");
    }
}
