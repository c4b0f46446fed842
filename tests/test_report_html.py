"""The HTML page (report/html.py, `peakbench report ... --html`, `--html` on a run): which page a
set of documents gets, a structure that closes every element it opens, hostile names escaped, no
reference that leaves the page, the JSON block's sha256 that of the file, unsupported rows folded
with their categories, a fleet's flagged GPUs first, and the CLI's errors as one line."""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("matplotlib")

from test_cli import assert_usage_error, cli_main, fake, files, run_fake  # noqa: E402,F401  (fixtures)
from test_fleet import CUDA, VULKAN, node, scale, uuid_of  # noqa: E402

from peakbench.report import html  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "results" / "nvidia-h200"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_EMPTY = {"path", "use", "rect", "circle", "line", "polyline", "polygon", "stop", "image", "ellipse"}


class Page(HTMLParser):
    """A page read back: every element opened is closed in order (HTML's void elements aside),
    its ids, every attribute, the text, and the JSON block."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.stack, self.problems, self.ids, self.attributes = [], [], [], []
        self.text, self.tags, self.block = [], [], None
        self._in_block = False
        self.feed(text)
        self.close()
        if self.stack:
            self.problems.append(f"left open: {self.stack}")

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        self.attributes.append((tag, attrs))
        if "id" in attrs:
            self.ids.append(attrs["id"])
        self._in_block = tag == "script" and attrs.get("id") == "peakbench-source"
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data):
        if self._in_block:
            self.block = json.loads(data)
            self._in_block = False
        self.text.append(data)

    @property
    def words(self) -> str:
        return " ".join(" ".join(self.text).split())


def render(*docs: tuple[str, dict]) -> str:
    return html.report(list(docs), [html.source(name, json.dumps(doc).encode(), doc) for name, doc in docs])


def loaded(path: Path) -> tuple[str, dict]:
    from peakbench.report.result import load_json
    return str(path.relative_to(ROOT)), load_json(path)


@functools.cache
def cuda_page() -> str:
    return render(loaded(H200 / "cuda-0.1.0.json"))


@functools.cache
def comparison_page() -> str:
    """Vulkan (A) against CUDA (B) on the H200: the pages made once a module, each takes a second."""
    return render(loaded(H200 / "vulkan-0.1.0.json"), loaded(H200 / "cuda-0.1.0.json"))


def planted_fleet(hosts: int = 4, backends=(CUDA,)) -> dict[str, dict]:
    """8 H200s on 4 hosts (test_fleet's copies of the real run), node2's second GPU 10% slow at
    compute.fp32 and memory.read."""
    docs = {f"node{h}.json": node(h, backends=backends) for h in range(hosts)}
    for backend in ("cuda", "vulkan")[:len(backends)]:
        scale(docs["node2.json"], 1, backend, "compute.fp32", 0.9)
        scale(docs["node2.json"], 1, backend, "memory.read", 0.9)
    return docs


def external(page: Page, text: str) -> list[str]:
    """Everything that would make the browser fetch: a URL in an attribute that is not a fragment
    or data, an element that loads by nature, CSS url() and @import that leave the page."""
    found = [f"<{tag}>" for tag, _ in page.attributes if tag in ("link", "iframe", "object", "embed", "base")]
    for tag, attrs in page.attributes:
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "action", "poster", "srcset", "data") and value \
                    and not value.startswith(("#", "data:")):
                found.append(f"<{tag} {name}={value!r}>")
            if name == "style" and re.search(r"url\((?!\s*['\"]?(#|data:))", value or ""):
                found.append(f"<{tag} style={value!r}>")
        if tag == "script" and (attrs.get("src") or attrs.get("type") != "application/json"):
            found.append(f"<script {attrs}>")
    found += re.findall(r"url\(\s*['\"]?(?!#|data:)[^)]*\)|@import|@font-face", " ".join(
        m for m in re.findall(r"<style[^>]*>(.*?)</style>", text, re.S)))
    return found


# -- which page ------------------------------------------------------------------------------

def test_one_run_makes_a_run_page_two_a_comparison_three_gpus_of_a_model_a_fleet():
    cuda, vulkan = loaded(H200 / "cuda-0.1.0.json"), loaded(H200 / "vulkan-0.1.0.json")
    assert html.page_kind([cuda]) == "run"
    assert html.page_kind([vulkan, cuda]) == "comparison"                 # one GPU through two backends
    assert html.page_kind([("n0", node(0, gpus=2))]) == "comparison"      # two GPUs of a model: too few to judge
    assert html.page_kind([(f"n{h}", node(h, gpus=1, backends=(CUDA,))) for h in range(3)]) == "fleet"
    assert html.page_kind([("empty", {**CUDA, "runs": []})]) == "run"


# -- a run -----------------------------------------------------------------------------------

def test_the_run_page_shows_the_gpu_its_spec_its_rows_and_its_charts():
    text = cuda_page()
    page = Page(text)
    assert page.problems == [] and len(page.ids) == len(set(page.ids))
    words = page.words
    assert "<title>peakbench: NVIDIA H200, cuda</title>" in text
    for fact in ("88d608e1-16e4-a406-85cf-40a90bb1814f", "NVIDIA 580.159.04", "NVIDIA H200 SXM, boost 1980 MHz",
                 "2026-11-30 00:35:11 UTC", "not recorded (the file predates the options field)"):
        assert fact in words
    row = re.search(r"<tr class=\"ok\"><td class=\"test\">compute\.fp32</td>(.*?)</tr>", text, re.S).group(1)
    assert "66.2" in row and "66.9" in row and "98.9%" in row and "width:98.9%" in row
    assert 'class="by by-silicon">silicon<' in row and "99% of the per-clock peak at 1980 MHz" in row
    assert "matrix.fp16.fp32" in words and "clock" in words                 # its verdict, judged as explain does
    assert [c for c in ("vector ALU", "matrix units", "memory bandwidth", "load latency", "launch") if c not in words] == []
    # The latency and bandwidth sweeps, drawn: lines and text, no raster.
    assert text.count('<svg id="') == 2 and "<image" not in text
    assert "L1 20.4 ns" in words and "DRAM 352 ns" in words and "L2 14.4 TB/s" in words
    assert len(re.findall(r"<path d=\"M ", text)) > 30


def test_unsupported_rows_are_folded_under_their_family_with_their_categories():
    text = render(loaded(H200 / "vulkan-0.1.0.json"))
    folded = re.findall(r"<details><summary>(.*?)</summary>(.*?)</details>", text, re.S)
    summaries = [s for s, _ in folded]
    assert summaries == ["5 unsupported ([driver] 1, [api] 4)", "6 unsupported ([api] 3, [driver] 3)",
                         "2 unsupported ([hardware] 2)"]
    inside = " ".join(body for _, body in folded)
    outside = re.sub(r"<details>.*?</details>", "", text, flags=re.S)
    for test in ("compute.bf16", "matrix.tf32.fp32", "latency.l0"):
        assert f">{test}<" in inside and f">{test}<" not in outside
    assert "[driver] NVIDIA 580.159.04 does not support shaderBFloat16" in inside


def test_hostile_strings_stay_text(tmp_path):
    doc = copy.deepcopy(CUDA)
    run = doc["runs"][0]
    run["device"]["name"] = "<script>alert(1)</script> H200 & co"
    run["device"]["driver"] = '"><img src=x onerror=alert(2)>'
    fp32 = next(r for r in run["results"] if r["test"] == "compute.fp32")
    fp32.update(status="failed", value=None, stats=None, samples=None, reason="</td></tr></table><b>broken")
    int4 = next(r for r in run["results"] if r["test"] == "compute.int4")
    int4["reason"] = "[api] </details><script>x</script>"
    name = "evil</script><script>alert(3)</script>.json"
    text = render((name, doc))
    page = Page(text)
    assert page.problems == []
    assert [tag for tag in page.tags if tag in ("script", "img")] == ["script"]   # the JSON block alone
    assert "<script>alert" not in text and "<img" not in text and "<b>broken" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; H200 &amp; co" in text
    assert page.block["sources"][0]["name"] == name                   # the block reads back whole
    assert "</script><script>" not in text.split('id="peakbench-source">')[1].split("</script>")[0]
    assert "failed </td></tr></table><b>broken" in page.words         # the reason, as text
    # The chart's title names the device too: matplotlib escapes it in the SVG.
    assert "&lt;script&gt;alert(1)&lt;/script&gt; H200 &amp; co (cuda" in text


@pytest.mark.parametrize("which", ["run", "comparison", "fleet"])
def test_nothing_on_the_page_leaves_it(which):
    if which == "run":
        text = cuda_page()
    elif which == "comparison":
        text = comparison_page()
    else:
        text = render(*planted_fleet().items())
    page = Page(text)
    assert page.problems == [] and len(page.ids) == len(set(page.ids)), page.problems[:3]
    assert external(page, text) == []
    assert "default-src 'none'" in text                                 # and the browser would refuse it anyway
    assert not re.search(r"(xlink:href|href|src)=\"https?:", text) and "<!DOCTYPE svg" not in text


COMMITTED = sorted((ROOT / "results").rglob("*.html"))


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_a_committed_page_stands_alone_and_names_the_files_it_was_made_from(path):
    text = path.read_text()
    page = Page(text)
    assert page.problems == [] and external(page, text) == []
    for source in page.block["sources"]:
        made_from = ROOT / source["name"]
        assert made_from.is_file() and hashlib.sha256(made_from.read_bytes()).hexdigest() == source["sha256"], \
            f"{path.relative_to(ROOT)} was made from another {source['name']}: make it again (results/README.md)"


def test_the_check_for_external_references_finds_them():
    text = ('<link rel="stylesheet" href="https://fonts.example/a.css"><img src="http://x/y.png">'
            '<style>@import "x.css"; b { background: url(http://x/z.png) }</style><svg><use href="#m1"/></svg>')
    assert len(external(Page(text), text)) == 5


def test_the_json_block_names_each_file_its_version_and_sha256(tmp_path, capsys):
    paths = [H200 / "vulkan-0.1.0.json", H200 / "cuda-0.1.0.json"]
    out = tmp_path / "page.html"
    code, _, err = cli_main(capsys, "report", *map(str, paths), "--html", str(out))
    assert code == 0 and err.strip() == f"html: {out} (comparison page)"
    block = Page(out.read_text()).block
    assert block["page"] == "comparison" and block["generator"].startswith("peakbench ")
    assert [(s["name"], s["peakbench_version"], s["sha256"]) for s in block["sources"]] == [
        (str(p), "0.1.0", hashlib.sha256(p.read_bytes()).hexdigest()) for p in paths]


# -- several runs ----------------------------------------------------------------------------

def test_the_comparison_page_has_the_words_the_legend_and_each_run():
    text = comparison_page()
    words = Page(text).words
    row = re.search(r"<td class=\"test\">matrix\.fp16\.fp32</td>(.*?)</tr>", text, re.S).group(1)
    assert "650.3" in row and "873.1" in row and "1.34x" in row and "w-faster" in row
    launch = re.search(r"<td class=\"test\">launch\.overhead</td>(.*?)</tr>", text, re.S).group(1)
    assert "0.22x" in launch and ">faster<" in launch                  # a time: lower is better
    assert "A = results/nvidia-h200/vulkan-0.1.0.json: vulkan 0, NVIDIA H200" in words
    assert "ns, us: lower is better" in words
    assert "matrix.fp16.fp32: B faster than A (1.34x)" in words        # why they differ
    assert text.count('<section class="run">') == 2 and text.count("<svg id=") == 4


def test_the_fleet_page_lists_the_flagged_gpu_first_with_its_reasons():
    docs = planted_fleet(backends=(CUDA, VULKAN))
    text = render(*docs.items())
    page = Page(text)
    assert page.problems == []
    slow = uuid_of(2, 1)[:8]
    heat_maps = re.findall(r"<table class=\"heat\">(.*?)</table>", text, re.S)
    assert len(heat_maps) == 2                                          # cuda, vulkan
    for table in heat_maps:
        rows = re.findall(r"<tr class=\"v-(\w+)\"><th>(\S+) <span class=\"mono\">(\w+)</span>", table)
        assert rows[0] == ("flagged", "node2", slow) and {v for v, _, _ in rows[1:]} == {"pass"}
        assert len(rows) == 8
        first = table.split('<tr class="v-flagged">')[1].split("</tr>")[0]
        assert first.count(" flag\"") == 2 and re.search(r'title="compute.fp32 59.\d TFLOPS is 10.0% under the median 66.2', first)
        assert ">90.0<" in first and "background:rgb(200, 40, 40)" in first
    assert "16 GPUs on 4 hosts in 2 groups: 14 pass, 2 flagged, 0 failed" in page.words
    flagged = re.search(r"<ol class=\"flagged\">(.*?)</ol>", text, re.S).group(1)
    assert flagged.count("act-watch") == 2 and "memory.read 4246 GB/s is 10.0% under the median 4718" in flagged


def test_a_heat_cell_is_coloured_by_how_much_worse_it_is():
    stats = {"median": 100.0, "unit": "GB/s"}
    assert html.heat_cell({"status": "ok", "value": 100.0}, stats, None, 5.0)["style"] == "background:rgb(255, 255, 255);color:#111"
    assert html.heat_cell({"status": "ok", "value": 90.0}, stats, None, 5.0)["style"].startswith("background:rgb(200, 40, 40)")
    latency = html.heat_cell({"status": "ok", "value": 110.0}, {"median": 100.0, "unit": "ns"}, None, 5.0)
    assert latency["text"] == "110.0" and latency["style"].startswith("background:rgb(200, 40, 40)")   # slower
    assert html.heat_cell({"status": "unsupported"}, stats, None, 5.0)["text"] == "n/a"
    assert html.heat_cell(None, stats, "missing: ...", 5.0)["flag"] == "missing: ..."


def test_inline_svg_drops_the_prolog_and_prefixes_every_id():
    svg = ('<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "x" "http://www.w3.org/x.dtd">\n<svg xmlns="http://www.w3.org/2000/svg" '
           'xmlns:xlink="http://www.w3.org/1999/xlink" width="1pt"><metadata><a>http://purl.org</a></metadata>'
           '<style>*{stroke-linejoin: round}</style><g id="patch_1" clip-path="url(#p1)"><use xlink:href="#m2"/></g></svg>')
    out = html.inline_svg(svg, "c-x-")
    assert out == ('<svg id="c-x-chart" class="chart" role="img" width="1pt"><style>#c-x-chart *{stroke-linejoin: round}'
                   '</style><g id="c-x-patch_1" clip-path="url(#c-x-p1)"><use xlink:href="#c-x-m2"/></g></svg>')


# -- the command line ------------------------------------------------------------------------

def test_html_on_a_run_writes_the_page_of_the_document_the_json_holds(capsys, fake, files, tmp_path):
    page = tmp_path / "run.html"
    code, _, err = run_fake(capsys, files, "--tests", "compute.fp32,compute.int4", "--html", str(page))
    assert code == 0, err
    assert f"html: {page}" in err.splitlines()
    text = page.read_text()
    parsed = Page(text)
    assert parsed.problems == [] and "<title>peakbench: Fake GPU 9000, vulkan</title>" in text
    (source,) = parsed.block["sources"]
    assert source["name"] == str(files["json"])
    assert source["sha256"] == hashlib.sha256(files["json"].read_bytes()).hexdigest()
    assert json.loads(files["json"].read_text())["options"]["html"] == str(page)
    assert f"--html {page}" in parsed.words                              # the command, from the options


def test_a_page_that_cannot_be_made_leaves_the_old_file_and_fails_the_run(capsys, fake, files, tmp_path, monkeypatch):
    page = tmp_path / "run.html"
    page.write_text("the page before")

    def broken(doc, name):
        raise RuntimeError("no template")
    monkeypatch.setattr(html, "run_report", broken)
    code, _, err = run_fake(capsys, files, "--tests", "compute.fp32", "--html", str(page))
    assert code == 1 and f"peakbench: error: --html {page}: RuntimeError: no template" in err
    assert page.read_text() == "the page before" and files["json"].exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.html")] == []


def test_without_the_extra_html_is_one_line_before_anything_runs(capsys, fake, files, monkeypatch):
    monkeypatch.setattr(html, "available", lambda: "--html needs jinja2 (pip install 'peakbench[report]')")
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32", "--html", "page.html")
    assert_usage_error(code, out, err, "--html needs jinja2", "peakbench[report]")
    assert fake.loaded == [] and not files["json"].exists()
    code, out, err = cli_main(capsys, "report", str(H200 / "cuda-0.1.0.json"), "--html", "page.html")
    assert_usage_error(code, out, err, "peakbench[report]")


@pytest.mark.parametrize("args, fragment", [
    ([], "the following arguments are required: --html"),
    (["--html", ""], "--html needs a file name"),
    (["--html", "/no/such/folder/p.html"], "folder /no/such/folder does not exist"),
    (["--html", "INPUT"], "an output may not replace an input"),
])
def test_report_usage_errors_are_one_line(capsys, tmp_path, args, fragment):
    source = tmp_path / "r.json"
    source.write_text((H200 / "cuda-0.1.0.json").read_text())
    code, out, err = cli_main(capsys, "report", str(source), *[str(source) if a == "INPUT" else a for a in args])
    assert_usage_error(code, out, err, fragment)


@pytest.mark.parametrize("content, fragment", [
    (None, "No such file or directory"), ("not json", "is not valid JSON"),
    ('{"schema": "other"}', "is not a peakbench result")])
def test_a_bad_input_file_is_one_line_naming_it(capsys, tmp_path, content, fragment):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    code, out, err = cli_main(capsys, "report", str(bad), "--html", str(tmp_path / "p.html"))
    assert_usage_error(code, out, err, str(bad), fragment)
    assert not (tmp_path / "p.html").exists()


def test_the_page_goes_to_standard_output_with_a_dash(capsys):
    code, out, err = cli_main(capsys, "report", str(H200 / "cuda-0.1.0.json"), "--html", "-")
    assert code == 0 and err == ""
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")


def test_the_template_ships_as_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "peakbench.report.templates" in config["tool"]["setuptools"]["packages"]
    data = config["tool"]["setuptools"]["package-data"]["peakbench.report.templates"]
    template = html.TEMPLATES / "report.html.j2"
    assert template.is_file() and any(template.relative_to(html.TEMPLATES).match(glob) for glob in data)
    assert "jinja2" in " ".join(config["project"]["optional-dependencies"]["report"])
