"""The otpu-lens page in a real browser: Debian's Chromium driven headless by Playwright. Every view
loads recorded profiles (served by `otpu-lens open`'s server and as a standalone `html` file),
renders with no console error, a deep link selects the instruction it names (checked against the
profile's own columns), and a screenshot of each view is not blank (its pixels counted here).
In CI (OTPU_CI=1) a missing browser is a failure, not a skip."""
import base64
import os

import numpy as np
import pytest

from otpu_core.cli import run_app
from otpu_lens import cli, fileformat, headless, serve

pytestmark = pytest.mark.slow
T = "sim-small"
VIEWS = ("overview", "roofline", "timeline", "floor", "instrs", "sources", "compare")


def lens(*args) -> int:
    return run_app(cli.app, "otpu-lens", list(args))


COUNT_JS = """async (b64) => {
  const img = new Image();
  img.src = "data:image/png;base64," + b64;
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const g = c.getContext("2d");
  g.drawImage(img, 0, 0);
  const px = g.getImageData(0, 0, c.width, c.height).data, seen = new Map();
  for (let k = 0; k < px.length; k += 16) {
    const key = (px[k] << 16) | (px[k + 1] << 8) | px[k + 2];
    seen.set(key, (seen.get(key) || 0) + 1);
  }
  return [seen.size, Math.max(...seen.values()) / (px.length / 16), c.width, c.height];
}"""


def colours(ctx, png: bytes) -> tuple[int, float]:
    """Distinct colours and the largest single colour's share of a screenshot, decoded by the browser
    in a blank page of its own (the lens page plays no part)."""
    blank = ctx.new_page()
    try:
        blank.set_content("<!DOCTYPE html><title>pixels</title>")
        n, top, w, h = blank.evaluate(COUNT_JS, base64.b64encode(png).decode())
    finally:
        blank.close()
    assert w > 100 and h > 100
    return n, top


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = headless.browser_missing()
    if why:
        if os.environ.get("OTPU_CI"):
            pytest.fail(f"the browser tests need Chromium and Playwright in CI: {why}")
        pytest.skip(why)
    with headless.launch(tmp_path_factory.mktemp("chromium-profile")) as ctx:
        yield ctx


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    os.environ.setdefault("OTPU_RUN_DIR", str(tmp_path_factory.mktemp("run")))
    d = tmp_path_factory.mktemp("lens")
    sim, hw, page = d / "sim.otpuprof", d / "hw.otpuprof", d / "page.html"
    assert lens("record", "-o", str(sim), "--engine", "sim", "-t", T, "-w", "decoder-layer") == 0
    assert lens("record", "-o", str(hw), "--dev", "sim:browser", "-t", T, "-w", "decoder-layer") == 0
    assert lens("html", str(sim), str(hw), "-o", str(page)) == 0
    server = serve.serve([sim, hw])
    serve.in_thread(server)
    yield {"served": serve.url_of(server), "file": page.as_uri()}, fileformat.read(sim)["profiles"][0], d
    server.shutdown()
    server.server_close()


def _expected_mxu_instruction(p: dict) -> tuple[int, int]:
    """(cycle inside an MM, index of that MM) from the profile's own columns."""
    c = p["instrs"]["data"]
    rows = p["programs"][0]["rows"]
    start = c["d"] + c["rdy"] + c["wait"]
    mm = [i for i in range(c["pc"].size) if rows[c["pc"][i]][3] == 1 and c["dur"][i] > 4]
    i = mm[len(mm) // 2]
    return int(start[i] + c["dur"][i] // 2), i


def _open(ctx, url: str):
    page = ctx.new_page()
    problems = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.goto(url)
    headless.wait_until(page, "document.documentElement.dataset.lensReady === '1'", 60)
    page.wait_for_timeout(150)
    return page, problems


@pytest.mark.parametrize("mode", ["served", "file"])
@pytest.mark.parametrize("view", VIEWS)
def test_every_view_renders_selects_what_the_link_names_and_is_not_blank(browser, pages, mode, view):
    urls, p, out = pages
    t, want = _expected_mxu_instruction(p)
    page, problems = _open(browser, f"{urls[mode]}#view={view}&t={t}&pin=mxu")
    try:
        assert problems == []
        state = page.evaluate("({...window.lens.state})")
        assert state["view"] == view and state["t"] == t and state["i"] == want and state["pin"] == "mxu"
        assert page.get_attribute("#detail", "data-index") == str(want)
        assert page.evaluate(f"document.getElementById('view-{view}').classList.contains('on')")
        assert page.evaluate("window.lens.app.profiles.length") == 2
        if view == "instrs":
            assert page.get_attribute(".vt-row.sel", "data-index") == str(want)
        png = page.screenshot(path=str(out / f"{mode}-{view}.png"))
        n, top = colours(browser, png)
        assert n >= 12 and top < 0.9, (n, top)
    finally:
        page.close()


def test_links_to_an_instruction_a_source_line_and_a_profile(browser, pages):
    urls, p, _ = pages
    page, problems = _open(browser, urls["served"] + "#view=instrs&i=7")
    try:
        assert page.evaluate("window.lens.state.i") == 7 and page.get_attribute(".vt-row.sel", "data-index") == "7"
        src = max(p["source_table"], key=lambda r: r["busy"])["src"]
        page.evaluate(f"location.hash = '#view=sources&src={src}'")
        headless.wait_until(page, f"window.lens.state.src === {src}")
        first = page.evaluate("window.lens.state.i")
        rows = p["programs"][0]["rows"]
        assert rows[int(p["instrs"]["data"]["pc"][first])][4] == src          # the first instruction of that line
        assert page.get_attribute("#src-table tr.sel", "data-key") == str(src)
        page.evaluate("location.hash = '#view=overview&profile=1'")
        headless.wait_until(page, "window.lens.state.profile === 1")
        assert "[hw]" in page.inner_text("#profile-select option:checked")
        assert problems == []
    finally:
        page.close()


def test_timeline_click_selects_and_floorplan_steps(browser, pages):
    urls, p, _ = pages
    t, want = _expected_mxu_instruction(p)
    page, problems = _open(browser, f"{urls['served']}#view=timeline&t={t}&pin=mxu")
    try:
        box = page.locator("#tl-canvas").bounding_box()
        # the cursor cycle sits in the middle of the plot; the MXU lane is the second row
        x = page.evaluate(f"window.lens.app.timeline.xOf({t})")
        y = page.evaluate("window.lens.app.timeline.layout.rows[1].y + 12")
        page.evaluate("window.lens.app.state.i = -1")
        page.mouse.click(box["x"] + x, box["y"] + y)
        assert page.evaluate("window.lens.state.i") == want
        page.evaluate("location.hash = '#view=floor&t=0'")
        headless.wait_until(page, "window.lens.state.view === 'floor'")
        page.keyboard.press("ArrowRight")
        after = page.evaluate("window.lens.state.t")
        assert after > 0 and page.get_attribute("#fp-svg rect[data-block='dma']", "data-state") in (
            "busy", "streaming", "dram", "dep", "queued", "idle")
        assert problems == []
    finally:
        page.close()


STRIP_PIXELS_JS = """(label) => {
  const tl = window.lens.app.timeline, row = tl.layout.rows.find(r => r.label === label);
  const c = document.getElementById("tl-canvas"), dpr = window.devicePixelRatio || 1;
  const x0 = Math.round(tl.xOf(0) * dpr), x1 = Math.round(tl.xOf(tl.m.p.cycles) * dpr);
  const px = c.getContext("2d").getImageData(x0, Math.round(row.y * dpr), x1 - x0, Math.round(row.h * dpr)).data;
  let n = 0;
  for (let k = 0; k < px.length; k += 4) if (px[k] === 0xd4 && px[k + 1] === 0xa0 && px[k + 2] === 0) n++;
  return [n, row.y + row.h / 2];
}"""


def _check_fifo_strip(page, p: dict) -> None:
    """The MXU FIFO strip is drawn where the windows say the FIFO ran empty, and hovering names it."""
    page.evaluate("window.lens.app.timeline.reset(); window.lens.app.timeline.draw()")     # the whole run
    n, y = page.evaluate(STRIP_PIXELS_JS, "MXU FIFO")
    w = p["windows"][0]
    assert (n > 0) == bool(w["ms"].sum() > 0), (n, int(w["ms"].sum()))
    k = int(np.argmax(w["ms"]))
    t = int(w["cycle"][k] - w["n"][k] // 2)
    box = page.locator("#tl-canvas").bounding_box()
    page.mouse.move(box["x"] + page.evaluate(f"window.lens.app.timeline.xOf({t})"), box["y"] + y)
    tip = page.inner_text("#tl-tip")
    assert "MXU FIFO: empty while streaming" in tip and "level not in the records" in tip


def test_the_timeline_draws_the_mxu_fifo_strip(browser, pages):
    urls, p, _ = pages
    page, problems = _open(browser, urls["served"] + "#view=timeline")
    try:
        assert p["windows"][0]["ms"].sum() > 0
        _check_fifo_strip(page, p)
        assert problems == []
    finally:
        page.close()


def test_a_decode_token_of_the_shipped_model_loads_in_every_view(browser, tmp_path):
    prof, html = tmp_path / "model.otpuprof", tmp_path / "model.html"
    assert lens("record", "-o", str(prof), "--engine", "sim", "--tokens", "1", "--model", "qwen3-pydoc") == 0
    assert lens("html", str(prof), "-o", str(html)) == 0
    p = fileformat.read(prof)["profiles"][0]
    for view in VIEWS[:-1]:
        page, problems = _open(browser, f"{html.as_uri()}#view={view}&i=5")
        try:
            assert problems == []
            assert page.evaluate("window.lens.app.profiles[0].p.name") == p["name"]
            assert page.evaluate("window.lens.state.i") == 5
            if view == "timeline":
                _check_fifo_strip(page, p)
            n, top = colours(browser, page.screenshot())
            assert n >= 12 and top < 0.9, (view, n, top)
        finally:
            page.close()
