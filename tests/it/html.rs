//! `capcard report DIR --html` opened in a real browser: headless Chromium
//! (Debian's `chromium`) loads the page from disk, as a double-click would.
//!
//! What it proves, on the page of a real results folder:
//! - the page's own text: no `http(s)://` and no `src=` anywhere, one
//!   `<svg` per chart file in the folder;
//! - Chromium's DOM after load and layout (`--dump-dom`): every chart was
//!   parsed as an SVG element (an escaped or broken one would be text),
//!   each with a positive width, height and viewBox, which with the page's
//!   `width:100%; height:auto` gives it a non-empty box; the outline
//!   (headings, tables, charts, contents list) is snapshotted with insta;
//! - no request left the file: Chromium's own network log
//!   (`--log-net-log`) holds no request made by the page, with every host
//!   name mapped to NOTFOUND besides; a control page with an external image
//!   and stylesheet shows that this log does catch a page's requests;
//! - the screenshot (`--screenshot`, the whole page in one window) is a PNG
//!   of the window's size, and its pixels hold the charts' colours (the
//!   page's own are greys and one link blue): the charts painted, in boxes
//!   of some size. It checks structure, not pixels against a reference.
//!
//! It does not measure each chart's box (that needs script in the page or
//! a DevTools session); it does not judge looks. Without a `chromium` (or
//! `chromium-headless-shell`) on PATH the browser half skips, saying how to
//! install one; `.ci/run` installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::capcard;

/// The browser on PATH, if any.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-headless-shell"]
        .iter()
        .find_map(|name| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
}

fn skip_without_chromium() -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        eprintln!(
            "SKIPPED: the browser checks of `capcard report --html` need headless Chromium; \
             none on PATH (`chromium` or `chromium-headless-shell`). Install it with \
             `apt-get install -y chromium` (Debian; .ci/run does this)."
        );
    }
    found
}

/// A results folder from `experiment` in virtual time (a second or two),
/// with its page written: the folder, the page's path and text.
fn folder_with_page(experiment: &str) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let out = dir.path().join("results");
    capcard()
        // A fixed nonce: the same request stream, so the same card outline.
        .args([
            "run",
            experiment,
            "--virtual",
            "--quiet",
            "--nonce",
            "7",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let assert = capcard()
        .arg("report")
        .arg(&out)
        .arg("--html")
        .assert()
        .success();
    let page = out.join("report.html");
    let printed = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
    assert_eq!(printed.trim(), page.display().to_string());
    let text = std::fs::read_to_string(&page).expect("report.html written");
    (dir, page, text)
}

/// The chart files `capcard run` left in the folder.
fn chart_files(folder: &Path) -> usize {
    std::fs::read_dir(folder)
        .expect("the results folder")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "svg"))
        .count()
}

/// Chromium on `url`, headless, in a profile of its own under `scratch`,
/// every host name resolving to nothing and its network log written to
/// `scratch/net.json`; `extra` says what to produce. Its stdout.
fn run_chromium(browser: &Path, scratch: &Path, url: &str, extra: &[&str]) -> String {
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--run-all-compositor-stages-before-draw",
            "--virtual-time-budget=5000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .arg(format!(
            "--log-net-log={}",
            scratch.join("net.json").display()
        ))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium starts");
    assert!(
        output.status.success(),
        "chromium {extra:?} {url} exited {:?}:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The URLs a page asked the network for, from Chromium's network log: the
/// requests whose site is the `file://` page (the browser's own background
/// requests have another or none).
fn page_requests(net_log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(net_log).expect("chromium wrote its network log");
    let log: serde_json::Value = serde_json::from_str(&text).expect("the network log is JSON");
    let events = log["events"].as_array().cloned().unwrap_or_default();
    let mut urls: Vec<String> = events
        .iter()
        .filter_map(|event| {
            let params = &event["params"];
            let url = params["url"].as_str()?;
            let from_page = params["network_isolation_key"]
                .as_str()
                .is_some_and(|k| k.starts_with("file://"))
                || params["site_for_cookies"]
                    .as_str()
                    .is_some_and(|s| s.contains("site=file://"));
            from_page.then(|| url.to_string())
        })
        .collect();
    urls.sort();
    urls.dedup();
    urls
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// The value of `name="..."` in one start tag.
fn attribute<'t>(tag: &'t str, name: &str) -> Option<&'t str> {
    let needle = format!(" {name}=\"");
    let at = tag.find(&needle)? + needle.len();
    tag[at..].find('"').map(|end| &tag[at..at + end])
}

/// Each start tag `<name ...>` in the serialized DOM.
fn start_tags<'d>(dom: &'d str, name: &str) -> Vec<&'d str> {
    let open = format!("<{name}");
    dom.match_indices(&open)
        .filter(|(at, _)| dom[at + open.len()..].starts_with([' ', '>']))
        .filter_map(|(at, _)| dom[at..].find('>').map(|end| &dom[at..=at + end]))
        .collect()
}

/// The text of each `<hN>` element, as `"hN text"`, tags stripped.
fn headings(dom: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(at) = rest.find("<h") {
        let tail = &rest[at + 2..];
        let level = tail.chars().next().filter(|c| ('1'..='6').contains(c));
        let close = level.map(|l| format!("</h{l}>"));
        match (
            level,
            close.and_then(|c| tail.find(&c).map(|end| (end, c.len()))),
        ) {
            (Some(level), Some((end, close_len))) if tail[1..].starts_with(['>', ' ']) => {
                let inner = &tail[..end];
                let inner = inner.find('>').map_or(inner, |gt| &inner[gt + 1..]);
                let mut text = String::new();
                let mut in_tag = false;
                for c in inner.chars() {
                    match c {
                        '<' => in_tag = true,
                        '>' => in_tag = false,
                        c if !in_tag => text.push(c),
                        _ => {}
                    }
                }
                let text = text
                    .replace("&amp;", "&")
                    .replace("&lt;", "<")
                    .replace("&gt;", ">");
                out.push(format!("h{level} {}", text.trim()));
                rest = &tail[end + close_len..];
            }
            _ => rest = tail,
        }
    }
    out
}

fn positive(value: Option<&str>) -> bool {
    value
        .and_then(|v| v.trim_end_matches("px").parse::<f64>().ok())
        .is_some_and(|v| v > 0.0)
}

/// `--out FILE` writes the page there and leaves the folder as it was.
#[test]
fn html_with_out_writes_only_that_file() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let out = dir.path().join("results");
    capcard()
        .args([
            "run",
            "experiments/quickstart.kdl",
            "--virtual",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let before: Vec<_> = std::fs::read_dir(&out)
        .expect("the folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    let page = dir.path().join("shared.html");
    capcard()
        .arg("report")
        .arg(&out)
        .args(["--html", "--out"])
        .arg(&page)
        .assert()
        .success()
        .stdout(format!("{}\n", page.display()));
    let after: Vec<_> = std::fs::read_dir(&out)
        .expect("the folder")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(before, after);
    let text = std::fs::read_to_string(&page).expect("the page written");
    assert!(text.starts_with("<!DOCTYPE html>"));
    assert!(text.contains("<title>Capacity card: tiny × chat-small</title>"));
}

#[test]
fn the_page_loads_in_chromium_whole_and_offline() {
    let (dir, page, text) = folder_with_page("experiments/gpu-compare.kdl");
    let charts = chart_files(page.parent().expect("the folder"));
    assert!(charts >= 2, "gpu-compare draws charts");
    // The page's own text, browser or not.
    assert!(!text.contains("http://") && !text.contains("https://"));
    assert!(!text.contains("src="));
    assert_eq!(text.matches("<svg").count(), charts);

    let Some(browser) = skip_without_chromium() else {
        return;
    };
    let scratch = dir.path().join("chromium");
    let dom = run_chromium(&browser, &scratch, &file_url(&page), &["--dump-dom"]);
    assert!(dom.contains("</html>"), "no DOM dumped:\n{dom}");

    // Every chart an SVG element with a size.
    let svgs = start_tags(&dom, "svg");
    assert_eq!(svgs.len(), charts, "{svgs:?}");
    assert!(!dom.contains("&lt;svg"), "a chart was read as text");
    for svg in &svgs {
        assert!(positive(attribute(svg, "width")), "{svg}");
        assert!(positive(attribute(svg, "height")), "{svg}");
        let view_box: Vec<f64> = attribute(svg, "viewBox")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        assert!(
            view_box.len() == 4 && view_box[2] > 0.0 && view_box[3] > 0.0,
            "{svg}"
        );
    }

    // Nothing fetched: the page asked for nothing...
    let requests = page_requests(&scratch.join("net.json"));
    assert!(requests.is_empty(), "the page made requests: {requests:?}");
    // ... and the log would have said so: a page that does fetch.
    let control = dir.path().join("control.html");
    std::fs::write(
        &control,
        "<!DOCTYPE html><p>control</p><img src=\"http://capcard-control.invalid/x.png\">\
         <link rel=\"stylesheet\" href=\"https://capcard-control.invalid/a.css\">",
    )
    .expect("the control page written");
    let control_scratch = dir.path().join("chromium-control");
    run_chromium(
        &browser,
        &control_scratch,
        &file_url(&control),
        &["--dump-dom"],
    );
    let caught = page_requests(&control_scratch.join("net.json"));
    assert!(
        caught
            .iter()
            .any(|u| u.contains("capcard-control.invalid/x.png"))
            && caught
                .iter()
                .any(|u| u.contains("capcard-control.invalid/a.css")),
        "the network log missed the control page's requests: {caught:?}"
    );

    // The outline, as Chromium parsed it.
    let nav_entries = dom
        .find("<nav")
        .and_then(|start| {
            dom[start..]
                .find("</nav>")
                .map(|end| &dom[start..start + end])
        })
        .map_or(0, |nav| nav.matches("<li>").count());
    let mut outline = vec![
        format!("contents entries: {nav_entries}"),
        format!("sections: {}", start_tags(&dom, "section").len()),
        format!("tables: {}", start_tags(&dom, "table").len()),
        format!("charts (svg): {}", svgs.len()),
        format!("figures: {}", start_tags(&dom, "figure").len()),
        format!("scripts: {}", start_tags(&dom, "script").len()),
        format!("images (img): {}", start_tags(&dom, "img").len()),
    ];
    outline.extend(headings(&dom));
    insta::assert_snapshot!("gpu_compare_page_outline", outline.join("\n"));
}

/// The PNG's width and height (its IHDR), and its pixels as RGB(A) rows,
/// for 8-bit RGB or RGBA without interlacing (what Chromium writes).
fn decode_png(bytes: &[u8]) -> (u32, u32, usize, Vec<u8>) {
    use std::io::Read;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be32 =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let (width, height) = (be32(16), be32(20));
    let (depth, colour, interlace) = (bytes[24], bytes[25], bytes[28]);
    assert_eq!((depth, interlace), (8, 0), "8-bit, not interlaced");
    let channels = match colour {
        2 => 3,
        6 => 4,
        other => panic!("PNG colour type {other}"),
    };
    let mut idat = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let len = be32(at) as usize;
        let kind = &bytes[at + 4..at + 8];
        if kind == b"IDAT" {
            idat.extend_from_slice(&bytes[at + 8..at + 8 + len]);
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(idat.as_slice())
        .read_to_end(&mut raw)
        .expect("the PNG's data inflates");
    // Undo each row's filter (PNG spec, section 9).
    let stride = width as usize * channels;
    let mut pixels = vec![0u8; stride * height as usize];
    for y in 0..height as usize {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for x in 0..stride {
            let a = if x >= channels {
                pixels[y * stride + x - channels]
            } else {
                0
            };
            let b = if y > 0 {
                pixels[(y - 1) * stride + x]
            } else {
                0
            };
            let c = if y > 0 && x >= channels {
                pixels[(y - 1) * stride + x - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = (
                        (p - a as i16).abs(),
                        (p - b as i16).abs(),
                        (p - c as i16).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            pixels[y * stride + x] = line[x].wrapping_add(predicted);
        }
    }
    (width, height, channels, pixels)
}

#[test]
fn a_screenshot_of_the_page_shows_its_charts() {
    let (dir, page, text) = folder_with_page("experiments/quickstart.kdl");
    let charts = chart_files(page.parent().expect("the folder"));
    assert_eq!(text.matches("<svg").count(), charts);
    let Some(browser) = skip_without_chromium() else {
        return;
    };
    let scratch = dir.path().join("chromium");
    let shot = dir.path().join("page.png");
    // One window as tall as the whole page (about 10,000 pixels at this
    // width), so that every chart is in the picture.
    let (width, height) = (1280u32, 14000u32);
    run_chromium(
        &browser,
        &scratch,
        &file_url(&page),
        &[
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", shot.display()),
        ],
    );
    let bytes = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert!(
        bytes.len() > 100_000,
        "a {} byte screenshot is too plain",
        bytes.len()
    );
    let (w, h, channels, pixels) = decode_png(&bytes);
    assert_eq!((w, h), (width, height));
    // Saturated pixels: only the charts draw them (bands, curves, markers);
    // the page is greys, with one blue link. Each chart paints thousands.
    let saturated = pixels
        .chunks_exact(channels)
        .filter(|p| {
            let (lo, hi) = (p[..3].iter().min(), p[..3].iter().max());
            matches!((lo, hi), (Some(lo), Some(hi)) if hi - lo >= 60)
        })
        .count();
    assert!(
        saturated >= 5_000 * charts,
        "{saturated} coloured pixels for {charts} charts"
    );
    // The page ends inside the window: its last rows are blank.
    let last_rows = &pixels[(h as usize - 50) * w as usize * channels..];
    assert!(
        last_rows
            .chunks_exact(channels)
            .all(|p| p[..3] == [255, 255, 255]),
        "the page is taller than the window"
    );
}
