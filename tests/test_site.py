"""The documentation site in a real browser: the site is built strictly (a broken link, a
missing reference or an undocumented public name fails the build), served on 127.0.0.1, and
the models index, a model card and the API reference are opened in Debian's headless
Chromium (through its chromedriver): every image loads, the search index exists and holds the
models, the index's filter works as zoo.list_models does, and no internal link of any page is
broken. A screenshot of the models index is kept under build/test-artifacts/ (ignored)."""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

import zoo

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("HIGHWAY_ZOO_ARTIFACTS", ROOT / "build" / "test-artifacts"))
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
CARD = "highway_conv32_mnist"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert build.returncode == 0, build.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.log_message = lambda *args: None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "script", "link"):
                self.targets.append(attrs[key])


def test_no_page_has_a_broken_internal_link(site):
    broken, pages = [], sorted(site.rglob("*.html"))
    assert len(pages) > len(zoo.list_models())
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        for target in parser.targets:
            parts = urllib.parse.urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            link = urllib.parse.unquote(parts.path)
            base = site if link.startswith("/") else page.parent  # 404.html's are absolute
            path = (base / link.lstrip("/")).resolve()
            if path.is_dir():
                path = path / "index.html"
            if not path.exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, broken[:20]


def test_every_model_has_a_page_and_the_search_index_holds_them(site):
    for name in zoo.list_models():
        assert (site / "models" / name / "index.html").is_file(), name
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {doc["location"].split("#")[0] for doc in index["docs"]}
    assert {f"models/{n}/" for n in zoo.list_models()} <= locations
    assert "reference/api/layers/" in locations


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    assert CHROMIUM and CHROMEDRIVER, (
        "no Debian chromium and chromium-driver: `make test` and `make docs` install them "
        "(apt-get, as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1280,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _open(browser, url: str) -> None:
    browser.get(url)
    browser.execute_async_script(  # until every image has loaded or failed
        "const done = arguments[arguments.length - 1];"
        "Promise.all(Array.from(document.images).map(i => i.complete ? 1 :"
        " new Promise(r => { i.onload = i.onerror = r; }))).then(() => done(1));")
    broken = browser.execute_script(
        "return Array.from(document.images).filter(i => !i.naturalWidth).map(i => i.src);")
    assert not broken, f"{url}: images that did not load: {broken}"
    assert "404" not in browser.title


def test_models_index_in_the_browser_filters_as_list_models(browser, server):
    from selenium.webdriver.common.by import By

    _open(browser, f"{server}/models/")
    rows = browser.find_elements(By.CSS_SELECTOR, "article table tbody tr")
    assert len(rows) == len(zoo.list_models())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "models_index.png"))
    box = browser.find_element(By.ID, "model-filter")
    box.send_keys("*cifar*")
    shown = [r.find_element(By.TAG_NAME, "td").text for r in rows if r.is_displayed()]
    assert shown == zoo.list_models("*cifar*")
    browser.find_element(By.ID, "model-filter-pretrained").click()
    box.clear()
    box.send_keys("*")
    shown = [r.find_element(By.TAG_NAME, "td").text for r in rows if r.is_displayed()]
    assert shown == zoo.list_models(pretrained=True)


def test_a_model_card_and_the_api_reference_in_the_browser(browser, server):
    from selenium.webdriver.common.by import By

    _open(browser, f"{server}/models/{CARD}/")
    text = browser.find_element(By.TAG_NAME, "article").text
    assert f"{zoo.describe(CARD)['params']:,}" in text
    assert zoo.describe(CARD)["pretrained"]["sha256"] in text
    _open(browser, f"{server}/reference/api/layers/")
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "article h3")]
    assert any("HighwayDense" in h for h in headings), headings
    _open(browser, f"{server}/results/variants/")  # a results page with its figures
    assert browser.execute_script("return document.images.length") > 0
