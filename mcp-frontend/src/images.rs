//! Images that untrusted code wrote, made fit for a model's context.
//!
//! [`fit_image`] takes the bytes of one image and returns an image within the pixel budget
//! of [`ImageBudget`]: the input bytes unchanged when they are already a PNG or a JPEG within
//! it, otherwise a resized (never enlarged) PNG or JPEG. [`select_images`] does that for the
//! images of one tool result and also keeps the result within a count and a byte budget,
//! saying for each image left out why.
//!
//! # Untrusted input
//!
//! The bytes come from the sandboxed code, so they may be anything, including a
//! decompression bomb (a few hundred bytes whose header declares 100000x100000 pixels).
//! The format is sniffed from the magic bytes ([`MediaType::sniff`]); a file name or a
//! claimed media type is never trusted, since the code names its files as it likes. Only
//! PNG, JPEG, GIF (first frame) and WebP are decoded, by the `image` crate's pure Rust
//! decoders. Before any pixel buffer is allocated, the header's dimensions are checked:
//!
//! - each side at most [`MAX_DECODE_SIDE`] (16384) pixels,
//! - at most [`MAX_DECODE_PIXELS`] (100 megapixels: a 10000x10000 plot or screenshot is
//!   still downscaled rather than refused) for a PNG, whose decoder writes rows straight
//!   into the output buffer; at most [`MAX_DECODE_PIXELS_OTHER`] (50 megapixels, more than
//!   a 48 MP phone photo) for JPEG, GIF and WebP, whose decoders hold a second copy of
//!   about the image's size (a progressive JPEG's coefficients are 2 bytes a sample, for
//!   all components),
//! - at most [`MAX_DECODE_BYTES`] (512 MiB) for the decoded buffer, which is also the
//!   decoder's `max_alloc` (`image::Limits`). A 10000x10000 RGB8 image is 300 MB and RGBA8
//!   400 MB, so both decode; the same size in 16 bits per channel (600 or 800 MB) is
//!   refused, as is 100 MP of anything over 5 bytes a pixel.
//!
//! Anything over is [`ImageError::TooLarge`], answered from the header alone. So the memory
//! one call uses is bounded by about `MAX_DECODE_BYTES` plus the small fitted copies (a
//! little more, about 600 MB, at worst: a 50 MP progressive CMYK JPEG), and the work by
//! the 100 MP cap. Decoding and resizing are blocking CPU work (a 100 MP PNG
//! takes on the order of a second in an optimised build): call this from
//! `tokio::task::spawn_blocking`, not on the runtime's threads. A decoder that panics on
//! hostile bytes is caught and reported as [`ImageError::Decode`].
//!
//! # Budget
//!
//! The numbers come from what MCP clients and the model accept (see [`ImageBudget`]):
//! an image's long side at most 1568 pixels and its area at most 1.15 megapixels, the
//! largest the model takes in without its API downscaling it first; at most 8 images and
//! 600 KiB of image data per result, which keeps the base64 of the images (4/3 of that,
//! 800 KiB) plus the result's text under the 1 MiB that Claude Desktop accepts of a tool
//! result. Claude Code refuses an image over 8000 pixels, and over 2000 pixels once a
//! request holds more than 20 images; 1568 is under both.
//!
//! # Resizing and encoding
//!
//! The fitted size keeps the aspect ratio (each side within one pixel of the exact scale,
//! and at least 1). A large reduction (the source at least 16 times the target's area)
//! first averages boxes of source pixels down to about twice the target (one pass over the
//! source, no floating-point intermediate of its size), then a Catmull-Rom filter makes the
//! target; a smaller one uses Catmull-Rom directly. A JPEG source is re-encoded as JPEG
//! (quality 85): it is a photo, and as PNG it would be several times larger. Anything else
//! becomes an 8-bit PNG (lossless, best for plots and text). An opaque image with an alpha
//! channel (matplotlib's default) loses the channel. An image whose EXIF orientation is not
//! the identity is rotated (after resizing, so no full-size copy is made) and re-encoded,
//! never passed through.
//!
//! The decoders (`image`, `png`, `zune-jpeg`, ...) are built with optimisation even in the
//! `dev` profile (the workspace `Cargo.toml`), so that a debug build downscales a 10000x10000
//! PNG in seconds: the heavy loops are in those crates, not here.

use std::fmt;
use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::FilterType;
use image::metadata::Orientation;
use image::{DynamicImage, GenericImageView, ImageDecoder, ImageFormat, ImageReader, Limits};

/// Longest side of a fitted image, in pixels: the largest that the model takes in without
/// its API downscaling the image first. Also under Claude Code's 2000 pixels for a request
/// of more than 20 images (and its 8000 for any image).
pub const DEFAULT_LONG_SIDE: u32 = 1568;

/// Area of a fitted image, in pixels (1.15 megapixels, about 1,600 tokens): the model's
/// API downscales anything larger, so sending more costs bytes and buys nothing.
pub const DEFAULT_MAX_PIXELS: u64 = 1_150_000;

/// Images in one result, by default. Each fitted image costs up to about 1,600 tokens, and
/// with 600 KiB to share, 8 images still get 75 KiB each (enough for a 1568 px plot as PNG
/// or a photo as JPEG); more would mostly mean smaller, less legible images.
pub const DEFAULT_MAX_IMAGES: usize = 8;

/// Bytes of image data in one result, by default: 600 KiB is 800 KiB as base64, which leaves
/// over 200 KiB for the text and `structuredContent` under Claude Desktop's 1 MiB limit on a
/// tool result.
pub const DEFAULT_MAX_TOTAL_BYTES: usize = 600 * 1024;

/// Longest side that is decoded at all (the decoder's `max_image_width`/`max_image_height`).
pub const MAX_DECODE_SIDE: u32 = 16_384;

/// Pixels of a PNG that are decoded at all: 100 megapixels, so that a 10000x10000 image is
/// downscaled, while a header declaring more is refused before any pixel is allocated.
pub const MAX_DECODE_PIXELS: u64 = 100_000_000;

/// Pixels of a JPEG, GIF or WebP that are decoded at all: 50 megapixels, as their decoders
/// hold a second buffer of about the image's size besides the output (see the module's
/// documentation).
pub const MAX_DECODE_PIXELS_OTHER: u64 = 50_000_000;

/// Bytes of the decoded pixel buffer, and the decoder's `max_alloc`: 512 MiB, room for a
/// 10000x10000 RGBA8 image (400 MB).
pub const MAX_DECODE_BYTES: u64 = 512 * 1024 * 1024;

/// JPEG quality of a re-encoded photo.
const JPEG_QUALITY: u8 = 85;

/// Smallest long side that [`select_images`] shrinks an image to when fitting it into its
/// share of the byte budget; below it the image is left out rather than shown as a stamp.
pub const MIN_SHRINK_LONG_SIDE: u32 = 256;

/// The formats that are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaType {
    Png,
    Jpeg,
    Gif,
    WebP,
}

impl MediaType {
    /// The format that the magic bytes say, whatever the file is called.
    pub fn sniff(bytes: &[u8]) -> Option<MediaType> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(MediaType::Png)
        } else if bytes.starts_with(b"\xff\xd8\xff") {
            Some(MediaType::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(MediaType::Gif)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(MediaType::WebP)
        } else {
            None
        }
    }

    /// The MIME type (`image/png`, ...), as an MCP image content's `mimeType`.
    pub fn mime(self) -> &'static str {
        match self {
            MediaType::Png => "image/png",
            MediaType::Jpeg => "image/jpeg",
            MediaType::Gif => "image/gif",
            MediaType::WebP => "image/webp",
        }
    }

    fn format(self) -> ImageFormat {
        match self {
            MediaType::Png => ImageFormat::Png,
            MediaType::Jpeg => ImageFormat::Jpeg,
            MediaType::Gif => ImageFormat::Gif,
            MediaType::WebP => ImageFormat::WebP,
        }
    }
}

impl fmt::Display for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mime())
    }
}

/// Why an image could not be fitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Not a format that is decoded (by its magic bytes), or a variant of one that the
    /// decoder does not support.
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// The header declares more than is decoded ([`MAX_DECODE_SIDE`], [`MAX_DECODE_PIXELS`]
    /// or [`MAX_DECODE_BYTES`]); refused before any pixel buffer is allocated.
    #[error(
        "image too large to decode: {width}x{height} px (the limits are {MAX_DECODE_SIDE} px a \
         side, {} megapixels for a PNG and {} for other formats, and {} MiB decoded)",
        MAX_DECODE_PIXELS / 1_000_000,
        MAX_DECODE_PIXELS_OTHER / 1_000_000,
        MAX_DECODE_BYTES >> 20
    )]
    TooLarge { width: u32, height: u32 },
    /// The bytes are not a valid image of their format (truncated, corrupt, or the decoder
    /// gave up).
    #[error("cannot decode the image: {0}")]
    Decode(String),
    /// Re-encoding the fitted image failed (not expected).
    #[error("cannot encode the image: {0}")]
    Encode(String),
}

/// The budget of the images of one tool result.
///
/// The defaults come from the MCP clients: Claude Desktop rejects a tool result over 1 MiB;
/// Claude Code fails on an image over 8000 px, or over 2000 px once a request holds more
/// than 20 images; the model's API downscales anything over 1568 px or 1.15 megapixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageBudget {
    /// Images included at most ([`DEFAULT_MAX_IMAGES`]); the rest are left out, in order.
    pub max_images: usize,
    /// Bytes of image data (before base64, which adds a third) of all the included images
    /// ([`DEFAULT_MAX_TOTAL_BYTES`]).
    pub max_total_bytes: usize,
    /// Longest side of a fitted image, in pixels ([`DEFAULT_LONG_SIDE`]).
    pub long_side: u32,
    /// Area of a fitted image, in pixels ([`DEFAULT_MAX_PIXELS`]).
    pub max_pixels: u64,
}

impl Default for ImageBudget {
    fn default() -> ImageBudget {
        ImageBudget {
            max_images: DEFAULT_MAX_IMAGES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            long_side: DEFAULT_LONG_SIDE,
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

/// An image fitted to a budget.
#[derive(Clone, PartialEq, Eq)]
pub struct FittedImage {
    /// The image's bytes: the input unchanged when `reencoded` is false.
    pub data: Vec<u8>,
    /// `data`'s format: PNG or JPEG.
    pub media_type: MediaType,
    pub width: u32,
    pub height: u32,
    /// The input's format and size (as turned by its EXIF orientation, if any).
    pub source_type: MediaType,
    pub source_width: u32,
    pub source_height: u32,
    /// Whether `data` was encoded here (resized, converted or rotated) rather than passed
    /// through.
    pub reencoded: bool,
}

impl fmt::Debug for FittedImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FittedImage")
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("media_type", &self.media_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("source_type", &self.source_type)
            .field("source_width", &self.source_width)
            .field("source_height", &self.source_height)
            .field("reencoded", &self.reencoded)
            .finish()
    }
}

/// Fits one image to `budget`'s pixel limits (`long_side`, `max_pixels`; the count and
/// the byte budget are [`select_images`]'s).
///
/// A PNG or JPEG within them is returned unchanged (after decoding it in full, so that a
/// corrupt file is refused here and not by the model's API); anything else is resized
/// (never enlarged) and re-encoded, as the module's documentation says.
pub fn fit_image(bytes: &[u8], budget: &ImageBudget) -> Result<FittedImage, ImageError> {
    let decoded = decode_and_fit(bytes, budget)?;
    Ok(decoded.into_fitted(bytes.to_vec()))
}

/// Why [`select_images`] left an image out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftOutReason {
    /// `max_images` images had been included already; this one was not looked at.
    OverCount { max_images: usize },
    /// Even shrunk to [`MIN_SHRINK_LONG_SIDE`] the image did not fit the bytes left to it.
    OverBytes {
        /// Bytes of the smallest encoding tried.
        bytes: usize,
        /// Bytes it was allowed.
        allowance: usize,
    },
    /// The image could not be fitted at all.
    Refused(ImageError),
}

impl fmt::Display for LeftOutReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftOutReason::OverCount { max_images } => {
                write!(f, "over the limit of {max_images} images in one result")
            }
            LeftOutReason::OverBytes { bytes, allowance } => write!(
                f,
                "over the result's image byte budget ({bytes} bytes at the smallest, \
                 {allowance} left for it)"
            ),
            LeftOutReason::Refused(e) => e.fmt(f),
        }
    }
}

/// An image that [`select_images`] included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncludedImage {
    /// Its position in the candidates.
    pub index: usize,
    pub path: String,
    pub image: FittedImage,
}

/// An image that [`select_images`] left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOutImage {
    /// Its position in the candidates.
    pub index: usize,
    pub path: String,
    pub reason: LeftOutReason,
}

/// What [`select_images`] made of the candidates: each candidate is in exactly one of the
/// lists, and both lists are in the candidates' order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageSelection {
    pub included: Vec<IncludedImage>,
    pub left_out: Vec<LeftOutImage>,
}

impl ImageSelection {
    /// Bytes of image data included.
    pub fn total_bytes(&self) -> usize {
        self.included.iter().map(|i| i.image.data.len()).sum()
    }
}

/// Fits the images of one result, `(path, bytes)` in order, to `budget`.
///
/// 1. In order, each candidate is fitted to the pixel budget ([`fit_image`]) until
///    `max_images` are; one that cannot be is left out with [`LeftOutReason::Refused`] and
///    takes no place; those after the count are left out with
///    [`LeftOutReason::OverCount`] without being decoded.
/// 2. If the fitted images are over `max_total_bytes` together, the budget is shared:
///    from the smallest image up, each may have what is left divided by the images not yet
///    served (so a small image's unused share goes to the larger ones, and no single
///    image crowds out the rest). An image over its share is re-encoded smaller: the same
///    size as PNG, then as JPEG if it is opaque, then each side three quarters of the last,
///    and so on down to [`MIN_SHRINK_LONG_SIDE`] (at most 8 sizes); if even that is over,
///    it is left out with [`LeftOutReason::OverBytes`] and its share goes to the images
///    served after it.
///
/// The included images never add up to more than `max_total_bytes`.
pub fn select_images<I>(candidates: I, budget: &ImageBudget) -> ImageSelection
where
    I: IntoIterator<Item = (String, Vec<u8>)>,
{
    let mut selection = ImageSelection::default();
    let mut fitted: Vec<(usize, String, Vec<u8>, Decoded)> = Vec::new();
    for (index, (path, bytes)) in candidates.into_iter().enumerate() {
        if fitted.len() >= budget.max_images {
            selection.left_out.push(LeftOutImage {
                index,
                path,
                reason: LeftOutReason::OverCount {
                    max_images: budget.max_images,
                },
            });
            continue;
        }
        match decode_and_fit(&bytes, budget) {
            Ok(decoded) => fitted.push((index, path, bytes, decoded)),
            Err(e) => selection.left_out.push(LeftOutImage {
                index,
                path,
                reason: LeftOutReason::Refused(e),
            }),
        }
    }

    // Share the byte budget, smallest first.
    let mut order: Vec<usize> = (0..fitted.len()).collect();
    order.sort_by_key(|&i| (fitted[i].3.len(fitted[i].2.len()), i));
    let mut remaining = budget.max_total_bytes;
    let mut outcomes: Vec<Option<Result<Shrunk, LeftOutReason>>> = vec![None; fitted.len()];
    for (served, &i) in order.iter().enumerate() {
        let allowance = remaining / (order.len() - served);
        let (_, _, bytes, decoded) = &fitted[i];
        let outcome = if decoded.len(bytes.len()) <= allowance {
            Ok(Shrunk::AsFitted)
        } else {
            shrink(decoded, bytes.len(), allowance).map(Shrunk::Smaller)
        };
        if let Ok(shrunk) = &outcome {
            remaining -= match shrunk {
                Shrunk::AsFitted => decoded.len(bytes.len()),
                Shrunk::Smaller(s) => s.data.len(),
            };
        }
        outcomes[i] = Some(outcome);
    }

    for ((index, path, bytes, decoded), outcome) in fitted.into_iter().zip(outcomes) {
        match outcome.expect("every fitted image was served") {
            Ok(Shrunk::AsFitted) => selection.included.push(IncludedImage {
                index,
                path,
                image: decoded.into_fitted(bytes),
            }),
            Ok(Shrunk::Smaller(encoded)) => selection.included.push(IncludedImage {
                index,
                path,
                image: FittedImage {
                    data: encoded.data,
                    media_type: encoded.media_type,
                    width: encoded.width,
                    height: encoded.height,
                    source_type: decoded.source_type,
                    source_width: decoded.source_width,
                    source_height: decoded.source_height,
                    reencoded: true,
                },
            }),
            Err(reason) => selection.left_out.push(LeftOutImage {
                index,
                path,
                reason,
            }),
        }
    }
    selection.left_out.sort_by_key(|l| l.index);
    selection
}

/// The size that `width`x`height` is fitted to: the largest within `long_side` and
/// `max_pixels` at the same aspect ratio (each side rounded down, at least 1), or the same
/// size when it is within them already.
pub fn fitted_size(width: u32, height: u32, long_side: u32, max_pixels: u64) -> (u32, u32) {
    let long_side = long_side.max(1);
    let max_pixels = max_pixels.max(1);
    let (w, h) = (width.max(1), height.max(1));
    let pixels = u64::from(w) * u64::from(h);
    if w.max(h) <= long_side && pixels <= max_pixels {
        return (w, h);
    }
    let scale = (f64::from(long_side) / f64::from(w.max(h)))
        .min((max_pixels as f64 / pixels as f64).sqrt())
        .min(1.0);
    let side = |s: u32, scale: f64| ((f64::from(s) * scale).floor() as u32).clamp(1, s);
    let (mut nw, mut nh) = (side(w, scale), side(h, scale));
    // Rounding could leave the product a pixel over; step the scale down until it is not.
    let mut scale = scale;
    while nw.max(nh) > long_side || u64::from(nw) * u64::from(nh) > max_pixels {
        scale *= 0.999;
        (nw, nh) = (side(w, scale), side(h, scale));
        if nw == 1 && nh == 1 {
            break;
        }
    }
    (nw, nh)
}

/// A decoded input, fitted to the pixel budget.
struct Decoded {
    source_type: MediaType,
    source_width: u32,
    source_height: u32,
    /// The fitted pixels, 8 bits a channel.
    image: DynamicImage,
    /// `None`: the input bytes are fit as they are.
    encoded: Option<Encoded>,
}

impl Decoded {
    /// Bytes of the fitted image, whose input had `input_len`.
    fn len(&self, input_len: usize) -> usize {
        self.encoded.as_ref().map_or(input_len, |e| e.data.len())
    }

    fn into_fitted(self, input: Vec<u8>) -> FittedImage {
        let (width, height) = self.image.dimensions();
        match self.encoded {
            None => FittedImage {
                data: input,
                media_type: self.source_type,
                width,
                height,
                source_type: self.source_type,
                source_width: self.source_width,
                source_height: self.source_height,
                reencoded: false,
            },
            Some(e) => FittedImage {
                data: e.data,
                media_type: e.media_type,
                width: e.width,
                height: e.height,
                source_type: self.source_type,
                source_width: self.source_width,
                source_height: self.source_height,
                reencoded: true,
            },
        }
    }
}

#[derive(Clone)]
struct Encoded {
    data: Vec<u8>,
    media_type: MediaType,
    width: u32,
    height: u32,
}

#[derive(Clone)]
enum Shrunk {
    AsFitted,
    Smaller(Encoded),
}

fn decode_and_fit(bytes: &[u8], budget: &ImageBudget) -> Result<Decoded, ImageError> {
    let source_type = MediaType::sniff(bytes).ok_or_else(|| {
        ImageError::Unsupported("not a PNG, JPEG, GIF or WebP file (by its first bytes)".into())
    })?;
    match catch_unwind(AssertUnwindSafe(|| {
        decode_and_fit_unguarded(bytes, source_type, budget)
    })) {
        Ok(result) => result,
        Err(_) => Err(ImageError::Decode(format!(
            "the {source_type} decoder failed (panicked)"
        ))),
    }
}

fn decode_and_fit_unguarded(
    bytes: &[u8],
    source_type: MediaType,
    budget: &ImageBudget,
) -> Result<Decoded, ImageError> {
    let (image, orientation) = decode(bytes, source_type)?;
    let quarter_turn = matches!(
        orientation,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    );
    let swap = |(w, h): (u32, u32)| if quarter_turn { (h, w) } else { (w, h) };
    let (source_width, source_height) = swap(image.dimensions());
    let (width, height) = fitted_size(
        source_width,
        source_height,
        budget.long_side,
        budget.max_pixels,
    );
    let passthrough = (width, height) == (source_width, source_height)
        && matches!(source_type, MediaType::Png | MediaType::Jpeg)
        && orientation == Orientation::NoTransforms;
    if passthrough {
        return Ok(Decoded {
            source_type,
            source_width,
            source_height,
            image: to_8bit(image),
            encoded: None,
        });
    }
    // Resized in the stored orientation, then turned: no full-size copy.
    let (stored_width, stored_height) = swap((width, height));
    let mut fitted = to_8bit(resize(image, stored_width, stored_height));
    fitted.apply_orientation(orientation);
    let encoded = if source_type == MediaType::Jpeg {
        encode_jpeg(&fitted)?
    } else {
        encode_png(&fitted)?
    };
    Ok(Decoded {
        source_type,
        source_width,
        source_height,
        image: fitted,
        encoded: Some(encoded),
    })
}

/// Decodes under the limits: the header is read and checked before any pixel buffer is
/// allocated.
fn decode(bytes: &[u8], source_type: MediaType) -> Result<(DynamicImage, Orientation), ImageError> {
    // The header is read with the memory limit only, so that its dimensions are known for
    // the error; no pixel buffer is allocated before they are checked below.
    let mut header_limits = Limits::default();
    header_limits.max_alloc = Some(MAX_DECODE_BYTES);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), source_type.format());
    reader.limits(header_limits);
    let mut decoder = reader.into_decoder().map_err(|e| match e {
        // The decoder's own memory limit on the header's account (`png` refuses a row
        // buffer of a 2^31 px wide image): report the dimensions if the header is plain.
        image::ImageError::Limits(_) => match plain_dimensions(bytes, source_type) {
            Some((width, height)) => ImageError::TooLarge { width, height },
            None => from_image_error(e),
        },
        e => from_image_error(e),
    })?;
    let (width, height) = decoder.dimensions();
    let too_large = ImageError::TooLarge { width, height };
    let max_pixels = match source_type {
        MediaType::Png => MAX_DECODE_PIXELS,
        _ => MAX_DECODE_PIXELS_OTHER,
    };
    if width.max(height) > MAX_DECODE_SIDE
        || u64::from(width) * u64::from(height) > max_pixels
        || decoder.total_bytes() > MAX_DECODE_BYTES
    {
        return Err(too_large);
    }
    if width == 0 || height == 0 {
        return Err(ImageError::Decode(format!("{width}x{height} px")));
    }
    // The decoder's own limits as well, for what it allocates besides the image buffer.
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_DECODE_SIDE);
    limits.max_image_height = Some(MAX_DECODE_SIDE);
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    decoder.set_limits(limits).map_err(|e| match e {
        image::ImageError::Limits(_) => too_large.clone(),
        e => from_image_error(e),
    })?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let image = DynamicImage::from_decoder(decoder).map_err(|e| match e {
        image::ImageError::Limits(_) => too_large,
        e => from_image_error(e),
    })?;
    Ok((image, orientation))
}

/// The dimensions in a PNG's IHDR (always the first chunk) or a GIF's logical screen.
fn plain_dimensions(bytes: &[u8], source_type: MediaType) -> Option<(u32, u32)> {
    match source_type {
        MediaType::Png if bytes.get(12..16)? == b"IHDR" => Some((
            u32::from_be_bytes(bytes.get(16..20)?.try_into().ok()?),
            u32::from_be_bytes(bytes.get(20..24)?.try_into().ok()?),
        )),
        MediaType::Gif => Some((
            u16::from_le_bytes(bytes.get(6..8)?.try_into().ok()?).into(),
            u16::from_le_bytes(bytes.get(8..10)?.try_into().ok()?).into(),
        )),
        _ => None,
    }
}

fn from_image_error(e: image::ImageError) -> ImageError {
    match e {
        image::ImageError::Unsupported(e) => ImageError::Unsupported(e.to_string()),
        image::ImageError::Encoding(e) => ImageError::Encode(e.to_string()),
        e => ImageError::Decode(e.to_string()),
    }
}

/// Resizes `image` to exactly `width`x`height` (a reduction).
fn resize(image: DynamicImage, width: u32, height: u32) -> DynamicImage {
    let (sw, sh) = image.dimensions();
    if (sw, sh) == (width, height) {
        return image;
    }
    let target = u64::from(width) * u64::from(height);
    let image = if u64::from(sw) * u64::from(sh) >= 16 * target {
        // Average boxes of pixels down to about twice the target in a single pass: fast
        // and without a floating-point copy of the source's size.
        let pre = image.thumbnail_exact(sw.min(2 * width), sh.min(2 * height));
        drop(image);
        pre
    } else {
        image
    };
    image.resize_exact(width, height, FilterType::CatmullRom)
}

/// The same pixels at 8 bits a channel, without an alpha channel that is opaque everywhere.
fn to_8bit(image: DynamicImage) -> DynamicImage {
    let image = match image {
        DynamicImage::ImageLuma8(_)
        | DynamicImage::ImageLumaA8(_)
        | DynamicImage::ImageRgb8(_)
        | DynamicImage::ImageRgba8(_) => image,
        DynamicImage::ImageLuma16(_) => DynamicImage::ImageLuma8(image.into_luma8()),
        DynamicImage::ImageLumaA16(_) => DynamicImage::ImageLumaA8(image.into_luma_alpha8()),
        DynamicImage::ImageRgb16(_) | DynamicImage::ImageRgb32F(_) => {
            DynamicImage::ImageRgb8(image.into_rgb8())
        }
        _ => DynamicImage::ImageRgba8(image.into_rgba8()),
    };
    match image {
        DynamicImage::ImageLumaA8(ref i) if i.pixels().all(|p| p.0[1] == u8::MAX) => {
            DynamicImage::ImageLuma8(image.into_luma8())
        }
        DynamicImage::ImageRgba8(ref i) if i.pixels().all(|p| p.0[3] == u8::MAX) => {
            DynamicImage::ImageRgb8(image.into_rgb8())
        }
        image => image,
    }
}

fn encode_png(image: &DynamicImage) -> Result<Encoded, ImageError> {
    let mut data = Vec::new();
    let encoder =
        PngEncoder::new_with_quality(&mut data, CompressionType::Default, PngFilter::Adaptive);
    image
        .write_with_encoder(encoder)
        .map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(Encoded {
        data,
        media_type: MediaType::Png,
        width: image.width(),
        height: image.height(),
    })
}

/// JPEG of an opaque 8-bit image (an alpha channel would be dropped).
fn encode_jpeg(image: &DynamicImage) -> Result<Encoded, ImageError> {
    let mut data = Vec::new();
    let encoder = JpegEncoder::new_with_quality(&mut data, JPEG_QUALITY);
    let result = match image {
        DynamicImage::ImageLuma8(_) | DynamicImage::ImageRgb8(_) => {
            image.write_with_encoder(encoder)
        }
        DynamicImage::ImageLumaA8(_) => {
            DynamicImage::ImageLuma8(image.to_luma8()).write_with_encoder(encoder)
        }
        _ => DynamicImage::ImageRgb8(image.to_rgb8()).write_with_encoder(encoder),
    };
    result.map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(Encoded {
        data,
        media_type: MediaType::Jpeg,
        width: image.width(),
        height: image.height(),
    })
}

/// The largest encoding of `decoded` (whose input had `input_len` bytes) within
/// `allowance` bytes, as [`select_images`] says: at the fitted size as PNG, then as JPEG if
/// opaque (skipping the encoding it has already), then each side three quarters of the
/// last (resampled from the fitted image each time), down to [`MIN_SHRINK_LONG_SIDE`].
fn shrink(decoded: &Decoded, input_len: usize, allowance: usize) -> Result<Encoded, LeftOutReason> {
    let opaque = !decoded.image.color().has_alpha();
    let known = decoded
        .encoded
        .as_ref()
        .map_or(decoded.source_type, |e| e.media_type);
    let mut smallest = decoded.len(input_len);
    let (width, height) = decoded.image.dimensions();
    let mut long = width.max(height);
    let mut image = None;
    loop {
        let current = image.as_ref().unwrap_or(&decoded.image);
        let mut tries = Vec::new();
        if image.is_some() || known != MediaType::Png {
            tries.push(MediaType::Png);
        }
        if opaque && (image.is_some() || known != MediaType::Jpeg) {
            tries.push(MediaType::Jpeg);
        }
        for media_type in tries {
            let encoded = match media_type {
                MediaType::Jpeg => encode_jpeg(current),
                _ => encode_png(current),
            }
            .map_err(LeftOutReason::Refused)?;
            if encoded.data.len() <= allowance {
                return Ok(encoded);
            }
            smallest = smallest.min(encoded.data.len());
        }
        if long <= MIN_SHRINK_LONG_SIDE {
            return Err(LeftOutReason::OverBytes {
                bytes: smallest,
                allowance,
            });
        }
        long = (long * 3 / 4).max(MIN_SHRINK_LONG_SIDE);
        let (nw, nh) = fitted_size(width, height, long, u64::MAX);
        image = Some(decoded.image.resize_exact(nw, nh, FilterType::CatmullRom));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba, RgbaImage};

    fn png_of(image: &DynamicImage) -> Vec<u8> {
        let mut out = Vec::new();
        let encoder = PngEncoder::new_with_quality(&mut out, CompressionType::Fast, PngFilter::Up);
        image.write_with_encoder(encoder).unwrap();
        out
    }

    fn jpeg_of(image: &DynamicImage) -> Vec<u8> {
        let mut out = Vec::new();
        image
            .write_with_encoder(JpegEncoder::new_with_quality(&mut out, 90))
            .unwrap();
        out
    }

    /// A plot-like image: smooth gradients and a few lines.
    fn plot(width: u32, height: u32) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_fn(width, height, |x, y| {
            if x % 97 == 0 || y % 89 == 0 {
                Rgb([0, 0, 0])
            } else {
                Rgb([(x * 255 / width) as u8, (y * 255 / height) as u8, 128])
            }
        }))
    }

    /// Noise, which compresses badly: for the byte budget.
    fn noise(width: u32, height: u32, seed: u32) -> DynamicImage {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        DynamicImage::ImageRgb8(RgbImage::from_fn(width, height, |_, _| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let [a, b, c, _] = state.to_le_bytes();
            Rgb([a, b, c])
        }))
    }

    fn decode_back(image: &FittedImage) -> DynamicImage {
        let format = match image.media_type {
            MediaType::Png => ImageFormat::Png,
            MediaType::Jpeg => ImageFormat::Jpeg,
            other => panic!("fitted to {other}"),
        };
        assert_eq!(MediaType::sniff(&image.data), Some(image.media_type));
        let decoded = image::load_from_memory_with_format(&image.data, format).unwrap();
        assert_eq!(decoded.dimensions(), (image.width, image.height));
        decoded
    }

    fn assert_within(image: &FittedImage, budget: &ImageBudget) {
        assert!(
            image.width.max(image.height) <= budget.long_side,
            "{image:?}"
        );
        assert!(
            u64::from(image.width) * u64::from(image.height) <= budget.max_pixels,
            "{image:?}"
        );
        assert!(image.width <= image.source_width && image.height <= image.source_height);
        // The aspect ratio: the short side is within a pixel of the exact scale.
        let (long, short) = (image.width.max(image.height), image.width.min(image.height));
        let (source_long, source_short) = (
            image.source_width.max(image.source_height),
            image.source_width.min(image.source_height),
        );
        let exact = f64::from(source_short) * f64::from(long) / f64::from(source_long);
        assert!(
            (exact - f64::from(short)).abs() <= 1.0,
            "{image:?}: {exact}"
        );
    }

    // ---- PNG crafting, for the bombs ----

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

    /// A valid PNG (signature, IHDR with its CRC, a tiny IDAT, IEND) declaring
    /// `width`x`height` of `color_type` at `bit_depth`; its data is a single deflate block
    /// of 64 zero bytes: a few rows at most.
    fn bomb_png(width: u32, height: u32, bit_depth: u8, color_type: u8) -> Vec<u8> {
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[bit_depth, color_type, 0, 0, 0]);
        chunk(&mut out, b"IHDR", &ihdr);
        // zlib: header, one stored final block of 64 zeros, Adler-32 of them.
        let mut idat = vec![0x78, 0x01, 0x01, 64, 0, !64, 0xff];
        idat.extend_from_slice(&[0; 64]);
        idat.extend_from_slice(&((64u32 << 16) | 1).to_be_bytes());
        chunk(&mut out, b"IDAT", &idat);
        chunk(&mut out, b"IEND", &[]);
        out
    }

    #[test]
    fn crafted_png_is_valid_when_small() {
        // The same crafting at a size within the limits decodes (7x8 grey: 8 rows of a
        // filter byte and 7 pixels, the 64 bytes of IDAT), which shows that the bombs
        // below are refused for their size and not for their bytes.
        let png = bomb_png(7, 8, 8, 0);
        let fitted = fit_image(&png, &ImageBudget::default()).unwrap();
        assert_eq!((fitted.width, fitted.height), (7, 8));
        assert!(!fitted.reencoded);
        assert_eq!(fitted.data, png);
    }

    #[test]
    fn sniffs_magic_bytes() {
        assert_eq!(
            MediaType::sniff(b"\x89PNG\r\n\x1a\nrest"),
            Some(MediaType::Png)
        );
        assert_eq!(MediaType::sniff(b"\xff\xd8\xff\xe0"), Some(MediaType::Jpeg));
        assert_eq!(MediaType::sniff(b"GIF89a..."), Some(MediaType::Gif));
        assert_eq!(
            MediaType::sniff(b"RIFF\0\0\0\0WEBPVP8 "),
            Some(MediaType::WebP)
        );
        assert_eq!(MediaType::sniff(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(MediaType::sniff(b"<svg"), None);
        assert_eq!(MediaType::sniff(b""), None);
        assert_eq!(MediaType::Jpeg.mime(), "image/jpeg");
    }

    #[test]
    fn fitted_size_rules() {
        let (l, p) = (DEFAULT_LONG_SIDE, DEFAULT_MAX_PIXELS);
        // Within: unchanged, never enlarged.
        assert_eq!(fitted_size(800, 600, l, p), (800, 600));
        assert_eq!(fitted_size(1, 1, l, p), (1, 1));
        assert_eq!(fitted_size(1568, 700, l, p), (1568, 700));
        // The pixel cap is the tighter one.
        assert_eq!(fitted_size(3000, 2000, l, p), (1313, 875));
        assert_eq!(fitted_size(10_000, 10_000, l, p), (1072, 1072));
        // The long side is the tighter one.
        assert_eq!(fitted_size(4000, 500, l, p), (1568, 196));
        assert_eq!(fitted_size(500, 4000, l, p), (196, 1568));
        // Extreme aspect: the short side stays at least 1.
        assert_eq!(fitted_size(16_384, 3, l, p), (1568, 1));
        for (w, h) in [
            (1569, 1),
            (1073, 1073),
            (2000, 2000),
            (16_384, 16_384),
            (7, 9000),
        ] {
            let (nw, nh) = fitted_size(w, h, l, p);
            assert!(
                nw.max(nh) <= l && u64::from(nw) * u64::from(nh) <= p,
                "{w}x{h}"
            );
            let exact = f64::from(w.min(h)) * f64::from(nw.max(nh)) / f64::from(w.max(h));
            assert!(
                (exact - f64::from(nw.min(nh))).abs() <= 1.0,
                "{w}x{h}: {nw}x{nh}"
            );
        }
    }

    #[test]
    fn small_png_passes_through_unchanged() {
        let png = png_of(&plot(640, 480));
        let fitted = fit_image(&png, &ImageBudget::default()).unwrap();
        assert_eq!(fitted.data, png, "the same bytes");
        assert!(!fitted.reencoded);
        assert_eq!(fitted.media_type, MediaType::Png);
        assert_eq!((fitted.width, fitted.height), (640, 480));
        assert_eq!((fitted.source_width, fitted.source_height), (640, 480));
    }

    #[test]
    fn png_3000x2000_is_fitted() {
        let source = plot(3000, 2000);
        let png = png_of(&source);
        let budget = ImageBudget::default();
        let fitted = fit_image(&png, &budget).unwrap();
        assert!(fitted.reencoded);
        assert_eq!(fitted.media_type, MediaType::Png);
        assert_eq!((fitted.width, fitted.height), (1313, 875));
        assert_eq!((fitted.source_width, fitted.source_height), (3000, 2000));
        assert_within(&fitted, &budget);
        let back = decode_back(&fitted).into_rgb8();
        // The content survived: the gradient's corners (away from the black lines).
        let near = |a: Rgb<u8>, b: [u8; 3]| a.0.iter().zip(b).all(|(&x, y)| x.abs_diff(y) <= 12);
        assert!(
            near(*back.get_pixel(5, 5), [0, 0, 128]),
            "{:?}",
            back.get_pixel(5, 5)
        );
        assert!(near(*back.get_pixel(1310, 872), [255, 255, 128]));
    }

    #[test]
    fn png_10000x10000_is_downscaled() {
        // Four colour quadrants with a thin grid: built row by row (a debug build is slow
        // per pixel), and very compressible, so the PNG is small.
        let (w, h) = (10_000usize, 10_000usize);
        let row = |top: bool| -> Vec<u8> {
            let mut r = Vec::with_capacity(w * 3);
            for x in 0..w {
                let px = match (top, x < w / 2) {
                    _ if x % 1000 == 0 => [0, 0, 0],
                    (true, true) => [255, 0, 0],
                    (true, false) => [0, 255, 0],
                    (false, true) => [0, 0, 255],
                    (false, false) => [255, 255, 255],
                };
                r.extend_from_slice(&px);
            }
            r
        };
        let (top, bottom) = (row(true), row(false));
        let mut raw = Vec::with_capacity(w * h * 3);
        for y in 0..h {
            raw.extend_from_slice(if y < h / 2 { &top } else { &bottom });
        }
        let source = RgbImage::from_raw(w as u32, h as u32, raw).unwrap();
        let png = png_of(&DynamicImage::ImageRgb8(source));
        assert!(png.len() < 8 << 20, "the test PNG is {} bytes", png.len());

        let budget = ImageBudget::default();
        let fitted = fit_image(&png, &budget).unwrap();
        assert!(fitted.reencoded);
        assert_eq!(
            (fitted.source_width, fitted.source_height),
            (10_000, 10_000)
        );
        assert_eq!((fitted.width, fitted.height), (1072, 1072));
        assert_within(&fitted, &budget);
        let back = decode_back(&fitted).into_rgb8();
        assert_eq!(back.get_pixel(200, 200).0, [255, 0, 0]);
        assert_eq!(back.get_pixel(900, 200).0, [0, 255, 0]);
        assert_eq!(back.get_pixel(200, 900).0, [0, 0, 255]);
        assert_eq!(back.get_pixel(900, 900).0, [255, 255, 255]);
    }

    /// The bombs: valid PNG headers declaring sizes over the limits.
    fn bombs() -> Vec<(u32, u32, Vec<u8>)> {
        vec![
            (100_000, 100_000, bomb_png(100_000, 100_000, 8, 6)),
            (65_535, 65_535, bomb_png(65_535, 65_535, 16, 6)),
            // Each side within MAX_DECODE_SIDE, but 256 megapixels.
            (16_000, 16_000, bomb_png(16_000, 16_000, 8, 0)),
            // 100 megapixels, but 16-bit RGBA: 800 MB decoded.
            (10_000, 10_000, bomb_png(10_000, 10_000, 16, 6)),
            // The largest width PNG allows, one row.
            (0x7fff_ffff, 1, bomb_png(0x7fff_ffff, 1, 8, 2)),
        ]
    }

    const BOMB_CHILD: &str = "VIVARIUM_IMAGES_BOMB_CHILD";

    fn status_kib(field: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// The bombs are refused with `TooLarge`, and in a process whose address space may grow
    /// by only 64 MiB: an allocation of the declared size (40 GB for the first) would fail,
    /// abort the child and fail the test. The other tests run in other threads of this
    /// process and allocate hundreds of MB, so the check runs in a child (this test binary
    /// re-run on `bomb_child` alone); its peak RSS (VmHWM) is printed for the record.
    #[test]
    fn decompression_bombs_are_refused_in_bounded_memory() {
        // In this process too: the error and its dimensions.
        for (width, height, png) in bombs() {
            assert!(png.len() < 200, "{} bytes", png.len());
            assert_eq!(
                fit_image(&png, &ImageBudget::default()),
                Err(ImageError::TooLarge { width, height })
            );
        }
        let exe = std::env::current_exe().unwrap();
        let output = std::process::Command::new(exe)
            .args([
                "images::tests::bomb_child",
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
        let line = stdout
            .lines()
            .find_map(|l| l.find("bomb child ok").map(|at| &l[at..]))
            .unwrap_or_else(|| panic!("the child did not run: {stdout}\n{stderr}"));
        eprintln!("{line}");
    }

    /// The child of `decompression_bombs_are_refused_in_bounded_memory`; does nothing
    /// unless run by it.
    #[test]
    fn bomb_child() {
        if std::env::var_os(BOMB_CHILD).is_none() {
            return;
        }
        use nix::sys::resource::{setrlimit, Resource};
        let bombs = bombs();
        let before_kib = status_kib("VmSize:");
        let hwm_before_kib = status_kib("VmHWM:");
        let limit = (before_kib << 10) + (64 << 20);
        setrlimit(Resource::RLIMIT_AS, limit, limit).unwrap();
        for (width, height, png) in &bombs {
            let result = fit_image(png, &ImageBudget::default());
            assert_eq!(
                result,
                Err(ImageError::TooLarge {
                    width: *width,
                    height: *height
                })
            );
        }
        println!(
            "bomb child ok: {} bombs refused under RLIMIT_AS = VmSize + 64 MiB; \
             VmHWM {hwm_before_kib} KiB before, {} KiB after",
            bombs.len(),
            status_kib("VmHWM:")
        );
    }

    #[test]
    fn garbage_is_refused() {
        let budget = ImageBudget::default();
        assert!(matches!(
            fit_image(b"", &budget),
            Err(ImageError::Unsupported(_))
        ));
        assert!(matches!(
            fit_image(b"<svg xmlns='http://www.w3.org/2000/svg'/>", &budget),
            Err(ImageError::Unsupported(_))
        ));
        // Right magic, garbage after it.
        for bytes in [
            &b"\x89PNG\r\n\x1a\ngarbage garbage garbage"[..],
            b"\xff\xd8\xff\xe0garbage garbage garbage",
            b"GIF89agarbage",
            b"RIFF\x10\0\0\0WEBPgarbage!",
        ] {
            let result = fit_image(bytes, &budget);
            assert!(
                matches!(result, Err(ImageError::Decode(_))),
                "{:?}: {result:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        // A real PNG cut short.
        let png = png_of(&plot(300, 200));
        let result = fit_image(&png[..png.len() / 2], &budget);
        assert!(matches!(result, Err(ImageError::Decode(_))), "{result:?}");
        // A JPEG header declaring 65500x65500.
        let mut jpeg = jpeg_of(&plot(64, 48));
        let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap();
        jpeg[sof + 5..sof + 9].copy_from_slice(&[0xff, 0xdc, 0xff, 0xdc]);
        assert_eq!(
            fit_image(&jpeg, &budget),
            Err(ImageError::TooLarge {
                width: 65_500,
                height: 65_500
            })
        );
        // And 8000x8000: within the sides, over the 50 MP of a JPEG.
        jpeg[sof + 5..sof + 9].copy_from_slice(&[0x1f, 0x40, 0x1f, 0x40]);
        assert_eq!(
            fit_image(&jpeg, &budget),
            Err(ImageError::TooLarge {
                width: 8000,
                height: 8000
            })
        );
    }

    #[test]
    fn jpeg_input_works() {
        let budget = ImageBudget::default();
        // Within budget: passed through.
        let small = jpeg_of(&plot(800, 600));
        let fitted = fit_image(&small, &budget).unwrap();
        assert_eq!(fitted.data, small);
        assert_eq!(fitted.media_type, MediaType::Jpeg);
        assert!(!fitted.reencoded);
        // Over: resized and still a JPEG.
        let large = jpeg_of(&plot(2400, 1600));
        let fitted = fit_image(&large, &budget).unwrap();
        assert!(fitted.reencoded);
        assert_eq!(fitted.media_type, MediaType::Jpeg);
        assert_eq!((fitted.source_width, fitted.source_height), (2400, 1600));
        assert_eq!((fitted.width, fitted.height), (1313, 875));
        assert_within(&fitted, &budget);
        decode_back(&fitted);
    }

    #[test]
    fn exif_orientation_is_applied() {
        use image::ImageEncoder;
        // Exif (big-endian TIFF): one IFD entry, Orientation (0x112) = 6, "rotate 90 cw".
        let mut exif = b"MM\0\x2a\0\0\0\x08\0\x01".to_vec();
        exif.extend_from_slice(&[0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0]);
        let jpeg = |w: u32, h: u32| {
            // Left half red, right half blue.
            let image = DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, _| {
                if x < w / 2 {
                    Rgb([255, 0, 0])
                } else {
                    Rgb([0, 0, 255])
                }
            }));
            let mut out = Vec::new();
            let mut encoder = JpegEncoder::new_with_quality(&mut out, 90);
            encoder.set_exif_metadata(exif.clone()).unwrap();
            encoder
                .write_image(image.as_bytes(), w, h, image.color().into())
                .unwrap();
            out
        };
        let budget = ImageBudget::default();
        for (w, h, fitted_w, fitted_h) in [(300, 200, 200, 300), (2400, 1600, 875, 1313)] {
            let fitted = fit_image(&jpeg(w, h), &budget).unwrap();
            assert!(fitted.reencoded, "turned, so not passed through");
            assert_eq!((fitted.source_width, fitted.source_height), (h, w));
            assert_eq!((fitted.width, fitted.height), (fitted_w, fitted_h));
            assert_within(&fitted, &budget);
            // Turned clockwise: the left (red) half is now on top.
            let back = decode_back(&fitted).into_rgb8();
            let top = back.get_pixel(fitted_w / 2, fitted_h / 8).0;
            let bottom = back.get_pixel(fitted_w / 2, fitted_h * 7 / 8).0;
            assert!(top[0] > 200 && top[2] < 60, "{top:?}");
            assert!(bottom[2] > 200 && bottom[0] < 60, "{bottom:?}");
        }
    }

    #[test]
    fn gif_and_rgba_are_converted() {
        let budget = ImageBudget::default();
        // A GIF within budget is still converted (to PNG).
        let mut gif = Vec::new();
        plot(120, 80)
            .write_to(&mut Cursor::new(&mut gif), ImageFormat::Gif)
            .unwrap();
        let fitted = fit_image(&gif, &budget).unwrap();
        assert!(fitted.reencoded);
        assert_eq!(fitted.media_type, MediaType::Png);
        assert_eq!((fitted.width, fitted.height), (120, 80));
        decode_back(&fitted);
        // A translucent RGBA PNG keeps its alpha; an opaque one loses the channel.
        let translucent = DynamicImage::ImageRgba8(RgbaImage::from_fn(2000, 100, |x, _| {
            Rgba([255, 0, 0, (x % 256) as u8])
        }));
        let fitted = fit_image(&png_of(&translucent), &budget).unwrap();
        assert_eq!((fitted.width, fitted.height), (1568, 78));
        assert!(decode_back(&fitted).color().has_alpha());
        let opaque = DynamicImage::ImageRgba8(plot(2000, 100).to_rgba8());
        let fitted = fit_image(&png_of(&opaque), &budget).unwrap();
        assert!(!decode_back(&fitted).color().has_alpha());
    }

    #[test]
    fn count_budget_leaves_out_the_rest_in_order() {
        let budget = ImageBudget::default();
        let png = png_of(&plot(200, 100));
        let candidates: Vec<(String, Vec<u8>)> = (0..30)
            .map(|i| (format!("out/plot{i}.png"), png.clone()))
            .collect();
        let selection = select_images(candidates, &budget);
        assert_eq!(selection.included.len(), budget.max_images);
        assert_eq!(selection.left_out.len(), 30 - budget.max_images);
        for (i, included) in selection.included.iter().enumerate() {
            assert_eq!(included.index, i);
            assert_eq!(included.path, format!("out/plot{i}.png"));
            assert_eq!(included.image.data, png);
        }
        for (i, left_out) in selection.left_out.iter().enumerate() {
            assert_eq!(left_out.index, budget.max_images + i);
            assert_eq!(
                left_out.reason,
                LeftOutReason::OverCount {
                    max_images: budget.max_images
                }
            );
        }
        assert!(selection.left_out[0]
            .reason
            .to_string()
            .contains("8 images"));
    }

    #[test]
    fn refused_images_take_no_place() {
        let budget = ImageBudget {
            max_images: 2,
            ..ImageBudget::default()
        };
        let png = png_of(&plot(100, 100));
        let candidates = vec![
            ("a.txt".to_string(), b"hello".to_vec()),
            ("b.png".to_string(), png.clone()),
            ("bomb.png".to_string(), bomb_png(100_000, 100_000, 8, 6)),
            ("c.png".to_string(), png.clone()),
            ("d.png".to_string(), png.clone()),
        ];
        let selection = select_images(candidates, &budget);
        let included: Vec<&str> = selection.included.iter().map(|i| &*i.path).collect();
        assert_eq!(included, ["b.png", "c.png"]);
        let left_out: Vec<(&str, &LeftOutReason)> = selection
            .left_out
            .iter()
            .map(|l| (&*l.path, &l.reason))
            .collect();
        assert!(matches!(
            left_out[0],
            ("a.txt", LeftOutReason::Refused(ImageError::Unsupported(_)))
        ));
        assert_eq!(
            left_out[1],
            (
                "bomb.png",
                &LeftOutReason::Refused(ImageError::TooLarge {
                    width: 100_000,
                    height: 100_000
                })
            )
        );
        assert_eq!(
            left_out[2],
            ("d.png", &LeftOutReason::OverCount { max_images: 2 })
        );
    }

    #[test]
    fn byte_budget_is_respected() {
        // Noise PNGs of 800x600 are about 1.4 MB each: over any share of 600 KiB.
        let budget = ImageBudget::default();
        let noisy: Vec<Vec<u8>> = (0..3).map(|s| png_of(&noise(800, 600, s + 1))).collect();
        assert!(noisy.iter().all(|p| p.len() > 1_000_000));
        let small = png_of(&plot(300, 200));
        let mut candidates = vec![("small.png".to_string(), small.clone())];
        candidates.extend(
            noisy
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("noise{i}.png"), p.clone())),
        );
        let selection = select_images(candidates, &budget);
        assert!(selection.total_bytes() <= budget.max_total_bytes);
        assert_eq!(selection.included.len(), 4, "{:?}", selection.left_out);
        // The small one is as it was; the noisy ones were made smaller, as JPEG (opaque)
        // at full size if that fits their share, and never enlarged.
        assert_eq!(selection.included[0].image.data, small);
        for included in &selection.included[1..] {
            let image = &included.image;
            assert!(image.reencoded);
            assert_eq!(image.media_type, MediaType::Jpeg);
            assert!(image.data.len() <= (budget.max_total_bytes - small.len()) / 3 + 1);
            assert_within(image, &budget);
            decode_back(image);
        }

        // A budget too small for even the smallest shrink: left out with the reason, and
        // the byte budget still holds.
        let tight = ImageBudget {
            max_total_bytes: 2_000,
            ..ImageBudget::default()
        };
        let candidates = vec![
            ("noise.png".to_string(), noisy[0].clone()),
            ("tiny.png".to_string(), png_of(&plot(8, 8))),
        ];
        let selection = select_images(candidates, &tight);
        assert!(selection.total_bytes() <= tight.max_total_bytes);
        let included: Vec<&str> = selection.included.iter().map(|i| &*i.path).collect();
        assert_eq!(included, ["tiny.png"]);
        assert_eq!(selection.left_out.len(), 1);
        match &selection.left_out[0].reason {
            LeftOutReason::OverBytes { bytes, allowance } => {
                assert!(bytes > allowance && *allowance <= 2_000);
            }
            other => panic!("{other:?}"),
        }
        assert!(selection.left_out[0]
            .reason
            .to_string()
            .contains("byte budget"));
    }
}
